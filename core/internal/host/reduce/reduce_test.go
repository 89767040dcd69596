package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// The reference below works element by element through encoding/binary and
// float64/int64 arithmetic, independently of the kernels' typed loops.

var ne = binary.NativeEndian

func get(b []byte, dt sdk.DataType, i int) (iv int64, uv uint64, fv float64) {
	o := i * dt.Size()
	switch dt {
	case sdk.Int8:
		iv = int64(int8(b[o]))
	case sdk.Uint8:
		uv = uint64(b[o])
	case sdk.Int32:
		iv = int64(int32(ne.Uint32(b[o:])))
	case sdk.Uint32:
		uv = uint64(ne.Uint32(b[o:]))
	case sdk.Int64:
		iv = int64(ne.Uint64(b[o:]))
	case sdk.Uint64:
		uv = ne.Uint64(b[o:])
	case sdk.Float16:
		fv = refF16.value(ne.Uint16(b[o:]))
	case sdk.Bfloat16:
		fv = refBF16.value(ne.Uint16(b[o:]))
	case sdk.Float32:
		fv = float64(math.Float32frombits(ne.Uint32(b[o:])))
	case sdk.Float64:
		fv = math.Float64frombits(ne.Uint64(b[o:]))
	}
	if isSigned(dt) {
		uv = uint64(iv)
	}
	return
}

func isSigned(dt sdk.DataType) bool { return dt == sdk.Int8 || dt == sdk.Int32 || dt == sdk.Int64 }

// putBits stores the low bits of v (integers, truncated: two's complement
// wrap) or the rounded float.
func put(b []byte, dt sdk.DataType, i int, uv uint64, fv float64) {
	o := i * dt.Size()
	switch dt {
	case sdk.Int8, sdk.Uint8:
		b[o] = byte(uv)
	case sdk.Int32, sdk.Uint32:
		ne.PutUint32(b[o:], uint32(uv))
	case sdk.Int64, sdk.Uint64:
		ne.PutUint64(b[o:], uv)
	case sdk.Float16:
		if math.IsNaN(fv) {
			ne.PutUint16(b[o:], 0x7e00)
		} else {
			ne.PutUint16(b[o:], refF16.round(fv))
		}
	case sdk.Bfloat16:
		if math.IsNaN(fv) {
			ne.PutUint16(b[o:], 0x7fc0)
		} else {
			ne.PutUint16(b[o:], refBF16.round(fv))
		}
	case sdk.Float32:
		ne.PutUint32(b[o:], math.Float32bits(float32(fv)))
	case sdk.Float64:
		ne.PutUint64(b[o:], math.Float64bits(fv))
	}
}

func refFloatMax(x, y float64, isMax bool) float64 {
	switch {
	case math.IsNaN(x):
		return y
	case math.IsNaN(y):
		return x
	case x == 0 && y == 0:
		neg := math.Signbit(x) && math.Signbit(y) // max: -0 only if both are
		if !isMax {
			neg = math.Signbit(x) || math.Signbit(y) // min: -0 if either is
		}
		if neg {
			return math.Copysign(0, -1)
		}
		return 0
	case isMax:
		return math.Max(x, y)
	default:
		return math.Min(x, y)
	}
}

// refInto computes dst = a op b element by element.
func refInto(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp) {
	for i := 0; i < len(dst)/dt.Size(); i++ {
		ai, au, af := get(a, dt, i)
		bi, bu, bf := get(b, dt, i)
		var u uint64
		var f float64
		if dt.IsFloat() {
			switch op {
			case sdk.Sum, sdk.Avg:
				f = af + bf
			case sdk.Prod:
				f = af * bf
			case sdk.Max:
				f = refFloatMax(af, bf, true)
			case sdk.Min:
				f = refFloatMax(af, bf, false)
			}
		} else {
			switch op {
			case sdk.Sum, sdk.Avg:
				u = au + bu
			case sdk.Prod:
				u = au * bu
			case sdk.Max, sdk.Min:
				less := au < bu
				if isSigned(dt) {
					less = ai < bi
				}
				if less == (op == sdk.Max) {
					u = bu
				} else {
					u = au
				}
			}
		}
		put(dst, dt, i, u, f)
	}
}

func refScale(buf []byte, dt sdk.DataType, n int) {
	for i := 0; i < len(buf)/dt.Size(); i++ {
		iv, uv, fv := get(buf, dt, i)
		switch {
		case dt.IsFloat():
			put(buf, dt, i, 0, fv/float64(n))
		case isSigned(dt):
			put(buf, dt, i, uint64(iv/int64(n)), 0)
		default:
			put(buf, dt, i, uv/uint64(n), 0)
		}
	}
}

// randomBuf fills count elements: random bit patterns, plus the special
// values of floats (zeros of both signs, Inf, NaN, subnormals) and the
// extremes of integers.
func randomBuf(rng *rand.Rand, dt sdk.DataType, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	var specials []uint64
	switch dt {
	case sdk.Float16:
		specials = []uint64{0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x8001, 0x3c00, 0x7bff, 0xfbff, 0x03ff}
	case sdk.Bfloat16:
		specials = []uint64{0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0001, 0x8001, 0x3f80, 0x7f7f, 0xff7f}
	case sdk.Float32:
		specials = []uint64{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 1, 0x3f800000, 0x7f7fffff}
	case sdk.Float64:
		specials = []uint64{0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 1, 0x7fefffffffffffff}
	default:
		specials = []uint64{0, 1, math.MaxUint64, 1 << 63, 1<<63 - 1, 0x7f, 0x80, 0xff, 1 << 31, 1<<31 - 1}
	}
	for i := 0; i < count; i++ {
		if rng.IntN(4) == 0 {
			v := specials[rng.IntN(len(specials))]
			o := i * dt.Size()
			switch dt.Size() {
			case 1:
				b[o] = byte(v)
			case 2:
				ne.PutUint16(b[o:], uint16(v))
			case 4:
				ne.PutUint32(b[o:], uint32(v))
			case 8:
				ne.PutUint64(b[o:], v)
			}
		}
	}
	return b
}

// requireSameElements compares element bits, accepting any NaN for a NaN.
func requireSameElements(t *testing.T, dt sdk.DataType, want, got []byte, msg string) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := 0; i < len(want)/dt.Size(); i++ {
		_, wu, wf := get(want, dt, i)
		_, gu, gf := get(got, dt, i)
		if dt.IsFloat() && math.IsNaN(wf) {
			require.True(t, math.IsNaN(gf), "%s: element %d: want NaN, got %v", msg, i, gf)
			continue
		}
		o := i * dt.Size()
		w, g := want[o:o+dt.Size()], got[o:o+dt.Size()]
		if dt.IsFloat() {
			require.Equal(t, w, g, "%s: element %d: want %v (% x), got %v (% x)", msg, i, wf, w, gf, g)
		} else {
			require.Equal(t, w, g, "%s: element %d: want %d, got %d", msg, i, wu, gu)
		}
	}
}

func TestIntoMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const count = 3001
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
				a, b := randomBuf(rng, dt, count), randomBuf(rng, dt, count)
				want := make([]byte, len(a))
				refInto(want, a, b, dt, op)

				got := make([]byte, len(a))
				Into(got, a, b, dt, op)
				requireSameElements(t, dt, want, got, "Into")

				// dst aliasing a (Reduce) and aliasing b.
				ac := append([]byte(nil), a...)
				Reduce(ac, b, dt, op)
				requireSameElements(t, dt, want, ac, "Reduce")
				bc := append([]byte(nil), b...)
				Into(bc, a, bc, dt, op)
				requireSameElements(t, dt, want, bc, "Into dst=b")

				// Misaligned views (offset 1 from an aligned allocation).
				if dt.Size() > 1 {
					ua := append(make([]byte, 1, len(a)+1), a...)[1:]
					ub := append(make([]byte, 3, len(b)+3), b...)[3:]
					ud := make([]byte, len(a)+5)[5:]
					Into(ud, ua, ub, dt, op)
					requireSameElements(t, dt, want, ud, "misaligned Into")
					Reduce(ua, ub, dt, op)
					requireSameElements(t, dt, want, ua, "misaligned Reduce")
				}
			})
		}
	}
}

// Products of narrow floats over their whole exponent range, subnormal
// results included, must be correctly rounded.
func TestNarrowProductsCorrectlyRounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, dt := range []sdk.DataType{sdk.Float16, sdk.Bfloat16} {
		a, b := randomBuf(rng, dt, 200000), randomBuf(rng, dt, 200000)
		want, got := make([]byte, len(a)), make([]byte, len(a))
		refInto(want, a, b, dt, sdk.Prod)
		Into(got, a, b, dt, sdk.Prod)
		requireSameElements(t, dt, want, got, dt.String())
		refInto(want, a, b, dt, sdk.Sum)
		Into(got, a, b, dt, sdk.Sum)
		requireSameElements(t, dt, want, got, dt.String())
	}
}

func TestScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range sdk.AllDataTypes() {
		for _, n := range []int{1, 2, 3, 7, 8, 300} {
			buf := randomBuf(rng, dt, 1001)
			want := append([]byte(nil), buf...)
			refScale(want, dt, n)
			got := append([]byte(nil), buf...)
			Scale(got, dt, n)
			requireSameElements(t, dt, want, got, fmt.Sprintf("%v/%d", dt, n))
			if dt.Size() > 1 {
				u := append(make([]byte, 1, len(buf)+1), buf...)[1:]
				Scale(u, dt, n)
				requireSameElements(t, dt, want, u, fmt.Sprintf("misaligned %v/%d", dt, n))
			}
		}
	}
	// Integer average truncates toward zero.
	b := []byte{0xf9, 7} // int8 -7, 7
	Scale(b, sdk.Int8, 2)
	require.Equal(t, []byte{0xfd, 3}, b)
}

func TestParallelMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []sdk.DataType{sdk.Int8, sdk.Float16, sdk.Float32, sdk.Float64} {
		for _, size := range []int{ParallelMin - 8, 2*ParallelMin + 24, 10*ParallelMin + 40} {
			count := size / dt.Size()
			a, b := randomBuf(rng, dt, count), randomBuf(rng, dt, count)
			want, got := make([]byte, len(a)), make([]byte, len(a))
			Into(want, a, b, dt, sdk.Sum)
			IntoParallel(got, a, b, dt, sdk.Sum, 4)
			require.Equal(t, want, got)
			ReduceParallel(a, b, dt, sdk.Sum, 3)
			require.Equal(t, want, a)
			Scale(want, dt, 3)
			ScaleParallel(got, dt, 3, 5)
			require.Equal(t, want, got)
		}
	}
}

// TestFoldParallelMatchesSerial: folding in order with a second
// destination equals the serial fold, also when that destination is one
// of the inputs (a host rank reducing in place), for every op including
// avg, across the block and worker boundaries.
func TestFoldParallelMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, dt := range []sdk.DataType{sdk.Int8, sdk.Float16, sdk.Float32, sdk.Float64} {
		for _, op := range []sdk.RedOp{sdk.Sum, sdk.Min, sdk.Avg} {
			for _, size := range []int{64, 3*foldBlock + 192, 2*ParallelMin + 64*5, ParallelFrom + 64*5} {
				for _, n := range []int{1, 2, 4} {
					count := size / dt.Size()
					ins := make([][]byte, n)
					for i := range ins {
						ins[i] = randomBuf(rng, dt, count)
					}
					want := append([]byte(nil), ins[0]...)
					fop := op
					if op == sdk.Avg {
						fop = sdk.Sum
					}
					for _, in := range ins[1:] {
						Reduce(want, in, dt, fop)
					}
					if op == sdk.Avg {
						Scale(want, dt, 5)
					}
					dst := make([]byte, len(want))
					FoldParallel(dst, ins[n-1], ins, dt, op, 5, 3)
					require.Equal(t, want, dst, "%v %v %d bytes, %d inputs", dt, op, size, n)
					require.Equal(t, want, ins[n-1], "the second destination (an input)")
				}
			}
		}
	}
}

func TestMisusePanics(t *testing.T) {
	require.Panics(t, func() { Into(make([]byte, 3), make([]byte, 3), make([]byte, 3), sdk.Int32, sdk.Sum) })
	require.Panics(t, func() { Into(make([]byte, 8), make([]byte, 4), make([]byte, 8), sdk.Int32, sdk.Sum) })
	require.Panics(t, func() { Reduce(make([]byte, 8), make([]byte, 8), sdk.DataType(42), sdk.Sum) })
	require.Panics(t, func() { Reduce(make([]byte, 8), make([]byte, 8), sdk.Int32, sdk.RedOp(9)) })
	require.Panics(t, func() { Scale(make([]byte, 8), sdk.Int32, 0) })
	require.Panics(t, func() {
		IntoParallel(make([]byte, 1<<20), make([]byte, 1<<20), make([]byte, 1<<19), sdk.Int32, sdk.Sum, 4)
	})
	require.NotPanics(t, func() { Into(nil, nil, nil, sdk.Float64, sdk.Max) })
}

// onesBuf holds 1 in every element: benchmarks use normal numbers, since
// subnormal arithmetic is far slower on most CPUs.
func onesBuf(dt sdk.DataType, bytes int) []byte {
	b := make([]byte, bytes)
	for i := 0; i < bytes/dt.Size(); i++ {
		put(b, dt, i, 1, 1)
	}
	return b
}

func BenchmarkReduceKernel(b *testing.B) {
	const bytes = 1 << 20
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range []sdk.RedOp{sdk.Sum, sdk.Max} {
			b.Run(fmt.Sprintf("%v/%v", dt, op), func(b *testing.B) {
				x, y := onesBuf(dt, bytes), onesBuf(dt, bytes)
				b.SetBytes(bytes)
				for b.Loop() {
					Reduce(x, y, dt, op)
				}
			})
		}
	}
}

func BenchmarkReduceKernelParallel(b *testing.B) {
	const bytes = 16 << 20
	for _, dt := range []sdk.DataType{sdk.Float32, sdk.Bfloat16} {
		b.Run(dt.String(), func(b *testing.B) {
			x, y := onesBuf(dt, bytes), onesBuf(dt, bytes)
			b.SetBytes(bytes)
			for b.Loop() {
				ReduceParallel(x, y, dt, sdk.Sum, runtime.GOMAXPROCS(0))
			}
		})
	}
}

// BenchmarkFoldParallel measures a fold of two float32 inputs by size and
// goroutine count: where splitting starts to pay (ParallelFrom).
func BenchmarkFoldParallel(b *testing.B) {
	for _, size := range []int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20} {
		for _, w := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%dKiB/workers=%d", size>>10, w), func(b *testing.B) {
				ins := [][]byte{onesBuf(sdk.Float32, size), onesBuf(sdk.Float32, size)}
				dst := make([]byte, size)
				b.SetBytes(int64(size))
				for b.Loop() {
					foldSplit(dst, nil, ins, sdk.Float32, sdk.Sum, 2, w, ParallelMin)
				}
			})
		}
	}
}

// TestFoldSplit: a fold below ParallelFrom stays on one goroutine; above
// it, it is cut into pieces of ParallelMin at least, one per worker at
// most, that cover the buffer once; a rank's workers are its cores
// within 1..MaxWorkers.
func TestFoldSplit(t *testing.T) {
	for _, tc := range []struct {
		n, workers, pieces int
	}{
		{ParallelFrom - 64, 8, 1},
		{ParallelFrom, 1, 1},
		{ParallelFrom, 8, ParallelFrom / ParallelMin},
		{ParallelFrom, 2, 2},
		{1 << 20, 8, 8},
		{64 << 20, MaxWorkers, MaxWorkers},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.workers), func(t *testing.T) {
			var mu sync.Mutex
			covered := 0
			var lens []int
			split(tc.n, tc.workers, func(lo, hi int) {
				mu.Lock()
				defer mu.Unlock()
				covered += hi - lo
				lens = append(lens, hi-lo)
			})
			require.Len(t, lens, tc.pieces)
			require.Equal(t, tc.n, covered)
			for _, l := range lens {
				require.GreaterOrEqual(t, l, min(tc.n, ParallelMin))
			}
		})
	}
	for cores, want := range map[int]int{-1: 1, 0: 1, 1: 1, 4: 4, MaxWorkers: MaxWorkers, 64: MaxWorkers} {
		require.Equal(t, want, Workers(cores), "%d cores", cores)
	}
}

// TestCopiesRun: copies of several lengths made as one split land
// exactly, at every worker count; copies onto themselves and empty ones
// add nothing.
func TestCopiesRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	lens := []int{3*ParallelMin + 5, 100, ParallelMin, 0, 2*ParallelMin + 64}
	for _, workers := range []int{1, 2, 3, 7} {
		var c Copies
		var srcs, dsts [][]byte
		for _, n := range lens {
			src, dst := make([]byte, n), make([]byte, n+9)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			c.Add(dst, src)
			srcs, dsts = append(srcs, src), append(dsts, dst)
		}
		self := []byte{1, 2, 3}
		c.Add(self, self)
		total := 0
		for _, n := range lens {
			total += n
		}
		require.Equal(t, total, c.Len())
		c.Run(workers)
		for i := range srcs {
			require.Equal(t, srcs[i], dsts[i][:len(srcs[i])], "copy %d, %d workers", i, workers)
			require.Equal(t, make([]byte, 9), dsts[i][len(srcs[i]):], "copy %d wrote past its source's length", i)
		}
		c.Reset()
		require.Zero(t, c.Len(), "after Reset")
		c.Run(workers) // copies nothing
	}
}
