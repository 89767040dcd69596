package core_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestAsyncErrorFromVendor: a vendor collective that fails on the device
// after its call returned is the communicator's async error before the
// next call (torch's watchdog polls it so), not only that call's error.
// Rank 1's vendor communicator is aborted under it while rank 0's
// AllReduce waits for it on the device; rank 0's AsyncError, which asks
// the plugin's commGetAsyncError, then names the vendor's failure.
func TestAsyncErrorFromVendor(t *testing.T) {
	comms, mems, streams := startMixed(t, "dd")
	for r, c := range comms {
		require.NoError(t, c.AsyncError(), "rank %d is healthy", r)
	}
	m := mems[0]
	send, err := m.Alloc(1024)
	require.NoError(t, err)
	defer m.Free(send)
	recv, err := m.Alloc(1024)
	require.NoError(t, err)
	defer m.Free(recv)
	require.NoError(t, comms[0].AllReduce(send, recv, 256, sdk.Float32, sdk.Sum, streams[0]), "enqueued; rank 1 never joins")
	require.NoError(t, core.AbortVendor(comms[1]))

	var async error
	deadline := time.Now().Add(10 * time.Second)
	for async == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		async = comms[0].AsyncError()
	}
	require.Error(t, async, "rank 0's async error within 10 s of its peer's vendor abort")
	require.ErrorContains(t, async, "reports an asynchronous error")
	require.True(t, errors.Is(async, sdk.ErrRemoteError), "a peer's failure is a remote error: %v", async)
	require.NoError(t, comms[0].Watchdog().Err(), "the vendor said so, not FLAGCX_TIMEOUT's watchdog")
}
