package core

import (
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Stream is a device stream of the rank's plugin (loader.Stream); 0 on a
// host rank.
type Stream = loader.Stream

// AllReduce reduces count elements of send over all ranks with op and
// leaves the result in every rank's recv.
func (c *Comm) AllReduce(send, recv Buffer, count int, dt sdk.DataType, op sdk.RedOp, s Stream) error {
	c.task = task{name: "AllReduce", args: sdk.Call{Coll: sdk.AllReduce, Count: count, DType: dt, Op: op}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// Reduce reduces count elements of send over all ranks with op into
// root's recv (recv is unused on the other ranks).
func (c *Comm) Reduce(send, recv Buffer, count int, dt sdk.DataType, op sdk.RedOp, root int, s Stream) error {
	c.task = task{name: "Reduce", args: sdk.Call{Coll: sdk.Reduce, Count: count, DType: dt, Op: op, Root: root}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// Broadcast copies count elements of root's send into every rank's recv
// (send is unused on the other ranks).
func (c *Comm) Broadcast(send, recv Buffer, count int, dt sdk.DataType, root int, s Stream) error {
	c.task = task{name: "Broadcast", args: sdk.Call{Coll: sdk.Broadcast, Count: count, DType: dt, Root: root}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// AllGather gathers sendcount elements from every rank into every rank's
// recv, which holds Count() blocks of sendcount elements in rank order.
func (c *Comm) AllGather(send, recv Buffer, sendcount int, dt sdk.DataType, s Stream) error {
	c.task = task{name: "AllGather", args: sdk.Call{Coll: sdk.AllGather, Count: sendcount, DType: dt}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// ReduceScatter reduces send, Count() blocks of recvcount elements, over
// all ranks with op, and leaves block r of the result in rank r's recv.
func (c *Comm) ReduceScatter(send, recv Buffer, recvcount int, dt sdk.DataType, op sdk.RedOp, s Stream) error {
	c.task = task{name: "ReduceScatter", args: sdk.Call{Coll: sdk.ReduceScatter, Count: recvcount, DType: dt, Op: op}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// AlltoAll sends block p of send (count elements) to rank p, which puts it
// in block r of its recv, r being this rank: send and recv hold Count()
// blocks.
func (c *Comm) AlltoAll(send, recv Buffer, count int, dt sdk.DataType, s Stream) error {
	c.task = task{name: "AlltoAll", args: sdk.Call{Coll: sdk.AlltoAll, Count: count, DType: dt}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// AlltoAllv is AlltoAll with a count and a displacement per rank, all in
// elements: sendcounts[p] elements at sdispls[p] of send go to rank p,
// recvcounts[p] elements from rank p land at rdispls[p] of recv. Each
// slice has Count() entries, and rank p's sendcounts[r] must equal rank
// r's recvcounts[p].
func (c *Comm) AlltoAllv(send Buffer, sendcounts, sdispls []int, recv Buffer, recvcounts, rdispls []int, dt sdk.DataType, s Stream) error {
	c.task = task{name: "AlltoAllv", args: sdk.Call{Coll: sdk.AlltoAllv, DType: dt, SendCounts: sendcounts, SDispls: sdispls, RecvCounts: recvcounts, RDispls: rdispls},
		send: send, recv: recv, s: s}
	return c.enqueue()
}

// Gather collects count elements of every rank's send into root's recv,
// Count() blocks in rank order (recv is unused on the other ranks).
func (c *Comm) Gather(send, recv Buffer, count int, dt sdk.DataType, root int, s Stream) error {
	c.task = task{name: "Gather", args: sdk.Call{Coll: sdk.Gather, Count: count, DType: dt, Root: root}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// Scatter sends block r of root's send (Count() blocks of count elements)
// to rank r's recv (send is unused on the other ranks).
func (c *Comm) Scatter(send, recv Buffer, count int, dt sdk.DataType, root int, s Stream) error {
	c.task = task{name: "Scatter", args: sdk.Call{Coll: sdk.Scatter, Count: count, DType: dt, Root: root}, send: send, recv: recv, s: s}
	return c.enqueue()
}

// Barrier returns once every rank has entered it (a host barrier, which
// does not wait for work enqueued on streams). It is collective.
func (c *Comm) Barrier() error {
	c.task = task{name: "Barrier", args: sdk.Call{Coll: sdk.Barrier}}
	return c.enqueue()
}

// Send sends count elements of buf to rank peer, whose matching Recv
// names this rank with the same count and type. Outside a group it
// returns when the peer has the data; inside one it is deferred until
// GroupEnd, and buf must stay untouched until then.
func (c *Comm) Send(buf Buffer, count int, dt sdk.DataType, peer int, s Stream) error {
	c.task = task{name: "Send", kind: kindP2P, args: sdk.Call{Count: count, DType: dt}, peer: peer, send: buf, s: s}
	return c.enqueue()
}

// Recv receives count elements from rank peer into buf, matching the
// peer's Send; deferred inside a group like Send.
func (c *Comm) Recv(buf Buffer, count int, dt sdk.DataType, peer int, s Stream) error {
	c.task = task{name: "Recv", kind: kindP2P, args: sdk.Call{Count: count, DType: dt}, peer: peer, recvSide: true, send: buf, s: s}
	return c.enqueue()
}

// GroupStart opens a group: until the matching GroupEnd, the collectives
// (all but Barrier), Send and Recv of this rank are checked when they are
// called and deferred; GroupEnd runs them together, so that any pattern of
// sends and receives (a ring, an exchange with every peer) completes
// without deadlock, and many small collectives cost about one (NCCL's
// coalesced collectives). Groups nest; the outermost GroupEnd runs them.
// It is local to this rank.
//
// The buffers of a deferred call must stay untouched until GroupEnd
// returns (on a homogeneous device communicator: until the work it
// enqueued is done), and a grouped collective must not read what an
// earlier one of the group writes: small AllReduces of a group run as one.
func (c *Comm) GroupStart() { c.group++ }

// GroupEnd closes the group GroupStart opened and, at the outermost one,
// runs it: the collectives first, in the order they were called, then the
// sends and receives as one batch (the stream of the batch is the last
// one they named). Every rank calls the group's collectives in the same
// order (as outside a group), which makes that order deadlock-free. A
// group in which a call was invalid is not run at all
// (sdk.ErrInvalidUsage, naming that call's error). The communicator keeps
// none of the group's buffers once GroupEnd returns.
func (c *Comm) GroupEnd() error {
	if c.insp != nil {
		return c.groupInspected()
	}
	return c.settle("GroupEnd", c.groupEnd())
}
