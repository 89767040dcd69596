package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchMixedJobOneProcessPerRank starts a heterogeneous job as an
// external launcher would, one process per rank: the device ranks say
// --backend nvidia (emulated), the host ranks name no backend and no
// FLAGCX_CLUSTER_SPLIT_LIST. Every rank must still run the heterogeneous
// schedules (the layout agreed at init decides, not a rank's own flags),
// and the results must be exact.
func TestBenchMixedJobOneProcessPerRank(t *testing.T) {
	dir := pluginDir(t)
	for _, tr := range []struct{ name, shmDisable string }{{"shm", ""}, {"tcp", "1"}} {
		t.Run(tr.name, func(t *testing.T) {
			res := runMixedJob(t, tr.shmDisable, 60, 3*time.Minute, func(int) []string {
				return []string{"--plugin-dir", dir, "bench", "all", "-c", "1", "-b", "8", "-e", "1K", "-f", "8", "-w", "1", "-n", "2"}
			})
			for r := range res {
				require.Zero(t, res[r].code, "rank %d stdout:\n%s\nstderr:\n%s", r, res[r].stdout, res[r].stderr)
			}
			out := res[0].stdout
			require.Len(t, tableRows(t, out), 10*3) // 10 collectives x 8, 64, 512 B
			require.Contains(t, out, "# Communicator: heterogeneous, 2 cluster(s)")
			require.Contains(t, out, "cluster 1: host (cpu), ranks 2,3, leader 2")
		})
	}
}

// TestBenchMixedJobMismatch: in the same mixed job, one host rank reduces
// with max while the others sum (the same bytes): every rank fails, none
// waits for the deadline, and the ranks that find it name both calls.
// Over shared memory every rank checks every step's label; over TCP the
// host ranks do (a device rank may see its leader's connection reset
// first: the notice is then lost, see README.md).
func TestBenchMixedJobMismatch(t *testing.T) {
	dir := pluginDir(t)
	for _, tr := range []struct {
		name, shmDisable string
		naming           []int
	}{{"shm", "", []int{0, 1, 2, 3}}, {"tcp", "1", []int{2, 3}}} {
		t.Run(tr.name, func(t *testing.T) {
			res := runMixedJob(t, tr.shmDisable, 120, 100*time.Second, func(r int) []string {
				op := "sum"
				if r == 3 {
					op = "max"
				}
				return []string{"--plugin-dir", dir, "bench", "allreduce", "-c", "1", "-b", "1K", "-e", "1K", "-w", "1", "-n", "2", "-o", op}
			})
			for r := range res {
				require.Equal(t, 1, res[r].code, "rank %d stdout:\n%s\nstderr:\n%s", r, res[r].stdout, res[r].stderr)
			}
			for _, r := range tr.naming {
				require.Contains(t, res[r].stderr, "ranks disagree on the operation", "rank %d", r)
				require.Contains(t, res[r].stderr, "AllReduce float32 max", "rank %d", r)
				require.Contains(t, res[r].stderr, "AllReduce float32 sum", "rank %d", r)
			}
		})
	}
}

// runMixedJob starts the mixed job of these tests as 4 processes, one per
// rank, as an external launcher would: ranks 0 and 1 on emulated nvidia
// (--backend), ranks 2 and 3 with no backend flag (host). args(r) is rank
// r's command line before the backend flag.
func runMixedJob(t *testing.T, shmDisable string, timeoutSec int, limit time.Duration, args func(r int) []string) []result {
	t.Helper()
	port := freePort(t)
	const n = 4
	res := make([]result, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			env := cleanEnv(fmt.Sprintf("FLAGCX_RANK=%d", r), fmt.Sprintf("FLAGCX_NRANKS=%d", n),
				fmt.Sprintf("FLAGCX_COMM_ID=127.0.0.1:%d", port), "FLAGCX_COMM_SECRET="+strings.Repeat("6b", 16),
				"FLAGCX_SHM_DISABLE="+shmDisable, fmt.Sprintf("FLAGCX_TIMEOUT=%d", timeoutSec))
			a := args(r)
			if r < 2 {
				a = append(a, "--backend", "nvidia", "--emulated")
			}
			res[r] = runFlagcx(t, limit, env, a...)
		}(r)
	}
	wg.Wait()
	return res
}
