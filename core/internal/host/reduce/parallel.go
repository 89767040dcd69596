package reduce

import (
	"sync"

	"github.com/flagcx/flagcx-go/sdk"
)

// IntoParallel is Into split over up to workers goroutines (the calling one
// included). Pieces are whole multiples of 64 bytes (so whole elements and
// cache lines) of at least ParallelMin bytes, so a buffer under
// 2*ParallelMin runs on the calling goroutine alone.
func IntoParallel(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp, workers int) {
	check(dst, a, b, dt, op) // panic here, not in a worker goroutine
	split(len(dst), workers, func(lo, hi int) { Into(dst[lo:hi], a[lo:hi], b[lo:hi], dt, op) })
}

// ReduceParallel is Reduce split over up to workers goroutines.
func ReduceParallel(dst, src []byte, dt sdk.DataType, op sdk.RedOp, workers int) {
	IntoParallel(dst, dst, src, dt, op, workers)
}

// ScaleParallel is Scale split over up to workers goroutines.
func ScaleParallel(buf []byte, dt sdk.DataType, n, workers int) {
	checkScale(buf, dt, n)
	if n == 1 {
		return
	}
	split(len(buf), workers, func(lo, hi int) { Scale(buf[lo:hi], dt, n) })
}

// CopyParallel is copy split over up to workers goroutines (len(dst) >=
// len(src)), for the large copies between a rank's buffers and the shared
// windows that one core cannot stream at the memory's speed.
func CopyParallel(dst, src []byte, workers int) {
	split(len(src), workers, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
}

// Copies are copies (each dst from its src) made as one split of all
// their bytes over a rank's cores, rather than one split (and one wake-up
// of idle threads, which Go wakes one after another) per copy.
type Copies struct {
	dst, src [][]byte
	total    int
}

// Add adds the copy of src into dst (len(dst) >= len(src)); an empty copy
// or one onto itself adds nothing.
func (c *Copies) Add(dst, src []byte) {
	if len(src) > 0 && &dst[0] != &src[0] {
		c.dst, c.src = append(c.dst, dst[:len(src)]), append(c.src, src)
		c.total += len(src)
	}
}

// Reset empties c, keeping its room (and dropping its buffers).
func (c *Copies) Reset() {
	clear(c.dst)
	clear(c.src)
	c.dst, c.src, c.total = c.dst[:0], c.src[:0], 0
}

// Len is how many bytes the copies move.
func (c *Copies) Len() int { return c.total }

// Range makes the bytes [lo, hi) of the copies laid end to end with
// copyFn.
func (c *Copies) Range(lo, hi int, copyFn func(dst, src []byte)) {
	off := 0
	for i, src := range c.src {
		a, b := max(lo-off, 0), min(hi-off, len(src))
		if a < b {
			copyFn(c.dst[i][a:b], src[a:b])
		}
		off += len(src)
		if off >= hi {
			break
		}
	}
}

// Run makes every copy, split as CopyParallel splits one.
func (c *Copies) Run(workers int) {
	split(c.total, workers, func(lo, hi int) { c.Range(lo, hi, func(dst, src []byte) { copy(dst, src) }) })
}

// foldBlock is how much FoldParallel reduces before copying it to its
// second destination: small enough to still be in the core's cache.
const foldBlock = 64 << 10

// FoldParallel folds ins in order into dst (dst = ins[0] op ins[1] op
// ...; Avg sums and divides by ranks) and, when also is not nil, copies
// the result to also too, block by block while the block is in the cache,
// split over up to workers goroutines. dst must not overlap any input;
// also may be one of them (an in-place caller's own input): each block is
// read before it is written.
func FoldParallel(dst, also []byte, ins [][]byte, dt sdk.DataType, op sdk.RedOp, ranks, workers int) {
	foldSplit(dst, also, ins, dt, op, ranks, workers, ParallelFrom)
}

// foldSplit is FoldParallel splitting from buffers of from bytes (the
// benchmark's knob).
func foldSplit(dst, also []byte, ins [][]byte, dt sdk.DataType, op sdk.RedOp, ranks, workers, from int) {
	fop := op
	if op == sdk.Avg {
		fop = sdk.Sum
	}
	for _, in := range ins {
		check(dst, dst, in, dt, fop)
	}
	if also != nil && len(also) < len(dst) {
		panic("reduce: FoldParallel: second destination shorter than the first")
	}
	splitFrom(len(dst), workers, from, func(lo, hi int) {
		for a := lo; a < hi; a += foldBlock {
			b := min(a+foldBlock, hi)
			switch len(ins) {
			case 0:
				continue
			case 1:
				copy(dst[a:b], ins[0][a:b])
			default:
				Into(dst[a:b], ins[0][a:b], ins[1][a:b], dt, fop)
			}
			for _, in := range ins[min(2, len(ins)):] {
				Into(dst[a:b], dst[a:b], in[a:b], dt, fop)
			}
			if op == sdk.Avg {
				Scale(dst[a:b], dt, ranks)
			}
			if also != nil {
				copy(also[a:b], dst[a:b])
			}
		}
	})
}

// split calls fn on pieces of [0, n) in parallel, from ParallelFrom
// bytes.
func split(n, workers int, fn func(lo, hi int)) { splitFrom(n, workers, ParallelFrom, fn) }

// splitFrom is split from buffers of from bytes (2*ParallelMin at least:
// no piece is smaller than ParallelMin).
func splitFrom(n, workers, from int, fn func(lo, hi int)) {
	pieces := min(workers, n/ParallelMin)
	if n < from || pieces < 2 {
		fn(0, n)
		return
	}
	per := (n / pieces) &^ 63
	var wg sync.WaitGroup
	wg.Add(pieces - 1)
	for i := 1; i < pieces; i++ {
		lo, hi := i*per, (i+1)*per
		if i == pieces-1 {
			hi = n
		}
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	fn(0, per)
	wg.Wait()
}
