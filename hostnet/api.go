// Package hostnet is the host network between ranks: TCP, and shared-memory
// links between ranks of one host (InfiniBand verbs later). It knows nothing
// of vendors or collectives: it moves framed, length-checked messages
// between authenticated peers.
//
// The contract the rest of flagcx relies on:
//
//	cfg, err := hostnet.ConfigFromEnv()                // FLAGCX_SOCKET_* and friends
//	l, err := hostnet.Listen(cfg, secret)              // on the interface FLAGCX_SOCKET_IFNAME picks
//	conn, hello, err := l.Accept()                     // only peers that prove the secret
//	conn, err := hostnet.Dial(addr, cfg, secret, hello)
//	err = conn.Send(p); err = conn.Recv(q)             // one frame each, lengths checked
//	link := hostnet.NewLink(conns, cfg)                // several sockets to one peer
//	err = link.Send(big); err = link.Recv(big)         // striped over the sockets
//	shm, err := hostnet.SetupShmLink(conn, creator, cfg, shmCfg) // same host: a shared-memory link, agreed over conn
//
// Every blocking call gives up after Config.Timeout without progress.
package hostnet

import (
	"errors"
	"fmt"
	"time"
)

// Secret is the shared key of one communicator; peers prove they hold it
// without sending it (HMAC challenge-response).
type Secret [16]byte

// Config tunes the transport. The zero value is not useful: start from
// DefaultConfig or ConfigFromEnv.
type Config struct {
	// IfName selects interfaces as FLAGCX_SOCKET_IFNAME does: a
	// comma-separated list of name prefixes ("eth,ib"), "^" before the list
	// to exclude ("^lo,docker", the default), "=" before it for exact names.
	IfName string
	// Family restricts addresses: 0 for either, 4 for IPv4, 6 for IPv6
	// (FLAGCX_SOCKET_FAMILY=AF_INET / AF_INET6).
	Family int
	// Streams is the number of sockets per peer link
	// (FLAGCX_SOCKET_NTHREADS x FLAGCX_NSOCKS_PERTHREAD).
	Streams int
	// StripeMin is the smallest message striped over all of a link's
	// sockets; smaller messages travel on one socket.
	StripeMin int
	// Timeout bounds every wait without progress (FLAGCX_TIMEOUT).
	Timeout time.Duration
}

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
)

// LengthError reports a frame whose length differs from what the receiver
// expected: the two ranks disagree on a count or data type.
type LengthError struct{ Got, Want int }

func (e *LengthError) Error() string {
	return fmt.Sprintf("peer sent %d bytes where %d were expected", e.Got, e.Want)
}
