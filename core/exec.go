package core

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

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
	return noteStalled(fmt.Errorf("%s on rank %d: %w", name, c.rank, err), c.world.peers, c.rank)
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

type callBufs struct {
	send, recv Buffer
	user       []Buffer
}

// mem is a resolved Ref: device memory or host memory.
type mem struct {
	dev  bool
	ptr  uintptr
	host []byte
}

func (m mem) same(o mem) bool {
	if m.dev != o.dev {
		return false
	}
	if m.dev {
		return m.ptr == o.ptr
	}
	return len(m.host) > 0 && len(o.host) > 0 && &m.host[0] == &o.host[0]
}

func hostAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

func (c *Comm) resolve(b *callBufs, r sched.Ref) (mem, error) {
	var base Buffer
	switch r.Buf {
	case sched.BufNone:
		return mem{}, nil
	case sched.BufSend:
		base = b.send
	case sched.BufRecv:
		base = b.recv
	case sched.BufUser:
		if r.Idx < 0 || r.Idx >= len(b.user) {
			return mem{}, fmt.Errorf("%w: plan refers to group operation %d of %d", sdk.ErrInternalError, r.Idx, len(b.user))
		}
		base = b.user[r.Idx]
	case sched.BufScratch:
		if c.be.OnDevice() {
			base = DeviceBuffer(c.scratchPtr, c.scratchLen)
		} else {
			base = HostBuffer(c.hscratch)
		}
	case sched.BufStage:
		base = HostBuffer(c.stage)
	default:
		return mem{}, fmt.Errorf("%w: plan refers to buffer kind %d", sdk.ErrInternalError, r.Buf)
	}
	if r.Len == 0 {
		// Placeholders (a non-root's unused buffer): the address only.
		m := mem{dev: base.dev, ptr: base.ptr}
		if base.dev && r.Off <= base.n {
			m.ptr += uintptr(r.Off)
		}
		return m, nil
	}
	sub, err := base.Slice(r.Off, r.Len)
	if err != nil {
		return mem{}, fmt.Errorf("%w: plan refers to %s beyond its %d bytes", sdk.ErrInternalError, r, base.n)
	}
	return mem{dev: sub.dev, ptr: sub.ptr, host: sub.host}, nil
}

// roundUp grows allocations in powers of two (from 64 KiB), so that a
// sweep over sizes reallocates a few times, not every call.
func roundUp(n int) int {
	if n <= 64<<10 {
		return 64 << 10
	}
	return 1 << bits.Len(uint(n-1))
}

// ensure makes staging and scratch as large as the plan needs.
func (c *Comm) ensure(p *sched.Plan) error {
	stage, scratch := p.StageBytes(), p.ScratchBytes()
	pl := c.be.Plugin
	if stage > len(c.stage) {
		n := roundUp(stage)
		if pl == nil {
			c.stage = make([]byte, n)
		} else {
			if c.stagePtr != 0 {
				_ = pl.HostFree(c.stagePtr)
				c.stagePtr, c.stage = 0, nil
			}
			ptr, err := pl.HostMalloc(n)
			if err != nil {
				return fmt.Errorf("allocating %d bytes of pinned staging: %w", n, err)
			}
			c.stagePtr, c.stage = ptr, loader.HostSlice(ptr, n)
		}
	}
	if pl == nil {
		if scratch > len(c.hscratch) {
			c.hscratch = make([]byte, roundUp(scratch))
		}
		return nil
	}
	if scratch > c.scratchLen {
		if c.scratchPtr != 0 {
			_ = pl.DeviceFree(c.scratchPtr)
			c.scratchPtr, c.scratchLen = 0, 0
		}
		n := roundUp(scratch)
		ptr, err := pl.DeviceMalloc(c.be.Device, n)
		if err != nil {
			return fmt.Errorf("allocating %d bytes of device scratch on %s device %d: %w", n, pl.Name, c.be.Device, err)
		}
		c.scratchPtr, c.scratchLen = ptr, n
	}
	return nil
}

// execute runs a plan: each lane in its own goroutine, steps in plan order
// within a lane, a step starting once the steps it depends on are done. A
// failure stops every lane; on a schedule that spans communicators it also
// aborts this communicator, so that the other ranks, waiting on this one,
// fail at once instead of at their deadline.
func (c *Comm) execute(p *sched.Plan, b *callBufs, s loader.Stream) error {
	if p.Path == sched.PathShm {
		if err := c.runShm(p, b, s); err != nil {
			return c.failure(p, err)
		}
		return nil
	}
	if len(p.Steps) == 0 {
		return nil
	}
	// From here on this goroutine makes device calls: freeing pinned or
	// device memory (ensure) synchronises the thread's current device,
	// which on a thread last bound to another rank's device of this
	// process waits for that rank's collective, itself waiting for this
	// rank (TestEnsureBindsTheDevice).
	defer c.bindDevice()()
	if err := c.ensure(p); err != nil {
		return err
	}
	ch, err := c.newChain(p, s)
	if err != nil {
		return c.failure(p, err)
	}
	lanes := p.Lanes()
	if len(lanes) == 1 || inOrder(p) {
		if err := c.runInOrder(p, b, s, ch, len(lanes) > 1); err != nil {
			return c.failure(p, err)
		}
		return nil
	}
	done := make([]chan struct{}, len(p.Steps))
	for i := range done {
		done[i] = make(chan struct{})
	}
	abort := make(chan struct{})
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() {
			first = err
			close(abort)
			if spans(p) {
				c.shutHost() // unblocks lanes waiting in hostnet, here and on peers
			}
		})
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Add(1)
		go func(lane sched.Lane) {
			defer wg.Done()
			defer c.bindDevice()()
			for i := range p.Steps {
				st := &p.Steps[i]
				if st.Lane != lane {
					continue
				}
				for _, d := range st.Deps {
					select {
					case <-done[d]:
					case <-abort:
						return
					}
				}
				select {
				case <-abort:
					return
				default:
				}
				err := ch.await(i)
				if err == nil {
					err = c.step(p, i, b, s)
				}
				if err == nil {
					err = ch.record(i)
				}
				if err != nil {
					fail(err)
					return
				}
				close(done[i])
			}
		}(lane)
	}
	wg.Wait()
	if first == nil {
		first = ch.finish()
	}
	if first != nil {
		return c.failure(p, first)
	}
	return nil
}

// runInOrder runs a plan's steps one after the other on the calling
// goroutine (bound to the device: execute); with several lanes a step
// first waits for the device work of the steps it depends on (one lane's
// stream orders its steps itself).
func (c *Comm) runInOrder(p *sched.Plan, b *callBufs, s loader.Stream, ch *chain, lanes bool) error {
	for i := 0; i < len(p.Steps); i++ {
		if c.stagedSteps(p, i, ch) {
			if err := c.runStaged(p, i, b, s, ch); err != nil {
				return err
			}
			i += 2
			continue
		}
		var err error
		if lanes {
			err = ch.await(i)
		}
		if err == nil {
			err = c.step(p, i, b, s)
		}
		if err == nil {
			err = ch.record(i)
		}
		if err != nil {
			return err
		}
	}
	return ch.finish()
}

// inOrder reports whether a plan runs best as one sequence of steps on the
// calling goroutine: a pipeline of one chunk (a chain of steps per chunk)
// leaves the lanes nothing to overlap, and a goroutine per lane would only
// add its start (a stack grown for the plugin's calls, the device bound to
// its thread) and a wake-up per step to the call. Plans without chunks (p2p
// exchanges) keep their lanes: their steps may need to run at once. Steps
// depend only on earlier ones, which plan order then satisfies.
func inOrder(p *sched.Plan) bool {
	if p.Chunks != 1 {
		return false
	}
	for i := range p.Steps {
		for _, d := range p.Steps[i].Deps {
			if d >= i {
				return false
			}
		}
	}
	return true
}

// chain orders a plan's device work with events instead of waiting for
// each step: a step that enqueues device work (a copy, a vendor
// operation) records an event after it; a step that depends on it waits
// for that event on its own stream when it runs on the device too, or on
// the host (EventSynchronize) when it runs there. Lanes thus enqueue
// ahead, and the host blocks only where it reads what a device step
// wrote. The caller's earlier work orders the copy streams through one
// event; the streams are synchronised once, at the end.
type chain struct {
	c  *Comm
	p  *sched.Plan
	s  loader.Stream
	ev []loader.Event // per step; 0 where the step enqueues no device work
}

// onDevice reports whether a step's work is enqueued on a stream.
func onDevice(st *sched.Step) bool {
	return st.Kind == sched.KindCopy || st.Kind == sched.KindIntra || st.Kind == sched.KindDevFold
}

func (c *Comm) newChain(p *sched.Plan, s loader.Stream) (*chain, error) {
	ch := &chain{c: c, p: p, s: s}
	pl := c.dev
	if pl == nil || p.Async {
		return ch, nil // host memory, or enqueued on the caller's stream alone
	}
	ch.ev = make([]loader.Event, len(p.Steps))
	n := 0
	for i := range p.Steps {
		if onDevice(&p.Steps[i]) {
			n++
		}
	}
	for len(c.events) < n+1 {
		e, err := pl.EventCreate(c.be.Device)
		if err != nil {
			return nil, fmt.Errorf("creating an event on %s device %d: %w", pl.Name, c.be.Device, err)
		}
		c.events = append(c.events, e)
	}
	next := 1
	for i := range p.Steps {
		if onDevice(&p.Steps[i]) {
			ch.ev[i] = c.events[next]
			next++
		}
	}
	// The copy streams read the input after the work before the call.
	start := c.events[0]
	if err := pl.EventRecord(start, s); err != nil {
		return nil, err
	}
	for _, strm := range []loader.Stream{c.d2h, c.h2d} {
		if err := pl.StreamWaitEvent(strm, start); err != nil {
			return nil, err
		}
	}
	return ch, nil
}

// await makes step i wait for the device work of the steps it depends on.
func (ch *chain) await(i int) error {
	if ch.ev == nil {
		return nil
	}
	st, pl := &ch.p.Steps[i], ch.c.dev
	for _, d := range st.Deps {
		e := ch.ev[d]
		if e == 0 {
			continue
		}
		var err error
		if onDevice(st) {
			err = pl.StreamWaitEvent(ch.c.laneStream(st.Lane, ch.s), e)
		} else {
			err = pl.EventSynchronize(e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// record marks the end of step i's device work.
func (ch *chain) record(i int) error {
	if ch.ev == nil || ch.ev[i] == 0 {
		return nil
	}
	return ch.c.dev.EventRecord(ch.ev[i], ch.c.laneStream(ch.p.Steps[i].Lane, ch.s))
}

// finish waits for the device work of the call: its result is in place.
func (ch *chain) finish() error {
	if ch.ev == nil {
		return nil
	}
	defer region("sync streams")()
	for _, l := range ch.p.Lanes() {
		if l == sched.LaneNet {
			continue
		}
		if err := ch.c.dev.StreamSynchronize(ch.c.laneStream(l, ch.s)); err != nil {
			return err
		}
	}
	return nil
}

// bindDevice keeps the calling goroutine on its OS thread and makes this
// rank's device current there, as vendor runtimes want for work on a
// device's memory and streams (the current device is per thread, and a
// lane's goroutine would otherwise wander between threads). It returns
// what releases the thread.
func (c *Comm) bindDevice() func() {
	if !c.be.OnDevice() {
		return func() {}
	}
	runtime.LockOSThread()
	_ = c.be.Plugin.SetDevice(c.be.Device) // a plugin without setDevice binds devices itself
	return runtime.UnlockOSThread
}

// spans reports whether a plan's steps involve several communicators,
// whose peers would wait forever on a rank that gave up.
func spans(p *sched.Plan) bool { return p.Path != sched.PathVendor && p.Path != sched.PathHostComm }

// failure records a failed schedule: the communicator is aborted (the
// peers told what failed, then abortAll) and refuses further calls.
func (c *Comm) failure(p *sched.Plan, err error) error {
	if !spans(p) {
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
// for the device (runShm), since the device may wait on a peer that is
// gone.
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

// laneStream is the stream a lane's device work goes to.
func (c *Comm) laneStream(l sched.Lane, s loader.Stream) loader.Stream {
	switch l {
	case sched.LaneD2H:
		return c.d2h
	case sched.LaneH2D:
		return c.h2d
	}
	return s
}

// step runs step i.
func (c *Comm) step(p *sched.Plan, i int, b *callBufs, s loader.Stream) error {
	if stepRan != nil {
		stepRan(p, c.calls, i)
	}
	st := &p.Steps[i]
	defer region(st.Kind.String())()
	strm := c.laneStream(st.Lane, s)
	switch st.Kind {
	case sched.KindCopy:
		return c.copies(st, b, strm)
	case sched.KindScale, sched.KindReduce:
		dst, err := c.resolve(b, st.Dst)
		if err != nil {
			return err
		}
		if dst.dev {
			return fmt.Errorf("%w: host reduction on device memory", sdk.ErrInternalError)
		}
		if st.Kind == sched.KindScale {
			reduce.ScaleParallel(dst.host, st.DType, st.N, c.workers)
			return nil
		}
		src, err := c.resolve(b, st.Src)
		if err != nil {
			return err
		}
		if src.dev || len(src.host) != len(dst.host) {
			return fmt.Errorf("%w: host reduction of %s into %s", sdk.ErrInternalError, st.Src, st.Dst)
		}
		reduce.ReduceParallel(dst.host, src.host, st.DType, st.Op, c.workers)
		return nil
	case sched.KindIntra:
		if c.be.OnDevice() {
			return c.vendorStep(st, b, s)
		}
		cl := c.layout.ClusterOf(c.rank)
		return c.hostStep(c.intra, fmt.Sprintf("cluster %d's host communicator (its ranks 0.. are ranks %s)", cl.Index, sched.FormatRanks(cl.Ranks)), st, b)
	case sched.KindInter:
		if c.inter == nil {
			return fmt.Errorf("%w: inter-cluster step on rank %d, which leads no cluster", sdk.ErrInternalError, c.rank)
		}
		return c.hostStep(c.inter, c.interWhat(), st, b)
	case sched.KindWorld:
		return c.hostStep(c.world, "", st, b)
	case sched.KindDevFold:
		if c.dev == nil {
			return fmt.Errorf("%w: device fold on host rank %d", sdk.ErrInternalError, c.rank)
		}
		return c.devFold(st, func(r sched.Ref) (mem, error) { return c.resolve(b, r) }, strm)
	}
	return fmt.Errorf("%w: step kind %v", sdk.ErrInternalError, st.Kind)
}

// copies enqueues a copy step's device copies on strm (the chain waits
// for them); host-to-host pairs are copied at once, after the work
// already on strm (a device rank's lanes order everything on its stream).
func (c *Comm) copies(st *sched.Step, b *callBufs, strm loader.Stream) error {
	synced := false
	for _, cp := range st.Copies {
		src, err := c.resolve(b, cp.Src)
		if err != nil {
			return err
		}
		dst, err := c.resolve(b, cp.Dst)
		if err != nil {
			return err
		}
		n := cp.Src.Len
		if n == 0 || src.same(dst) {
			continue
		}
		pl := c.dev
		switch {
		case src.dev && dst.dev:
			err = pl.Memcpy(dst.ptr, src.ptr, n, loader.DeviceToDevice, strm)
		case src.dev:
			err = pl.Memcpy(hostAddr(dst.host), src.ptr, n, loader.DeviceToHost, strm)
		case dst.dev:
			err = pl.Memcpy(dst.ptr, hostAddr(src.host), n, loader.HostToDevice, strm)
		default:
			if pl != nil && !synced {
				if err := pl.StreamSynchronize(strm); err != nil {
					return err
				}
				synced = true
			}
			copy(dst.host, src.host)
			continue
		}
		if err != nil {
			return fmt.Errorf("copying %s to %s: %w", cp.Src, cp.Dst, err)
		}
	}
	return nil
}

// vendorStep enqueues an intra-cluster step on the vendor library, on the
// caller's stream (the chain waits for it).
func (c *Comm) vendorStep(st *sched.Step, b *callBufs, s loader.Stream) error {
	if c.ccl == nil {
		return fmt.Errorf("%w: vendor step on rank %d without a vendor communicator", sdk.ErrInternalError, c.rank)
	}
	cc := c.vendorCalls()
	src, err := c.resolve(b, st.Src)
	if err != nil {
		return err
	}
	dst, err := c.resolve(b, st.Dst)
	if err != nil {
		return err
	}
	pl := c.dev
	switch st.Coll {
	case sdk.SendRecv:
		// A step's transfers, each to its own peer and buffer, in one
		// group of the library (groups are the plugin's, not the
		// communicator's).
		if err = pl.GroupStart(); err != nil {
			break
		}
		for _, x := range st.Xfers {
			m, rerr := c.resolve(b, x.Ref)
			if rerr != nil {
				err = rerr
				break
			}
			if x.Recv {
				err = cc.Recv(m.ptr, x.Ref.Len, sdk.Uint8, x.Peer, s)
			} else {
				err = cc.Send(m.ptr, x.Ref.Len, sdk.Uint8, x.Peer, s)
			}
			if err != nil {
				break
			}
		}
		if gerr := pl.GroupEnd(); err == nil {
			err = gerr
		}
	case sdk.Barrier:
		// No vendor library has one: the schedules put barriers on the host.
		err = fmt.Errorf("%w: vendor step %s", sdk.ErrInternalError, st.Coll.Title())
	default:
		err = sdk.Dispatch(cc, st.Args(), src.ptr, dst.ptr, s)
	}
	if err != nil {
		return fmt.Errorf("%s's %s in cluster %d: %w", pl.Name, st.Coll.Title(), c.layout.ClusterOf(c.rank).Index, err)
	}
	return nil
}

// hostXfers runs a SendRecv step's transfers, each to its own peer and
// buffer, as bytes, in one group of cm.
func (c *Comm) hostXfers(cm *hostComm, st *sched.Step, b *callBufs) error {
	ops := make([]host.P2P, len(st.Xfers))
	for i, x := range st.Xfers {
		m, err := c.resolve(b, x.Ref)
		if err == nil && m.dev {
			err = fmt.Errorf("%w: host transfer of device memory %s", sdk.ErrInternalError, x.Ref)
		}
		if err != nil {
			return err
		}
		ops[i] = host.P2P{Peer: x.Peer, Buf: m.host, Recv: x.Recv}
	}
	return cm.sendRecv("GroupEnd", ops)
}

// hostStep runs a step's collective on a host communicator.
func (c *Comm) hostStep(cm *hostComm, what string, st *sched.Step, b *callBufs) error {
	src, err := c.resolve(b, st.Src)
	if err != nil {
		return err
	}
	dst, err := c.resolve(b, st.Dst)
	if err != nil {
		return err
	}
	if src.dev || dst.dev {
		return fmt.Errorf("%w: host step %s on device memory", sdk.ErrInternalError, st.Coll.Title())
	}
	if st.Coll == sdk.SendRecv {
		err = c.hostXfers(cm, st, b)
	} else {
		args := st.Args()
		err = cm.run(&args, src.host, dst.host)
	}
	if err != nil && what != "" && !c.layout.IsHomogeneous() {
		return fmt.Errorf("in %s: %w", what, err)
	}
	return err
}

// interWhat names the cluster leaders' communicator in errors.
func (c *Comm) interWhat() string {
	return "the cluster leaders' communicator (its rank c is cluster c's leader: ranks " + c.leaders() + ")"
}

// leaders lists the cluster leaders in inter-rank order.
func (c *Comm) leaders() string {
	ls := make([]int, len(c.layout.Clusters))
	for i, cl := range c.layout.Clusters {
		ls[i] = cl.Leader
	}
	return sched.FormatRanks(ls)
}
