package heterotest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Vendor libraries are per process, so every rank is a process: the test
// binary re-executes itself with envWorker holding the rank's job (a JSON
// workerJob), runs it in TestMain and writes a workerOut to a file that the
// parent test reads and asserts on.

const envWorker = "FLAGCX_HETEROTEST_WORKER"

type workerJob struct {
	Scenario  string   `json:"scenario"` // "matrix", "group" (group_test.go), "onesided" (onesided_test.go), "die" or "revoke" (revoke_test.go)
	Placement []string `json:"placement"`
	Rank      int      `json:"rank"`
	ID        string   `json:"id"`
	Root      string   `json:"root"` // repository root
	Out       string   `json:"out"`
	Counts    []int    `json:"counts"`
	Types     []int    `json:"types"`  // nil: every data type
	Victim    int      `json:"victim"` // "die": the rank that exits mid-collective
	Inside    bool     `json:"inside"` // "die": the victim has started the collective
	Seed      uint64   `json:"seed"`   // "revoke": when the victim is killed
	Stop      bool     `json:"stop"`   // "revoke": the victim stops (SIGSTOP) rather than dies
}

type workerOut struct {
	Layout      string   `json:"layout"`
	Homogeneous bool     `json:"homogeneous"`
	Clusters    int      `json:"clusters"`
	Paths       []string `json:"paths"` // "AllReduce float32 sum ...: c2c" per checked collective (first case of each)
	Cases       int      `json:"cases"`
	Failures    []string `json:"failures"`
	Error       string   `json:"error"`
	ErrAfter    float64  `json:"err_after"` // "die": seconds until the error
	Revoked     revoked  `json:"revoked"`   // "revoke"
}

func TestMain(m *testing.M) {
	if job := os.Getenv(envWorker); job != "" {
		os.Exit(runWorker(job))
	}
	os.Exit(m.Run())
}

func runWorker(spec string) int {
	var job workerJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Fprintln(os.Stderr, "bad job:", err)
		return 2
	}
	var out workerOut
	err := work(&job, &out)
	if err != nil {
		out.Error = err.Error()
	}
	b, _ := json.Marshal(&out)
	if werr := os.WriteFile(job.Out, b, 0o644); werr != nil {
		fmt.Fprintln(os.Stderr, "writing result:", werr)
		return 2
	}
	return 0
}

// backendFor opens this rank's plugin (emulated) and picks its device: its
// position among the earlier ranks of the same backend.
func backendFor(job *workerJob) (core.Backend, error) {
	name := job.Placement[job.Rank]
	if name == "host" {
		return core.HostBackend(), nil
	}
	dev := 0
	for r := 0; r < job.Rank; r++ {
		if job.Placement[r] == name {
			dev++
		}
	}
	p, err := loader.Open(pluginPath(job.Root, name))
	if err != nil {
		return core.Backend{}, err
	}
	// The example plugin's "vendor" is the host itself: nothing to emulate.
	emulated := !strings.HasPrefix(name, "example")
	if err := p.Init(loader.InitOptions{Emulated: emulated, VendorsimDir: filepath.Join(job.Root, "build", "vendorsim"), Log: func(string, loader.LogLevel, string) {}}); err != nil {
		return core.Backend{}, err
	}
	return core.DeviceBackend(p, dev), nil
}

func work(job *workerJob, out *workerOut) error {
	be, err := backendFor(job)
	if err != nil {
		return err
	}
	id, err := core.ParseUniqueID(job.ID)
	if err != nil {
		return err
	}
	n := len(job.Placement)
	comm, err := core.InitRank(id, n, job.Rank, core.WithBackend(be))
	if err != nil {
		return err
	}
	defer comm.Destroy()
	layout := comm.Layout()
	out.Layout = layout.String()
	out.Homogeneous = comm.IsHomogeneous()
	out.Clusters = len(layout.Clusters)
	m := MemFor(comm)
	switch job.Scenario {
	case "die":
		return die(job, comm, m, out)
	case "revoke":
		return revokeShrink(job, comm, m, out)
	case "group":
		return groups(comm, m, out)
	case "onesided":
		var err error
		out.Paths = comm.LinkTable() // the one-sided links are the same pairs' transports
		out.Cases, out.Failures, err = OneSided(comm, m)
		return err
	case "matrix":
	default:
		return fmt.Errorf("unknown scenario %q", job.Scenario)
	}
	seen := map[sdk.Collective]bool{}
	types := sdk.AllDataTypes()
	if job.Types != nil {
		types = nil
		for _, t := range job.Types {
			types = append(types, sdk.DataType(t))
		}
	}
	for _, c := range Matrix(n, job.Counts, types, 11) {
		if !seen[c.Coll] && c.Coll != sdk.SendRecv {
			seen[c.Coll] = true
			p, err := comm.Plan(job.Rank, sdk.Call{Coll: c.Coll, Count: c.Count, DType: sdk.Float32, Op: sdk.Sum,
				SendCounts: make([]int, n), SDispls: make([]int, n), RecvCounts: make([]int, n), RDispls: make([]int, n)})
			if err != nil {
				return err
			}
			path := fmt.Sprintf("%v: %v", c.Coll, p.Path)
			if p.DeviceReduce {
				path += "+device"
			}
			out.Paths = append(out.Paths, path)
		}
		for _, inPlace := range []bool{false, true} {
			if inPlace && !InPlaceChecked(c.Coll) {
				continue
			}
			out.Cases++
			wrong, err := Run(comm, m, c, inPlace, 0)
			if err != nil {
				return fmt.Errorf("%s: %w", Name(c, inPlace), err)
			}
			if wrong != 0 {
				out.Failures = append(out.Failures, fmt.Sprintf("%s: %d wrong elements", Name(c, inPlace), wrong))
			}
		}
	}
	return comm.Barrier()
}

// die: after one AllReduce that every rank completes, every rank but the
// victim starts a second, large one, and the victim dies: inside that
// AllReduce (Inside), or before joining it, which leaves the others
// waiting on it mid-collective whatever the timing. The others must
// return an error.
func die(job *workerJob, comm *core.Comm, m Mem, out *workerOut) error {
	first := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: comm.Count(), Count: 1000, Seed: 1}
	if _, err := Run(comm, m, first, false, 0); err != nil {
		return err
	}
	c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: comm.Count(), Count: 8 << 20, Seed: 2}
	if job.Rank == job.Victim {
		if job.Inside {
			go func() { _, _ = Run(comm, m, c, false, 0) }()
			time.Sleep(10 * time.Millisecond)
		} else {
			time.Sleep(300 * time.Millisecond)
		}
		os.Exit(3)
	}
	start := time.Now()
	_, err := Run(comm, m, c, false, 0)
	out.ErrAfter = time.Since(start).Seconds()
	if err == nil {
		return fmt.Errorf("AllReduce succeeded although rank %d died", job.Victim)
	}
	out.Error = err.Error()
	return nil
}

// ---- the parent side ---------------------------------------------------------

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

// pluginPath is the built plugin a placement names: a vendor plugin of
// build/plugins, or the example plugin ("example": the current ABI; "example-v1":
// the same source built against the v1 header).
func pluginPath(root, name string) string {
	switch name {
	case "example":
		return filepath.Join(root, "build", "example-plugin", "libflagcx-example.so")
	case "example-v1":
		return filepath.Join(root, "build", "example-plugin-v1", "libflagcx-example.so")
	}
	return filepath.Join(root, "build", "plugins", "libflagcx-"+name+".so")
}

// requirePlugins skips when an optional vendor's plugin is not built, and
// fails when nvidia's is missing (make builds it).
func requirePlugins(t *testing.T, placement []string) {
	t.Helper()
	for _, name := range placement {
		if name == "host" {
			continue
		}
		path := pluginPath(repoRoot(t), name)
		if _, err := os.Stat(path); err != nil {
			if name == "nvidia" || strings.HasPrefix(name, "example") {
				t.Fatalf("%s is missing: run make first (it builds the plugins and the emulated runtimes)", path)
			}
			t.Skipf("%s is not built (the %s plugin is optional here): skipping this layout", path, name)
		}
	}
}

func expand(spec string) []string {
	var p []string
	for _, part := range strings.Split(spec, ",") {
		name, count, _ := strings.Cut(part, ":")
		n, _ := strconv.Atoi(count)
		for i := 0; i < n; i++ {
			p = append(p, name)
		}
	}
	return p
}

// runRanks starts one process per rank of placement and returns their
// outputs; the ranks share env (on top of this process's environment).
func runRanks(t *testing.T, placement []string, job workerJob, env []string, limit time.Duration) []workerOut {
	t.Helper()
	outs, _ := runRanksPids(t, placement, job, env, limit)
	return outs
}

// runRanksPids is runRanks that also returns the ranks' process ids.
func runRanksPids(t *testing.T, placement []string, job workerJob, env []string, limit time.Duration) ([]workerOut, []int) {
	t.Helper()
	cfg := tcp.DefaultConfig()
	cfg.IfName = "lo"
	id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	n := len(placement)
	outs := make([]workerOut, n)
	codes := make([]int, n)
	pids := make([]int, n)
	logs := make([]string, n)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	// A stopped victim ("revoke" with Stop) never ends: it is killed once
	// the others have.
	var wg, others sync.WaitGroup
	for r := 0; r < n; r++ {
		j := job
		j.Placement, j.Rank, j.ID, j.Root = placement, r, id.String(), repoRoot(t)
		j.Out = filepath.Join(dir, fmt.Sprintf("rank%d.json", r))
		spec, err := json.Marshal(j)
		require.NoError(t, err)
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"="+string(spec), "FLAGCX_SOCKET_IFNAME=lo")
		cmd.Env = append(cmd.Env, env...)
		var buf strings.Builder
		cmd.Stdout, cmd.Stderr = &buf, &buf
		require.NoError(t, cmd.Start())
		pids[r] = cmd.Process.Pid
		wg.Add(1)
		if r != job.Victim {
			others.Add(1)
		}
		go func(r int) {
			defer wg.Done()
			if r != job.Victim {
				defer others.Done()
			}
			err := cmd.Wait()
			logs[r] = buf.String()
			if ee, ok := err.(*exec.ExitError); ok {
				codes[r] = ee.ExitCode()
			} else if err != nil {
				codes[r] = -1
				logs[r] += err.Error()
			}
		}(r)
	}
	if job.Scenario == "revoke" && job.Stop {
		others.Wait()
		_ = syscall.Kill(pids[job.Victim], syscall.SIGKILL)
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the ranks did not finish within %v", limit)
	for r := 0; r < n; r++ {
		if job.Scenario == "die" && r == job.Victim {
			require.Equal(t, 3, codes[r], "the victim exits with 3: %s", logs[r])
			continue
		}
		if job.Scenario == "revoke" && r == job.Victim {
			require.Equal(t, -1, codes[r], "the victim is killed: %s", logs[r])
			continue
		}
		require.Zero(t, codes[r], "rank %d: %s", r, logs[r])
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.json", r)))
		require.NoError(t, err, "rank %d wrote no result: %s", r, logs[r])
		require.NoError(t, json.Unmarshal(b, &outs[r]))
	}
	return outs, pids
}

// TestHeteroPlacements checks every collective, type, op and root exactly
// on mixed placements of emulated vendors and host ranks.
func TestHeteroPlacements(t *testing.T) {
	cases := []struct {
		name      string
		placement string
		env       []string
		clusters  int
		homo      bool
		path      string // AllReduce's path
		counts    []int  // default 1 and 37
		types     []int  // default all
	}{
		{"large messages through the pipeline", "nvidia:2,host:1,nvidia:1", []string{"FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c-shm", []int{70001}, []int{int(sdk.Float32)}},
		{"nvidia and host, 2 clusters of 2", "nvidia:2,host:2", nil, 2, false, "c2c-shm", nil, nil},
		{"3 clusters 2+1+2 by split list", "nvidia:2,host:1,nvidia:2", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,1,2", "FLAGCX_NET_CHUNK_SIZE=64"}, 3, false, "c2c-shm", nil, nil},
		{"non-contiguous cluster and a cluster of one", "nvidia:1,host:1,nvidia:1", nil, 2, false, "c2c-shm", nil, nil},
		{"split list on one vendor 2,2", "nvidia:4", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,2"}, 2, false, "c2c-shm", nil, nil},
		{"emulated CUDA reduces on its devices: split 2,2, async streams", "nvidia:4", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,2", "FLAGCX_NET_CHUNK_SIZE=32K", "FLAGCX_VENDORSIM_STREAM_DELAY_US=200"}, 2, false, "c2c-shm+device", []int{70001}, nil},
		{"emulated CUDA folds every reduction on its devices: split 1,1", "nvidia:2", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1", "FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c-shm+device", []int{70001}, nil},
		{"emulated CUDA folds every reduction on its devices: split 1,1,1", "nvidia:3", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1,1", "FLAGCX_NET_CHUNK_SIZE=32K"}, 3, false, "c2c-shm+device", []int{70001}, nil},
		{"one device beside host ranks: the host ranks fold", "nvidia:1,host:2", []string{"FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c-shm", []int{70001}, nil},
		{"emulated CUDA reduces on its devices: split 1,1,2", "nvidia:4", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1,2", "FLAGCX_NET_CHUNK_SIZE=32K"}, 3, false, "c2c-shm+device", []int{70001}, nil},
		{"split list on one vendor 1,1", "nvidia:2", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1"}, 2, false, "c2c-shm", nil, nil},
		{"forced host path", "nvidia:2,host:2", []string{"FLAGCX_USE_HOST_COMM=1", "FLAGCX_NET_CHUNK_SIZE=64"}, 2, false, "host", nil, nil},
		{"staged pipeline (no shared memory: TCP)", "nvidia:2,host:1,nvidia:1", []string{"FLAGCX_SHM_DISABLE=1", "FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c", []int{70001}, []int{int(sdk.Float32)}},
		{"staged split 1,1: the leaders fold Reduce and ReduceScatter on their devices (TCP)", "nvidia:2", []string{"FLAGCX_SHM_DISABLE=1", "FLAGCX_CLUSTER_SPLIT_LIST=1,1", "FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c", []int{70001}, nil},
		{"staged split 1,1: chunks beyond the fused exchange fold AllReduce on the devices (TCP)", "nvidia:2", []string{"FLAGCX_SHM_DISABLE=1", "FLAGCX_CLUSTER_SPLIT_LIST=1,1"}, 2, false, "c2c", []int{300001}, nil},
		{"staged, 3 clusters (no shared memory: TCP)", "nvidia:2,host:1,nvidia:2", []string{"FLAGCX_SHM_DISABLE=1", "FLAGCX_CLUSTER_SPLIT_LIST=2,1,2", "FLAGCX_NET_CHUNK_SIZE=64"}, 3, false, "c2c", nil, nil},
		{"a v2 plugin registers the windows: zero copy", "example:2,host:1", nil, 2, false, "c2c-shm", nil, nil},
		{"a v1 plugin cannot: the staged path", "example-v1:2,host:1", nil, 2, false, "c2c", nil, nil},
		{"device reductions (reduceLocal), split 1,1", "example:2", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1", "FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c-shm+device", []int{70001}, nil},
		{"device reductions after intra steps, uneven parts, 3 clusters", "example:6", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,1,3", "FLAGCX_NET_CHUNK_SIZE=32K"}, 3, false, "c2c-shm+device", []int{70001}, []int{int(sdk.Float32), int(sdk.Int8), int(sdk.Bfloat16)}},
		{"device reductions, even parts of 2,2", "example:4", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,2", "FLAGCX_NET_CHUNK_SIZE=32K"}, 2, false, "c2c-shm+device", []int{70004}, []int{int(sdk.Float32), int(sdk.Float16)}},
		{"FLAGCX_DEVICE_REDUCE=0 reduces on the host", "example:2", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1", "FLAGCX_NET_CHUNK_SIZE=32K", "FLAGCX_DEVICE_REDUCE=0"}, 2, false, "c2c-shm", []int{70001}, []int{int(sdk.Float32)}},
		{"homogeneous cambricon (no float64, no avg: bytes and host path)", "cambricon:2", nil, 1, true, "vendor", nil, nil},
		{"homogeneous nvidia", "nvidia:2", nil, 1, true, "vendor", nil, nil},
		{"three vendors 2+1+2", "kunlunxin:2,metax:1,host:2", nil, 3, false, "c2c-shm", nil, nil},
		{"every vendor", "nvidia:1,kunlunxin:1,cambricon:2,metax:1,host:1", nil, 5, false, "c2c-shm", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			placement := expand(tc.placement)
			requirePlugins(t, placement)
			start := time.Now()
			counts := tc.counts
			if counts == nil {
				counts = []int{1, 37}
			}
			outs := runRanks(t, placement, workerJob{Scenario: "matrix", Counts: counts, Types: tc.types}, tc.env, 3*time.Minute)
			for r, o := range outs {
				require.Empty(t, o.Error, "rank %d", r)
				require.Empty(t, o.Failures, "rank %d", r)
				require.NotZero(t, o.Cases)
				require.Equal(t, tc.clusters, o.Clusters, "rank %d: %s", r, o.Layout)
				require.Equal(t, tc.homo, o.Homogeneous)
				require.Contains(t, o.Paths, "allreduce: "+tc.path, "rank %d", r)
				if strings.HasSuffix(tc.path, "+device") {
					// Every reduction folds on the devices (its pipelined calls).
					require.Contains(t, o.Paths, "reduce: "+tc.path, "rank %d", r)
					require.Contains(t, o.Paths, "reducescatter: "+tc.path, "rank %d", r)
				}
			}
			t.Logf("%s: %d ranks, %d checks each, %v: %s", tc.placement, len(placement), outs[0].Cases, time.Since(start).Round(time.Millisecond), outs[0].Layout)
		})
	}
}

// TestHeteroRankDies: a rank that dies mid-collective makes every other
// rank return an error within the deadline, whichever cluster it was in.
func TestHeteroRankDies(t *testing.T) {
	const timeout = 3 // seconds, FLAGCX_TIMEOUT
	cases := []struct {
		victim int
		inside bool
	}{{1, true}, {1, false}, {2, true}, {2, false}, {3, false}}
	for _, tc := range cases {
		victim := tc.victim
		t.Run(fmt.Sprintf("rank %d inside %v", tc.victim, tc.inside), func(t *testing.T) {
			placement := expand("nvidia:2,host:2")
			requirePlugins(t, placement)
			env := []string{fmt.Sprintf("FLAGCX_TIMEOUT=%d", timeout), "FLAGCX_VENDORSIM_TIMEOUT=5", "FLAGCX_NET_CHUNK_SIZE=1M"}
			outs := runRanks(t, placement, workerJob{Scenario: "die", Victim: victim, Inside: tc.inside}, env, time.Minute)
			for r, o := range outs {
				if r == victim {
					continue
				}
				require.NotEmpty(t, o.Error, "rank %d returned no error", r)
				require.NotContains(t, o.Error, "succeeded", "rank %d", r)
				require.Less(t, o.ErrAfter, float64(3*timeout), "rank %d took %.1fs: %s", r, o.ErrAfter, o.Error)
				t.Logf("rank %d failed after %.2fs: %s", r, o.ErrAfter, o.Error)
			}
		})
	}
}
