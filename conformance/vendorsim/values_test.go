package vendorsim

import (
	"math"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
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
// (testkit.Move: distinct per (src,dst,j), and below 128 so it fits every
// type while src and dst are below 3: the gather tests run 2 and 3 ranks).
func a2aValue(src, dst, j int) float64 { return testkit.Move(src, dst, j) }

// encodeN encodes f(0..count-1) as data type dt (little endian, as on the
// machines the emulator runs on; testkit.Encode, which panics on a value
// that is not exact in dt).
func encodeN(dt, count int, f func(i int) float64) []byte {
	return testkit.Encode(sdk.DataType(dt), count, f)
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
