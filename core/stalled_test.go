//go:build linux

package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWatchdogNamesStalledPeers: when the watchdog gives up on a call, its
// error names the peers of this host that were gone or stopped then: a
// vendor library stuck in a collective does not say which peer it waits
// for.
func TestWatchdogNamesStalledPeers(t *testing.T) {
	const stalled = "rank 2 (process 4242) is stopped (by a signal such as SIGSTOP, or by a debugger)"
	release := make(chan struct{})
	w := newWatchdog(1, "acme", 100*time.Millisecond, func(*TimeoutError) { close(release) }, func() string { return stalled })
	defer w.close()
	err := w.do("allReduce", true, func() error { <-release; return nil })
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, stalled, te.Stalled)
	require.Equal(t, "rank 1: acme plugin: allReduce did not return within 100ms; the communicator was aborted (on this host "+stalled+")", err.Error())
}
