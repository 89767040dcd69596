package host

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// Invalid arguments are rejected on the calling rank before anything is
// sent, so one engine over peers nobody else uses is enough.
func TestInvalidArguments(t *testing.T) {
	const n = 4
	e := New(NewLocalPeers(n, WithLocalTimeout(time.Second))[1])
	b := func(k int) []byte { return make([]byte, k) }
	buf := b(64)
	counts := func(v ...int) []int { return v }
	four := counts(1, 1, 1, 1)
	offs := counts(0, 1, 2, 3)
	huge := math.MaxInt/2 + 1
	for _, c := range []struct {
		name string
		call func() error
		want string // part of the message
	}{
		{"allreduce dtype", func() error { return e.AllReduce(buf, b(64), 1, sdk.DataType(10), sdk.Sum) }, "data type 10"},
		{"allreduce negative dtype", func() error { return e.AllReduce(buf, b(64), 1, sdk.DataType(-1), sdk.Sum) }, "data type -1"},
		{"allreduce op", func() error { return e.AllReduce(buf, b(64), 1, sdk.Float32, sdk.RedOp(5)) }, "reduction op 5"},
		{"allreduce negative count", func() error { return e.AllReduce(buf, b(64), -1, sdk.Float32, sdk.Sum) }, "negative"},
		{"allreduce overflow", func() error { return e.AllReduce(buf, b(64), huge, sdk.Float32, sdk.Sum) }, "overflows"},
		{"allreduce short send", func() error { return e.AllReduce(b(3), b(64), 1, sdk.Float32, sdk.Sum) }, "send buffer holds 3 bytes but 1 elements of float32 need 4"},
		{"allreduce short recv", func() error { return e.AllReduce(buf, b(7), 2, sdk.Float32, sdk.Sum) }, "recv buffer holds 7 bytes"},
		{"allreduce nil recv", func() error { return e.AllReduce(buf, nil, 2, sdk.Float32, sdk.Sum) }, "recv buffer holds 0 bytes"},
		{"allreduce partial overlap", func() error { return e.AllReduce(buf[:16], buf[4:20], 4, sdk.Float32, sdk.Sum) }, "overlap"},
		{"reduce root", func() error { return e.Reduce(buf, buf, 1, sdk.Int8, sdk.Sum, 4) }, "root 4 is out of range for 4 ranks"},
		{"reduce negative root", func() error { return e.Reduce(buf, buf, 1, sdk.Int8, sdk.Sum, -1) }, "root -1"},
		{"reduce short recv on root", func() error { return e.Reduce(buf, b(1), 2, sdk.Int8, sdk.Sum, 1) }, "recv buffer"},
		{"reduce op", func() error { return e.Reduce(buf, nil, 1, sdk.Int8, sdk.RedOp(-2), 0) }, "reduction op"},
		{"broadcast root", func() error { return e.Broadcast(buf, buf, 1, sdk.Int8, 9) }, "root 9"},
		{"broadcast short send on root", func() error { return e.Broadcast(b(1), b(8), 2, sdk.Int8, 1) }, "send buffer"},
		{"broadcast short recv", func() error { return e.Broadcast(nil, b(1), 2, sdk.Int8, 0) }, "recv buffer"},
		{"allgather short recv", func() error { return e.AllGather(b(4), b(15), 1, sdk.Float32) }, "recv buffer holds 15 bytes but 4 ranks x 1 elements of float32 need 16"},
		{"allgather overflow", func() error { return e.AllGather(buf, buf, math.MaxInt/8, sdk.Float64) }, "overflows"},
		{"allgather misplaced", func() error { return e.AllGather(buf[0:4], buf[:16], 1, sdk.Float32) }, "in place"},
		{"reducescatter short send", func() error { return e.ReduceScatter(b(15), b(4), 1, sdk.Float32, sdk.Sum) }, "send buffer"},
		{"reducescatter misplaced", func() error { return e.ReduceScatter(buf[:16], buf[0:4], 1, sdk.Float32, sdk.Sum) }, "in place"},
		{"reducescatter op", func() error { return e.ReduceScatter(buf, buf, 1, sdk.Float32, sdk.RedOp(7)) }, "reduction op"},
		{"alltoall short send", func() error { return e.AlltoAll(b(3), buf, 1, sdk.Int8) }, "send buffer"},
		{"alltoall dtype", func() error { return e.AlltoAll(buf, buf, 1, sdk.DataType(99)) }, "data type 99"},
		{"gather root", func() error { return e.Gather(buf, buf, 1, sdk.Int8, 4) }, "root 4"},
		{"gather short recv on root", func() error { return e.Gather(buf, b(3), 1, sdk.Int8, 1) }, "recv buffer"},
		{"scatter short send on root", func() error { return e.Scatter(b(3), buf, 1, sdk.Int8, 1) }, "send buffer"},
		{"scatter short recv", func() error { return e.Scatter(nil, nil, 1, sdk.Int8, 0) }, "recv buffer"},
		{"alltoallv counts length", func() error {
			return e.AlltoAllv(buf, counts(1, 1, 1), offs, buf, four, offs, sdk.Int8)
		}, "sendcounts has 3 entries"},
		{"alltoallv displs length", func() error {
			return e.AlltoAllv(buf, four, offs, buf, four, counts(0), sdk.Int8)
		}, "recv displacements 1"},
		{"alltoallv negative count", func() error {
			return e.AlltoAllv(buf, counts(1, -1, 1, 1), offs, b(8), four, offs, sdk.Int8)
		}, "negative"},
		{"alltoallv outside send", func() error {
			return e.AlltoAllv(b(4), counts(1, 1, 1, 2), offs, b(8), four, offs, sdk.Int8)
		}, "ends past the send buffer"},
		{"alltoallv outside recv", func() error {
			return e.AlltoAllv(buf, four, offs, b(8), four, counts(0, 1, 2, math.MaxInt), sdk.Int32)
		}, "recv region of rank 3 (displacement 9223372036854775807 + count 1 elements of 4 bytes) overflows the address space"},
		{"alltoallv self mismatch", func() error {
			return e.AlltoAllv(buf, counts(1, 2, 1, 1), offs, b(8), four, counts(0, 2, 4, 6), sdk.Int8)
		}, "sends 2 elements to itself but expects 1"},
		{"alltoallv overlapping receives", func() error {
			return e.AlltoAllv(buf, four, offs, b(8), counts(2, 1, 1, 1), counts(0, 1, 4, 6), sdk.Int8)
		}, "overlap"},
		{"group peer", func() error { return e.Group([]P2P{{Peer: 4, Buf: buf}}) }, "peer 4 is out of range"},
		{"group unmatched self send", func() error { return e.Group([]P2P{{Peer: 1, Buf: buf}}) }, "sends 1 messages to itself but receives 0"},
		{"group self length", func() error {
			return e.Group([]P2P{{Peer: 1, Buf: b(3)}, {Peer: 1, Buf: b(4), Recv: true}})
		}, "make the lengths agree"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = c.call() })
			require.Error(t, err)
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

// Ranks that disagree on a count get errors, not corrupted results and
// not a hang.
func TestCountMismatch(t *testing.T) {
	for _, m := range modes {
		for _, c := range []struct {
			name string
			call func(e *Engine, count int) error
		}{
			{"allreduce", func(e *Engine, count int) error {
				return e.AllReduce(make([]byte, 4*count), make([]byte, 4*count), count, sdk.Float32, sdk.Sum)
			}},
			{"broadcast", func(e *Engine, count int) error {
				return e.Broadcast(make([]byte, 4*count), make([]byte, 4*count), count, sdk.Float32, 0)
			}},
			{"reduce", func(e *Engine, count int) error {
				return e.Reduce(make([]byte, 4*count), make([]byte, 4*count), count, sdk.Float32, sdk.Max, 0)
			}},
			{"allgather", func(e *Engine, count int) error {
				return e.AllGather(make([]byte, 4*count), make([]byte, 3*4*count), count, sdk.Float32)
			}},
			{"reducescatter", func(e *Engine, count int) error {
				return e.ReduceScatter(make([]byte, 3*4*count), make([]byte, 4*count), count, sdk.Float32, sdk.Sum)
			}},
			{"alltoall", func(e *Engine, count int) error {
				return e.AlltoAll(make([]byte, 3*4*count), make([]byte, 3*4*count), count, sdk.Float32)
			}},
		} {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				start := time.Now()
				errs := runRanks(t, 3, m.opts, func(e *Engine) error {
					count := 100
					if e.Rank() == 2 {
						count = 101
					}
					return c.call(e, count)
				}, WithLocalTimeout(200*time.Millisecond))
				failed := 0
				for _, err := range errs {
					if err != nil {
						failed++
						require.True(t, errors.Is(err, sdk.ErrInvalidUsage) || errors.Is(err, sdk.ErrRemoteError), "%v", err)
					}
				}
				require.NotZero(t, failed, "a count mismatch went unnoticed")
				require.Less(t, time.Since(start), 10*time.Second)
			})
		}
	}
}

func TestLocalPeersContract(t *testing.T) {
	p := NewLocalPeers(2, WithLocalTimeout(200*time.Millisecond))
	// A length mismatch is an invalid-usage error on the receiver.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = p[0].Send(1, make([]byte, 5)) }()
	err := p[1].Recv(0, make([]byte, 4))
	wg.Wait()
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.Contains(t, err.Error(), "got 5 bytes from rank 0 where 4 were expected")

	// Nobody receiving: the sender times out with a remote error.
	err = p[0].Send(1, []byte{1})
	require.ErrorIs(t, err, sdk.ErrRemoteError)

	// Two Sends to one peer at once break the contract.
	errc := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errc <- p[0].Send(1, []byte{1}) }()
	}
	e1, e2 := <-errc, <-errc
	require.True(t, errors.Is(e1, sdk.ErrInvalidUsage) || errors.Is(e2, sdk.ErrInvalidUsage), "%v / %v", e1, e2)
	require.True(t, strings.Contains(e1.Error()+e2.Error(), "two Sends"))

	// Out-of-range peers.
	require.ErrorIs(t, p[0].Send(2, nil), sdk.ErrInvalidArgument)
	require.ErrorIs(t, p[0].Recv(-1, nil), sdk.ErrInvalidArgument)
}

// Count 0 is a no-op on every rank: nothing is sent, nothing hangs, and
// later collectives still line up.
func TestZeroCount(t *testing.T) {
	errs := runRanks(t, 3, nil, func(e *Engine) error {
		for _, err := range []error{
			e.AllReduce(nil, nil, 0, sdk.Float32, sdk.Sum),
			e.Reduce(nil, nil, 0, sdk.Float32, sdk.Sum, 1),
			e.Broadcast(nil, nil, 0, sdk.Float32, 2),
			e.AllGather(nil, nil, 0, sdk.Float32),
			e.ReduceScatter(nil, nil, 0, sdk.Float32, sdk.Sum),
			e.AlltoAll(nil, nil, 0, sdk.Float32),
			e.AlltoAllv(nil, []int{0, 0, 0}, []int{0, 0, 0}, nil, []int{0, 0, 0}, []int{0, 0, 0}, sdk.Float32),
			e.Gather(nil, nil, 0, sdk.Float32, 0),
			e.Scatter(nil, nil, 0, sdk.Float32, 0),
		} {
			if err != nil {
				return err
			}
		}
		out := []byte{byte(e.Rank())}
		return e.AllReduce(out, out, 1, sdk.Uint8, sdk.Sum)
	})
	requireNoErrors(t, errs)
}
