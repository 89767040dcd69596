package watchdog

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// waitFired fails the test unless w fires within limit.
func waitFired(t *testing.T, w *Watchdog, limit time.Duration) {
	t.Helper()
	select {
	case <-w.Fired():
	case <-time.After(limit):
		t.Fatalf("the watchdog did not fire within %v", limit)
	}
}

// TestWatchdogAbortUnblocksTheCall: a call blocked past the deadline is
// released by the abort (as ncclCommAbort releases NCCL), and then fails
// with the watchdog's error, which names the rank, the plugin and the call;
// later calls are refused without reaching the plugin.
func TestWatchdogAbortUnblocksTheCall(t *testing.T) {
	release := make(chan struct{})
	w := New(3, "acme", 200*time.Millisecond, func(*TimeoutError) { close(release) }, nil)
	defer Close(w)

	start := time.Now()
	err := Do(w, "allReduce", true, func() error {
		<-release
		return errors.New("acme: the communicator was aborted")
	})
	require.Less(t, time.Since(start), 5*time.Second)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, TimeoutError{Rank: 3, Plugin: "acme", Call: "allReduce", Timeout: 200 * time.Millisecond}, *te)
	require.ErrorIs(t, err, hostnet.ErrTimeout)
	require.ErrorIs(t, err, sdk.ErrSystemError)
	require.Contains(t, err.Error(), "rank 3: acme plugin: allReduce did not return within 200ms; the communicator was aborted (")
	require.Contains(t, err.Error(), "raise FLAGCX_TIMEOUT")
	require.Equal(t, err, w.Err())

	called := false
	err = Do(w, "broadcast", true, func() error { called = true; return nil })
	require.ErrorIs(t, err, hostnet.ErrTimeout)
	require.False(t, called, "a call after the abort must not reach the plugin: its communicator may be freed")
	require.ErrorIs(t, w.Begin("streamSynchronize").End(nil), hostnet.ErrTimeout)
}

// TestWatchdogNamesWhatASynchronizeWaitsFor: a stuck synchronize is named
// with the collective before it, and the watchdog gives up on a call that
// never returns without waiting for it.
func TestWatchdogNamesWhatASynchronizeWaitsFor(t *testing.T) {
	var fired atomic.Int32
	w := New(1, "nvidia", 150*time.Millisecond, func(*TimeoutError) { fired.Add(1) }, nil)
	defer Close(w)
	require.NoError(t, Do(w, "allReduce", true, func() error { return nil }))

	stuck := w.Begin("streamSynchronize") // never ends: a call stuck in C
	waitFired(t, w, 5*time.Second)
	require.EqualError(t, w.Err(), "rank 1: nvidia plugin: streamSynchronize after allReduce did not return within 150ms; the communicator was aborted "+
		"(a device or a peer rank is stuck, or the work queued before the call needs longer than FLAGCX_TIMEOUT allows: look at the other ranks' errors, or raise FLAGCX_TIMEOUT)")
	time.Sleep(400 * time.Millisecond)
	require.EqualValues(t, 1, fired.Load(), "the communicator is aborted once")
	require.ErrorIs(t, stuck.End(nil), hostnet.ErrTimeout)
}

// TestWatchdogQuietWhileCallsReturn: calls that return, however many and
// however long the communicator lives, never fire it; calls overlapping
// from several lanes are each bounded. The deadline is a second: the
// watchdog reads the wall clock, and on a loaded machine (2 cores, load
// average near 30) the test's goroutine went unscheduled for more than the
// 100 ms it once was, between a Begin and its End, in 1 to 2 runs of 20.
func TestWatchdogQuietWhileCallsReturn(t *testing.T) {
	w := New(0, "acme", time.Second, func(*TimeoutError) { t.Error("the watchdog fired on calls that returned") }, nil)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		a := w.Begin("eventSynchronize")
		require.NoError(t, Do(w, "allGather", true, func() error { time.Sleep(time.Millisecond); return nil }))
		require.NoError(t, a.End(nil))
	}
	require.NoError(t, w.Err())
	require.LessOrEqual(t, len(w.calls), 2, "slots are reused")
	Close(w)
	Close(w)

	var nilWatchdog *Watchdog // a host rank's
	require.NoError(t, nilWatchdog.Begin("memCopy").End(nil))
	require.NoError(t, nilWatchdog.Err())
	require.Nil(t, nilWatchdog.Fired())
}

// TestWatchdogNamesStalledPeers: when the watchdog gives up on a call, its
// error names the peers of this host that were gone or stopped then: a
// vendor library stuck in a collective does not say which peer it waits
// for.
func TestWatchdogNamesStalledPeers(t *testing.T) {
	const stalled = "rank 2 (process 4242) is stopped (by a signal such as SIGSTOP, or by a debugger)"
	release := make(chan struct{})
	w := New(1, "acme", 100*time.Millisecond, func(*TimeoutError) { close(release) }, func() string { return stalled })
	defer Close(w)
	err := Do(w, "allReduce", true, func() error { <-release; return nil })
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, stalled, te.Stalled)
	require.Equal(t, "rank 1: acme plugin: allReduce did not return within 100ms; the communicator was aborted (on this host "+stalled+")", err.Error())
}
