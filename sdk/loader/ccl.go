package loader

import (
	"runtime"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"github.com/flagcx/flagcx-go/sdk"
)

// UniqueIDMaxBytes is the largest vendor unique id the ABI allows.
const UniqueIDMaxBytes = 4096

// Comm is one rank's vendor communicator.
type Comm struct {
	p            *Plugin
	h            uintptr
	rank, nranks int
	dev          int
}

func (p *Plugin) needCCL(entry string) error {
	if p.Caps&CapCCL == 0 {
		return p.errorf(entry, sdk.NotSupported, "the plugin has no collective library")
	}
	if !p.Initialized() {
		return p.errorf(entry, sdk.InvalidUsage, "call Init first")
	}
	return nil
}

// UniqueIDBytes is the size of the vendor's unique id.
func (p *Plugin) UniqueIDBytes() (int, error) {
	if err := p.needCCL("getUniqueIdBytes"); err != nil {
		return 0, err
	}
	var n uintptr
	runtime.LockOSThread()
	err := p.result("getUniqueIdBytes", p.fn.getUniqueIDBytes(&n))
	runtime.UnlockOSThread()
	if err == nil && (n == 0 || n > UniqueIDMaxBytes) {
		err = p.errorf("getUniqueIdBytes", sdk.InternalError, "plugin says %d bytes, outside 1..%d", n, UniqueIDMaxBytes)
	}
	return int(n), err
}

// UniqueID makes a vendor unique id: bytes to hand to every rank unchanged.
func (p *Plugin) UniqueID() ([]byte, error) {
	n, err := p.UniqueIDBytes()
	if err != nil {
		return nil, err
	}
	id := make([]byte, n)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return id, p.result("getUniqueId", p.fn.getUniqueID(&id[0]))
}

// CommInitRank joins rank of nranks on device dev to the communicator of
// id (from UniqueID on one rank). It blocks until every rank joined.
func (p *Plugin) CommInitRank(dev, nranks int, id []byte, rank int) (*Comm, error) {
	n, err := p.UniqueIDBytes()
	if err != nil {
		return nil, err
	}
	if len(id) != n {
		return nil, p.errorf("commInitRank", sdk.InvalidArgument, "unique id is %d bytes, the plugin expects %d", len(id), n)
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, p.errorf("commInitRank", sdk.InvalidArgument, "rank %d of %d", rank, nranks)
	}
	var h uintptr
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.result("commInitRank", p.fn.commInitRank(&h, int32(nranks), &id[0], int32(rank), int32(dev))); err != nil {
		return nil, err
	}
	return &Comm{p: p, h: h, rank: rank, nranks: nranks, dev: dev}, nil
}

func (c *Comm) Plugin() *Plugin { return c.p }
func (c *Comm) Rank() int       { return c.rank }
func (c *Comm) Count() int      { return c.nranks }
func (c *Comm) Device() int     { return c.dev }

// Destroy waits for the communicator's work and frees it.
func (c *Comm) Destroy() error {
	if c.h == 0 {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := c.p.result("commDestroy", c.p.fn.commDestroy(c.h))
	if err == nil {
		c.h = 0
	}
	return err
}

// Abort frees the communicator at once; work in flight fails.
func (c *Comm) Abort() error {
	if c.h == 0 {
		return nil
	}
	if c.p.fn.commAbort == nil {
		return c.p.unsupported("commAbort")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := c.p.result("commAbort", c.p.fn.commAbort(c.h))
	if err == nil {
		c.h = 0
	}
	return err
}

// AsyncError is nil while the communicator is healthy, else the error of
// its asynchronous work (wrapping sdk.ErrInProgress while a non-blocking
// operation runs).
func (c *Comm) AsyncError() error {
	if c.p.fn.commGetAsyncErr == nil {
		return c.p.unsupported("commGetAsyncError")
	}
	var a int32
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.p.result("commGetAsyncError", c.p.fn.commGetAsyncErr(c.h, &a)); err != nil {
		return err
	}
	return c.p.result("commGetAsyncError", a)
}

// ErrorString is the vendor's description of a result code ("" when the
// plugin has none).
func (p *Plugin) ErrorString(r sdk.Result) string {
	if p.fn.getErrorString == nil {
		return ""
	}
	return cmem.GoString(p.fn.getErrorString(int32(r)))
}

// GroupStart opens a group on this goroutine: sends, receives and
// collectives until GroupEnd are issued together. Groups are per OS thread
// in the vendor libraries, so the goroutine stays on its thread until
// GroupEnd; call both from the same goroutine.
func (p *Plugin) GroupStart() error {
	if err := p.needCCL("groupStart"); err != nil {
		return err
	}
	runtime.LockOSThread()
	if err := p.sysHandles("groupStart", p.t.CCL.GroupStart); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// GroupEnd issues the group GroupStart opened (and releases the thread).
func (p *Plugin) GroupEnd() error {
	err := p.sysHandles("groupEnd", p.t.CCL.GroupEnd)
	runtime.UnlockOSThread()
	return err
}

// ---- Collectives ----------------------------------------------------------

// check validates what the loader can check before C sees it: the handle,
// counts, data type and op against the plugin's masks, roots and peers, and
// (when the plugin can tell) that the buffers are not pageable host memory.
func (c *Comm) check(entry string, count int, dt sdk.DataType, op sdk.RedOp, useOp bool, root int, names []string, ptrs ...uintptr) error {
	p := c.p
	switch {
	case c.h == 0:
		return p.errorf(entry, sdk.InvalidUsage, "communicator was destroyed")
	case count < 0:
		return p.errorf(entry, sdk.InvalidArgument, "negative count %d", count)
	case !dt.Valid():
		return p.errorf(entry, sdk.InvalidArgument, "unknown data type %s", dt)
	case !p.SupportsDataType(dt):
		return p.errorf(entry, sdk.NotSupported, "data type %s is not supported by %s's collective library", dt, p.Name)
	case useOp && !op.Valid():
		return p.errorf(entry, sdk.InvalidArgument, "unknown reduction op %s", op)
	case useOp && !p.SupportsRedOp(op):
		return p.errorf(entry, sdk.NotSupported, "reduction op %s is not supported by %s's collective library", op, p.Name)
	case root < 0 || root >= c.nranks:
		return p.errorf(entry, sdk.InvalidArgument, "root/peer %d outside 0..%d", root, c.nranks-1)
	}
	if p.checkPtrs && count > 0 {
		return p.CheckDeviceMemory(entry, names, ptrs...)
	}
	return nil
}

var sendRecv = []string{"send buffer", "receive buffer"}

func (c *Comm) AllReduce(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, s Stream) error {
	if err := c.check("allReduce", count, dt, op, true, 0, sendRecv, send, recv); err != nil {
		return err
	}
	return c.p.sysHandles("allReduce", c.p.t.CCL.AllReduce, send, recv, uintptr(count), uintptr(dt), uintptr(op), c.h, uintptr(s))
}

func (c *Comm) Reduce(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, root int, s Stream) error {
	if err := c.check("reduce", count, dt, op, true, root, sendRecv, send, recv); err != nil {
		return err
	}
	return c.p.sysHandles("reduce", c.p.t.CCL.Reduce, send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(root), c.h, uintptr(s))
}

func (c *Comm) Broadcast(send, recv uintptr, count int, dt sdk.DataType, root int, s Stream) error {
	if err := c.check("broadcast", count, dt, 0, false, root, sendRecv, send, recv); err != nil {
		return err
	}
	return c.p.sysHandles("broadcast", c.p.t.CCL.Broadcast, send, recv, uintptr(count), uintptr(dt), uintptr(root), c.h, uintptr(s))
}

// AllGather: recv holds nranks*sendcount elements.
func (c *Comm) AllGather(send, recv uintptr, sendcount int, dt sdk.DataType, s Stream) error {
	if err := c.check("allGather", sendcount, dt, 0, false, 0, sendRecv, send, recv); err != nil {
		return err
	}
	return c.p.sysHandles("allGather", c.p.t.CCL.AllGather, send, recv, uintptr(sendcount), uintptr(dt), c.h, uintptr(s))
}

// ReduceScatter: send holds nranks*recvcount elements.
func (c *Comm) ReduceScatter(send, recv uintptr, recvcount int, dt sdk.DataType, op sdk.RedOp, s Stream) error {
	if err := c.check("reduceScatter", recvcount, dt, op, true, 0, sendRecv, send, recv); err != nil {
		return err
	}
	return c.p.sysHandles("reduceScatter", c.p.t.CCL.ReduceScatter, send, recv, uintptr(recvcount), uintptr(dt), uintptr(op), c.h, uintptr(s))
}

func (c *Comm) Send(buf uintptr, count int, dt sdk.DataType, peer int, s Stream) error {
	if err := c.check("send", count, dt, 0, false, peer, []string{"send buffer"}, buf); err != nil {
		return err
	}
	return c.p.sysHandles("send", c.p.t.CCL.Send, buf, uintptr(count), uintptr(dt), uintptr(peer), c.h, uintptr(s))
}

func (c *Comm) Recv(buf uintptr, count int, dt sdk.DataType, peer int, s Stream) error {
	if err := c.check("recv", count, dt, 0, false, peer, []string{"receive buffer"}, buf); err != nil {
		return err
	}
	return c.p.sysHandles("recv", c.p.t.CCL.Recv, buf, uintptr(count), uintptr(dt), uintptr(peer), c.h, uintptr(s))
}

// AlltoAll: count elements per peer. Composed from a group of sends and
// receives when the plugin has no alltoAll.
func (c *Comm) AlltoAll(send, recv uintptr, count int, dt sdk.DataType, s Stream) error {
	if err := c.check("alltoAll", count, dt, 0, false, 0, sendRecv, send, recv); err != nil {
		return err
	}
	if c.p.t.CCL.AlltoAll != 0 {
		return c.p.sysHandles("alltoAll", c.p.t.CCL.AlltoAll, send, recv, uintptr(count), uintptr(dt), c.h, uintptr(s))
	}
	return c.grouped(dt, s, func(peer int) (uintptr, int, uintptr, int) {
		off := uintptr(peer * count * dt.Size())
		return send + off, count, recv + off, count
	})
}

// AlltoAllv: counts and displacements in elements, one per rank.
func (c *Comm) AlltoAllv(send uintptr, sendcounts, sdispls []int, recv uintptr, recvcounts, rdispls []int, dt sdk.DataType, s Stream) error {
	const entry = "alltoAllv"
	for _, a := range [][]int{sendcounts, sdispls, recvcounts, rdispls} {
		if len(a) != c.nranks {
			return c.p.errorf(entry, sdk.InvalidArgument, "counts and displacements need %d entries, got %d", c.nranks, len(a))
		}
		for _, v := range a {
			if v < 0 {
				return c.p.errorf(entry, sdk.InvalidArgument, "negative count or displacement %d", v)
			}
		}
	}
	if err := c.check(entry, 1, dt, 0, false, 0, sendRecv, send, recv); err != nil {
		return err
	}
	if c.p.t.CCL.AlltoAllv != 0 {
		sc, sd, rc, rd := sizes(sendcounts), sizes(sdispls), sizes(recvcounts), sizes(rdispls)
		return c.p.sys(entry, c.p.t.CCL.AlltoAllv, send, uintptr(unsafe.Pointer(&sc[0])), uintptr(unsafe.Pointer(&sd[0])),
			recv, uintptr(unsafe.Pointer(&rc[0])), uintptr(unsafe.Pointer(&rd[0])), uintptr(dt), c.h, uintptr(s))
	}
	sz := dt.Size()
	return c.grouped(dt, s, func(peer int) (uintptr, int, uintptr, int) {
		return send + uintptr(sdispls[peer]*sz), sendcounts[peer], recv + uintptr(rdispls[peer]*sz), recvcounts[peer]
	})
}

// Gather: root's recv holds nranks*count elements, rank r's at r*count.
func (c *Comm) Gather(send, recv uintptr, count int, dt sdk.DataType, root int, s Stream) error {
	if err := c.check("gather", count, dt, 0, false, root, sendRecv, send, recv); err != nil {
		return err
	}
	if c.p.t.CCL.Gather != 0 {
		return c.p.sysHandles("gather", c.p.t.CCL.Gather, send, recv, uintptr(count), uintptr(dt), uintptr(root), c.h, uintptr(s))
	}
	return c.grouped(dt, s, func(peer int) (uintptr, int, uintptr, int) {
		sc, rc := 0, 0
		if peer == root {
			sc = count
		}
		if c.rank == root {
			rc = count
		}
		return send, sc, recv + uintptr(peer*count*dt.Size()), rc
	})
}

// Scatter: root's send holds nranks*count elements, rank r's at r*count.
func (c *Comm) Scatter(send, recv uintptr, count int, dt sdk.DataType, root int, s Stream) error {
	if err := c.check("scatter", count, dt, 0, false, root, sendRecv, send, recv); err != nil {
		return err
	}
	if c.p.t.CCL.Scatter != 0 {
		return c.p.sysHandles("scatter", c.p.t.CCL.Scatter, send, recv, uintptr(count), uintptr(dt), uintptr(root), c.h, uintptr(s))
	}
	return c.grouped(dt, s, func(peer int) (uintptr, int, uintptr, int) {
		sc, rc := 0, 0
		if c.rank == root {
			sc = count
		}
		if peer == root {
			rc = count
		}
		return send + uintptr(peer*count*dt.Size()), sc, recv, rc
	})
}

// grouped issues, in one group, a send and a receive per peer as plan
// says (a zero count skips it). The group is closed even after a failure.
func (c *Comm) grouped(dt sdk.DataType, s Stream, plan func(peer int) (sbuf uintptr, scount int, rbuf uintptr, rcount int)) error {
	if err := c.p.GroupStart(); err != nil {
		return err
	}
	var first error
	for peer := 0; peer < c.nranks && first == nil; peer++ {
		sbuf, sc, rbuf, rc := plan(peer)
		if sc > 0 {
			first = c.p.sysHandles("send", c.p.t.CCL.Send, sbuf, uintptr(sc), uintptr(dt), uintptr(peer), c.h, uintptr(s))
		}
		if first == nil && rc > 0 {
			first = c.p.sysHandles("recv", c.p.t.CCL.Recv, rbuf, uintptr(rc), uintptr(dt), uintptr(peer), c.h, uintptr(s))
		}
	}
	if err := c.p.GroupEnd(); first == nil {
		first = err
	}
	return first
}

func sizes(v []int) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}
