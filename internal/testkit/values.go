package testkit

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/flagcx/flagcx-go/sdk"
)

// Exact expected values for collectives. Inputs are small integers, so
// every result is exact in every data type (float16 is exact to 2048,
// bfloat16 to 256) and is computed here in float64, without a second
// implementation of the reductions.

// Signed reports whether dt holds negative values.
func Signed(dt sdk.DataType) bool {
	switch dt {
	case sdk.Uint8, sdk.Uint32, sdk.Uint64:
		return false
	}
	return true
}

// Input is rank r's element i for a reduction with op over n ranks: 1..5,
// negated now and then for signed types, so that sums, products of 3
// ranks (|x| <= 125, int8 included), max and min are exact in every type.
// For avg they are base*n + d_r with the d_r summing to 0, so that the
// mean is an integer in every type.
func Input(dt sdk.DataType, op sdk.RedOp, r, n, i int) float64 {
	if op == sdk.Avg {
		d := 0
		if r < n-n%2 {
			d = 1 - 2*(r%2)
		}
		return float64((i%5+1)*n + d)
	}
	v := float64((i+2*r)%5 + 1)
	if Signed(dt) && (i+r)%3 == 0 {
		v = -v
	}
	return v
}

// Fold combines vals (ranks in order) with op; avg is the sum divided by
// the number of ranks.
func Fold(op sdk.RedOp, vals []float64) float64 {
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case sdk.Sum, sdk.Avg:
			acc += v
		case sdk.Prod:
			acc *= v
		case sdk.Max:
			acc = math.Max(acc, v)
		case sdk.Min:
			acc = math.Min(acc, v)
		}
	}
	if op == sdk.Avg {
		acc /= float64(len(vals))
	}
	return acc
}

// Reduced is element i of the reduction with op of Input over n ranks.
func Reduced(dt sdk.DataType, op sdk.RedOp, n, i int) float64 {
	vals := make([]float64, n)
	for r := range vals {
		vals[r] = Input(dt, op, r, n, i)
	}
	return Fold(op, vals)
}

// Move is what rank src sends to rank dst at element j of an alltoall,
// gather, scatter, broadcast or send: distinct per (src, dst, j) and below
// 128, so it fits every type while src and dst are below 3.
func Move(src, dst, j int) float64 { return float64(src*40 + dst*12 + j%12) }

// F16Bits encodes an exactly representable value as IEEE binary16; it
// panics on any other.
func F16Bits(v float64) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign = 0x8000
		v = -v
	}
	frac, exp := math.Frexp(v) // v = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1               // v = 1.m * 2^e
	if e < -14 || e > 15 {
		panic(fmt.Sprintf("F16Bits: %g out of the normal range", v))
	}
	m := (frac*2 - 1) * 1024
	if m != math.Trunc(m) {
		panic(fmt.Sprintf("F16Bits: %g is not exact in float16", v))
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}

// BF16Bits encodes an exactly representable value as bfloat16; it panics
// on any other.
func BF16Bits(v float64) uint16 {
	b := math.Float32bits(float32(v))
	if b&0xffff != 0 || float64(float32(v)) != v {
		panic(fmt.Sprintf("BF16Bits: %g is not exact in bfloat16", v))
	}
	return uint16(b >> 16)
}

// Append appends v as data type dt, little endian (as on the machines the
// emulators run on). Integers wrap like C's conversions of in-range values.
func Append(buf []byte, dt sdk.DataType, v float64) []byte {
	le := binary.LittleEndian
	switch dt {
	case sdk.Int8:
		return append(buf, byte(int8(v)))
	case sdk.Uint8:
		return append(buf, byte(uint8(v)))
	case sdk.Int32:
		return le.AppendUint32(buf, uint32(int32(v)))
	case sdk.Uint32:
		return le.AppendUint32(buf, uint32(v))
	case sdk.Int64:
		return le.AppendUint64(buf, uint64(int64(v)))
	case sdk.Uint64:
		return le.AppendUint64(buf, uint64(v))
	case sdk.Float16:
		return le.AppendUint16(buf, F16Bits(v))
	case sdk.Float32:
		return le.AppendUint32(buf, math.Float32bits(float32(v)))
	case sdk.Float64:
		return le.AppendUint64(buf, math.Float64bits(v))
	case sdk.Bfloat16:
		return le.AppendUint16(buf, BF16Bits(v))
	}
	panic(fmt.Sprintf("testkit.Append: data type %d", dt))
}

// Encode is f(0..count-1) as data type dt.
func Encode(dt sdk.DataType, count int, f func(i int) float64) []byte {
	out := make([]byte, 0, count*dt.Size())
	for i := range count {
		out = Append(out, dt, f(i))
	}
	return out
}
