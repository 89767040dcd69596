package hostcomm

import (
	"sync"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/stretchr/testify/require"
)

// testNet is loopback with a deadline.
func testNet(timeout time.Duration) hostnet.Config {
	cfg := hostnet.DefaultConfig()
	cfg.IfName = "lo"
	cfg.Streams = 2
	cfg.Timeout = timeout
	return cfg
}

// startHosts brings up n host communicators as goroutines over loopback.
func startHosts(t testing.TB, n int, cfg hostnet.Config) []*Comm {
	id, err := NewID("", cfg, nil)
	require.NoError(t, err)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = Init(id, n, r, cfg)
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	return comms
}

// onAllHosts runs f on every communicator at once.
func onAllHosts(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *Comm) {
			defer wg.Done()
			errs[i] = f(c)
		}(i, c)
	}
	wg.Wait()
	return errs
}
