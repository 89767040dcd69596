package core_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/core/heterotest"
	"github.com/flagcx/flagcx-go/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

func loopback(timeout time.Duration) hostnet.Config {
	cfg := hostnet.DefaultConfig()
	cfg.IfName = "lo"
	cfg.Streams = 1
	cfg.Timeout = timeout
	return cfg
}

func noEnv(string) (string, bool) { return "", false }

// startHetero brings up n host ranks as goroutines with the given options.
func startHetero(t *testing.T, n int, opts ...core.HeteroOption) []*core.HeteroComm {
	t.Helper()
	cfg := loopback(20 * time.Second)
	id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
	require.NoError(t, err)
	comms := make([]*core.HeteroComm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			all := append([]core.HeteroOption{core.WithEnv(noEnv), core.WithCommOptions(core.WithNetConfig(cfg))}, opts...)
			comms[r], errs[r] = core.InitHeteroRank(id, n, r, core.HostBackend(), all...)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	return comms
}

// checkAll runs every case on every rank and requires exact results.
func checkAll(t *testing.T, comms []*core.HeteroComm, cases []reference.Case) {
	t.Helper()
	for _, c := range cases {
		for _, inPlace := range []bool{false, true} {
			if inPlace && !heterotest.InPlaceChecked(c.Coll) {
				continue
			}
			wrong := make([]int, len(comms))
			errs := make([]error, len(comms))
			var wg sync.WaitGroup
			for r, comm := range comms {
				wg.Add(1)
				go func(r int, comm *core.HeteroComm) {
					defer wg.Done()
					wrong[r], errs[r] = heterotest.Run(comm, heterotest.HostMem{}, c, inPlace, 0)
				}(r, comm)
			}
			wg.Wait()
			for r := range comms {
				require.NoError(t, errs[r], "%s, rank %d", heterotest.Name(c, inPlace), r)
				require.Zero(t, wrong[r], "%s: rank %d has wrong elements", heterotest.Name(c, inPlace), r)
			}
		}
	}
}

// TestHeteroHostClusters: host ranks split into clusters exercise every
// schedule (c2c, p2p, host path) in one process.
func TestHeteroHostClusters(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		split []int
		host  bool
		chunk int
	}{
		{"2 clusters of 2", 4, []int{2, 2}, false, 0},
		{"uneven 2+1+2, small chunks", 5, []int{2, 1, 2}, false, 64},
		{"clusters of one", 3, []int{1, 1, 1}, false, 0},
		{"host path", 4, []int{1, 3}, true, 128},
		{"homogeneous", 3, nil, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comms := startHetero(t, tc.n, core.WithSplitList(tc.split), core.WithHostPath(tc.host), core.WithChunk(tc.chunk))
			require.Equal(t, len(tc.split) <= 1, comms[0].IsHomogeneous())
			checkAll(t, comms, heterotest.Matrix(tc.n, []int{1, 37}, sdk.AllDataTypes(), 7))
		})
	}
}

func TestHeteroBadSplitList(t *testing.T) {
	for _, tc := range []struct {
		split []int
		want  string
	}{
		{[]int{2, 2}, "add up to 4"},
		{[]int{1}, "add up to 1"},
		{[]int{0, 3}, "not a cluster size"},
	} {
		t.Run(fmt.Sprint(tc.split), func(t *testing.T) {
			cfg := loopback(5 * time.Second)
			id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
			require.NoError(t, err)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r := 0; r < 3; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					var c *core.HeteroComm
					c, errs[r] = core.InitHeteroRank(id, 3, r, core.HostBackend(), core.WithEnv(noEnv),
						core.WithCommOptions(core.WithNetConfig(cfg)), core.WithSplitList(tc.split))
					if c != nil {
						c.Destroy()
					}
				}(r)
			}
			wg.Wait()
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				require.Contains(t, err.Error(), tc.want)
				require.Contains(t, err.Error(), "FLAGCX_CLUSTER_SPLIT_LIST")
			}
		})
	}
}
