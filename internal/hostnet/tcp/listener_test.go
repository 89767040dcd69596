package tcp

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/nettest"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Idle connections that never send a byte cannot keep a real peer out, and
// they cost a few log lines, not one each.
func TestListenerIdleFloodDoesNotStarvePeers(t *testing.T) {
	tests := []struct {
		name        string
		idle        int
		bound       int    // maxUnaut; 0 keeps the default
		wantInLog   string // a refusal kind the summary must name
		wantInFirst string
	}{
		{"300 idle connections under the bound", 300, 0, "sent nothing within 2s", "sent nothing within 2s"},
		{"300 idle connections past a bound of 64", 300, 64, "dropped unanswered to make room", "more than 64 connections"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(10 * time.Second)
			l, err := ListenAddr("127.0.0.1:0", cfg, testSecret)
			require.NoError(t, err)
			defer l.Close()
			logged := nettest.CaptureRefusals(l)
			if tc.bound > 0 {
				l.mu.Lock()
				l.maxUnaut = tc.bound
				l.mu.Unlock()
			}
			nettest.OpenIdle(t, l.Addr(), tc.idle)

			start := time.Now()
			d, err := Dial(l.Addr(), cfg, testSecret, []byte("rank 1"))
			require.NoError(t, err, "a real peer must get through the idle connections")
			defer d.Close()
			a, hello, err := l.Accept()
			require.NoError(t, err)
			defer a.Close()
			require.Equal(t, "rank 1", string(hello))
			require.Less(t, time.Since(start), cfg.Timeout/2, "the peer waited behind the idle connections")

			nettest.WaitRefused(t, l, tc.idle)
			require.NoError(t, l.Close())
			lines := logged.Lines()
			require.LessOrEqual(t, len(lines), 4, "refusals must be summed up, not logged one by one:\n%s", strings.Join(lines, "\n"))
			require.GreaterOrEqual(t, len(lines), 2, "the first refusal and a summary:\n%s", strings.Join(lines, "\n"))
			require.Contains(t, lines[0], tc.wantInFirst)
			require.Contains(t, strings.Join(lines[1:], "\n"), tc.wantInLog)
			require.Contains(t, lines[len(lines)-1], "from 1 address ")
			require.Equal(t, tc.idle, nettest.LoggedRefusals(t, lines), "every refusal is accounted for:\n%s", strings.Join(lines, "\n"))
		})
	}
}

// When nobody came, Accept's error says whether strangers were turned away
// meanwhile, instead of only blaming the ranks.
func TestAcceptTimeoutNamesRefusedStrangers(t *testing.T) {
	other := testSecret
	other[5] ^= 0x10
	tests := []struct {
		name      string
		idle      int
		wrong     int // dials with another secret
		garbage   int // connections that speak another protocol
		want      []string
		wantNot   []string
		wantCount int
	}{
		{name: "nobody came", want: []string{"are the other ranks running"}, wantNot: []string{"strangers"}},
		{name: "strangers came", idle: 4, wrong: 3, garbage: 2, wantCount: 9,
			want: []string{"meanwhile 9 connections from strangers (1 address) were refused",
				"4 sent nothing within 2s", "3 wrong secret", "2 not a flagcx peer",
				"another job, or a port scanner", "did not keep the ranks out"},
			wantNot: []string{"are the other ranks running"}},
		{name: "one wrong secret", wrong: 1, wantCount: 1,
			want: []string{"meanwhile 1 connection from a stranger (1 address) was refused (1 wrong secret)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out its Accept deadline
			cfg := testConfig(4 * time.Second)
			l, err := ListenAddr("127.0.0.1:0", cfg, testSecret)
			require.NoError(t, err)
			defer l.Close()
			nettest.CaptureRefusals(l)
			nettest.OpenIdle(t, l.Addr(), tc.idle)
			for i := 0; i < tc.wrong; i++ {
				_, err := Dial(l.Addr(), cfg, other, nil)
				require.ErrorIs(t, err, wire.ErrAuth)
			}
			for i := 0; i < tc.garbage; i++ {
				c, err := net.Dial("tcp", l.Addr())
				require.NoError(t, err)
				_, err = c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
				require.NoError(t, err)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.ReadAll(c) // until the listener hangs up
				c.Close()
			}
			_, _, err = l.Accept()
			require.ErrorIs(t, err, wire.ErrTimeout)
			require.Equal(t, tc.wantCount, l.Refused())
			for _, s := range tc.want {
				require.ErrorContains(t, err, s)
			}
			for _, s := range tc.wantNot {
				require.NotContains(t, err.Error(), s)
			}
		})
	}
}

// A dialer the listener dropped as busy dials again, within its deadline.
func TestDialRetriesWhenBusy(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	served := make(chan error, 2)
	addr := fakePeer(t, 2, func(i int, c net.Conn) {
		arm := func(d time.Duration) { _ = c.SetDeadline(time.Now().Add(d)) }
		p, err := acceptHandshake(c, cfg, testSecret, arm)
		if err == nil {
			if i == 0 {
				sendBusy(c) // as a flooded listener does
			} else {
				err = acceptVerdict(c, cfg, testSecret, p)
			}
		}
		served <- err
	})
	c, err := Dial(addr, cfg, testSecret, []byte("again"))
	require.NoError(t, err)
	c.Close()
	for i := 0; i < 2; i++ {
		require.NoError(t, <-served, "connection %d", i)
	}
}

// A listener that keeps dropping the dialer as busy gives an error that
// says so, once the dialer's deadline has passed.
func TestDialGivesUpWhenAlwaysBusy(t *testing.T) {
	cfg := testConfig(700 * time.Millisecond)
	addr := fakePeer(t, -1, func(_ int, c net.Conn) {
		arm := func(d time.Duration) { _ = c.SetDeadline(time.Now().Add(d)) }
		if _, err := acceptHandshake(c, cfg, testSecret, arm); err == nil {
			sendBusy(c)
		}
	})
	start := time.Now()
	_, err := Dial(addr, cfg, testSecret, nil)
	require.ErrorIs(t, err, wire.ErrTimeout)
	require.ErrorContains(t, err, "as busy")
	require.ErrorContains(t, err, addr)
	require.Less(t, time.Since(start), 10*time.Second)
}
