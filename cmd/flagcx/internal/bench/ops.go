package bench

import (
	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// inPlaceLayout is where NCCL puts the send and receive buffers of an
// in-place call inside the one (receive) buffer, as nccl-tests lays them
// out.
type inPlaceLayout int

const (
	// sameBuffer: send == recv.
	sameBuffer inPlaceLayout = iota
	// sendAtRankSlot: send = recv + rank*count (AllGather, Gather).
	sendAtRankSlot
	// recvAtRankSlot: recv = send + rank*count (ReduceScatter, Scatter).
	recvAtRankSlot
)

// offsets gives the element offsets of send and recv inside the in-place
// buffer for rank with call count count.
func (l inPlaceLayout) offsets(rank, count int) (send, recv int) {
	switch l {
	case sendAtRankSlot:
		return rank * count, 0
	case recvAtRankSlot:
		return 0, rank * count
	}
	return 0, 0
}

// Comm is what the benchmark needs of a communicator over host buffers;
// *core.Comm is one.
type Comm interface {
	Rank() int
	Count() int
	AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error
	Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error
	Broadcast(send, recv []byte, count int, dt sdk.DataType, root int) error
	AllGather(send, recv []byte, sendcount int, dt sdk.DataType) error
	ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error
	AlltoAll(send, recv []byte, count int, dt sdk.DataType) error
	AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType) error
	Gather(send, recv []byte, count int, dt sdk.DataType, root int) error
	Scatter(send, recv []byte, count int, dt sdk.DataType, root int) error
	Send(buf []byte, count int, dt sdk.DataType, peer int) error
	Recv(buf []byte, count int, dt sdk.DataType, peer int) error
	GroupStart()
	GroupEnd() error
	Barrier() error
}

var _ Comm = (*core.Comm)(nil)

// region is a byte range of a benchmark buffer.
type region struct {
	buf    Buf
	off, n int
}

// host is the region as host memory; only for buffers the host addresses.
func (r region) host() []byte { return r.buf.Host()[r.off : r.off+r.n] }

// call is one collective call's arguments on one rank.
type call struct {
	send, recv region
	count      int
	dt         sdk.DataType
	op         sdk.RedOp
	root       int
	// AlltoAllv only.
	sendcounts, sdispls, recvcounts, rdispls []int
}

// opSpec is one row of the op table: everything the benchmark knows about
// a collective.
type opSpec struct {
	coll reference.Collective
	// busFactor converts algorithm bandwidth to bus bandwidth (nccl-tests'
	// definitions).
	busFactor func(n int) float64
	// perRank is true when the call count is the buffer's element count
	// divided by the rank count (rounded down, as nccl-tests does); false
	// when it is the whole count.
	perRank bool
	inPlace inPlaceLayout
	// inPlaceChecked is false where the in-place form is undefined (as in
	// nccl-tests: AlltoAll, AlltoAllv, SendRecv): it is timed, but its
	// result shows N/A.
	inPlaceChecked bool
}

func allReduceFactor(n int) float64 { return 2 * float64(n-1) / float64(n) }
func spreadFactor(n int) float64    { return float64(n-1) / float64(n) }
func unitFactor(int) float64        { return 1 }

// opTable has one entry per collective, in reference.Collective order.
var opTable = [reference.NumCollectives]opSpec{
	reference.AllReduce: {
		busFactor: allReduceFactor, inPlace: sameBuffer, inPlaceChecked: true,
	},
	reference.Reduce: {
		busFactor: unitFactor, inPlace: sameBuffer, inPlaceChecked: true,
	},
	reference.Broadcast: {
		busFactor: unitFactor, inPlace: sameBuffer, inPlaceChecked: true,
	},
	reference.AllGather: {
		busFactor: spreadFactor, perRank: true, inPlace: sendAtRankSlot, inPlaceChecked: true,
	},
	reference.ReduceScatter: {
		busFactor: spreadFactor, perRank: true, inPlace: recvAtRankSlot, inPlaceChecked: true,
	},
	reference.AlltoAll: {
		busFactor: spreadFactor, perRank: true, inPlace: sameBuffer,
	},
	reference.AlltoAllv: {
		busFactor: spreadFactor, perRank: true, inPlace: sameBuffer,
	},
	reference.Gather: {
		busFactor: spreadFactor, perRank: true, inPlace: sendAtRankSlot, inPlaceChecked: true,
	},
	reference.Scatter: {
		busFactor: spreadFactor, perRank: true, inPlace: recvAtRankSlot, inPlaceChecked: true,
	},
	reference.SendRecv: {
		busFactor: unitFactor, inPlace: sameBuffer,
	},
}

func init() {
	for i := range opTable {
		opTable[i].coll = reference.Collective(i)
	}
}

func (o *opSpec) name() string { return o.coll.String() }

// callCount is the count argument for a buffer of total elements.
func (o *opSpec) callCount(total, nranks int) int {
	if o.perRank {
		return total / nranks
	}
	return total
}
