package env

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
)

// MaxBytes is the largest byte count ParseBytes accepts (1 PiB): no
// buffer or setting is larger, and the bound keeps every product of a
// size and a small factor inside int64.
const MaxBytes = int64(1) << 50

// MaxDuration is the longest deadline ParseDuration accepts (about 146
// years): "forever" in practice, and far enough from the int64 limit
// that adding it to a time stays valid.
const MaxDuration = time.Duration(1) << 62

// ParseBytes reads a byte count as nccl-tests, FlagCX's tests and every
// FLAGCX_* size variable write it: a number of bytes, optionally followed
// by K, M or G (1024-based, either case; a trailing B or iB is accepted
// too: 4K, 4KB, 4KiB). Fractions are allowed when the result is whole
// (1.5K = 1536, 1.5M). The result is from 0 to MaxBytes. The error says
// what is wrong ("unknown unit", "negative number", ...) and leaves the
// accepted form to the caller, which knows whether it is reading a flag
// or a variable.
func ParseBytes(s string) (int64, error) {
	num := strings.ToUpper(strings.TrimSpace(s))
	if num == "" {
		return 0, errors.New("empty")
	}
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
	tooLarge := fmt.Errorf("larger than the largest size (%s)", bytesize.Compact(MaxBytes))
	if num == "" {
		return 0, errors.New("no number")
	}
	// Whole numbers are read exactly; floats lose precision above 2^53.
	if v, err := strconv.ParseUint(num, 10, 64); err == nil {
		if v > uint64(MaxBytes)/uint64(unit) {
			return 0, tooLarge
		}
		return int64(v) * unit, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	switch {
	case err != nil && strings.ContainsAny(num, "0123456789"):
		return 0, errors.New("unknown unit")
	case err != nil:
		return 0, errors.New("not a number")
	case f < 0:
		return 0, errors.New("negative number")
	case math.IsInf(f, 0) || math.IsNaN(f) || f*float64(unit) > float64(MaxBytes):
		return 0, tooLarge
	}
	b := f * float64(unit)
	if b != math.Trunc(b) {
		return 0, errors.New("not a whole number of bytes")
	}
	return int64(b), nil
}

// ParseDuration reads a deadline: seconds ("30", "2.5") as FlagCX's
// variables give them, or a Go duration ("45s", "1m30s"). It must be
// positive and at most MaxDuration; the error says what is wrong.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		switch {
		case math.IsNaN(f):
			return 0, errors.New("not a number")
		case f <= 0:
			return 0, errors.New("not positive")
		case f > float64(MaxDuration)/float64(time.Second):
			return 0, errors.New("too long (at most 146 years)")
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, errors.New("neither seconds nor a Go duration")
	} else if d > MaxDuration {
		return 0, errors.New("too long (at most 146 years)")
	}
	if d <= 0 {
		return 0, errors.New("not positive")
	}
	return d, nil
}

// ParseBool reads a switch: 1, true, yes, on or 0, false, no, off, in any
// case; ok is false for anything else.
func ParseBool(s string) (v, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}
