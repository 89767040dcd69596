package core

import (
	"fmt"

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
	if c.host != nil {
		return c.settle("Send", c.hostP2P("Send", buf, count, dt, peer, false))
	}
	return c.settle("Send", c.p2p("Send", buf, count, dt, peer, false, s))
}

// Recv receives count elements from rank peer into buf, matching the
// peer's Send; deferred inside a group like Send.
func (c *Comm) Recv(buf Buffer, count int, dt sdk.DataType, peer int, s Stream) error {
	if c.host != nil {
		return c.settle("Recv", c.hostP2P("Recv", buf, count, dt, peer, true))
	}
	return c.settle("Recv", c.p2p("Recv", buf, count, dt, peer, true, s))
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
func (c *Comm) GroupStart() {
	c.group++
	if c.host != nil {
		c.host.groupStart()
	}
}

// GroupEnd closes the group GroupStart opened and, at the outermost one,
// runs it: the collectives first, in the order they were called, then the
// sends and receives as one batch (the stream of the batch is the last
// one they named). Every rank calls the group's collectives in the same
// order (as outside a group), which makes that order deadlock-free. A
// group in which a call was invalid is not run at all
// (sdk.ErrInvalidUsage, naming that call's error). The communicator keeps
// none of the group's buffers once GroupEnd returns.
func (c *Comm) GroupEnd() error { return c.settle("GroupEnd", c.groupEnd()) }

func (c *Comm) groupEnd() error {
	if c.group == 0 {
		return fmt.Errorf("%w: GroupEnd without GroupStart on rank %d", sdk.ErrInvalidUsage, c.rank)
	}
	c.group--
	if c.group > 0 {
		if c.host != nil {
			return c.host.groupEnd() // closes a level: runs nothing
		}
		return nil
	}
	q, gerr := c.groupTasks, c.groupErr
	c.groupTasks, c.groupErr = q[:0], nil
	if c.host != nil && gerr == nil {
		gerr = c.host.groupErr
	}
	if gerr != nil {
		clear(q)
		c.dropP2P()
		return fmt.Errorf("%w: the group was not run because an operation in it was invalid: %w", sdk.ErrInvalidUsage, gerr)
	}
	if err := c.runQueue(q); err != nil {
		c.dropP2P()
		return err
	}
	if c.host != nil {
		return c.host.groupEnd()
	}
	ops, s := c.groupOps, c.groupStrm
	c.groupOps, c.groupStrm = nil, 0
	if len(ops) == 0 && len(q) > 0 {
		return nil // collectives only
	}
	return c.runGroup("GroupEnd", ops, s)
}

// dropP2P forgets the sends and receives of a group that is not run.
func (c *Comm) dropP2P() {
	c.groupOps, c.groupStrm = nil, 0
	if c.host != nil {
		c.host.dropGroup()
	}
}

// hostP2P is Send or Recv on the host placement, where groups are the host
// communicator's: arguments it cannot check (device memory, a closed
// communicator) are checked here, with the general path's errors.
func (c *Comm) hostP2P(name string, buf Buffer, count int, dt sdk.DataType, peer int, recv bool) error {
	h := c.host
	if buf.dev || c.down.Load() {
		err := c.usable(name)
		if err == nil {
			var n int
			if n, err = sdk.CheckCount("count", count, dt, 1); err == nil {
				err = c.checkBuf(name, "buffer", buf, n)
			}
			if err != nil {
				err = fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
			}
		}
		if err != nil {
			if h.group > 0 && h.groupErr == nil {
				h.groupErr = err
			}
			return err
		}
		buf = Buffer{} // no element: nothing of buf is used
	}
	return h.p2p(name, buf.host, count, dt, peer, recv)
}
