package core_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// TestShmRelay: an emulated device rank beside host ranks relays its small
// AllReduces and the Reduces it roots (one relay step, ABI v5's
// relayReduce), exact for every type and op, in place and not, on its own
// stream and on a new stream each call (heterotest.Run with stream 0);
// FLAGCX_DEVICE_REDUCE=0 turns relays off.
func TestShmRelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []core.Option
		relay bool
	}{
		{"relays", nil, true},
		{"FLAGCX_DEVICE_REDUCE=0", []core.Option{core.WithEnv(noDeviceReduce)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, mems, streams := startMixed(t, "dhhh", tc.opts...)
			require.Equal(t, tc.relay, comms[0].Layout().Relay)
			n := len(comms)
			var cases []reference.Case
			for _, c := range heterotest.Matrix(n, []int{1, 175, sched.ShmRelayMax / 8}, sdk.AllDataTypes(), 3) {
				if c.Coll == sdk.AllReduce || (c.Coll == sdk.Reduce && c.Root <= 1) {
					cases = append(cases, c)
				}
			}
			for i, c := range cases {
				p, err := core.SchedPlan(comms[0], 0, sched.Call{Coll: c.Coll, Count: c.Count, DType: c.Type, Op: c.Op, Root: c.Root})
				require.NoError(t, err)
				want := tc.relay && (c.Coll == sdk.AllReduce || c.Root == 0)
				require.Equal(t, want, p.Count(sched.KindRelay, -1) == 1, "%s: %s", heterotest.Name(c, false), p)
				own := streams
				if i%2 == 1 {
					own = make([]loader.Stream, n) // a new stream each call
				}
				runCase(t, comms, mems, own, c)
			}
		})
	}
}

// TestShmRelayAbandoned: a device rank whose host peers never join its
// relay fails within the deadline, naming the wait, and its stream still
// completes (the device was told to stop); the output is untouched.
func TestShmRelayAbandoned(t *testing.T) {
	comms, mems, streams := startMixedNet(t, "dh", loopback(2*time.Second))
	require.True(t, comms[0].Layout().Relay)
	m := mems[0]
	send, err := m.Alloc(64)
	require.NoError(t, err)
	defer m.Free(send)
	recv, err := m.Alloc(64)
	require.NoError(t, err)
	defer m.Free(recv)
	marker := make([]byte, 64)
	for i := range marker {
		marker[i] = 0xa5
	}
	require.NoError(t, m.Write(recv, 0, marker))
	var wg sync.WaitGroup
	var callErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		callErr = comms[0].AllReduce(send, recv, 16, sdk.Float32, sdk.Sum, streams[0])
	}()
	wg.Wait()
	require.Error(t, callErr, "rank 1 never called")
	require.ErrorContains(t, callErr, "waiting for rank 1")
	be := comms[0].Backend()
	require.NoError(t, be.Plugin.StreamSynchronize(streams[0]), "the device stopped at the abort")
	got := make([]byte, 64)
	require.NoError(t, m.Read(recv, 0, got))
	require.Equal(t, marker, got, "an abandoned relay writes nothing")
}
