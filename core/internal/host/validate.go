package host

import (
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// check validates a collective with sdk's one checker (sdk.Call.Check,
// CheckBuffer, CheckPlace) before any message is sent, on every rank, and
// returns the bytes of send and recv it uses on this rank. Its errors wrap
// sdk.ErrInvalidArgument and name the engine and the collective.
func (e *Engine) check(call sdk.Call, send, recv []byte) (sendN, recvN int, err error) {
	sendN, recvN, err = call.Check(e.rank, e.n)
	if err == nil {
		err = call.CheckBuffer("send", len(send), sendN, e.n)
	}
	if err == nil {
		err = call.CheckBuffer("recv", len(recv), recvN, e.n)
	}
	if err == nil {
		err = call.CheckPlace(e.rank, addr(send), sendN, addr(recv), recvN)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("host %s: %w", call.Coll.Title(), err)
	}
	return sendN, recvN, nil
}

// Check checks call on send and recv as the engine does before it runs
// it (check, and AlltoAllv's own rules), without running it: for callers
// that defer a call (core's groups) and report a bad one when it is made.
func (e *Engine) Check(call *sdk.Call, send, recv []byte) error {
	if _, _, err := e.check(*call, send, recv); err != nil {
		return err
	}
	if call.Coll == sdk.AlltoAllv {
		return e.checkVector(call)
	}
	return nil
}

func argErr(name, format string, args ...any) error {
	return fmt.Errorf("host %s: %w: %s", name, sdk.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// addr is b's first byte's address (0 for an empty slice).
func addr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

// same reports whether a and b start at the same byte (in place). Empty
// slices are never the same: with nothing to move, it does not matter.
func same(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// Overlap reports whether a and b share a byte (core checks grouped
// AllReduces with it before it fuses them).
func Overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := addr(a), addr(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
