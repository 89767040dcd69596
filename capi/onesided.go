package main

// onesided.go: what the C API keeps of a communicator's one-sided state
// (docs/c-api.md, "One-sided operations"). FlagCX names registered memory
// by an index, its "MR index": the position of the registration in the
// communicator's table, the same on every rank because registration is
// collective. flagcxOneSideRegister and flagcxCommWindowRegister add to one
// table, a buffer once (a second registration of the same address reuses
// its index, as FlagCX's flagcxOneSideRegisterInternal does); core's
// window numbers are these indices. The calls into core are backend.go's.

import (
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// osTable is a communicator's registrations, by index, and the signal and
// staging buffers it was given.
type osTable struct {
	regs    []*osReg
	signals uintptr // flagcxOneSideSignalRegister's buffer, 0: none
	staging uintptr // flagcxOneSideStagingRegister's buffer, 0: none
}

// osReg is one registration: core's window and this rank's memory of it.
type osReg struct {
	w    *core.Window
	base uintptr
	size int
	// pinned: flagcxOneSideRegister registered it, which has no
	// deregistration in FlagCX's API (its registrations last as long as
	// the communicator); wins counts the flagcxWindow_t handles on it.
	// The window is freed when neither holds it any more.
	pinned bool
	wins   int
	freed  bool
}

// osMaxBytes bounds every size and offset a one-sided entry takes (far
// above any memory, far below int overflow).
const osMaxBytes = 1 << 50

func osSize(v uint64, what string) (int, error) {
	if v > osMaxBytes {
		return 0, fmt.Errorf("%w: %s %d is out of range", sdk.ErrInvalidArgument, what, v)
	}
	return int(v), nil
}

// osRegister registers this rank's size bytes at p for one-sided calls and
// returns its index: the index already holding p, or a new one made
// collectively (every rank registers, in the same order). window says a
// flagcxWindow_t handle will hold it, else flagcxOneSideRegister does.
func (c *comm) osRegister(p unsafe.Pointer, size uint64, window bool) (int, error) {
	if p == nil || size == 0 {
		return 0, fmt.Errorf("%w: buff is NULL or size is 0: register memory of this rank (flagcxMemAlloc's, or host memory on the host backend)", sdk.ErrInvalidArgument)
	}
	n, err := osSize(size, "size")
	if err != nil {
		return 0, err
	}
	for i, r := range c.os.regs {
		if !r.freed && r.base == uintptr(p) {
			r.hold(window)
			return i, nil
		}
	}
	w, idx, err := c.registerWindow(p, n)
	if err != nil {
		return 0, err
	}
	if idx != len(c.os.regs) {
		// Every window of c is made here, so core's numbers are the table's.
		_ = c.freeWindow(w)
		return 0, fmt.Errorf("%w: core numbered the window %d, the table expected %d", sdk.ErrInternalError, idx, len(c.os.regs))
	}
	r := &osReg{w: w, base: uintptr(p), size: n}
	r.hold(window)
	c.os.regs = append(c.os.regs, r)
	return idx, nil
}

func (r *osReg) hold(window bool) {
	if window {
		r.wins++
	} else {
		r.pinned = true
	}
}

// osRelease drops a flagcxWindow_t handle's hold on registration index and
// frees the window on this rank when nothing holds it any more; the
// index stays taken (indices are never reused, as FlagCX's).
func (c *comm) osRelease(index int) error {
	if index < 0 || index >= len(c.os.regs) || c.os.regs[index].wins == 0 {
		return fmt.Errorf("%w: the window (index %d) is not registered on this communicator", sdk.ErrInvalidArgument, index)
	}
	r := c.os.regs[index]
	r.wins--
	if r.wins > 0 || r.pinned {
		return nil
	}
	r.freed = true
	return c.freeWindow(r.w)
}

// osWindow is the window of registration index, for an operation's side
// named by what ("srcMrIdx", say). local: this rank's memory of it is
// read or written, which a deregistration here took away; the peer's
// side is the peer's to refuse (core's error names its window).
func (c *comm) osWindow(index int, what string, local bool) (*core.Window, error) {
	if index < 0 || index >= len(c.os.regs) {
		valid := "none is registered: flagcxOneSideRegister or flagcxCommWindowRegister first, on every rank"
		if len(c.os.regs) > 0 {
			valid = fmt.Sprintf("indices 0..%d are registered", len(c.os.regs)-1)
		}
		return nil, fmt.Errorf("%w: %s %d is not a registration of this communicator (%s)", sdk.ErrInvalidArgument, what, index, valid)
	}
	r := c.os.regs[index]
	if local && r.freed {
		return nil, fmt.Errorf("%w: %s %d: this rank deregistered that window (flagcxCommWindowDeregister); register the memory again", sdk.ErrInvalidUsage, what, index)
	}
	return r.w, nil
}

// osFind is the live registration holding the bytes at p (FlagCX's
// flagcxPutSignal finds the source's registration so), and p's offset
// in it.
func (c *comm) osFind(p unsafe.Pointer) (*core.Window, int, error) {
	a := uintptr(p)
	for _, r := range c.os.regs {
		if !r.freed && a >= r.base && a-r.base < uintptr(r.size) {
			return r.w, int(a - r.base), nil
		}
	}
	return nil, 0, fmt.Errorf("%w: localbuff %#x lies in no registered buffer of this communicator: register it (flagcxCommWindowRegister or flagcxOneSideRegister) on every rank first", sdk.ErrInvalidArgument, a)
}

// FlagCX's pointer types of flagcxOneSideSignalRegister (its flagcx_net.h).
const (
	ptrHost   = 0x1
	ptrCUDA   = 0x2
	ptrDMABuf = 0x4
)

// osSignals makes the size bytes at p this rank's signal slots (word r
// counts rank r's signals), collectively. The buffer stays until
// flagcxOneSideSignalDeregister: a second registration of it does
// nothing (as FlagCX's), one of another buffer is refused.
func (c *comm) osSignals(p unsafe.Pointer, size uint64, ptrType int) error {
	if ptrType != ptrHost && ptrType != ptrCUDA && ptrType != ptrDMABuf {
		return fmt.Errorf("%w: ptrType %d: pass FLAGCX_PTR_HOST (1) for host memory, FLAGCX_PTR_CUDA (2) or FLAGCX_PTR_DMABUF (4) for device memory", sdk.ErrInvalidArgument, ptrType)
	}
	if p == nil || size == 0 {
		return fmt.Errorf("%w: buff is NULL or size is 0: the signal buffer holds an 8-byte word per rank (%d bytes here)", sdk.ErrInvalidArgument, 8*c.count())
	}
	n, err := osSize(size, "size")
	if err != nil {
		return err
	}
	if c.os.signals == uintptr(p) {
		return nil
	}
	if c.os.signals != 0 {
		return fmt.Errorf("%w: a signal buffer (%#x) is already registered: flagcxOneSideSignalDeregister it first, on every rank", sdk.ErrInvalidUsage, c.os.signals)
	}
	host := ptrType == ptrHost
	if host && c.onDevice() {
		return notSupported("a host-pinned signal buffer (FLAGCX_PTR_HOST) on a device rank: register device memory (FLAGCX_PTR_CUDA)")
	}
	if err := c.registerSignals(p, n, host); err != nil {
		return err
	}
	c.os.signals = uintptr(p)
	return nil
}

// osSignalsOff returns the communicator to its own signal slots
// (collectively), so that the caller may free its buffer.
func (c *comm) osSignalsOff() error {
	if c.os.signals == 0 {
		return nil
	}
	if err := c.registerSignals(nil, 0, false); err != nil {
		return err
	}
	c.os.signals = 0
	return nil
}

// osStaging makes the size bytes of host memory at p this rank's staging
// for device windows (nil: the communicator's own again).
func (c *comm) osStaging(p unsafe.Pointer, size uint64) error {
	if p == nil {
		if c.os.staging == 0 {
			return nil
		}
		if err := c.registerStaging(nil, 0); err != nil {
			return err
		}
		c.os.staging = 0
		return nil
	}
	n, err := osSize(size, "size")
	if err != nil {
		return err
	}
	if c.os.staging == uintptr(p) {
		return nil
	}
	if c.os.staging != 0 {
		return fmt.Errorf("%w: a staging buffer (%#x) is already registered: flagcxOneSideStagingDeregister it first", sdk.ErrInvalidUsage, c.os.staging)
	}
	if err := c.registerStaging(p, n); err != nil {
		return err
	}
	c.os.staging = uintptr(p)
	return nil
}

// osOp is one transfer as FlagCX's flagcxPut, flagcxGet and flagcxBatchPut
// name it: src and dst are the registrations (indices) and offsets of the
// side data is read from and written to.
type osOp struct {
	srcOff, dstOff, size uint64
	srcIdx, dstIdx       int
}

// osRMA turns op into core's terms: for a Put the local side is the
// source, for a Get the destination.
func (c *comm) osRMA(op osOp, get bool) (core.RMA, error) {
	var rma core.RMA
	var err error
	if rma.Bytes, err = osSize(op.size, "size"); err != nil {
		return rma, err
	}
	so, err := osSize(op.srcOff, "srcOffset")
	if err != nil {
		return rma, err
	}
	do, err := osSize(op.dstOff, "dstOffset")
	if err != nil {
		return rma, err
	}
	src, err := c.osWindow(op.srcIdx, "srcMrIdx", !get)
	if err != nil {
		return rma, err
	}
	dst, err := c.osWindow(op.dstIdx, "dstMrIdx", get)
	if err != nil {
		return rma, err
	}
	if get {
		return core.RMA{Local: dst, LocalOff: do, Remote: src, RemoteOff: so, Bytes: rma.Bytes}, nil
	}
	return core.RMA{Local: src, LocalOff: so, Remote: dst, RemoteOff: do, Bytes: rma.Bytes}, nil
}
