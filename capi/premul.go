package main

// premul.go: the reduction ops of flagcxRedOpCreatePreMulSum (a flagcx-go
// extension that serves NCCL's ncclRedOpCreatePreMulSum, docs/nccl.md). A
// reduction with such an op multiplies each rank's input by that rank's
// scalar, then sums. Core reduces only with NCCL's five built-in ops, so
// the product goes into a scratch buffer first and the ordinary Sum
// collective runs on the scratch:
//
//   - device ranks: the plugin's reduceLocal (op Prod, on the caller's
//     stream) of the input against a buffer that holds the scalar in every
//     element: for a host scalar a buffer per data type and value, filled
//     once and kept by the communicator; for a device scalar the scratch
//     itself, filled on the stream by doubling device-to-device copies, so
//     the value is the one the stream sees when the collective runs;
//   - host ranks, and device ranks whose plugin cannot reduce (no
//     reduceLocal, or NVRTC missing): the same product on the host
//     (core.HostReduce, whose rules are reduceLocal's).
//
// A scratch buffer is the call's until the collective has read it: its
// event, recorded on the call's stream after the collective was issued
// (inside a group: after the group ran), orders a later call on another
// stream behind it.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Where the scalar lives: ncclScalarResidence_t's values.
const (
	scalarDevice = 0 // read on the stream at each collective
	scalarHost   = 1 // read once, at creation
)

// maxMults is how many host scalars' filled buffers a communicator keeps
// (torch creates an op per call, mostly with one factor).
const maxMults = 8

// premulOp is one op of flagcxRedOpCreatePreMulSum.
type premulOp struct {
	dt sdk.DataType
	// host is the scalar's bytes (scalarHost); dev its address otherwise.
	host []byte
	dev  unsafe.Pointer
}

// multBuf is device memory holding one host scalar in every element.
type multBuf struct {
	ptr   uintptr
	bytes int
}

type multKey struct {
	dt  sdk.DataType
	val [8]byte
}

// scratch holds one call's scaled input: device memory on a device rank
// (host is then the host fallback's staging), host memory on a host rank.
type scratch struct {
	ptr      uintptr
	bytes    int
	host     []byte
	ev       loader.Event
	recorded bool // ev marks the end of the last collective that read ptr
	stream   loader.Stream
}

// premuls is what a communicator keeps for its ops (guarded by comm.mu).
type premuls struct {
	next  int
	ops   map[sdk.RedOp]*premulOp
	mults map[multKey]*multBuf
	// free scratches may be taken; held ones are read by the open group.
	free, held []*scratch
	// hostOnly: the plugin cannot reduce on the device (asked once).
	asked, hostOnly bool
}

// createPreMulSum makes an op of c that scales by the scalar at p.
func (c *comm) createPreMulSum(p unsafe.Pointer, dt sdk.DataType, residence int) (sdk.RedOp, error) {
	switch {
	case !dt.Valid():
		return 0, fmt.Errorf("%w: data type %d: use a flagcxDataType_t below flagcxNumTypes", sdk.ErrInvalidArgument, dt)
	case residence != scalarDevice && residence != scalarHost:
		return 0, fmt.Errorf("%w: scalar residence %d: use ncclScalarDevice (0) or ncclScalarHostImmediate (1)", sdk.ErrInvalidArgument, residence)
	case p == nil:
		return 0, fmt.Errorf("%w: scalar is NULL: pass the address of one %v element", sdk.ErrInvalidArgument, dt)
	}
	pm := &c.pm
	id := int64(sdk.NumRedOps) + int64(pm.next)
	if id > 1<<31-1 {
		return 0, fmt.Errorf("%w: this communicator made 2^31 reduction ops: make a new communicator", sdk.ErrInvalidUsage)
	}
	op := &premulOp{dt: dt, dev: p}
	if residence == scalarHost {
		op.host, op.dev = slices.Clone(unsafe.Slice((*byte)(p), dt.Size())), nil
	}
	if pm.ops == nil {
		pm.ops = map[sdk.RedOp]*premulOp{}
	}
	pm.next++
	pm.ops[sdk.RedOp(id)] = op
	return sdk.RedOp(id), nil
}

// opError is the error of a reduction op c does not have.
func opError(op sdk.RedOp) error {
	return fmt.Errorf("%w: reduction op %d is not one of this communicator: it was destroyed, or not made on it by ncclRedOpCreatePreMulSum (flagcxRedOpCreatePreMulSum); the built-in ops are 0 to %d",
		sdk.ErrInvalidArgument, op, sdk.NumRedOps-1)
}

// destroyRedOp forgets op. A collective issued with it keeps its scalar:
// the buffers it reads are the communicator's.
func (c *comm) destroyRedOp(op sdk.RedOp) error {
	if c.pm.ops[op] == nil {
		return opError(op)
	}
	delete(c.pm.ops, op)
	return nil
}

// preMulSum runs a, whose op is one of createPreMulSum's: the Sum
// collective of the inputs scaled into a scratch buffer.
func (c *comm) preMulSum(a collArgs) error {
	op := c.pm.ops[a.op]
	if op == nil {
		return opError(a.op)
	}
	if op.dt != a.dt {
		return fmt.Errorf("%w: reduction op %d was made for %v; the call passes %v", sdk.ErrInvalidArgument, a.op, op.dt, a.dt)
	}
	// scale reads the send buffer here, before core checks anything:
	// collSpan checks it (that its bytes do not overflow, which makes
	// sendN's below safe, and the memory a host rank maps there).
	if _, err := c.collSpan(a, false); err != nil {
		return err
	}
	sendN, _ := a.coll.BufElems(a.count, c.count())
	if a.send == nil && sendN > 0 {
		return fmt.Errorf("%w: sendbuff is NULL with count %d", sdk.ErrInvalidArgument, a.count)
	}
	bytes := sendN * a.dt.Size()
	s := loader.Stream(a.stream)
	sc, err := c.takeScratch(bytes, s)
	if err != nil {
		return err
	}
	c.pm.held = append(c.pm.held, sc)
	if err = c.scale(op, sc, a.send, sendN, s); err == nil {
		a.op = sdk.Sum
		err = c.collectiveOn(a, c.scratchBuffer(sc, bytes))
	}
	if c.groups == 0 {
		c.releaseScratch()
	}
	return err
}

// scale writes the first n elements at send times op's scalar into sc.
func (c *comm) scale(op *premulOp, sc *scratch, send unsafe.Pointer, n int, s loader.Stream) error {
	if n == 0 {
		return nil
	}
	if !c.onDevice() {
		in := unsafe.Slice((*byte)(send), n*op.dt.Size())
		return scaleHost(sc.host, in, op, func(b []byte, p unsafe.Pointer) error {
			copy(b, unsafe.Slice((*byte)(p), len(b)))
			return nil
		})
	}
	if !c.deviceReduces(sc) {
		return c.scaleStaged(op, sc, send, n, s)
	}
	p, size := c.be.plugin, op.dt.Size()
	mult := sc.ptr
	if op.host != nil {
		m, err := c.multFor(op, n*size)
		if err != nil {
			return err
		}
		mult = m
	} else if err := c.spread(sc.ptr, uintptr(op.dev), size, n, s); err != nil {
		return err
	}
	return p.ReduceLocal(c.dev, sc.ptr, []uintptr{uintptr(send), mult}, n, op.dt, sdk.Prod, 1, s)
}

// spread fills n elements of size bytes at dst with the element at src,
// on s: one copy of it, then copies that double what is filled.
func (c *comm) spread(dst, src uintptr, size, n int, s loader.Stream) error {
	p := c.be.plugin
	if err := p.Memcpy(dst, src, size, loader.DeviceToDevice, s); err != nil {
		return err
	}
	for k := 1; k < n; {
		m := min(k, n-k)
		if err := p.Memcpy(dst+uintptr(k*size), dst, m*size, loader.DeviceToDevice, s); err != nil {
			return err
		}
		k += m
	}
	return nil
}

// scaleHost sets out = in * op's scalar on the host; read copies a device
// scalar's bytes into its buffer. out's tail past in holds the scalars.
func scaleHost(out, in []byte, op *premulOp, read func([]byte, unsafe.Pointer) error) error {
	size := op.dt.Size()
	mult := out[len(in) : 2*len(in)]
	if op.host != nil {
		copy(mult, op.host)
	} else if err := read(mult[:size], op.dev); err != nil {
		return err
	}
	fillWith(mult, mult[:size])
	return hostReduce(out[:len(in)], in, mult, op.dt, sdk.Prod)
}

// fillWith sets b, a whole number of elements, to elem in every element,
// by copies that double what is filled (elem may be b's first element).
func fillWith(b, elem []byte) {
	for n := copy(b, elem); n < len(b); {
		n += copy(b[n:], b[:n])
	}
}

// scaleStaged scales on the host for a device rank whose plugin cannot
// reduce: the stream is waited for, the input and a device scalar come
// to the host, the product goes back.
func (c *comm) scaleStaged(op *premulOp, sc *scratch, send unsafe.Pointer, n int, s loader.Stream) error {
	p, bytes := c.be.plugin, n*op.dt.Size()
	if err := p.StreamSynchronize(s); err != nil {
		return err
	}
	if len(sc.host) < 2*bytes {
		sc.host = make([]byte, 2*bytes)
	}
	in := sc.host[:bytes]
	if err := p.Memcpy(uintptr(unsafe.Pointer(unsafe.SliceData(in))), uintptr(send), bytes, loader.DeviceToHost, 0); err != nil {
		return err
	}
	err := scaleHost(sc.host, in, op, func(b []byte, d unsafe.Pointer) error {
		return p.Memcpy(uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(d), len(b), loader.DeviceToHost, 0)
	})
	if err != nil {
		return err
	}
	// On s, which the collective on the product follows: a copy on the
	// default stream would race with a non-blocking s.
	return p.Memcpy(sc.ptr, uintptr(unsafe.Pointer(unsafe.SliceData(sc.host))), bytes, loader.HostToDevice, s)
}

// deviceReduces asks the plugin once whether it reduces on this rank's
// device (a reduceLocal of no elements).
func (c *comm) deviceReduces(sc *scratch) bool {
	pm, p := &c.pm, c.be.plugin
	if !pm.asked {
		pm.asked = true
		var err error = sdk.ErrNotSupported
		if p.CanReduceLocal() {
			err = p.ReduceLocal(c.dev, sc.ptr, []uintptr{sc.ptr}, 0, sdk.Float32, sdk.Sum, 1, 0)
		}
		pm.hostOnly = err != nil
		how := "on the device (" + p.Name + "'s reduceLocal)"
		if err != nil {
			how = fmt.Sprintf("on the host (%s cannot reduce on the device: %v)", p.Name, err)
		}
		flog.Default().Log(context.Background(), flog.LevelInfo,
			fmt.Sprintf("libflagcx: rank %d scales the inputs of pre-multiplied sums %s", c.rank(), how), flog.KeySubsys, flog.Init)
	}
	return !pm.hostOnly
}

// multFor is a device buffer of at least bytes holding op's host scalar
// in every element: the communicator's for that type and value, filled on
// the host and copied once, grown (to a power of two) as calls need.
func (c *comm) multFor(op *premulOp, bytes int) (uintptr, error) {
	pm, p := &c.pm, c.be.plugin
	k := multKey{dt: op.dt}
	copy(k.val[:], op.host)
	m := pm.mults[k]
	if m != nil && m.bytes >= bytes {
		return m.ptr, nil
	}
	if m == nil && len(pm.mults) >= maxMults {
		if err := c.freeMults(); err != nil {
			return 0, err
		}
	}
	if m != nil {
		if err := c.quiesce(); err != nil {
			return 0, err
		}
		if err := p.DeviceFree(m.ptr); err != nil {
			return 0, err
		}
		delete(pm.mults, k)
	}
	n := roundUp(bytes)
	ptr, err := p.DeviceMalloc(c.dev, n)
	if err != nil {
		return 0, fmt.Errorf("device buffer of %d bytes for a pre-multiplying op's scalar on %s device %d: %w", n, p.Name, c.dev, err)
	}
	host := make([]byte, n)
	fillWith(host, op.host)
	// The copy is waited for: the scalars are read by reduceLocals on any
	// caller's stream, and a non-blocking stream (torch's) does not wait
	// for the default one (a 1-rank torch reduce_scatter read a half-filled
	// buffer on an H200).
	err = p.Memcpy(ptr, uintptr(unsafe.Pointer(unsafe.SliceData(host))), n, loader.HostToDevice, 0)
	if err == nil {
		err = p.StreamSynchronize(0)
	}
	if err != nil {
		_ = p.DeviceFree(ptr)
		return 0, err
	}
	if pm.mults == nil {
		pm.mults = map[multKey]*multBuf{}
	}
	pm.mults[k] = &multBuf{ptr: ptr, bytes: n}
	return ptr, nil
}

// roundUp is the power of two at least n (and at least 4 KiB).
func roundUp(n int) int {
	b := 4096
	for b < n {
		b *= 2
	}
	return b
}

// quiesce waits until nothing reads the buffers of the ops: every read
// (reduceLocal) precedes, on its stream, the collective that a free
// scratch's event follows; the calls of an open group have their streams
// waited for.
func (c *comm) quiesce() error {
	p := c.be.plugin
	for _, sc := range c.pm.held {
		if err := p.StreamSynchronize(sc.stream); err != nil {
			return err
		}
	}
	for _, sc := range c.pm.free {
		if sc.recorded {
			if err := p.EventSynchronize(sc.ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// freeMults frees every scalar buffer, once nothing can read them.
func (c *comm) freeMults() error {
	if len(c.pm.mults) == 0 {
		return nil
	}
	if err := c.quiesce(); err != nil {
		return err
	}
	for k, m := range c.pm.mults {
		if err := c.be.plugin.DeviceFree(m.ptr); err != nil {
			return err
		}
		delete(c.pm.mults, k)
	}
	return nil
}

// takeScratch is a scratch buffer of at least bytes for a call on s: the
// smallest free one that fits (ordered behind the collective that last
// read it), else a free one grown, else a new one.
func (c *comm) takeScratch(bytes int, s loader.Stream) (*scratch, error) {
	pm := &c.pm
	best := -1 // the smallest that fits, else the largest
	for i, sc := range pm.free {
		if best < 0 {
			best = i
			continue
		}
		b := pm.free[best]
		fits, bfits := sc.bytes >= bytes, b.bytes >= bytes
		if (fits && (!bfits || sc.bytes < b.bytes)) || (!fits && !bfits && sc.bytes > b.bytes) {
			best = i
		}
	}
	sc := &scratch{}
	if best >= 0 {
		sc = pm.free[best]
		pm.free = slices.Delete(pm.free, best, best+1)
	}
	if err := c.fitScratch(sc, bytes, s); err != nil {
		pm.free = append(pm.free, sc)
		return nil, err
	}
	sc.stream = s
	return sc, nil
}

// fitScratch makes sc at least bytes and usable on s.
func (c *comm) fitScratch(sc *scratch, bytes int, s loader.Stream) error {
	if !c.onDevice() {
		if len(sc.host) < 2*bytes {
			sc.host = make([]byte, 2*roundUp(bytes))
		}
		sc.bytes = len(sc.host) / 2
		return nil
	}
	p := c.be.plugin
	if sc.recorded && sc.bytes >= bytes && sc.stream != s {
		if err := p.StreamWaitEvent(s, sc.ev); err != nil {
			return err
		}
	}
	if sc.bytes >= bytes {
		return nil
	}
	if sc.ptr != 0 {
		if sc.recorded {
			if err := p.EventSynchronize(sc.ev); err != nil {
				return err
			}
		}
		if err := p.DeviceFree(sc.ptr); err != nil {
			return err
		}
		sc.ptr, sc.bytes = 0, 0
	}
	n := roundUp(bytes)
	ptr, err := p.DeviceMalloc(c.dev, n)
	if err != nil {
		return fmt.Errorf("device scratch of %d bytes for a pre-multiplied input on %s device %d: %w", n, p.Name, c.dev, err)
	}
	sc.ptr, sc.bytes, sc.recorded = ptr, n, false
	return nil
}

// releaseScratch hands back the scratch buffers of the calls issued (or
// of the group just run): each marked by an event on its call's stream.
func (c *comm) releaseScratch() {
	pm := &c.pm
	for _, sc := range pm.held {
		sc.recorded = false
		if c.onDevice() && sc.ptr != 0 {
			if sc.ev == 0 {
				sc.ev, _ = c.be.plugin.EventCreate(c.dev)
			}
			sc.recorded = sc.ev != 0 && c.be.plugin.EventRecord(sc.ev, sc.stream) == nil
		}
		pm.free = append(pm.free, sc)
	}
	pm.held = pm.held[:0]
}

// closePremul frees what the ops used, once the streams are done with it
// (flagcxCommDestroy).
func (c *comm) closePremul() error {
	if !c.onDevice() {
		c.pm = premuls{}
		return nil
	}
	c.releaseScratch()
	err := c.freeMults()
	p := c.be.plugin
	for _, sc := range c.pm.free {
		if sc.recorded {
			err = errors.Join(err, p.EventSynchronize(sc.ev))
		}
		if sc.ptr != 0 {
			err = errors.Join(err, p.DeviceFree(sc.ptr))
		}
		if sc.ev != 0 {
			err = errors.Join(err, p.EventDestroy(sc.ev))
		}
	}
	c.pm = premuls{}
	return err
}
