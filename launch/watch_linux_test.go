package launch

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The ranks of TestLocalKeepGoingEndsWithoutTheRanksLeft run from init,
// before TestMain's modes: rank 1 stops itself (SIGSTOP, which nobody
// undoes) or hangs; the others exit once rank 1 is in that state, rank 0
// first (its failure comes first), with status 0 (the survivors
// finished) or 3 (they failed).
func init() {
	mode := os.Getenv(envChild)
	var stop, fail bool
	switch mode {
	case "stopped-survivorsfinish":
		stop = true
	case "stopped-othersfail":
		stop, fail = true, true
	case "stuck-survivorsfinish":
	default:
		return
	}
	if os.Getenv(EnvRank) == "1" {
		if stop {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	rank, _ := strconv.Atoi(os.Getenv(EnvRank))
	time.Sleep(time.Duration(rank+1) * 200 * time.Millisecond)
	if fail {
		os.Exit(3)
	}
	os.Exit(0)
}

// TestLocalKeepGoingEndsWithoutTheRanksLeft: a KeepGoing launch does not
// wait for ever on a rank that cannot end once the others have exited:
// a stopped one is killed as soon as it is found stopped, a running one
// (stuck) GracePeriod after the survivors finished; the error names it
// and says why it was killed, after any failure of the others.
func TestLocalKeepGoingEndsWithoutTheRanksLeft(t *testing.T) {
	old := GracePeriod
	GracePeriod = 2 * time.Second
	defer func() { GracePeriod = old }()
	for _, c := range []struct {
		mode string
		want string
		// least, most: how long the launch takes, from its start: the
		// others exit within 600ms; a stuck rank waits out GracePeriod.
		least, most time.Duration
	}{
		{"stopped-survivorsfinish", "rank 1 was stopped and killed after the survivors finished", 0, GracePeriod},
		{"stopped-othersfail", "rank 0 exited with status 3 (also failed: rank 1 (stopped and killed after the other ranks exited), rank 2 (status 3))", 0, GracePeriod},
		{"stuck-survivorsfinish", "rank 1 was stuck and killed after the survivors finished", GracePeriod, GracePeriod + KillWait},
	} {
		t.Run(c.mode, func(t *testing.T) {
			_, stderr, err, took := runTestRanksKeepGoing(t, c.mode, 3, true)
			t.Logf("the launch took %v", took)
			require.EqualError(t, err, c.want, stderr)
			require.GreaterOrEqual(t, took, c.least)
			require.Less(t, took, c.most+time.Second) // starting three test binaries on a loaded machine
			var re *RankError
			require.ErrorAs(t, err, &re)
		})
	}
}

// TestProcStopped: a process stopped by SIGSTOP is, until SIGCONT; one
// that is gone is not.
func TestProcStopped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	require.False(t, procStopped(pid))
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.Eventually(t, func() bool { return procStopped(pid) }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	require.Eventually(t, func() bool { return !procStopped(pid) }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.False(t, procStopped(pid), "a process that is gone")
	require.False(t, procStopped(-1))
}
