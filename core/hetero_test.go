package core_test

import (
	"fmt"
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
func startHetero(t *testing.T, n int, opts ...core.Option) []*core.Comm {
	t.Helper()
	cfg := loopback(20 * time.Second)
	id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
	require.NoError(t, err)
	comms := make([]*core.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			all := append([]core.Option{core.WithBackend(core.HostBackend()), core.WithEnv(noEnv), core.WithNetConfig(cfg)}, opts...)
			comms[r], errs[r] = core.InitRank(id, n, r, all...)
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
func checkAll(t *testing.T, comms []*core.Comm, cases []reference.Case) {
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
				go func(r int, comm *core.Comm) {
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
					var c *core.Comm
					c, errs[r] = core.InitRank(id, 3, r, core.WithBackend(core.HostBackend()), core.WithEnv(noEnv),
						core.WithNetConfig(cfg), core.WithSplitList(tc.split))
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

// TestHeteroGroups: a group with several messages to every rank, itself
// included, across and within clusters, arrives in order.
func TestHeteroGroups(t *testing.T) {
	const n = 4
	comms := startHetero(t, n, core.WithSplitList([]int{1, 2, 1}))
	msg := func(from, to, k int) []byte {
		b := make([]byte, 8+from+to+k)
		for i := range b {
			b[i] = byte(from*31 + to*7 + k*3 + i)
		}
		return b
	}
	errs := make([]error, n)
	got := make([][][]byte, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *core.Comm) {
			defer wg.Done()
			got[r] = make([][]byte, 2*n)
			c.GroupStart()
			for k := 0; k < 2; k++ {
				for p := 0; p < n; p++ {
					if err := c.Send(core.HostBuffer(msg(r, p, k)), len(msg(r, p, k)), sdk.Uint8, p, 0); err != nil {
						errs[r] = err
					}
					got[r][k*n+p] = make([]byte, len(msg(p, r, k)))
					if err := c.Recv(core.HostBuffer(got[r][k*n+p]), len(got[r][k*n+p]), sdk.Uint8, p, 0); err != nil {
						errs[r] = err
					}
				}
			}
			if err := c.GroupEnd(); errs[r] == nil {
				errs[r] = err
			}
		}(r, c)
	}
	wg.Wait()
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r], "rank %d", r)
		for k := 0; k < 2; k++ {
			for p := 0; p < n; p++ {
				require.Equal(t, msg(p, r, k), got[r][k*n+p], "rank %d, message %d from %d", r, k, p)
			}
		}
	}
}

// TestHeteroMisuse: bad calls fail on the calling rank with a reason and
// never panic.
func TestHeteroMisuse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split []int
	}{
		{"two clusters", []int{1, 1}},
		{"host placement", nil},
	} {
		t.Run(tc.name, func(t *testing.T) { checkMisuse(t, startHetero(t, 2, core.WithSplitList(tc.split))) })
	}
}

// checkMisuse is TestHeteroMisuse on one communicator of 2 host ranks.
func checkMisuse(t *testing.T, comms []*core.Comm) {
	c := comms[0]
	buf := core.HostBuffer(make([]byte, 16))
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"device memory on a host rank", func() error {
			return c.AllReduce(core.DeviceBuffer(0x1000, 16), buf, 4, sdk.Float32, sdk.Sum, 0)
		}, "pass host memory (core.HostBuffer)"},
		{"short buffer", func() error { return c.AllReduce(buf, buf, 5, sdk.Float32, sdk.Sum, 0) }, "send buffer holds 16 bytes but 5 elements of float32 need 20"},
		{"bad root", func() error { return c.Broadcast(buf, buf, 4, sdk.Float32, 2, 0) }, "root 2 is out of range"},
		{"bad type", func() error { return c.AllGather(buf, buf, 1, 77, 0) }, "data type 77"},
		{"bad op", func() error { return c.ReduceScatter(buf, buf, 1, sdk.Int8, 42, 0) }, "reduction op 42"},
		{"negative count", func() error { return c.Gather(buf, buf, -1, sdk.Int8, 0, 0) }, "count -1"},
		{"bad peer", func() error { return c.Send(buf, 1, sdk.Int8, 9, 0) }, "peer 9 is out of range"},
		{"short alltoallv arrays", func() error {
			return c.AlltoAllv(buf, []int{1}, []int{0}, buf, []int{1}, []int{0}, sdk.Int8, 0)
		}, "there are 2 ranks: pass one count and one displacement per rank"},
		{"GroupEnd alone", c.GroupEnd, "GroupEnd without GroupStart"},
		{"barrier in a group", func() error {
			c.GroupStart()
			defer c.GroupEnd()
			return c.Barrier()
		}, "a barrier cannot be grouped"},
		{"bad slice", func() error { _, err := buf.Slice(8, 9); return err }, "keep it inside the buffer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			is := sdk.ErrInvalidArgument
			if strings.Contains(tc.name, "group") || strings.Contains(tc.name, "Group") { // misuse of groups, not a bad argument
				is = sdk.ErrInvalidUsage
			}
			require.ErrorIs(t, err, is, err.Error())
			require.Contains(t, err.Error(), tc.want, "the host engine and the general path check with sdk's one checker, in its words")
		})
	}
	// A group with a bad operation is refused as a whole.
	c.GroupStart()
	require.Error(t, c.Send(buf, 1, sdk.Int8, 9, 0))
	err := c.GroupEnd()
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.Contains(t, err.Error(), "not run")
	// The communicator still works: nothing was sent.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, cm := range comms {
		wg.Add(1)
		go func(r int, cm *core.Comm) {
			defer wg.Done()
			errs[r] = cm.Barrier()
		}(r, cm)
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
}

// TestHeteroAbort: Abort from another goroutine ends a collective that
// waits for a peer, and the communicator refuses further calls.
func TestHeteroAbort(t *testing.T) {
	comms := startHetero(t, 2, core.WithSplitList([]int{1, 1}))
	done := make(chan error, 1)
	buf := core.HostBuffer(make([]byte, 1<<20))
	go func() { done <- comms[0].AllReduce(buf, buf, 1<<18, sdk.Float32, sdk.Sum, 0) }()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, comms[0].Abort())
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the collective did not return after Abort")
	}
	err := comms[0].Barrier()
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	// The peer, waiting on the aborted rank, fails too.
	err = comms[1].AllReduce(buf, buf, 1<<18, sdk.Float32, sdk.Sum, 0)
	require.Error(t, err)
	// It finds rank 0 gone and revokes the communicator: its later calls
	// fail with that verdict.
	var re *core.RevokedError
	require.ErrorAs(t, comms[1].Barrier(), &re, "a failed schedule revokes the communicator")
	require.Equal(t, []int{0}, re.Failed)
}

// TestHeteroShmPlane: clusters of host ranks in one process share the
// host's windows, so AllReduce, Reduce, Broadcast, AllGather and
// ReduceScatter take the zero-copy plane (sched.PathShm): exact for every
// type, op and root, in one step (every collective's small calls) and
// through many chunks that reuse few slots, with parts that do not divide
// evenly.
func TestHeteroShmPlane(t *testing.T) {
	slots := sched.ShmSlots
	t.Cleanup(func() { sched.ShmSlots = slots })
	shmColls := map[sdk.Collective]sdk.Collective{
		sdk.AllReduce: sdk.AllReduce, sdk.Reduce: sdk.Reduce, sdk.Broadcast: sdk.Broadcast,
		sdk.AllGather: sdk.AllGather, sdk.ReduceScatter: sdk.ReduceScatter,
	}
	for _, tc := range []struct {
		name   string
		split  []int
		slots  int
		counts []int
	}{
		{"2 clusters of 1, one step and 2 slots", []int{1, 1}, 2, []int{1, 37, 70001}},
		{"2+1+2, 1 slot", []int{2, 1, 2}, 1, []int{5, 30011}},
		{"3+2, 3 slots", []int{3, 2}, 3, []int{66001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched.ShmSlots = tc.slots
			n := 0
			for _, s := range tc.split {
				n += s
			}
			comms := startHetero(t, n, core.WithSplitList(tc.split), core.WithChunk(8<<10))
			for _, coll := range shmColls {
				for _, count := range tc.counts {
					p, err := core.SchedPlan(comms[0], 0, sched.Call{Coll: coll, Count: count, DType: sdk.Float32, Op: sdk.Sum})
					require.NoError(t, err)
					require.Equal(t, sched.PathShm, p.Path, "%s", p)
					in := count * 4 // what a rank puts in: the message, or ReduceScatter's n blocks
					if coll == sdk.ReduceScatter {
						in *= n
					}
					require.Equal(t, (in+63)/64*64*n <= sched.ShmOneShot, p.Shm.OneShot, "%s count %d: one step", coll, count)
					if count*4 > 8<<10 {
						require.Greater(t, p.Chunks, 2*tc.slots, "chunks reuse the slots")
					}
				}
			}
			var cases []reference.Case
			for _, c := range heterotest.Matrix(n, tc.counts, sdk.AllDataTypes(), 11) {
				if _, ok := shmColls[c.Coll]; ok {
					cases = append(cases, c)
				}
			}
			checkAll(t, comms, cases)
		})
	}
}

// TestHostPlacementClosed: on the host placement, whose calls go to the
// host engine straight, a destroyed or aborted communicator refuses every
// call as misuse, as on any other placement.
func TestHostPlacementClosed(t *testing.T) {
	comms := startHetero(t, 2)
	buf := core.HostBuffer(make([]byte, 16))
	require.NoError(t, comms[0].Abort())
	require.NoError(t, comms[1].Destroy())
	for r, c := range comms {
		for name, call := range map[string]func() error{
			"AllReduce": func() error { return c.AllReduce(buf, buf, 4, sdk.Float32, sdk.Sum, 0) },
			"Send":      func() error { return c.Send(buf, 4, sdk.Float32, 1-r, 0) },
			"Barrier":   c.Barrier,
		} {
			err := call()
			require.ErrorIs(t, err, sdk.ErrInvalidUsage, "rank %d, %s: %v", r, name, err)
			require.ErrorContains(t, err, "destroyed or aborted", "rank %d, %s", r, name)
		}
	}
}

// TestSplitOfClusters: a communicator of several clusters splits into
// communicators that keep each rank's backend and run every collective
// exactly; the new ones are not split further.
func TestSplitOfClusters(t *testing.T) {
	const n = 4
	comms := startHetero(t, n, core.WithSplitList([]int{1, 3}), core.WithChunk(64))
	require.False(t, comms[0].IsHomogeneous())
	subs := make([]*core.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *core.Comm) {
			defer wg.Done()
			subs[r], errs[r] = c.Split(r%2, -r)
		}(r, c)
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, 2, subs[r].Count())
		require.Equal(t, 1-r/2, subs[r].Rank(), "keys reverse the order")
		require.Equal(t, core.HostBackend(), subs[r].Backend())
		require.True(t, subs[r].IsHomogeneous())
		t.Cleanup(func() { subs[r].Destroy() })
	}
	for color := 0; color < 2; color++ {
		checkAll(t, []*core.Comm{subs[color+2], subs[color]}, heterotest.Matrix(2, []int{37}, []sdk.DataType{sdk.Float32, sdk.Int64}, 5))
	}
}
