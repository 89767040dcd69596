package core

import (
	"net"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/stretchr/testify/require"
)

// openIdle opens n connections to addr that never send a byte, as a port
// scanner or a confused client would.
func openIdle(t *testing.T, addr string, n int) {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err, "idle connection %d", i)
		conns = append(conns, c)
	}
}

// Idle connections to the rendezvous before the ranks arrive do not keep
// the ranks out.
func TestRendezvousSurvivesIdleFlood(t *testing.T) {
	cfg := testNet(10 * time.Second)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	openIdle(t, id.Addr, 200)

	start := time.Now()
	comms := joinComms(t, id, 4, cfg)
	require.Less(t, time.Since(start), cfg.Timeout/2, "the ranks waited behind the idle connections")
	for _, err := range onAll(comms, func(c *Comm) error { return c.Barrier() }) {
		require.NoError(t, err)
	}
}

// A rendezvous whose ranks do not all come, while strangers knock, says
// both: which ranks are missing and that strangers were refused.
func TestInitRankNamesRefusedStrangers(t *testing.T) {
	cfg := testNet(3 * time.Second)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	other := id
	other.Secret[0] ^= 1
	for i := 0; i < 3; i++ {
		_, err := hostnet.Dial(id.Addr, cfg, other.Secret, []byte("{}"))
		require.ErrorIs(t, err, hostnet.ErrAuth)
	}
	openIdle(t, id.Addr, 2)
	_, err = InitRank(id, 2, 0, WithNetConfig(cfg))
	require.ErrorContains(t, err, "ranks 1 of 2 did not join")
	require.ErrorContains(t, err, "meanwhile 5 connections from strangers (1 address) were refused (2 sent nothing within 2s, 3 wrong secret)")
}
