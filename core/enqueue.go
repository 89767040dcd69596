package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// The funnel. Every collective of Comm (and every group of sends and
// receives) is one task that enqueue checks once, with sdk's one checker,
// and hands to the first runner of the table that takes it, as NCCL's
// ncclEnqueueCheck -> ArgsCheck -> taskAppend does.

// task is one call on its way through the funnel.
type task struct {
	name       string   // the operation, as errors name it
	args       sdk.Call // the call as the API took it
	send, recv Buffer
	s          Stream
	// A group's transfers and buffers (args.Coll == SendRecv).
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
}

// runners in the order they are asked. The host engine comes first: it is
// the latency baseline of host-only jobs (docs/architecture.md, decision
// 14), and its check is the engine's own.
var runners = [...]runner{
	{name: "host engine", checks: true, takes: (*Comm).takesHost, run: (*Comm).runHost},
	{name: "vendor direct", takes: (*Comm).takesDirect, run: (*Comm).runDirect},
	{name: "shared-memory plane", takes: (*Comm).takesShm, run: (*Comm).runShmTask},
	{name: "plan executor", takes: (*Comm).takesPlan, run: (*Comm).runPlan},
}

// enqueue runs the task the caller wrote into c.task on the first runner
// that takes it. The task lives in the communicator while it runs: handed
// to the runners by pointer, a task of the caller's frame would escape to
// the heap, an allocation on every call of the host placement's latency
// path; and written there at once, it is not copied on the way.
//
// Inside a group a collective is checked and queued instead (queue,
// group.go), and GroupEnd runs the queue.
func (c *Comm) enqueue() error {
	var err error
	if c.group > 0 {
		err = c.queue(&c.task)
	} else {
		err = c.runTask(&c.task)
	}
	c.task.send, c.task.recv, c.task.user, c.task.plan = Buffer{}, Buffer{}, nil, nil // keep no caller memory
	return c.settle(c.task.name, err)
}

// runTask asks the runners in order.
func (c *Comm) runTask(t *task) error {
	c.calls++
	checked := false
	for i := range runners {
		r := &runners[i]
		if !r.checks && !checked {
			if err := c.check(t); err != nil {
				return err
			}
			checked = true
		}
		ok, err := r.takes(c, t)
		if err != nil {
			return fmt.Errorf("%s on rank %d: %w", t.name, c.rank, err)
		}
		if ok {
			if c.debug.init && !c.pathLogged {
				c.logFirstPath(r.name, t)
			}
			return r.run(c, t)
		}
	}
	return fmt.Errorf("%w: %s on rank %d: no runner takes it", sdk.ErrInternalError, t.name, c.rank)
}

// check validates t on this rank: a communicator still usable, the
// arguments (sdk's checker) and the buffers (this rank's kind of memory,
// large enough).
func (c *Comm) check(t *task) error {
	if err := c.usable(t.name); err != nil {
		return err
	}
	call := &t.args
	var err error
	if call.Coll == sdk.SendRecv {
		err = sched.Validate(sched.Call{Coll: sdk.SendRecv, Ops: t.ops}, c.n)
	} else {
		var sendB, recvB int
		sendB, recvB, err = call.Check(c.rank, c.n)
		if err == nil {
			err = c.checkBuffer(call, "send", t.send, sendB)
		}
		if err == nil {
			err = c.checkBuffer(call, "recv", t.recv, recvB)
		}
	}
	if err != nil {
		return fmt.Errorf("%s on rank %d: %w", t.name, c.rank, err)
	}
	return nil
}

// takesHost: the host placement, on host memory, on a
// communicator still open; otherwise the later runners say what is wrong.
func (c *Comm) takesHost(t *task) (bool, error) {
	return c.host != nil && !t.send.dev && !t.recv.dev && !c.down.Load() && t.args.Coll != sdk.SendRecv, nil
}

func (c *Comm) runHost(t *task) error { return c.host.run(&t.args, t.send.host, t.recv.host) }

// takesDirect: the vendor library's own call (see direct).
func (c *Comm) takesDirect(t *task) (bool, error) {
	return c.direct(t.args.Coll, t.args.DType, t.args.Op), nil
}

// runDirect enqueues the library's call of the same name on t.s.
func (c *Comm) runDirect(t *task) error {
	if err := sdk.Dispatch(c.vendorCalls(), t.args, t.send.ptr, t.recv.ptr, t.s); err != nil {
		return c.callError(t.name, err)
	}
	return nil
}

// planOf builds t's plan once.
func (c *Comm) planOf(t *task) (*sched.Plan, error) {
	if t.plan != nil {
		return t.plan, nil
	}
	a := &t.args
	key, cached := planKey{coll: a.Coll, count: a.Count, dtype: a.DType, op: a.Op, root: a.Root}, a.Coll != sdk.SendRecv && a.Coll != sdk.AlltoAllv
	if p := c.plans[key]; cached && p != nil {
		t.plan = p
		return p, nil
	}
	call := sched.CallOf(t.args)
	if t.args.Coll == sdk.SendRecv {
		call = sched.Call{Coll: sdk.SendRecv, Ops: t.ops}
	}
	p, err := sched.Build(c.layout, c.rank, call, c.opts)
	t.plan = p
	if err == nil && cached {
		if c.plans == nil || len(c.plans) >= maxPlans {
			c.plans = make(map[planKey]*sched.Plan, maxPlans)
		}
		c.plans[key] = p
	}
	return p, err
}

// planKey is what a plan depends on besides its communicator (whose
// layout and options never change), for every call but a group's and
// AlltoAllv's, whose transfers and counts vary. Building a small
// heterogeneous call's plan took 3.5 us and 13 allocations on the 2-core
// VM, a fifth of its latency; a job repeats a few shapes, so each
// communicator keeps the plans of up to maxPlans of them (immutable once
// built: executors only read them).
type planKey struct {
	coll  sdk.Collective
	count int
	dtype sdk.DataType
	op    sdk.RedOp
	root  int
}

const maxPlans = 64

// takesShm: every rank on one host, where the plan is the shared-memory
// plane's (sched.PathShm).
func (c *Comm) takesShm(t *task) (bool, error) {
	if c.shm == nil {
		return false, nil
	}
	p, err := c.planOf(t)
	return err == nil && p.Path == sched.PathShm, err
}

func (c *Comm) runShmTask(t *task) error {
	defer c.label(t.plan.Call)()
	c.tracePlan(t.plan)
	if err := c.runShm(t.plan, &callBufs{send: t.send, recv: t.recv, user: t.user}, t.s); err != nil {
		return c.callError(t.name, c.failure(t.plan, err))
	}
	return nil
}

// takesPlan: every call has a plan.
func (c *Comm) takesPlan(t *task) (bool, error) {
	_, err := c.planOf(t)
	return err == nil, err
}

func (c *Comm) runPlan(t *task) error {
	defer c.label(t.plan.Call)()
	c.tracePlan(t.plan)
	if err := c.execute(t.plan, &callBufs{send: t.send, recv: t.recv, user: t.user}, t.s); err != nil {
		return c.callError(t.name, err)
	}
	return nil
}
