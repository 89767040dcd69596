package core_test

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// ranSteps records the steps the executors ran, run by run: a plan runs
// once per call (a communicator keeps its plans, so one plan may run in
// several calls).
type ranSteps struct {
	mu    sync.Mutex
	runs  []planRun
	steps map[planRun][]int
}

// planRun is one call's run of a plan.
type planRun struct {
	p    *sched.Plan
	call uint64
}

func recordSteps(t *testing.T) *ranSteps {
	r := &ranSteps{steps: map[planRun][]int{}}
	core.SetStepRan(func(p *sched.Plan, call uint64, i int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		k := planRun{p, call}
		if _, ok := r.steps[k]; !ok {
			r.runs = append(r.runs, k)
		}
		r.steps[k] = append(r.steps[k], i)
	})
	t.Cleanup(func() { core.SetStepRan(nil) })
	return r
}

// take returns what was recorded and forgets it.
func (r *ranSteps) take() ([]planRun, map[planRun][]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs, steps := r.runs, r.steps
	r.runs, r.steps = nil, map[planRun][]int{}
	return runs, steps
}

// runCase runs c on every rank (out of place and in place where it has
// that form) and requires exact results.
func runCase(t *testing.T, comms []*core.Comm, mems []heterotest.Mem, streams []loader.Stream, c reference.Case) {
	t.Helper()
	for _, inPlace := range []bool{false, true} {
		if inPlace && !heterotest.InPlaceChecked(c.Coll) {
			continue
		}
		wrong := make([]int, len(comms))
		errs := make([]error, len(comms))
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				wrong[r], errs[r] = heterotest.Run(comms[r], mems[r], c, inPlace, streams[r])
			}(r)
		}
		wg.Wait()
		for r := range comms {
			require.NoError(t, errs[r], "%s, rank %d", heterotest.Name(c, inPlace), r)
			require.Zero(t, wrong[r], "%s, rank %d", heterotest.Name(c, inPlace), r)
		}
	}
}

// stepLineRE matches the step lines of a printed plan (sched.Plan.StepLine).
var stepLineRE = regexp.MustCompile(`^ +\d+ (intra|d2h|net|h2d) `)

// requireRanAsPrinted: every plan an executor ran is the plan a printer
// builds for the same rank and call, and the executor ran exactly its
// steps, each once (the shared-memory plane: in plan order).
func requireRanAsPrinted(t *testing.T, comm *core.Comm, ran *ranSteps, wantPath sched.Path, name string) {
	t.Helper()
	runs, steps := ran.take()
	if wantPath != sched.PathHostComm && wantPath != sched.PathVendor {
		// (A single cluster's library runs its calls itself, the host
		// engine or the vendor's, but for a group of sends and receives.)
		require.NotEmpty(t, runs, "%s: an executor ran the call", name)
	}
	for _, run := range runs {
		p := run.p
		require.Equal(t, wantPath, p.Path, "%s: %s", name, p)
		printed, err := core.SchedPlan(comm, p.Rank, p.Call)
		require.NoError(t, err)
		if p.Shm != nil && p.Shm.Registered {
			require.NotNil(t, printed.Registered, "%s: the registered plan that ran is printed", name)
			printed = printed.Registered
		}
		require.Equal(t, printed.String(), p.String(), "%s: the printed plan is the plan that ran", name)
		idx := steps[run]
		if p.Path == sched.PathShm {
			require.True(t, sort.IntsAreSorted(idx), "%s, rank %d: the shared-memory plane runs its steps in plan order: %v", name, p.Rank, idx)
		}
		sort.Ints(idx)
		var ranLines, printedLines []string
		for _, i := range idx {
			ranLines = append(ranLines, p.StepLine(i))
		}
		var full strings.Builder
		printed.Format(&full, 0)
		own, _, _ := strings.Cut(full.String(), "  instead, when every host rank's buffers are registered")
		for _, line := range strings.Split(strings.TrimRight(own, "\n"), "\n") {
			if stepLineRE.MatchString(line) {
				printedLines = append(printedLines, line)
			}
		}
		require.Len(t, printedLines, len(printed.Steps), "%s: Format(0) lists every step", name)
		require.Equal(t, printedLines, ranLines, "%s, rank %d: the steps that ran are the steps printed", name, p.Rank)
	}
}

// TestPlansThatRunArePlansThatPrint: for host ranks alone, host clusters
// with and without the shared windows, one emulated vendor, and an
// emulated vendor beside the host with and without the windows, every
// collective runs exactly, and the steps the executors run are the steps
// `flagcx bench --print-plan` prints.
func TestPlansThatRunArePlansThatPrint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ranks string // "h" host, "d" emulated nvidia device, per rank
		opts  []core.Option
		noShm bool       // FLAGCX_SHM_DISABLE=1: the staged schedules
		shm   sched.Path // path of AllReduce, Reduce, Broadcast, AllGather, ReduceScatter
		other sched.Path // path of the others
		// devfold: the reductions fold on the devices (reduceLocal) where
		// their plans can (requireDevFold).
		devfold bool
	}{
		{"host only", "hh", nil, false, sched.PathHostComm, sched.PathHostComm, false},
		{"host clusters 2,1, shared windows", "hhh", []core.Option{core.WithSplitList([]int{2, 1}), core.WithChunk(8 << 10)}, false, sched.PathShm, sched.PathP2P, false},
		{"host clusters 1,1, staged", "hh", []core.Option{core.WithSplitList([]int{1, 1}), core.WithChunk(8 << 10)}, true, sched.PathC2C, sched.PathP2P, false},
		{"one vendor", "dd", nil, false, sched.PathVendor, sched.PathVendor, false},
		{"one vendor split 1,1, shared windows", "dd", []core.Option{core.WithSplitList([]int{1, 1}), core.WithChunk(8 << 10)}, false, sched.PathShm, sched.PathP2P, true},
		{"one vendor split 2,2, shared windows", "dddd", []core.Option{core.WithSplitList([]int{2, 2}), core.WithChunk(8 << 10)}, false, sched.PathShm, sched.PathP2P, true},
		{"one vendor split 1,1,1, shared windows", "ddd", []core.Option{core.WithSplitList([]int{1, 1, 1}), core.WithChunk(8 << 10)}, false, sched.PathShm, sched.PathP2P, true},
		{"vendor 1 and host 2, shared windows", "dhh", []core.Option{core.WithChunk(8 << 10)}, false, sched.PathShm, sched.PathP2P, false},
		{"vendor 2 and host 1, shared windows", "ddh", []core.Option{core.WithChunk(8 << 10)}, false, sched.PathShm, sched.PathP2P, false},
		{"vendor 2 and host 1, staged", "ddh", []core.Option{core.WithChunk(8 << 10)}, true, sched.PathC2C, sched.PathP2P, true},
		{"one vendor split 1,1, staged", "dd", []core.Option{core.WithSplitList([]int{1, 1}), core.WithChunk(8 << 10)}, true, sched.PathC2C, sched.PathP2P, true},
		{"one vendor split 1,1, staged, FLAGCX_DEVICE_REDUCE=0", "dd", []core.Option{core.WithSplitList([]int{1, 1}), core.WithChunk(8 << 10), core.WithEnv(noDeviceReduce)}, true, sched.PathC2C, sched.PathP2P, false},
		{"one vendor split 1,1, shared windows, FLAGCX_DEVICE_REDUCE=0", "dd", []core.Option{core.WithSplitList([]int{1, 1}), core.WithChunk(8 << 10), core.WithEnv(noDeviceReduce)}, false, sched.PathShm, sched.PathP2P, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noShm {
				t.Setenv("FLAGCX_SHM_DISABLE", "1")
			}
			comms, mems, streams := startMixed(t, tc.ranks, tc.opts...)
			ran := recordSteps(t)
			n := len(comms)
			for _, c := range heterotest.Matrix(n, []int{37, 70001}, []sdk.DataType{sdk.Float32}, 5) {
				if c.Op != reference.NoOp && c.Op != sdk.Sum && c.Op != sdk.Avg {
					continue
				}
				name := heterotest.Name(c, false)
				runCase(t, comms, mems, streams, c)
				want := tc.other
				if sched.ShmColl(c.Coll) {
					want = tc.shm
				}
				if c.Coll == sdk.Barrier {
					continue
				}
				requireRanAsPrinted(t, comms[0], ran, want, name)
				if c.Coll.Reduces() {
					requireDevFold(t, comms, c, tc.devfold)
				}
			}
		})
	}
}

// noDeviceReduce is an environment of FLAGCX_DEVICE_REDUCE=0 alone.
func noDeviceReduce(k string) (string, bool) { return "0", k == "FLAGCX_DEVICE_REDUCE" }

// requireDevFold: on every rank, c's plan folds on the devices where
// want says so and the plan can: on the shared windows a pipelined
// reduction (the host then folds none of it; only Reduce's root folds), on
// the staged path a device leader's ReduceScatter and the root's device
// leader's Reduce (the host then reduces nothing); on the host otherwise.
func requireDevFold(t *testing.T, comms []*core.Comm, c reference.Case, want bool) {
	t.Helper()
	name := heterotest.Name(c, false)
	for r, comm := range comms {
		p, err := core.SchedPlan(comm, r, sched.Call{Coll: c.Coll, Count: c.Count, DType: c.Type, Op: c.Op, Root: c.Root})
		require.NoError(t, err)
		folds := p.Count(sched.KindDevFold, -1)
		switch p.Path {
		case sched.PathShm:
			dev := want && !p.Shm.OneShot && c.Coll.Reduces()
			require.Equal(t, dev, p.Shm.DeviceReduce, "%s, rank %d: %s", name, r, p)
			switch {
			case !dev || (c.Coll == sdk.Reduce && r != c.Root):
				require.Zero(t, folds, "%s, rank %d: no device fold", name, r)
			default:
				require.Zero(t, p.Count(sched.KindFold, -1), "%s, rank %d: the host folds nothing", name, r)
				require.GreaterOrEqual(t, folds, p.Chunks, "%s, rank %d: a device fold a chunk", name, r)
			}
		case sched.PathC2C:
			l := p.Layout
			folder := l.ClusterOf(r).Leader // ReduceScatter: every leader
			if c.Coll == sdk.Reduce {
				folder = l.ClusterOf(c.Root).Leader
			}
			dev := want && c.Coll != sdk.AllReduce && r == folder && l.Members[r].OnDevice()
			if !dev {
				require.Zero(t, folds, "%s, rank %d: no device fold", name, r)
				continue
			}
			require.Equal(t, p.Chunks, folds, "%s, rank %d: a device fold a chunk", name, r)
			require.Zero(t, p.Count(sched.KindReduce, -1), "%s, rank %d: the host reduces nothing", name, r)
			require.Contains(t, p.Why, "(reduceLocal)", "%s, rank %d: the plan says so", name, r)
		default:
			require.Zero(t, folds, "%s, rank %d: no device fold", name, r)
		}
	}
}

// startMixed brings up one rank per letter of ranks as goroutines: "h" on
// the host backend, "d" on an emulated nvidia device of one plugin.
func startMixed(t *testing.T, ranks string, opts ...core.Option) ([]*core.Comm, []heterotest.Mem, []loader.Stream) {
	t.Helper()
	return startMixedNet(t, ranks, loopback(20*time.Second), opts...)
}

// startMixedNet is startMixed over the network cfg.
func startMixedNet(t *testing.T, ranks string, cfg hostnet.Config, opts ...core.Option) ([]*core.Comm, []heterotest.Mem, []loader.Stream) {
	t.Helper()
	n := len(ranks)
	var p *loader.Plugin
	if strings.Contains(ranks, "d") {
		path := testkit.Plugin(t, "nvidia")
		var err error
		p, err = loader.Open(path)
		require.NoError(t, err)
		require.NoError(t, p.Init(loader.InitOptions{Emulated: true, VendorsimDir: testkit.BuiltFile(t, "vendorsim"),
			Log: func(string, loader.LogLevel, string) {}}))
	}
	id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
	require.NoError(t, err)
	comms := make([]*core.Comm, n)
	mems := make([]heterotest.Mem, n)
	streams := make([]loader.Stream, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	dev := 0
	for r := 0; r < n; r++ {
		be := core.HostBackend()
		mems[r] = heterotest.HostMem{}
		if ranks[r] == 'd' {
			be = core.DeviceBackend(p, dev)
			mems[r] = heterotest.DeviceMem{P: p, Dev: dev}
			s, err := p.StreamCreate(dev)
			require.NoError(t, err)
			streams[r] = s
			dev++
		}
		wg.Add(1)
		go func(r int, be core.Backend) {
			defer wg.Done()
			all := append([]core.Option{core.WithBackend(be), core.WithEnv(noEnv), core.WithNetConfig(cfg)}, opts...)
			comms[r], errs[r] = core.InitRank(id, n, r, all...)
		}(r, be)
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
	return comms, mems, streams
}

// TestStagedAllReduceInPieces: two emulated device leaders over a TCP link
// of 4 sockets run an AllReduce from stagedMin up in pieces (the copy to
// the host in parts, each stripe sent when its part is there, copied back
// when reduced): exact in every op, in place and not, and the executor
// reports the plan's three steps as run, as printed. (Avg's plan scales
// between the AllReduce and the copy back: it runs unfused, exact.)
func TestStagedAllReduceInPieces(t *testing.T) {
	t.Setenv("FLAGCX_SHM_DISABLE", "1")
	cfg := loopback(20 * time.Second)
	cfg.Streams, cfg.AutoStreams = 4, false // as FLAGCX_SOCKET_NTHREADS would set it: not bounded by this machine's cores
	comms, mems, streams := startMixedNet(t, "dd", cfg, core.WithSplitList([]int{1, 1}))
	ran := recordSteps(t)
	for _, count := range []int{128<<10 + 1, 200001} { // 512 KiB + 4, and below the exchange's 1 MiB
		for _, op := range []sdk.RedOp{sdk.Sum, sdk.Avg, sdk.Max} {
			c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: op, NRanks: 2, Count: count, Seed: 9}
			before := core.StagedInPieces(comms[0])
			runCase(t, comms, mems, streams, c)
			pieces := 2
			if op == sdk.Avg {
				pieces = 0
			}
			require.Equal(t, before+pieces, core.StagedInPieces(comms[0]), "%s: out of place and in place ran in pieces", heterotest.Name(c, false))
			requireRanAsPrinted(t, comms[0], ran, sched.PathC2C, heterotest.Name(c, false))
		}
	}
}

// TestStagedAllReduceFoldsOnDevices: two emulated device leaders on the
// staged path, with chunks beyond sched.StagedFusedMax, exchange their
// partials and fold them on their devices: exact in every op, in place
// and not, the host reduces nothing, and the plan that runs is the plan
// printed; chunks within it keep the host engine's fused AllReduce.
func TestStagedAllReduceFoldsOnDevices(t *testing.T) {
	t.Setenv("FLAGCX_SHM_DISABLE", "1")
	comms, mems, streams := startMixed(t, "dd", core.WithSplitList([]int{1, 1}), core.WithChunk(2<<20))
	ran := recordSteps(t)
	for _, tc := range []struct {
		count int
		dt    sdk.DataType
		dev   bool
	}{
		{300001, sdk.Float32, true},  // one chunk of 1.2 MB
		{1200001, sdk.Float32, true}, // 3 chunks of 1.6 MB
		{400001, sdk.Int32, true},
		{200001, sdk.Float32, false}, // 800 KB: the fused exchange
	} {
		for _, op := range []sdk.RedOp{sdk.Sum, sdk.Avg, sdk.Max, sdk.Min, sdk.Prod} {
			c := reference.Case{Coll: sdk.AllReduce, Type: tc.dt, Op: op, NRanks: 2, Count: tc.count, Seed: 3}
			name := heterotest.Name(c, false)
			runCase(t, comms, mems, streams, c)
			requireRanAsPrinted(t, comms[0], ran, sched.PathC2C, name)
			for r, comm := range comms {
				p, err := core.SchedPlan(comm, r, sched.Call{Coll: sdk.AllReduce, Count: tc.count, DType: tc.dt, Op: op})
				require.NoError(t, err)
				require.Equal(t, tc.dev, p.Count(sched.KindDevFold, -1) == p.Chunks, "%s, rank %d: %s", name, r, p)
				require.Equal(t, !tc.dev, p.Count(sched.KindInter, sdk.AllReduce) > 0, "%s, rank %d", name, r)
			}
		}
	}
}

// TestPlansAreKept: a communicator builds a call shape's plan once and
// runs it again for the same shape (out of place and in place alike); a
// new shape gets a plan of its own.
func TestPlansAreKept(t *testing.T) {
	comms, mems, streams := startMixed(t, "dhh")
	ran := recordSteps(t)
	rank0 := func() []planRun {
		runs, _ := ran.take()
		var mine []planRun
		for _, r := range runs {
			if r.p.Rank == 0 {
				mine = append(mine, r)
			}
		}
		return mine
	}
	c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: 3, Count: 37, Seed: 1}
	runCase(t, comms, mems, streams, c)
	first := rank0()
	require.Len(t, first, 2, "out of place and in place")
	require.Same(t, first[0].p, first[1].p, "one plan for both calls")
	require.NotEqual(t, first[0].call, first[1].call)
	c.Count = 38
	runCase(t, comms, mems, streams, c)
	second := rank0()
	require.Len(t, second, 2)
	require.NotSame(t, first[0].p, second[0].p, "a new shape, a new plan")
	require.Equal(t, 38, second[0].p.Call.Count)
}
