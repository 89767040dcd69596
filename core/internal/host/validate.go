package host

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// Argument checks. Every collective validates everything first, on every
// rank, and returns an error wrapping sdk.ErrInvalidArgument before any
// message is sent.

func argErr(name, format string, args ...any) error {
	return fmt.Errorf("host %s: %w: %s", name, sdk.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func checkType(name string, dt sdk.DataType) error {
	if !dt.Valid() {
		return argErr(name, "data type %d is not valid: use one of int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16 (0..9)", int32(dt))
	}
	return nil
}

func checkOp(name string, op sdk.RedOp) error {
	if !op.Valid() {
		return argErr(name, "reduction op %d is not valid: use sum, prod, max, min or avg (0..4)", int32(op))
	}
	return nil
}

// checkCount validates count elements of dt, times mult (a rank count for
// the buffers that hold one block per rank), and returns the bytes.
func checkCount(name, what string, count int, dt sdk.DataType, mult int) (int, error) {
	if err := checkType(name, dt); err != nil {
		return 0, err
	}
	if count < 0 {
		return 0, argErr(name, "%s %d is negative: pass a number of elements, 0 or more", what, count)
	}
	hi, lo := bits.Mul64(uint64(count), uint64(dt.Size()))
	hi2, lo2 := bits.Mul64(lo, uint64(mult))
	if hi != 0 || hi2 != 0 || lo2 > math.MaxInt {
		if mult > 1 {
			return 0, argErr(name, "%s %d of %v times %d ranks overflows the address space: use a smaller count", what, count, dt, mult)
		}
		return 0, argErr(name, "%s %d of %v overflows the address space: use a smaller count", what, count, dt)
	}
	return int(lo2), nil
}

// checkBuf checks that buf holds at least need bytes.
func checkBuf(name, which string, buf []byte, need int, count int, dt sdk.DataType, blocks int) error {
	if len(buf) >= need {
		return nil
	}
	what := fmt.Sprintf("%d elements of %v", count, dt)
	if blocks > 1 {
		what = fmt.Sprintf("%d ranks x %d elements of %v", blocks, count, dt)
	}
	return argErr(name, "%s buffer holds %d bytes but %s need %d: pass a buffer of at least %d bytes or a smaller count",
		which, len(buf), what, need, need)
}

func checkRoot(name string, root, n int) error {
	if root < 0 || root >= n {
		return argErr(name, "root %d is out of range for %d ranks: use a rank in 0..%d", root, n, n-1)
	}
	return nil
}

// checkPlace allows part to be exactly whole[off:] (NCCL's in-place layout)
// or disjoint from whole, and rejects any other overlap, which would make a
// collective read data it has already overwritten.
func checkPlace(name string, part, whole []byte, off int, inPlace string) error {
	if len(part) == 0 || len(whole) == 0 || !overlap(part, whole) {
		return nil
	}
	if off < len(whole) && same(part, whole[off:]) {
		return nil
	}
	return argErr(name, "send and recv buffers overlap without being in place: use disjoint buffers, or in place %s", inPlace)
}

// same reports whether a and b start at the same byte (in place). Empty
// slices are never the same: with nothing to move, it does not matter.
func same(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// overlap reports whether a and b share a byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
