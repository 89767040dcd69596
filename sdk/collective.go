package sdk

import (
	"fmt"
	"strings"
)

// Collective names a collective operation. It is the one vocabulary of
// every layer: the schedules (internal/sched), the exact references
// (conformance/reference), the benchmark and the conformance suite all use
// it, so that a collective is added in one place.
type Collective int

// The collectives, in NCCL's and FlagCX's order: the order `flagcx bench
// all` runs them, and the numbers that seed its inputs.
const (
	AllReduce Collective = iota
	Reduce
	Broadcast
	AllGather
	ReduceScatter
	AlltoAll
	AlltoAllv
	Gather
	Scatter
	// SendRecv is a group of sends and receives (GroupStart ... GroupEnd).
	// As a Call it is one send and one receive (the benchmark's ring); a
	// schedule's SendRecv holds any number of transfers (sched.Xfer), as a
	// group of Send and Recv calls issues them.
	SendRecv
	// Barrier is FlagCX's flagcxBarrier: every rank waits until all have
	// entered it. It is a value here rather than a step kind of the
	// schedules because a call and a schedule's steps name it as they name
	// the others; but it moves no data, so it has no buffers, no reference
	// result and no bus bandwidth: AllCollectives and ParseCollective leave
	// it out, and Dispatch does not take it (communicators have Barrier()).
	Barrier
	// NumCollectives bounds the values (Barrier included).
	NumCollectives
)

// AllCollectives lists every collective that moves data (all but Barrier)
// in numbering order: what `flagcx bench all` runs and the conformance
// matrices check.
func AllCollectives() []Collective {
	all := make([]Collective, 0, Barrier)
	for c := AllReduce; c < Barrier; c++ {
		all = append(all, c)
	}
	return all
}

// CollectiveNames lists the names ParseCollective accepts, in order.
func CollectiveNames() []string {
	names := make([]string, 0, Barrier)
	for _, c := range AllCollectives() {
		names = append(names, collectives[c].Name)
	}
	return names
}

// ParseCollective reads the name of a collective of AllCollectives
// ("allreduce", "sendrecv", ...; any case, spaces around ignored).
func ParseCollective(s string) (Collective, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for _, c := range AllCollectives() {
		if collectives[c].Name == name {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown collective %q (use one of %s)", ErrInvalidArgument, s, strings.Join(CollectiveNames(), ", "))
}

// Valid reports whether c is one of the collectives (Barrier included).
func (c Collective) Valid() bool { return c >= 0 && c < NumCollectives }

// String is c's lower-case name ("allreduce"), as ParseCollective reads it.
func (c Collective) String() string {
	if !c.Valid() {
		return fmt.Sprintf("collective(%d)", int(c))
	}
	return collectives[c].Name
}

// Title is c's name as the API spells it ("AllReduce"), which plans and
// errors print.
func (c Collective) Title() string {
	if !c.Valid() {
		return fmt.Sprintf("coll(%d)", int(c))
	}
	return collectives[c].Title
}

// Reduces reports whether c takes a reduction operation.
func (c Collective) Reduces() bool { return c.Valid() && collectives[c].Reduces }

// Rooted reports whether c takes a root rank.
func (c Collective) Rooted() bool { return c.Valid() && collectives[c].Rooted }

// BusFactor converts c's algorithm bandwidth on n ranks to bus bandwidth,
// as nccl-tests defines them, so that figures compare with its tables and
// across rank counts. It is 0 for Barrier, which moves no data.
func (c Collective) BusFactor(n int) float64 {
	if !c.Valid() {
		return 0
	}
	return collectives[c].Bus.factor(n)
}

// Call is one rank's call of a collective, without its buffers: the
// arguments the communicators' methods take. A caller builds it once and
// issues it with Dispatch on whichever buffers (out of place, in place)
// and communicator it has.
type Call struct {
	Coll Collective
	// Count is the count argument: elements per rank for AllReduce,
	// Reduce, Broadcast and SendRecv; the per-rank block for AllGather
	// (sendcount), ReduceScatter (recvcount), AlltoAll (per peer), Gather
	// and Scatter. AlltoAllv takes its counts below.
	Count int
	DType DataType
	Op    RedOp // reducing collectives only
	Root  int   // rooted collectives only
	// AlltoAllv's counts and displacements, in elements, one per rank.
	SendCounts, SDispls, RecvCounts, RDispls []int
	// SendRecv's peers: this rank sends Count elements to SendPeer and
	// receives Count elements from RecvPeer, in one group.
	SendPeer, RecvPeer int
}

// Collectives is what Dispatch needs of a communicator: one method per
// collective, with the signatures the communicators have (core.Comm,
// the plugins' loader.Comm), over buffers B and streams S.
// SendRecv is a Send and a Recv in one group, which the communicator must
// also offer as a Grouper.
type Collectives[B, S any] interface {
	AllReduce(send, recv B, count int, dt DataType, op RedOp, s S) error
	Reduce(send, recv B, count int, dt DataType, op RedOp, root int, s S) error
	Broadcast(send, recv B, count int, dt DataType, root int, s S) error
	AllGather(send, recv B, sendcount int, dt DataType, s S) error
	ReduceScatter(send, recv B, recvcount int, dt DataType, op RedOp, s S) error
	AlltoAll(send, recv B, count int, dt DataType, s S) error
	AlltoAllv(send B, sendcounts, sdispls []int, recv B, recvcounts, rdispls []int, dt DataType, s S) error
	Gather(send, recv B, count int, dt DataType, root int, s S) error
	Scatter(send, recv B, count int, dt DataType, root int, s S) error
	Send(buf B, count int, dt DataType, peer int, s S) error
	Recv(buf B, count int, dt DataType, peer int, s S) error
}

// Grouper is a communicator that groups its own sends and receives. It is
// apart from Collectives because a plugin's communicator has no groups of
// its own (the library groups every call of the thread), and it is needed
// only for SendRecv.
type Grouper interface {
	GroupStart()
	GroupEnd() error
}

// Dispatch issues call on c with this rank's send and recv buffers on
// stream s. It is the one place that turns a collective into the method
// that runs it; a caller that has a Call never switches on the collective.
func Dispatch[B, S any](c Collectives[B, S], call Call, send, recv B, s S) error {
	switch call.Coll {
	case AllReduce:
		return c.AllReduce(send, recv, call.Count, call.DType, call.Op, s)
	case Reduce:
		return c.Reduce(send, recv, call.Count, call.DType, call.Op, call.Root, s)
	case Broadcast:
		return c.Broadcast(send, recv, call.Count, call.DType, call.Root, s)
	case AllGather:
		return c.AllGather(send, recv, call.Count, call.DType, s)
	case ReduceScatter:
		return c.ReduceScatter(send, recv, call.Count, call.DType, call.Op, s)
	case AlltoAll:
		return c.AlltoAll(send, recv, call.Count, call.DType, s)
	case AlltoAllv:
		return c.AlltoAllv(send, call.SendCounts, call.SDispls, recv, call.RecvCounts, call.RDispls, call.DType, s)
	case Gather:
		return c.Gather(send, recv, call.Count, call.DType, call.Root, s)
	case Scatter:
		return c.Scatter(send, recv, call.Count, call.DType, call.Root, s)
	case SendRecv:
		g, ok := c.(Grouper)
		if !ok {
			return fmt.Errorf("%w: SendRecv needs a communicator with groups of its own; %T has none", ErrInvalidUsage, c)
		}
		// The group lets every rank post its send before its receive
		// without deadlock; its end runs even after a failed post, so that
		// the communicator is not left inside a group.
		g.GroupStart()
		err := c.Send(send, call.Count, call.DType, call.SendPeer, s)
		if err == nil {
			err = c.Recv(recv, call.Count, call.DType, call.RecvPeer, s)
		}
		if gerr := g.GroupEnd(); err == nil {
			err = gerr
		}
		return err
	}
	return fmt.Errorf("%w: %v is not a collective Dispatch issues", ErrInvalidArgument, call.Coll)
}

// MsgBytes is the call's size on n ranks as nccl-tests reports it (its
// "size" column, from which algbw and busbw follow): the larger of its
// send and receive buffers, in bytes; for AlltoAllv, the larger of the
// sums of its counts.
func (c *Call) MsgBytes(n int) int64 {
	send, recv := c.Coll.BufElems(c.Count, n)
	if c.Coll == AlltoAllv {
		send, recv = 0, 0
		for _, k := range c.SendCounts {
			send += k
		}
		for _, k := range c.RecvCounts {
			recv += k
		}
	}
	return int64(max(send, recv)) * int64(c.DType.Size())
}
