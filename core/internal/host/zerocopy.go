package host

import (
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"github.com/flagcx/flagcx-go/core/internal/host/mem"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// Registered memory (zero copy). A Shared that is also a SharedMem lets
// the engine allocate buffers that every rank of the host maps (MemAlloc,
// as NCCL's ncclMemAlloc + ncclCommRegister or MPI_Alloc_mem). When every
// rank's send and recv buffers of an AllReduce lie in such memory, each
// rank reduces its slice straight from the peers' send buffers and writes
// the result straight into every rank's recv buffer: one read and one
// write of the message per rank, instead of staging into the windows,
// reducing, and copying out (about 2.5 times that traffic).
//
// The ranks agree on the path in the call's first step: each publishes in
// its window whether its buffers are registered, and where (allocation
// number and offset); all take the zero-copy path only when all are. That
// step also guarantees that every rank entered the call (its send buffer
// is written, its recv buffer may be overwritten); a last step keeps every
// rank in the call until all finished reading and writing its buffers.
//
// In place (send == recv) is exact: rank r alone reads, and then writes,
// slice r of every buffer, and it reads a block of all inputs into a
// private scratch block before writing that block anywhere.

// SharedMem is a Shared whose ranks can also allocate memory the others
// map (shm.ShmNode is one).
type SharedMem interface {
	Shared
	// NewMem makes a zeroed segment of n bytes for this rank: its memory
	// and the name (at most memNameMax bytes) with which peers map it.
	NewMem(n int) (mem []byte, name string, err error)
	// MapMem maps the segment called name that rank r made (n bytes).
	MapMem(r int, name string, n int) ([]byte, error)
	// UnlinkMem removes this rank's segment name from the file system
	// (every peer mapped it, or the allocation failed); mappings stay.
	UnlinkMem(name string)
	// FreeMem unmaps memory that NewMem or MapMem returned.
	FreeMem(mem []byte) error
}

// memNameMax bounds a segment name; memAllocDesc is the bytes of window an
// allocation step needs.
const (
	memNameMax   = 200
	memAllocDesc = 256
)

// zcBlock is the piece of its slice a rank reduces from all inputs
// before writing it to every recv buffer: at least mem.StreamMin, so that
// the writes stream past the cache (no read for ownership of the
// destination lines).
const zcBlock = 64 << 10

// memRegion is one allocation: every rank's memory, by rank.
type memRegion struct{ bufs [][]byte }

// CanMemAlloc says whether MemAlloc can work: the ranks share memory that
// allocates.
func (e *Engine) CanMemAlloc() bool {
	_, ok := e.sh.(SharedMem)
	return ok && e.n > 1 && e.shared() && e.shmHalf() >= memAllocDesc
}

// MemAlloc allocates n zeroed bytes that every rank of the communicator
// maps, so that collectives on them skip the staging copies. It is
// collective: every rank calls it, with the same n, in the same order
// relative to the other collectives. Free the memory with MemFree (every
// rank, the same allocation); it stays mapped until then, even after the
// communicator is destroyed.
func (e *Engine) MemAlloc(n int) ([]byte, error) {
	const name = "MemAlloc"
	if n <= 0 {
		return nil, argErr(name, "size %d is not positive", n)
	}
	if !e.CanMemAlloc() {
		return nil, fmt.Errorf("host %s: %w: the ranks do not share memory", name, sdk.ErrNotSupported)
	}
	sm := e.sh.(SharedMem)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sig = StepSig(name, n, 0, 0, 0)
	if err := e.sh.Enter(); err != nil {
		return nil, e.stepErr(name, err)
	}
	defer e.sh.Exit()
	mine, seg, err := sm.NewMem(n)
	if err == nil && len(seg) > memNameMax {
		err = fmt.Errorf("segment name %q is too long", seg)
	}
	if err != nil {
		err = fmt.Errorf("host %s: rank %d: %w: %w", name, e.rank, sdk.ErrSystemError, err)
	}
	if mine != nil {
		defer sm.UnlinkMem(seg) // every peer mapped it (or gave up) by then
	}
	t := e.next()
	d := e.half(e.rank, t)
	d[0], d[1] = 0, byte(len(seg))
	if err == nil {
		d[0] = 1
		copy(d[2:], seg)
	}
	bufs := make([][]byte, e.n)
	bufs[e.rank] = mine
	release := func() {
		for _, b := range bufs {
			if b != nil {
				sm.FreeMem(b)
			}
		}
	}
	if serr := e.sync(name); serr != nil {
		release()
		return nil, serr
	}
	for r := 0; r < e.n && err == nil; r++ {
		if h := e.half(r, t); h[0] != 1 {
			err = fmt.Errorf("host %s: %w: rank %d could not allocate %d bytes of shared memory", name, sdk.ErrSystemError, r, n)
		}
	}
	if err != nil { // every rank saw the same statuses: all give up
		release()
		return nil, err
	}
	for r := 0; r < e.n && err == nil; r++ {
		if r != e.rank {
			h := e.half(r, t)
			bufs[r], err = sm.MapMem(r, string(h[2:2+int(h[1])]), n)
			if err != nil {
				err = fmt.Errorf("host %s: rank %d mapping rank %d's memory: %w: %w", name, e.rank, r, sdk.ErrSystemError, err)
			}
		}
	}
	d = e.half(e.rank, t+1)
	d[0] = 0
	if err == nil {
		d[0] = 1
	}
	if serr := e.sync(name); serr != nil {
		release()
		return nil, serr
	}
	for r := 0; r < e.n && err == nil; r++ {
		if e.half(r, t+1)[0] != 1 {
			err = fmt.Errorf("host %s: %w: rank %d could not map the allocation", name, sdk.ErrSystemError, r)
		}
	}
	if err != nil {
		release()
		return nil, err
	}
	e.regions = append(e.regions, &memRegion{bufs: bufs})
	return mine, nil
}

// MemFree releases memory from MemAlloc on this rank (its own and its
// mappings of the peers'). Every rank frees the same allocation, after the
// collectives that use it and before the next that could.
func (e *Engine) MemFree(b []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, reg := range e.regions {
		if reg == nil || !same(reg.bufs[e.rank], b) {
			continue
		}
		sm := e.sh.(SharedMem)
		var first error
		for _, m := range reg.bufs {
			if err := sm.FreeMem(m); err != nil && first == nil {
				first = fmt.Errorf("host MemFree: %w: %w", sdk.ErrSystemError, err)
			}
		}
		e.regions[i] = nil
		return first
	}
	return argErr("MemFree", "the buffer is not one MemAlloc returned (or it was freed)")
}

// MemDescBytes is the size of a call's registered-memory descriptor:
// what a rank publishes so that its peers find its send and recv buffers
// in their mappings (MemDesc, PeerBufs).
const MemDescBytes = 40

// MemDesc writes into d (MemDescBytes) where send and recv lie in this
// rank's MemAlloc allocations (allocation numbers and offsets, the same
// on every rank), and reports whether both do; d is zeroes if not.
func (e *Engine) MemDesc(d, send, recv []byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.memDesc(d, send, recv)
}

// PeerBufs reads rank r's descriptor d: its send and recv buffers of
// sendN and recvN bytes as this rank maps them; ok is false where d says
// they are not registered, and the error names a buffer this rank does
// not know.
func (e *Engine) PeerBufs(name string, r int, d []byte, sendN, recvN int) (send, recv []byte, ok bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.peerBufs(name, r, d, sendN, recvN)
}

// MemPeers is every rank's memory of the allocation this rank's mine
// belongs to, by rank, as this rank maps it (nil when mine is not one).
func (e *Engine) MemPeers(mine []byte) [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, reg := range e.regions {
		if reg != nil && same(reg.bufs[e.rank], mine) {
			return reg.bufs
		}
	}
	return nil
}

func (e *Engine) memDesc(d, send, recv []byte) bool {
	d = d[:MemDescBytes]
	clear(d)
	sid, soff, sok := e.registered(send)
	rid, roff, rok := e.registered(recv)
	if !sok || !rok {
		return false
	}
	for i, v := range []int{1, sid, soff, rid, roff} {
		binary.LittleEndian.PutUint64(d[8*i:], uint64(v))
	}
	return true
}

func (e *Engine) peerBufs(name string, r int, d []byte, sendN, recvN int) (send, recv []byte, ok bool, err error) {
	if binary.LittleEndian.Uint64(d) != 1 {
		return nil, nil, false, nil
	}
	if send, recv = e.peerBuf(r, d[8:], sendN), e.peerBuf(r, d[24:], recvN); send == nil || recv == nil {
		return nil, nil, false, e.unknownMem(name, r)
	}
	return send, recv, true, nil
}

func (e *Engine) registered(buf []byte) (id, off int, ok bool) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	for i, reg := range e.regions {
		if reg == nil {
			continue
		}
		m := reg.bufs[e.rank]
		base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		if p >= base && p-base+uintptr(len(buf)) <= uintptr(len(m)) {
			return i, int(p - base), true
		}
	}
	return 0, 0, false
}

// agreeDirect is the first step of a call that may go zero-copy: every
// rank publishes where its send and recv buffers are registered. It
// returns every rank's send and recv buffers when all are, nil when any
// is not (then all ranks take the staged path).
func (e *Engine) agreeDirect(name string, send, recv []byte) (sends, recvs [][]byte, err error) {
	t := e.next()
	e.memDesc(e.half(e.rank, t), send, recv)
	if err := e.sync(name); err != nil {
		return nil, nil, err
	}
	for r := 0; r < e.n; r++ {
		if binary.LittleEndian.Uint64(e.half(r, t)) != 1 {
			return nil, nil, nil
		}
	}
	sends, recvs = make([][]byte, e.n), make([][]byte, e.n)
	for r := 0; r < e.n; r++ {
		if sends[r], recvs[r], _, err = e.peerBufs(name, r, e.half(r, t), len(send), len(recv)); err != nil {
			return nil, nil, err
		}
	}
	return sends, recvs, nil
}

// peerBuf is the n bytes of rank r's memory that desc (allocation number,
// offset) names; nil when this rank does not know it.
func (e *Engine) peerBuf(r int, desc []byte, n int) []byte {
	id, off := binary.LittleEndian.Uint64(desc), binary.LittleEndian.Uint64(desc[8:])
	if id >= uint64(len(e.regions)) || e.regions[id] == nil {
		return nil
	}
	m := e.regions[id].bufs[r]
	if off > uint64(len(m)) || uint64(len(m))-off < uint64(n) {
		return nil
	}
	return m[off : int(off)+n : int(off)+n]
}

func (e *Engine) unknownMem(name string, r int) error {
	return fmt.Errorf("host %s: rank %d: %w: rank %d's buffer lies in an allocation this rank freed or never made (MemAlloc and MemFree are collective)",
		name, e.rank, sdk.ErrInvalidUsage, r)
}

// allReduceDirect: rank r reduces its slice of the message from every
// rank's send buffer and writes it into every rank's recv buffer; then a
// step keeps everyone until all are done.
func (e *Engine) allReduceDirect(name string, sends, recvs [][]byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	size := dt.Size()
	st, sn := split(count, e.n, e.rank)
	lo, hi := st*size, (st+sn)*size
	if hi > lo {
		w := max(1, min(e.workers, (hi-lo)/shmParallelMin))
		if cap(e.zcScratch) < w*zcBlock {
			e.zcScratch = make([]byte, w*zcBlock)
		}
		if w == 1 {
			e.directRange(sends, recvs, lo, hi, e.zcScratch[:zcBlock], dt, op)
		} else {
			var wg sync.WaitGroup
			grain := size * 64
			for i := 0; i < w; i++ {
				a := lo + (hi-lo)*i/w/grain*grain
				b := lo + (hi-lo)*(i+1)/w/grain*grain
				if i == w-1 {
					b = hi
				}
				wg.Add(1)
				go func(a, b int, blk []byte) {
					defer wg.Done()
					e.directRange(sends, recvs, a, b, blk, dt, op)
				}(a, b, e.zcScratch[i*zcBlock:(i+1)*zcBlock])
			}
			wg.Wait()
		}
	}
	return e.sync(name)
}

// directRange reduces bytes [lo, hi) of every rank's send buffer, block by
// block in rank order into blk, and copies each block into every recv
// buffer.
func (e *Engine) directRange(sends, recvs [][]byte, lo, hi int, blk []byte, dt sdk.DataType, op sdk.RedOp) {
	for b := lo; b < hi; b += len(blk) {
		end := min(b+len(blk), hi)
		d := blk[:end-b]
		reduce.Into(d, sends[0][b:end], sends[1][b:end], dt, op)
		for r := 2; r < e.n; r++ {
			reduce.Into(d, d, sends[r][b:end], dt, op)
		}
		if op == sdk.Avg {
			reduce.Scale(d, dt, e.n)
		}
		for r := range recvs {
			if same(recvs[r], sends[r]) {
				copy(recvs[r][b:end], d) // the lines are in cache: just read
			} else {
				mem.Stream(recvs[r][b:end], d) // no read for ownership
			}
		}
	}
}
