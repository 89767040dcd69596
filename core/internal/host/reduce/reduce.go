// Package reduce holds the host reduction kernels: elementwise
// dst = a op b over byte buffers for the ten NCCL data types and the five
// reduction operations, the division that finishes an average, and
// parallel variants that split large buffers over goroutines.
//
// Semantics:
//   - Integers wrap on overflow (two's complement / unsigned modulo), as C
//     unsigned arithmetic and NCCL do.
//   - float16 and bfloat16 are widened to float32, combined, and rounded
//     back to nearest even (see half.go for why that is correctly rounded).
//   - Avg reduces as Sum; the caller divides once at the end with Scale
//     (integers: Go's truncating division of the wrapped sum).
//   - Max and Min on floating point follow CUDA's __hmax/__hmin (and C's
//     fmax/fmin): a NaN operand loses to a number, two NaNs give NaN, and
//     +0 counts as larger than -0, so the result does not depend on the
//     order in which ranks are combined.
//
// Buffers are host memory. Kernels view them as typed slices (unsafe.Slice)
// when every pointer is aligned to the element size; make([]byte) memory is,
// but a sub-slice at an odd offset need not be, and a misaligned *T is
// invalid in Go (checkptr rejects it, and some CPUs trap), so misaligned
// input goes through small aligned bounce buffers instead.
//
// On amd64 CPUs with AVX2 and F16C, assembly kernels (vector_amd64.s) take
// the bulk of every reduction but the 64-bit and 8-bit integer products,
// and of Avg's division of floats; they give
// the plain Go kernels' bits (TestVectorKernels, TestVectorScale), several
// times as fast on data in cache, float16 and bfloat16 most
// (BenchmarkVectorKernels; docs/performance.md, "Host folds in AVX2:
// bfloat16 and float16 at the memory's speed").
package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// ParallelMin is the smallest piece the parallel variants hand to a
// goroutine, and ParallelFrom the smallest buffer they split: below it a
// fold stays on the calling goroutine (BenchmarkFoldParallel: the
// goroutines' start and wait cost what a split of less saves).
const (
	ParallelMin  = 64 << 10
	ParallelFrom = 256 << 10
)

// MaxWorkers bounds the goroutines of one rank's fold: beyond it the
// memory's bandwidth, not the cores, bounds a fold, and more goroutines
// only take cores from the other ranks of the host. On the 32-core H200
// host (bin/copybw -host-workers) host memory copied more with every
// doubling of the goroutines from 8 to 32; raising the bound from 8 to 16
// sped up the layouts whose host ranks fold (nvidia:2,host:2,
// nvidia:1,host:2) and left host-only ranks' 64 MiB AllReduce about as it
// was (docs/performance.md, "Sockets out of the netpoller, the every-GPU
// copy bound, host folds on 16 goroutines").
const MaxWorkers = 16

// Workers is how many goroutines a rank's folds use given the cores it
// may keep busy (the host's cores over its local ranks): at least 1, at
// most MaxWorkers.
func Workers(cores int) int { return min(MaxWorkers, max(1, cores)) }

type kernel func(d, a, b []byte)

type integer interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64
}

type number interface {
	integer | ~float32 | ~float64
}

// as views b as a []T; b must be aligned for T.
func as[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func sumK[T number](d, a, b []byte) {
	dd, aa, bb := as[T](d), as[T](a), as[T](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	i := 0
	for ; i+4 <= len(dd); i += 4 {
		d4, a4, b4 := dd[i:i+4:i+4], aa[i:i+4:i+4], bb[i:i+4:i+4]
		d4[0] = a4[0] + b4[0]
		d4[1] = a4[1] + b4[1]
		d4[2] = a4[2] + b4[2]
		d4[3] = a4[3] + b4[3]
	}
	for ; i < len(dd); i++ {
		dd[i] = aa[i] + bb[i]
	}
}

// sum8K adds bytes eight at a time (SWAR): the low seven bits of every lane
// add without crossing into the next lane, and the top bit is the XOR of
// the operands' top bits and the carry into it. Wrapping is the same for
// int8 and uint8.
func sum8K(d, a, b []byte) {
	const hi = 0x8080808080808080
	le := binary.LittleEndian
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		x, y := le.Uint64(a[i:]), le.Uint64(b[i:])
		le.PutUint64(d[i:], ((x&^hi)+(y&^hi))^((x^y)&hi))
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

func prodK[T number](d, a, b []byte) {
	dd, aa, bb := as[T](d), as[T](a), as[T](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	i := 0
	for ; i+4 <= len(dd); i += 4 {
		d4, a4, b4 := dd[i:i+4:i+4], aa[i:i+4:i+4], bb[i:i+4:i+4]
		d4[0] = a4[0] * b4[0]
		d4[1] = a4[1] * b4[1]
		d4[2] = a4[2] * b4[2]
		d4[3] = a4[3] * b4[3]
	}
	for ; i < len(dd); i++ {
		dd[i] = aa[i] * bb[i]
	}
}

func maxIntK[T integer](d, a, b []byte) {
	dd, aa, bb := as[T](d), as[T](a), as[T](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		dd[i] = max(aa[i], bb[i])
	}
}

func minIntK[T integer](d, a, b []byte) {
	dd, aa, bb := as[T](d), as[T](a), as[T](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		dd[i] = min(aa[i], bb[i])
	}
}

// Float max/min: see the package comment. x != x tests for NaN; equal
// operands combine their bits so that max(-0, +0) = +0 and min = -0
// (equal non-zero operands have equal bits, so this changes nothing else).

func maxF32K(d, a, b []byte) {
	dd, aa, bb := as[float32](d), as[float32](a), as[float32](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		x, y := aa[i], bb[i]
		if y > x || x != x {
			x = y
		} else if x == y {
			x = math.Float32frombits(math.Float32bits(x) & math.Float32bits(y))
		}
		dd[i] = x
	}
}

func minF32K(d, a, b []byte) {
	dd, aa, bb := as[float32](d), as[float32](a), as[float32](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		x, y := aa[i], bb[i]
		if y < x || x != x {
			x = y
		} else if x == y {
			x = math.Float32frombits(math.Float32bits(x) | math.Float32bits(y))
		}
		dd[i] = x
	}
}

func maxF64K(d, a, b []byte) {
	dd, aa, bb := as[float64](d), as[float64](a), as[float64](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		x, y := aa[i], bb[i]
		if y > x || x != x {
			x = y
		} else if x == y {
			x = math.Float64frombits(math.Float64bits(x) & math.Float64bits(y))
		}
		dd[i] = x
	}
}

func minF64K(d, a, b []byte) {
	dd, aa, bb := as[float64](d), as[float64](a), as[float64](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		x, y := aa[i], bb[i]
		if y < x || x != x {
			x = y
		} else if x == y {
			x = math.Float64frombits(math.Float64bits(x) | math.Float64bits(y))
		}
		dd[i] = x
	}
}

// float16 and bfloat16: widen, combine in float32, round back. float16
// widens through a 256 KiB table (faster than computing it:
// docs/performance.md, "Figures that were in comments (issue 41)"), built
// on first use.

var (
	f16Once sync.Once
	f16Tab  *[1 << 16]float32
)

func f16Table() *[1 << 16]float32 {
	f16Once.Do(func() {
		t := new([1 << 16]float32)
		for i := range t {
			t[i] = F16ToF32(uint16(i))
		}
		f16Tab = t
	})
	return f16Tab
}

func sumF16K(d, a, b []byte) {
	tab := f16Table()
	dd, aa, bb := as[uint16](d), as[uint16](a), as[uint16](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		f := tab[aa[i]] + tab[bb[i]]
		h, ok := f32ToF16Normal(f)
		if !ok {
			h = f32ToF16Rare(math.Float32bits(f))
		}
		dd[i] = h
	}
}

func prodF16K(d, a, b []byte) {
	tab := f16Table()
	dd, aa, bb := as[uint16](d), as[uint16](a), as[uint16](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		f := tab[aa[i]] * tab[bb[i]]
		h, ok := f32ToF16Normal(f)
		if !ok {
			h = f32ToF16Rare(math.Float32bits(f))
		}
		dd[i] = h
	}
}

func sumBF16K(d, a, b []byte) {
	dd, aa, bb := as[uint16](d), as[uint16](a), as[uint16](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		dd[i] = F32ToBF16(BF16ToF32(aa[i]) + BF16ToF32(bb[i]))
	}
}

func prodBF16K(d, a, b []byte) {
	dd, aa, bb := as[uint16](d), as[uint16](a), as[uint16](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		dd[i] = F32ToBF16(BF16ToF32(aa[i]) * BF16ToF32(bb[i]))
	}
}

// Max and min of the narrow formats pick one operand's bits: no rounding,
// and an integer order key instead of two conversions. inf is the format's
// +Inf bit pattern (a magnitude above it is NaN).

func maxNarrow(d, a, b []byte, inf uint16) {
	dd, aa, bb := as[uint16](d), as[uint16](a), as[uint16](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		x, y := aa[i], bb[i]
		if x&0x7fff > inf || (y&0x7fff <= inf && key16(y) > key16(x)) {
			x = y
		}
		dd[i] = x
	}
}

func minNarrow(d, a, b []byte, inf uint16) {
	dd, aa, bb := as[uint16](d), as[uint16](a), as[uint16](b)
	aa, bb = aa[:len(dd)], bb[:len(dd)]
	for i := range dd {
		x, y := aa[i], bb[i]
		if x&0x7fff > inf || (y&0x7fff <= inf && key16(y) < key16(x)) {
			x = y
		}
		dd[i] = x
	}
}

func maxF16K(d, a, b []byte)  { maxNarrow(d, a, b, 0x7c00) }
func minF16K(d, a, b []byte)  { minNarrow(d, a, b, 0x7c00) }
func maxBF16K(d, a, b []byte) { maxNarrow(d, a, b, 0x7f80) }
func minBF16K(d, a, b []byte) { minNarrow(d, a, b, 0x7f80) }

// kernels is indexed by data type and op; Avg uses the Sum kernel. On
// CPUs with vector kernels (vector_amd64.go) they take the bulk of each
// reduction and scalarKernels the rest.
var kernels = scalarKernels

// vectorized says whether kernels use vector kernels.
var vectorized bool

// scalarKernels are the kernels in plain Go, for every CPU.
var scalarKernels = [sdk.NumDataTypes][sdk.NumRedOps]kernel{
	sdk.Int8:     {sum8K, prodK[int8], maxIntK[int8], minIntK[int8], sum8K},
	sdk.Uint8:    {sum8K, prodK[uint8], maxIntK[uint8], minIntK[uint8], sum8K},
	sdk.Int32:    {sumK[int32], prodK[int32], maxIntK[int32], minIntK[int32], sumK[int32]},
	sdk.Uint32:   {sumK[uint32], prodK[uint32], maxIntK[uint32], minIntK[uint32], sumK[uint32]},
	sdk.Int64:    {sumK[int64], prodK[int64], maxIntK[int64], minIntK[int64], sumK[int64]},
	sdk.Uint64:   {sumK[uint64], prodK[uint64], maxIntK[uint64], minIntK[uint64], sumK[uint64]},
	sdk.Float16:  {sumF16K, prodF16K, maxF16K, minF16K, sumF16K},
	sdk.Float32:  {sumK[float32], prodK[float32], maxF32K, minF32K, sumK[float32]},
	sdk.Float64:  {sumK[float64], prodK[float64], maxF64K, minF64K, sumK[float64]},
	sdk.Bfloat16: {sumBF16K, prodBF16K, maxBF16K, minBF16K, sumBF16K},
}

func check(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp) kernel {
	if !dt.Valid() || !op.Valid() {
		panic(fmt.Sprintf("reduce: invalid data type %v or op %v", dt, op))
	}
	if len(dst)%dt.Size() != 0 || len(a) < len(dst) || len(b) < len(dst) {
		panic(fmt.Sprintf("reduce: %v buffers of %d, %d, %d bytes: dst must be whole elements and the sources at least as long",
			dt, len(dst), len(a), len(b)))
	}
	return kernels[dt][op]
}

func checkScale(buf []byte, dt sdk.DataType, n int) {
	if !dt.Valid() || n < 1 || len(buf)%dt.Size() != 0 {
		panic(fmt.Sprintf("reduce: Scale of %d bytes of %v by %d", len(buf), dt, n))
	}
}

// Reduce sets dst = dst op src elementwise over len(dst) bytes. Avg reduces
// as Sum (finish with Scale). It panics on an invalid dt or op, on a dst
// length that is not a whole number of elements, or on a src shorter than
// dst: those are programming errors, which the callers validate first.
func Reduce(dst, src []byte, dt sdk.DataType, op sdk.RedOp) { Into(dst, dst, src, dt, op) }

// Into sets dst = a op b elementwise over len(dst) bytes. dst may be the
// same memory as a or as b (exactly, not shifted); a and b must be at least
// as long as dst. Panics as Reduce does.
func Into(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp) {
	k := check(dst, a, b, dt, op)
	size := dt.Size()
	if len(dst) == 0 {
		return
	}
	a, b = a[:len(dst)], b[:len(dst)]
	if size == 1 || (aligned(dst, size) && aligned(a, size) && aligned(b, size)) {
		k(dst, a, b)
		return
	}
	bounce(dst, func(off, end int, x, y []byte) {
		copy(x, a[off:end])
		copy(y, b[off:end])
		k(x, x, y)
	})
}

// Scale divides every element of buf by n (n >= 1), finishing an Avg:
// floats divide once (float16/bfloat16 in float32, then round), integers use
// Go's truncating division of the wrapped sum.
func Scale(buf []byte, dt sdk.DataType, n int) {
	checkScale(buf, dt, n)
	if n == 1 || len(buf) == 0 {
		return
	}
	size := dt.Size()
	if size == 1 || aligned(buf, size) {
		scale(buf, dt, n)
		return
	}
	bounce(buf, func(off, end int, x, _ []byte) {
		copy(x, buf[off:end])
		scale(x, dt, n)
	})
}

// scale is Scale on aligned memory: vector kernels divide the bulk where
// there are some (vector_amd64.go), scalarScale the rest.
func scale(buf []byte, dt sdk.DataType, n int) {
	scalarScale(buf[vectorScale(buf, dt, n):], dt, n)
}

func scalarScale(buf []byte, dt sdk.DataType, n int) {
	switch dt {
	case sdk.Int8:
		scaleS32(as[int8](buf), n)
	case sdk.Uint8:
		scaleU32(as[uint8](buf), n)
	case sdk.Int32:
		scaleS32(as[int32](buf), n)
	case sdk.Uint32:
		scaleU32(as[uint32](buf), n)
	case sdk.Int64:
		v, m := as[int64](buf), int64(n)
		for i := range v {
			v[i] /= m
		}
	case sdk.Uint64:
		v, m := as[uint64](buf), uint64(n)
		for i := range v {
			v[i] /= m
		}
	case sdk.Float16:
		v, m, tab := as[uint16](buf), float32(n), f16Table()
		for i := range v {
			v[i] = F32ToF16(tab[v[i]] / m)
		}
	case sdk.Bfloat16:
		v, m := as[uint16](buf), float32(n)
		for i := range v {
			v[i] = F32ToBF16(BF16ToF32(v[i]) / m)
		}
	case sdk.Float32:
		v, m := as[float32](buf), float32(n)
		for i := range v {
			v[i] /= m
		}
	case sdk.Float64:
		v, m := as[float64](buf), float64(n)
		for i := range v {
			v[i] /= m
		}
	}
}

// Narrow integers divide in 32 bits (cheaper than 64-bit division); n is a
// rank count, so it fits, and the quotient of a T by n >= 1 fits in T.
func scaleS32[T ~int8 | ~int32](v []T, n int) {
	if n > 1<<31-1 {
		clear(v) // |v| < 2^31 < n
		return
	}
	m := int32(n)
	for i := range v {
		v[i] = T(int32(v[i]) / m)
	}
}

func scaleU32[T ~uint8 | ~uint32](v []T, n int) {
	if uint64(n) > 1<<32-1 {
		clear(v)
		return
	}
	m := uint32(n)
	for i := range v {
		v[i] = T(uint32(v[i]) / m)
	}
}

func aligned(b []byte, size int) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0
}

// bounceBytes is the size of the aligned bounce buffers for misaligned
// input: a multiple of every element size.
const bounceBytes = 4096

type bounceBufs struct{ x, y [bounceBytes / 8]uint64 }

var bouncePool = sync.Pool{New: func() any { return new(bounceBufs) }}

// bounce runs fn over dst in bounceBytes pieces with two aligned scratch
// buffers x and y of the piece's length; fn leaves its result in x, which
// is copied to dst[off:end].
func bounce(dst []byte, fn func(off, end int, x, y []byte)) {
	bb := bouncePool.Get().(*bounceBufs)
	defer bouncePool.Put(bb)
	x := unsafe.Slice((*byte)(unsafe.Pointer(&bb.x[0])), bounceBytes)
	y := unsafe.Slice((*byte)(unsafe.Pointer(&bb.y[0])), bounceBytes)
	for off := 0; off < len(dst); off += bounceBytes {
		end := min(off+bounceBytes, len(dst))
		m := end - off
		fn(off, end, x[:m], y[:m])
		copy(dst[off:end], x[:m])
	}
}
