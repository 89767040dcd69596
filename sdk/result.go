package sdk

import (
	"errors"
	"fmt"
)

// Result is a result code, numbered as ncclResult_t / flagcxResult_t.
// Go code returns errors; Result exists for the C boundary, where every
// plugin entry returns one.
type Result int32

// The result codes, in NCCL's order.
const (
	Success Result = iota
	UnhandledDeviceError
	SystemError
	InternalError
	InvalidArgument
	InvalidUsage
	RemoteError
	InProgress
	UnhandledCCLError
	NotSupported
	NumResults
)

var resultNames = [NumResults]string{
	"success", "unhandled device error", "system error", "internal error",
	"invalid argument", "invalid usage", "remote error", "in progress",
	"unhandled CCL error", "not supported",
}

func (r Result) String() string {
	if r < 0 || r >= NumResults {
		return fmt.Sprintf("result(%d)", int32(r))
	}
	return resultNames[r]
}

// The sentinel error of each failing result code. Wrap them with %w and
// context; errors.Is and ResultOf recover the code.
var (
	ErrUnhandledDeviceError = &resultError{UnhandledDeviceError}
	ErrSystemError          = &resultError{SystemError}
	ErrInternalError        = &resultError{InternalError}
	ErrInvalidArgument      = &resultError{InvalidArgument}
	ErrInvalidUsage         = &resultError{InvalidUsage}
	ErrRemoteError          = &resultError{RemoteError}
	ErrInProgress           = &resultError{InProgress}
	ErrUnhandledCCLError    = &resultError{UnhandledCCLError}
	ErrNotSupported         = &resultError{NotSupported}
)

var sentinels = [NumResults]error{nil, ErrUnhandledDeviceError, ErrSystemError, ErrInternalError,
	ErrInvalidArgument, ErrInvalidUsage, ErrRemoteError, ErrInProgress, ErrUnhandledCCLError, ErrNotSupported}

type resultError struct{ code Result }

func (e *resultError) Error() string { return e.code.String() }

// Err is the sentinel error of r: nil for Success, ErrInternalError wrapped
// with the number for a code outside NCCL's range.
func (r Result) Err() error {
	if r == Success {
		return nil
	}
	if r < 0 || r >= NumResults {
		return fmt.Errorf("%w: unknown result code %d", ErrInternalError, int32(r))
	}
	return sentinels[r]
}

// ResultOf maps an error back to its result code: Success for nil, the code
// of the sentinel it wraps, or InternalError for an error that wraps none.
func ResultOf(err error) Result {
	if err == nil {
		return Success
	}
	var re *resultError
	if errors.As(err, &re) {
		return re.code
	}
	return InternalError
}
