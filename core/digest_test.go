package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// digestCall is one rank's arguments of a collective.
type digestCall struct {
	coll        sdk.Collective
	dt          sdk.DataType
	op          sdk.RedOp
	count, root int
}

func (d digestCall) run(c *Comm) error {
	n := d.count * d.dt.Size()
	send, recv := HostBuffer(make([]byte, n)), HostBuffer(make([]byte, n))
	switch d.coll {
	case sdk.AllReduce:
		return c.AllReduce(send, recv, d.count, d.dt, d.op, 0)
	case sdk.Reduce:
		return c.Reduce(send, recv, d.count, d.dt, d.op, d.root, 0)
	case sdk.Broadcast:
		return c.Broadcast(send, recv, d.count, d.dt, d.root, 0)
	}
	return fmt.Errorf("digestCall: %v is not in the test", d.coll)
}

// TestCallMismatchFailsEveryRank: ranks that disagree on a collective's
// data type, op, count or root (the same byte size for type and op) get an
// error on every rank, naming both calls, over TCP and over shared memory;
// never wrong data or a hang.
func TestCallMismatchFailsEveryRank(t *testing.T) {
	f32 := digestCall{sdk.AllReduce, sdk.Float32, sdk.Sum, 1024, 0}
	cases := []struct {
		name   string
		r1     digestCall
		detail bool // the error names the other call's type and op
	}{
		{"type", digestCall{sdk.AllReduce, sdk.Int32, sdk.Sum, 1024, 0}, true},
		{"op", digestCall{sdk.AllReduce, sdk.Float32, sdk.Max, 1024, 0}, true},
		{"type and op, large", digestCall{sdk.AllReduce, sdk.Int32, sdk.Max, 1024, 0}, true},
		{"count", digestCall{sdk.AllReduce, sdk.Float32, sdk.Sum, 1000, 0}, false},
		{"collective", digestCall{sdk.Broadcast, sdk.Float32, 0, 1024, 0}, true},
		{"root", digestCall{sdk.Reduce, sdk.Float32, sdk.Sum, 1024, 1}, false},
	}
	for _, tr := range []struct{ name, shmDisable string }{{"tcp", "1"}, {"shm", ""}} {
		t.Run(tr.name, func(t *testing.T) {
			t.Setenv(hostnet.EnvShmDisable, tr.shmDisable)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					r0 := f32
					if tc.name == "root" {
						r0 = digestCall{sdk.Reduce, sdk.Float32, sdk.Sum, 1024, 0}
					}
					if tc.name == "type and op, large" {
						r0.count, tc.r1.count = 1<<20, 1<<20 // pipelined, striped
					}
					comms := startComms(t, 2, testNet(10*time.Second))
					calls := []digestCall{r0, tc.r1}
					errs := onAll(comms, func(c *Comm) error { return calls[c.Rank()].run(c) })
					for r, err := range errs {
						require.Error(t, err, "rank %d", r)
						if tc.name == "root" && tr.name == "tcp" {
							// Two ranks that each think they are the root
							// only wait for the other: nothing carries a
							// digest, and the deadline ends the call.
							continue
						}
						// The rank that finds the mismatch first names both
						// calls; the other may learn it from its notice
						// first, which names the same two calls.
						require.ErrorContains(t, err, hostnet.ErrMismatch.Error(), "rank %d", r)
						if !errors.Is(err, hostnet.ErrMismatch) {
							require.ErrorIs(t, err, sdk.ErrRemoteError, "rank %d", r)
							require.ErrorContains(t, err, fmt.Sprintf("first failure: rank %d (host ", 1-r))
						} else {
							require.ErrorIs(t, err, sdk.ErrInvalidUsage, "rank %d", r)
						}
						a, b := calls[r], calls[1-r]
						if tc.detail {
							da, db := hostcomm.CallOf(sched.Call{Coll: a.coll, DType: a.dt, Op: a.op}).Describe(), hostcomm.CallOf(sched.Call{Coll: b.coll, DType: b.dt, Op: b.op}).Describe()
							require.Regexp(t, "it runs ("+da+" where this rank runs "+db+"|"+db+" where this rank runs "+da+")", err.Error())
						} else {
							require.Regexp(t, `with another count or root than this rank's \(count (`+fmt.Sprint(a.count)+"|"+fmt.Sprint(b.count)+")", err.Error())
						}
					}
				})
			}
		})
	}
}

// TestLinkTable: every rank knows which link each pair uses and why, the
// same table on every rank.
func TestLinkTable(t *testing.T) {
	for _, tc := range []struct {
		shmDisable string
		want       []string
	}{
		{"1", []string{"Links (pairs of ranks):", "  tcp (same host without shared memory): 0-1 0-2 1-2"}},
		{"", []string{"Links (pairs of ranks):", "  shm (same host): 0-1 0-2 1-2"}},
	} {
		t.Run("FLAGCX_SHM_DISABLE="+tc.shmDisable, func(t *testing.T) {
			t.Setenv(hostnet.EnvShmDisable, tc.shmDisable)
			if tc.shmDisable == "" && hostnet.BootID() == "" {
				testkit.Skip(t, testkit.Need{What: "a Linux kernel boot id (shared memory between ranks)", InCI: true}, "hostnet.BootID is empty")
			}
			comms := startComms(t, 3, testNet(10*time.Second))
			for _, c := range comms {
				require.Equal(t, tc.want, c.world.LinkTable(), "rank %d", c.Rank())
			}
		})
	}
}

// TestErrorsNameTheFirstFailure: when one rank is gone, every surviving
// rank's error names it (the rank that noticed first tells the others),
// not the neighbour that failed after it.
func TestErrorsNameTheFirstFailure(t *testing.T) {
	t.Setenv(hostnet.EnvShmDisable, "1")
	comms := startComms(t, 4, testNet(20*time.Second))
	require.NoError(t, comms[3].Abort())
	const count = 1 << 18 // a pipelined ring: each rank waits on its neighbour
	errs := onAll(comms[:3], func(c *Comm) error {
		buf := HostBuffer(make([]byte, 4*count))
		return c.AllReduce(buf, buf, count, sdk.Float32, sdk.Sum, 0)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, sdk.ErrRemoteError, "rank %d", r)
		require.ErrorContains(t, err, "rank 3 closed the connection", "rank %d", r)
	}
}
