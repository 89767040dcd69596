package reduce

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestVectorKernels: every vector kernel gives the scalar kernel's bits
// (any NaN for a NaN), on every length around its 64-byte blocks, at
// every misalignment, in place on either source, and, for the 16-bit
// formats, for every bit pattern of a against a spread of b's.
func TestVectorKernels(t *testing.T) {
	if !vectorized {
		t.Skip("this CPU has no AVX2 and F16C: the scalar kernels run alone")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for dt := range vectorKernels {
		dt := sdk.DataType(dt)
		for op, v := range vectorKernels[dt] {
			if v == nil {
				continue
			}
			op := sdk.RedOp(op)
			t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
				size := dt.Size()
				check := func(a, b []byte, msg string) {
					want := make([]byte, len(a))
					scalarKernels[dt][op](want, a, b)
					got := make([]byte, len(a))
					kernels[dt][op](got, a, b)
					requireSame(t, dt, want, got, msg)
					inA := append([]byte(nil), a...)
					kernels[dt][op](inA, inA, b)
					requireSame(t, dt, want, inA, msg+", in place on a")
					inB := append([]byte(nil), b...)
					kernels[dt][op](inB, a, inB)
					requireSame(t, dt, want, inB, msg+", in place on b")
				}
				for n := 0; n <= 3*vectorBlock/size+1; n++ {
					for off := 0; off < 3; off++ {
						// A misaligned start: the vector kernels take
						// any address (the scalar ones need alignment,
						// so they compare on copies).
						ab, bb := randomBuf(rng, dt, n+1), randomBuf(rng, dt, n+1)
						a, b := ab[off*size/2:][:n*size], bb[off*size/2:][:n*size]
						want := make([]byte, n*size)
						scalarKernels[dt][op](want, append([]byte(nil), a...), append([]byte(nil), b...))
						got := make([]byte, n*size+off)[off:]
						v := vectorKernels[dt][op]
						if blocks := len(got) &^ (vectorBlock - 1); blocks > 0 {
							v(&got[0], &a[0], &b[0], uintptr(blocks))
							requireSame(t, dt, want[:blocks], got[:blocks], fmt.Sprintf("%d elements at offset %d", n, off*size/2))
						}
						if off == 0 {
							check(a, b, fmt.Sprintf("%d elements", n))
						}
					}
				}
				check(randomBuf(rng, dt, 10007), randomBuf(rng, dt, 10007), "10007 random elements")
				if size != 2 {
					return
				}
				// Every a against b in steps of 251 and the specials.
				a := make([]byte, 1<<17)
				for i := range 1 << 16 {
					ne.PutUint16(a[2*i:], uint16(i))
				}
				bs := []uint16{0, 0x8000, 0x7c00, 0xfc00, 0x7f80, 0xff80, 0x7fc0, 0x7e00, 0x0001, 0x8001, 0x3c00, 0x3f80, 0x7bff, 0x7f7f}
				for x := 1; x < 1<<16; x += 251 {
					bs = append(bs, uint16(x))
				}
				b := make([]byte, 1<<17)
				for _, y := range bs {
					for i := range 1 << 16 {
						ne.PutUint16(b[2*i:], y)
					}
					check(a, b, fmt.Sprintf("every a, b %#04x", y))
				}
			})
		}
	}
}

// requireSame is requireSameElements for long buffers: it compares bits
// first and reports the first element that differs other than as two
// NaNs.
func requireSame(t *testing.T, dt sdk.DataType, want, got []byte, msg string) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	size := dt.Size()
	for o := 0; o < len(want); o += size {
		if bytes.Equal(want[o:o+size], got[o:o+size]) {
			continue
		}
		_, _, wf := get(want, dt, o/size)
		_, _, gf := get(got, dt, o/size)
		if !(dt.IsFloat() && math.IsNaN(wf) && math.IsNaN(gf)) {
			requireSameElements(t, dt, want[o:o+size], got[o:o+size], fmt.Sprintf("%s: element %d", msg, o/size))
		}
	}
}

// BenchmarkVectorKernels: scalar against vector on 64 KiB (in cache).
func BenchmarkVectorKernels(b *testing.B) {
	const bytes = 64 << 10
	for _, dt := range []sdk.DataType{sdk.Float32, sdk.Bfloat16, sdk.Float16, sdk.Int32} {
		for _, op := range []sdk.RedOp{sdk.Sum, sdk.Max} {
			for _, impl := range []struct {
				name string
				k    *[sdk.NumDataTypes][sdk.NumRedOps]kernel
			}{{"scalar", &scalarKernels}, {"kernels", &kernels}} {
				b.Run(fmt.Sprintf("%v/%v/%s", dt, op, impl.name), func(b *testing.B) {
					x, y := onesBuf(dt, bytes), onesBuf(dt, bytes)
					k := impl.k[dt][op]
					b.SetBytes(bytes)
					for b.Loop() {
						k(x, x, y)
					}
				})
			}
		}
	}
}

// TestVectorScale: Scale's vector division gives the scalar division's
// bits for every float type, n and length around the blocks, and for
// every bit pattern of the 16-bit formats.
func TestVectorScale(t *testing.T) {
	if !vectorized {
		t.Skip("this CPU has no AVX2 and F16C: the scalar kernels run alone")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []sdk.DataType{sdk.Float16, sdk.Bfloat16, sdk.Float32, sdk.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			check := func(buf []byte, n int, msg string) {
				want := append([]byte(nil), buf...)
				scalarScale(want, dt, n)
				got := append([]byte(nil), buf...)
				Scale(got, dt, n)
				requireSame(t, dt, want, got, msg)
			}
			for _, n := range []int{2, 3, 7, 8, 1000} {
				for count := 0; count <= 3*vectorBlock/dt.Size()+1; count++ {
					check(randomBuf(rng, dt, count), n, fmt.Sprintf("%d elements by %d", count, n))
				}
				if dt.Size() == 2 {
					all := make([]byte, 1<<17)
					for i := range 1 << 16 {
						ne.PutUint16(all[2*i:], uint16(i))
					}
					check(all, n, fmt.Sprintf("every bit pattern by %d", n))
				}
			}
		})
	}
}
