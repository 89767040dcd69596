package netplugin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
	sdknet "github.com/flagcx/flagcx-go/sdk/netplugin"

	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Staging of a NetLink: each direction has netSlots registered slots of
// netSlotBytes, so a message travels as a pipeline of up to netSlots
// chunks in flight. The first chunk of a message starts with its length
// (8 bytes), so that the receiver reports a *LengthError with both sizes.
const (
	netSlots     = 4
	netSlotBytes = 512 << 10
	netHeader    = 8
	tagFirst     = 0 // the first chunk of a message
	tagMore      = 1 // the others
)

// NetLink is a Link over a network plugin (Transport "ib"): registered
// staging buffers, isend/irecv with tags, polled with test. Full duplex
// like the other Links: one Send and one Recv may run at once.
type NetLink struct {
	dev     *netDevice
	sc      *sdknet.SendComm
	rc      *sdknet.RecvComm
	sst     []byte // send staging (mmap'ed: Go never moves it)
	rst     []byte
	smr     *sdknet.MR
	rmr     *sdknet.MR
	ctl     *tcp.Conn // the pair's TCP connection: tells when the peer is gone
	remote  string
	timeout time.Duration

	mu     sync.RWMutex // plugin calls hold it shared; Close exclusively
	closed bool
	gone   atomic.Pointer[error] // the peer's process is gone
	broken atomic.Pointer[error] // a failed transfer left the link out of step
}

func newNetLink(ctl *tcp.Conn, sc *sdknet.SendComm, rc *sdknet.RecvComm, d *netDevice, cfg tcp.Config) (*NetLink, error) {
	l := &NetLink{dev: d, sc: sc, rc: rc, ctl: ctl, remote: ctl.RemoteAddr(), timeout: cfg.Timeout}
	var err error
	if l.sst, err = syscall.Mmap(-1, 0, netSlots*netSlotBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE); err != nil {
		return nil, fmt.Errorf("hostnet: staging for %s: %w", l.remote, err)
	}
	if l.rst, err = syscall.Mmap(-1, 0, netSlots*netSlotBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE); err != nil {
		syscall.Munmap(l.sst)
		return nil, fmt.Errorf("hostnet: staging for %s: %w", l.remote, err)
	}
	if l.smr, err = sc.RegMr(addrOf(l.sst), len(l.sst), sdknet.PtrHost); err == nil {
		l.rmr, err = rc.RegMr(addrOf(l.rst), len(l.rst), sdknet.PtrHost)
	}
	if err != nil {
		if l.smr != nil {
			l.smr.Dereg()
		}
		syscall.Munmap(l.sst)
		syscall.Munmap(l.rst)
		return nil, fmt.Errorf("hostnet: registering staging for %s: %w", l.remote, err)
	}
	go l.watch()
	return l, nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// watch blocks on the TCP connection, which carries nothing after the
// handshake: it ends when the peer's process is gone (or closed the link).
func (l *NetLink) watch() {
	err := l.ctl.AwaitClose()
	e := fmt.Errorf("hostnet: ib link to %s: %w by the peer (its process is gone or it closed the link: %v)", l.remote, wire.ErrClosed, err)
	l.gone.CompareAndSwap(nil, &e)
}

// Transport is "ib".
func (l *NetLink) Transport() string { return "ib" }

// RemoteAddr is the peer's TCP address (of the bootstrap connection).
func (l *NetLink) RemoteAddr() string { return l.remote }

func (l *NetLink) usable() error {
	if b := l.broken.Load(); b != nil {
		return fmt.Errorf("hostnet: ib link to %s: %w: unusable after an earlier error (%v)", l.remote, wire.ErrClosed, *b)
	}
	return nil
}

func (l *NetLink) fail(err error) error {
	l.broken.CompareAndSwap(nil, &err)
	return err
}

// call runs one plugin call unless the link is closed.
func (l *NetLink) call(f func() error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return fmt.Errorf("hostnet: ib link to %s: %w (closed by this side)", l.remote, wire.ErrClosed)
	}
	return f()
}

func (l *NetLink) plugErr(op string, err error) error {
	if errors.Is(err, wire.ErrClosed) {
		return err
	}
	if errors.Is(err, sdk.ErrRemoteError) {
		return fmt.Errorf("hostnet: ib %s %s: %w (%w)", op, l.remote, wire.ErrClosed, err)
	}
	return fmt.Errorf("hostnet: ib %s %s: %w", op, l.remote, err)
}

// wait polls q until it is done: a short spin, then sleeps growing to
// 50 us. It gives up after the link's timeout, or at once when the peer is
// gone.
func (l *NetLink) wait(op string, q sdknet.Request) (int, error) { return l.waitFor(op, q, true) }

// waitFor is wait, without the deadline unless deadline (RecvIdle's first
// chunk: nothing is late while no peer has sent anything).
func (l *NetLink) waitFor(op string, q sdknet.Request, deadline bool) (int, error) {
	start := time.Now()
	var goneAt time.Time
	for i := 0; ; i++ {
		var done bool
		var n int
		err := l.call(func() (err error) { done, n, err = q.Test(); return })
		if err != nil {
			return 0, l.fail(l.plugErr(op, err))
		}
		if done {
			return n, nil
		}
		if g := l.gone.Load(); g != nil {
			// A peer may leave right after it took this message: its
			// acknowledgement can reach our NIC after the watch saw its
			// connection end. The request completes (or the NIC's retry
			// timer fails it) soon; only a request still pending then fails.
			if goneAt.IsZero() {
				goneAt = time.Now()
			}
			if time.Since(goneAt) > netGoneGrace {
				return 0, l.fail(*g)
			}
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			// A nanosleep of the thread, not time.Sleep: the runtime's
			// timers wake a sleeper up to a millisecond late, which would
			// be every small message's latency.
			ts := syscall.NsecToTimespec(int64(min(time.Duration(i-63)*2*time.Microsecond, 50*time.Microsecond)))
			_ = syscall.Nanosleep(&ts, nil)
		}
		if deadline && l.timeout > 0 && i%256 == 0 && time.Since(start) > l.timeout {
			return 0, l.fail(fmt.Errorf("hostnet: ib %s %s: no progress for %v (is the peer alive and running the same sequence of operations? %s sets the limit): %w",
				op, l.remote, l.timeout, wire.EnvTimeout, wire.ErrTimeout))
		}
	}
}

// netGoneGrace is how long a request may still complete after the peer's
// connection ended (an acknowledgement in flight takes microseconds on a
// NIC, a few ms on the emulated fabric of a loaded machine).
const netGoneGrace = 200 * time.Millisecond

func (l *NetLink) slot(buf []byte, s int) []byte { return buf[s*netSlotBytes : (s+1)*netSlotBytes] }

// Send sends p as one message.
func (l *NetLink) Send(p []byte) error {
	if err := l.usable(); err != nil {
		return err
	}
	var reqs [netSlots]sdknet.Request
	var inflight [netSlots]bool
	off := 0
	for i := 0; ; i++ {
		s := i % netSlots
		if inflight[s] {
			if _, err := l.wait("send to", reqs[s]); err != nil {
				return err
			}
			inflight[s] = false
		}
		buf := l.slot(l.sst, s)
		size, tag := 0, tagMore
		if i == 0 {
			binary.LittleEndian.PutUint64(buf, uint64(len(p)))
			size = netHeader + copy(buf[netHeader:], p)
			off, tag = size-netHeader, tagFirst
		} else {
			size = copy(buf, p[off:])
			off += size
		}
		err := l.call(func() (err error) { reqs[s], err = l.sc.Isend(addrOf(buf), size, tag, l.smr); return })
		if err != nil {
			return l.fail(l.plugErr("send to", err))
		}
		inflight[s] = true
		if off >= len(p) {
			break
		}
	}
	for s := range inflight {
		if inflight[s] {
			if _, err := l.wait("send to", reqs[s]); err != nil {
				return err
			}
		}
	}
	return nil
}

// chunksFor is the number of chunks of an n-byte message.
func chunksFor(n int) int {
	if n <= netSlotBytes-netHeader {
		return 1
	}
	return 1 + (n-(netSlotBytes-netHeader)+netSlotBytes-1)/netSlotBytes
}

// Recv receives one message of exactly len(p) bytes into p; another length
// gives *LengthError with both lengths (and breaks the link).
func (l *NetLink) Recv(p []byte) error { return l.recv(p, false) }

// RecvIdle is Recv that waits for the message's first chunk without the
// deadline (hostnet.RecvIdle): the link of a passive peer is idle until a
// peer has work for it. The peer's death or Close still end the wait.
func (l *NetLink) RecvIdle(p []byte) error { return l.recv(p, true) }

func (l *NetLink) recv(p []byte, idle bool) error {
	if err := l.usable(); err != nil {
		return err
	}
	n := chunksFor(len(p))
	var reqs [netSlots]sdknet.Request
	post := func(i int) error {
		s, tag := i%netSlots, tagMore
		if i == 0 {
			tag = tagFirst
		}
		buf := l.slot(l.rst, s)
		err := l.call(func() (err error) { reqs[s], err = l.rc.Irecv(addrOf(buf), netSlotBytes, tag, l.rmr); return })
		if err != nil {
			return l.fail(l.plugErr("recv from", err))
		}
		return nil
	}
	for i := 0; i < min(n, netSlots); i++ {
		if err := post(i); err != nil {
			return err
		}
	}
	off := 0
	for i := 0; i < n; i++ {
		s := i % netSlots
		got, err := l.waitFor("recv from", reqs[s], !idle || i > 0)
		if err != nil {
			return err
		}
		buf, err := decodeChunk(l.slot(l.rst, s), got, i, n, off, len(p), l.remote)
		if err != nil {
			return l.fail(err)
		}
		off += copy(p[off:], buf)
		if i+netSlots < n {
			if err := post(i + netSlots); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close releases the comms, the registrations and the staging; a Send or
// Recv in progress returns an error wrapping ErrClosed.
func (l *NetLink) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.ctl.Close()
	errs := []error{l.smr.Dereg(), l.rmr.Dereg(), l.sc.Close(), l.rc.Close()}
	syscall.Munmap(l.sst)
	syscall.Munmap(l.rst)
	return errors.Join(errs...)
}

// Device names the plugin's device that carries the link (for the
// process's network summary, hostnet.NetworkSummary).
func (l *NetLink) Device() string { return l.dev.describe() }

// Describe says what carries the link, for the per-link INFO line
// (hostnet.DescribeLink): the device and the TCP connection that watches
// the peer.
func (l *NetLink) Describe() string {
	return fmt.Sprintf("ib on %s (peer watched over tcp via %s %s -> %s)", l.dev.describe(), tcp.IfaceOf(l.ctl.LocalAddr()), l.ctl.LocalAddr(), l.remote)
}

// The staging's geometry, for tests that cross its chunk boundaries
// (internal/hostnet/net_test.go): slots of SlotBytes, Slots of them in
// flight, the first chunk of a message starting with a ChunkHeader.
const (
	SlotBytes   = netSlotBytes
	Slots       = netSlots
	ChunkHeader = netHeader
)

// DeviceName is the plugin's name of the device that carries the link
// ("mlx5_0").
func (l *NetLink) DeviceName() string { return l.dev.props.Name }
