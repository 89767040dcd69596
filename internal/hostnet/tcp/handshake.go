package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// The handshake. Every new connection starts with it; only a peer that
// proves it holds the communicator's Secret (without sending it) gets a
// Conn. All integers are little endian.
//
//  1. Acceptor -> dialer, challenge, 28 bytes:
//     [0:8] magic "FLAGCXHN", [8:10] protocol version (1), [10:12] zero,
//     [12:28] nonce A (16 random bytes, fresh per connection).
//  2. Dialer -> acceptor, answer, 64+n bytes:
//     [0:8] magic, [8:10] version, [10:12] zero, [12:16] n = len(hello)
//     (at most MaxHello), [16:32] nonce D (16 random bytes),
//     [32:64] HMAC-SHA256(secret, "flagcx-hostnet dial v1" || A || D || n || hello),
//     [64:64+n] hello (any bytes the caller wants the acceptor to see,
//     e.g. its rank and stream index).
//  3. Acceptor -> dialer, verdict, 33 bytes:
//     [0] status: 0 accepted, 1 refused (wrong secret), 2 refused (protocol
//     or version mismatch; [1:3] then holds the acceptor's version), 3 busy
//     (the acceptor dropped the connection before the answer came: it was
//     slower than the first-byte deadline, or the oldest of too many
//     unanswered connections; the dialer dials again);
//     [1:33] when accepted: HMAC-SHA256(secret, "flagcx-hostnet accept v1"
//     || A || D || answer MAC), so the dialer knows the acceptor holds the
//     secret too (mutual authentication, fresh on both sides thanks to A
//     and D).
//
// The acceptor compares MACs with hmac.Equal (constant time). Each step
// has its own deadline (Config.Timeout, or DefaultTimeout if that is not
// positive), so a silent or slow peer cannot hold a handshake forever; the
// first byte of the answer has a much shorter one (FirstByteTimeout), since
// a real dialer answers as soon as the challenge arrives, and a stranger
// that connects and says nothing should not hold a socket for long.
// After the verdict the connection carries frames (see conn.go). Frames are
// not encrypted nor authenticated: like NCCL, hostnet trusts the network
// once a peer has joined.
const (
	hsMagic       = "FLAGCXHN"
	hsVersion     = 1
	hsChallLen    = 28
	hsAnswerLen   = 64
	hsVerdictLen  = 33
	hsDialLabel   = "flagcx-hostnet dial v1"
	hsAcceptLabel = "flagcx-hostnet accept v1"

	verdictOK       = 0
	verdictBadAuth  = 1
	verdictProtocol = 2
	verdictBusy     = 3
)

// FirstByteTimeout bounds how long a Listener waits for the first byte of
// a dialer's answer after sending the challenge (or Config.Timeout when
// that is shorter). A flagcx dialer answers within one round trip; a
// connection that stays silent is a stranger, or a peer so slowed down that
// dialing again is its best chance anyway (it is told so: verdict "busy").
const FirstByteTimeout = 2 * time.Second

// errBusy: the listener asked the dialer to dial again.
var errBusy = errors.New("the listener dropped the connection before the answer arrived and asked to dial again")

// silentError: the peer sent nothing within the first-byte deadline.
type silentError struct{ after time.Duration }

func (e *silentError) Error() string {
	return fmt.Sprintf("sent nothing within %v of the challenge (not a flagcx peer, or far too slow)", e.after)
}

func (e *silentError) Is(target error) bool { return target == wire.ErrTimeout }

func firstByteTimeout(cfg Config) time.Duration {
	return min(FirstByteTimeout, hsTimeout(cfg))
}

func hsTimeout(cfg Config) time.Duration {
	if cfg.Timeout > 0 {
		return cfg.Timeout
	}
	return DefaultTimeout
}

func dialMAC(secret wire.Secret, a, d []byte, hello []byte) []byte {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte(hsDialLabel))
	m.Write(a)
	m.Write(d)
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(hello)))
	m.Write(n[:])
	m.Write(hello)
	return m.Sum(nil)
}

func acceptMAC(secret wire.Secret, a, d, answerMAC []byte) []byte {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte(hsAcceptLabel))
	m.Write(a)
	m.Write(d)
	m.Write(answerMAC)
	return m.Sum(nil)
}

// hsIO runs one handshake step under its own deadline.
func hsIO(nc net.Conn, timeout time.Duration, f func() error) error {
	_ = nc.SetDeadline(time.Now().Add(timeout))
	return f()
}

// pendingAccept is a handshake the acceptor has verified but not yet
// acknowledged.
type pendingAccept struct {
	hello  []byte
	answer []byte // the dialer's MAC
	a, d   []byte
}

// acceptHandshake runs steps 1 and 2 on the acceptor side. On a refusal it
// tries to tell the dialer why (status byte) before the caller closes.
// arm sets the deadline of the next step (the Listener's also honours an
// eviction: a dropped connection's reads fail at once).
func acceptHandshake(nc net.Conn, cfg Config, secret wire.Secret, arm func(time.Duration)) (*pendingAccept, error) {
	timeout := hsTimeout(cfg)
	step := func(d time.Duration, f func() error) error { arm(d); return f() }
	chall := make([]byte, hsChallLen)
	copy(chall, hsMagic)
	binary.LittleEndian.PutUint16(chall[8:], hsVersion)
	if _, err := rand.Read(chall[12:28]); err != nil {
		return nil, fmt.Errorf("drawing a nonce: %w", err)
	}
	if err := step(timeout, func() error { _, err := nc.Write(chall); return err }); err != nil {
		return nil, hsErr("sending the challenge", timeout, err)
	}
	ans := make([]byte, hsAnswerLen)
	first := firstByteTimeout(cfg)
	if err := step(first, func() error { _, err := io.ReadFull(nc, ans[:1]); return err }); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &silentError{after: first}
		}
		return nil, hsErr("waiting for the answer", timeout, err)
	}
	// The first 12 bytes alone, so garbage is refused without waiting for more.
	if err := step(timeout, func() error { _, err := io.ReadFull(nc, ans[1:12]); return err }); err != nil {
		return nil, hsErr("waiting for the answer", timeout, err)
	}
	v, err := hsHead(ans[:12])
	if err != nil {
		return nil, fmt.Errorf("not a flagcx hostnet peer (%w)", err)
	}
	if v != hsVersion {
		verdict := make([]byte, hsVerdictLen)
		verdict[0] = verdictProtocol
		binary.LittleEndian.PutUint16(verdict[1:], hsVersion)
		_ = step(timeout, func() error { _, err := nc.Write(verdict); return err })
		return nil, fmt.Errorf("peer speaks hostnet protocol version %d, this side %d (run the same flagcx version on every rank): %w", v, hsVersion, wire.ErrProtocol)
	}
	if err := step(timeout, func() error { _, err := io.ReadFull(nc, ans[12:]); return err }); err != nil {
		return nil, hsErr("waiting for the answer", timeout, err)
	}
	n, err := hsHelloLen(ans)
	if err != nil {
		return nil, err
	}
	hello := make([]byte, n)
	if err := step(timeout, func() error { _, err := io.ReadFull(nc, hello); return err }); err != nil {
		return nil, hsErr("waiting for the hello", timeout, err)
	}
	want := dialMAC(secret, chall[12:28], ans[16:32], hello)
	if !hmac.Equal(want, ans[32:64]) {
		verdict := make([]byte, hsVerdictLen)
		verdict[0] = verdictBadAuth
		_ = step(timeout, func() error { _, err := nc.Write(verdict); return err })
		return nil, fmt.Errorf("peer does not hold this communicator's secret (another job, or a stale unique id?): %w", wire.ErrAuth)
	}
	return &pendingAccept{hello: hello, answer: ans[32:64], a: chall[12:28], d: ans[16:32]}, nil
}

// sendBusy tells a dropped dialer to dial again. Best effort and brief: the
// connection's send buffer holds at most the challenge, so the write does
// not block unless the peer is gone.
func sendBusy(nc net.Conn) {
	verdict := make([]byte, hsVerdictLen)
	verdict[0] = verdictBusy
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write(verdict)
}

// acceptVerdict runs step 3 for a verified peer.
func acceptVerdict(nc net.Conn, cfg Config, secret wire.Secret, p *pendingAccept) error {
	timeout := hsTimeout(cfg)
	verdict := make([]byte, 1, hsVerdictLen)
	verdict[0] = verdictOK
	verdict = append(verdict, acceptMAC(secret, p.a, p.d, p.answer)...)
	if err := hsIO(nc, timeout, func() error { _, err := nc.Write(verdict); return err }); err != nil {
		return hsErr("sending the verdict", timeout, err)
	}
	return nil
}

// dialHandshake runs the dialer's side of all three steps.
func dialHandshake(nc net.Conn, addr string, cfg Config, secret wire.Secret, hello []byte) error {
	timeout := hsTimeout(cfg)
	wrap := func(err error) error { return fmt.Errorf("hostnet: dial %s: handshake: %w", addr, err) }
	chall := make([]byte, hsChallLen)
	if err := hsIO(nc, timeout, func() error { _, err := io.ReadFull(nc, chall); return err }); err != nil {
		return wrap(hsErr("waiting for the listener's challenge", timeout, err))
	}
	if v, err := hsHead(chall); err != nil {
		return wrap(fmt.Errorf("%s is not a flagcx hostnet listener (%w)", addr, err))
	} else if v != hsVersion {
		return wrap(fmt.Errorf("listener speaks hostnet protocol version %d, this side %d (run the same flagcx version on every rank): %w", v, hsVersion, wire.ErrProtocol))
	}
	ans := make([]byte, hsAnswerLen, hsAnswerLen+len(hello))
	copy(ans, hsMagic)
	binary.LittleEndian.PutUint16(ans[8:], hsVersion)
	binary.LittleEndian.PutUint32(ans[12:], uint32(len(hello)))
	if _, err := rand.Read(ans[16:32]); err != nil {
		return wrap(fmt.Errorf("drawing a nonce: %w", err))
	}
	mac := dialMAC(secret, chall[12:28], ans[16:32], hello)
	copy(ans[32:64], mac)
	ans = append(ans, hello...)
	if err := hsIO(nc, timeout, func() error { _, err := nc.Write(ans); return err }); err != nil {
		return wrap(hsErr("sending the answer", timeout, err))
	}
	verdict := make([]byte, hsVerdictLen)
	if err := hsIO(nc, timeout, func() error { _, err := io.ReadFull(nc, verdict); return err }); err != nil {
		// A refusing acceptor may close before we read the status byte.
		return wrap(hsErr("waiting for the listener's verdict", timeout, err))
	}
	if err := decodeVerdict(verdict, acceptMAC(secret, chall[12:28], ans[16:32], mac), addr); err != nil {
		return wrap(err)
	}
	return nil
}

// hsHead checks the first 12 bytes of a challenge or an answer (step 1 or
// 2) and returns the protocol version they announce.
func hsHead(b []byte) (uint16, error) {
	if len(b) < 12 || string(b[:8]) != hsMagic {
		return 0, fmt.Errorf("first bytes % x: %w", b[:min(len(b), 8)], wire.ErrProtocol)
	}
	return binary.LittleEndian.Uint16(b[8:10]), nil
}

// hsHelloLen is the hello length of a dialer's answer (step 2), at most
// MaxHello.
func hsHelloLen(ans []byte) (int, error) {
	if len(ans) != hsAnswerLen {
		return 0, fmt.Errorf("an answer of %d bytes (always %d): %w", len(ans), hsAnswerLen, wire.ErrProtocol)
	}
	n := binary.LittleEndian.Uint32(ans[12:16])
	if n > MaxHello {
		return 0, fmt.Errorf("peer announced a %d-byte hello, above the %d-byte limit: %w", n, MaxHello, wire.ErrProtocol)
	}
	return int(n), nil
}

// decodeVerdict reads the listener's verdict (step 3): nil when it
// accepted this dialer and proved the secret with wantMAC.
func decodeVerdict(verdict, wantMAC []byte, addr string) error {
	if len(verdict) != hsVerdictLen {
		return fmt.Errorf("a verdict of %d bytes from %s (always %d): %w", len(verdict), addr, hsVerdictLen, wire.ErrProtocol)
	}
	switch verdict[0] {
	case verdictOK:
	case verdictBadAuth:
		return fmt.Errorf("the listener refused this peer: it holds another secret (is every rank using the same unique id?): %w", wire.ErrAuth)
	case verdictBusy:
		return errBusy
	case verdictProtocol:
		return fmt.Errorf("the listener speaks hostnet protocol version %d, this side %d (run the same flagcx version on every rank): %w",
			binary.LittleEndian.Uint16(verdict[1:3]), hsVersion, wire.ErrProtocol)
	default:
		return fmt.Errorf("unknown verdict %d from the listener: %w", verdict[0], wire.ErrProtocol)
	}
	if !hmac.Equal(verdict[1:33], wantMAC) {
		return fmt.Errorf("the listener at %s could not prove the communicator's secret: %w", addr, wire.ErrAuth)
	}
	return nil
}

// hsErr names a failed handshake step and maps the socket error.
func hsErr(step string, timeout time.Duration, err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%s: nothing for %v: %w", step, timeout, wire.ErrTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("%s: %w (%w)", step, wire.ErrClosed, err)
	}
	return fmt.Errorf("%s: %w", step, err)
}
