package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/sdk"
)

// Grouped collectives. Between GroupStart and the outermost GroupEnd a
// collective is checked when it is called (a bad one fails at once and
// spoils the group, as a bad Send does) and queued as its task; GroupEnd
// runs the queue in call order, then the group's sends and receives as
// one batch. Every rank issues the same collectives in the same order
// (NCCL's rule), so every rank runs them in the same order, and no rank
// waits in the batch for a peer still in a collective: the order cannot
// deadlock. How a run of tasks goes is its runner's (runner.fuse in
// enqueue.go):
//
//   - host engine: consecutive small AllReduces of one type and op are
//     one AllReduce over a packed buffer (runFused), the others one by one;
//   - vendor direct: consecutive direct tasks inside one group of the
//     vendor library (its GroupStart/GroupEnd), enqueued on their streams;
//   - shared-memory plane and plan executor: one by one, in call order.

// fuseLimit is the most bytes a fused AllReduce packs: the host engine's
// small-message limit, under which a call's cost is its latency, so that
// packing saves calls and costs a copy of little.
const fuseLimit = host.DefaultSmallLimit

// checkQueued checks a collective called inside a group, as it will run
// and as it will run beside the collectives queued before it.
func (c *Comm) checkQueued(t *task) error {
	err := c.check(t)
	if err == nil && t.args.Coll == sdk.Barrier {
		err = fmt.Errorf("%w: Barrier on rank %d inside a group: a barrier cannot be grouped; call it after GroupEnd", sdk.ErrInvalidUsage, c.rank)
	}
	if err == nil && c.host != nil {
		err = c.checkGrouped(t)
	}
	return err
}

// checkGrouped checks, on the host placement, what the host engine will
// check when the task runs (Engine.Check: the layout of send and recv,
// AlltoAllv's regions), and that a task fused with the AllReduces before
// it (fuseRun) does not read what they write: fused, every input is read
// before any result is written.
func (c *Comm) checkGrouped(t *task) error {
	if err := c.host.Engine().Check(&t.args, t.send.host, t.recv.host); err != nil {
		return fmt.Errorf("%s on rank %d: %w", t.name, c.rank, err)
	}
	sendB, _, _ := t.args.Check(c.rank, c.n)
	q := append(c.groupTasks, *t) // the queue as it would be
	defer func() { q[len(q)-1] = task{} }()
	for i := len(q) - fuseRun(q); i < len(q)-1; i++ {
		a := &q[i].args
		if host.Overlap(q[i].recv.host[:a.Count*a.DType.Size()], t.send.host[:sendB]) {
			return fmt.Errorf("%w: %s on rank %d inside a group reads the recv buffer of the group's collective %d (an AllReduce): small AllReduces of a group run as one, which reads every input before it writes any result; use another send buffer or call GroupEnd first",
				sdk.ErrInvalidUsage, t.name, c.rank, i+1)
		}
	}
	return nil
}

// firstRun is how many tasks at the start of q (not empty) run as one
// fused AllReduce (1: the first runs alone): consecutive AllReduces of
// one type and op within fuseLimit. It reads the calls only, never the
// buffers, so that every rank cuts its queue alike.
func firstRun(q []task) int {
	bytes := q[0].args.Count * q[0].args.DType.Size()
	n := 1
	for ; n < len(q) && fusable(&q[0].args, &q[n].args); n++ {
		b := q[n].args.Count * q[n].args.DType.Size()
		if bytes+b > fuseLimit {
			break
		}
		bytes += b
	}
	return n
}

// fuseRun is how many tasks at the end of q (not empty) run together, q
// being cut into runs from its start as runQueue cuts it.
func fuseRun(q []task) int {
	for start := 0; ; {
		n := firstRun(q[start:])
		if start+n == len(q) {
			return n
		}
		start += n
	}
}

// fusable: b may join a fused AllReduce that starts with a.
func fusable(a, b *sdk.Call) bool {
	return a.Coll == sdk.AllReduce && b.Coll == sdk.AllReduce && a.DType == b.DType && a.Op == b.Op
}

// fuseHost: consecutive small AllReduces of one type and op run as one
// on the host engine (firstRun).
func (c *Comm) fuseHost(q []task) int { return firstRun(q) }

// fuseDirect: consecutive tasks the vendor library takes directly run in
// one group of the library.
func (c *Comm) fuseDirect(q []task) int {
	n := 1
	for n < len(q) && c.direct(q[n].args.Coll, q[n].args.DType, q[n].args.Op) {
		n++
	}
	return n
}

// runFused runs q, AllReduces of one type and op on the host placement,
// as one AllReduce in place over their inputs packed end to end: a small
// AllReduce costs its latency, which the group then pays once. Each
// element is reduced as its own call would reduce it (the engine reduces
// element by element), so the results are those of the separate calls.
func (c *Comm) runFused(q []task) error {
	if err := c.usable("GroupEnd"); err != nil {
		return err
	}
	a := q[0].args
	size, total := a.DType.Size(), 0
	for i := range q {
		total += q[i].args.Count * size
	}
	if cap(c.fused) < total {
		c.fused = make([]byte, fuseLimit)
	}
	buf := c.fused[:total]
	off := 0
	for i := range q {
		off += copy(buf[off:], q[i].send.host[:q[i].args.Count*size])
	}
	call := sdk.Call{Coll: sdk.AllReduce, Count: total / size, DType: a.DType, Op: a.Op}
	if err := c.host.Run(&call, buf, buf); err != nil {
		return fmt.Errorf("%d AllReduces of a group, run as one: %w", len(q), err)
	}
	off = 0
	for i := range q {
		off += copy(q[i].recv.host[:q[i].args.Count*size], buf[off:])
	}
	return nil
}

// runVendorGroup enqueues q, tasks the vendor library takes directly, in
// one group of the library, as NCCL's own grouped collectives go.
func (c *Comm) runVendorGroup(q []task) error {
	if err := c.dev.GroupStart(); err != nil {
		return c.callError("GroupEnd", err)
	}
	var err error
	for i := range q {
		if err = c.runDirect(&q[i]); err != nil {
			break
		}
	}
	if gerr := c.dev.GroupEnd(); err == nil && gerr != nil {
		err = c.callError("GroupEnd", gerr)
	}
	return err
}

// groupEnd closes a level of the group and, at the outermost, runs it:
// its collectives in call order, then its sends and receives as one
// batch through the funnel's runners.
func (c *Comm) groupEnd() error {
	if c.group == 0 {
		return fmt.Errorf("%w: GroupEnd without GroupStart on rank %d", sdk.ErrInvalidUsage, c.rank)
	}
	c.group--
	if c.group > 0 {
		return nil
	}
	q, gerr := c.groupTasks, c.groupErr
	c.groupTasks, c.groupErr = q[:0], nil
	defer c.dropP2P()
	if gerr != nil {
		clear(q)
		return fmt.Errorf("%w: the group was not run because an operation in it was invalid: %w", sdk.ErrInvalidUsage, gerr)
	}
	if err := c.runQueue(q); err != nil {
		return err
	}
	if len(c.groupOps) == 0 {
		return nil
	}
	c.task = task{name: "GroupEnd", kind: kindBatch, args: sdk.Call{Coll: sdk.SendRecv}, s: c.groupStrm, ops: c.groupOps, user: c.groupBufs}
	err := c.runTask(&c.task)
	c.task.user, c.task.ops, c.task.plan = nil, nil, nil
	return err
}

// dropP2P forgets the group's sends and receives, run or not, keeping
// their lists for the next group.
func (c *Comm) dropP2P() {
	clear(c.groupBufs)
	c.groupOps, c.groupBufs, c.groupStrm = c.groupOps[:0], c.groupBufs[:0], 0
}
