package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/nettest"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

var testSecret = wire.Secret{0: 0xf1, 1: 0xa6, 7: 0xcc, 15: 0x42}

func testConfig(timeout time.Duration) Config {
	cfg := DefaultConfig()
	cfg.Timeout = timeout
	return cfg
}

type refusal struct {
	remote string
	err    error
}

// newTestListener listens on addr and collects refusals instead of
// printing them.
func newTestListener(t testing.TB, addr string, cfg Config, secret wire.Secret) (*Listener, chan refusal) {
	t.Helper()
	l, err := ListenAddr(addr, cfg, secret)
	require.NoError(t, err)
	ch := make(chan refusal, 16)
	l.SetOnRefused(func(remote string, err error) {
		select {
		case ch <- refusal{remote, err}:
		default:
		}
	})
	t.Cleanup(func() { l.Close() })
	return l, ch
}

// connPair returns a dialed and an accepted end of one connection.
func connPair(t testing.TB, cfg Config) (dialer, acceptor *Conn) {
	t.Helper()
	l, _ := newTestListener(t, "127.0.0.1:0", cfg, testSecret)
	d, err := Dial(l.Addr(), cfg, testSecret, []byte("hi"))
	require.NoError(t, err)
	a, hello, err := l.Accept()
	require.NoError(t, err)
	require.Equal(t, "hi", string(hello))
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

// pairKinds are the two sockets a Conn runs on: in the Go runtime's
// netpoller, and out of it with reads that poll first (SetSpin, sock.go).
// The tests of a Conn's contract run on both.
var pairKinds = []struct {
	name string
	pair func(t testing.TB, cfg Config) (dialer, acceptor *Conn)
}{
	{"netpoller", connPair},
	{"polled", func(t testing.TB, cfg Config) (*Conn, *Conn) {
		d, a := connPair(t, cfg)
		d.SetSpin(100 * time.Microsecond)
		a.SetSpin(100 * time.Microsecond)
		require.IsType(t, &sock{}, d.nc)
		require.IsType(t, &sock{}, a.nc)
		return d, a
	}},
}

// forPairKinds runs test on a connection pair of each kind.
func forPairKinds(t *testing.T, cfg Config, test func(t *testing.T, d, a *Conn)) {
	for _, k := range pairKinds {
		t.Run(k.name, func(t *testing.T) {
			d, a := k.pair(t, cfg)
			test(t, d, a)
		})
	}
}

// freePort returns a loopback address nobody listens on (right now).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// fakePeer stands in for a listener that is not a flagcx one (an impostor,
// another protocol, one always busy) and returns its address. It serves the
// first n connections dialed to it (n < 0: all until the test ends) one at a
// time, in dial order, as a real listener's single accept loop would, and
// closes each once serve returns. Cleanup also closes the connection being
// served, so that a serve blocked reading a dialer that never hangs up
// cannot outlive the test; the wait is bounded all the same.
func fakePeer(t testing.TB, n int, serve func(i int, c net.Conn)) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		serving net.Conn
		ending  bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; n < 0 || i < n; i++ {
			c, err := ln.Accept()
			mu.Lock()
			if err != nil {
				if !ending {
					t.Errorf("fake peer: accept: %v", err)
				}
				mu.Unlock()
				return
			}
			if ending { // accepted just before cleanup closed the listener
				mu.Unlock()
				c.Close()
				return
			}
			serving = c
			mu.Unlock()
			serve(i, c)
			c.Close()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		ending = true
		if serving != nil {
			serving.Close()
		}
		mu.Unlock()
		ln.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("fake peer: serve still running 5s after the test ended")
		}
	})
	return ln.Addr().String()
}

func TestHandshakeAndFrames(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	l, refused := newTestListener(t, "127.0.0.1:0", cfg, testSecret)
	require.True(t, strings.HasPrefix(l.Addr(), "127.0.0.1:"), l.Addr())

	hello := []byte("rank=3 stream=1")
	d, err := Dial(l.Addr(), cfg, testSecret, hello)
	require.NoError(t, err)
	defer d.Close()
	a, got, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, hello, got)
	require.Equal(t, d.LocalAddr(), a.RemoteAddr())
	require.Equal(t, a.LocalAddr(), d.RemoteAddr())

	for _, n := range []int{0, 1, 100, 70000} {
		msg := nettest.RandomBytes(uint64(n), n)
		require.NoError(t, d.Send(msg))
		buf := make([]byte, n)
		require.NoError(t, a.Recv(buf))
		require.Equal(t, msg, buf)
		require.NoError(t, a.Send(msg))
		m, err := d.RecvMsg(n)
		require.NoError(t, err)
		require.Equal(t, msg, m)
	}
	require.Empty(t, refused)
}

func TestHelloLimits(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	l, _ := newTestListener(t, "127.0.0.1:0", cfg, testSecret)
	big := nettest.RandomBytes(9, MaxHello)
	d, err := Dial(l.Addr(), cfg, testSecret, big)
	require.NoError(t, err)
	defer d.Close()
	a, got, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, big, got)

	_, err = Dial(l.Addr(), cfg, testSecret, make([]byte, MaxHello+1))
	require.Error(t, err)
	require.Contains(t, err.Error(), "limit")
}

func TestListenDefaultInterface(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	l, err := Listen(cfg, testSecret)
	require.NoError(t, err)
	defer l.Close()
	ip, _, err := LocalAddr(cfg)
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(l.Addr())
	require.NoError(t, err)
	require.Equal(t, ip.String(), host)

	d, err := Dial(l.Addr(), cfg, testSecret, nil)
	require.NoError(t, err)
	defer d.Close()
	a, hello, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Empty(t, hello)
}

func TestListenUnspecifiedGivesDialableAddr(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		l, _ := newTestListener(t, addr, cfg, testSecret)
		host, _, err := net.SplitHostPort(l.Addr())
		require.NoError(t, err)
		ip := net.ParseIP(host)
		require.NotNil(t, ip, l.Addr())
		require.False(t, ip.IsUnspecified(), l.Addr())
		d, err := Dial(l.Addr(), cfg, testSecret, []byte(addr))
		require.NoError(t, err)
		a, hello, err := l.Accept()
		require.NoError(t, err)
		require.Equal(t, addr, string(hello))
		d.Close()
		a.Close()
	}
}

func TestListenHostname(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	cfg.Family = 4
	l, _ := newTestListener(t, "localhost:0", cfg, testSecret)
	require.True(t, strings.HasPrefix(l.Addr(), "127."), l.Addr())
	_, port, err := net.SplitHostPort(l.Addr())
	require.NoError(t, err)
	d, err := Dial(net.JoinHostPort("localhost", port), cfg, testSecret, nil)
	require.NoError(t, err)
	defer d.Close()
	a, _, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
}

func TestIPv6Loopback(t *testing.T) {
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	probe.Close()
	cfg := testConfig(5 * time.Second)
	l, _ := newTestListener(t, "[::1]:0", cfg, testSecret)
	require.True(t, strings.HasPrefix(l.Addr(), "[::1]:"), l.Addr())
	d, err := Dial(l.Addr(), cfg, testSecret, []byte("v6"))
	require.NoError(t, err)
	defer d.Close()
	a, hello, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, "v6", string(hello))
	msg := nettest.RandomBytes(6, 1<<20)
	go func() { _ = d.Send(msg) }()
	buf := make([]byte, len(msg))
	require.NoError(t, a.Recv(buf))
	require.Equal(t, msg, buf)
}

func TestWrongSecretRefusedThenGoodPeerAccepted(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	l, refused := newTestListener(t, "127.0.0.1:0", cfg, testSecret)

	type res struct {
		c     *Conn
		hello []byte
		err   error
	}
	done := make(chan res, 1)
	go func() { c, h, err := l.Accept(); done <- res{c, h, err} }()

	other := testSecret
	other[3] ^= 1
	_, err := Dial(l.Addr(), cfg, other, []byte("intruder"))
	require.ErrorIs(t, err, wire.ErrAuth)
	require.Contains(t, err.Error(), l.Addr())
	r := <-refused
	require.ErrorIs(t, r.err, wire.ErrAuth)
	require.True(t, strings.HasPrefix(r.remote, "127.0.0.1:"), r.remote)
	select {
	case got := <-done:
		t.Fatalf("Accept returned for a refused peer: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}

	good, err := Dial(l.Addr(), cfg, testSecret, []byte("friend"))
	require.NoError(t, err)
	defer good.Close()
	got := <-done
	require.NoError(t, got.err)
	defer got.c.Close()
	require.Equal(t, "friend", string(got.hello))
	require.NoError(t, good.Send([]byte("ok")))
	buf := make([]byte, 2)
	require.NoError(t, got.c.Recv(buf))
	require.Equal(t, "ok", string(buf))
}

func TestBadPeersRefused(t *testing.T) {
	cfg := testConfig(300 * time.Millisecond)
	answer := func(version uint16, n uint32) []byte {
		b := make([]byte, hsAnswerLen)
		copy(b, hsMagic)
		binary.LittleEndian.PutUint16(b[8:], version)
		binary.LittleEndian.PutUint32(b[12:], n)
		return b
	}
	tests := []struct {
		name    string
		send    []byte // after reading the challenge
		wantErr error
		verdict int // status byte the raw peer should read; -1: none (closed)
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), wire.ErrProtocol, -1},
		{"wrong version", answer(hsVersion+1, 0)[:12], wire.ErrProtocol, verdictProtocol},
		{"hello too large", answer(hsVersion, MaxHello+1), wire.ErrProtocol, -1},
		{"forged MAC", answer(hsVersion, 0), wire.ErrAuth, verdictBadAuth},
		{"silent", nil, wire.ErrTimeout, verdictBusy},
		{"too slow", []byte(hsMagic), wire.ErrTimeout, -1},
	}
	l, refused := newTestListener(t, "127.0.0.1:0", cfg, testSecret)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Dial("tcp", l.Addr())
			require.NoError(t, err)
			defer raw.Close()
			_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
			chall := make([]byte, hsChallLen)
			_, err = io.ReadFull(raw, chall)
			require.NoError(t, err)
			require.Equal(t, hsMagic, string(chall[:8]))
			if tc.send != nil {
				_, err = raw.Write(tc.send)
				require.NoError(t, err)
			}
			select {
			case r := <-refused:
				require.ErrorIs(t, r.err, tc.wantErr)
				require.Equal(t, raw.LocalAddr().String(), r.remote)
			case <-time.After(3 * time.Second):
				t.Fatal("peer was not refused")
			}
			rest, _ := io.ReadAll(raw) // the listener closed it
			if tc.verdict >= 0 {
				require.Len(t, rest, hsVerdictLen)
				require.Equal(t, byte(tc.verdict), rest[0])
			} else {
				require.Empty(t, rest)
			}
		})
	}
	// The listener is still in business.
	d, err := Dial(l.Addr(), cfg, testSecret, []byte("after"))
	require.NoError(t, err)
	defer d.Close()
	a, hello, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, "after", string(hello))
}

// A dialer does not trust a listener that cannot prove the secret.
func TestImpostorListener(t *testing.T) {
	addr := fakePeer(t, 1, func(_ int, c net.Conn) {
		chall := make([]byte, hsChallLen)
		copy(chall, hsMagic)
		binary.LittleEndian.PutUint16(chall[8:], hsVersion)
		_, _ = c.Write(chall)
		ans := make([]byte, hsAnswerLen)
		_, _ = io.ReadFull(c, ans)
		_, _ = c.Write(make([]byte, hsVerdictLen)) // "accepted", with a zero MAC
		_, _ = io.Copy(io.Discard, c)
	})
	_, err := Dial(addr, testConfig(2*time.Second), testSecret, nil)
	require.ErrorIs(t, err, wire.ErrAuth)
	require.Contains(t, err.Error(), "could not prove")
}

func TestDialNotAListener(t *testing.T) {
	addr := fakePeer(t, 1, func(_ int, c net.Conn) {
		_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n.......\n"))
		time.Sleep(time.Second)
	})
	_, err := Dial(addr, testConfig(2*time.Second), testSecret, nil)
	require.ErrorIs(t, err, wire.ErrProtocol)
	require.Contains(t, err.Error(), addr)
}

func TestDialTimesOut(t *testing.T) {
	addr := freePort(t)
	start := time.Now()
	_, err := Dial(addr, testConfig(300*time.Millisecond), testSecret, nil)
	took := time.Since(start)
	require.ErrorIs(t, err, wire.ErrTimeout)
	require.Contains(t, err.Error(), addr)
	require.GreaterOrEqual(t, took, 250*time.Millisecond)
	require.Less(t, took, 2*time.Second)
}

func TestDialRetriesUntilListenerIsUp(t *testing.T) {
	addr := freePort(t)
	cfg := testConfig(5 * time.Second)
	type res struct {
		c   *Conn
		err error
	}
	done := make(chan res, 1)
	go func() { c, err := Dial(addr, cfg, testSecret, []byte("early")); done <- res{c, err} }()
	time.Sleep(150 * time.Millisecond)
	l, _ := newTestListener(t, addr, cfg, testSecret)
	a, hello, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, "early", string(hello))
	r := <-done
	require.NoError(t, r.err)
	r.c.Close()
}

func TestAcceptTimeoutAndClose(t *testing.T) {
	l, _ := newTestListener(t, "127.0.0.1:0", testConfig(200*time.Millisecond), testSecret)
	start := time.Now()
	_, _, err := l.Accept()
	require.ErrorIs(t, err, wire.ErrTimeout)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)

	l2, _ := newTestListener(t, "127.0.0.1:0", testConfig(time.Minute), testSecret)
	errc := make(chan error, 1)
	go func() { _, _, err := l2.Accept(); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, l2.Close())
	requireEndsClosed(t, errc, 2*time.Second, "Close did not unblock Accept")
	_, _, err = l2.Accept()
	require.ErrorIs(t, err, wire.ErrClosed)
	_, err = Dial(l2.Addr(), testConfig(200*time.Millisecond), testSecret, nil)
	require.ErrorIs(t, err, wire.ErrTimeout)
}

// Connections dialed one after another are accepted in that order.
func TestAcceptOrder(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	l, _ := newTestListener(t, "127.0.0.1:0", cfg, testSecret)
	const n = 16
	for i := 0; i < n; i++ {
		c, err := Dial(l.Addr(), cfg, testSecret, []byte{byte(i)})
		require.NoError(t, err)
		defer c.Close()
	}
	for i := 0; i < n; i++ {
		c, hello, err := l.Accept()
		require.NoError(t, err)
		defer c.Close()
		require.Equal(t, []byte{byte(i)}, hello)
	}
}

func TestRecvTimeoutWhenPeerSilent(t *testing.T) {
	forPairKinds(t, testConfig(300*time.Millisecond), func(t *testing.T, d, a *Conn) {
		start := time.Now()
		err := a.Recv(make([]byte, 8))
		took := time.Since(start)
		require.ErrorIs(t, err, wire.ErrTimeout)
		require.Contains(t, err.Error(), a.RemoteAddr())
		require.GreaterOrEqual(t, took, 250*time.Millisecond)
		require.Less(t, took, 2*time.Second)

		// Nothing was consumed, so the connection still works.
		require.NoError(t, d.Send([]byte("12345678")))
		buf := make([]byte, 8)
		require.NoError(t, a.Recv(buf))
		require.Equal(t, "12345678", string(buf))
	})
}

func TestSendTimeoutWhenPeerDoesNotRead(t *testing.T) {
	forPairKinds(t, testConfig(300*time.Millisecond), func(t *testing.T, d, _ *Conn) {
		start := time.Now()
		err := d.Send(make([]byte, 256<<20)) // far beyond the socket buffers
		require.ErrorIs(t, err, wire.ErrTimeout)
		require.Less(t, time.Since(start), 5*time.Second)
		require.ErrorIs(t, d.Send([]byte("x")), wire.ErrClosed) // broken now
	})
}

func TestPeerCloseGivesErrClosed(t *testing.T) {
	forPairKinds(t, testConfig(5*time.Second), func(t *testing.T, d, a *Conn) {
		require.NoError(t, d.Close())
		err := a.Recv(make([]byte, 4))
		require.ErrorIs(t, err, wire.ErrClosed)
		require.Contains(t, err.Error(), "by the peer")
		// The connection is finished in both directions.
		require.ErrorIs(t, a.Send([]byte("x")), wire.ErrClosed)
		// Our own closed side.
		require.ErrorIs(t, d.Send([]byte("x")), wire.ErrClosed)
		require.ErrorIs(t, d.Recv(make([]byte, 1)), wire.ErrClosed)
		require.NoError(t, d.Close()) // twice is fine
	})
}

func TestPeerClosesMidFrame(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	l, _ := newTestListener(t, "127.0.0.1:0", cfg, testSecret)
	d, err := Dial(l.Addr(), cfg, testSecret, nil)
	require.NoError(t, err)
	a, _, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	// Write a header announcing 1000 bytes, 10 of payload, then close.
	var hdr [frameHdrLen]byte
	copy(hdr[:], frameMagic)
	binary.LittleEndian.PutUint64(hdr[8:], 1000)
	binary.LittleEndian.PutUint64(hdr[16:], 1000)
	_, err = d.nc.Write(append(hdr[:], make([]byte, 10)...))
	require.NoError(t, err)
	d.Close()
	err = a.Recv(make([]byte, 1000))
	require.ErrorIs(t, err, wire.ErrClosed)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// TestCloseAndAbortUnblock: a Recv waiting for data and a Send waiting for
// the peer to read both return ErrClosed promptly when this side closes the
// Conn, or when its link aborts it (another stream failed).
func TestCloseAndAbortUnblock(t *testing.T) {
	tests := []struct {
		name  string
		send  bool // the blocked call: a Send the peer never reads, else a Recv
		abort bool // unblock by abort, else by Close
		says  string
	}{
		{"close a recv", false, false, "this side"},
		{"close a send", true, false, "this side"},
		{"abort a recv", false, true, "another stream"},
		{"abort a send", true, true, "another stream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forPairKinds(t, testConfig(time.Minute), func(t *testing.T, _, a *Conn) {
				errc := make(chan error, 1)
				go func() {
					if tc.send {
						errc <- a.Send(make([]byte, 64<<20)) // far beyond the socket buffers
					} else {
						errc <- a.Recv(make([]byte, 10))
					}
				}()
				time.Sleep(50 * time.Millisecond)
				start := time.Now()
				if tc.abort {
					a.abort(errors.New("stream 1 failed"))
				} else {
					require.NoError(t, a.Close())
				}
				select {
				case err := <-errc:
					require.ErrorIs(t, err, wire.ErrClosed)
					require.Contains(t, err.Error(), tc.says)
					require.Less(t, time.Since(start), time.Second)
				case <-time.After(2 * time.Second):
					t.Fatal("the call stayed blocked")
				}
			})
		})
	}
}

func TestLengthMismatch(t *testing.T) {
	tests := []struct {
		name      string
		sent, exp int
	}{
		{"longer than expected", 10, 8},
		{"shorter than expected", 4, 8},
		{"empty where data expected", 0, 8},
		{"data where empty expected", 3, 0},
		{"large", 5 << 20, 4 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, a := connPair(t, testConfig(5*time.Second))
			go func() { _ = d.Send(nettest.RandomBytes(1, tc.sent)) }()
			buf := bytes.Repeat([]byte{0xAA}, tc.exp+64)
			err := a.Recv(buf[:tc.exp])
			var le *wire.LengthError
			require.ErrorAs(t, err, &le)
			require.Equal(t, wire.LengthError{Got: tc.sent, Want: tc.exp}, *le)
			require.Equal(t, bytes.Repeat([]byte{0xAA}, tc.exp+64), buf, "Recv must not write into p on a mismatch")
			// The stream is out of step now: later calls fail fast.
			start := time.Now()
			err = a.Recv(make([]byte, tc.sent))
			require.ErrorIs(t, err, wire.ErrClosed)
			require.Contains(t, err.Error(), "where")
			require.ErrorIs(t, a.Send(nil), wire.ErrClosed)
			require.Less(t, time.Since(start), time.Second)
		})
	}
}

func TestRecvMsg(t *testing.T) {
	d, a := connPair(t, testConfig(5*time.Second))
	for _, n := range []int{0, 5, 1 << 20} {
		msg := nettest.RandomBytes(uint64(n), n)
		errc := make(chan error, 1)
		go func() { errc <- d.Send(msg) }()
		got, err := a.RecvMsg(1 << 20)
		require.NoError(t, err)
		require.Equal(t, msg, got)
		require.NoError(t, <-errc)
	}
	require.NoError(t, d.Send(make([]byte, 100)))
	_, err := a.RecvMsg(64)
	var le *wire.LengthError
	require.ErrorAs(t, err, &le)
	require.Equal(t, wire.LengthError{Got: 100, Want: 64}, *le)
	require.Contains(t, err.Error(), "limit")
	_, err = a.RecvMsg(1000)
	require.ErrorIs(t, err, wire.ErrClosed)
}

func TestGarbageFrame(t *testing.T) {
	d, a := connPair(t, testConfig(5*time.Second))
	_, err := d.nc.Write([]byte("this is not a frame header at all"))
	require.NoError(t, err)
	buf := make([]byte, 8)
	err = a.Recv(buf)
	require.ErrorIs(t, err, wire.ErrProtocol)
	require.Equal(t, make([]byte, 8), buf)
}

func TestConnLargeFullDuplex(t *testing.T) {
	forPairKinds(t, testConfig(10*time.Second), func(t *testing.T, d, a *Conn) {
		const n = 9<<20 + 7 // several write chunks
		m1, m2 := nettest.RandomBytes(1, n), nettest.RandomBytes(2, n)
		errc := make(chan error, 4)
		b1, b2 := make([]byte, n), make([]byte, n)
		go func() { errc <- d.Send(m1) }()
		go func() { errc <- a.Send(m2) }()
		go func() { errc <- a.Recv(b1) }()
		go func() { errc <- d.Recv(b2) }()
		for i := 0; i < 4; i++ {
			select {
			case err := <-errc:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("full-duplex exchange hung")
			}
		}
		require.True(t, bytes.Equal(m1, b1))
		require.True(t, bytes.Equal(m2, b2))
	})
}

// Frames sent back to back are read ahead together (readFull's buffer):
// each still arrives whole and in order, whether it fits the read-ahead
// buffer, straddles its end or is read straight into the caller's buffer.
func TestConnReadAheadKeepsFrames(t *testing.T) {
	d, a := connPair(t, testConfig(10*time.Second))
	sizes := []int{0, 1, 24, 100, readAhead/2 - 1, readAhead / 2, readAhead - frameHdrLen, readAhead + 7, 5, 3 << 20, 2}
	msgs := make([][]byte, len(sizes))
	for i, n := range sizes {
		msgs[i] = nettest.RandomBytes(uint64(500+i), n)
	}
	errc := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := d.Send(m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	time.Sleep(50 * time.Millisecond) // let the small frames queue up
	for i, m := range msgs {
		got := make([]byte, len(m))
		if i%3 == 2 {
			var err error
			got, err = a.RecvMsg(len(m))
			require.NoError(t, err, "frame %d", i)
		} else {
			require.NoError(t, a.Recv(got), "frame %d", i)
		}
		require.Equal(t, m, got, "frame %d of %d bytes", i, len(m))
	}
	require.NoError(t, <-errc)
}

// TestPolledReads: a Conn that polls (hostnet.pollSockets,
// internal/hostnet/rows.go) receives what comes during the poll and after
// it (asleep), gives up at its deadline with the stream still usable,
// stops polling after polls that ran out and polls again once one finds
// data, and reports a closed peer as ErrClosed.
func TestPolledReads(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration // before the peer sends; < 0: the peer closes instead
		spin  time.Duration
	}{
		{"ready before the read", 0, time.Millisecond},
		{"arrives during the poll", 200 * time.Microsecond, 50 * time.Millisecond},
		{"arrives after the poll", 20 * time.Millisecond, 100 * time.Microsecond},
		{"peer closes", -1, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, a := connPair(t, testConfig(2*time.Second))
			a.SetSpin(tc.spin)
			msg := nettest.RandomBytes(7, 100)
			go func() {
				time.Sleep(max(tc.delay, 0))
				if tc.delay < 0 {
					d.Close()
					return
				}
				_ = d.Send(msg)
			}()
			got := make([]byte, len(msg))
			err := a.Recv(got)
			if tc.delay < 0 {
				require.ErrorIs(t, err, wire.ErrClosed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, msg, got)
		})
	}

	t.Run("deadline, then polling stops and resumes", func(t *testing.T) {
		d, a := connPair(t, testConfig(300*time.Millisecond))
		a.SetSpin(time.Millisecond)
		require.ErrorIs(t, a.Recv(make([]byte, 8)), wire.ErrTimeout)
		for range maxPollMisses {
			sent := make(chan error, 1)
			go func() { time.Sleep(5 * time.Millisecond); sent <- d.Send([]byte("late....")) }()
			require.NoError(t, a.Recv(make([]byte, 8)))
			require.NoError(t, <-sent) // one Send at a time on d
		}
		require.GreaterOrEqual(t, a.misses, maxPollMisses, "polls that ran out are counted")
		for i := 0; a.misses >= maxPollMisses; i++ {
			require.Less(t, i, 2*pollProbe, "a probe polls again within %d reads", pollProbe)
			require.NoError(t, d.Send([]byte("ready...")))
			time.Sleep(time.Millisecond) // there before the read: the probe finds it
			require.NoError(t, a.Recv(make([]byte, 8)))
		}
		require.Zero(t, a.misses)
	})
}

// requireEndsClosed waits for the error of a call that a Close or an abort
// must end, and requires that it ends within d with wire.ErrClosed; else
// the test fails with stuck.
func requireEndsClosed(t *testing.T, errc <-chan error, d time.Duration, stuck string) {
	t.Helper()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, wire.ErrClosed)
	case <-time.After(d):
		t.Fatal(stuck)
	}
}
