package hostnet

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"unicode"

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

// PeerName is how errors name a peer: "rank 3 (10.0.0.7:5000)", with what
// the peer said quoted when it is not plain text.
func PeerName(rank int, addr string) string {
	return fmt.Sprintf("rank %d (%s)", rank, wire.QuoteIfOdd(addr, 64))
}

// printable: at most max bytes of valid printable UTF-8.
func printable(s string, max int) bool {
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

// freeText: at most max bytes without control characters other than
// newlines and tabs (a peer's explanation, often an error's text).
func freeText(s string, max int) bool {
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

// CheckAddr says whether addr is "host:port" with a numeric port in
// 1..65535 and a host of printable text.
func CheckAddr(addr string) error {
	if !printable(addr, maxPeerField) {
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
	case !printable(p.Host, maxPeerField), !printable(p.BootID, maxPeerField), !printable(p.PidNS, maxPeerField):
		return bad("a host name, boot id or pid namespace that is not text of at most %d bytes (%s, %s, %s)",
			maxPeerField, wire.QuoteIfOdd(p.Host, 64), wire.QuoteIfOdd(p.BootID, 64), wire.QuoteIfOdd(p.PidNS, 64))
	case p.Cores < 0 || p.Cores > maxCores:
		return bad("%d cores (0..%d)", p.Cores, maxCores)
	case !freeText(p.NoShm, maxPeerWhy):
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

// Bounds of a network offer's text (netOffer).
const maxOfferName = 128

// decodeNetOffer reads the network offer of rank peer (at addr).
func decodeNetOffer(b []byte, peer int, addr string) (netOffer, error) {
	var o netOffer
	bad := func(format string, args ...any) (netOffer, error) {
		return netOffer{}, fmt.Errorf("hostnet: %s's network offer %s: %w", PeerName(peer, addr), fmt.Sprintf(format, args...), ErrProtocol)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return bad("is malformed (%v)", err)
	}
	switch {
	case o.Want != "IB" && o.Want != "auto" && o.Want != "no":
		return bad("wants %s (IB, auto or no)", wire.QuoteIfOdd(o.Want, 16))
	case !freeText(o.Why, negotiationMax):
		return bad("gives a reason that is not text of at most %d bytes", negotiationMax)
	case !printable(o.Device, maxOfferName), !printable(o.Fabric, maxOfferName):
		return bad("names a device or fabric that is not text of at most %d bytes", maxOfferName)
	}
	return o, nil
}

// decodeNegotiation reads one negotiation message (sendSmall's framing: a
// 4-byte length, then negotiationMax bytes).
func decodeNegotiation(msg []byte) ([]byte, error) {
	if len(msg) != 4+negotiationMax {
		return nil, fmt.Errorf("hostnet: a %d-byte negotiation message (always %d): %w", len(msg), 4+negotiationMax, ErrProtocol)
	}
	n := int(getU32(msg))
	if n > negotiationMax {
		return nil, fmt.Errorf("hostnet: negotiation message says %d bytes (at most %d): %w", n, negotiationMax, ErrProtocol)
	}
	return msg[4 : 4+n], nil
}

// decodeChunk checks chunk i of n of a NetLink message of want bytes, of
// which off are in place: the plugin says got bytes of slot arrived. It
// returns the chunk's payload. A first chunk announcing another length is
// a *LengthError (the ranks disagree on a count); anything else that does
// not fit is a protocol error naming the peer at remote.
func decodeChunk(slot []byte, got, i, n, off, want int, remote string) ([]byte, error) {
	if got < 0 || got > len(slot) {
		return nil, fmt.Errorf("hostnet: ib recv from %s: chunk %d of %d bytes in a %d-byte slot: %w", remote, i, got, len(slot), ErrProtocol)
	}
	buf := slot[:got]
	if i == 0 {
		if got < netHeader {
			return nil, fmt.Errorf("hostnet: ib recv from %s: a %d-byte first chunk: %w", remote, got, ErrProtocol)
		}
		if total := binary.LittleEndian.Uint64(buf); total != uint64(want) {
			return nil, &LengthError{Got: int(min(total, uint64(math.MaxInt))), Want: want}
		}
		buf = buf[netHeader:]
	}
	if off < 0 || off > want || len(buf) > want-off || (i < n-1 && len(buf) == 0) {
		return nil, fmt.Errorf("hostnet: ib recv from %s: chunk %d of %d bytes does not fit the message: %w", remote, i, len(buf), ErrProtocol)
	}
	return buf, nil
}
