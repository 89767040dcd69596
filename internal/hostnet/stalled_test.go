//go:build linux

package hostnet

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/stretchr/testify/require"
)

// TestProcessStalled: a running process is not stalled; stopped by
// SIGSTOP it is, until SIGCONT; killed it is gone, as a zombie and once
// reaped.
func TestProcessStalled(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	require.Empty(t, shm.ProcessStalled(pid))
	require.Empty(t, shm.ProcessStalled(os.Getpid()), "this process is never stalled to itself")

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.Eventually(t, func() bool { return shm.ProcessStalled(pid) != "" }, 5*time.Second, time.Millisecond)
	require.Contains(t, shm.ProcessStalled(pid), "is stopped")
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	require.Eventually(t, func() bool { return shm.ProcessStalled(pid) == "" }, 5*time.Second, time.Millisecond)

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// Unreaped: exiting, then a zombie.
	require.Eventually(t, func() bool { return shm.ProcessStalled(pid) != "" }, 5*time.Second, time.Millisecond)
	require.Contains(t, shm.ProcessStalled(pid), "is gone")
	_ = cmd.Wait()
	reaped = true
	require.Contains(t, shm.ProcessStalled(pid), "is gone")
}
