// Package tcp is the host transport over TCP sockets: interface choice
// (FLAGCX_SOCKET_IFNAME), a listener that admits only peers proving the
// communicator's secret (HMAC handshake) and sheds idle strangers,
// framed and tagged connections with deadlines, and TCPLink, which stripes
// large messages over a pair's sockets. It knows nothing of the mesh
// (internal/hostnet) that picks it or of the other transports.
package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Frames. After the handshake a connection carries frames:
//
//	[0:4]   magic "FCX1"
//	[4:8]   the sender's tag (tag.go): 0, a caller's label, or a notice
//	[8:16]  length of this frame's payload, uint64 little endian
//	[16:24] length of the whole message this payload belongs to; equal to
//	        the frame length except for one piece of a message a Link
//	        striped over several sockets
//	[24:]   payload
//
// The total lets a receiver report a length mismatch with the lengths of
// the whole message even when it only sees one piece.
const (
	frameMagic  = "FCX1"
	frameHdrLen = 24
	// writeChunk is the most written by one Write call; the write deadline
	// moves forward between chunks, so a slow but steady peer never times out.
	writeChunk = 4 << 20
)

// BufferedSend is the largest message a Send hands to the kernel without
// waiting for the peer to read: far below the least a TCP connection
// buffers (the send buffer, 16 KiB at least by default, and the receive
// window, 64 KiB at least, of a receiver that has read what came before).
// Callers may send a message up to this size before they receive (so both
// sides of an exchange can) without deadlock.
const BufferedSend = 8 << 10

// sockBufBytes is the SO_SNDBUF/SO_RCVBUF asked for on every socket, best
// effort. On Linux an explicit size turns the kernel's buffer autotuning
// off and is silently capped at net.core.[rw]mem_max (208 KiB on a stock
// kernel), which would make large transfers slower, so a buffer is only set
// where that limit allows the full size; elsewhere autotuning stays on.
// On the 2-core development VM (rmem_max = wmem_max = 4 MiB) fixed 4 MiB
// buffers were on par with autotuning for one stream and somewhat faster
// with 4 streams (BenchmarkLinkLoopback).
const sockBufBytes = 4 << 20

var sockBufAllowed = sync.OnceValues(func() (rcv, snd bool) {
	allowed := func(path string) bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return !errors.Is(err, fs.ErrNotExist) || runtime.GOOS != "linux"
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n >= sockBufBytes
	}
	return allowed("/proc/sys/net/core/rmem_max"), allowed("/proc/sys/net/core/wmem_max")
})

// Conn is one authenticated TCP connection carrying length-checked frames.
//
// One goroutine may Send while another Recvs (full duplex), but two Sends,
// or two Recvs (RecvMsg counts as Recv), must not run at the same time on
// one Conn. Close may be called at any time from any goroutine; it unblocks
// a blocked Send or Recv with an error wrapping ErrClosed.
//
// Every Send and Recv fails with an error wrapping ErrTimeout when no byte
// moves for the configured Timeout (at least 15/16 of it: the deadline is
// pushed forward lazily to keep system calls off the hot path).
//
// After an error in the middle of a frame (or a length mismatch) the byte
// stream can no longer be trusted: the Conn is marked broken and later calls
// fail at once with an error wrapping ErrClosed that quotes the first error;
// close it and connect again. A Recv that timed out before any byte of the
// next frame arrived leaves the Conn usable.
type Conn struct {
	nc      sockConn
	timeout time.Duration
	remote  string
	local   string

	closed  atomic.Bool
	aborted atomic.Bool
	broken  atomic.Pointer[error]

	// Reader side, owned by the one goroutine in Recv. rbuf[rpos:rend]
	// holds bytes read ahead of the frame being read (see readFull);
	// spin is how long a read polls (readPolled), on nc's socket taken
	// out of the netpoller (sock.go); misses counts the polls in a row
	// that ran out, skip the reads since (a probe).
	spin         time.Duration
	misses, skip int
	rhdr         [frameHdrLen]byte
	rdSet        time.Time
	rbuf         []byte
	rpos, rend   int

	// Writer side, owned by the one goroutine in Send.
	whdr  [frameHdrLen]byte
	wvec  [2][]byte
	wbuf  net.Buffers
	wdSet time.Time

	// Tags (tag.go): wtag labels the frames sent, rtag is the label
	// expected of the frames received; wopen is set while a frame is
	// partly written (a notice may not go in between).
	wtag, rtag uint32
	wopen      atomic.Bool
}

func newConn(nc *net.TCPConn, timeout time.Duration) *Conn {
	_ = nc.SetNoDelay(true)
	rcv, snd := sockBufAllowed()
	if rcv {
		_ = nc.SetReadBuffer(sockBufBytes)
	}
	if snd {
		_ = nc.SetWriteBuffer(sockBufBytes)
	}
	_ = nc.SetDeadline(time.Time{})
	return &Conn{
		nc:      nc,
		timeout: timeout,
		remote:  nc.RemoteAddr().String(),
		local:   nc.LocalAddr().String(),
	}
}

// RemoteAddr is the peer's "ip:port" ("[ip6]:port").
func (c *Conn) RemoteAddr() string { return c.remote }

// LocalAddr is this side's "ip:port" ("[ip6]:port").
func (c *Conn) LocalAddr() string { return c.local }

// Close closes the socket; blocked and later calls fail with ErrClosed.
// Closing twice is harmless.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.nc.Close()
}

// Send writes p as one frame: header and payload in one writev (p is not
// copied).
func (c *Conn) Send(p []byte) error { return c.sendFrame(p, len(p)) }

// Recv reads one frame straight into p. The frame must be exactly len(p)
// bytes long; otherwise Recv returns *LengthError (without touching p) and
// the Conn is broken.
func (c *Conn) Recv(p []byte) error { return c.recvFrame(p, len(p)) }

// RecvMsg reads one frame of any length up to limit bytes into a new slice.
// A longer frame gives an error wrapping *LengthError (Want is the limit)
// and breaks the Conn.
func (c *Conn) RecvMsg(limit int) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("hostnet: RecvMsg from %s: negative limit %d", c.remote, limit)
	}
	if err := c.usable("recv from"); err != nil {
		return nil, err
	}
	n, total, err := c.readHeader()
	if err != nil {
		return nil, err
	}
	if n != total {
		return nil, c.fail(fmt.Errorf("hostnet: recv from %s: got one %d-byte piece of a %d-byte striped message on a plain connection: %w", c.remote, n, total, wire.ErrProtocol))
	}
	if n > limit {
		return nil, c.fail(fmt.Errorf("hostnet: recv from %s: peer sent a %d-byte message, above the limit of %d bytes: %w", c.remote, n, limit, &wire.LengthError{Got: n, Want: limit}))
	}
	buf := make([]byte, n)
	if err := c.readPayload(buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func (c *Conn) sendFrame(p []byte, total int) error {
	if err := c.usable("send to"); err != nil {
		return err
	}
	c.wopen.Store(true)
	c.putHeader(len(p), total)
	first := p[:min(len(p), writeChunk)]
	if err := c.pushWriteDeadline(); err != nil {
		return c.fail(c.ioErr("send to", err))
	}
	c.wvec[0], c.wvec[1] = c.whdr[:], first
	var err error
	if s, ok := c.nc.(*sock); ok {
		_, err = s.writev(c.wvec[:])
	} else {
		c.wbuf = c.wvec[:]
		_, err = c.wbuf.WriteTo(c.nc)
		c.wbuf = nil
	}
	c.wvec[1] = nil
	if err != nil {
		return c.fail(c.ioErr("send to", err))
	}
	for off := len(first); off < len(p); {
		end := min(off+writeChunk, len(p))
		if err := c.pushWriteDeadline(); err != nil {
			return c.fail(c.ioErr("send to", err))
		}
		n, err := c.nc.Write(p[off:end])
		off += n
		if err != nil {
			return c.fail(c.ioErr("send to", err))
		}
	}
	c.wopen.Store(false)
	return nil
}

func (c *Conn) recvFrame(p []byte, total int) error {
	if err := c.usable("recv from"); err != nil {
		return err
	}
	n, got, err := c.readHeader()
	if err != nil {
		return err
	}
	if err := c.checkTag(n); err != nil {
		return err
	}
	if got != total {
		le := &wire.LengthError{Got: got, Want: total}
		c.fail(le)
		return le
	}
	if n != len(p) {
		return c.fail(fmt.Errorf("hostnet: recv from %s: peer cut a %d-byte message into a %d-byte piece where this side expects %d bytes; both sides of a link need the same Streams (%s x %s) and StripeMin (%s): %w",
			c.remote, total, n, len(p), EnvSocketNThreads, EnvNSocksPerThread, EnvNetStripeMin, wire.ErrProtocol))
	}
	return c.readPayload(p)
}

// putHeader fills the header of the next frame sent: n payload bytes of a
// message of total bytes, labelled with the send tag.
func (c *Conn) putHeader(n, total int) {
	copy(c.whdr[0:4], frameMagic)
	binary.LittleEndian.PutUint32(c.whdr[4:8], c.wtag)
	binary.LittleEndian.PutUint64(c.whdr[8:16], uint64(n))
	binary.LittleEndian.PutUint64(c.whdr[16:24], uint64(total))
}

// readHeader reads and checks one frame header.
func (c *Conn) readHeader() (n, total int, err error) {
	if got, err := c.readFull(c.rhdr[:]); err != nil {
		if got == 0 && errors.Is(err, os.ErrDeadlineExceeded) && !c.aborted.Load() && !c.closed.Load() {
			return 0, 0, c.ioErr("recv from", err) // nothing consumed: still in sync
		}
		return 0, 0, c.fail(c.ioErr("recv from", err))
	}
	return c.parseHeader()
}

// parseHeader checks the frame header in rhdr and returns its lengths.
func (c *Conn) parseHeader() (n, total int, err error) {
	if string(c.rhdr[0:4]) != frameMagic {
		return 0, 0, c.fail(fmt.Errorf("hostnet: recv from %s: received bytes that are not a hostnet frame (header % x): %w", c.remote, c.rhdr[:8], wire.ErrProtocol))
	}
	n64 := binary.LittleEndian.Uint64(c.rhdr[8:16])
	t64 := binary.LittleEndian.Uint64(c.rhdr[16:24])
	if n64 > math.MaxInt || t64 > math.MaxInt || n64 > t64 {
		return 0, 0, c.fail(fmt.Errorf("hostnet: recv from %s: frame header with impossible lengths %d/%d: %w", c.remote, n64, t64, wire.ErrProtocol))
	}
	return int(n64), int(t64), nil
}

func (c *Conn) readPayload(p []byte) error {
	if _, err := c.readFull(p); err != nil {
		return c.fail(c.ioErr("recv from", err))
	}
	return nil
}

// readAhead is the read-ahead buffer of a Conn. A frame header and a
// small payload behind it then come in one read system call instead of
// two (a small message costs one recv, and a 24-byte read per frame was a
// fair part of the receive time in a profile of 2 ranks over loopback:
// docs/performance.md, "Figures that were in comments (issue 41)");
// payloads of
// at least half of it are read straight into the caller's buffer. It is
// small because what a header read pulls in of a large payload is copied
// once more (loopback TCP is bound by memory copies).
const readAhead = 16 << 10

// readFull fills p, from bytes read ahead first, pushing the read deadline
// forward as bytes arrive. It returns how many bytes of p it filled.
func (c *Conn) readFull(p []byte) (int, error) {
	off := copy(p, c.rbuf[c.rpos:c.rend])
	c.rpos += off
	for off < len(p) {
		if err := c.pushReadDeadline(); err != nil {
			return off, err
		}
		var n int
		var err error
		if rest := len(p) - off; rest >= readAhead/2 {
			if rest <= maxPolledRead {
				n, err = c.readPolled(p[off:])
			} else {
				n, err = c.nc.Read(p[off:])
			}
			off += n
		} else {
			if c.rbuf == nil {
				c.rbuf = make([]byte, readAhead)
			}
			n, err = c.readPolled(c.rbuf)
			c.rpos, c.rend = 0, n
			k := copy(p[off:], c.rbuf[:n])
			c.rpos += k
			off += k
		}
		if err != nil {
			if errors.Is(err, io.EOF) && off > 0 {
				err = io.ErrUnexpectedEOF
			}
			return off, err
		}
	}
	return off, nil
}

// SetSpin makes reads of up to maxPolledRead bytes poll the socket for d
// before they sleep (0: never poll); set it before the Conn carries
// messages. A polled Conn's socket leaves the Go runtime's netpoller for
// this package's own system calls (sock.go says why); where that fails,
// reads keep sleeping in the netpoller and nothing else changes.
func (c *Conn) SetSpin(d time.Duration) {
	if tc, ok := c.nc.(*net.TCPConn); ok && d > 0 {
		s, err := newSock(tc)
		if err != nil {
			return
		}
		c.nc = s
	}
	if _, ok := c.nc.(*sock); ok {
		c.spin = d
	}
}

// readPolled is nc.Read(b) that first polls the socket for c.spin when
// nothing is there yet. A read that sleeps costs a wake-up through the
// kernel and the scheduler on top of the network's own latency: on 2
// emulated hosts (2 cores) a ping-pong of 8 bytes took far longer sleeping
// than polling (docs/performance.md, "Small messages and the staged path
// over TCP"), and for a small collective the wait is about one network
// latency. After the poll the read sleeps as nc.Read does, under the same
// deadline. Polls that keep running out (the peer is busy elsewhere, or
// the cores are taken: a poll then holds a core the peer may need) stop
// polling but for one read in pollProbe, until a poll finds data again.
func (c *Conn) readPolled(b []byte) (int, error) {
	if c.spin <= 0 {
		return c.nc.Read(b)
	}
	if c.misses >= maxPollMisses {
		if c.skip++; c.skip < pollProbe {
			return c.nc.Read(b)
		}
		c.skip = 0
	}
	n, polled, err := c.nc.(*sock).readSpin(b, c.spin)
	if polled {
		c.misses = 0
	} else {
		c.misses++
	}
	return n, err
}

// A Conn stops polling after maxPollMisses polls in a row that ran out, and
// then polls once every pollProbe reads to see whether polling pays again.
// Reads of more than maxPolledRead bytes do not poll: a wake-up is small
// next to their transfer (on the 32-core H200 host, polling reads of up to
// 256 KiB gained a 256 KiB AllReduce nothing).
const (
	maxPollMisses = 3
	pollProbe     = 16
	maxPolledRead = 64 << 10
	// pollYieldAfter: a poll yields its core between reads once it has
	// waited this long. On 2 emulated hosts of 2 cores an 8-byte
	// AllReduce was faster yielding than without, whether the ranks
	// shared a core or not (docs/performance.md, "Figures that were in
	// comments (issue 41)"); on a 32-core host, where nothing waits for
	// the core, the first microseconds are polled without the system
	// call.
	pollYieldAfter = 5 * time.Microsecond
)

// errAborted is returned by the deadline helpers when another stream of a
// link aborted this Conn.
var errAborted = errors.New("aborted")

func (c *Conn) pushReadDeadline() error {
	if c.timeout <= 0 {
		return nil
	}
	now := time.Now()
	if now.Sub(c.rdSet) < c.timeout/16 {
		return nil
	}
	c.rdSet = now
	_ = c.nc.SetReadDeadline(now.Add(c.timeout))
	if c.aborted.Load() { // an abort may have raced with the push
		return errAborted
	}
	return nil
}

func (c *Conn) pushWriteDeadline() error {
	if c.timeout <= 0 {
		return nil
	}
	now := time.Now()
	if now.Sub(c.wdSet) < c.timeout/16 {
		return nil
	}
	c.wdSet = now
	_ = c.nc.SetWriteDeadline(now.Add(c.timeout))
	if c.aborted.Load() {
		return errAborted
	}
	return nil
}

// abort unblocks any Send or Recv in progress (they return ErrClosed) and
// breaks the Conn; a Link uses it when another of its streams failed.
func (c *Conn) abort(cause error) {
	// %v: the other stream's error is shown, not wrapped; this stream's
	// errors match ErrClosed alone (usable, ioErr), not that stream's
	// ErrTimeout.
	c.fail(fmt.Errorf("aborted because another stream of the link failed: %v", cause))
	c.aborted.Store(true)
	_ = c.nc.SetDeadline(time.Unix(1, 0))
	if s, ok := c.nc.(*sock); ok {
		s.wakeReaders() // its waits see the deadline only between slices
	}
}

// fail records the first error that made the stream unusable and returns err.
func (c *Conn) fail(err error) error {
	c.broken.CompareAndSwap(nil, &err)
	return err
}

func (c *Conn) usable(op string) error {
	if c.closed.Load() {
		return fmt.Errorf("hostnet: %s %s: %w (closed by this side)", op, c.remote, wire.ErrClosed)
	}
	if b := c.broken.Load(); b != nil {
		// %v: this call failed because the Conn is broken (ErrClosed); the
		// earlier error (a timeout, say) was that call's, not this one's.
		return fmt.Errorf("hostnet: %s %s: %w: unusable after an earlier error (%v); close it and connect again", op, c.remote, wire.ErrClosed, *b)
	}
	return nil
}

// ioErr maps a socket error to one wrapping ErrClosed or ErrTimeout (and
// the original error) with the operation and the peer's address.
func (c *Conn) ioErr(op string, err error) error {
	switch {
	case c.closed.Load():
		return fmt.Errorf("hostnet: %s %s: %w (closed by this side)", op, c.remote, wire.ErrClosed)
	case c.aborted.Load() || errors.Is(err, errAborted):
		cause := "aborted"
		if b := c.broken.Load(); b != nil {
			cause = (*b).Error()
		}
		return fmt.Errorf("hostnet: %s %s: %w (%s)", op, c.remote, wire.ErrClosed, cause)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("hostnet: %s %s: no progress for %v (is the peer alive and running the same sequence of operations? %s sets the limit): %w",
			op, c.remote, c.timeout, EnvTimeout, wire.ErrTimeout)
	case errors.Is(err, syscall.ETIMEDOUT):
		return fmt.Errorf("hostnet: %s %s: the network gave up on the peer (%w): %w", op, c.remote, err, wire.ErrTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return fmt.Errorf("hostnet: %s %s: %w by the peer (%w)", op, c.remote, wire.ErrClosed, err)
	}
	return fmt.Errorf("hostnet: %s %s: %w", op, c.remote, err)
}

// AwaitClose blocks without a deadline on a connection that carries
// nothing more (the net plugin's watch of its peer, internal/hostnet/netplugin/netlink.go)
// and returns when the peer's process is gone or it closed the connection,
// with the read's error.
func (c *Conn) AwaitClose() error {
	_ = c.nc.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := c.nc.Read(b[:])
	return err
}
