package bench

import (
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// Comm is what the benchmark needs of a communicator beside the
// collectives it times: the rank, the size, and an exchange of host bytes
// for what the ranks agree on (timings, error counts, digests, devices),
// which with an empty send is the barrier before each timing. core.Comm
// is one (its HostAllGather touches no device and no stream, on device
// ranks too).
type Comm interface {
	Rank() int
	Count() int
	HostAllGather(send, recv []byte) error
}

var _ Comm = (*core.Comm)(nil)

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

// opSpec is one collective as the benchmark runs it; what the collective
// is (its buffers' extents, in-place layout, bus bandwidth factor) is
// sdk's table of collectives (sdk.CollInfo).
type opSpec struct {
	coll sdk.Collective
	// perRank is true when the call count is the buffer's element count
	// divided by the rank count (rounded down, as nccl-tests does): a
	// buffer holds a block per rank.
	perRank bool
	// inPlace is where send and recv lie in the in-place buffer; where the
	// collective has no in-place form (as in nccl-tests: AlltoAll,
	// AlltoAllv, SendRecv) both are the buffer's start: it is timed, but
	// its result shows N/A (inPlaceChecked false).
	inPlace        sdk.InPlace
	inPlaceChecked bool
}

// opTable has one entry per collective, in sdk.Collective order (Barrier's
// is unused: it moves no data, and `all` runs sdk.AllCollectives).
var opTable [sdk.NumCollectives]opSpec

func init() {
	for i := range opTable {
		d := sdk.Collective(i).Info()
		opTable[i] = opSpec{coll: d.Coll, perRank: d.Send.PerRank() || d.Recv.PerRank(),
			inPlace: d.InPlace, inPlaceChecked: d.InPlace != sdk.InPlaceNone}
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
