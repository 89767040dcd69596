package hostcomm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// TestNoteStalled: a failed operation's error names, in the caller's
// numbering, the peers of this host that are stopped or gone, whichever
// peer the error itself blames; peers on other hosts and running ones are
// not named, and a note is added once, however many layers wrap it.
func TestNoteStalled(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd
	}
	stopped, running, killed, remote := start(), start(), start(), start()
	require.NoError(t, syscall.Kill(stopped.Process.Pid, syscall.SIGSTOP))
	require.NoError(t, killed.Process.Kill())
	_ = killed.Wait()
	here := func(pid int) peerInfo {
		return peerInfo{Host: hostname(), BootID: hostnet.BootID(), PidNS: hostnet.PidNamespace(), Pid: pid}
	}
	peers := []peerInfo{here(os.Getpid()), here(running.Process.Pid), here(stopped.Process.Pid), here(killed.Process.Pid), here(remote.Process.Pid)}
	peers[4].Host = "elsewhere" // its pid means nothing here, whatever runs under it
	require.NoError(t, syscall.Kill(remote.Process.Pid, syscall.SIGSTOP))
	require.Eventually(t, func() bool { return hostnet.ProcessStalled(stopped.Process.Pid) != "" }, 5*time.Second, time.Millisecond)

	cause := fmt.Errorf("%w: waiting for 8 bytes from rank 1: no progress", sdk.ErrRemoteError)
	err := NoteStalled(fmt.Errorf("AllReduce on rank 0: %w", cause), peers, 0)
	require.ErrorIs(t, err, sdk.ErrRemoteError)
	require.Equal(t, fmt.Sprintf("AllReduce on rank 0: %v; on this host rank 2 (process %d) is stopped (by a signal such as SIGSTOP, or by a debugger), rank 3 (process %d) is gone (it exited, was killed or crashed)",
		cause, stopped.Process.Pid, killed.Process.Pid), err.Error())

	outer := NoteStalled(fmt.Errorf("Gather on rank 0: %w", err), peers, 0)
	require.Equal(t, "Gather on rank 0: "+err.Error(), outer.Error(), "noted once")

	require.Same(t, cause, NoteStalled(cause, peers[:2], 0), "nothing stalled: the error as it was")
	require.NoError(t, NoteStalled(nil, peers, 0))
	require.Equal(t, fmt.Sprintf("rank 3 (process %d) is gone (it exited, was killed or crashed)", killed.Process.Pid), StalledPeers(peers, 2),
		"the stopped rank's own view: it does not name itself")
	require.True(t, errors.Is(outer, sdk.ErrRemoteError))
}
