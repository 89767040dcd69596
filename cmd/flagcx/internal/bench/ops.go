package bench

import (
	"github.com/flagcx/flagcx-go/internal/coreview"
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
// a core.Comm's host communicator (coreview.View.Host) is one.
type Comm interface {
	coreview.HostCalls
	Rank() int
	Count() int
	Barrier() error
}

var _ Comm = coreview.HostComm(nil)

// region is a byte range of a benchmark buffer.
type region struct {
	buf    Buf
	off, n int
}

// host is the region as host memory; only for buffers the host addresses.
func (r region) host() []byte { return r.buf.Host()[r.off : r.off+r.n] }

// call is one collective call on one rank: its arguments and its buffers.
type call struct {
	args       sdk.Call
	send, recv region
}

// opSpec is one row of the op table: how the benchmark sizes and lays out
// a collective's buffers (what the collective itself is, its bus bandwidth
// factor included, is sdk.Collective's).
type opSpec struct {
	coll sdk.Collective
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

// opTable has one entry per collective, in sdk.Collective order (Barrier's
// is unused: it moves no data, and `all` runs sdk.AllCollectives).
var opTable = [sdk.NumCollectives]opSpec{
	sdk.AllReduce:     {inPlace: sameBuffer, inPlaceChecked: true},
	sdk.Reduce:        {inPlace: sameBuffer, inPlaceChecked: true},
	sdk.Broadcast:     {inPlace: sameBuffer, inPlaceChecked: true},
	sdk.AllGather:     {perRank: true, inPlace: sendAtRankSlot, inPlaceChecked: true},
	sdk.ReduceScatter: {perRank: true, inPlace: recvAtRankSlot, inPlaceChecked: true},
	sdk.AlltoAll:      {perRank: true, inPlace: sameBuffer},
	sdk.AlltoAllv:     {perRank: true, inPlace: sameBuffer},
	sdk.Gather:        {perRank: true, inPlace: sendAtRankSlot, inPlaceChecked: true},
	sdk.Scatter:       {perRank: true, inPlace: recvAtRankSlot, inPlaceChecked: true},
	sdk.SendRecv:      {inPlace: sameBuffer},
}

func init() {
	for i := range opTable {
		opTable[i].coll = sdk.Collective(i)
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
