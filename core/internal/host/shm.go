package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/core/internal/host/mem"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// Shared is memory that every rank of the communicator maps (all of them
// on one host); shm.ShmNode is one. With it the engine runs
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
	// Enter and Exit bracket every collective that uses the windows: the
	// memory stays mapped in between, even if the communicator is aborted
	// from another goroutine (the waits then fail fast).
	Enter() error
	Exit()
	// Step is the last step this rank published (0 before the first).
	Step() uint32
	// Post publishes step Step()+1 labelled sig.
	Post(sig uint64) error
	// Wait waits until rank r has published step Step(); a rank whose
	// label differs (another operation or count) is an error. Waiting for
	// this rank returns at once.
	Wait(r int) error
}

// WithShared runs the collectives that gain from it over s (see Shared).
// Every rank must pass one, or none.
func WithShared(s Shared) Option {
	return func(e *Engine) { e.sh = s }
}

// Tuning of the shared-memory algorithms. Variables so that benchmarks can
// try others; every rank must use the same values.
var (
	// shmOneStep: an AllReduce or Reduce of bytes per rank with
	// n*n*bytes at most this reduces everything on every rank in one step;
	// above it each rank reduces a slice (two steps a chunk). On 8 ranks of
	// a 32-core Xeon, one step wins at 1 KiB and loses from 4 KiB on.
	shmOneStep = 128 << 10
	// shmChunk bounds the bytes of one step besides the half window
	// (0: a quarter of the last-level cache shared by the ranks, at least
	// 1 MiB), so that the windows read in a step stay in the cache while
	// the next step's are written (and the caller's buffers stream past).
	// Fewer, larger steps wait less often for the slowest rank.
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

// StepSig labels the steps of one collective call: ranks that disagree on
// the call (another collective, count, type, op or root) fail at the first
// step instead of reading windows of another shape.
func StepSig(name string, count int, dt sdk.DataType, op sdk.RedOp, root int) uint64 {
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

// sync publishes the next step and waits for every rank.
func (e *Engine) sync(name string) error {
	if err := e.sh.Post(e.sig); err != nil {
		return e.stepErr(name, err)
	}
	return e.waitAll(name)
}

// waitAll waits until every rank has published the current step.
func (e *Engine) waitAll(name string) error {
	for r := 0; r < e.n; r++ {
		if err := e.sh.Wait(r); err != nil {
			return e.stepErr(name, err)
		}
	}
	return nil
}

func (e *Engine) stepErr(name string, err error) error {
	return fmt.Errorf("host %s: rank %d, shared-memory step %d: %w", name, e.rank, e.sh.Step(), err)
}

// foldAsTheyCome is a one-step fold of len(dst) bytes of half t: it folds
// each rank's window as soon as that rank has published (in rank order, so
// every rank computes the same bits), so that reading the first windows
// overlaps waiting for the last ranks.
func (e *Engine) foldAsTheyCome(name string, dst []byte, t uint32, dt sdk.DataType, op sdk.RedOp) error {
	for r := 0; r < e.n; r++ {
		if err := e.sh.Wait(r); err != nil {
			return e.stepErr(name, err)
		}
		switch r {
		case 0:
		case 1:
			reduce.Into(dst, e.half(0, t)[:len(dst)], e.half(1, t)[:len(dst)], dt, op)
		default:
			reduce.Into(dst, dst, e.half(r, t)[:len(dst)], dt, op)
		}
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

// parallel runs f over [0, n) cut into one range for each of up to w
// goroutines (on the calling goroutine when n is small).
func parallel(n, grain, w int, f func(lo, hi int)) {
	w = min(w, n/max(shmParallelMin, grain))
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

// copies are a step's copies between the caller's buffers and the
// windows, made as one split over the rank's cores (reduce.Copies).
type copies struct{ reduce.Copies }

// run does the copies on up to w goroutines, each a contiguous range of
// the concatenated bytes, with copyFn.
func (c *copies) run(w int, copyFn func(dst, src []byte)) {
	parallel(c.Len(), 64, w, func(lo, hi int) { c.Range(lo, hi, copyFn) })
}

// stage fills this rank's window in pieces below the size from which Go's
// copy streams past the cache (non-temporal stores from 1 MiB on amd64):
// the peers read the window right after, and should find it in the shared
// cache.
func stage(dst, src []byte) {
	for b := 0; b < len(src); b += stagePiece {
		end := min(b+stagePiece, len(src))
		copy(dst[b:end], src[b:end])
	}
}

// stagePiece is below the non-temporal threshold of Go's memmove.
const stagePiece = 512 << 10

// drainFn copies a result out of a window into the caller's buffer,
// streaming past the cache when the whole message is large (see
// mem.Stream): it would not stay there anyway, and the windows the peers
// read next should.
func drainFn(big bool) func(dst, src []byte) {
	if big {
		return mem.Stream
	}
	return func(dst, src []byte) { copy(dst, src) }
}

// shmStreamMin is the message size from which drain streams.
var shmStreamMin = 4 << 20

// fold sets dst to the reduction of every rank's bytes at off.. in half t
// of its window, in rank order (so every rank computes the same bits),
// block by block so that the partial result stays in cache, on w cores.
// Avg is summed; the caller scales.
func (e *Engine) fold(dst []byte, t uint32, off int, dt sdk.DataType, op sdk.RedOp, w int) {
	if len(dst) < 2*max(shmParallelMin, dt.Size()*64) || w < 2 {
		e.foldRange(dst, t, off, 0, len(dst), dt, op) // no closure: nothing allocated
		return
	}
	parallel(len(dst), dt.Size()*64, w, func(lo, hi int) { e.foldRange(dst, t, off, lo, hi, dt, op) })
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

func (e *Engine) scaleShm(buf []byte, dt sdk.DataType, op sdk.RedOp, w int) {
	if op == sdk.Avg {
		reduce.ScaleParallel(buf, dt, e.n, w)
	}
}

// chunked runs a shared-memory collective over chunks 0..chunks-1. For
// each chunk: put(k, t, w) fills this rank's half of step t, a Sync
// publishes it; then, in two-step algorithms, mid(k, t) works on the
// published halves and writes this rank's half of step t+1, and a second
// Sync publishes that; then take(k, t, w) reads the last step's halves.
// take(k) runs beside put(k+1), each on part of the rank's cores: one
// writes the caller's buffer while the other reads it, and they touch
// different halves (take reads step t's, put writes step t+1's, which
// every rank finished reading before it published step t).
func (e *Engine) chunked(name string, chunks int, put func(k int, t uint32, w int), mid func(k int, t uint32), take func(k int, t uint32, w int)) error {
	t := e.next()
	put(0, t, e.workers)
	for k := 0; k < chunks; k++ {
		if err := e.sync(name); err != nil {
			return err
		}
		if mid != nil {
			mid(k, t)
			if err := e.sync(name); err != nil {
				return err
			}
			t++
		}
		if k+1 == chunks {
			take(k, t, e.workers)
			break
		}
		if e.workers < 2 {
			take(k, t, 1)
			put(k+1, t+1, 1)
		} else {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				take(k, t, e.workers/2)
			}()
			put(k+1, t+1, e.workers-e.workers/2)
			wg.Wait()
		}
		t++
	}
	return nil
}

// oneStep: the whole operation fits one step.
// Every rank reading every input costs n*n*bytes of traffic between cores;
// two steps cost one more wait for all ranks.
func (e *Engine) oneStep(bytes int) bool {
	return bytes*e.n*e.n <= shmOneStep && bytes <= e.shmHalf()
}

// allReduceShm: small inputs in one step (every rank folds all windows);
// larger ones chunk by chunk in two steps (each rank folds its slice of the
// chunk into its window, then every rank copies all slices out).
func (e *Engine) allReduceShm(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	return e.reduceShm(name, send, recv, count, dt, op, -1)
}

// reduceShm is allReduceShm whose result only root copies out (root < 0:
// every rank does).
func (e *Engine) reduceShm(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	e.sig = StepSig(name, count, dt, op, root)
	if err := e.sh.Enter(); err != nil {
		return e.stepErr(name, err)
	}
	defer e.sh.Exit()
	if root < 0 && len(e.regions) > 0 && !e.oneStep(len(send)) {
		// Some memory is registered (on every rank: MemAlloc is
		// collective): the first step says whether this call's is.
		sends, recvs, err := e.agreeDirect(name, send, recv)
		if err != nil || sends != nil {
			if err != nil {
				return err
			}
			return e.allReduceDirect(name, sends, recvs, count, dt, op)
		}
	}
	if !e.oneStep(len(send)) {
		return e.reduceChunks(name, send, recv, count, dt, op, root)
	}
	t := e.next()
	copy(e.half(e.rank, t), send)
	if err := e.sh.Post(e.sig); err != nil {
		return e.stepErr(name, err)
	}
	if root >= 0 && e.rank != root {
		return e.waitAll(name) // nothing to read, but the step is not over before everyone came
	}
	if err := e.foldAsTheyCome(name, recv, t, dt, op); err != nil {
		return err
	}
	e.scaleShm(recv, dt, op, 1)
	return nil
}

// reduceChunks is the two-step chunked reduction of AllReduce (root < 0:
// every rank copies the result out) and Reduce (only root does).
func (e *Engine) reduceChunks(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	size, n, r := dt.Size(), e.n, e.rank
	ce := e.chunkElems(size, 1)
	chunk := func(k int) (lo, hi int) { return k * ce * size, min((k+1)*ce, count) * size }
	slice := func(c, s int) (lo, hi int) {
		st, sn := split(c, n, s)
		return st * size, (st + sn) * size
	}
	big := len(send) >= shmStreamMin
	return e.chunked(name, (count+ce-1)/ce,
		func(k int, t uint32, w int) {
			lo, hi := chunk(k)
			var c copies
			c.Add(e.half(r, t)[:hi-lo], send[lo:hi])
			c.run(w, stage)
		},
		func(k int, t uint32) {
			lo, hi := chunk(k)
			slo, shi := slice((hi-lo)/size, r)
			if shi > slo {
				mine := e.half(r, t+1)[slo:shi]
				e.fold(mine, t, slo, dt, op, e.workers)
				e.scaleShm(mine, dt, op, e.workers)
			}
		},
		func(k int, t uint32, w int) {
			if root >= 0 && r != root {
				return
			}
			lo, hi := chunk(k)
			out := recv[lo:hi]
			var c copies
			for s := 0; s < n; s++ {
				slo, shi := slice((hi-lo)/size, s)
				c.Add(out[slo:shi], e.half(s, t)[slo:shi])
			}
			c.run(w, drainFn(big))
		})
}

// reduceScatterShm: per chunk, every rank stages its piece of every block
// and folds its own block's pieces from all windows. One step a chunk.
func (e *Engine) reduceScatterShm(name string, send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error {
	e.sig = StepSig(name, recvcount, dt, op, 0)
	if err := e.sh.Enter(); err != nil {
		return e.stepErr(name, err)
	}
	defer e.sh.Exit()
	size, n, r := dt.Size(), e.n, e.rank
	bytes := recvcount * size
	ce := e.chunkElems(size, n)
	piece := func(k int) (lo, cb int) { return k * ce * size, (min((k+1)*ce, recvcount) - k*ce) * size }
	return e.chunked(name, (recvcount+ce-1)/ce,
		func(k int, t uint32, w int) {
			lo, cb := piece(k)
			win := e.half(r, t)
			var c copies
			for s := 0; s < n; s++ {
				c.Add(win[s*cb:(s+1)*cb], send[s*bytes+lo:s*bytes+lo+cb])
			}
			c.run(w, stage)
		}, nil,
		func(k int, t uint32, w int) {
			lo, cb := piece(k)
			out := recv[lo : lo+cb]
			e.fold(out, t, r*cb, dt, op, w)
			e.scaleShm(out, dt, op, w)
		})
}

// allGatherShm: per chunk, every rank stages its piece and copies all
// others'. One step a chunk.
func (e *Engine) allGatherShm(name string, send, recv []byte) error {
	e.sig = StepSig(name, len(send), 0, 0, 0)
	if err := e.sh.Enter(); err != nil {
		return e.stepErr(name, err)
	}
	defer e.sh.Exit()
	n, r, bytes := e.n, e.rank, len(send)
	cb := e.stepBytes()
	big := len(recv) >= shmStreamMin
	return e.chunked(name, (bytes+cb-1)/cb,
		func(k int, t uint32, w int) {
			lo := k * cb
			c := min(cb, bytes-lo)
			cp := copies{}
			cp.Add(e.half(r, t)[:c], send[lo:lo+c])
			cp.run(w, stage)
		}, nil,
		func(k int, t uint32, w int) {
			lo := k * cb
			c := min(cb, bytes-lo)
			var cp copies
			for s := 0; s < n; s++ {
				if s != r {
					cp.Add(recv[s*bytes+lo:s*bytes+lo+c], e.half(s, t)[:c])
				}
			}
			cp.run(w, drainFn(big))
		})
}

// broadcastShm: per chunk, root stages it and the others copy it. One
// step a chunk.
func (e *Engine) broadcastShm(name string, send, recv []byte, root int) error {
	e.sig = StepSig(name, len(recv), 0, 0, root)
	if err := e.sh.Enter(); err != nil {
		return e.stepErr(name, err)
	}
	defer e.sh.Exit()
	bytes := len(recv)
	cb := e.stepBytes()
	big := bytes >= shmStreamMin
	return e.chunked(name, (bytes+cb-1)/cb,
		func(k int, t uint32, w int) {
			if e.rank == root {
				lo := k * cb
				c := min(cb, bytes-lo)
				cp := copies{}
				cp.Add(e.half(root, t)[:c], send[lo:lo+c])
				cp.run(w, stage)
			}
		}, nil,
		func(k int, t uint32, w int) {
			if e.rank != root {
				lo := k * cb
				c := min(cb, bytes-lo)
				cp := copies{}
				cp.Add(recv[lo:lo+c], e.half(root, t)[:c])
				cp.run(w, drainFn(big))
			}
		})
}

// alltoAllShm: per chunk, every rank stages its piece of every block and
// copies its own block's pieces from all windows. One step a chunk. send
// and recv may be the same buffer: a chunk is staged before its place in
// recv is written, and later chunks read other places; so the copy out of
// one chunk does not run beside the staging of the next here.
func (e *Engine) alltoAllShm(name string, send, recv []byte, bytes int) error {
	e.sig = StepSig(name, bytes, 0, 0, 0)
	if err := e.sh.Enter(); err != nil {
		return e.stepErr(name, err)
	}
	defer e.sh.Exit()
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
