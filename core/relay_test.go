package core_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
	"github.com/stretchr/testify/require"
)

// TestShmRelay: an emulated device rank beside host ranks relays its small
// AllReduces, Reduces (rooted at it or at a host rank) and the
// Broadcasts it roots (one relay step, ABI v5's relayReduce), exact for
// every type and op, in place and not, on its own stream and on a new stream each call
// (heterotest.Run with stream 0); FLAGCX_DEVICE_REDUCE=0 turns relays off.
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
				if c.Coll == sdk.AllReduce || ((c.Coll == sdk.Reduce || c.Coll == sdk.Broadcast) && c.Root <= 1) {
					cases = append(cases, c)
				}
			}
			for i, c := range cases {
				p, err := core.SchedPlan(comms[0], 0, sched.Call{Coll: c.Coll, Count: c.Count, DType: c.Type, Op: c.Op, Root: c.Root})
				require.NoError(t, err)
				want := tc.relay && (c.Coll != sdk.Broadcast || c.Root == 0)
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
// relay returns from the call (the relay is enqueued, as any
// stream-ordered collective), and its stream still completes within the
// deadline: the device was told to stop, and the output is untouched.
// The failure, naming the wait, is then the communicator's async error
// and the error of its next call.
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
	require.NoError(t, comms[0].AllReduce(send, recv, 16, sdk.Float32, sdk.Sum, streams[0]), "the relay is enqueued")
	be := comms[0].Backend()
	require.NoError(t, be.Plugin.StreamSynchronize(streams[0]), "the device stopped at the abort")
	got := make([]byte, 64)
	require.NoError(t, m.Read(recv, 0, got))
	require.Equal(t, marker, got, "an abandoned relay writes nothing")
	require.ErrorContains(t, comms[0].AsyncError(), "waiting for rank 1")
	err = comms[0].AllReduce(send, recv, 16, sdk.Float32, sdk.Sum, streams[0])
	require.ErrorContains(t, err, "waiting for rank 1", "rank 1 never called")
	require.ErrorContains(t, err, "failed after its call returned")
}

// TestRelayWaitStopsAtClose: the relay proxy's wait for the device ends
// as soon as the windows close, naming why, rather than holding Close
// (which waits for the proxy's hold) until FLAGCX_TIMEOUT.
func TestRelayWaitStopsAtClose(t *testing.T) {
	comms, _, _ := startMixed(t, "dh")
	err := core.RelayWaitAfterClose(comms[0])
	require.ErrorIs(t, err, hostnet.ErrClosed, "not the idle stream's missing word")
	require.ErrorContains(t, err, "the shared windows closed")
}

// TestShmRelayPipelined: device ranks issue relays back to back without
// waiting for their streams (more than the proxy's ring holds), then a
// Broadcast (a relay too) and an AllGather (not one: it drains them),
// then more relays, and only then synchronize: every result is exact and
// no error is left behind. The windows' halves alternate across calls whose steps
// the proxies still publish while their callers run ahead.
func TestShmRelayPipelined(t *testing.T) {
	comms, mems, streams := startMixed(t, "dhdh")
	for _, c := range comms {
		if c.Backend().Plugin != nil {
			require.True(t, c.Layout().Relay)
		}
	}
	const count, before, after = 175, 11, 5
	n := len(comms)
	input := func(r, k int) []int32 {
		v := make([]int32, count)
		for i := range v {
			v[i] = int32(r*100003 + k*7919 + i)
		}
		return v
	}
	type call struct{ send, recv core.Buffer }
	calls := make([][]call, n)
	var bcast, gathered [4]core.Buffer
	for r, m := range mems {
		for k := 0; k < before+after; k++ {
			s, err := m.Alloc(4 * count)
			require.NoError(t, err)
			d, err := m.Alloc(4 * count)
			require.NoError(t, err)
			require.NoError(t, m.Write(s, 0, int32Bytes(input(r, k))))
			calls[r] = append(calls[r], call{s, d})
		}
		b, err := m.Alloc(4 * count)
		require.NoError(t, err)
		require.NoError(t, m.Write(b, 0, int32Bytes(input(r, -1))))
		bcast[r] = b
		g, err := m.Alloc(4 * count * n)
		require.NoError(t, err)
		gathered[r] = g
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			for k, x := range calls[r] {
				if k == before {
					if errs[r] = c.Broadcast(bcast[r], bcast[r], count, sdk.Int32, 1, streams[r]); errs[r] != nil {
						return
					}
					if errs[r] = c.AllGather(calls[r][0].send, gathered[r], count, sdk.Int32, streams[r]); errs[r] != nil {
						return
					}
				}
				if errs[r] = c.AllReduce(x.send, x.recv, count, sdk.Int32, sdk.Sum, streams[r]); errs[r] != nil {
					return
				}
			}
			if p := c.Backend().Plugin; p != nil {
				errs[r] = p.StreamSynchronize(streams[r])
			}
		})
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.NoError(t, c.AsyncError(), "rank %d", r)
		for k, x := range calls[r] {
			want := make([]int32, count)
			for q := 0; q < n; q++ {
				for i, v := range input(q, k) {
					want[i] += v
				}
			}
			got := make([]byte, 4*count)
			require.NoError(t, mems[r].Read(x.recv, 0, got))
			require.Equal(t, int32Bytes(want), got, "rank %d, AllReduce %d", r, k)
		}
		got := make([]byte, 4*count)
		require.NoError(t, mems[r].Read(bcast[r], 0, got))
		require.Equal(t, int32Bytes(input(1, -1)), got, "rank %d, the Broadcast", r)
		var all []int32
		for q := 0; q < n; q++ {
			all = append(all, input(q, 0)...)
		}
		got = make([]byte, 4*count*n)
		require.NoError(t, mems[r].Read(gathered[r], 0, got))
		require.Equal(t, int32Bytes(all), got, "rank %d, the AllGather", r)
	}
}

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}
