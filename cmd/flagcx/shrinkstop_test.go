//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stopTimeout is FLAGCX_TIMEOUT of TestBenchShrinkAroundStoppedRank: the
// survivors give up on the stopped rank after this long.
const stopTimeout = 3 * time.Second

// TestBenchShrinkAroundStoppedRank: `bench --on-failure shrink` with a
// rank SIGSTOPped as the run starts ends soon after: the survivors give up
// on it after FLAGCX_TIMEOUT, shrink, run again exact and exit, and the
// launcher, which would otherwise wait on the stopped rank for ever, kills
// it and says so. The job fails (status 1) as it does when a rank dies
// under --on-failure shrink (TestBenchOnFailureShrink), within
// FLAGCX_TIMEOUT + 5s of the stop, and leaves no process behind.
func TestBenchShrinkAroundStoppedRank(t *testing.T) {
	plugins := pluginDir(t)
	// Small sizes: the survivors' second run is short, so the deadline
	// measures the launcher's end, not the benchmark.
	sizes := []string{"bench", "allreduce", "--on-failure", "shrink", "-c", "1", "-b", "16K", "-e", "1M", "-f", "4", "-w", "1", "-n", "10"}
	emulated, mixed := []string{"--plugin-dir", plugins, "--emulated"}, []string{"--ranks", "nvidia:2,host:1"}
	for _, c := range []struct {
		name   string
		args   []string
		victim int
	}{
		{"host ranks", slices.Concat(sizes, []string{"--np", "3"}), 2},
		{"emulated nvidia rank", slices.Concat(emulated, sizes, mixed), 1},
		{"host rank beside emulated nvidia", slices.Concat(emulated, sizes, mixed), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			runStoppedRankCase(t, c.args, c.victim)
		})
	}
}

func runStoppedRankCase(t *testing.T, args []string, victim int) {
	tag := fmt.Sprintf("FLAGCX_STOP_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd := exec.Command(flagcxBin(t), args...)
	cmd.Env = cleanEnv("FLAGCX_TIMEOUT="+strconv.Itoa(int(stopTimeout/time.Second)), tag)
	cmd.Dir = t.TempDir()
	out, errb, done := startTagged(t, cmd, tag) // a failed case leaves nothing running
	what := func() string {
		return fmt.Sprintf("flagcx %s\nstdout (tail):\n%s\nstderr (tail):\n%s",
			strings.Join(args, " "), tail(out.String(), 3000), tail(errb.String(), 3000))
	}

	// Rank 0 prints the devices once every rank has joined: the ranks are
	// about to start their collectives, and the victim is stopped before
	// the (short) run can end.
	deadline := time.After(time.Minute)
	for !strings.Contains(out.String(), "# Using devices") {
		select {
		case err := <-done:
			t.Fatalf("flagcx ended (%v) before the stop\n%s", err, what())
		case <-deadline:
			t.Fatalf("the ranks never joined\n%s", what())
		case <-time.After(2 * time.Millisecond):
		}
	}
	pids := rankPids(cmd.Process.Pid)
	require.Len(t, pids, 3, "rank processes %v\n%s", pids, what())
	require.NoError(t, syscall.Kill(pids[victim], syscall.SIGSTOP), what())
	stopped := time.Now()

	limit := stopTimeout + 5*time.Second
	end := time.After(limit)
	var err error
	// When rank 0 said it goes on without the victim, and when it printed
	// its summary after that: where the time went, should it run out.
	var shrank, summed time.Duration
	timeline := func() string {
		return fmt.Sprintf("the survivors shrank %v and finished %v after the stop",
			shrank.Round(time.Millisecond), summed.Round(time.Millisecond))
	}
	for ended := false; !ended; {
		select {
		case err = <-done:
			ended = true
		case <-end:
			t.Fatalf("flagcx did not end within %v of the stop (rank %d, process %d, is %s; %s)\n%s",
				limit, victim, pids[victim], procState(pids[victim]), timeline(), what())
		case <-time.After(10 * time.Millisecond):
			o := out.String()
			i := strings.Index(o, "# --on-failure shrink:")
			if shrank == 0 && i >= 0 {
				shrank = time.Since(stopped)
			}
			if summed == 0 && i >= 0 && strings.Contains(o[i:], "# Avg bus bandwidth") {
				summed = time.Since(stopped)
			}
		}
	}
	t.Logf("flagcx ended %v after the stop (%s)", time.Since(stopped).Round(time.Millisecond), timeline())

	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the launcher reports the lost rank (%v)\n%s", err, what())
	require.Equal(t, 1, ee.ExitCode(), what())
	require.Equal(t, []string{fmt.Sprintf("flagcx: error: rank %d was stopped and killed after the survivors finished", victim)},
		errorLines(errb.String()), what())
	stdout := out.String()
	shrunk := fmt.Sprintf("# --on-failure shrink: the run goes on with 2 of 3 ranks, without %d\n", victim)
	require.Contains(t, stdout, shrunk, what())
	after := stdout[strings.Index(stdout, shrunk):]
	require.Contains(t, after, "# Out of bounds values : 0 OK", "every result on the survivors is exact\n%s", what())
	require.Eventually(t, func() bool { return len(processesWith(tag)) == 0 }, 5*time.Second, 50*time.Millisecond,
		"processes left behind: %v\n%s", processesWith(tag), what())
}
