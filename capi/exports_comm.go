package main

// exports_comm.go: communicators, collectives, sends and receives, groups
// (the cgo side; see exports.go).

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// withComm runs fn on communicator id, one C thread at a time.
func withComm(id C.uint64_t, entry string, fn func(c *comm) error) (r C.int) {
	c, err := lookupComm(uint64(id))
	if err != nil {
		return res(fail(nil, entry, err))
	}
	defer protect(entry, c, &r)
	c.mu.Lock()
	defer c.mu.Unlock()
	return res(fail(c, entry, fn(c)))
}

//export capiUniqueID
func capiUniqueID(buf unsafe.Pointer) C.int {
	id, err := newUniqueID()
	if err != nil {
		return res(fail(nil, "flagcxGetUniqueId", err))
	}
	copy(unsafe.Slice((*byte)(buf), uniqueIDBytes), id[:])
	return 0
}

// capiCommInit joins rank to the communicator of the 256 bytes at id on
// device dev of the process's backend; *out is its handle number, *onDev
// whether it runs on a device, *outDev the device (0 on the host).
//
//export capiCommInit
func capiCommInit(id unsafe.Pointer, nranks, rank, dev C.int, out *C.uint64_t, outDev, onDev *C.int) (r C.int) {
	const entry = "flagcxCommInitRank"
	defer protect(entry, nil, &r)
	be, r := theBackend(entry)
	if r != 0 {
		return r
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return res(fail(nil, entry, fmt.Errorf("%w: rank %d of %d ranks: pass 0 <= rank < nranks", sdk.ErrInvalidArgument, rank, nranks)))
	}
	c, err := initComm(unsafe.Slice((*byte)(id), uniqueIDBytes), int(nranks), int(rank), be, int(dev))
	if err != nil {
		return res(fail(nil, entry, fmt.Errorf("rank %d of %d on %s: %w", rank, nranks, be.name, err)))
	}
	*out = C.uint64_t(register(c))
	*outDev = C.int(c.dev)
	*onDev = 0
	if c.onDevice() {
		*onDev = 1
	}
	return 0
}

// capiCommFree destroys (abort 0) or aborts communicator id and forgets it.
//
//export capiCommFree
func capiCommFree(id C.uint64_t, abort C.int) (r C.int) {
	entry := "flagcxCommDestroy"
	if abort != 0 {
		entry = "flagcxCommAbort"
	}
	defer protect(entry, nil, &r)
	c, err := lookupComm(uint64(id))
	if err != nil {
		return res(fail(nil, entry, err))
	}
	unregister(uint64(id))
	if abort != 0 {
		return res(fail(nil, entry, c.abort())) // no lock: it stops a call in flight
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	perr := c.closePremul()
	return res(fail(nil, entry, errors.Join(c.destroy(), perr)))
}

// What capiCommQuery answers.
const (
	queryCount = iota
	queryRank
	queryDevice
	queryHomo
	queryAsyncError
)

//export capiCommQuery
func capiCommQuery(id C.uint64_t, what C.int, out *C.int) C.int {
	c, err := lookupComm(uint64(id))
	if err != nil {
		return res(fail(nil, "flagcxComm query", err))
	}
	switch what {
	case queryCount:
		*out = C.int(c.count())
	case queryRank:
		*out = C.int(c.rank())
	case queryDevice:
		*out = C.int(c.dev)
	case queryHomo:
		*out = 0
		if c.isHomogeneous() {
			*out = 1
		}
	case queryAsyncError:
		// Its text is the communicator's last error, as NCCL's
		// ncclGetLastError describes an async error.
		*out = C.int(fail(c, "asynchronous error", c.asyncError()))
	}
	return 0
}

// commOps maps flagcxCommOp_t's values to collectives.
var commOps = map[C.int]sdk.Collective{
	2: sdk.Broadcast, 3: sdk.Gather, 4: sdk.Scatter, 5: sdk.Reduce,
	6: sdk.AllReduce, 7: sdk.AllGather, 8: sdk.ReduceScatter, 9: sdk.AlltoAll,
}

// checkType refuses a data type or (for reductions) an op FlagCX does not
// define, and a count whose bytes overflow.
func checkType(count C.size_t, dt, op C.int, reduces bool) error {
	t := sdk.DataType(dt)
	if !t.Valid() {
		return fmt.Errorf("%w: data type %d: use a flagcxDataType_t below flagcxNumTypes", sdk.ErrInvalidArgument, dt)
	}
	if reduces && !sdk.RedOp(op).Valid() {
		return fmt.Errorf("%w: reduction op %d: use flagcxSum, flagcxProd, flagcxMax, flagcxMin or flagcxAvg", sdk.ErrInvalidArgument, op)
	}
	// The bound alone: count*size in size_t wraps for counts past 2^61
	// before a check of the product could see it. A count within it has
	// at most 2^59 bytes; the rank count's multiple is checked with the
	// buffers (comm.span).
	if uint64(count) > uint64(1)<<56 {
		return fmt.Errorf("%w: count %d is out of range", sdk.ErrInvalidArgument, uint64(count))
	}
	return nil
}

//export capiColl
func capiColl(id C.uint64_t, entry *C.char, kind C.int, send, recv unsafe.Pointer, count C.size_t, dt, op, root C.int, stream, group C.uintptr_t) C.int {
	coll, ok := commOps[kind]
	return withComm(id, C.GoString(entry), func(c *comm) error {
		if !ok {
			return fmt.Errorf("%w: operation %d", sdk.ErrInternalError, kind)
		}
		// Ops past the built-in ones are flagcxRedOpCreatePreMulSum's.
		premul := coll.Reduces() && sdk.RedOp(op) >= sdk.NumRedOps
		checkOp := op
		if premul {
			checkOp = C.int(sdk.Sum)
		}
		if err := checkType(count, dt, checkOp, coll.Reduces()); err != nil {
			return err
		}
		joinGlobalGroup(c, uintptr(group))
		a := collArgs{coll: coll, send: send, recv: recv, count: int(count),
			dt: sdk.DataType(dt), op: sdk.RedOp(op), root: int(root), stream: uintptr(stream)}
		if premul {
			return c.preMulSum(a)
		}
		return c.collective(a)
	})
}

//export capiAlltoAllv
func capiAlltoAllv(id C.uint64_t, send unsafe.Pointer, sc, sd *C.size_t, recv unsafe.Pointer, rc, rd *C.size_t, dt C.int, stream, group C.uintptr_t) C.int {
	return withComm(id, "flagcxAlltoAllv", func(c *comm) error {
		if err := checkType(0, dt, 0, false); err != nil {
			return err
		}
		n := c.count()
		if sc == nil || sd == nil || rc == nil || rd == nil {
			return fmt.Errorf("%w: sendcounts, sdispls, recvcounts and rdispls must each point at %d values", sdk.ErrInvalidArgument, n)
		}
		vecs := [4][]int{}
		for i, p := range []*C.size_t{sc, sd, rc, rd} {
			for _, v := range unsafe.Slice(p, n) {
				if uint64(v) > uint64(1)<<48 {
					return fmt.Errorf("%w: count or displacement %d is out of range", sdk.ErrInvalidArgument, uint64(v))
				}
				vecs[i] = append(vecs[i], int(v))
			}
		}
		joinGlobalGroup(c, uintptr(group))
		return c.alltoallv(send, vecs[0], vecs[1], recv, vecs[2], vecs[3], sdk.DataType(dt), uintptr(stream))
	})
}

//export capiP2P
func capiP2P(id C.uint64_t, recv C.int, buf unsafe.Pointer, count C.size_t, dt, peer C.int, stream, group C.uintptr_t) C.int {
	entry := "flagcxSend"
	if recv != 0 {
		entry = "flagcxRecv"
	}
	return withComm(id, entry, func(c *comm) error {
		if err := checkType(count, dt, 0, false); err != nil {
			return err
		}
		joinGlobalGroup(c, uintptr(group))
		return c.p2p(recv != 0, buf, int(count), sdk.DataType(dt), int(peer), uintptr(stream))
	})
}

// capiGroup opens (start) or closes a group on communicator id, or with id
// 0 the calling thread's flagcxGroupStart(NULL) group (thread is its key).
// The collectives, sends and receives take that key as group: 0 when the
// thread has no such group open.
//
//export capiGroup
func capiGroup(id C.uint64_t, start C.int, thread C.uintptr_t) C.int {
	entry := "flagcxGroupEnd"
	if start != 0 {
		entry = "flagcxGroupStart"
	}
	if id == 0 {
		return res(fail(nil, entry, globalGroup(uintptr(thread), start != 0)))
	}
	return withComm(id, entry, func(c *comm) error {
		if start != 0 {
			c.groupStart()
			return nil
		}
		return c.groupEnd()
	})
}

//export capiBarrier
func capiBarrier(id C.uint64_t, stream C.uintptr_t) C.int {
	return withComm(id, "flagcxBarrier", func(c *comm) error { return c.barrier(uintptr(stream)) })
}
