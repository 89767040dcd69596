package core

import (
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// The runners of the funnel's table (enqueue.go): what each takes and how
// it runs it.

// takesHostNet: HostAllGather's tasks, on every placement.
func (c *Comm) takesHostNet(t *task) (bool, error) { return t.kind == kindHostNet, nil }

// runHostNet runs t, checked (checkHostNet), on the host communicator of
// every rank.
func (c *Comm) runHostNet(t *task) error {
	call := sdk.Call{Coll: sdk.AllGather, Count: t.send.n, DType: sdk.Uint8}
	if t.send.n == 0 {
		call = sdk.Call{Coll: sdk.Barrier}
	}
	if err := c.world.Run(&call, t.send.host, t.recv.host); err != nil {
		return c.callError(t.name, err)
	}
	return nil
}

// takesHost: the host placement, on host memory, on a communicator still
// open, for collectives and groups of sends and receives; otherwise the
// later runners say what is wrong.
func (c *Comm) takesHost(t *task) (bool, error) {
	return c.host != nil && !t.send.dev && !t.recv.dev && !c.down.Load() && (t.kind == kindColl || t.kind == kindBatch), nil
}

func (c *Comm) runHost(t *task) error {
	if t.kind == kindBatch {
		return c.runHostBatch(t)
	}
	return c.host.Run(&t.args, t.send.host, t.recv.host)
}

// runHostBatch runs a batch of sends and receives on the host engine
// (host.Engine.Group), in the communicator's reused list of them.
func (c *Comm) runHostBatch(t *task) error {
	ops := c.hostOps[:0]
	for i, x := range t.ops {
		ops = append(ops, host.P2P{Peer: x.Peer, Buf: t.user[i].host[:x.Bytes], Recv: x.Recv})
	}
	err := c.host.SendRecv(t.name, ops)
	clear(ops) // keep no caller memory
	c.hostOps = ops
	return err
}

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
	if !c.exec.HasShm() {
		return false, nil
	}
	p, err := c.planOf(t)
	return err == nil && p.Path == sched.PathShm, err
}

func (c *Comm) runShmTask(t *task) error {
	defer c.label(t.plan.Call)()
	c.tracePlan(t.plan)
	defer c.dropExecBufs()
	if err := c.exec.RunShm(t.plan, c.execBufs(t), t.s); err != nil {
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
	defer c.dropExecBufs()
	if err := c.exec.Execute(t.plan, c.execBufs(t), t.s); err != nil {
		return c.callError(t.name, err)
	}
	return nil
}

// callError puts the operation's name on an error, except on the
// watchdog's, which names the rank and the plugin call already, and names
// the ranks of this host that are gone or stopped (noteStalled): a vendor
// library's error or a cluster communicator's names neither them nor
// ranks of this communicator.
func (c *Comm) callError(name string, err error) error {
	var te *TimeoutError
	if errors.As(err, &te) {
		return te
	}
	return hostcomm.NoteStalled(fmt.Errorf("%s on rank %d: %w", name, c.rank, err), c.world.Peers(), c.rank)
}

// direct reports whether call goes straight to the vendor library: a
// homogeneous device communicator whose library takes the call's type and
// op, with no plan to print. It is the path users compare with the vendor
// library's own latency, so it builds no plan and allocates nothing; the plan
// it skips would be that single vendor step.
func (c *Comm) direct(coll sdk.Collective, dt sdk.DataType, op sdk.RedOp) bool {
	if c.ccl == nil || c.opts.HostPath || c.debug.coll || !c.layout.IsHomogeneous() || coll == sdk.SendRecv || coll == sdk.Barrier {
		return false
	}
	p := c.be.Plugin
	return p.SupportsDataType(dt) && (!coll.Reduces() || p.SupportsRedOp(op))
}

// ---- the executor ------------------------------------------------------------
