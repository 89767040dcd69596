package tcp

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/nettest"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// linkPair connects two Links of the given number of streams over loopback.
func linkPair(t testing.TB, cfg Config, streams int) (dialer, acceptor *TCPLink) {
	t.Helper()
	return linkPair2(t, cfg, cfg, streams)
}

func linkPair2(t testing.TB, dcfg, acfg Config, streams int) (dialer, acceptor *TCPLink) {
	t.Helper()
	l, _ := newTestListener(t, "127.0.0.1:0", acfg, testSecret)
	var dc, ac []*Conn
	for i := 0; i < streams; i++ {
		c, err := Dial(l.Addr(), dcfg, testSecret, []byte{byte(i)})
		require.NoError(t, err)
		dc = append(dc, c)
	}
	for i := 0; i < streams; i++ {
		c, hello, err := l.Accept()
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, hello, "streams must pair up in dial order")
		ac = append(ac, c)
	}
	dialer, acceptor = NewTCPLink(dc, dcfg), NewTCPLink(ac, acfg)
	t.Cleanup(func() { dialer.Close(); acceptor.Close() })
	return dialer, acceptor
}

func TestLinkRoundTrip(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	sm := cfg.StripeMin
	sizes := []int{0, 1, sm - 1, sm, sm + 3, 10 << 20}
	// spin > 0: the streams' sockets out of the netpoller (sock.go), as a
	// mesh polls them (hostnet.pollSockets, internal/hostnet/rows.go).
	for _, spin := range []time.Duration{0, 100 * time.Microsecond} {
		for _, streams := range []int{1, 3, 4} {
			a, b := linkPair(t, cfg, streams)
			for _, c := range append(a.Conns(), b.Conns()...) {
				c.SetSpin(spin)
			}
			require.Equal(t, streams, a.Streams())
			for _, n := range sizes {
				t.Run(fmt.Sprintf("spin=%v/streams=%d/size=%d", spin, streams, n), func(t *testing.T) {
					msg := nettest.RandomBytes(uint64(n*streams+1), n)
					errc := make(chan error, 1)
					go func() { errc <- a.Send(msg) }()
					buf := make([]byte, n+16)
					for i := n; i < len(buf); i++ {
						buf[i] = 0x5A
					}
					require.NoError(t, b.Recv(buf[:n]))
					require.NoError(t, <-errc)
					require.True(t, bytes.Equal(msg, buf[:n]), "payload differs")
					require.Equal(t, bytes.Repeat([]byte{0x5A}, 16), buf[n:])
				})
			}
		}
	}
}

func TestLinkStripesLargeMessagesOnly(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	a, b := linkPair(t, cfg, 4)
	// A message below StripeMin travels whole on stream 0: read it there.
	small := nettest.RandomBytes(1, cfg.StripeMin-1)
	errc := make(chan error, 1)
	go func() { errc <- a.Send(small) }()
	got := make([]byte, len(small))
	require.NoError(t, b.conns[0].Recv(got))
	require.Equal(t, small, got)
	require.NoError(t, <-errc)
	// A large one is cut into nearly equal pieces, one per stream: 2 at
	// StripeMin, one more per StripeMin/2 bytes, at most one per stream.
	for _, tc := range []struct {
		n, pieces int
	}{
		{cfg.StripeMin + 3, 2},
		{cfg.StripeMin*3/2 + 1, 3},
		{cfg.StripeMin * 2, 4},
		{cfg.StripeMin*8 + 5, 4},
	} {
		n := tc.n
		big := nettest.RandomBytes(uint64(n), n)
		go func() { errc <- a.Send(big) }()
		off := 0
		for i, c := range b.conns[:tc.pieces] {
			size := n / tc.pieces
			if i < n%tc.pieces {
				size++
			}
			piece := make([]byte, size)
			require.NoError(t, c.recvFrame(piece, n), "%d bytes: piece %d", n, i)
			require.Equal(t, big[off:off+size], piece, "%d bytes: piece %d", n, i)
			off += size
		}
		require.Equal(t, n, off)
		require.NoError(t, <-errc)
	}
}

func TestLinkMessagesArriveInOrder(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	cfg.StripeMin = 64 << 10
	a, b := linkPair(t, cfg, 4)
	sizes := []int{3 << 20, 10, 64 << 10, 0, 1 << 20, 64<<10 - 1, 5, 2<<20 + 1, 100, 4 << 20}
	msgs := make([][]byte, len(sizes))
	for i, n := range sizes {
		msgs[i] = nettest.RandomBytes(uint64(100+i), n)
	}
	errc := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := a.Send(m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i, n := range sizes {
		buf := make([]byte, n)
		require.NoError(t, b.Recv(buf), "message %d", i)
		require.True(t, bytes.Equal(msgs[i], buf), "message %d differs", i)
	}
	require.NoError(t, <-errc)
}

func TestLinkFullDuplex(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	a, b := linkPair(t, cfg, 4)
	const rounds, n = 4, 8 << 20
	ma, mb := nettest.RandomBytes(11, n), nettest.RandomBytes(12, n)
	run := func(l *TCPLink, out, in []byte) <-chan error {
		errc := make(chan error, 2)
		go func() {
			for i := 0; i < rounds; i++ {
				if err := l.Send(out); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		go func() {
			buf := make([]byte, n)
			for i := 0; i < rounds; i++ {
				if err := l.Recv(buf); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(in, buf) {
					errc <- fmt.Errorf("round %d: payload differs", i)
					return
				}
			}
			errc <- nil
		}()
		return errc
	}
	ea, eb := run(a, ma, mb), run(b, mb, ma)
	for _, errc := range []<-chan error{ea, ea, eb, eb} {
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("full-duplex link exchange hung")
		}
	}
}

func TestLinkLengthMismatch(t *testing.T) {
	cfg := testConfig(20 * time.Second) // a hang would show as a slow test, not a pass
	sm := cfg.StripeMin
	tests := []struct {
		name      string
		sent, exp int
	}{
		{"both striped, sender longer", sm + 3, sm},
		{"both striped, sender shorter", sm, sm + 3},
		{"sender striped, receiver not", 2 * sm, 100},
		{"receiver striped, sender not", 100, 2 * sm},
		{"small messages", 7, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := linkPair(t, cfg, 4)
			go func() { _ = a.Send(nettest.RandomBytes(3, tc.sent)) }()
			buf := bytes.Repeat([]byte{0xAA}, tc.exp+32)
			start := time.Now()
			err := b.Recv(buf[:tc.exp])
			require.Less(t, time.Since(start), 5*time.Second)
			var le *wire.LengthError
			require.ErrorAs(t, err, &le)
			require.Equal(t, wire.LengthError{Got: tc.sent, Want: tc.exp}, *le)
			require.Equal(t, bytes.Repeat([]byte{0xAA}, 32), buf[tc.exp:], "nothing past p")
			// The link is unusable now and says so at once.
			start = time.Now()
			require.ErrorIs(t, b.Recv(make([]byte, tc.sent)), wire.ErrClosed)
			require.Less(t, time.Since(start), time.Second)
		})
	}
}

func TestLinkStripeMinMismatch(t *testing.T) {
	dcfg := testConfig(20 * time.Second)
	acfg := dcfg
	acfg.StripeMin = 4 << 20
	a, b := linkPair2(t, dcfg, acfg, 4)
	go func() { _ = a.Send(make([]byte, 1<<20)) }()
	start := time.Now()
	err := b.Recv(make([]byte, 1<<20))
	require.ErrorIs(t, err, wire.ErrProtocol)
	require.Contains(t, err.Error(), "StripeMin")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestLinkCloseUnblocksRecv(t *testing.T) {
	cfg := testConfig(time.Minute)
	for _, n := range []int{10, 4 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			_, b := linkPair(t, cfg, 4)
			errc := make(chan error, 1)
			go func() { errc <- b.Recv(make([]byte, n)) }()
			time.Sleep(50 * time.Millisecond)
			require.NoError(t, b.Close())
			requireEndsClosed(t, errc, 2*time.Second, "Close did not unblock Recv")
			require.ErrorIs(t, b.Send([]byte("x")), wire.ErrClosed)
		})
	}
}

func TestLinkPeerDiesMidMessage(t *testing.T) {
	cfg := testConfig(20 * time.Second)
	a, b := linkPair(t, cfg, 4)
	// Only stream 2 of the peer goes away; the striped Recv must not wait
	// for the other streams' pieces until the timeout.
	require.NoError(t, a.conns[2].Close())
	start := time.Now()
	err := b.Recv(make([]byte, 1<<20))
	require.ErrorIs(t, err, wire.ErrClosed)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestNewLinkRejectsEmpty(t *testing.T) {
	require.Panics(t, func() { NewTCPLink(nil, DefaultConfig()) })
	require.Panics(t, func() { NewTCPLink([]*Conn{nil}, DefaultConfig()) })
}

// BenchmarkLinkLoopback measures one-way Link throughput over loopback:
//
//	go test -run '^$' -bench BenchmarkLinkLoopback ./hostnet/
func BenchmarkLinkLoopback(b *testing.B) {
	for _, streams := range []int{1, 4} {
		for _, size := range []int{64 << 10, 1 << 20, 16 << 20, 256 << 20} {
			b.Run(fmt.Sprintf("streams=%d/size=%s", streams, nettest.SizeName(size)), func(b *testing.B) {
				tx, rx := linkPair(b, testConfig(time.Minute), streams)
				nettest.BenchStream(b, tx, rx, size)
			})
		}
	}
}

// BenchmarkRawTCPLoopback is the baseline for BenchmarkLinkLoopback: one
// plain TCP socket over loopback, Write and io.ReadFull of the same sizes,
// no framing, no deadlines.
func BenchmarkRawTCPLoopback(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20, 256 << 20} {
		b.Run("size="+nettest.SizeName(size), func(b *testing.B) {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			require.NoError(b, err)
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() { c, _ := ln.Accept(); accepted <- c }()
			tx, err := net.Dial("tcp4", ln.Addr().String())
			require.NoError(b, err)
			defer tx.Close()
			rx := <-accepted
			require.NotNil(b, rx)
			defer rx.Close()
			src, dst := make([]byte, size), make([]byte, size)
			done := make(chan error, 1)
			b.SetBytes(int64(size))
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					if _, err := io.ReadFull(rx, dst); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for i := 0; i < b.N; i++ {
				if _, err := tx.Write(src); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, <-done)
		})
	}
}

// BenchmarkConnPingPong measures the round trip of a small message
// (latency, not bandwidth) over one Conn.
func BenchmarkConnPingPong(b *testing.B) {
	d, a := connPair(b, testConfig(time.Minute))
	nettest.BenchPingPong(b, d, a)
}
