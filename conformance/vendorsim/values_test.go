package vendorsim

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Inputs are small integers, so every expected result is exact in every
// data type (float16 is exact to 2048, bfloat16 to 256) and is computed
// here analytically, in float64, without a second implementation of the
// reductions. Rounding is tested separately with hand-picked bit patterns.

const (
	dtInt8 = iota
	dtUint8
	dtInt32
	dtUint32
	dtInt64
	dtUint64
	dtFloat16
	dtFloat32
	dtFloat64
	dtBfloat16
	numDtypes
)

const (
	opSum = iota
	opProd
	opMax
	opMin
	opAvg
	numOps
)

var dtypeSize = [numDtypes]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2}
var dtypeName = [numDtypes]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"}
var opName = [numOps]string{"sum", "prod", "max", "min", "avg"}

func isFloat(dt int) bool {
	return dt == dtFloat16 || dt == dtFloat32 || dt == dtFloat64 || dt == dtBfloat16
}
func isSigned(dt int) bool {
	return isFloat(dt) || dt == dtInt8 || dt == dtInt32 || dt == dtInt64
}

// inputValue is rank r's element i for a reduction with op over n ranks.
// Values are 1..5, negated now and then for signed types. For a floating
// avg they are base*n + d_r with the d_r summing to 0, so that sum/n is an
// integer; integer avg uses the plain values and so tests truncation.
func inputValue(dt, op, r, n, i int) float64 {
	if op == opAvg && isFloat(dt) {
		d := 0
		if r < n-n%2 {
			d = 1 - 2*(r%2)
		}
		return float64((i%5+1)*n + d)
	}
	v := float64((i+2*r)%5 + 1)
	if isSigned(dt) && (i+r)%3 == 0 {
		v = -v
	}
	return v
}

// reduceExpect folds vals (ranks in order) with op, NCCL's way: avg is the
// sum divided by n once, truncated for integers.
func reduceExpect(dt, op int, vals []float64) float64 {
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case opSum, opAvg:
			acc += v
		case opProd:
			acc *= v
		case opMax:
			acc = math.Max(acc, v)
		case opMin:
			acc = math.Min(acc, v)
		}
	}
	if op == opAvg {
		acc /= float64(len(vals))
		if !isFloat(dt) {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

// a2aValue is what rank src sends to rank dst at element j of an alltoall
// (distinct per (src,dst,j), and below 128 so it fits every type as long as
// src and dst are below 3: the gather tests run 2 and 3 ranks).
func a2aValue(src, dst, j int) float64 { return float64(src*40 + dst*12 + j%12) }

// f16Bits encodes an exactly representable value as IEEE binary16.
func f16Bits(v float64) uint16 {
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
		panic(fmt.Sprintf("f16Bits: %g out of the normal range", v))
	}
	m := (frac*2 - 1) * 1024
	if m != math.Trunc(m) {
		panic(fmt.Sprintf("f16Bits: %g is not exact in float16", v))
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}

func bf16Bits(v float64) uint16 {
	b := math.Float32bits(float32(v))
	if b&0xffff != 0 || float64(float32(v)) != v {
		panic(fmt.Sprintf("bf16Bits: %g is not exact in bfloat16", v))
	}
	return uint16(b >> 16)
}

// encode appends v as data type dt (little endian, as on the machines the
// emulator runs on). Integers wrap like C's conversions of in-range values.
func encode(buf []byte, dt int, v float64) []byte {
	le := binary.LittleEndian
	switch dt {
	case dtInt8:
		return append(buf, byte(int8(v)))
	case dtUint8:
		return append(buf, byte(uint8(v)))
	case dtInt32:
		return le.AppendUint32(buf, uint32(int32(v)))
	case dtUint32:
		return le.AppendUint32(buf, uint32(v))
	case dtInt64:
		return le.AppendUint64(buf, uint64(int64(v)))
	case dtUint64:
		return le.AppendUint64(buf, uint64(v))
	case dtFloat16:
		return le.AppendUint16(buf, f16Bits(v))
	case dtFloat32:
		return le.AppendUint32(buf, math.Float32bits(float32(v)))
	case dtFloat64:
		return le.AppendUint64(buf, math.Float64bits(v))
	case dtBfloat16:
		return le.AppendUint16(buf, bf16Bits(v))
	}
	panic("bad dtype")
}

// encodeN encodes f(0..count-1).
func encodeN(dt, count int, f func(i int) float64) []byte {
	out := make([]byte, 0, count*dtypeSize[dt])
	for i := 0; i < count; i++ {
		out = encode(out, dt, f(i))
	}
	return out
}

// p2pPattern is byte j of the message from rank src to rank dst (tag tells
// several messages of one pair apart).
func p2pPattern(src, dst, tag, n int) []byte {
	out := make([]byte, n)
	for j := range out {
		out[j] = byte(src*31 + dst*7 + tag*101 + j*13 + j>>8)
	}
	return out
}
