package main

// exports_onesided.go: the cgo side of the one-sided entries
// (shim_onesided.c); onesided.go keeps the tables.

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// capiOneSideRegister registers the size bytes at p of communicator id
// (flagcxOneSideRegister, or with window 1 flagcxCommWindowRegister) and
// sets *index to its index.
//
//export capiOneSideRegister
func capiOneSideRegister(id C.uint64_t, entry *C.char, p unsafe.Pointer, size C.size_t, window C.int, index *C.int) C.int {
	return withComm(id, C.GoString(entry), func(c *comm) error {
		i, err := c.osRegister(p, uint64(size), window != 0)
		*index = C.int(i)
		return err
	})
}

// capiWindowDeregister drops a window handle's hold on registration index.
//
//export capiWindowDeregister
func capiWindowDeregister(id C.uint64_t, index C.int) C.int {
	return withComm(id, "flagcxCommWindowDeregister", func(c *comm) error { return c.osRelease(int(index)) })
}

//export capiSignalRegister
func capiSignalRegister(id C.uint64_t, p unsafe.Pointer, size C.size_t, ptrType C.int) C.int {
	return withComm(id, "flagcxOneSideSignalRegister", func(c *comm) error { return c.osSignals(p, uint64(size), int(ptrType)) })
}

//export capiSignalDeregister
func capiSignalDeregister(id C.uint64_t) C.int {
	return withComm(id, "flagcxOneSideSignalDeregister", func(c *comm) error { return c.osSignalsOff() })
}

// capiStaging registers (reg 1) the size bytes of host memory at p as
// communicator id's staging, or (reg 0) deregisters it.
//
//export capiStaging
func capiStaging(id C.uint64_t, reg C.int, p unsafe.Pointer, size C.size_t) C.int {
	if reg == 0 {
		return withComm(id, "flagcxOneSideStagingDeregister", func(c *comm) error { return c.osStaging(nil, 0) })
	}
	return withComm(id, "flagcxOneSideStagingRegister", func(c *comm) error {
		if p == nil || size == 0 {
			return fmt.Errorf("%w: buff is NULL or size is 0: pass host memory for the staging of device windows", sdk.ErrInvalidArgument)
		}
		return c.osStaging(p, uint64(size))
	})
}

// capiRMA runs flagcxPut, flagcxGet (kind rmaPut, rmaGet: n is 1) or
// flagcxBatchPut (n transfers) to peer: the arrays hold each transfer's
// source and destination offsets, its size and its registrations.
//
//export capiRMA
func capiRMA(id C.uint64_t, entry *C.char, kind, peer C.int, n C.size_t, srcOffs, dstOffs, sizes *C.size_t, srcIdx, dstIdx *C.int) C.int {
	return withComm(id, C.GoString(entry), func(c *comm) error {
		if n == 0 {
			return nil
		}
		if srcOffs == nil || dstOffs == nil || sizes == nil || srcIdx == nil || dstIdx == nil {
			return fmt.Errorf("%w: srcOffsets, dstOffsets, sizes, srcMrIdxs and dstMrIdxs must each point at count (%d) values", sdk.ErrInvalidArgument, uint64(n))
		}
		if uint64(n) > 1<<24 {
			return fmt.Errorf("%w: count %d is out of range", sdk.ErrInvalidArgument, uint64(n))
		}
		so, do, sz := unsafe.Slice(srcOffs, n), unsafe.Slice(dstOffs, n), unsafe.Slice(sizes, n)
		si, di := unsafe.Slice(srcIdx, n), unsafe.Slice(dstIdx, n)
		ops := make([]core.RMA, n)
		for i := range ops {
			op := osOp{srcOff: uint64(so[i]), dstOff: uint64(do[i]), size: uint64(sz[i]), srcIdx: int(si[i]), dstIdx: int(di[i])}
			var err error
			if ops[i], err = c.osRMA(op, rmaKind(kind) == rmaGet); err != nil {
				if n > 1 {
					return fmt.Errorf("transfer %d: %w", i, err)
				}
				return err
			}
		}
		return c.rma(rmaKind(kind), int(peer), ops, 0)
	})
}

// capiPutSignal runs flagcxPutSignal: count elements of dt at local (in a
// registration of this rank) into peer's memory of registration win at
// off, then a signal.
//
//export capiPutSignal
func capiPutSignal(id C.uint64_t, local unsafe.Pointer, count C.size_t, dt, peer, win C.int, off C.size_t, stream C.uintptr_t) C.int {
	return withComm(id, "flagcxPutSignal", func(c *comm) error {
		if err := checkType(count, dt, 0, false); err != nil {
			return err
		}
		bytes := int(count) * sdk.DataType(dt).Size()
		if bytes == 0 { // a signal alone, as FlagCX's size 0
			return c.rma(rmaPutSignal, int(peer), []core.RMA{{}}, uintptr(stream))
		}
		lw, loff, err := c.osFind(local)
		if err != nil {
			return err
		}
		rw, err := c.osWindow(int(win), "peerWin", false)
		if err != nil {
			return err
		}
		roff, err := osSize(uint64(off), "peerWinOffset")
		if err != nil {
			return err
		}
		op := core.RMA{Local: lw, LocalOff: loff, Remote: rw, RemoteOff: roff, Bytes: bytes}
		return c.rma(rmaPutSignal, int(peer), []core.RMA{op}, uintptr(stream))
	})
}

//export capiSignal
func capiSignal(id C.uint64_t, peer C.int, stream C.uintptr_t) C.int {
	return withComm(id, "flagcxSignal", func(c *comm) error { return c.rma(rmaSignal, int(peer), nil, uintptr(stream)) })
}

// waitDesc is flagcxWaitSignalDesc_t's layout (shim_onesided.c checks it).
type waitDesc struct {
	opCnt uint64
	peer  int32
	_     int32
}

// capiWaitSignal waits for the n descriptors at descs
// (flagcxWaitSignalDesc_t).
//
//export capiWaitSignal
func capiWaitSignal(id C.uint64_t, n C.int, descs unsafe.Pointer, stream C.uintptr_t) C.int {
	return withComm(id, "flagcxWaitSignal", func(c *comm) error {
		ds := unsafe.Slice((*waitDesc)(descs), int(n))
		peers, counts := make([]int, n), make([]uint64, n)
		for i, d := range ds {
			peers[i], counts[i] = int(d.peer), d.opCnt
		}
		return c.waitSignal(peers, counts, uintptr(stream))
	})
}

//export capiReadCounter
func capiReadCounter(id C.uint64_t, out *C.uint64_t) C.int {
	return withComm(id, "flagcxReadCounter", func(c *comm) error {
		*out = C.uint64_t(c.readCounter())
		return nil
	})
}

//export capiWaitCounter
func capiWaitCounter(id C.uint64_t, target C.uint64_t) C.int {
	return withComm(id, "flagcxWaitCounter", func(c *comm) error { return c.waitCounter(uint64(target)) })
}
