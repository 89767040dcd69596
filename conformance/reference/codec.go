package reference

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/flagcx/flagcx-go/sdk"
)

// Elements are stored little-endian, as every platform flagcx-go runs on
// (amd64, arm64) stores them in memory.

// Encode writes the integer v as one element of type dt into dst (which must
// hold dt.Size() bytes). Integer types wrap as Go's conversions do; floating
// types round to nearest even, which is exact for the small integers this
// package generates.
func Encode(dt sdk.DataType, v int64, dst []byte) {
	switch dt {
	case sdk.Int8, sdk.Uint8:
		dst[0] = byte(v)
	case sdk.Int32, sdk.Uint32:
		binary.LittleEndian.PutUint32(dst, uint32(v))
	case sdk.Int64, sdk.Uint64:
		binary.LittleEndian.PutUint64(dst, uint64(v))
	default:
		EncodeFloat(dt, float64(v), dst)
	}
}

// EncodeFloat writes f as one element of type dt into dst. Integer types
// truncate toward zero (as a C cast does for in-range values).
func EncodeFloat(dt sdk.DataType, f float64, dst []byte) {
	switch dt {
	case sdk.Float16:
		binary.LittleEndian.PutUint16(dst, Float32ToFloat16(float32(f)))
	case sdk.Bfloat16:
		binary.LittleEndian.PutUint16(dst, Float32ToBfloat16(float32(f)))
	case sdk.Float32:
		binary.LittleEndian.PutUint32(dst, math.Float32bits(float32(f)))
	case sdk.Float64:
		binary.LittleEndian.PutUint64(dst, math.Float64bits(f))
	case sdk.Uint64:
		binary.LittleEndian.PutUint64(dst, uint64(f))
	default:
		Encode(dt, int64(f), dst)
	}
}

// Decode reads one element of type dt from src as a float64 (exact for every
// value of the 8-, 16- and 32-bit types and for the values this package
// generates; 64-bit integers beyond 2^53 round).
func Decode(dt sdk.DataType, src []byte) float64 {
	switch dt {
	case sdk.Int8:
		return float64(int8(src[0]))
	case sdk.Uint8:
		return float64(src[0])
	case sdk.Int32:
		return float64(int32(binary.LittleEndian.Uint32(src)))
	case sdk.Uint32:
		return float64(binary.LittleEndian.Uint32(src))
	case sdk.Int64:
		return float64(int64(binary.LittleEndian.Uint64(src)))
	case sdk.Uint64:
		return float64(binary.LittleEndian.Uint64(src))
	case sdk.Float16:
		return float64(Float16ToFloat32(binary.LittleEndian.Uint16(src)))
	case sdk.Bfloat16:
		return float64(Bfloat16ToFloat32(binary.LittleEndian.Uint16(src)))
	case sdk.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(src)))
	case sdk.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(src))
	}
	return math.NaN()
}

// DecodeInt reads one element of type dt from src as an int64: exact for
// every integer type (uint64 above MaxInt64 wraps), truncated toward zero for
// floating types.
func DecodeInt(dt sdk.DataType, src []byte) int64 {
	switch dt {
	case sdk.Int64, sdk.Uint64:
		return int64(binary.LittleEndian.Uint64(src))
	}
	return int64(Decode(dt, src))
}

// Format renders one element of type dt from src: integers in decimal,
// floating types as C's %f does (FlagCX's tests print buffers that way).
func Format(dt sdk.DataType, src []byte) string {
	switch dt {
	case sdk.Int64:
		return strconv.FormatInt(int64(binary.LittleEndian.Uint64(src)), 10)
	case sdk.Uint64:
		return strconv.FormatUint(binary.LittleEndian.Uint64(src), 10)
	}
	if dt.IsFloat() {
		return strconv.FormatFloat(Decode(dt, src), 'f', 6, 64)
	}
	return strconv.FormatInt(int64(Decode(dt, src)), 10)
}

// Float32ToFloat16 converts to IEEE 754 binary16, rounding to nearest even;
// overflow gives infinity, NaN stays NaN (quiet).
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or zero): value = m * 2^-24.
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - e)
		m := mant >> shift
		rem := mant & (1<<shift - 1)
		halfway := uint32(1) << (shift - 1)
		if rem > halfway || (rem == halfway && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is the correct rounding, up to infinity
	}
	return sign | uint16(h)
}

// Float16ToFloat32 converts an IEEE 754 binary16 value exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float32ToBfloat16 converts to bfloat16 (the top half of a float32),
// rounding to nearest even; NaN stays NaN (quiet).
func Float32ToBfloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Bfloat16ToFloat32 converts a bfloat16 value exactly.
func Bfloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
