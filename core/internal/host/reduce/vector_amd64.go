package reduce

import (
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// The vector kernels (vector_amd64.s) take the whole 64-byte blocks of a
// reduction, the scalar kernels the rest. They compute exactly what the
// scalar kernels do, element by element (TestVectorKernels compares them
// bit for bit, NaNs as NaNs): IEEE float arithmetic rounds alike in a
// vector lane and in a scalar register, the narrow formats widen and round
// back by the same rules, and integer sums and products wrap alike.

//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xcr0() uint32

// A vector kernel: d = a op b over n bytes, n a positive multiple of 64.
type vectorKernel func(d, a, b *byte, n uintptr)

//go:noescape
func addF32(d, a, b *byte, n uintptr)

//go:noescape
func mulF32(d, a, b *byte, n uintptr)

//go:noescape
func addF64(d, a, b *byte, n uintptr)

//go:noescape
func mulF64(d, a, b *byte, n uintptr)

//go:noescape
func addI8(d, a, b *byte, n uintptr)

//go:noescape
func addI32(d, a, b *byte, n uintptr)

//go:noescape
func mulI32(d, a, b *byte, n uintptr)

//go:noescape
func addI64(d, a, b *byte, n uintptr)

//go:noescape
func maxS8(d, a, b *byte, n uintptr)

//go:noescape
func minS8(d, a, b *byte, n uintptr)

//go:noescape
func maxU8(d, a, b *byte, n uintptr)

//go:noescape
func minU8(d, a, b *byte, n uintptr)

//go:noescape
func maxS32(d, a, b *byte, n uintptr)

//go:noescape
func minS32(d, a, b *byte, n uintptr)

//go:noescape
func maxU32(d, a, b *byte, n uintptr)

//go:noescape
func minU32(d, a, b *byte, n uintptr)

//go:noescape
func maxF32(d, a, b *byte, n uintptr)

//go:noescape
func minF32(d, a, b *byte, n uintptr)

//go:noescape
func maxF64(d, a, b *byte, n uintptr)

//go:noescape
func minF64(d, a, b *byte, n uintptr)

//go:noescape
func addF16(d, a, b *byte, n uintptr)

//go:noescape
func mulF16(d, a, b *byte, n uintptr)

//go:noescape
func maxS64(d, a, b *byte, n uintptr)

//go:noescape
func minS64(d, a, b *byte, n uintptr)

//go:noescape
func maxU64(d, a, b *byte, n uintptr)

//go:noescape
func minU64(d, a, b *byte, n uintptr)

//go:noescape
func maxF16(d, a, b *byte, n uintptr)

//go:noescape
func minF16(d, a, b *byte, n uintptr)

//go:noescape
func maxBF16(d, a, b *byte, n uintptr)

//go:noescape
func minBF16(d, a, b *byte, n uintptr)

//go:noescape
func addBF16(d, a, b *byte, n uintptr)

//go:noescape
func mulBF16(d, a, b *byte, n uintptr)

//go:noescape
func divF32(d *byte, n uintptr, m float32)

//go:noescape
func divF64(d *byte, n uintptr, m float64)

//go:noescape
func divF16(d *byte, n uintptr, m float32)

//go:noescape
func divBF16(d *byte, n uintptr, m float32)

// vectorBlock is the unit of the vector kernels.
const vectorBlock = 64

// cpuVector reports whether the CPU and the OS run AVX2 and F16C: AVX2
// and F16C in CPUID, and the OS saving the vector registers (OSXSAVE,
// XCR0's SSE and AVX state).
func cpuVector() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx, f16c = 1 << 27, 1 << 28, 1 << 29
	if ecx1&(osxsave|avx|f16c) != osxsave|avx|f16c || xcr0()&6 != 6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx2 = 1 << 5
	return ebx7&avx2 != 0
}

// vectorKernels is indexed as kernels is; nil where no vector kernel
// exists (AVX2 multiplies neither 64-bit nor 8-bit integers).
var vectorKernels = [sdk.NumDataTypes][sdk.NumRedOps]vectorKernel{
	sdk.Int8:     {addI8, nil, maxS8, minS8, addI8},
	sdk.Uint8:    {addI8, nil, maxU8, minU8, addI8},
	sdk.Int32:    {addI32, mulI32, maxS32, minS32, addI32},
	sdk.Uint32:   {addI32, mulI32, maxU32, minU32, addI32},
	sdk.Int64:    {addI64, nil, maxS64, minS64, addI64},
	sdk.Uint64:   {addI64, nil, maxU64, minU64, addI64},
	sdk.Float16:  {addF16, mulF16, maxF16, minF16, addF16},
	sdk.Float32:  {addF32, mulF32, maxF32, minF32, addF32},
	sdk.Float64:  {addF64, mulF64, maxF64, minF64, addF64},
	sdk.Bfloat16: {addBF16, mulBF16, maxBF16, minBF16, addBF16},
}

// withVector is scalar with v taking the whole blocks.
func withVector(v vectorKernel, scalar kernel) kernel {
	return func(d, a, b []byte) {
		n := len(d) &^ (vectorBlock - 1)
		if n > 0 {
			v(unsafe.SliceData(d), unsafe.SliceData(a), unsafe.SliceData(b), uintptr(n))
		}
		if n < len(d) {
			scalar(d[n:], a[n:], b[n:])
		}
	}
}

// vectorScale divides the whole blocks of buf by n where a vector
// kernel can (the float types) and returns how many bytes it divided.
func vectorScale(buf []byte, dt sdk.DataType, n int) int {
	done := len(buf) &^ (vectorBlock - 1)
	if !vectorized || done == 0 {
		return 0
	}
	d := unsafe.SliceData(buf)
	switch dt {
	case sdk.Float32:
		divF32(d, uintptr(done), float32(n))
	case sdk.Float64:
		divF64(d, uintptr(done), float64(n))
	case sdk.Float16:
		divF16(d, uintptr(done), float32(n))
	case sdk.Bfloat16:
		divBF16(d, uintptr(done), float32(n))
	default:
		return 0
	}
	return done
}

func init() {
	if !cpuVector() {
		return
	}
	for dt := range kernels {
		for op, v := range vectorKernels[dt] {
			if v != nil {
				kernels[dt][op] = withVector(v, scalarKernels[dt][op])
			}
		}
	}
	vectorized = true
}
