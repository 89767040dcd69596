package executor

import (
	"fmt"
	"runtime"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The executor of PathShm plans: it runs a plan's steps in order, as
// internal/sched/shm_steps.go made them, on one goroutine; device work is
// enqueued on the step's lane's stream (the caller's, d2h, h2d) and
// chained by the marks and awaits among the steps. No collective is named
// here: what each one does is in its steps.

// shmRun is one PathShm call on this rank.
type shmRun struct {
	e    *Executor
	p    *sched.Plan
	g    *sched.ShmPlan
	b    *Bufs
	s    loader.Stream
	node *hostnet.ShmNode
	dev  Device // nil on a host rank
	// workers is how many goroutines this rank's host copies and folds use.
	workers int
	// base is where a one-shot call's half of every window starts: the
	// half of step after+1, after being the step the call follows
	// (oneShotStep).
	base  int
	after uint32
}

// maxSlots bounds sched.ShmSlots for the executor's per-slot events.
const maxSlots = 16

// stepRan, when set (tests), is told of every step an executor runs, as
// it starts it: the plans that print are the plans that run.
// call numbers the communicator's calls (Owner.Calls), so that a plan that
// runs again (core's cache of plans) is told apart by run.
var stepRan func(p *sched.Plan, call uint64, i int)

// SetStepRan tells f of every step an executor runs (nil: nobody): core's
// tests see through it that the plans that print are the plans that run.
func SetStepRan(f func(p *sched.Plan, call uint64, i int)) { stepRan = f }

// RunShm runs a PathShm plan on the shared-memory plane; a failure is the
// caller's to record (Owner.Failure), after the windows are let go.
func (e *Executor) RunShm(p *sched.Plan, b *Bufs, s loader.Stream) error {
	r := &shmRun{e: e, p: p, g: p.Shm, b: b, s: s, node: e.shm.node, dev: e.dev, workers: e.shm.workers}
	if red := r.g.Reducers; len(red) > 0 && len(red) < e.n && r.dev == nil {
		// Only the host ranks reduce (sched.ShmReducers): they share the
		// cores the device ranks leave (one each, to drive their copies).
		r.workers = reduce.Workers((runtime.NumCPU() - (e.n - len(red))) / len(red))
	}
	// A relay keeps the windows' rule itself (relay.go); anything
	// else drains the relays first (the node's gate).
	enter := r.node.Enter
	if p.Count(sched.KindRelay, -1) > 0 {
		enter = r.node.EnterUngated
	}
	if err := enter(); err != nil {
		return e.world.StepError(err, -1)
	}
	// The windows are held until every step ran, across the device waits
	// among them (Intra, Await on the net lane, Drain, and the streams'
	// synchronize after a failure): the device's copies read and write
	// the windows, which must stay mapped until it is done with them.
	// The hold cannot block an abort: core's abortAll shuts the host side
	// and aborts the vendor's before it waits for this Exit.
	defer r.node.Exit()
	defer e.bindDevice()()
	var err error
	if p.Registered != nil {
		var ok bool
		if ok, err = r.agreeRegistered(); ok {
			r.p, r.g = p.Registered, p.Registered.Shm
		}
	}
	if err == nil {
		err = r.prepare()
	}
	for i := 0; i < len(r.p.Steps) && err == nil; i++ {
		if stepRan != nil {
			stepRan(r.p, e.owner.Calls(), i)
		}
		err = r.step(&r.p.Steps[i])
	}
	if err != nil && r.dev != nil {
		// No copy may touch a window once this rank lets go of it, so the
		// streams are synchronized before Exit. A stream may wait in a
		// vendor collective on a peer that is gone, which only the
		// vendor's abort ends: the communicator fails with this call
		// anyway (Owner.Failure, after Exit), and its first half comes
		// now (Owner.FailStart).
		e.owner.FailStart(p, err)
		_ = r.dev.StreamSynchronize(e.d2h)
		_ = r.dev.StreamSynchronize(e.h2d)
		_ = r.dev.StreamSynchronize(s)
	}
	return err
}

// prepare finds a one-shot call's half of the windows (the half the host
// engine's rule leaves free at this step), and makes a device rank's
// events and scratch for a pipelined one.
func (r *shmRun) prepare() error {
	e, g := r.e, r.g
	if g.OneShot {
		half := (e.shm.windowMin() / 2) &^ 63 // as the host engine cuts them
		r.after = e.oneShotStep()
		r.base = int((r.after+1)&1) * half
		return nil
	}
	if r.dev == nil {
		return nil
	}
	if g.Slots > maxSlots {
		return fmt.Errorf("%w: %d shared-memory slots, more than %d", sdk.ErrInternalError, g.Slots, maxSlots)
	}
	if err := e.shmEvents(g.Slots); err != nil {
		return err
	}
	return e.ensureScratch(r.p.ScratchBytes())
}

// step runs one step, a region of the execution trace (region).
func (r *shmRun) step(st *sched.Step) error {
	defer region(st.Kind.String())()
	switch st.Kind {
	case sched.KindCopy:
		return r.copies(st)
	case sched.KindSync:
		return r.sync(r.sig(st.Label))
	case sched.KindPost:
		if err := r.node.Post(r.sig(st.Label)); err != nil {
			return r.e.world.StepError(err, -1)
		}
		return nil
	case sched.KindFold:
		return r.fold(st)
	case sched.KindFoldPosted:
		return r.foldPosted(st)
	}
	if r.dev == nil {
		return fmt.Errorf("%w: device step %s on host rank %d", sdk.ErrInternalError, st, r.e.rank)
	}
	switch st.Kind {
	case sched.KindIntra:
		return r.e.vendorStep(st, r.b, r.s)
	case sched.KindMark:
		ev, err := r.event(st.Lane, st.Chunk)
		if err != nil {
			return err
		}
		return r.dev.EventRecord(ev, r.e.laneStream(st.Lane, r.s))
	case sched.KindAwait:
		ev, err := r.event(st.From, st.Chunk)
		if err != nil {
			return err
		}
		if st.Lane == sched.LaneNet {
			return r.dev.EventSynchronize(ev)
		}
		return r.dev.StreamWaitEvent(r.e.laneStream(st.Lane, r.s), ev)
	case sched.KindDrain:
		return r.dev.StreamSynchronize(r.e.laneStream(st.Lane, r.s))
	case sched.KindDevFold:
		return r.devFold(st)
	case sched.KindRelay:
		return r.relay(st)
	}
	return fmt.Errorf("%w: step %s in the shared windows", sdk.ErrInternalError, st)
}

// event is lane's mark of chunk k: the caller's earlier work (LaneIntra,
// k < 0), a chunk's intra reduction, its input in the window, its output
// on the device; one event per slot.
func (r *shmRun) event(lane sched.Lane, k int) (loader.Event, error) {
	sp := r.e.shm
	var evs []loader.Event
	switch lane {
	case sched.LaneIntra:
		if k < 0 {
			return sp.start, nil
		}
		evs = sp.reduced
	case sched.LaneD2H:
		evs = sp.input
	case sched.LaneH2D:
		evs = sp.outpt
	}
	if k < 0 || len(evs) < r.g.Slots {
		return 0, fmt.Errorf("%w: no %s mark of chunk %d", sdk.ErrInternalError, lane, k)
	}
	return evs[k%r.g.Slots], nil
}

// mem is the memory of a ref: a window (in a one-shot call's half), the
// device scratch, or the call's buffers.
func (r *shmRun) mem(ref sched.Ref) (mem, error) {
	switch ref.Buf {
	case sched.BufWindow:
		if ref.Idx < 0 || ref.Idx >= r.node.Size() {
			return mem{}, fmt.Errorf("%w: plan refers to the window of rank %d of %d", sdk.ErrInternalError, ref.Idx, r.node.Size())
		}
		w, off := r.node.Window(ref.Idx), r.base+ref.Off
		if off < 0 || off+ref.Len > len(w) {
			return mem{}, fmt.Errorf("%w: plan refers to %s beyond the window's %d bytes", sdk.ErrInternalError, ref, len(w)-r.base)
		}
		h := w[off : off+ref.Len : off+ref.Len]
		return mem{ptr: hostAddr(h), host: h}, nil
	case sched.BufScratch:
		sp := r.e.shm
		if r.dev == nil || ref.Off+ref.Len > sp.scratchBytes {
			return mem{}, fmt.Errorf("%w: plan refers to %s beyond the device scratch's %d bytes", sdk.ErrInternalError, ref, sp.scratchBytes)
		}
		return mem{dev: true, ptr: sp.scratch + uintptr(ref.Off)}, nil
	case sched.BufPeerSend, sched.BufPeerRecv:
		return r.peerMem(ref)
	}
	return r.e.resolve(r.b, ref)
}

// hostMem is a ref's memory, which must be the host's.
func (r *shmRun) hostMem(ref sched.Ref) ([]byte, error) {
	m, err := r.mem(ref)
	if err == nil && m.dev {
		err = fmt.Errorf("%w: host fold of device memory %s", sdk.ErrInternalError, ref)
	}
	return m.host, err
}

// copies: a device rank enqueues them on the lane's stream, a host rank
// makes them all as one split of its cores.
func (r *shmRun) copies(st *sched.Step) error {
	host := &r.e.shm.copies
	host.Reset()
	for _, cp := range st.Copies {
		src, err := r.mem(cp.Src)
		if err != nil {
			return err
		}
		dst, err := r.mem(cp.Dst)
		if err != nil {
			return err
		}
		n := cp.Src.Len
		if n == 0 || src.same(dst) {
			continue
		}
		if r.dev == nil {
			host.Add(dst.host, src.host[:n])
			continue
		}
		kind := loader.DeviceToDevice
		switch {
		case src.dev && !dst.dev:
			kind = loader.DeviceToHost
		case !src.dev && dst.dev:
			kind = loader.HostToDevice
		case !src.dev:
			return fmt.Errorf("%w: host copy %s -> %s on a device rank", sdk.ErrInternalError, cp.Src, cp.Dst)
		}
		if err := r.dev.Memcpy(dst.ptr, src.ptr, n, kind, r.e.laneStream(st.Lane, r.s)); err != nil {
			return fmt.Errorf("copying %s to %s: %w", cp.Src, cp.Dst, err)
		}
	}
	host.Run(r.workers)
	return nil
}

// fold runs each fold on the host's cores.
func (r *shmRun) fold(st *sched.Step) error {
	for _, f := range st.Folds {
		dst, err := r.hostMem(f.Dst)
		if err != nil {
			return err
		}
		var also []byte
		if f.Also.Buf != sched.BufNone {
			if also, err = r.hostMem(f.Also); err != nil {
				return err
			}
		}
		ins := make([][]byte, len(f.Srcs))
		for i, s := range f.Srcs {
			if ins[i], err = r.hostMem(s); err != nil {
				return err
			}
		}
		reduce.FoldParallel(dst, also, ins, st.DType, st.Op, st.N, r.workers)
	}
	return nil
}

// foldPosted folds every window's input in rank order, each once its rank
// has posted (the one-shot call: a rank reads the early windows while the
// late ranks still write theirs).
func (r *shmRun) foldPosted(st *sched.Step) error {
	if len(st.Folds) != 1 {
		return fmt.Errorf("%w: %s", sdk.ErrInternalError, st)
	}
	f := st.Folds[0]
	dst, err := r.hostMem(f.Dst)
	if err != nil {
		return err
	}
	opR := reduceOpOf(st.Op)
	for i, s := range f.Srcs {
		if err := r.node.Wait(s.Idx); err != nil {
			return fmt.Errorf("in the host's shared windows: %w", r.e.world.StepError(err, r.node.Ranks()[s.Idx]))
		}
		src, err := r.hostMem(s)
		if err != nil {
			return err
		}
		if i == 0 {
			copy(dst, src)
		} else {
			reduce.Reduce(dst, src, st.DType, opR)
		}
	}
	if st.Op == sdk.Avg {
		reduce.Scale(dst, st.DType, st.N)
	}
	return nil
}

// devFold runs each fold on this rank's device (reduceLocal), on the
// lane's stream.
func (r *shmRun) devFold(st *sched.Step) error {
	return r.e.devFold(st, r.mem, r.e.laneStream(st.Lane, r.s))
}

// devFold runs each fold of st on this rank's device (reduceLocal) on
// strm, its memory found by at: the shared windows' executor's and the
// staged plans' (a leader's fold of what the other leaders sent).
func (e *Executor) devFold(st *sched.Step, at func(sched.Ref) (mem, error), strm loader.Stream) error {
	srcs := &e.foldSrcs[st.Lane]
	for _, f := range st.Folds {
		dst, err := at(f.Dst)
		if err != nil {
			return err
		}
		if len(f.Srcs) > len(srcs) {
			return fmt.Errorf("%w: a device fold of %d inputs, more than %d", sdk.ErrInternalError, len(f.Srcs), len(srcs))
		}
		for i, s := range f.Srcs {
			m, err := at(s)
			if err != nil {
				return err
			}
			if !m.dev {
				return fmt.Errorf("%w: device fold of host memory %s", sdk.ErrInternalError, s)
			}
			srcs[i] = m.ptr
		}
		if !dst.dev {
			return fmt.Errorf("%w: device fold into host memory %s", sdk.ErrInternalError, f.Dst)
		}
		count := f.Dst.Len / st.DType.Size()
		if err := e.dev.ReduceLocal(e.device, dst.ptr, srcs[:len(f.Srcs)], count, st.DType, st.Op, st.N, strm); err != nil {
			return fmt.Errorf("%s's device reduction: %w", e.plugin.Name, err)
		}
	}
	return nil
}

// sig labels a step in the windows: the call's digest in the high word,
// as the host engine's steps have it (sharedNode.Post), so that a
// mismatch names both calls the same way on every transport.
func (r *shmRun) sig(label int) uint64 {
	call := r.p.Call
	s := host.StepSig(call.Coll.Title()+"/shm", call.Count, call.DType, call.Op, call.Root<<24^label)
	return uint64(hostcomm.DigestOfCall(call))<<32 | uint64(uint32(s^s>>32))
}

func (r *shmRun) sync(sig uint64) error {
	if err := r.node.Sync(sig); err != nil {
		return fmt.Errorf("in the host's shared windows: %w", r.e.world.StepError(err, -1))
	}
	return nil
}

func reduceOpOf(op sdk.RedOp) sdk.RedOp {
	if op == sdk.Avg {
		return sdk.Sum
	}
	return op
}
