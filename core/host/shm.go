package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/core/host/mem"
	"github.com/flagcx/flagcx-go/core/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// Shared is memory that every rank of the communicator maps (all of them
// on one host); hostnet.ShmNode is one. With it the engine runs
// AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AlltoAll and
// Barrier by reading the peers' windows directly instead of passing
// messages around a ring.
//
// The protocol is a sequence of steps shared by all ranks. At step t a
// rank writes into half t&1 of its own window, calls Sync (which publishes
// step t and waits until every rank has published it), then reads half t&1
// of any window; it may also write half (t+1)&1 of its own window for the
// next step. Reads of step t end before the rank's next Sync, so a half is
// never written while anyone still reads it (that happens two Syncs later).
type Shared interface {
	// Window is rank r's staging window. The engine uses the first
	// 2*floor(min length/2) bytes of each.
	Window(r int) []byte
	// Step is the last step this rank published (0 before the first).
	Step() uint32
	// Sync publishes step Step()+1 labelled sig and waits until every
	// rank has; a rank whose label differs (another operation or count)
	// is an error.
	Sync(sig uint64) error
}

// WithShared runs the collectives that gain from it over s (see Shared).
// Every rank must pass one, or none.
func WithShared(s Shared) Option {
	return func(e *Engine) { e.sh = s }
}

// Tuning of the shared-memory algorithms. Variables so that benchmarks can
// try others; every rank must use the same values.
var (
	// shmOneStep: an AllReduce or Reduce whose n inputs together are at
	// most this many bytes reduces everything on every rank in one step
	// (one Sync); above it each rank reduces a slice (two Syncs a chunk).
	shmOneStep = 32 << 10
	// shmChunk bounds the bytes of one step besides the half window
	// (0: a quarter of the last-level cache shared by the ranks, at least
	// 1 MiB), so that the windows read in a step stay in the cache while
	// the next step's are written. Fewer, larger steps wait less often
	// for the slowest rank.
	shmChunk = 0
	// shmParallelMin is the smallest copy or reduction spread over the
	// rank's cores.
	shmParallelMin = 256 << 10
	// shmBlock is the piece a multi-way reduction folds all inputs into
	// before moving on, so that the partial result stays in L1/L2.
	shmBlock = 32 << 10
)

// shmHalf is the bytes of half a window (the same on every rank: the
// smallest window decides), a multiple of 64.
func (e *Engine) shmHalf() int {
	if e.shHalf == 0 {
		h := len(e.sh.Window(0))
		for r := 1; r < e.n; r++ {
			h = min(h, len(e.sh.Window(r)))
		}
		e.shHalf = h / 2 &^ 63
	}
	return e.shHalf
}

// shared says whether the collectives run over shared windows: there are
// some, and half of one holds an element of the widest type for every rank.
func (e *Engine) shared() bool { return e.sh != nil && e.shmHalf() >= 8*e.n }

// half is half t&1 of rank r's window.
func (e *Engine) half(r int, t uint32) []byte {
	w, h := e.sh.Window(r), e.shmHalf()
	if t&1 == 0 {
		return w[:h:h]
	}
	return w[h : 2*h : 2*h]
}

// next is the step the coming Sync publishes.
func (e *Engine) next() uint32 { return e.sh.Step() + 1 }

// stepSig labels the steps of one collective call: ranks that disagree on
// the call (another collective, count, type, op or root) fail at the first
// step instead of reading windows of another shape.
func stepSig(name string, count int, dt sdk.DataType, op sdk.RedOp, root int) uint64 {
	h := uint64(14695981039346656037) // FNV-1a over the name, then the numbers
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	for _, v := range [3]uint64{uint64(count), uint64(dt)<<32 | uint64(uint32(op)), uint64(root)} {
		h = (h ^ v) * 1099511628211
		h ^= h >> 29
	}
	return h
}

func (e *Engine) sync(name string) error {
	if err := e.sh.Sync(e.sig); err != nil {
		return fmt.Errorf("host %s: rank %d, shared-memory step %d: %w", name, e.rank, e.sh.Step(), err)
	}
	return nil
}

// chunkElems is how many elements of size bytes one step moves when each
// rank contributes parts pieces of that many elements.
func (e *Engine) chunkElems(size, parts int) int {
	return max(e.stepBytes()/(size*parts), 1)
}

// stepBytes is the most one rank stages in one step.
func (e *Engine) stepBytes() int {
	c := shmChunk
	if c == 0 {
		c = max(lastLevelCache()/(4*e.n), 1<<20)
	}
	return min(e.shmHalf(), c)
}

// lastLevelCache is the size of the CPU's largest cache (8 MiB where Linux
// does not say).
var lastLevelCache = sync.OnceValue(func() int {
	best := 0
	for i := 0; i < 8; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu0/cache/index%d/size", i))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		mult := 1
		switch {
		case strings.HasSuffix(s, "K"):
			mult, s = 1<<10, strings.TrimSuffix(s, "K")
		case strings.HasSuffix(s, "M"):
			mult, s = 1<<20, strings.TrimSuffix(s, "M")
		}
		if v, err := strconv.Atoi(s); err == nil {
			best = max(best, v*mult)
		}
	}
	if best == 0 {
		return 8 << 20
	}
	return best
})

// parallel runs f over [0, n) cut into one range per worker (on the
// calling goroutine when n is small).
func (e *Engine) parallel(n, grain int, f func(lo, hi int)) {
	w := min(e.workers, n/max(shmParallelMin, grain))
	if w < 2 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := 1; i < w; i++ {
		lo, hi := i*n/w/grain*grain, (i+1)*n/w/grain*grain
		if i == w-1 {
			hi = n
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	f(0, n/w/grain*grain)
	wg.Wait()
}

// pcopy copies src into dst (same length) on the rank's cores.
func (e *Engine) pcopy(dst, src []byte) {
	if same(dst, src) {
		return
	}
	e.parallel(len(src), 64, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
}

// stage copies src into this rank's window (same length) on the rank's
// cores, in pieces below the size from which Go's copy streams past the
// cache (non-temporal stores from 1 MiB on amd64): the peers read the
// window right after, and should find it in the shared cache.
func (e *Engine) stage(dst, src []byte) {
	e.parallel(len(src), 64, func(lo, hi int) {
		for b := lo; b < hi; b += stagePiece {
			end := min(b+stagePiece, hi)
			copy(dst[b:end], src[b:end])
		}
	})
}

// drain copies a result out of a window into the caller's buffer (same
// length) on the rank's cores, streaming past the cache when the whole
// message is large (big; see mem.Stream): it would not stay there anyway,
// and the windows the peers read next should.
func (e *Engine) drain(dst, src []byte, big bool) {
	if !big {
		e.pcopy(dst, src)
		return
	}
	e.parallel(len(src), 64, func(lo, hi int) { mem.Stream(dst[lo:hi], src[lo:hi]) })
}

// shmStreamMin is the message size from which drain streams.
var shmStreamMin = 4 << 20

// stagePiece is below the non-temporal threshold of Go's memmove.
const stagePiece = 512 << 10

// fold sets dst to the reduction of every rank's bytes at off.. in half t
// of its window, in rank order (so every rank computes the same bits),
// block by block so that the partial result stays in cache, on the rank's
// cores. Avg is summed; the caller scales.
func (e *Engine) fold(dst []byte, t uint32, off int, dt sdk.DataType, op sdk.RedOp) {
	if len(dst) < 2*max(shmParallelMin, dt.Size()*64) || e.workers < 2 {
		e.foldRange(dst, t, off, 0, len(dst), dt, op) // no closure: nothing allocated
		return
	}
	e.parallel(len(dst), dt.Size()*64, func(lo, hi int) { e.foldRange(dst, t, off, lo, hi, dt, op) })
}

func (e *Engine) foldRange(dst []byte, t uint32, off, lo, hi int, dt sdk.DataType, op sdk.RedOp) {
	for b := lo; b < hi; b += shmBlock {
		end := min(b+shmBlock, hi)
		d := dst[b:end]
		src := func(r int) []byte { return e.half(r, t)[off+b : off+end] }
		reduce.Into(d, src(0), src(1), dt, op)
		for r := 2; r < e.n; r++ {
			reduce.Into(d, d, src(r), dt, op)
		}
	}
}

func (e *Engine) scaleShm(buf []byte, dt sdk.DataType, op sdk.RedOp) {
	if op == sdk.Avg {
		reduce.ScaleParallel(buf, dt, e.n, e.workers)
	}
}

// allReduceShm: small inputs in one step (every rank folds all windows);
// larger ones chunk by chunk in two steps (each rank folds its slice of the
// chunk into its window, then every rank copies all slices out).
func (e *Engine) allReduceShm(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	e.sig = stepSig(name, count, dt, op, 0)
	size, n, r := dt.Size(), e.n, e.rank
	if len(send)*n <= shmOneStep && len(send) <= e.shmHalf() {
		t := e.next()
		copy(e.half(r, t), send)
		if err := e.sync(name); err != nil {
			return err
		}
		e.fold(recv, t, 0, dt, op)
		e.scaleShm(recv, dt, op)
		return nil
	}
	ce := e.chunkElems(size, 1)
	for off := 0; off < count; off += ce {
		c := min(ce, count-off)
		in, out := send[off*size:(off+c)*size], recv[off*size:(off+c)*size]
		t := e.next()
		e.stage(e.half(r, t)[:len(in)], in)
		if err := e.sync(name); err != nil {
			return err
		}
		st, sn := split(c, n, r)
		lo, hi := st*size, (st+sn)*size
		mine := e.half(r, t+1)[lo:hi]
		if hi > lo {
			e.fold(mine, t, lo, dt, op)
			e.scaleShm(mine, dt, op)
		}
		if err := e.sync(name); err != nil {
			return err
		}
		for s := 0; s < n; s++ {
			st, sn := split(c, n, s)
			lo, hi := st*size, (st+sn)*size
			e.drain(out[lo:hi], e.half(s, t+1)[lo:hi], len(send) >= shmStreamMin)
		}
	}
	return nil
}

// reduceShm is allReduceShm whose result only root copies out (for small
// inputs root alone folds the windows).
func (e *Engine) reduceShm(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	e.sig = stepSig(name, count, dt, op, root)
	size, n, r := dt.Size(), e.n, e.rank
	if len(send)*n <= shmOneStep && len(send) <= e.shmHalf() {
		t := e.next()
		copy(e.half(r, t), send)
		if err := e.sync(name); err != nil {
			return err
		}
		if r == root {
			e.fold(recv, t, 0, dt, op)
			e.scaleShm(recv, dt, op)
		}
		return nil
	}
	ce := e.chunkElems(size, 1)
	for off := 0; off < count; off += ce {
		c := min(ce, count-off)
		in := send[off*size : (off+c)*size]
		t := e.next()
		e.stage(e.half(r, t)[:len(in)], in)
		if err := e.sync(name); err != nil {
			return err
		}
		st, sn := split(c, n, r)
		lo, hi := st*size, (st+sn)*size
		if hi > lo {
			mine := e.half(r, t+1)[lo:hi]
			e.fold(mine, t, lo, dt, op)
			e.scaleShm(mine, dt, op)
		}
		if err := e.sync(name); err != nil {
			return err
		}
		if r == root {
			out := recv[off*size : (off+c)*size]
			for s := 0; s < n; s++ {
				st, sn := split(c, n, s)
				lo, hi := st*size, (st+sn)*size
				e.drain(out[lo:hi], e.half(s, t+1)[lo:hi], len(send) >= shmStreamMin)
			}
		}
	}
	return nil
}

// reduceScatterShm: per chunk, every rank stages its piece of every block
// and folds its own block's pieces from all windows. One step a chunk.
func (e *Engine) reduceScatterShm(name string, send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error {
	e.sig = stepSig(name, recvcount, dt, op, 0)
	size, n, r := dt.Size(), e.n, e.rank
	bytes := recvcount * size
	ce := e.chunkElems(size, n)
	for off := 0; off < recvcount; off += ce {
		c := min(ce, recvcount-off)
		cb, lo := c*size, off*size
		t := e.next()
		w := e.half(r, t)
		for s := 0; s < n; s++ {
			e.stage(w[s*cb:(s+1)*cb], send[s*bytes+lo:s*bytes+lo+cb])
		}
		if err := e.sync(name); err != nil {
			return err
		}
		out := recv[lo : lo+cb]
		e.fold(out, t, r*cb, dt, op)
		e.scaleShm(out, dt, op)
	}
	return nil
}

// allGatherShm: per chunk, every rank stages its piece and copies all
// others'. One step a chunk.
func (e *Engine) allGatherShm(name string, send, recv []byte) error {
	e.sig = stepSig(name, len(send), 0, 0, 0)
	n, r, bytes := e.n, e.rank, len(send)
	cb := e.stepBytes()
	for lo := 0; lo < bytes; lo += cb {
		c := min(cb, bytes-lo)
		t := e.next()
		e.stage(e.half(r, t)[:c], send[lo:lo+c])
		if err := e.sync(name); err != nil {
			return err
		}
		for s := 0; s < n; s++ {
			if s != r {
				e.drain(recv[s*bytes+lo:s*bytes+lo+c], e.half(s, t)[:c], len(recv) >= shmStreamMin)
			}
		}
	}
	return nil
}

// broadcastShm: per chunk, root stages it and the others copy it. One
// step a chunk.
func (e *Engine) broadcastShm(name string, send, recv []byte, root int) error {
	e.sig = stepSig(name, len(recv), 0, 0, root)
	bytes := len(recv)
	cb := e.stepBytes()
	for lo := 0; lo < bytes; lo += cb {
		c := min(cb, bytes-lo)
		t := e.next()
		if e.rank == root {
			e.stage(e.half(root, t)[:c], send[lo:lo+c])
		}
		if err := e.sync(name); err != nil {
			return err
		}
		if e.rank != root {
			e.drain(recv[lo:lo+c], e.half(root, t)[:c], bytes >= shmStreamMin)
		}
	}
	return nil
}

// alltoAllShm: per chunk, every rank stages its piece of every block and
// copies its own block's pieces from all windows. One step a chunk. send
// and recv may be the same buffer: a chunk is staged before its place in
// recv is written, and later chunks read other places.
func (e *Engine) alltoAllShm(name string, send, recv []byte, bytes int) error {
	e.sig = stepSig(name, bytes, 0, 0, 0)
	n, r := e.n, e.rank
	cb := e.stepBytes() / n
	if cb >= 64 {
		cb &^= 63
	}
	for lo := 0; lo < bytes; lo += cb {
		c := min(cb, bytes-lo)
		t := e.next()
		w := e.half(r, t)
		for s := 0; s < n; s++ {
			copy(w[s*c:(s+1)*c], send[s*bytes+lo:s*bytes+lo+c])
		}
		if err := e.sync(name); err != nil {
			return err
		}
		for s := 0; s < n; s++ {
			copy(recv[s*bytes+lo:s*bytes+lo+c], e.half(s, t)[r*c:(r+1)*c])
		}
	}
	return nil
}
