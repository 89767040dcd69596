package core

import (
	"fmt"
	"slices"

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
// deadlock. How a run of tasks goes depends on the placement:
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

// queue checks the task the caller wrote into c.task inside a group and
// appends it to the group's queue. A bad call spoils the group: it is
// reported here, and GroupEnd then runs nothing.
func (c *Comm) queue(t *task) error {
	err := c.check(t)
	if err == nil && t.args.Coll == sdk.Barrier {
		err = fmt.Errorf("%w: Barrier on rank %d inside a group: a barrier cannot be grouped; call it after GroupEnd", sdk.ErrInvalidUsage, c.rank)
	}
	if err == nil && c.host != nil {
		err = c.checkGrouped(t)
	}
	if err != nil {
		if c.groupErr == nil {
			c.groupErr = err
		}
		return err
	}
	q := *t
	// The counts are the caller's slices: the queue keeps its own.
	a := &q.args
	a.SendCounts, a.SDispls = slices.Clone(a.SendCounts), slices.Clone(a.SDispls)
	a.RecvCounts, a.RDispls = slices.Clone(a.RecvCounts), slices.Clone(a.RDispls)
	c.groupTasks = append(c.groupTasks, q)
	return nil
}

// checkGrouped checks, on the host placement, what the host engine will
// check when the task runs (Engine.Check: the layout of send and recv,
// AlltoAllv's regions), and that a task fused with the AllReduces before
// it (fuseRun) does not read what they write: fused, every input is read
// before any result is written.
func (c *Comm) checkGrouped(t *task) error {
	if err := c.host.engine.Check(&t.args, t.send.host, t.recv.host); err != nil {
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

// runQueue runs a group's queued collectives in call order (see the top
// of this file) and lets go of the caller's memory, whatever happens.
func (c *Comm) runQueue(q []task) error {
	defer clear(q)
	for i := 0; i < len(q); {
		n, err := c.runGrouped(q[i:])
		if err != nil {
			return err
		}
		i += n
	}
	return nil
}

// runGrouped runs the tasks at the start of q that go together and says
// how many it ran.
func (c *Comm) runGrouped(q []task) (int, error) {
	switch {
	case c.host != nil:
		if n := firstRun(q); n > 1 {
			return n, c.runFused(q[:n])
		}
	case c.direct(q[0].args.Coll, q[0].args.DType, q[0].args.Op):
		n := 1
		for n < len(q) && c.direct(q[n].args.Coll, q[n].args.DType, q[n].args.Op) {
			n++
		}
		if n > 1 {
			return n, c.runVendorGroup(q[:n])
		}
	}
	c.task = q[0]
	return 1, c.enqueue()
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
	if err := c.host.run(&call, buf, buf); err != nil {
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
