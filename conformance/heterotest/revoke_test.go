package heterotest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/sdk"
)

// revoked is what a survivor of the "revoke" scenario saw.
type revoked struct {
	Failed   []int    `json:"failed"`
	Hosts    []string `json:"hosts"`
	At       float64  `json:"at"`       // when its call failed, Unix seconds
	Verdict  float64  `json:"verdict"`  // RevokedError.At, Unix seconds
	Size     int      `json:"size"`     // the shrunk communicator's
	Clusters [][]int  `json:"clusters"` // the shrunk communicator's
}

// revokeShrink: every rank runs AllReduces; the victim kills itself with
// SIGKILL (kill -9: no cleanup, no goodbye), or stops itself with SIGSTOP
// (Stop; the test kills it at the end), at a seeded random point,
// from another goroutine, most likely in the middle of a call. The
// survivors' calls must end with the *RevokedError naming it; they shrink
// by its Failed ranks and check every collective exactly on the result.
func revokeShrink(job *workerJob, comm *core.Comm, m Mem, out *workerOut) error {
	rng := rand.New(rand.NewPCG(job.Seed, uint64(job.Victim)))
	dieAt, delay := rng.IntN(4), time.Duration(rng.IntN(3000))*time.Microsecond
	c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: comm.Count(), Count: 1 << 16, Seed: 2}
	var err error
	for round := 0; round < 100000 && err == nil; round++ {
		if job.Rank == job.Victim && round == dieAt {
			sig := syscall.SIGKILL
			if job.Stop {
				sig = syscall.SIGSTOP
			}
			go func() {
				time.Sleep(delay)
				_ = syscall.Kill(os.Getpid(), sig)
			}()
		}
		// The results before the failure are not checked: the emulated
		// library may complete a call with a buffer the victim was
		// killed in the middle of writing (see the report of this test).
		_, err = Run(comm, m, c, false, 0)
	}
	out.Revoked.At = float64(time.Now().UnixNano()) / 1e9
	var re *core.RevokedError
	if !errors.As(err, &re) {
		return fmt.Errorf("the failure is no *core.RevokedError: %w", err)
	}
	out.Revoked.Failed, out.Revoked.Hosts = re.Failed, re.Hosts
	out.Revoked.Verdict = float64(re.At.UnixNano()) / 1e9
	shrunk, err := comm.Shrink(re.Failed)
	if err != nil {
		return err
	}
	defer shrunk.Destroy()
	out.Revoked.Size = shrunk.Count()
	for _, cl := range shrunk.Layout().Clusters {
		out.Revoked.Clusters = append(out.Revoked.Clusters, cl.Ranks)
	}
	m = MemFor(shrunk)
	for _, k := range Matrix(shrunk.Count(), []int{1, 37}, []sdk.DataType{sdk.Float32, sdk.Int32}, 13) {
		out.Cases++
		wrong, err := Run(shrunk, m, k, false, 0)
		if err != nil {
			return fmt.Errorf("after the shrink: %s: %w", Name(k, false), err)
		}
		if wrong != 0 {
			out.Failures = append(out.Failures, fmt.Sprintf("%s: %d wrong elements", Name(k, false), wrong))
		}
	}
	return shrunk.Barrier()
}

// TestHeteroRevokeShrink: rank processes over TCP, on the host and on
// emulated vendors, in homogeneous and heterogeneous layouts (3 clusters,
// one losing its leader or every rank); a rank is killed with SIGKILL at a
// seeded random point. Every survivor gets the revoke naming it, much
// sooner than its own deadline, shrinks, and is exact afterwards; nothing
// of any rank is left in /dev/shm.
func TestHeteroRevokeShrink(t *testing.T) {
	const deadline = 60 // FLAGCX_TIMEOUT, seconds: no survivor may wait it out
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("FLAGCX_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (FLAGCX_FAULT_SEED=%d replays it)", seed, seed)
	cases := []struct {
		name      string
		placement string
		split     string
		victim    int
		stop      bool
		clusters  [][]int
	}{
		{"host ranks", "host:4", "", int(seed % 4), false, [][]int{{0, 1, 2}}},
		{"host ranks, one stopped", "host:3", "", 1 + int(seed%2), true, [][]int{{0, 1}}},
		{"nvidia and host, a device rank dies", "nvidia:2,host:2", "", 1, false, [][]int{{0}, {1, 2}}},
		{"nvidia and host, a host leader dies", "nvidia:2,host:2", "", 2, false, [][]int{{0, 1}, {2}}},
		{"nvidia and host, a device rank stopped", "nvidia:2,host:2", "", 0, true, [][]int{{0}, {1, 2}}},
		{"3 clusters, one loses its leader", "nvidia:2,host:1,nvidia:2", "2,1,2", 3, false, [][]int{{0, 1}, {2}, {3}}},
		{"3 clusters, one loses every rank", "nvidia:2,host:1,nvidia:2", "2,1,2", 2, false, [][]int{{0, 1}, {2, 3}}},
	}
	host, err := os.Hostname()
	require.NoError(t, err)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			placement := expand(tc.placement)
			requirePlugins(t, placement)
			// A stopped rank is noticed when a survivor's own deadline
			// passes: a short one for those cases.
			d := deadline
			if tc.stop {
				d = 5
			}
			env := []string{"FLAGCX_SHM_DISABLE=1", fmt.Sprintf("FLAGCX_TIMEOUT=%d", d), fmt.Sprintf("FLAGCX_VENDORSIM_TIMEOUT=%d", 2*d)}
			if tc.split != "" {
				env = append(env, "FLAGCX_CLUSTER_SPLIT_LIST="+tc.split)
			}
			outs, pids := runRanksPids(t, placement, workerJob{Scenario: "revoke", Victim: tc.victim, Stop: tc.stop, Seed: seed + uint64(i)}, env, 3*time.Minute)
			var first, last, late float64
			for r, o := range outs {
				if r == tc.victim {
					continue
				}
				require.Empty(t, o.Error, "rank %d", r)
				require.Equal(t, []int{tc.victim}, o.Revoked.Failed, "rank %d", r)
				require.Equal(t, []string{host}, o.Revoked.Hosts)
				require.Equal(t, len(placement)-1, o.Revoked.Size)
				require.Equal(t, tc.clusters, o.Revoked.Clusters, "rank %d", r)
				require.NotZero(t, o.Cases)
				require.Empty(t, o.Failures, "rank %d", r)
				if first == 0 || o.Revoked.At < first {
					first = o.Revoked.At
				}
				last = max(last, o.Revoked.At)
				late = max(late, o.Revoked.At-o.Revoked.Verdict)
			}
			spread := time.Duration((last - first) * float64(time.Second))
			after := time.Duration(late * float64(time.Second))
			t.Logf("victim rank %d: the survivors' calls ended within %v of each other, the last %v after the verdict (deadline %ds)", tc.victim, spread, after, d)
			require.Less(t, after, time.Duration(d)*time.Second/2, "a survivor heard of the verdict late")
			require.Less(t, spread, time.Duration(d)*time.Second/2, "a survivor waited out its deadline")
			requireNoSegments(t, pids)
		})
	}
}

// requireNoSegments: no /dev/shm segment of these processes is left
// (flagcx-<boot>-<pidns>-<pid>-<token>).
func requireNoSegments(t *testing.T, pids []int) {
	t.Helper()
	ents, err := os.ReadDir(shm.DefaultShmDir)
	if os.IsNotExist(err) {
		return
	}
	require.NoError(t, err)
	for _, e := range ents {
		f := strings.Split(e.Name(), "-")
		if len(f) == 5 && f[0] == "flagcx" {
			pid, _ := strconv.Atoi(f[3])
			require.False(t, slices.Contains(pids, pid), "%s is left in %s", e.Name(), shm.DefaultShmDir)
		}
	}
}
