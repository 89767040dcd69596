package tcp

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/nettest"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// polledLinks is a one-socket link pair whose sockets poll (Exchange's
// precondition).
func polledLinks(t *testing.T, cfg Config) (a, b *TCPLink) {
	a, b = linkPair(t, cfg, 1)
	a.Conns()[0].SetSpin(100 * time.Microsecond)
	b.Conns()[0].SetSpin(100 * time.Microsecond)
	return a, b
}

// TestExchange: both ends exchange messages of every size at once, each
// receiving the other's exactly, with progress counts that only grow and
// end at the whole messages; frames an earlier Recv read ahead are taken
// first.
func TestExchange(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	a, b := polledLinks(t, cfg)
	for i, n := range []int{0, 1, 100, 64<<10 + 3, 1<<20 + 7, 5 << 20} {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			ma, mb := nettest.RandomBytes(uint64(2*i+1), n), nettest.RandomBytes(uint64(2*i+2), n)
			// A small frame ahead of the exchange: b's Recv reads part
			// of a's exchange frame ahead with it.
			require.NoError(t, a.SendTagged([]byte("ahead"), 7))
			errc := make(chan error, 1)
			var gotB []byte
			go func() {
				small := make([]byte, 5)
				if err := b.RecvTagged(small, 7); err != nil {
					errc <- err
					return
				}
				gotB = make([]byte, n)
				ok, err := b.Exchange(mb, gotB, 9, nil)
				if err == nil && !ok {
					err = fmt.Errorf("b could not exchange")
				}
				errc <- err
			}()
			gotA := make([]byte, n)
			lastGot, lastSent := 0, 0
			ok, err := a.Exchange(ma, gotA, 9, func(got, sent int) {
				require.GreaterOrEqual(t, got, lastGot)
				require.GreaterOrEqual(t, sent, lastSent)
				require.LessOrEqual(t, got, n)
				require.LessOrEqual(t, sent, n)
				lastGot, lastSent = got, sent
			})
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, <-errc)
			require.True(t, bytes.Equal(mb, gotA), "a received b's message")
			require.True(t, bytes.Equal(ma, gotB), "b received a's message")
			if n > 0 {
				require.Equal(t, []int{n, n}, []int{lastGot, lastSent})
			}
		})
	}
}

// TestExchangeRefusals: a link that cannot exchange says so and moves
// nothing; a length or tag the peer does not share fails both sides'
// calls with the error Recv gives, and breaks the link.
func TestExchangeRefusals(t *testing.T) {
	cfg := testConfig(5 * time.Second)
	t.Run("several sockets or the netpoller", func(t *testing.T) {
		a, _ := linkPair(t, cfg, 2)
		ok, err := a.Exchange([]byte("x"), make([]byte, 1), 0, nil)
		require.NoError(t, err)
		require.False(t, ok)
		c, _ := linkPair(t, cfg, 1)
		ok, err = c.Exchange([]byte("x"), make([]byte, 1), 0, nil)
		require.NoError(t, err)
		require.False(t, ok)
	})
	tests := []struct {
		name     string
		nb, tagB int
		// check asserts what each side's error says: a's, then b's.
		check func(t *testing.T, errA, errB error)
	}{
		{"lengths differ", 12, 3, func(t *testing.T, errA, errB error) {
			var la, lb *wire.LengthError
			require.ErrorAs(t, errA, &la)
			require.ErrorAs(t, errB, &lb)
			require.Equal(t, wire.LengthError{Got: 12, Want: 10}, *la)
			require.Equal(t, wire.LengthError{Got: 10, Want: 12}, *lb)
		}},
		{"tags differ", 10, 4, func(t *testing.T, errA, errB error) {
			var ma, mb *wire.MismatchError
			require.ErrorAs(t, errA, &ma)
			require.ErrorAs(t, errB, &mb)
			require.Equal(t, wire.MismatchError{Got: 4, Want: 3}, *ma)
			require.Equal(t, wire.MismatchError{Got: 3, Want: 4}, *mb)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := polledLinks(t, cfg)
			errc := make(chan error, 1)
			go func() {
				_, err := b.Exchange(make([]byte, tc.nb), make([]byte, tc.nb), uint32(tc.tagB), nil)
				errc <- err
			}()
			_, errA := a.Exchange(make([]byte, 10), make([]byte, 10), 3, nil)
			tc.check(t, errA, <-errc)
			require.ErrorIs(t, a.Send([]byte("x")), wire.ErrClosed, "the link is broken")
		})
	}
	for _, how := range []string{"abort", "close"} {
		t.Run(how+" while the peer is silent", func(t *testing.T) {
			a, _ := polledLinks(t, testConfig(time.Minute))
			errc := make(chan error, 1)
			go func() {
				_, err := a.Exchange(make([]byte, 10), make([]byte, 10), 0, nil)
				errc <- err
			}()
			time.Sleep(50 * time.Millisecond)
			if how == "abort" {
				a.Conns()[0].abort(fmt.Errorf("stream 1 failed"))
			} else {
				require.NoError(t, a.Close())
			}
			requireEndsClosed(t, errc, 5*time.Second, "the exchange stayed blocked")
		})
	}
	t.Run("peer silent", func(t *testing.T) {
		a, _ := polledLinks(t, testConfig(300*time.Millisecond))
		_, err := a.Exchange(make([]byte, 10), make([]byte, 10), 0, nil)
		require.ErrorIs(t, err, wire.ErrTimeout)
	})
}
