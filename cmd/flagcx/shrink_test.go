//go:build linux

package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchOnFailureShrink: `bench all --on-failure shrink -c 1` with a
// rank killed (-9) at a seeded random moment of the run goes on with the
// survivors: rank 0 prints the failure naming the victim and the new size,
// the whole run starts again on them with every result exact, and nothing
// is left behind; the launcher still reports the killed rank.
func TestBenchOnFailureShrink(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv("FLAGCX_FAULT_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "FLAGCX_FAULT_SEED")
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 25))
	victim, delay, tcp := 1+rng.IntN(3), time.Duration(rng.IntN(300))*time.Millisecond, rng.IntN(2) == 1
	t.Logf("seed %d (FLAGCX_FAULT_SEED=%d replays it): kill -9 rank %d %v after the first row, tcp %v", seed, seed, victim, delay, tcp)
	tag := fmt.Sprintf("FLAGCX_SHRINK_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	env := cleanEnv("FLAGCX_TIMEOUT=60", tag)
	if tcp {
		env = append(env, "FLAGCX_SHM_DISABLE=1")
	}
	shmBefore := shmNames()
	cmd := exec.Command(flagcxBin(t), "bench", "all", "--np", "4", "--on-failure", "shrink", "-c", "1", "-b", "1K", "-e", "4M", "-f", "4", "-w", "1", "-n", "5")
	cmd.Env = env
	cmd.Dir = t.TempDir()
	out, errb, done := startTagged(t, cmd, tag)
	what := func() string {
		return fmt.Sprintf("stdout (tail):\n%s\nstderr (tail):\n%s", tail(out.String(), 4000), tail(errb.String(), 4000))
	}
	require.Eventually(t, func() bool { return hasTableRow(out.String()) }, time.Minute, 5*time.Millisecond, "no row\n%s", what())
	time.Sleep(delay)
	pids := rankPids(cmd.Process.Pid)
	require.Len(t, pids, 4, what())
	require.NoError(t, syscall.Kill(pids[victim], syscall.SIGKILL))

	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("flagcx did not end\n%s", what())
	}
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the launcher reports the lost rank (%v)\n%s", err, what())
	require.Contains(t, errb.String(), fmt.Sprintf("flagcx: error: rank %d was killed by signal 9 (killed)", victim), what())
	stdout := out.String()
	require.Contains(t, stdout, fmt.Sprintf("rank %d (host ", victim), what())
	require.Contains(t, stdout, fmt.Sprintf("# --on-failure shrink: the run goes on with 3 of 4 ranks, without %d\n", victim), what())
	after := stdout[strings.Index(stdout, "# --on-failure shrink"):]
	require.Contains(t, after, "# Out of bounds values : 0 OK", "every result on the survivors is exact\n%s", what())
	for _, coll := range faultCollectives {
		require.Contains(t, after, "# "+coll+"\n", "every collective ran on the survivors\n%s", what())
	}

	require.Eventually(t, func() bool { return len(processesWith(tag)) == 0 }, 5*time.Second, 50*time.Millisecond,
		"processes left behind: %v", processesWith(tag))
	owners := map[int]bool{cmd.Process.Pid: true}
	for _, pid := range pids {
		owners[pid] = true
	}
	for name := range shmNames() {
		require.False(t, !shmBefore[name] && owners[shmOwner(name)], "%s is left in /dev/shm", name)
	}
}
