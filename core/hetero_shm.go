package core

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The zero-copy data plane of a heterogeneous communicator whose ranks all
// share one host (sched.PathShm): the host's shared-memory windows,
// registered with every device rank's runtime, are the staging. The
// geometry and the reasons are in internal/sched/shm.go; this file runs it.

// shmPlane is what a rank holds for PathShm.
type shmPlane struct {
	node *hostnet.ShmNode
	// workers is how many goroutines one rank's copies and reductions use:
	// the host's cores shared by its ranks.
	workers int
	// registered are the windows this rank registered with its runtime
	// (device ranks: every rank's window, as mapped here).
	registered []uintptr
	// Events per slot: the intra reduction of a chunk done (on the
	// caller's stream), its input in the window (d2h), its output back
	// on the device (h2d); start marks the caller's earlier work.
	start                 loader.Event
	reduced, input, outpt []loader.Event
	// reducesOnDevice: this rank can take part in device-reduced
	// AllReduces (a host rank always can; a device rank when its plugin's
	// reduceLocal works and FLAGCX_DEVICE_REDUCE is on). scratch holds
	// the other clusters' contributions on the device (scratchBytes).
	reducesOnDevice bool
	scratch         uintptr
	scratchBytes    int
}

// scratchProbe is the device scratch setupShm allocates to ask the plugin
// whether it reduces (a reduceLocal of no elements); calls grow it.
const scratchProbe = 4096

// setupShm makes the zero-copy plane when every rank is on this host and
// shares its windows: a device rank registers every window with its
// runtime. It returns whether this rank can take part (every rank must,
// or nobody does: start agrees).
func (c *Comm) setupShm() bool {
	node := c.world.mesh.Node
	if c.layout.IsHomogeneous() || c.opts.HostPath || node == nil || node.Size() != c.n {
		return false
	}
	sp := &shmPlane{node: node, workers: node.Cores(), reducesOnDevice: c.wantDeviceReduce}
	c.shm = sp
	p := c.be.Plugin
	if p == nil {
		return true
	}
	sp.reducesOnDevice = c.wantDeviceReduce && c.probeDeviceReduce()
	if !p.CanRegisterHost() {
		return false // ABI v1: the staged schedules run
	}
	for i := 0; i < node.Size(); i++ {
		w := node.Window(i)
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(w)))
		if err := p.HostRegister(addr, len(w)); err != nil {
			if c.debug.init {
				c.logf("INIT", "cannot register rank %d's shared window with %s (%v): the staged schedules run", i, p.Name, err)
			}
			return false
		}
		sp.registered = append(sp.registered, addr)
	}
	var err error
	sp.start, err = p.EventCreate(c.be.Device)
	return err == nil
}

// probeDeviceReduce reports whether the plugin reduces on this rank's
// device: a reduceLocal of no elements on a first scratch allocation.
func (c *Comm) probeDeviceReduce() bool {
	p, sp := c.be.Plugin, c.shm
	if !p.CanReduceLocal() {
		return false
	}
	buf, err := p.DeviceMalloc(c.be.Device, scratchProbe)
	if err == nil {
		sp.scratch, sp.scratchBytes = buf, scratchProbe
		err = p.ReduceLocal(c.be.Device, buf, []uintptr{buf}, 0, sdk.Float32, sdk.Sum, 1, 0)
	}
	if err != nil && c.debug.init {
		c.logf("INIT", "%s does not reduce on device %d (%v): clusters reduce on the host", p.Name, c.be.Device, err)
	}
	return err == nil
}

// ensureScratch makes the device scratch at least n bytes. Every copy
// into it of an earlier call is done: a call ends synchronised.
func (c *Comm) ensureScratch(n int) error {
	sp, p := c.shm, c.be.Plugin
	if n <= sp.scratchBytes {
		return nil
	}
	if sp.scratch != 0 {
		if err := p.DeviceFree(sp.scratch); err != nil {
			return err
		}
		sp.scratch, sp.scratchBytes = 0, 0
	}
	buf, err := p.DeviceMalloc(c.be.Device, n)
	if err != nil {
		return fmt.Errorf("device scratch of %d bytes for the other clusters' data on %s device %d: %w", n, p.Name, c.be.Device, err)
	}
	sp.scratch, sp.scratchBytes = buf, n
	return nil
}

// windowMin is the smallest window of the host (the same on every rank).
func (sp *shmPlane) windowMin() int {
	w := len(sp.node.Window(0))
	for i := 1; i < sp.node.Size(); i++ {
		w = min(w, len(sp.node.Window(i)))
	}
	return w
}

// events makes sure there are n events of each kind.
func (c *Comm) shmEvents(n int) error {
	sp, p := c.shm, c.be.Plugin
	for _, evs := range []*[]loader.Event{&sp.reduced, &sp.input, &sp.outpt} {
		for len(*evs) < n {
			e, err := p.EventCreate(c.be.Device)
			if err != nil {
				return fmt.Errorf("creating an event on %s device %d: %w", p.Name, c.be.Device, err)
			}
			*evs = append(*evs, e)
		}
	}
	return nil
}

// releaseShm unregisters the windows and destroys the events.
func (c *Comm) releaseShm() error {
	sp, p := c.shm, c.be.Plugin
	c.shm = nil
	if sp == nil || p == nil {
		return nil
	}
	var errs []error
	for _, addr := range sp.registered {
		errs = append(errs, p.HostUnregister(addr))
	}
	for _, e := range append(append(append([]loader.Event{sp.start}, sp.reduced...), sp.input...), sp.outpt...) {
		if e != 0 {
			errs = append(errs, p.EventDestroy(e))
		}
	}
	if sp.scratch != 0 {
		errs = append(errs, p.DeviceFree(sp.scratch))
	}
	return errors.Join(errs...)
}

// shmRun is one PathShm call on this rank.
type shmRun struct {
	c          *Comm
	g          *sched.ShmPlan
	call       sched.Call
	send, recv Buffer
	s          loader.Stream
	node       *hostnet.ShmNode
	p          *watchedPlugin
	size       int
	cl         *sched.Cluster
	m, j       int // cluster size, index in it
	workers    int
	block      int            // bytes of the count argument (the message, or one rank's block)
	partMax    int            // bytes of the longest part this rank carries (device reductions)
	gotten     [maxSlots]bool // outpt[slot] was recorded in this call
}

// maxSlots bounds sched.ShmSlots for the executor's per-slot state.
const maxSlots = 16

func (c *Comm) runShm(p *sched.Plan, b *callBufs, s loader.Stream) error {
	r := &shmRun{c: c, g: p.Shm, call: p.Call, send: b.send, recv: b.recv, s: s, node: c.shm.node, p: c.dev,
		size: p.Call.DType.Size(), cl: c.layout.ClusterOf(c.rank)}
	r.m, r.j, r.workers = len(r.cl.Ranks), c.layout.LocalRank(c.rank), c.shm.workers
	if red := r.g.Reducers; len(red) > 0 && len(red) < c.n && r.p == nil {
		// Only the host ranks reduce (sched.ShmReducers): they share the
		// cores the device ranks leave (one each, to drive their copies).
		r.workers = max(1, (runtime.NumCPU()-(c.n-len(red)))/len(red))
	}
	r.block = r.call.Count * r.size
	if err := r.node.Enter(); err != nil {
		return r.c.world.stepError(err, -1)
	}
	defer r.node.Exit()
	defer c.bindDevice()()
	var err error
	if r.g.OneShot {
		err = r.oneShot()
	} else {
		err = r.pipeline()
	}
	if err != nil && r.p != nil {
		// No copy may touch a window once this rank lets go of it.
		_ = r.p.StreamSynchronize(c.d2h)
		_ = r.p.StreamSynchronize(c.h2d)
		_ = r.p.StreamSynchronize(s)
	}
	return err
}

func (r *shmRun) window(rank int) []byte { return r.node.Window(rank) }

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// sig labels step k's phase: the call's digest in the high word, as the
// host engine's steps have it (sharedNode.Post), so that a mismatch names
// both calls the same way on every transport.
func (r *shmRun) sig(k, phase int) uint64 {
	s := host.StepSig(r.call.Coll.Title()+"/shm", r.call.Count, r.call.DType, r.call.Op, r.call.Root<<24^(2*k+phase))
	return uint64(digestOfCall(r.call))<<32 | uint64(uint32(s^s>>32))
}

func (r *shmRun) sync(sig uint64) error {
	if err := r.node.Sync(sig); err != nil {
		return fmt.Errorf("in the host's shared windows: %w", r.c.world.stepError(err, -1))
	}
	return nil
}

// oneShot: every rank puts its input in half (t+1)&1 of its window (the
// half the host engine's rule leaves free at step t), publishes the step,
// and folds every rank's input in rank order; a device rank folds into its
// own window beside its input and copies the result back.
func (r *shmRun) oneShot() error {
	c, B := r.c, r.call.Count*r.size
	half := (c.shm.windowMin() / 2) &^ 63 // as the host engine cuts them
	in := int((r.node.Step()+1)&1) * half
	own := r.window(c.rank)
	if r.p != nil {
		if err := r.p.Memcpy(addrOf(own[in:]), r.send.ptr, B, loader.DeviceToHost, r.s); err != nil {
			return err
		}
		if err := r.p.StreamSynchronize(r.s); err != nil {
			return err
		}
	} else {
		copy(own[in:in+B], r.send.host[:B])
	}
	if err := r.node.Post(r.sig(0, 0)); err != nil {
		return r.c.world.stepError(err, -1)
	}
	dst := own[in+r.g.In : in+r.g.In+B]
	if r.p == nil {
		dst = r.recv.host[:B]
	}
	opR := reduceOpOf(r.call.Op)
	for i := 0; i < r.node.Size(); i++ {
		if err := r.node.Wait(i); err != nil {
			return fmt.Errorf("in the host's shared windows: %w", r.c.world.stepError(err, r.node.Ranks()[i]))
		}
		src := r.window(i)[in : in+B]
		if i == 0 {
			copy(dst, src)
		} else {
			reduce.Reduce(dst, src, r.call.DType, opR)
		}
	}
	if r.call.Op == sdk.Avg {
		reduce.Scale(dst, r.call.DType, c.n)
	}
	if r.p == nil {
		return nil
	}
	if err := r.p.Memcpy(r.recv.ptr, addrOf(dst), B, loader.HostToDevice, r.s); err != nil {
		return err
	}
	return r.p.StreamSynchronize(r.s)
}

func reduceOpOf(op sdk.RedOp) sdk.RedOp {
	if op == sdk.Avg {
		return sdk.Sum
	}
	return op
}

// part is the range of chunk k this rank carries: part j of m in a device
// cluster, the whole chunk alone or on the host.
func (r *shmRun) part(k int) sched.Range {
	_, L := r.g.Span(k)
	if r.p == nil || r.m == 1 {
		return sched.Range{Len: L}
	}
	return sched.Part(L, r.size, r.m, r.j)
}

// evenParts reports whether a chunk of L bytes splits into m equal parts
// (then one ReduceScatter and one AllGather do what m Reduces and m
// Broadcasts do otherwise).
func (r *shmRun) evenParts(L int) bool { return (L/r.size)%r.m == 0 }

// issue starts chunk k's input: into the window's input area at the
// chunk's offsets (a device rank: enqueued, recorded on input[slot]).
func (r *shmRun) issue(k int) error {
	c := r.c
	off, L := r.g.Span(k)
	area := r.window(c.rank)[r.g.InArea(k):]
	if r.p == nil {
		r.putAround(area, off, L)
		return nil
	}
	slot := k % r.g.Slots
	pt := r.part(k)
	src := r.send.ptr + uintptr(off)
	if r.m > 1 {
		cc, opR := c.vendorCalls(), reduceOpOf(r.call.Op)
		var err error
		if r.evenParts(L) {
			err = cc.ReduceScatter(src, r.recv.ptr+uintptr(off+pt.Off), pt.Len/r.size, r.call.DType, opR, r.s)
		} else {
			for jj := 0; jj < r.m && err == nil; jj++ {
				q := sched.Part(L, r.size, r.m, jj)
				err = cc.Reduce(src+uintptr(q.Off), r.recv.ptr+uintptr(off+q.Off), q.Len/r.size, r.call.DType, opR, jj, r.s)
			}
		}
		if err != nil {
			return fmt.Errorf("%s's intra-cluster reduction: %w", r.p.Name, err)
		}
		if err := r.p.EventRecord(c.shm.reduced[slot], r.s); err != nil {
			return err
		}
		if err := r.p.StreamWaitEvent(c.d2h, c.shm.reduced[slot]); err != nil {
			return err
		}
		src = r.recv.ptr + uintptr(off+pt.Off)
	} else {
		src += uintptr(pt.Off)
	}
	if err := r.p.Memcpy(addrOf(area[pt.Off:]), src, pt.Len, loader.DeviceToHost, c.d2h); err != nil {
		return err
	}
	return r.p.EventRecord(c.shm.input[slot], c.d2h)
}

// putAround copies a host rank's chunk (off, L) into its input area but
// for its own piece, which it reduces straight from its send buffer.
func (r *shmRun) putAround(area []byte, off, L int) {
	own := sched.Range{Off: L}
	if i := r.g.ReducerIndex(r.c.rank); i >= 0 {
		own = r.g.Piece(L, r.size, i)
	}
	reduce.CopyParallel(area[:own.Off], r.send.host[off:off+own.Off], r.workers)
	reduce.CopyParallel(area[own.End():L], r.send.host[off+own.End():off+L], r.workers)
}

// reducePiece folds every contribution to this rank's piece of chunk k,
// if it is a reducer, into its output area (and a host rank's recv, when
// it gets the result): AllReduce's carriers (sched.Sources), or every
// rank's input for Reduce. A host rank reads its own contribution from its
// send buffer.
func (r *shmRun) reducePiece(k int) {
	c, g := r.c, r.g
	i := g.ReducerIndex(c.rank)
	if i < 0 {
		return
	}
	off, L := g.Span(k)
	piece := g.Piece(L, r.size, i)
	if piece.Len == 0 {
		return
	}
	out := r.window(c.rank)[g.OutArea(k):][:piece.Len]
	inArea := g.InArea(k)
	sources := []sched.Source{{Range: piece, Ranks: nil}}
	if r.call.Coll == sdk.AllReduce {
		sources = sched.Sources(c.layout, L, r.size, piece)
	} else {
		for q := 0; q < c.n; q++ {
			sources[0].Ranks = append(sources[0].Ranks, q)
		}
	}
	gets := r.p == nil && (r.call.Coll == sdk.AllReduce || c.rank == r.call.Root)
	for _, s := range sources {
		ins := make([][]byte, len(s.Ranks))
		for x, q := range s.Ranks {
			ins[x] = r.window(q)[inArea+s.Off:][:s.Len]
			if q == c.rank && r.p == nil {
				ins[x] = r.send.host[off+s.Off:][:s.Len]
			}
		}
		var also []byte
		if gets {
			also = r.recv.host[off+s.Off:][:s.Len]
		}
		reduce.FoldParallel(out[s.Off-piece.Off:][:s.Len], also, ins, r.call.DType, r.call.Op, c.n, r.workers)
	}
}

// holders are the output areas that hold the bytes rg of chunk k.
func (r *shmRun) holders(k int, rg sched.Range) []sched.Held {
	_, L := r.g.Span(k)
	return r.g.Holders(L, r.size, rg)
}

// output brings chunk k's result to this rank: a device rank copies the
// pieces covering its part (enqueued, recorded on outpt[slot]) and, in a
// cluster, its library gathers the parts; a host rank copies every piece.
func (r *shmRun) output(k int) error {
	c := r.c
	off, _ := r.g.Span(k)
	pt, outArea := r.part(k), r.g.OutArea(k)
	for _, s := range r.holders(k, pt) {
		if s.Rank == c.rank && r.p == nil {
			continue // reducePiece wrote it
		}
		src := r.window(s.Rank)[outArea+s.At:][:s.Len]
		if r.p == nil {
			reduce.CopyParallel(r.recv.host[off+s.Off:][:s.Len], src, r.workers)
			continue
		}
		if err := r.p.Memcpy(r.recv.ptr+uintptr(off+s.Off), addrOf(src), s.Len, loader.HostToDevice, c.h2d); err != nil {
			return err
		}
	}
	if r.p == nil {
		return nil
	}
	return r.landed(k)
}

// landed follows a device rank's copies of chunk k's result (enqueued on
// the h2d stream): it records outpt[slot] and, in a cluster, its library
// gathers the parts on the caller's stream.
func (r *shmRun) landed(k int) error {
	c := r.c
	off, L := r.g.Span(k)
	pt, slot := r.part(k), k%r.g.Slots
	if err := r.p.EventRecord(c.shm.outpt[slot], c.h2d); err != nil {
		return err
	}
	r.gotten[slot] = true
	if r.m == 1 {
		return nil
	}
	if err := r.p.StreamWaitEvent(r.s, c.shm.outpt[slot]); err != nil {
		return err
	}
	cc, base := c.vendorCalls(), r.recv.ptr+uintptr(off)
	var err error
	if r.evenParts(L) {
		err = cc.AllGather(base+uintptr(pt.Off), base, pt.Len, sdk.Uint8, r.s)
	} else {
		for jj := 0; jj < r.m && err == nil; jj++ {
			q := sched.Part(L, r.size, r.m, jj)
			err = cc.Broadcast(base+uintptr(q.Off), base+uintptr(q.Off), q.Len, sdk.Uint8, jj, r.s)
		}
	}
	if err != nil {
		return fmt.Errorf("%s's intra-cluster gather: %w", r.p.Name, err)
	}
	return nil
}

// foldOnDevice is get for a device-reduced AllReduce (sched.ShmPlan's
// DeviceReduce): this rank copies the other clusters' contributions to its
// part of chunk k from their carriers' input areas into device scratch
// (one area per cluster and slot), folds every cluster's contribution in
// rank order into recv on its device, and lands the chunk. Every copy and
// fold is enqueued on the h2d stream, so it runs in order after the copies
// it reads and before the next chunk's copies into the same scratch.
func (r *shmRun) foldOnDevice(k int) error {
	c := r.c
	off, L := r.g.Span(k)
	pt := r.part(k)
	own := r.send.ptr + uintptr(off) // a cluster of one: its input itself
	if r.m > 1 {
		own = r.recv.ptr + uintptr(off) // the intra ReduceScatter's part
	}
	area := r.scratchArea(k)
	inArea := r.g.InArea(k)
	var srcs [sched.MaxDeviceReduceClusters]uintptr
	for _, s := range sched.Sources(c.layout, L, r.size, pt) {
		n := 0
		for _, q := range s.Ranks {
			src := own + uintptr(s.Off)
			if q != c.rank {
				src = area + uintptr(c.layout.ClusterOf(q).Index*r.partMax+s.Off-pt.Off)
				from := r.window(q)[inArea+s.Off:][:s.Len]
				if err := r.p.Memcpy(src, addrOf(from), s.Len, loader.HostToDevice, c.h2d); err != nil {
					return err
				}
			}
			srcs[n] = src
			n++
		}
		dst := r.recv.ptr + uintptr(off+s.Off)
		if err := r.p.ReduceLocal(c.be.Device, dst, srcs[:n], s.Len/r.size, r.call.DType, r.call.Op, c.n, c.h2d); err != nil {
			return fmt.Errorf("%s's device reduction: %w", r.p.Name, err)
		}
	}
	return r.landed(k)
}

// scratchArea is where chunk k's slot starts in the device scratch: per
// slot one area of partMax bytes per cluster.
func (r *shmRun) scratchArea(k int) uintptr {
	per := len(r.c.layout.Clusters) * r.partMax
	return r.c.shm.scratch + uintptr((k%r.g.Slots)*per)
}

// pipeline runs the chunks, Slots of them in flight, one or two steps a
// chunk (sched.ShmPlan). An opening and a closing step keep the host
// engine's rule about the halves of the windows (nobody reads them across
// this call). Slots are reused safely because each rank, before it
// publishes chunk k, waits for its own reads that the next writes would
// overwrite:
//
//   - two steps (AllReduce, Reduce): the input area of chunk k is read
//     before the chunk's second step, so chunk k+Slots is put in after
//     it; the output area is read by device copies, so a rank waits for
//     its copies of chunk k-Slots before publishing chunk k.
//   - one step (Broadcast, AllGather, ReduceScatter): a rank waits for its
//     copies of chunk k-1 before publishing chunk k, so once chunk k is
//     published every read of chunk k-1 is done and chunk k-1+Slots may
//     be put in.
func (r *shmRun) pipeline() error {
	c, g := r.c, r.g
	if r.p != nil {
		if g.Slots > maxSlots {
			return fmt.Errorf("%w: %d shared-memory slots, more than %d", sdk.ErrInternalError, g.Slots, maxSlots)
		}
		if err := c.shmEvents(g.Slots); err != nil {
			return err
		}
		if g.DeviceReduce {
			r.partMax = r.part(0).Len // chunk 0 is the longest, part 0 of it too
			if err := c.ensureScratch(g.Slots * len(c.layout.Clusters) * r.partMax); err != nil {
				return err
			}
		}
		// The d2h stream reads the input after the caller's earlier work.
		if err := r.p.EventRecord(c.shm.start, r.s); err != nil {
			return err
		}
		if err := r.p.StreamWaitEvent(c.d2h, c.shm.start); err != nil {
			return err
		}
	}
	if err := r.sync(r.sig(-1, 0)); err != nil {
		return err
	}
	if err := r.local(); err != nil {
		return err
	}
	K, two := g.Chunks(), g.Steps() == 2
	issued := 0
	put := func(upTo int) error {
		for ; issued < K && issued <= upTo; issued++ {
			if err := r.put(issued); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put(g.Slots - 1); err != nil {
		return err
	}
	lag := max(g.Lag, 1)
	if two {
		lag = g.Slots
	}
	for k := 0; k < K; k++ {
		if err := r.waitGotten(k - lag); err != nil {
			return err
		}
		if r.p != nil && r.puts() {
			if err := r.p.EventSynchronize(c.shm.input[k%g.Slots]); err != nil {
				return err
			}
		}
		if err := r.sync(r.sig(k, 0)); err != nil {
			return err
		}
		if two {
			r.reducePiece(k)
			if err := r.sync(r.sig(k, 1)); err != nil {
				return err
			}
		}
		if err := r.get(k); err != nil {
			return err
		}
		upTo := k + g.Slots
		if !two {
			upTo = k - lag + g.Slots
		}
		if err := put(upTo); err != nil {
			return err
		}
	}
	if r.p != nil {
		if err := r.p.StreamSynchronize(c.h2d); err != nil {
			return err
		}
		if err := r.p.StreamSynchronize(r.s); err != nil {
			return err
		}
	}
	return r.sync(r.sig(K, 0))
}

// waitGotten waits for this rank's device copies out of the windows of
// chunk k (nothing for k < 0 or when it copied nothing).
func (r *shmRun) waitGotten(k int) error {
	if k < 0 || r.p == nil || !r.gotten[k%r.g.Slots] {
		return nil
	}
	r.gotten[k%r.g.Slots] = false
	return r.p.EventSynchronize(r.c.shm.outpt[k%r.g.Slots])
}

// puts reports whether this rank puts input in its window.
func (r *shmRun) puts() bool {
	return r.call.Coll != sdk.Broadcast || r.c.rank == r.call.Root
}

// local is what a rank does for itself without the windows: a Broadcast
// root's own copy.
func (r *shmRun) local() error {
	if r.call.Coll != sdk.Broadcast || r.c.rank != r.call.Root {
		return nil
	}
	if r.p == nil {
		copy(r.recv.host[:r.block], r.send.host[:r.block])
		return nil
	}
	if r.send.ptr == r.recv.ptr {
		return nil
	}
	return r.p.Memcpy(r.recv.ptr, r.send.ptr, r.block, loader.DeviceToDevice, r.s)
}

// put starts chunk k's input into this rank's window (a device rank:
// enqueued, recorded on input[slot]).
func (r *shmRun) put(k int) error {
	if !r.puts() {
		return nil
	}
	if r.call.Coll == sdk.AllReduce {
		return r.issue(k)
	}
	off, L := r.g.Span(k)
	area := r.window(r.c.rank)[r.g.InArea(k):]
	if r.p == nil && r.call.Coll == sdk.Reduce {
		r.putAround(area, off, L)
		return nil
	}
	for b := 0; b < r.g.Blocks; b++ {
		from := off + b*r.block // ReduceScatter: block b's chunk
		dst := area[r.g.Block(b):][:L]
		if r.p == nil {
			reduce.CopyParallel(dst, r.send.host[from:from+L], r.workers)
			continue
		}
		if err := r.p.Memcpy(addrOf(dst), r.send.ptr+uintptr(from), L, loader.DeviceToHost, r.c.d2h); err != nil {
			return err
		}
	}
	if r.p == nil {
		return nil
	}
	return r.p.EventRecord(r.c.shm.input[k%r.g.Slots], r.c.d2h)
}

// get takes chunk k's result out of the windows (a device rank: enqueued,
// recorded on outpt[slot]).
func (r *shmRun) get(k int) error {
	c, g := r.c, r.g
	switch {
	case g.DeviceReduce:
		return r.foldOnDevice(k)
	case g.Coll == sdk.AllReduce:
		return r.output(k)
	}
	off, L := g.Span(k)
	type piece struct {
		src []byte
		to  int // offset in recv
	}
	var pieces []piece
	switch g.Coll {
	case sdk.Reduce:
		if c.rank != r.call.Root {
			return nil
		}
		for _, s := range r.holders(k, sched.Range{Len: L}) {
			if s.Rank == c.rank && r.p == nil {
				continue // reducePiece wrote it
			}
			pieces = append(pieces, piece{r.window(s.Rank)[g.OutArea(k)+s.At:][:s.Len], off + s.Off})
		}
	case sdk.Broadcast:
		if c.rank == r.call.Root {
			return nil
		}
		pieces = append(pieces, piece{r.window(r.call.Root)[g.InArea(k):][:L], off})
	case sdk.AllGather:
		for q := 0; q < c.n; q++ {
			pieces = append(pieces, piece{r.window(q)[g.InArea(k):][:L], q*r.block + off})
		}
	case sdk.ReduceScatter:
		dst := r.window(c.rank)[g.OutArea(k):][:L]
		if r.p == nil {
			dst = r.recv.host[off : off+L]
		}
		r.fold(dst, func(q int) []byte { return r.window(q)[g.InArea(k)+g.Block(c.rank):][:L] }, c.n)
		if r.p == nil {
			return nil
		}
		pieces = append(pieces, piece{dst, off})
	}
	for _, pc := range pieces {
		if r.p == nil {
			reduce.CopyParallel(r.recv.host[pc.to:pc.to+len(pc.src)], pc.src, r.workers)
			continue
		}
		if err := r.p.Memcpy(r.recv.ptr+uintptr(pc.to), addrOf(pc.src), len(pc.src), loader.HostToDevice, c.h2d); err != nil {
			return err
		}
	}
	if r.p == nil || len(pieces) == 0 {
		return nil
	}
	r.gotten[k%g.Slots] = true
	return r.p.EventRecord(c.shm.outpt[k%g.Slots], c.h2d)
}

// fold reduces n inputs, in order, into dst (avg: then divides by the
// rank count).
func (r *shmRun) fold(dst []byte, in func(i int) []byte, n int) {
	ins := make([][]byte, n)
	for i := range ins {
		ins[i] = in(i)
	}
	reduce.FoldParallel(dst, nil, ins, r.call.DType, r.call.Op, r.c.n, r.workers)
}
