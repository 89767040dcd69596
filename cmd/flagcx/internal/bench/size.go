package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a byte count given as nccl-tests and FlagCX's tests read it: a
// number of bytes, optionally followed by K, M or G (1024-based, either
// case; a trailing B or iB is accepted too: 4K, 4KB, 4KiB). Fractions are
// allowed when the result is whole (1.5K = 1536).
type Size int64

// MaxSize is the largest size accepted (a buffer of it could not be
// allocated anyway).
const MaxSize = Size(1) << 50

// ParseSize reads a Size.
func ParseSize(s string) (Size, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty size; give a byte count from 0 to %s, K, M or G for 1024-based units: 8, 64K, 32M, 1G", MaxSize)
	}
	num := strings.ToUpper(in)
	num = strings.TrimSuffix(num, "IB")
	num = strings.TrimSuffix(num, "B")
	unit := int64(1)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K':
			unit = 1 << 10
		case 'M':
			unit = 1 << 20
		case 'G':
			unit = 1 << 30
		}
		if unit > 1 {
			num = num[:n-1]
		}
	}
	num = strings.TrimSpace(num)
	bad := func(why string) (Size, error) {
		return 0, fmt.Errorf("invalid size %q: %s; give a byte count from 0 to %s, K, M or G for 1024-based units: 8, 64K, 32M, 1G", s, why, MaxSize)
	}
	if num == "" {
		return bad("no number")
	}
	if v, err := strconv.ParseUint(num, 10, 64); err == nil {
		if v > uint64(MaxSize)/uint64(unit) {
			return bad(fmt.Sprintf("larger than the largest size (%s)", MaxSize))
		}
		return Size(int64(v) * unit), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	switch {
	case err != nil && strings.ContainsAny(num, "0123456789"):
		return bad("unknown unit")
	case err != nil:
		return bad("not a number")
	case f < 0:
		return bad("negative")
	case math.IsInf(f, 0) || math.IsNaN(f) || f*float64(unit) > float64(MaxSize):
		return bad(fmt.Sprintf("larger than the largest size (%s)", MaxSize))
	}
	b := f * float64(unit)
	if b != math.Trunc(b) {
		return bad("not a whole number of bytes")
	}
	return Size(b), nil
}

// UnmarshalText lets kong (and JSON) read sizes.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// String writes the size as ParseSize reads it, with the largest exact
// unit: 8, 64K, 32M, 1G, 1536.
func (s Size) String() string {
	switch {
	case s >= 1<<30 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s)>>30, 10) + "G"
	case s >= 1<<20 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s)>>20, 10) + "M"
	case s >= 1<<10 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s)>>10, 10) + "K"
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText writes String.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Sizes lists the sizes from min to max, each the previous times factor
// (after 0 comes 1), as nccl-tests steps them.
func Sizes(min, max Size, factor int) []Size {
	var out []Size
	for s := min; s <= max; {
		out = append(out, s)
		switch {
		case s == 0:
			s = 1
		case s > max/Size(factor):
			return out
		default:
			s *= Size(factor)
		}
	}
	return out
}

// human writes a size for people: 1.5 KiB, 32 MiB.
func human(b int64) string {
	switch {
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'g', 4, 64) + " GiB"
	case b >= 1<<20:
		return strconv.FormatFloat(float64(b)/(1<<20), 'g', 4, 64) + " MiB"
	case b >= 1<<10:
		return strconv.FormatFloat(float64(b)/(1<<10), 'g', 4, 64) + " KiB"
	}
	return strconv.FormatInt(b, 10) + " B"
}
