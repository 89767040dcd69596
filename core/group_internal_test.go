package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestFuseRuns: a group's queue is cut into fused runs by the calls alone:
// consecutive AllReduces of one type and op up to 64 KiB together.
func TestFuseRuns(t *testing.T) {
	ar := func(dt sdk.DataType, op sdk.RedOp, count int) task {
		return task{args: sdk.Call{Coll: sdk.AllReduce, Count: count, DType: dt, Op: op}}
	}
	bc := task{args: sdk.Call{Coll: sdk.Broadcast, Count: 4, DType: sdk.Float32}}
	f32 := sdk.Float32
	cases := []struct {
		name string
		q    []task
		runs []int
	}{
		{"one", []task{ar(f32, sdk.Sum, 1)}, []int{1}},
		{"same type and op", []task{ar(f32, sdk.Sum, 1), ar(f32, sdk.Sum, 7), ar(f32, sdk.Sum, 0)}, []int{3}},
		{"another op ends a run", []task{ar(f32, sdk.Sum, 1), ar(f32, sdk.Max, 1), ar(f32, sdk.Max, 1)}, []int{1, 2}},
		{"another type ends a run", []task{ar(f32, sdk.Sum, 1), ar(sdk.Int32, sdk.Sum, 1)}, []int{1, 1}},
		{"another collective ends a run", []task{ar(f32, sdk.Sum, 1), bc, ar(f32, sdk.Sum, 1), ar(f32, sdk.Sum, 1)}, []int{1, 1, 2}},
		{"64 KiB fit", []task{ar(f32, sdk.Sum, 8<<10), ar(f32, sdk.Sum, 8<<10)}, []int{2}},
		{"one byte more does not", []task{ar(f32, sdk.Sum, 8<<10), ar(f32, sdk.Sum, 8<<10), ar(sdk.Float32, sdk.Sum, 1)}, []int{2, 1}},
		{"a large one alone", []task{ar(f32, sdk.Sum, 3), ar(f32, sdk.Sum, 20000), ar(f32, sdk.Sum, 5), ar(f32, sdk.Sum, 16000)}, []int{1, 1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var runs []int
			for i := 0; i < len(tc.q); {
				n := firstRun(tc.q[i:])
				runs = append(runs, n)
				i += n
				require.Equal(t, n, fuseRun(tc.q[:i]), "fuseRun sees the run that runQueue cuts")
			}
			require.Equal(t, tc.runs, runs)
		})
	}
}

// TestGroupFusesOnTheHost: small AllReduces of a group run as one packed
// call on the host placement, exactly, and the group keeps none of the
// caller's buffers afterwards.
func TestGroupFusesOnTheHost(t *testing.T) {
	comms := startComms(t, 2, testNet(10*time.Second))
	recvs := make([][][]byte, 2)
	errs := onAll(comms, func(c *Comm) error {
		r := c.Rank()
		recvs[r] = [][]byte{make([]byte, 4), make([]byte, 8), make([]byte, 4)}
		c.GroupStart()
		for i, recv := range recvs[r] {
			send := make([]byte, len(recv))
			for j := range send {
				send[j] = byte(10*i + j + r)
			}
			if err := c.AllReduce(HostBuffer(send), HostBuffer(recv), len(recv), sdk.Uint8, sdk.Sum, 0); err != nil {
				return err
			}
		}
		return c.GroupEnd()
	})
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Len(t, c.fused, fuseLimit, "rank %d: the AllReduces ran packed", r)
		for i, recv := range recvs[r] {
			for j, v := range recv {
				require.Equal(t, byte(2*(10*i+j)+1), v, "rank %d, AllReduce %d, element %d", r, i, j)
			}
		}
		require.Empty(t, c.groupTasks, "rank %d", r)
		for _, q := range c.groupTasks[:cap(c.groupTasks)] {
			require.Nil(t, q.send.host, "rank %d keeps a caller's buffer", r)
			require.Nil(t, q.recv.host, "rank %d keeps a caller's buffer", r)
		}
	}
}
