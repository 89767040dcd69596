package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Options configure a conformance run.
type Options struct {
	Dir          string   // plugin dir ("" = loader.DefaultDir())
	Plugins      []string // plugin names to test; empty: every plugin in Dir
	NP           []int    // communicator sizes (default 2, 3, 4)
	Emulated     bool     // load the vendorsim runtimes
	VendorsimDir string   // "" = FLAGCX_VENDORSIM_DIR, else <Dir>/../vendorsim
	Quick        bool     // the smaller matrix (CI)
	Seed         uint64   // base seed of the inputs
	// CaseTimeout is the deadline of one case on all ranks (default 60 s);
	// StartTimeout of starting the workers, opening the plugin and joining
	// the communicator (default 2 x FLAGCX_TIMEOUT + 60 s: 120 s at its
	// default; see withDefaults). A rank past its deadline is a hang.
	CaseTimeout, StartTimeout time.Duration
	// Filter keeps only the cases whose id matches (plugin.load always runs).
	Filter *regexp.Regexp
	// Worker is the command line of a worker process: a program that calls
	// ServeWorker when IsWorker (flagcx: conformance --worker).
	Worker []string
	// Progress receives a line per plugin and communicator size (and per
	// case with Verbose); nil: silent.
	Progress io.Writer
	Verbose  bool
	// WorkerStderr, when set, also receives the workers' stderr.
	WorkerStderr io.Writer
}

// startSlack is what starting a rank takes besides its waits: the worker
// process, go-plugin's handshake, loading the plugin, on a busy machine
// (the CI's two cores start five workers); FLAGCX_TIMEOUT bounds none of it.
const startSlack = time.Minute

// withDefaults is o with its unset fields set (lookup reads the
// environment; nil: the process's), or why it cannot run.
//
// StartTimeout follows FLAGCX_TIMEOUT, the deadline of every wait without
// progress and of every plugin call that can block: twice it (a phase's
// own wait, behind the slowest rank's start, which a rendezvous waits for)
// and startSlack; 120 s at its default (tcp.DefaultTimeout), as the fixed
// deadline was. A fixed one cut a run that allows slow starts short and
// kept one that allows little waiting for a hung start.
func (o Options) withDefaults(lookup env.Lookup) (Options, error) {
	if o.Dir == "" {
		o.Dir = loader.DefaultDir()
	}
	if len(o.NP) == 0 {
		o.NP = []int{2, 3, 4}
	}
	for _, n := range o.NP {
		if n < 2 || n > 64 {
			return o, fmt.Errorf("%w: --np %d: communicator sizes must be 2..64", sdk.ErrInvalidArgument, n)
		}
	}
	if o.CaseTimeout <= 0 {
		o.CaseTimeout = 60 * time.Second
	}
	if o.StartTimeout <= 0 {
		t, set, err := env.Timeout.Find(lookup)
		if err != nil {
			return o, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		if !set {
			t = tcp.DefaultTimeout
		}
		o.StartTimeout = 2*t + startSlack
	}
	if len(o.Worker) == 0 {
		return o, errors.New("suite.Options.Worker is empty: the command that starts a worker process is needed")
	}
	if o.VendorsimDir == "" && !env.VendorsimDir.IsSet(lookup) {
		o.VendorsimDir = filepath.Join(o.Dir, "..", "vendorsim")
	}
	return o, nil
}

// Status of a case.
type Status string

const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Result is the outcome of one case on one plugin.
type Result struct {
	Plugin      string  `json:"plugin"`
	ID          string  `json:"id"`
	Level       Level   `json:"level"`
	Area        string  `json:"area"`
	Description string  `json:"description"`
	Ranks       int     `json:"ranks"`
	Status      Status  `json:"status"`
	Reason      string  `json:"reason,omitempty"`
	Detail      string  `json:"detail,omitempty"` // what the case measured, per rank, whatever the verdict (comm.leak)
	Seconds     float64 `json:"seconds"`
	Emulated    bool    `json:"emulated"`
}

// PluginReport is everything about one plugin.
type PluginReport struct {
	Info    PluginInfo `json:"plugin"`
	Problem string     `json:"problem,omitempty"` // why it could not be tested at all
	Seconds float64    `json:"seconds"`
	Results []Result   `json:"-"`
}

// Report is a whole run.
type Report struct {
	Version  string    `json:"version"`
	Emulated bool      `json:"emulated"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Dir      string    `json:"pluginDir"`
	NP       []int     `json:"np"`
	Quick    bool      `json:"quick"`
	Seed     uint64    `json:"seed"`
	// Interrupted: the run was stopped before the end; the results are partial.
	Interrupted bool            `json:"interrupted,omitempty"`
	Plugins     []*PluginReport `json:"plugins"`
}

// Run discovers the plugins and runs the matrix on each. The error is only
// about the run itself (no plugin dir, unknown --plugin name); failing cases
// are in the report (see Report.Failures).
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults(nil)
	if err != nil {
		return nil, err
	}
	cands, dirErr := loader.Discover(o.Dir)
	if len(cands) == 0 {
		if dirErr != nil {
			return nil, dirErr
		}
		return nil, fmt.Errorf("no plugins (libflagcx-<name>.so) in %s: build them with make, or point --plugin-dir at them", o.Dir)
	}
	if len(o.Plugins) > 0 {
		byName := map[string]loader.Candidate{}
		var names []string
		for _, c := range cands {
			byName[c.Name] = c
			names = append(names, c.Name)
		}
		var chosen []loader.Candidate
		for _, name := range o.Plugins {
			c, ok := byName[name]
			if !ok {
				return nil, fmt.Errorf("%w: no plugin %q in %s (found: %s)", sdk.ErrInvalidArgument, name, o.Dir, strings.Join(names, ", "))
			}
			chosen = append(chosen, c)
		}
		cands = chosen
	}
	rep := &Report{Version: core.Version, Emulated: o.Emulated, Started: time.Now(), Dir: o.Dir,
		NP: o.NP, Quick: o.Quick, Seed: o.Seed}
	var cases []Case
	for _, c := range Matrix(MatrixOptions{NP: o.NP, Quick: o.Quick, Seed: o.Seed}) {
		if c.ID == "plugin.load" || o.Filter == nil || o.Filter.MatchString(c.ID) {
			cases = append(cases, c)
		}
	}
	if err := checkKinds(cases); err != nil {
		return nil, err
	}
	for _, cand := range cands {
		if ctx.Err() != nil {
			break
		}
		r := &pluginRun{o: o, cand: cand, rep: &PluginReport{Info: PluginInfo{Name: cand.Name, Path: cand.Path}}}
		r.run(ctx, cases)
		rep.Plugins = append(rep.Plugins, r.rep)
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	rep.Interrupted = ctx.Err() != nil
	return rep, ctx.Err()
}

// pluginRun runs the matrix on one plugin.
type pluginRun struct {
	o     Options
	cand  loader.Candidate
	rep   *PluginReport
	info  PluginInfo
	trips map[string][]string // area -> ids of cases that crashed or hung
	// unsupported remembers operations that returned flagcxNotSupported
	// (kind, collective, type, op -> the case and its reason), so the same
	// operation is not run (and the workers restarted) again.
	unsupported map[string][2]string
}

func unsupportedKey(s Spec) string {
	return fmt.Sprintf("%s/%d/%d/%d", s.Kind, s.Coll, s.Type, s.Op)
}

func (r *pluginRun) progress(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format+"\n", args...)
	}
}

func (r *pluginRun) label() string {
	if r.info.Emulated {
		return r.cand.Name + " (emulated)"
	}
	return r.cand.Name
}

func (r *pluginRun) record(c Case, st Status, reason string, took time.Duration) {
	r.recordDetail(c, st, reason, "", took)
}

// recordDetail is record with what the case measured (Result.Detail).
func (r *pluginRun) recordDetail(c Case, st Status, reason, detail string, took time.Duration) {
	res := Result{Plugin: r.cand.Name, ID: c.ID, Level: c.Level, Area: c.Area, Description: c.Description,
		Ranks: c.NRanks, Status: st, Reason: reason, Detail: detail, Seconds: took.Seconds(), Emulated: r.info.Emulated}
	r.rep.Results = append(r.rep.Results, res)
	if r.o.Verbose && r.o.Progress != nil {
		line := fmt.Sprintf("  %-7s %-6s %s", strings.ToUpper(string(st)), c.Level, c.ID)
		if reason != "" {
			line += ": " + reason
		}
		if detail != "" {
			line += "\n          measured: " + detail
		}
		r.progress("%s", line)
	}
}

func (r *pluginRun) run(ctx context.Context, cases []Case) {
	start := time.Now()
	defer func() { r.rep.Seconds = time.Since(start).Seconds() }()
	r.trips = map[string][]string{}
	r.unsupported = map[string][2]string{}
	groups := map[int][]Case{}
	for _, c := range cases {
		groups[c.NRanks] = append(groups[c.NRanks], c)
	}

	// The first worker opens the plugin: plugin.load, the declarations,
	// then the device-runtime cases on the same worker.
	t0 := time.Now()
	dev := &session{r: r, n: 1}
	info, fail := dev.open(ctx)
	load := groups[0][0]
	if fail != "" {
		if info.Name != "" { // what init reported (libraries and why they did not load)
			r.info, r.rep.Info = info, info
		}
		r.record(load, Failed, fail, time.Since(t0))
		r.rep.Problem = fail
		r.progress("%s: %s: %s", r.cand.Name, load.ID, fail)
		dev.kill()
		return
	}
	r.info, r.rep.Info = info, info
	r.record(load, Passed, "", time.Since(t0))
	for _, c := range groups[0][1:] {
		r.declared(c)
	}
	r.session(ctx, dev, groups[1], 1)

	sizes := make([]int, 0, len(groups))
	for n := range groups {
		if n >= 2 {
			sizes = append(sizes, n)
		}
	}
	sort.Ints(sizes)
	for _, n := range sizes {
		if ctx.Err() != nil {
			return
		}
		if n > r.info.Devices {
			for _, c := range groups[n] {
				r.record(c, Skipped, fmt.Sprintf("not run: needs %d devices (one per rank), the plugin reports %d", n, r.info.Devices), 0)
			}
			r.progress("%s, %d ranks: skipped, the plugin reports %d devices", r.label(), n, r.info.Devices)
			continue
		}
		r.session(ctx, &session{r: r, n: n}, groups[n], n)
	}
}

// declared evaluates the plugin.datatype.* and plugin.redop.* cases.
func (r *pluginRun) declared(c Case) {
	if why := r.skipReason(c); why != "" {
		r.record(c, Skipped, why, 0)
		return
	}
	has, what := false, ""
	switch c.Spec.Kind {
	case KindDataType:
		has, what = contains(r.info.DataTypes, c.Spec.Type.String()), "dataTypeMask lacks "+c.Spec.Type.String()
	case KindRedOp:
		has, what = contains(r.info.RedOps, c.Spec.Op.String()), "redOpMask lacks "+c.Spec.Op.String()
	}
	switch {
	case has:
		r.record(c, Passed, "", 0)
	case c.Level == MUST:
		r.record(c, Failed, "not supported, but required (MUST): "+what, 0)
	default:
		r.record(c, Skipped, "not supported: "+what, 0)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// skipReason says why a case is not run on this plugin ("" = run it).
func (r *pluginRun) skipReason(c Case) string {
	in := r.info
	switch {
	case c.NeedsCCL && !in.HasCCL:
		return "not applicable: the plugin declares no collective library (caps)"
	case c.NRanks >= 1 && !in.HasDevice:
		return "not applicable: the plugin declares no device runtime (caps)"
	case c.UsesType && !contains(in.DataTypes, c.Spec.Type.String()):
		return "not supported: dataTypeMask lacks " + c.Spec.Type.String()
	case c.UsesOp && !contains(in.RedOps, c.Spec.Op.String()):
		return "not supported: redOpMask lacks " + c.Spec.Op.String()
	}
	for _, e := range c.Needs {
		if set, known := in.Entries[e]; known && !set {
			return "not supported: OPTIONAL entry " + e + " is NULL"
		}
	}
	return ""
}

// session runs the cases of one communicator size (n == 1: the device
// runtime on one worker, no communicator), restarting the workers after
// any case that left them in doubt.
func (r *pluginRun) session(ctx context.Context, s *session, cases []Case, n int) {
	start := time.Now()
	counts := map[Status]int{}
	defer func() {
		s.close(ctx)
		if len(cases) > 0 {
			what := fmt.Sprintf("%d ranks", n)
			if n == 1 {
				what = "device runtime"
			}
			r.progress("%s, %s: %d passed, %d failed, %d skipped (%.1f s)", r.label(), what,
				counts[Passed], counts[Failed], counts[Skipped], time.Since(start).Seconds())
		}
	}()
	restartFailures := 0
	for _, c := range cases {
		if ctx.Err() != nil {
			return
		}
		record := func(st Status, reason string, took time.Duration) {
			counts[st]++
			r.record(c, st, reason, took)
		}
		recordDetail := func(o caseOutcome, took time.Duration) {
			counts[o.st]++
			r.recordDetail(c, o.st, o.reason, o.detail, took)
		}
		if why := r.skipReason(c); why != "" {
			if c.Level == MUST && strings.HasPrefix(why, "not supported: OPTIONAL") {
				record(Failed, "not supported, but required (MUST): "+why, 0)
			} else {
				record(Skipped, why, 0)
			}
			continue
		}
		if trips := r.trips[c.Area]; len(trips) >= 2 && c.Spec.Kind != KindCommDestroy {
			record(Failed, fmt.Sprintf("not run: %s crashed or hung twice on this plugin (%s), so its remaining cases are not run", c.Area, strings.Join(trips, ", ")), 0)
			continue
		}
		if prev, ok := r.unsupported[unsupportedKey(c.Spec)]; ok {
			why := fmt.Sprintf("not supported (as in %s): %s", prev[0], prev[1])
			switch {
			case c.Level == MUST:
				record(Failed, "not supported, but required (MUST): "+why, 0)
			case c.UsesType || c.UsesOp:
				record(Failed, "not supported, although the plugin declares the data type and op in its masks: "+why, 0)
			default:
				record(Skipped, why, 0)
			}
			continue
		}
		t0 := time.Now()
		if c.Spec.Kind == KindCommInit {
			// The join is the case: from fresh workers.
			if fail := s.start(ctx); fail != "" {
				record(Failed, fail, time.Since(t0))
				s.kill()
				continue
			}
			record(Passed, "", time.Since(t0))
			continue
		}
		if !s.ready() {
			if restartFailures >= 2 {
				record(Failed, "not run: the workers could not be restarted (see the failures before)", 0)
				continue
			}
			var fail string
			if s.running() {
				fail = s.join(ctx)
			} else {
				fail = s.start(ctx)
			}
			if fail != "" {
				restartFailures++
				record(Failed, "not run: starting the workers failed: "+fail, time.Since(t0))
				s.kill()
				continue
			}
			restartFailures = 0
		}
		o := s.runCase(ctx, c)
		recordDetail(o, time.Since(t0))
		if o.unsup != "" && c.Spec.Kind == KindColl {
			r.unsupported[unsupportedKey(c.Spec)] = [2]string{c.ID, o.unsup}
		}
		if o.tripped {
			r.trips[c.Area] = append(r.trips[c.Area], c.ID)
		}
		if o.broken {
			s.kill()
		}
	}
}

// ---- session: the workers of one communicator ------------------------------------------

type session struct {
	r       *pluginRun
	n       int // ranks; 1: the device-runtime session, without a communicator
	workers []*workerProc
	joined  bool
}

// running reports whether every worker process is up.
func (s *session) running() bool {
	if len(s.workers) != s.n {
		return false
	}
	for _, w := range s.workers {
		if w.exited() {
			return false
		}
	}
	return true
}

// ready reports whether the workers can run cases.
func (s *session) ready() bool { return s.joined && s.running() }

// kill ends every worker at once.
func (s *session) kill() {
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.kill() }()
	}
	wg.Wait()
	s.workers, s.joined = nil, false
}

// close lets the workers destroy their communicator and exit.
func (s *session) close(ctx context.Context) {
	if s.running() {
		s.callRanks(ctx, 10*time.Second, func(ctx context.Context, _ int, r *rankClient) (RankResult, error) { return r.Leave(ctx) })
	}
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.close() }()
	}
	wg.Wait()
	s.workers, s.joined = nil, false
}

// start launches fresh workers, opens the plugin and joins them.
func (s *session) start(ctx context.Context) string {
	if _, fail := s.open(ctx); fail != "" {
		return fail
	}
	return s.join(ctx)
}

// open launches fresh workers and opens the plugin in each. fail says what
// went wrong.
func (s *session) open(ctx context.Context) (PluginInfo, string) {
	o := s.r.o
	s.kill()
	ws := make([]*workerProc, s.n)
	errs := make([]error, s.n)
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[i], errs[i] = startWorker(o.Worker, i, o.StartTimeout, o.WorkerStderr)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, w := range ws {
				if w != nil {
					w.kill()
				}
			}
			return PluginInfo{}, fmt.Sprintf("crash: rank %d: %v", i, err)
		}
	}
	s.workers = ws
	openArgs := OpenArgs{Path: s.r.cand.Path, Emulated: o.Emulated, VendorsimDir: o.VendorsimDir}
	replies, outs := callAll(ctx, s, o.StartTimeout, func(ctx context.Context, _ int, r *rankClient) (OpenReply, error) {
		return r.Open(ctx, openArgs)
	})
	if st, fail, _, _ := s.classify(outs, MUST, false, o.StartTimeout); st != Passed {
		return PluginInfo{}, strings.Replace(fail, "running the case", "opening the plugin", 1)
	}
	for i, rep := range replies {
		if rep.Problem != "" {
			return rep.Info, fmt.Sprintf("%s: rank %d: %s", rep.Kind, i, oneLine(rep.Problem))
		}
	}
	return replies[0].Info, ""
}

// join makes every worker's stream and, with two or more ranks, their
// communicator (device = rank).
func (s *session) join(ctx context.Context) string {
	var id []byte
	if s.n >= 2 {
		ids, fail := s.uniqueIDs(ctx, 1)
		if fail != "" {
			return fail
		}
		id = ids[0]
	}
	outs := s.callRanks(ctx, s.r.o.StartTimeout, func(ctx context.Context, i int, r *rankClient) (RankResult, error) {
		return r.Join(ctx, JoinArgs{NRanks: s.n, Rank: i, Dev: i, ID: id})
	})
	if st, reason, _, _ := s.classify(outs, MUST, false, s.r.o.StartTimeout); st != Passed {
		return strings.Replace(reason, "running the case", "joining the communicator", 1)
	}
	s.joined = true
	return ""
}

// uniqueIDs asks rank 0 for k vendor unique ids.
func (s *session) uniqueIDs(ctx context.Context, k int) ([][]byte, string) {
	cctx, cancel := context.WithTimeout(ctx, s.r.o.CaseTimeout)
	defer cancel()
	ids, err := s.workers[0].rpc.UniqueIDs(cctx, k)
	if err != nil {
		outs := make([]rankOutcome, s.n)
		outs[0].err = err
		if fail := s.transportFailure(outs, "making unique ids", s.r.o.CaseTimeout); fail != "" {
			return nil, fail
		}
		return nil, "error: rank 0: getUniqueId: " + oneLine(err.Error())
	}
	if len(ids) != k {
		return nil, fmt.Sprintf("error: rank 0 made %d unique ids, %d asked", len(ids), k)
	}
	return ids, ""
}

// caseOutcome is what running a case on every worker gave.
type caseOutcome struct {
	st      Status
	reason  string
	broken  bool   // the workers must be restarted
	tripped bool   // the case crashed or hung
	unsup   string // the plugin's message when every rank said "not supported"
	detail  string // the ranks' notes (Result.Detail)
}

// runCase runs one case on every worker.
func (s *session) runCase(ctx context.Context, c Case) (o caseOutcome) {
	spec := c.Spec
	if spec.NeedIDs > 0 {
		ids, fail := s.uniqueIDs(ctx, spec.NeedIDs)
		if fail != "" {
			return caseOutcome{st: Failed, reason: fail, broken: true, tripped: strings.HasPrefix(fail, "crash") || strings.HasPrefix(fail, "deadline")}
		}
		spec.IDs = ids
	}
	timeout := s.r.o.CaseTimeout
	if c.Deadline > 0 {
		timeout = min(timeout, c.Deadline)
	}
	if spec.Iters > 1 {
		timeout *= time.Duration(spec.Iters)
	}
	outs := s.callRanks(ctx, timeout, func(ctx context.Context, _ int, r *rankClient) (RankResult, error) {
		return r.Run(ctx, RunArgs{Case: c.ID, Spec: spec})
	})
	if ctx.Err() != nil {
		return caseOutcome{st: Skipped, reason: "not run: interrupted", broken: true}
	}
	o.st, o.reason, o.broken, o.tripped = s.classify(outs, c.Level, c.UsesType || c.UsesOp, timeout)
	all := true
	var notes []string
	for i, out := range outs {
		all = all && out.err == nil && out.res.Status == rankUnsupported
		if out.res.Note != "" {
			notes = append(notes, fmt.Sprintf("rank %d: %s", i, out.res.Note))
		}
	}
	if all {
		o.unsup = outs[0].res.Detail
	}
	o.detail = strings.Join(notes, "; ")
	return o
}

// rankOutcome is one worker's answer to a call.
type rankOutcome struct {
	res RankResult
	err error // the call itself failed: deadline, stopped, or the worker died
}

// grace is how long the other ranks may take once one rank failed.
const grace = 3 * time.Second

var errStopped = errors.New("stopped after another rank failed")

// callRanks is callAll for the calls that answer a RankResult.
func (s *session) callRanks(ctx context.Context, timeout time.Duration, fn func(context.Context, int, *rankClient) (RankResult, error)) []rankOutcome {
	replies, outs := callAll(ctx, s, timeout, fn)
	for i := range outs {
		outs[i].res = replies[i]
	}
	return outs
}

// callAll runs fn on every worker at once and waits for all of them, at
// most timeout, and at most grace after the first failure (an error, or a
// RankResult that is not ok).
func callAll[T any](ctx context.Context, s *session, timeout time.Duration, fn func(context.Context, int, *rankClient) (T, error)) ([]T, []rankOutcome) {
	replies := make([]T, s.n)
	outs := make([]rankOutcome, s.n)
	dctx, cancelDeadline := context.WithTimeout(ctx, timeout)
	defer cancelDeadline()
	cctx, stop := context.WithCancelCause(dctx)
	defer stop(nil)
	done := make(chan int, s.n)
	for i, w := range s.workers {
		go func() {
			reply, err := fn(cctx, i, w.rpc)
			if err != nil && errors.Is(err, context.Canceled) {
				if cause := context.Cause(cctx); cause != nil && !errors.Is(cause, context.Canceled) {
					err = cause
				}
			}
			replies[i], outs[i].err = reply, err
			done <- i
		}()
	}
	var graceC <-chan time.Time
	for pending := s.n; pending > 0; {
		select {
		case i := <-done:
			pending--
			failed := outs[i].err != nil
			if rr, ok := any(replies[i]).(RankResult); ok && rr.Status != "" && rr.Status != rankOK {
				failed = true
			}
			if failed && graceC == nil && pending > 0 {
				graceC = time.After(grace)
			}
		case <-graceC:
			stop(errStopped)
			graceC = nil
		}
	}
	return replies, outs
}

// transportFailure describes calls that did not complete because a worker
// died or hung ("" if none did; ranks merely stopped after another rank's
// failure are left to classify).
func (s *session) transportFailure(outs []rankOutcome, doing string, deadlineWas time.Duration) string {
	var crashes, deadline []string
	for i, o := range outs {
		switch {
		case o.err == nil, errors.Is(o.err, errStopped), errors.Is(o.err, context.Canceled):
			// done, or stopped by the runner (after another rank failed, or interrupted)
		case errors.Is(o.err, context.DeadlineExceeded):
			deadline = append(deadline, fmt.Sprint(i))
		default:
			how := s.workers[i].deathReason(3 * time.Second)
			if how == "" {
				how = "lost the connection (" + oneLine(o.err.Error()) + ")"
			}
			crashes = append(crashes, fmt.Sprintf("rank %d: %s", i, how))
		}
	}
	switch {
	case len(crashes) > 0:
		return "crash: " + strings.Join(crashes, "; ") + " (while " + doing + ")"
	case len(deadline) > 0:
		return fmt.Sprintf("deadline: rank %s did not finish within %v while %s (a hang?); the workers were killed",
			strings.Join(deadline, ", "), deadlineWas, doing)
	}
	return ""
}

// classify turns the ranks' answers into the case's status and reason.
// broken: the workers must be restarted; tripped: a worker crashed or hung.
func (s *session) classify(outs []rankOutcome, level Level, declared bool, deadline time.Duration) (st Status, reason string, broken, tripped bool) {
	var stopped []string
	byStatus := map[string][]int{}
	for i, o := range outs {
		if errors.Is(o.err, errStopped) {
			stopped = append(stopped, fmt.Sprint(i))
		} else if o.err == nil {
			byStatus[o.res.Status] = append(byStatus[o.res.Status], i)
		}
	}
	detail := func(status string) string {
		ranks := byStatus[status]
		msg := fmt.Sprintf("rank %d: %s", ranks[0], outs[ranks[0]].res.Detail)
		if len(ranks) > 1 {
			msg += fmt.Sprintf(" (and %d more ranks)", len(ranks)-1)
		}
		return msg
	}
	if fail := s.transportFailure(outs, "running the case", deadline); fail != "" {
		for _, status := range []string{rankWrong, rankError, rankUnsupported} {
			if len(byStatus[status]) > 0 {
				fail += "; " + detail(status)
			}
		}
		return Failed, fail, true, true
	}
	var tail string
	if len(stopped) > 0 {
		tail = fmt.Sprintf("; rank %s did not finish within %v after that", strings.Join(stopped, ", "), grace)
	}
	others := len(stopped) > 0 || len(byStatus[rankError]) > 0 || len(byStatus[rankUnsupported]) > 0
	switch {
	case len(byStatus[rankOK]) == len(outs):
		return Passed, "", false, false
	case len(byStatus[rankWrong]) > 0:
		return Failed, "wrong result: " + detail(rankWrong) + tail, others, false
	case len(byStatus[rankError]) > 0:
		return Failed, "error: " + detail(rankError) + tail, true, false
	case len(byStatus[rankUnsupported]) > 0:
		if level == MUST {
			return Failed, "not supported, but required (MUST): " + detail(rankUnsupported) + tail, true, false
		}
		if declared {
			// The masks are the plugin's promise: a type or op it declares
			// must work wherever the case's entries exist.
			return Failed, "not supported, although the plugin declares the data type and op in its masks: " + detail(rankUnsupported) + tail, true, false
		}
		return Skipped, "not supported: " + detail(rankUnsupported) + tail, true, false
	case len(byStatus[rankOK])+len(stopped) == len(outs) && len(stopped) > 0:
		return Failed, "error: rank " + strings.Join(stopped, ", ") + " stopped", true, false
	}
	return Passed, "", false, false
}
