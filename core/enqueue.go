package core

import (
	"fmt"
	"slices"

	"github.com/flagcx/flagcx-go/core/internal/inspect"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// The funnel. Every data movement of Comm (its collectives, Send and Recv,
// the sends and receives of a group, HostAllGather) is one task that
// enqueue checks once (check.go, one check per kind of task) and hands to
// the first runner of the table that takes it, as NCCL's ncclEnqueueCheck
// -> ArgsCheck -> taskAppend does. Inside a group a task is checked and
// queued instead, and GroupEnd runs the queue through the same table
// (group.go). What every call must pass (tracing, records, policy) has
// this one place to go.

// kind is what a task moves.
type kind uint8

const (
	kindColl    kind = iota // a collective: args
	kindP2P                 // one Send or Recv: args.Count, args.DType, peer, recvSide, send
	kindBatch               // a group's sends and receives together: ops, user
	kindHostNet             // HostAllGather: host memory over the host network, on every placement
)

// task is one call on its way through the funnel.
type task struct {
	name       string   // the operation, as errors name it
	kind       kind     // what it moves
	args       sdk.Call // the call as the API took it
	send, recv Buffer
	s          Stream
	// One Send or Recv (kindP2P): its peer and direction.
	peer     int
	recvSide bool
	// A group's transfers and buffers (kindBatch; args.Coll == SendRecv).
	ops  []sched.Xfer
	user []Buffer
	plan *sched.Plan // built by the first runner that needs it
}

// runner is one way a task can run.
type runner struct {
	name string
	// checks: the runner checks the call itself with sdk's checker (the
	// host engine does, and its callers beside Comm rely on it), so that
	// enqueue does not check it twice; enqueue checks the call for every
	// later runner.
	checks bool
	takes  func(c *Comm, t *task) (bool, error)
	run    func(c *Comm, t *task) error
	// fuse, for a runner that runs several queued tasks of a group as
	// one, says how many tasks at the start of q (which it takes) go
	// together, reading the calls only, never the buffers, so that every
	// rank cuts its queue alike; runMany runs them. Nil: one by one.
	fuse    func(c *Comm, q []task) int
	runMany func(c *Comm, q []task) error
	// enqueues: the call returns once its work is enqueued on the
	// caller's stream (a record then times the enqueue, not the work).
	enqueues bool
}

// runners in the order they are asked. The host engine comes first: it
// is the latency baseline of host-only jobs (docs/architecture.md,
// decision 14), and its check is the engine's own, so a host call skips
// check.go. The host network takes HostAllGather's tasks on every
// placement, checked by check.go (checkHostNet) like every later runner's.
var runners = [...]runner{
	{name: "host engine", checks: true, takes: (*Comm).takesHost, run: (*Comm).runHost, fuse: (*Comm).fuseHost, runMany: (*Comm).runFused},
	{name: "host network", takes: (*Comm).takesHostNet, run: (*Comm).runHostNet},
	{name: "vendor direct", takes: (*Comm).takesDirect, run: (*Comm).runDirect, fuse: (*Comm).fuseDirect, runMany: (*Comm).runVendorGroup, enqueues: true},
	{name: "shared-memory plane", takes: (*Comm).takesShm, run: (*Comm).runShmTask},
	{name: "plan executor", takes: (*Comm).takesPlan, run: (*Comm).runPlan},
}

// enqueue runs the task the caller wrote into c.task on the first runner
// that takes it. The task lives in the communicator while it runs: handed
// to the runners by pointer, a task of the caller's frame would escape to
// the heap, an allocation on every call of the host placement's latency
// path; and written there at once, it is not copied on the way.
//
// Inside a group a task is checked and queued instead (queue), and
// GroupEnd runs the queue.
func (c *Comm) enqueue() error {
	var rec *inspect.Call
	if c.insp != nil && c.group == 0 {
		rec = c.startRecord() // FLAGCX_INSPECT, FLAGCX_METRICS (inspect.go)
	}
	t := &c.task
	var err error
	switch {
	case c.group > 0:
		err = c.queue(t)
	case t.kind == kindP2P:
		err = c.runP2P(t)
	default:
		err = c.runTask(t)
	}
	if rec != nil {
		c.finishRecord(rec, err)
	}
	t.send, t.recv, t.user, t.plan = Buffer{}, Buffer{}, nil, nil // keep no caller memory
	return c.settle(t.name, err)
}

// pick finds the runner of t, checking t (check.go) before the first
// runner that does not check it itself.
func (c *Comm) pick(t *task) (*runner, error) {
	checked := false
	for i := range runners {
		r := &runners[i]
		if !r.checks && !checked {
			if err := c.check(t); err != nil {
				return nil, err
			}
			checked = true
		}
		ok, err := r.takes(c, t)
		if err != nil {
			return nil, fmt.Errorf("%s on rank %d: %w", t.name, c.rank, err)
		}
		if ok {
			if c.debug.init && !c.pathLogged && t.kind != kindHostNet {
				c.logFirstPath(r.name, t)
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: %s on rank %d: no runner takes it", sdk.ErrInternalError, t.name, c.rank)
}

// runTask runs t on its runner.
func (c *Comm) runTask(t *task) error {
	r, err := c.pick(t)
	if err != nil {
		return err
	}
	c.calls++
	c.ranBy = r // the records' runner (inspect.go)
	return r.run(c, t)
}

// runP2P runs one Send or Recv outside a group: checked as itself, it
// runs as a group of one, in the communicator's own one-element batch (no
// allocation on the host latency path). t is c.task, rewritten in place.
func (c *Comm) runP2P(t *task) error {
	if err := c.checkP2P(t); err != nil {
		return err
	}
	x, buf := t.xfer()
	c.oneX[0], c.oneU[0] = x, buf
	*t = task{name: t.name, kind: kindBatch, args: sdk.Call{Coll: sdk.SendRecv}, s: t.s, ops: c.oneX[:], user: c.oneU[:]}
	err := c.runTask(t)
	c.oneU[0] = Buffer{}
	return err
}

// xfer is a checked Send's or Recv's transfer and buffer.
func (t *task) xfer() (sched.Xfer, Buffer) {
	n := t.args.Count * t.args.DType.Size()
	return sched.Xfer{Peer: t.peer, Recv: t.recvSide, Bytes: n}, t.send
}

// queue checks the task the caller wrote into c.task inside a group and
// adds it to the group: a collective to the queue GroupEnd runs first, a
// Send or Recv to the batch it runs after. A bad call spoils the group:
// it is reported here, and GroupEnd then runs nothing.
func (c *Comm) queue(t *task) error {
	var err error
	switch t.kind {
	case kindP2P:
		if err = c.checkP2P(t); err == nil {
			x, buf := t.xfer()
			c.groupOps = append(c.groupOps, x)
			c.groupBufs = append(c.groupBufs, buf)
			c.groupStrm = t.s
			return nil
		}
	case kindHostNet:
		err = fmt.Errorf("%w: %s on rank %d inside a group: call GroupEnd first", sdk.ErrInvalidUsage, t.name, c.rank)
	default:
		err = c.checkQueued(t)
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

// runQueue runs a group's queued collectives in call order, each run of
// tasks that a runner fuses as one (runner.fuse), and lets go of the
// caller's memory, whatever happens.
func (c *Comm) runQueue(q []task) error {
	defer clear(q)
	for i := 0; i < len(q); {
		r, err := c.pick(&q[i])
		if err != nil {
			return err
		}
		n := 1
		if r.fuse != nil {
			n = r.fuse(c, q[i:])
		}
		c.calls += uint64(n)
		c.ranBy = r
		if n > 1 {
			err = r.runMany(c, q[i:i+n])
		} else {
			c.task = q[i]
			err = r.run(c, &c.task)
			c.task.send, c.task.recv, c.task.user, c.task.plan = Buffer{}, Buffer{}, nil, nil
		}
		if err != nil {
			return err
		}
		i += n
	}
	return nil
}
