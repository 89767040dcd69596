package launch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/sdk"
)

// EnvProgress tells rank 0 of a local launch that the launcher's stderr is a
// terminal, so that it may draw a progress line there (its own stderr is a
// pipe to the launcher).
var EnvProgress = env.ProgressTTY.Name

// EnvFatalReport tells the ranks of a local launch to report an error that
// may keep them from exiting (ReportFatal), so that the launcher can end
// the launch with it instead of waiting for them.
var EnvFatalReport = env.FatalReport.Name

// fatalPrefix starts a report's line on a rank's stderr.
const fatalPrefix = "flagcx: fatal: "

// ReportFatal tells the local launcher that started this process, if one
// did, that this rank gave up for good with err: a plugin call that never
// returned, say, whose thread may keep the process from exiting. The
// launcher then treats the rank as failed with err (its message names the
// rank and the call), stops the other ranks and, after GracePeriod, kills
// whatever is left, this rank included. The report is one line on stderr,
// which the launcher does not pass on.
func ReportFatal(lookup func(string) (string, bool), stderr io.Writer, err error) {
	if on, _ := env.FatalReport.Get(lookup); !on || err == nil {
		return
	}
	fmt.Fprintf(stderr, "%s%s\n", fatalPrefix, strings.Join(strings.Fields(err.Error()), " "))
}

// Timings of a local launch after the first rank fails: the others get
// GracePeriod to fail on their own (they normally do, as their peer is
// gone), then they are killed, and after KillWait more the launcher returns
// whatever state they are in.
var (
	GracePeriod = 3 * time.Second
	KillWait    = 5 * time.Second
)

// RankError reports how one rank of a local launch ended.
type RankError struct {
	Rank int
	// ExitCode is the exit status, or -1 when a signal ended the rank.
	ExitCode int
	Signal   os.Signal
	// Killed is true when the launcher killed the rank after another failed.
	Killed bool
	Err    error // a failure to start or wait for the process
	// Fatal is the error the rank reported before it ended (ReportFatal).
	Fatal string
	// Abandoned says how a KeepGoing launch found the rank when it killed
	// it because the others had exited ("stopped and killed after the
	// survivors finished"): the rank itself never failed.
	Abandoned string
	// Crash is set when a fatal signal killed the rank (the Go runtime's
	// report of it kept off stderr); ExitCode is then 2, as the runtime
	// exits after its report (GOTRACEBACK=crash: Signal, SIGABRT).
	Crash *Crash
}

func (e *RankError) Error() string {
	switch {
	case e.Fatal != "" && strings.HasPrefix(e.Fatal, fmt.Sprintf("rank %d:", e.Rank)):
		return e.Fatal
	case e.Fatal != "":
		return fmt.Sprintf("rank %d: %s", e.Rank, e.Fatal)
	case e.Abandoned != "":
		return fmt.Sprintf("rank %d was %s", e.Rank, e.Abandoned)
	case e.Err != nil:
		return fmt.Sprintf("rank %d: %v", e.Rank, e.Err)
	case e.Crash != nil:
		return fmt.Sprintf("rank %d %v", e.Rank, e.Crash)
	case e.Signal != nil:
		if n, ok := e.Signal.(syscall.Signal); ok {
			return fmt.Sprintf("rank %d was killed by signal %d (%v)", e.Rank, int(n), e.Signal)
		}
		return fmt.Sprintf("rank %d was killed by signal %v", e.Rank, e.Signal)
	}
	return fmt.Sprintf("rank %d exited with status %d", e.Rank, e.ExitCode)
}

func (e *RankError) short() string {
	switch {
	case e.Fatal != "":
		return "reported a fatal error"
	case e.Abandoned != "":
		return e.Abandoned
	case e.Err != nil:
		return "failed"
	case e.Crash != nil:
		return e.Crash.short()
	case e.Signal != nil:
		return e.Signal.String()
	}
	return "status " + strconv.Itoa(e.ExitCode)
}

// Local runs np ranks of this program on this machine: it makes a unique id
// (hosting its rendezvous in this process, which therefore waits for the
// ranks), and starts np copies of os.Executable() with arguments argv (the
// arguments after the program name) and environment env (usually
// os.Environ()), minus every launcher variable an outer launcher set, plus
// FLAGCX_UNIQUE_ID, FLAGCX_RANK, FLAGCX_NRANKS, FLAGCX_LOCAL_RANK,
// FLAGCX_LOCAL_SIZE and FLAGCX_FATAL_REPORT, and a call record on
// descriptor loader.CallRecordFD (which plugin call a crash was in).
//
// Rank 0's stdout goes to stdout (the other ranks' to nowhere); every rank's
// stderr goes to stderr with "rank N: " before each line, but for the Go
// runtime's report of a fatal signal (a plugin that crashed), which goes to
// a file that the rank's error names (RankError.Crash). SIGINT and SIGTERM
// are passed on to the ranks. When a rank fails (exits with an error, or
// reports a fatal one with ReportFatal before it may hang), the others get
// GracePeriod to end, then every rank left is killed; Local returns a
// *RankError naming the first rank that failed and how (a reported error
// first: it is the cause), wrapped with the others that failed, or nil when
// every rank exited with status 0.
//
// Before starting any rank, Local refuses more ranks than this host can
// hold (processes and threads, shared memory, memory), naming the limit.
func Local(np int, argv []string, env []string, stdout, stderr io.Writer, opts ...LocalOption) error {
	if np < 1 {
		return fmt.Errorf("%w: --np %d: need at least one rank", sdk.ErrInvalidArgument, np)
	}
	o := localOptions{hostCapacity: readHostCapacity()}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkCapacity(np, o.hostCapacity); err != nil {
		return err
	}
	exe, err := executable()
	if err != nil {
		return fmt.Errorf("%w: cannot find this program to start its ranks: %w", sdk.ErrSystemError, err)
	}
	id, err := core.GetUniqueID()
	if err != nil {
		return fmt.Errorf("local launcher: %w", err)
	}
	err = runLocal(exe, np, argv, env, id.String(), stdout, stderr, o.keepGoing)
	if err != nil {
		// A rank killed before its peers mapped its shared memory (or
		// killed by us while waiting for such a rank) cannot remove its
		// segment; once the ranks are gone, nobody else will.
		if sc, cerr := shm.ShmConfigFromEnv(); cerr == nil {
			shm.CleanStaleShm(sc)
		}
	}
	return err
}

// A LocalOption tells Local more about its ranks.
type LocalOption func(*localOptions)

type localOptions struct {
	hostCapacity
	keepGoing bool // KeepGoing
}

// RankBytes is the memory each rank's command allocates (a benchmark's
// buffers, say), which Local adds to what a rank costs anyway when it
// checks that the ranks fit in this host's memory.
func RankBytes(n int64) LocalOption {
	return func(o *localOptions) { o.rankBytes = max(n, 0) }
}

// KeepGoing is for ranks that go on without a rank that failed (they
// shrink their communicator, core.Comm.Shrink): a failed rank does not
// make Local stop the others (a fatal report, ReportFatal, and a signal
// still do), and every rank's stdout goes to stdout, since any survivor
// may become rank 0. Local still returns the failures once every rank
// has exited; a rank that cannot exit once the others have (stopped, or
// left out by the survivors) is killed and counts as one (watchLeft).
func KeepGoing() LocalOption {
	return func(o *localOptions) { o.keepGoing = true }
}

// executable is os.Executable, replaced by tests that must start nothing.
var executable = os.Executable

// runLocal is Local once the unique id exists.
func runLocal(exe string, np int, argv, env []string, id string, stdout, stderr io.Writer, keepGoing bool) error {
	base := stripLauncherEnv(env)
	if isTerminal(stderr) {
		base = append(base, EnvProgress+"=1")
	}
	base = append(base, EnvFatalReport+"=1")
	reports := make(chan rankReport, np)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	l := &localRun{procs: make([]*exec.Cmd, np), done: make(chan rankExit, np), keepGoing: keepGoing}
	if err := l.startRanks(exe, argv, base, id, stdout, stderr, reports); err != nil {
		return err
	}
	return l.supervise(reports, sigs)
}

// startRanks starts every rank with environment base plus its place, rank
// 0's stdout on stdout, every rank's stderr prefixed on stderr (a fatal
// report goes to reports). When a rank cannot start, the ones started are
// killed and collected, and the error names it.
func (l *localRun) startRanks(exe string, argv, base []string, id string, stdout, stderr io.Writer, reports chan<- rankReport) error {
	np := len(l.procs)
	var mu sync.Mutex // one line at a time on stderr
	prefixers := make([]*prefixWriter, np)
	for r := 0; r < np; r++ {
		cmd := exec.Command(exe, argv...)
		cmd.Env = append(append([]string(nil), base...),
			EnvUniqueID+"="+id,
			EnvRank+"="+strconv.Itoa(r),
			EnvNRanks+"="+strconv.Itoa(np),
			EnvLocalRank+"="+strconv.Itoa(r),
			EnvLocalSize+"="+strconv.Itoa(np),
		)
		switch {
		case l.keepGoing:
			cmd.Stdout = &lockedWriter{w: stdout, mu: &mu}
		case r == 0:
			cmd.Stdout = stdout
		}
		prefixers[r] = &prefixWriter{w: stderr, mu: &mu, prefix: []byte(fmt.Sprintf("rank %d: ", r)), fatal: func(msg string) {
			select {
			case reports <- rankReport{rank: r, msg: msg}:
			default: // a rank reports once; more are dropped rather than block its output
			}
		}}
		// cmd.Stderr: through a crashWatch, which keeps a crash report off it.
		crashes := watchCrashes(cmd, r, prefixers[r])
		cmd.WaitDelay = time.Second // a grandchild holding the pipe does not hold us
		setProcAttr(cmd)
		if err := cmd.Start(); err != nil {
			crashes.close()
			l.killAll()
			l.waitStarted(r, KillWait)
			return &RankError{Rank: r, ExitCode: -1, Err: fmt.Errorf("could not start %s: %w", exe, err)}
		}
		l.procs[r] = cmd
		go func(r int, cmd *exec.Cmd) {
			err := cmd.Wait()
			crashes.Flush()
			l.done <- rankExit{rank: r, err: err, crash: crashes.result()}
		}(r, cmd)
	}
	return nil
}

// supervise waits for every rank to exit. The first failure (an exit with
// an error, a fatal report) or a signal, which it passes on, starts the
// GracePeriod; after it the ranks left are killed, and KillWait later
// supervise gives up on them. With KeepGoing a failed exit starts nothing,
// but the ranks left are watched once one has exited (watchLeft). It
// returns the failures, summarized.
func (l *localRun) supervise(reports <-chan rankReport, sigs <-chan os.Signal) error {
	np := len(l.procs)
	s := &supervision{localRun: l, exited: make([]bool, np), failed: map[int]*RankError{}, stopSeen: make([]int, np)}
	defer s.stopWatching()
	for remaining := np; remaining > 0; {
		select {
		case x := <-l.done:
			remaining--
			s.onExit(x)
		case rep := <-reports:
			s.onReport(rep)
		case sig := <-sigs:
			s.interrupted = sig
			l.signalAll(sig, s.exited)
			s.startGrace()
		case <-s.grace:
			s.grace = make(chan time.Time) // never again
			s.killed = true
			l.killRemaining(s.exited)
			s.kill = time.After(KillWait)
		case now := <-s.watchC():
			s.watchLeft(now)
		case <-s.kill:
			return fmt.Errorf("%w (ranks %s did not exit %v after being killed)", summarize(s.failures, s.interrupted), stuckRanks(s.exited), KillWait)
		}
	}
	if s.interrupted != nil || len(s.failures) > 0 {
		return summarize(s.failures, s.interrupted)
	}
	return nil
}

// supervision is what supervise knows of the ranks as they end.
type supervision struct {
	*localRun
	exited      []bool
	failures    []*RankError
	failed      map[int]*RankError // a rank's report and its exit make one failure
	interrupted os.Signal
	grace, kill <-chan time.Time
	killed      bool // the grace period ran out: the ranks left were killed

	// KeepGoing (watchLeft): the watch of the ranks left, started by the
	// first exit; when the first rank exited with status 0 (zero until
	// one did); how many watches in a row found each rank stopped.
	watch    *time.Ticker
	finished time.Time
	stopSeen []int
}

func (s *supervision) onExit(x rankExit) {
	s.exited[x.rank] = true
	if s.keepGoing && s.watch == nil {
		s.watch = time.NewTicker(WatchPeriod)
	}
	re := exitError(x)
	if re == nil && s.finished.IsZero() {
		s.finished = time.Now()
	}
	if f := s.failed[x.rank]; f != nil {
		if re != nil {
			f.ExitCode, f.Signal, f.Err = re.ExitCode, re.Signal, re.Err
		}
	} else if re != nil {
		re.Killed = s.killed
		s.failures = append(s.failures, re)
		s.failed[x.rank] = re
		if !s.keepGoing {
			s.startGrace()
		}
	}
}

func (s *supervision) onReport(rep rankReport) {
	f := s.failed[rep.rank]
	if f == nil {
		f = &RankError{Rank: rep.rank, ExitCode: -1}
		s.failures = append(s.failures, f)
		s.failed[rep.rank] = f
	}
	f.Fatal, f.Killed = rep.msg, false
	s.startGrace()
}

func (s *supervision) startGrace() {
	if s.grace == nil {
		s.grace = time.After(GracePeriod)
	}
}

// WatchPeriod is how often a KeepGoing launch looks at the ranks left once
// one has exited (watchLeft): ranks left that two looks in a row found
// stopped are killed at the first look that finds no other rank running.
var WatchPeriod = 100 * time.Millisecond

func (s *supervision) watchC() <-chan time.Time {
	if s.watch == nil {
		return nil
	}
	return s.watch.C
}

func (s *supervision) stopWatching() {
	if s.watch != nil {
		s.watch.Stop()
	}
}

// watchLeft ends a KeepGoing launch whose ranks left cannot end it. There
// an exit is not the end (the survivors of a lost rank go on without it),
// so no exit starts the grace period; but a rank that was stopped
// (SIGSTOP, a debugger) waits for a SIGCONT that nobody will send once
// its peers are gone: the survivors, which gave up on it after their
// deadline (FLAGCX_TIMEOUT), shrank and finished, or every other rank.
// So the ranks left are killed, and reported as the failure, once every
// one of them was found stopped twice in a row (a rank that a SIGCONT
// resumes does not count), or GracePeriod after the first rank exited
// with status 0, the survivors' run being over, whatever state they are
// in (they are stuck: a rank that the survivors left out has nobody to
// finish with).
func (s *supervision) watchLeft(now time.Time) {
	if s.kill != nil {
		return // already killed
	}
	allStopped := true
	for r, p := range s.procs {
		if s.exited[r] {
			continue
		}
		if procStopped(p.Process.Pid) {
			s.stopSeen[r]++
		} else {
			s.stopSeen[r] = 0
		}
		if s.stopSeen[r] < 2 {
			allStopped = false
		}
	}
	if allStopped || (!s.finished.IsZero() && now.Sub(s.finished) >= GracePeriod) {
		s.abandonLeft()
	}
}

// abandonLeft kills the ranks left (watchLeft), each a failure that says
// how it was found; KillWait bounds the wait for them to go.
func (s *supervision) abandonLeft() {
	after := "the other ranks exited"
	if !s.finished.IsZero() {
		after = "the survivors finished"
	}
	for r, p := range s.procs {
		if s.exited[r] {
			continue
		}
		how := "stuck"
		if s.stopSeen[r] > 0 {
			how = "stopped"
		}
		if s.failed[r] == nil {
			f := &RankError{Rank: r, ExitCode: -1, Abandoned: how + " and killed after " + after}
			s.failures = append(s.failures, f)
			s.failed[r] = f
		}
		_ = p.Process.Kill() // a stopped process dies of SIGKILL too
	}
	s.kill = time.After(KillWait)
}

// stuckRanks lists the ranks that have not exited, "2, 5".
func stuckRanks(exited []bool) string {
	var stuck []string
	for r, e := range exited {
		if !e {
			stuck = append(stuck, strconv.Itoa(r))
		}
	}
	return strings.Join(stuck, ", ")
}

type rankExit struct {
	rank  int
	err   error
	crash *Crash
}

// rankReport is a rank's ReportFatal line.
type rankReport struct {
	rank int
	msg  string
}

type localRun struct {
	procs     []*exec.Cmd
	done      chan rankExit
	keepGoing bool // KeepGoing
}

// lockedWriter writes to w under mu: the ranks' stdouts in one.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *localRun) killAll() {
	for _, p := range l.procs {
		if p != nil && p.Process != nil {
			_ = p.Process.Kill()
		}
	}
}

// waitStarted collects the ranks started before a start failure.
func (l *localRun) waitStarted(n int, limit time.Duration) {
	deadline := time.After(limit)
	for i := 0; i < n; i++ {
		select {
		case <-l.done:
		case <-deadline:
			return
		}
	}
}

func (l *localRun) signalAll(s os.Signal, exited []bool) {
	for r, p := range l.procs {
		if !exited[r] && p.Process != nil {
			_ = p.Process.Signal(s)
		}
	}
}

func (l *localRun) killRemaining(exited []bool) {
	for r, p := range l.procs {
		if !exited[r] && p.Process != nil {
			_ = p.Process.Kill()
		}
	}
}

func exitError(x rankExit) *RankError {
	if x.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(x.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &RankError{Rank: x.rank, ExitCode: -1, Signal: ws.Signal(), Crash: x.crash}
		}
		return &RankError{Rank: x.rank, ExitCode: ee.ExitCode(), Crash: x.crash}
	}
	return &RankError{Rank: x.rank, ExitCode: -1, Err: x.err}
}

// summarize names the first failure (the cause; the rest usually follow
// from it) and lists the others.
func summarize(failures []*RankError, interrupted os.Signal) error {
	var first *RankError
	for _, f := range failures {
		if f.Fatal != "" {
			first = f
			break
		}
	}
	var others []string
	for _, f := range failures {
		if f.Killed || f == first {
			continue
		}
		if first == nil {
			first = f
			continue
		}
		others = append(others, fmt.Sprintf("rank %d (%s)", f.Rank, f.short()))
	}
	var killed []string
	for _, f := range failures {
		if f.Killed {
			killed = append(killed, strconv.Itoa(f.Rank))
		}
	}
	sort.Strings(others)
	var extra []string
	if len(others) > 0 {
		extra = append(extra, "also failed: "+strings.Join(others, ", "))
	}
	if len(killed) > 0 {
		extra = append(extra, "killed after "+GracePeriod.String()+": ranks "+strings.Join(killed, ", "))
	}
	tail := ""
	if len(extra) > 0 {
		tail = " (" + strings.Join(extra, "; ") + ")"
	}
	if interrupted != nil {
		return &launchError{first: first, msg: fmt.Sprintf("interrupted (%v, passed on to every rank)", interrupted), signal: interrupted}
	}
	if first == nil {
		return nil
	}
	return &launchError{first: first, msg: first.Error() + tail}
}

// launchError is a local launch's failure: its message covers every rank;
// errors.As finds the first failing rank's *RankError.
type launchError struct {
	first  *RankError
	msg    string
	signal os.Signal // the signal that stopped the launch, if one did
}

func (e *launchError) Error() string { return e.msg }

// ExitStatus is what the launcher should exit with: 128 + the signal's
// number after SIGINT or SIGTERM (130, 143), as a shell reports a program
// that the signal ended, so scripts tell an interrupted run from a failed
// one; 1 otherwise.
func (e *launchError) ExitStatus() int {
	if s, ok := e.signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

func (e *launchError) Unwrap() error {
	if e.first == nil {
		return nil
	}
	return e.first
}

// stripLauncherEnv drops the variables by which an outer launcher (or an
// outer local launch) would give a child its rank.
func stripLauncherEnv(env []string) []string {
	drop := map[string]bool{}
	for _, v := range LauncherVars() {
		drop[v] = true
	}
	drop[EnvProgress] = true
	drop[EnvFatalReport] = true
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if drop[name] || strings.HasPrefix(name, "OMPI_COMM_WORLD_") || strings.HasPrefix(name, "PMIX_RANK") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// prefixWriter puts a prefix before every line. A segment that ends in a
// carriage return (a progress line being redrawn) passes through without
// one, so that it keeps redrawing in place.
type prefixWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix []byte
	buf    []byte
	// fatal receives a line that reports a fatal error (ReportFatal), which
	// is not passed on: the launcher's own error carries it.
	fatal func(msg string)
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexAny(p.buf, "\n\r")
		if i < 0 {
			break
		}
		var out []byte
		if p.buf[i] == '\n' {
			if p.report(p.buf[:i]) {
				p.buf = p.buf[i+1:]
				continue
			}
			out = append(append(append(out, p.prefix...), p.buf[:i]...), '\n')
		} else {
			out = append(out, p.buf[:i+1]...)
		}
		p.buf = p.buf[i+1:]
		if _, err := p.w.Write(out); err != nil {
			return len(b), nil // the launcher's stderr is gone; keep the rank running
		}
	}
	if len(p.buf) > 64<<10 { // a very long line: pass it on in pieces
		_, _ = p.w.Write(append(append([]byte(nil), p.prefix...), p.buf...))
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

// Flush writes a last line that had no newline.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 && !p.report(p.buf) {
		_, _ = p.w.Write(append(append(append([]byte(nil), p.prefix...), p.buf...), '\n'))
	}
	p.buf = nil
}

// report hands a ReportFatal line to fatal; false for any other line.
func (p *prefixWriter) report(line []byte) bool {
	if p.fatal == nil || !bytes.HasPrefix(line, []byte(fatalPrefix)) {
		return false
	}
	p.fatal(string(line[len(fatalPrefix):]))
	return true
}
