package hostnet

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Trusting peers. The handshake (tcp/handshake.go) only tells that a peer holds
// the communicator's secret, which every local user may know (a secret
// derived on loopback). So nothing a peer sends is used as a path, size,
// count, rank or offset before it is validated, and every message type has
// one function here (or beside its protocol) that turns the bytes into a
// checked value or an error naming the peer and what was wrong. The fuzz
// tests (peercheck_fuzz_test.go) hold each of them to "never panics".

// Bounds of what a peer announces (Peer).
const (
	// MaxRanks bounds the rank count a peer may announce: far above any
	// real job, low enough that tables sized by it stay small.
	MaxRanks = 1 << 20
	// maxPeerField bounds the host name, boot id, pid namespace and address.
	maxPeerField = 256
	// maxPeerWhy bounds the free text of a peer (why it has no shared memory).
	maxPeerWhy = 4096
)

// PeerName is how errors name a peer (wire.PeerName).
var PeerName = wire.PeerName

// CheckAddr says whether addr is "host:port" with a numeric port in
// 1..65535 and a host of printable text.
func CheckAddr(addr string) error {
	if !wire.Printable(addr, maxPeerField) {
		return fmt.Errorf("%s is not host:port (at most %d printable characters)", wire.QuoteIfOdd(addr, 64), maxPeerField)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q has no port in 1..65535", addr)
	}
	return nil
}

// Check validates what a peer announced about itself for a communicator
// of nranks: rank, address, pid and text fields in range, and a segment
// name that is one hostnet made for that pid (shm.SegName), so it can be used
// as a file name in the shm directory. Errors wrap ErrProtocol and name
// the peer.
// maxCores bounds a peer's announced core count.
const maxCores = 1 << 20

func (p Peer) Check(nranks int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("hostnet: peer %s announced %s: %w", PeerName(p.Rank, p.Addr), fmt.Sprintf(format, args...), ErrProtocol)
	}
	switch {
	case nranks < 1 || nranks > MaxRanks:
		return bad("a communicator of %d ranks (1..%d)", nranks, MaxRanks)
	case p.Rank < 0 || p.Rank >= nranks:
		return bad("a rank out of range 0..%d", nranks-1)
	case CheckAddr(p.Addr) != nil:
		return bad("a listener address that %v", CheckAddr(p.Addr))
	case p.Pid <= 0 || p.Pid > shm.MaxPid:
		return bad("pid %d (1..%d)", p.Pid, shm.MaxPid)
	case !wire.Printable(p.Host, maxPeerField), !wire.Printable(p.BootID, maxPeerField), !wire.Printable(p.PidNS, maxPeerField):
		return bad("a host name, boot id or pid namespace that is not text of at most %d bytes (%s, %s, %s)",
			maxPeerField, wire.QuoteIfOdd(p.Host, 64), wire.QuoteIfOdd(p.BootID, 64), wire.QuoteIfOdd(p.PidNS, 64))
	case p.Cores < 0 || p.Cores > maxCores:
		return bad("%d cores (0..%d)", p.Cores, maxCores)
	case !wire.FreeText(p.NoShm, maxPeerWhy):
		return bad("a reason for having no shared memory that is not text of at most %d bytes", maxPeerWhy)
	}
	if p.Shm == "" {
		return nil
	}
	_, _, pid, _, ok := shm.ParseSegName(p.Shm)
	if !ok {
		return bad("shm name %s, which is not a flagcx segment name (%s<boot>-<pidns>-<pid>-<token>, no separators)", wire.Quote(p.Shm, 96), shm.SegPrefix)
	}
	if pid != p.Pid {
		return bad("shm name %s, made by pid %d, but it says it is pid %d", p.Shm, pid, p.Pid)
	}
	return nil
}

// CheckPeers validates a whole peer table: one entry per rank, in rank
// order, each passing Peer.Check.
func CheckPeers(peers []Peer) error {
	n := len(peers)
	if n < 1 || n > MaxRanks {
		return fmt.Errorf("hostnet: a peer table of %d ranks (1..%d): %w", n, MaxRanks, ErrProtocol)
	}
	for r, p := range peers {
		if p.Rank != r {
			return fmt.Errorf("hostnet: entry %d of the peer table is %s: %w", r, PeerName(p.Rank, p.Addr), ErrProtocol)
		}
		if err := p.Check(n); err != nil {
			return err
		}
	}
	return nil
}

// ---- messages between connected ranks ---------------------------------------

// decodeMeshHello reads the hello of a TCP socket of the mesh (meshHello)
// that a higher rank dials to this one: a rank in rank+1..n-1 and a stream
// in 0..streams-1. from is the socket's remote address, for errors.
func decodeMeshHello(b []byte, from string, rank, n, streams int) (meshHello, error) {
	var h meshHello
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("hostnet: the mesh hello of the peer at %s is malformed: %w (%v)", wire.QuoteIfOdd(from, 64), ErrProtocol, err)
	}
	switch {
	case h.Rank <= rank || h.Rank >= n:
		return h, fmt.Errorf("hostnet: peer %s dialed rank %d, which only ranks %d..%d dial: %w", PeerName(h.Rank, from), rank, rank+1, n-1, ErrProtocol)
	case h.Stream < 0 || h.Stream >= streams:
		return h, fmt.Errorf("hostnet: peer %s opened stream %d of %d: %w", PeerName(h.Rank, from), h.Stream, streams, ErrProtocol)
	}
	return h, nil
}
