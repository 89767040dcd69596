package main

// backend.go is the C API's one adapter onto package core: every call into
// core is in this file, so that a change of core's API changes this file
// alone. The rest of capi speaks in comm, collArgs and plain pointers.

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// newUniqueID makes a communicator id and starts its rendezvous in this
// process; the result is FlagCX's 256-byte flagcxUniqueId.
func newUniqueID() ([core.UniqueIDBytes]byte, error) {
	id, err := core.GetUniqueID()
	if err != nil {
		return [core.UniqueIDBytes]byte{}, err
	}
	return id.Bytes(), nil
}

// uniqueIDBytes is the size of flagcxUniqueId.
const uniqueIDBytes = core.UniqueIDBytes

// comm is one rank's communicator as the C API hands it out.
type comm struct {
	hc *core.Comm
	be *backend
	// dev is the device the rank runs on (0 on the host backend).
	dev int
	// mu keeps the calls of C threads that share the communicator one at a
	// time, as core requires (Abort alone does not take it).
	mu sync.Mutex
	// groups counts the open groups of the communicator (GroupStart's);
	// pm holds its pre-multiplying ops (premul.go).
	groups int
	pm     premuls
	// os is its one-sided registrations and buffers (onesided.go).
	os osTable
	// lastErr is the message of this communicator's last failed call
	// (guarded by registry.mu: flagcxGetLastError may come from any thread).
	lastErr string
}

// initComm joins rank to the communicator of id on be (device dev of its
// plugin, or the host).
func initComm(id []byte, nranks, rank int, be *backend, dev int) (*comm, error) {
	uid, err := core.UniqueIDFromBytes(id)
	if err != nil {
		return nil, fmt.Errorf("%w: the unique id is not one flagcxGetUniqueId made: %w", sdk.ErrInvalidArgument, err)
	}
	target := core.HostBackend()
	if be.plugin != nil {
		target = core.DeviceBackend(be.plugin, dev)
	} else {
		dev = 0
	}
	hc, err := core.InitRank(uid, nranks, rank, core.WithBackend(target))
	if err != nil {
		return nil, err
	}
	return &comm{hc: hc, be: be, dev: dev}, nil
}

// split is core's Split of c: nil (no error) for a rank that passed
// core.SplitNoColor. The new communicator keeps c's backend and device.
func (c *comm) split(color, key int) (*comm, error) {
	hc, err := c.hc.Split(color, key)
	if err != nil || hc == nil {
		return nil, err
	}
	return &comm{hc: hc, be: c.be, dev: c.dev}, nil
}

// shrink is core's Shrink of c: nil (no error) for an excluded rank. The
// new communicator keeps c's backend and device.
func (c *comm) shrink(exclude []int) (*comm, error) {
	hc, err := c.hc.Shrink(exclude)
	if err != nil || hc == nil {
		return nil, err
	}
	return &comm{hc: hc, be: c.be, dev: c.dev}, nil
}

func (c *comm) count() int          { return c.hc.Count() }
func (c *comm) rank() int           { return c.hc.Rank() }
func (c *comm) isHomogeneous() bool { return c.hc.IsHomogeneous() }
func (c *comm) destroy() error      { return c.hc.Destroy() }
func (c *comm) abort() error        { return c.hc.Abort() }
func (c *comm) onDevice() bool      { return c.hc.Backend().OnDevice() }

func (c *comm) groupStart() {
	c.groups++
	c.hc.GroupStart()
}

// groupEnd closes a group; the outermost hands back the scratch buffers
// of the pre-multiplied calls in it, which the group has now read.
func (c *comm) groupEnd() error {
	err := c.hc.GroupEnd()
	if c.groups > 0 {
		c.groups--
		if c.groups == 0 {
			c.releaseScratch()
		}
	}
	return err
}

// asyncError is the error that ended the communicator in the background
// (core.Comm.AsyncError), or nil.
func (c *comm) asyncError() error { return c.hc.AsyncError() }

// barrier waits for stream s, then for every rank.
func (c *comm) barrier(s uintptr) error {
	if c.onDevice() && s != 0 {
		if err := c.be.plugin.StreamSynchronize(loader.Stream(s)); err != nil {
			return err
		}
	}
	return c.hc.Barrier()
}

// buffer is n bytes at p as core takes them: device memory on a device
// rank, host memory on a host rank; nil is an empty buffer.
func (c *comm) buffer(p unsafe.Pointer, n int) core.Buffer {
	if p == nil {
		n = 0
	}
	if c.onDevice() {
		return core.DeviceBuffer(uintptr(p), n)
	}
	if p == nil || n == 0 {
		return core.HostBuffer(nil)
	}
	return core.HostBuffer(unsafe.Slice((*byte)(p), n))
}

// collArgs is one collective call as it came through the C API.
type collArgs struct {
	coll       sdk.Collective
	send, recv unsafe.Pointer
	count      int
	dt         sdk.DataType
	op         sdk.RedOp
	root       int
	stream     uintptr
}

// span is the buffer at p of blocks blocks of count elements of dt, which
// is as long as C's caller means it to be (C passes no length). Its bytes
// come from sdk's checker (an overflowing count is refused, never
// wrapped), and a host rank's large one is checked against the memory
// mapped there (hostspan.go): a buffer too small for the count is refused
// as that, before core's checker could see two spans overlap.
func (c *comm) span(which string, p unsafe.Pointer, count int, dt sdk.DataType, blocks int, countName string) (core.Buffer, error) {
	if blocks == 0 {
		return c.buffer(p, 0), nil
	}
	n, err := sdk.CheckCount(countName, count, dt, blocks)
	if err != nil {
		return core.Buffer{}, err
	}
	if !c.onDevice() && n >= spanCheckMin {
		what := fmt.Sprintf("%d elements of %v", count, dt)
		if blocks > 1 {
			what = fmt.Sprintf("%d ranks x %s", blocks, what)
		}
		if err := checkHostSpan(which, uintptr(p), n, what); err != nil {
			return core.Buffer{}, err
		}
	}
	return c.buffer(p, n), nil
}

// collSpan is a's send or recv buffer (span), sized as FlagCX's flagcx.h
// sizes roots' and non-roots' buffers: alike.
func (c *comm) collSpan(a collArgs, recv bool) (core.Buffer, error) {
	d := a.coll.Info()
	if d == nil {
		return core.Buffer{}, fmt.Errorf("%w: collective %d", sdk.ErrInternalError, int(a.coll))
	}
	if recv {
		return c.span("recv", a.recv, a.count, a.dt, d.Recv.Blocks(c.count()), d.CountName)
	}
	return c.span("send", a.send, a.count, a.dt, d.Send.Blocks(c.count()), d.CountName)
}

// collective runs a.coll (every collective but AlltoAllv).
func (c *comm) collective(a collArgs) error {
	send, err := c.collSpan(a, false)
	if err != nil {
		return err
	}
	return c.collectiveOn(a, send)
}

// collectiveOn runs a with send in place of a.send.
func (c *comm) collectiveOn(a collArgs, send core.Buffer) error {
	recv, err := c.collSpan(a, true)
	if err != nil {
		return err
	}
	call := sdk.Call{Coll: a.coll, Count: a.count, DType: a.dt, Op: a.op, Root: a.root}
	return sdk.Dispatch[core.Buffer, core.Stream](c.hc, call, send, recv, loader.Stream(a.stream))
}

// scratchBuffer is the first bytes of sc as core takes them.
func (c *comm) scratchBuffer(sc *scratch, bytes int) core.Buffer {
	if c.onDevice() {
		return core.DeviceBuffer(sc.ptr, bytes)
	}
	return core.HostBuffer(sc.host[:bytes])
}

// alltoallv runs AlltoAllv; counts and displacements are in elements.
func (c *comm) alltoallv(send unsafe.Pointer, sc, sd []int, recv unsafe.Pointer, rc, rd []int, dt sdk.DataType, stream uintptr) error {
	// The counts and displacements are at most 2^48 each (capiAlltoAllv):
	// the extent's bytes do not overflow.
	sb, err := c.span("send", send, extent(sc, sd), dt, 1, "sendcounts + sdispls")
	if err != nil {
		return err
	}
	rb, err := c.span("recv", recv, extent(rc, rd), dt, 1, "recvcounts + rdispls")
	if err != nil {
		return err
	}
	return c.hc.AlltoAllv(sb, sc, sd, rb, rc, rd, dt, loader.Stream(stream))
}

// p2p posts a send (recv false) or a receive of count elements.
func (c *comm) p2p(recv bool, buf unsafe.Pointer, count int, dt sdk.DataType, peer int, stream uintptr) error {
	b, err := c.span("buffer", buf, count, dt, 1, "count")
	if err != nil {
		return err
	}
	if recv {
		return c.hc.Recv(b, count, dt, peer, loader.Stream(stream))
	}
	return c.hc.Send(b, count, dt, peer, loader.Stream(stream))
}

// extent is the elements a vector collective's buffer spans: the end of
// its furthest block.
func extent(counts, displs []int) int {
	end := 0
	for i := range counts {
		end = max(end, displs[i]+counts[i])
	}
	return end
}

// hostReduce is core's host reduction (dst = a op b), for what capi
// computes on the host itself.
func hostReduce(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp) error {
	return core.HostReduce(dst, a, b, dt, op)
}

// bindDevice makes c's device current on the calling OS thread (a device
// rank's vendor calls need it; the caller locks the goroutine to it).
func (c *comm) bindDevice() error {
	if !c.onDevice() {
		return nil
	}
	return c.be.plugin.SetDevice(c.dev)
}

// groupWait bounds the wait for the groups of several communicators
// (endGroups): ten times the deadline of one wait without progress, as
// the groups' collectives may each take up to that.
func groupWait() time.Duration {
	t := 30 * time.Second
	if cfg, err := core.NetConfigFromEnv(); err == nil && cfg.Timeout > 0 {
		t = cfg.Timeout
	}
	return 10 * t
}

// ---- one-sided calls (onesided.go keeps the C API's tables) ----------------

// registerWindow registers this rank's n bytes at p as a window of c
// (collective) and returns it with its index.
func (c *comm) registerWindow(p unsafe.Pointer, n int) (*core.Window, int, error) {
	w, err := c.hc.RegisterWindow(c.buffer(p, n))
	if err != nil {
		return nil, 0, err
	}
	return w, w.Index(), nil
}

// freeWindow unregisters w on this rank.
func (c *comm) freeWindow(w *core.Window) error { return w.Free() }

// registerSignals makes the n bytes at p c's signal slots (collective);
// host says p is host memory whatever the rank's backend, nil p returns to
// the communicator's own slots.
func (c *comm) registerSignals(p unsafe.Pointer, n int, host bool) error {
	b := c.buffer(p, n)
	if host && p != nil {
		b = core.HostBuffer(unsafe.Slice((*byte)(p), n))
	}
	if p == nil {
		b = core.Buffer{}
	}
	return c.hc.RegisterSignals(b)
}

// registerStaging makes the n bytes of host memory at p c's staging (nil:
// its own again).
func (c *comm) registerStaging(p unsafe.Pointer, n int) error {
	if p == nil {
		return c.hc.RegisterStaging(nil)
	}
	return c.hc.RegisterStaging(unsafe.Slice((*byte)(p), n))
}

// What an RMA call does, as the C entries name it.
type rmaKind int

const (
	rmaPut rmaKind = iota
	rmaBatchPut
	rmaGet
	rmaPutSignal
	rmaSignal
)

// rma runs kind's core call: ops[0] for Put, Get and PutSignal, all of
// them for BatchPut, none for Signal.
func (c *comm) rma(kind rmaKind, peer int, ops []core.RMA, s uintptr) error {
	st := loader.Stream(s)
	switch kind {
	case rmaPut:
		return c.hc.Put(peer, ops[0], st)
	case rmaBatchPut:
		return c.hc.PutBatch(peer, ops, st)
	case rmaGet:
		return c.hc.Get(peer, ops[0], st)
	case rmaPutSignal:
		return c.hc.PutSignal(peer, ops[0], st)
	default:
		return c.hc.Signal(peer, st)
	}
}

// waitSignal waits until this rank's signal slot of each peer holds at
// least its count.
func (c *comm) waitSignal(peers []int, counts []uint64, s uintptr) error {
	waits := make([]core.SignalWait, len(peers))
	for i := range peers {
		waits[i] = core.SignalWait{Peer: peers[i], Value: counts[i]}
	}
	return c.hc.WaitSignal(waits, loader.Stream(s))
}

func (c *comm) readCounter() uint64             { return c.hc.ReadCounter() }
func (c *comm) waitCounter(target uint64) error { return c.hc.WaitCounter(target) }
