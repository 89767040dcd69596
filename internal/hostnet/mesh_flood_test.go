//go:build linux

package hostnet

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/nettest"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
)

// A mesh whose ranks' listeners are flooded with idle connections before
// Connect still connects, and the flood costs each listener a line or two.
func TestMeshConnectsThroughIdleFlood(t *testing.T) {
	const n, idle = 3, 200
	cfg := meshCfg(10 * time.Second)
	dir := shmTestDir(t)
	mcs := prepareMesh(t, n, cfg, func(int) shm.ShmConfig {
		sc := smallShm(dir)
		sc.Disable = true // every link over TCP, through the flooded listeners
		return sc
	}, nil)
	logs := make([]*nettest.LogBuffer, n)
	for r, mc := range mcs {
		logs[r] = nettest.CaptureRefusals(mc.Listener)
		nettest.OpenIdle(t, mc.Listener.Addr(), idle)
	}
	start := time.Now()
	ms, errs := connectAll(t, mcs)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.Less(t, time.Since(start), cfg.Timeout/2, "the ranks waited behind the idle connections")
	exchange(t, ms[0].Links[2], ms[2].Links[0], 0, 2, []int{1, 100 << 10})
	for r, mc := range mcs {
		nettest.WaitRefused(t, mc.Listener, idle)
		require.NoError(t, mc.Listener.Close())
		lines := logs[r].Lines()
		require.LessOrEqual(t, len(lines), 4, "rank %d:\n%s", r, strings.Join(lines, "\n"))
		require.Equal(t, idle, nettest.LoggedRefusals(t, lines), "rank %d:\n%s", r, strings.Join(lines, "\n"))
	}
}
