//go:build linux

package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/launch"
)

// Fault injection. Each case starts a 3-rank bench of one collective, lets
// the ranks get into their collectives, then SIGKILLs or SIGSTOPs one rank
// and requires that the job ends on its own, soon, with every survivor's
// error naming the rank that went away, and leaves nothing behind (no rank
// process, stopped ones included; no /dev/shm segment; no file in the temp
// dir). A seeded RNG picks each case's combination: shared memory or TCP,
// host ranks or emulated NVIDIA ranks beside a host rank (and then the
// emulated library's own deadline), the root, the victim, the signal and
// the moment. The seed is logged, and FLAGCX_FAULT_SEED=<seed> replays it
// (FLAGCX_FAULT_ROUNDS=<n> runs every collective n times, to soak).

// faultTimeout is FLAGCX_TIMEOUT of the faulted runs: a stopped peer is
// noticed after this long.
const faultTimeout = 3 * time.Second

// faultSlack bounds the time from the fault to the launcher's exit: a
// survivor's deadline, the launcher's grace and kill waits
// (launch.GracePeriod, launch.KillWait) and a loaded 2-core CI machine.
const faultSlack = 30 * time.Second

var faultCollectives = []string{"allreduce", "reduce", "broadcast", "allgather", "reducescatter",
	"alltoall", "alltoallv", "gather", "scatter", "sendrecv"}

// faultCase is one combination: where the ranks run, which one is hit,
// how and when.
type faultCase struct {
	coll     string
	tcp      bool // FLAGCX_SHM_DISABLE=1: every byte between ranks goes over TCP
	emulated bool // --ranks nvidia:2,host:1 on the emulated runtime; else --np 3 host ranks
	root     int
	// vsimTimeout is the emulated vendor library's own deadline
	// (FLAGCX_VENDORSIM_TIMEOUT): shorter than FLAGCX_TIMEOUT, the library
	// fails first; longer, it waits as NCCL does on a lost peer, and the
	// watchdog gives up on it.
	vsimTimeout time.Duration
	sig         syscall.Signal
	victim      int
	afterRow    bool          // the moment: after the first table row, else after the header
	delay       time.Duration // after that moment
	// endWithin, when set, bounds each survivor's own end (its process
	// gone) from the fault (TestFaultEndsInTime).
	endWithin time.Duration
}

func (c faultCase) String() string {
	transport, place, at := "shm", "host:3", "header"
	if c.tcp {
		transport = "tcp"
	}
	if c.emulated {
		place = fmt.Sprintf("nvidia:2,host:1 (emulated, library deadline %v)", c.vsimTimeout)
	}
	if c.afterRow {
		at = "first row"
	}
	sig := "SIGKILL"
	if c.sig == syscall.SIGSTOP {
		sig = "SIGSTOP"
	}
	return fmt.Sprintf("%s root %d over %s on %s: %s to rank %d %v after the %s",
		c.coll, c.root, transport, place, sig, c.victim, c.delay, at)
}

func drawFaultCase(rng *rand.Rand, coll string) faultCase {
	c := faultCase{coll: coll, tcp: rng.IntN(2) == 1, emulated: rng.IntN(2) == 1,
		root: rng.IntN(3), sig: syscall.SIGKILL, victim: rng.IntN(3), afterRow: rng.IntN(2) == 1}
	if rng.IntN(2) == 1 {
		c.sig = syscall.SIGSTOP
	}
	c.vsimTimeout = faultTimeout - time.Second
	if rng.IntN(2) == 1 {
		c.vsimTimeout = 10 * faultTimeout
	}
	// Soon after the header the ranks are in the first (small) size's
	// collectives, later and after the first row in the large size's.
	if c.afterRow {
		c.delay = time.Duration(rng.IntN(301)) * time.Millisecond
	} else {
		c.delay = time.Duration(rng.IntN(801)) * time.Millisecond
	}
	return c
}

func (c faultCase) args(plugins string) []string {
	var args []string
	if c.emulated {
		args = append(args, "--plugin-dir", plugins, "--emulated", "bench", c.coll, "--ranks", "nvidia:2,host:1")
	} else {
		args = append(args, "bench", c.coll, "--np", "3")
	}
	// Sizes 16K and 16M: the first row comes quickly, each 16M row takes
	// seconds, and ten data types of them keep the ranks inside
	// collectives long after the fault.
	return append(args, "-b", "16K", "-e", "16M", "-f", "1024", "-d", "all", "-w", "1", "-n", "100", "-c", "0",
		"-r", strconv.Itoa(c.root))
}

func TestFaultInjection(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		testkit.Skip(t, testkit.Need{What: "/dev/shm", InCI: true}, "%v", err)
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("FLAGCX_FAULT_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "FLAGCX_FAULT_SEED")
	}
	rounds := 1
	if v := os.Getenv("FLAGCX_FAULT_ROUNDS"); v != "" {
		var err error
		rounds, err = strconv.Atoi(v)
		require.NoError(t, err, "FLAGCX_FAULT_ROUNDS")
	}
	t.Logf("seed %d (FLAGCX_FAULT_SEED=%d replays it)", seed, seed)
	bin, plugins := flagcxBin(t), pluginDir(t)
	for round := 0; round < rounds; round++ {
		for i, coll := range faultCollectives {
			// One stream per case, so that -run TestFaultInjection/<coll>
			// replays that case alone.
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(round*len(faultCollectives)+i)))
			c := drawFaultCase(rng, coll)
			t.Run(coll, func(t *testing.T) {
				t.Logf("seed %d: %v", seed, c)
				runFaultCase(t, bin, plugins, seed, c)
			})
		}
	}
}

func runFaultCase(t *testing.T, bin, plugins string, seed int64, c faultCase) {
	// Everything this run starts carries tag, so that whatever is left can
	// be found (and, when the test fails, killed).
	tag := fmt.Sprintf("FLAGCX_FAULT_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	tmp := filepath.Join(t.TempDir(), "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	env := cleanEnv("FLAGCX_TIMEOUT="+strconv.Itoa(int(faultTimeout/time.Second)),
		"FLAGCX_VENDORSIM_TIMEOUT="+strconv.Itoa(int(c.vsimTimeout/time.Second)), tag, "TMPDIR="+tmp)
	if c.tcp {
		env = append(env, "FLAGCX_SHM_DISABLE=1")
	}
	shmBefore := shmNames()

	cmd := exec.Command(bin, c.args(plugins)...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	out, errb, done := startTagged(t, cmd, tag) // a failed case leaves nothing running
	// what tells the story of a failed case.
	what := func() string {
		return fmt.Sprintf("seed %d (FLAGCX_FAULT_SEED=%d replays it), %v\nflagcx %s\nstdout (tail):\n%s\nstderr (tail):\n%s",
			seed, seed, c, strings.Join(cmd.Args[1:], " "), tail(out.String(), 2000), tail(errb.String(), 6000))
	}

	// The moment: rank 0 prints the header once every rank has joined,
	// a row once every rank has finished a size.
	moment := func() bool { return strings.Contains(out.String(), "# Using devices") }
	if c.afterRow {
		moment = func() bool { return hasTableRow(out.String()) }
	}
	deadline := time.Now().Add(time.Minute)
	for !moment() {
		select {
		case err := <-done:
			t.Fatalf("flagcx ended (%v) before the fault\n%s", err, what())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the moment of the fault never came\n%s", what())
	}
	time.Sleep(c.delay)
	pids := rankPids(cmd.Process.Pid)
	require.Len(t, pids, 3, "rank processes %v\n%s", pids, what())
	victim := pids[c.victim]
	require.Equal(t, "running", procState(victim), "the victim, process %d, must still be running\n%s", victim, what())
	require.NoError(t, syscall.Kill(victim, c.sig), what())
	faulted := time.Now()
	ends := watchEnds(pids, c.victim)

	var err error
	select {
	case err = <-done:
	case <-time.After(faultSlack):
		t.Fatalf("flagcx did not end within %v of the fault\n%s", faultSlack, what())
	}
	t.Logf("flagcx ended %v after the fault", time.Since(faulted).Round(time.Millisecond))
	requireEndsWithin(t, c, faulted, ends(), what)
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "flagcx must fail (%v)\n%s", err, what())
	require.Equal(t, 1, ee.ExitCode(), what())

	// The launcher's own error names the victim: killed by a signal (it
	// died), or killed by the launcher (it was stopped and never ended).
	stderr := errb.String()
	launcherLines := errorLines(stderr)
	require.Len(t, launcherLines, 1, "one error of the launcher\n%s", what())
	require.Regexp(t, namesRank(c.victim), launcherLines[0], "the launcher's error names rank %d\n%s", c.victim, what())
	require.NotContains(t, stderr, "goroutine ", what())
	require.NotContains(t, stderr, "panic", what())

	// Every survivor ends on its own with an error that names the victim
	// (by rank, or as the process that died): it noticed the peer's death
	// or silence before the launcher's grace ran out.
	for r := range pids {
		if r == c.victim {
			continue
		}
		msg := survivorError(stderr, launcherLines[0], r)
		require.NotEmpty(t, msg, "rank %d gave no error of its own\n%s", r, what())
		t.Logf("rank %d: %s", r, msg)
		require.True(t, regexp.MustCompile(namesRank(c.victim)).MatchString(msg) ||
			strings.Contains(msg, fmt.Sprintf("process %d ", victim)),
			"rank %d's error does not name rank %d (process %d): %s\n%s", r, c.victim, victim, msg, what())
	}

	// Nothing is left: no process of the run (the stopped victim included),
	// no segment, no file.
	require.Eventually(t, func() bool { return len(processesWith(tag)) == 0 }, 5*time.Second, 50*time.Millisecond,
		"processes left behind: %v\n%s", processesWith(tag), what())
	for r, pid := range pids {
		st := procState(pid)
		require.True(t, st == "gone" || st == "zombie", "rank %d, process %d, is %s\n%s", r, pid, st, what())
	}
	owners := map[int]bool{cmd.Process.Pid: true}
	for _, pid := range pids {
		owners[pid] = true
	}
	var left []string
	for name := range shmNames() {
		if !shmBefore[name] && owners[shmOwner(name)] {
			left = append(left, name)
		}
	}
	require.Empty(t, left, "segments left in /dev/shm\n%s", what())
	ents, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var files []string
	for _, e := range ents {
		files = append(files, e.Name())
	}
	require.Empty(t, files, "files left in TMPDIR\n%s", what())
}

// namesRank matches a mention of rank r, alone ("rank 2") or in a list
// ("ranks 0, 2").
func namesRank(r int) string {
	return fmt.Sprintf(`\branks? (\d+, )*%d\b`, r)
}

// survivorError is what rank r said when it failed: its own error line,
// or the error it reported to the launcher (launch.ReportFatal), which
// the launcher's line carries instead.
func survivorError(stderr, launcherLine string, r int) string {
	var msgs []string
	prefix := fmt.Sprintf("rank %d: flagcx: error: ", r)
	for _, l := range strings.Split(stderr, "\n") {
		if m, ok := strings.CutPrefix(l, prefix); ok {
			msgs = append(msgs, m)
		}
	}
	if m, ok := strings.CutPrefix(launcherLine, fmt.Sprintf("flagcx: error: rank %d: ", r)); ok {
		msgs = append(msgs, m)
	}
	return strings.Join(msgs, "\n")
}

func hasTableRow(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if rowRE.MatchString(l) {
			return true
		}
	}
	return false
}

// rankPids maps each rank of the launcher's to its process, by the
// FLAGCX_RANK in the process's environment (see ranks).
func rankPids(launcher int) map[int]int {
	out := map[int]int{}
	for _, pid := range ranks(launcher) {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, launch.EnvRank+"="); ok {
				if r, err := strconv.Atoi(v); err == nil {
					out[r] = pid
				}
			}
		}
	}
	return out
}

// procState is "gone", "zombie", "stopped" or "running" (any other state:
// sleeping, waiting for disk...).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	// The state follows the command's name, which may hold anything.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "gone"
	}
	switch s[i+2] {
	case 'Z', 'X':
		return "zombie"
	case 'T', 't':
		return "stopped"
	}
	return "running"
}

// shmNames is the set of flagcx's and the emulators' segments in /dev/shm.
func shmNames() map[string]bool {
	ents, _ := os.ReadDir("/dev/shm")
	out := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "flagcx-") || strings.HasPrefix(e.Name(), "fxvs-") {
			out[e.Name()] = true
		}
	}
	return out
}

// shmOwner is the process that created a segment, from its name: hostnet's
// flagcx-<boot>-<pidns>-<pid>-<token>, the emulators' fxvs-<pid>-...; 0
// when the name has none.
func shmOwner(name string) int {
	f := strings.Split(name, "-")
	var s string
	switch {
	case f[0] == "flagcx" && len(f) == 5:
		s = f[3]
	case f[0] == "fxvs" && len(f) > 1:
		s = f[1]
	}
	pid, _ := strconv.Atoi(s)
	return pid
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
