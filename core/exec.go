package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/executor"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// Core's side of the plan executor (core/internal/executor): what it is
// given at start, what it asks of the communicator (executor.Owner: a
// failed call's abort, in docs/resilience.md's order), and the buffers of
// a call as it takes them.

// newExecutor makes c's executor once its host communicators and vendor
// communicator are up (start).
func (c *Comm) newExecutor() *executor.Executor {
	cfg := executor.Config{Rank: c.rank, N: c.n, Plugin: c.be.Plugin, DeviceIndex: c.be.Device, Layout: c.layout, HostPath: c.opts.HostPath,
		World: c.world, Intra: c.intra, Inter: c.inter, Owner: execOwner{c}}
	// Nil interfaces where there is nothing: the executor tells a host
	// rank and a rank without a vendor communicator by them.
	if c.dev != nil {
		cfg.Device = c.dev
	}
	if c.ccl != nil {
		cfg.Vendor = c.vendorCalls()
	}
	// A value this rank cannot read counts as "off": start turns device
	// reductions off for everyone when any rank has them off.
	cfg.WantDeviceReduce, _ = env.DeviceReduce.Get(env.Lookup(c.lookup))
	if c.debug.init {
		cfg.Logf = func(format string, args ...any) { c.logf("INIT", format, args...) }
	}
	return executor.New(cfg)
}

// execOwner is c as the executor's Owner: a pointer, so that it is one
// without an allocation, and apart from Comm, whose methods are the API.
type execOwner struct{ c *Comm }

func (o execOwner) Failure(p *sched.Plan, err error) error { return o.c.failure(p, err) }
func (o execOwner) FailStart(p *sched.Plan, err error)     { o.c.failStart(p, err) }
func (o execOwner) ShutHost()                              { o.c.shutHost() }
func (o execOwner) Calls() uint64                          { return o.c.calls }

// failure records a failed schedule: the communicator is aborted (the
// peers told what failed, then abortAll) and refuses further calls.
func (c *Comm) failure(p *sched.Plan, err error) error {
	if !executor.Spans(p) {
		return err
	}
	c.failStart(p, err)
	c.abortHost()
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.mu.Unlock()
	if c.isAbortedByUser() {
		return fmt.Errorf("%w: the communicator was aborted", sdk.ErrInvalidUsage)
	}
	return fmt.Errorf("%w (the communicator is aborted: destroy it)", err)
}

// failStart is the first half of failure, which waits for nothing: the
// peers learn what failed (before the links close: peers waiting on
// other host communicators than the one that failed learn what failed
// first), then abortAll's first two steps end every wait of this rank,
// on the host and in the vendor's library. A call that holds the shared
// windows while its device may still use them runs it before it waits
// for the device (the executor's RunShm), since the device may wait on
// a peer that is gone.
func (c *Comm) failStart(p *sched.Plan, err error) {
	c.failOnce.Do(func() {
		c.notifyAll(fmt.Errorf("%s on rank %d: %w", p.Call.Coll.Title(), c.rank, err))
		c.shutHost()
		_ = c.abortVendor()
	})
}

func (c *Comm) isAbortedByUser() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// bindDevice keeps the calling goroutine on its OS thread with this
// rank's device current there (executor.BindDevice says why) and
// returns what releases it; nothing on a host rank.
func (c *Comm) bindDevice() func() { return executor.BindDevice(c.be.Plugin, c.be.Device) }

// execBuf is b as the executor takes it.
func (b Buffer) execBuf() executor.Buf {
	return executor.Buf{Host: b.host, Ptr: b.ptr, N: b.n, Dev: b.dev}
}

// execBufs are t's buffers as the executor takes them, in c's own lists,
// reused: converting allocates nothing once they have grown. The caller
// lets go of them (dropExecBufs) when the call is over.
func (c *Comm) execBufs(t *task) *executor.Bufs {
	user := c.xbufs.User[:0]
	for _, b := range t.user {
		user = append(user, b.execBuf())
	}
	c.xbufs = executor.Bufs{Send: t.send.execBuf(), Recv: t.recv.execBuf(), User: user}
	return &c.xbufs
}

// dropExecBufs keeps no caller memory in c's lists (execBufs).
func (c *Comm) dropExecBufs() {
	clear(c.xbufs.User)
	c.xbufs.Send, c.xbufs.Recv = executor.Buf{}, executor.Buf{}
}
