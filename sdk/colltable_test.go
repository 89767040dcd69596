package sdk

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBufElems(t *testing.T) {
	cases := []struct {
		coll       Collective
		send, recv int
	}{
		{AllReduce, 5, 5}, {Reduce, 5, 5}, {Broadcast, 5, 5},
		{AllGather, 5, 15}, {Gather, 5, 15},
		{ReduceScatter, 15, 5}, {Scatter, 15, 5},
		{AlltoAll, 15, 15}, {AlltoAllv, 15, 15}, {SendRecv, 5, 5}, {Barrier, 0, 0},
		{Collective(-1), 0, 0},
	}
	for _, tc := range cases {
		s, r := tc.coll.BufElems(5, 3)
		require.Equal(t, [2]int{tc.send, tc.recv}, [2]int{s, r}, tc.coll.String())
	}
}

func TestTable(t *testing.T) {
	for c := Collective(0); c < NumCollectives; c++ {
		d := c.Info()
		require.Equal(t, c, d.Coll)
		require.Equal(t, d.Reduces, c.Reduces(), c.String())
		require.Equal(t, d.Rooted, c.Rooted(), c.String())
		require.Equal(t, d.Rooted, d.Send.RootOnly() || d.Recv.RootOnly(), "%v: a rooted collective has a buffer only its root uses", c)
		if d.InPlace != InPlaceNone {
			require.NotEqual(t, ExtentVector, d.Send, c.String())
		}
	}
	require.Nil(t, NumCollectives.Info())
	require.Equal(t, []string{"allreduce", "reduce", "broadcast", "allgather", "reducescatter", "alltoall", "alltoallv", "gather", "scatter", "sendrecv"}, CollectiveNames())
	so, ro := InPlaceSendInRecv.Offsets(2, 10)
	require.Equal(t, [2]int{20, 0}, [2]int{so, ro})
	so, ro = InPlaceRecvInSend.Offsets(2, 10)
	require.Equal(t, [2]int{0, 20}, [2]int{so, ro})
	require.InDelta(t, 1.5, AllReduce.BusFactor(4), 1e-12)
	require.InDelta(t, 0.75, Gather.BusFactor(4), 1e-12)
	require.InDelta(t, 1.0, SendRecv.BusFactor(4), 1e-12)
	require.Zero(t, Barrier.BusFactor(4))
}

// TestMsgBytes: a call's size is nccl-tests' size column (bench divides
// it back into the count: cmd/flagcx/internal/bench/ops.go's callCount).
func TestMsgBytes(t *testing.T) {
	const n = 4
	for _, tc := range []struct {
		call Call
		want int64
	}{
		{Call{Coll: AllReduce, Count: 256, DType: Float32}, 1024},
		{Call{Coll: Reduce, Count: 256, DType: Float32}, 1024},
		{Call{Coll: Broadcast, Count: 3, DType: Int8}, 3},
		{Call{Coll: AllGather, Count: 64, DType: Float32}, 1024},
		{Call{Coll: ReduceScatter, Count: 64, DType: Float32}, 1024},
		{Call{Coll: AlltoAll, Count: 64, DType: Float64}, 2048},
		{Call{Coll: Gather, Count: 64, DType: Float32}, 1024},
		{Call{Coll: Scatter, Count: 64, DType: Float32}, 1024},
		{Call{Coll: SendRecv, Count: 256, DType: Float32}, 1024},
		{Call{Coll: AlltoAllv, DType: Int32, SendCounts: []int{1, 2, 3, 4}, RecvCounts: []int{4, 4, 4, 4}}, 64},
		{Call{Coll: Barrier}, 0},
	} {
		require.Equal(t, tc.want, tc.call.MsgBytes(n), tc.call.Coll.Title())
	}
}
