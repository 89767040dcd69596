package bench

import (
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/base/env"
)

// Size is a byte count given as nccl-tests and FlagCX's tests read it: a
// number of bytes, optionally followed by K, M or G (1024-based, either
// case; a trailing B or iB is accepted too: 4K, 4KB, 4KiB). Fractions are
// allowed when the result is whole (1.5K = 1536).
type Size int64

// MaxSize is the largest size accepted (a buffer of it could not be
// allocated anyway).
const MaxSize = Size(env.MaxBytes)

// ParseSize reads a Size with env.ParseBytes, the parser of every byte
// size in flagcx (FLAGCX_NET_CHUNK_SIZE=1.5M reads as -b 1.5M does).
func ParseSize(s string) (Size, error) {
	n, err := env.ParseBytes(s)
	switch {
	case err != nil && strings.TrimSpace(s) == "":
		return 0, fmt.Errorf("empty size; give a byte count from 0 to %s, K, M or G for 1024-based units: 8, 64K, 32M, 1G", MaxSize)
	case err != nil:
		return 0, fmt.Errorf("invalid size %q: %w; give a byte count from 0 to %s, K, M or G for 1024-based units: 8, 64K, 32M, 1G", s, err, MaxSize)
	}
	return Size(n), nil
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
func (s Size) String() string { return bytesize.Compact(int64(s)) }

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
