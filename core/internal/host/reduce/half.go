package reduce

import "math"

// IEEE 754 binary16 (float16) and bfloat16 conversions. Both narrow formats
// are computed in float32 and rounded back to nearest, ties to even.
//
// Rounding through float32 gives the correctly rounded result for +, * and
// /: float32 has 24 significand bits, at least 2p+2 for float16 (p = 11) and
// bfloat16 (p = 8), which makes the double rounding innocuous (Figueroa,
// "When is double rounding innocuous?", 1995). In bfloat16's subnormal
// range, which it shares with float32, float32's grid is still 2^16 times
// finer, and a product of two 8-bit significands cannot fall within half a
// float32 step of a bfloat16 rounding midpoint, so it stays correct there
// too (reduce_test.go checks random products and sums against a reference).

// F16ToF32 widens a float16 (as its bits) to float32. Every float16 value,
// subnormals included, is exact in float32; NaN payloads are kept.
func F16ToF32(h uint16) float32 {
	const magic = 113 << 23 // 2^-14 as float32 bits
	sign := uint32(h&0x8000) << 16
	o := uint32(h&0x7fff) << 13 // exponent and mantissa in place
	exp := o & (0x7c00 << 13)
	switch exp {
	case 0x7c00 << 13: // Inf or NaN: exponent 31 -> 255
		o += (255 - 31) << 23
	case 0: // zero or subnormal: renormalise through a float32 subtraction
		o += 1 << 23
		o = math.Float32bits(math.Float32frombits(o+(127-15)<<23) - math.Float32frombits(magic))
	default: // normal: rebias the exponent
		o += (127 - 15) << 23
	}
	return math.Float32frombits(o | sign)
}

// F32ToF16 rounds a float32 to the nearest float16, ties to even. Values
// from 65520 up (half way between 65504, the largest float16, and 2^16)
// become Inf; values at or below 2^-25 in magnitude become zero (2^-25
// itself is a tie that goes to the even zero). NaN stays NaN (quiet, sign
// and top payload bits kept).
func F32ToF16(f float32) uint16 {
	if h, ok := f32ToF16Normal(f); ok {
		return h
	}
	return f32ToF16Rare(math.Float32bits(f))
}

// f32ToF16Normal converts f in float16's normal range (2^-14 <= |f| < 2^16)
// and reports false elsewhere; it is small enough to inline into kernels.
func f32ToF16Normal(f float32) (uint16, bool) {
	u := math.Float32bits(f)
	a := u &^ 0x80000000
	if a-0x38800000 >= 0x47800000-0x38800000 {
		return 0, false
	}
	// Rebias the exponent and round the 13 dropped bits to nearest even; a
	// carry out of the mantissa bumps the exponent, up to Inf for values
	// from 65520.
	a += 0xfff + (a>>13)&1 - (127-15)<<23
	return uint16(u>>16)&0x8000 | uint16(a>>13), true
}

// f32ToF16Rare converts values outside float16's normal range: subnormals,
// zeros, overflow to Inf, Inf and NaN.
func f32ToF16Rare(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	u &^= 0x80000000
	if u >= 0x47800000 { // |f| >= 2^16, Inf or NaN
		if u > 0x7f800000 {
			return sign | 0x7e00 | uint16(u>>13)&0x3ff
		}
		return sign | 0x7c00
	}
	// |f| < 2^-14: float16 subnormal or zero. Adding 0.5 (exponent 126)
	// aligns the float16 subnormal grid (2^-24) with float32's last mantissa
	// bit, so the FPU's own round-to-nearest-even does the rounding.
	const denormMagic = ((127 - 15) + (23 - 10) + 1) << 23
	v := math.Float32bits(math.Float32frombits(u) + math.Float32frombits(denormMagic))
	return sign | uint16(v-denormMagic)
}

// BF16ToF32 widens a bfloat16 to float32 (exact: bfloat16 is the top half
// of a float32).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even.
// Overflow rounds to Inf; NaN stays NaN (quiet bit set, sign and top
// payload bits kept), never turns into Inf.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Order keys for the narrow formats: an unsigned comparison of key(a) and
// key(b) orders the values, with -0 below +0 (NaNs are handled apart).
func key16(h uint16) uint16 { return h ^ (uint16(int16(h)>>15) | 0x8000) }
