// Package wire holds what every host transport (shm, tcp, netplugin) and
// the mesh above them share: the errors a caller tests for, the
// communicator's secret and the names of the variables they all read.
// It imports nothing of hostnet, so each transport can import it without
// importing another transport; hostnet re-exports every name (api.go).
package wire

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"

	"github.com/flagcx/flagcx-go/internal/base/env"
)

// Secret is the shared key of one communicator; peers prove they hold it
// without sending it (HMAC challenge-response).
type Secret [16]byte

// Errors a caller may test for with errors.Is / errors.As.
var (
	// ErrTimeout: the deadline passed with no progress from the peer.
	ErrTimeout = errors.New("timed out")
	// ErrClosed: the peer closed the connection or this side was closed
	// (by Close or an abort).
	ErrClosed = errors.New("connection closed")
	// ErrAuth: the peer could not prove the secret.
	ErrAuth = errors.New("peer failed authentication")
	// ErrMismatch: the ranks of a host disagree on the collective step
	// they are in (another operation, count, type or root).
	ErrMismatch = errors.New("ranks disagree on the operation")
	// ErrProtocol: the peer sent bytes that are not what the hostnet
	// protocol allows at that point (not a hostnet peer, another protocol
	// version, or a peer that cut its messages differently).
	ErrProtocol = errors.New("hostnet protocol error")
	// ErrConfig: a configuration value (usually an environment variable)
	// is malformed. The wrapping error names the variable, the value and
	// what is allowed.
	ErrConfig = errors.New("invalid hostnet configuration")
)

// EnvTimeout bounds every transport's wait without progress
// (FLAGCX_TIMEOUT, declared in internal/base/env); errors name it.
var EnvTimeout = env.Timeout.Name

// LengthError reports a frame whose length differs from what the receiver
// expected: the two ranks disagree on a count or data type.
type LengthError struct{ Got, Want int }

func (e *LengthError) Error() string {
	return fmt.Sprintf("peer sent %d bytes where %d were expected", e.Got, e.Want)
}

// MismatchError is a peer's label (a frame's tag, a step's label) that
// differs from this side's: the ranks are in different operations.
type MismatchError struct {
	Got, Want uint64
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: the peer labelled its data %#x where this side expects %#x (it is running another operation, or the same one with another count, data type, op or root)",
		ErrMismatch, e.Got, e.Want)
}

// Unwrap makes a MismatchError match ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// QuoteIfOdd is s when it is short printable text without spaces, else s
// cut to max bytes and quoted, so a peer cannot forge lines in our errors.
func QuoteIfOdd(s string, max int) string {
	plain := len(s) > 0 && len(s) <= max
	for _, r := range s {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return Quote(s, max)
}

// Quote is s cut to max bytes, quoted.
func Quote(s string, max int) string {
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// PeerFailure is a failure notice received instead of data: What is the
// text the failing peer sent (Notify).
type PeerFailure struct{ What string }

func (e *PeerFailure) Error() string { return "the peer reported a failure: " + e.What }

// PeerName is how errors name a peer: "rank 3 (10.0.0.7:5000)", with what
// the peer said quoted when it is not plain text.
func PeerName(rank int, addr string) string {
	return fmt.Sprintf("rank %d (%s)", rank, QuoteIfOdd(addr, 64))
}

// Printable: at most max bytes of valid printable UTF-8.
func Printable(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// FreeText: at most max bytes without control characters other than
// newlines and tabs (a peer's explanation, often an error's text).
func FreeText(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}
