package core_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// revokeDeadline is FLAGCX_TIMEOUT of the revoke tests: a survivor that
// waited it out would show, since the revoke reaches them all at once.
const revokeDeadline = 60 * time.Second

// survivorResult is what a survivor saw: the error that ended its loop of
// AllReduces and when.
type survivorResult struct {
	err error
	at  time.Time
}

// runUntilFailure runs AllReduces on every rank; the victims abort their
// communicator (in one process, a rank's death as its peers see it) after
// a seeded random number of rounds, in the middle of their next call.
// It returns the survivors' results, indexed by rank.
func runUntilFailure(t *testing.T, comms []*core.Comm, victims []int, seed uint64) []survivorResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	dieAfter := rng.IntN(5)
	// The victims go together (a host lost at once): whoever comes to
	// the round first aborts them all.
	var dieOnce sync.Once
	delay := time.Duration(rng.IntN(2000)) * time.Microsecond
	t.Logf("seed %d: victims %v abort after %d rounds and %v", seed, victims, dieAfter, delay)
	res := make([]survivorResult, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send, recv := make([]byte, 4<<16), make([]byte, 4<<16)
			for round := 0; round < 10000; round++ {
				if slices.Contains(victims, r) && round == dieAfter {
					dieOnce.Do(func() {
						go func() {
							time.Sleep(delay)
							// All at once: one after the other, a victim
							// could still answer the survivors' probe while
							// the first one's release ran.
							for _, v := range victims {
								go func() { _ = comms[v].Abort() }()
							}
						}()
					})
				}
				err := c.AllReduce(core.HostBuffer(send), core.HostBuffer(recv), 1<<16, sdk.Float32, sdk.Sum, 0)
				if err != nil {
					res[r] = survivorResult{err: err, at: time.Now()}
					return
				}
			}
		}()
	}
	wg.Wait()
	return res
}

// requireRevoked checks that every survivor got the one verdict naming the
// victims and their host, and that none waited out its deadline.
func requireRevoked(t *testing.T, res []survivorResult, victims []int) {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	var first, last time.Time
	var late time.Duration // the latest survivor's error after the verdict
	for r, s := range res {
		if slices.Contains(victims, r) {
			continue
		}
		var re *core.RevokedError
		require.ErrorAs(t, s.err, &re, "rank %d", r)
		require.ErrorIs(t, s.err, sdk.ErrRemoteError)
		require.Equal(t, victims, re.Failed, "rank %d: %v", r, s.err)
		require.Equal(t, slices.Repeat([]string{host}, len(victims)), re.Hosts)
		require.Equal(t, r, re.Rank)
		require.Equal(t, "AllReduce", re.Op)
		late = max(late, s.at.Sub(re.At))
		if first.IsZero() || s.at.Before(first) {
			first = s.at
		}
		if s.at.After(last) {
			last = s.at
		}
	}
	t.Logf("the survivors' errors came within %v of each other, the last %v after the verdict (deadline %v)", last.Sub(first), late, revokeDeadline)
	require.Less(t, late, revokeDeadline/2, "a survivor heard of the verdict late")
	require.Less(t, last.Sub(first), revokeDeadline/2, "a survivor waited out its deadline rather than hear of the revoke")
}

// shrinkAll shrinks every survivor's communicator by victims, aborts the
// old ones and returns the new ones in their new rank order.
func shrinkAll(t *testing.T, comms []*core.Comm, victims []int) []*core.Comm {
	t.Helper()
	out := make([]*core.Comm, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r], errs[r] = c.Shrink(victims)
		}()
	}
	wg.Wait()
	var survivors []*core.Comm
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		if slices.Contains(victims, r) {
			require.Nil(t, out[r], "an excluded rank gets no communicator")
			continue
		}
		require.NotNil(t, out[r])
		require.Equal(t, len(survivors), out[r].Rank(), "old rank %d", r)
		require.Equal(t, len(comms)-len(victims), out[r].Count())
		survivors = append(survivors, out[r])
	}
	t.Cleanup(func() {
		for _, c := range survivors {
			_ = c.Destroy()
		}
	})
	return survivors
}

// TestRevokeAndShrink: host ranks over TCP in one process, in homogeneous
// and 3-cluster layouts; victims die mid-AllReduce at a seeded random
// point; every survivor's call ends with the one *RevokedError naming
// them, the survivors shrink, and every collective is exact on the new
// communicator, whose clusters lost the victims (a cluster that lost its
// leader is led by its next rank; one that lost every rank is gone).
func TestRevokeAndShrink(t *testing.T) {
	cases := []struct {
		name     string
		shm      bool
		n        int
		split    []int
		victims  []int
		clusters [][]int // the new communicator's clusters
	}{
		{"homogeneous, a middle rank", false, 4, nil, []int{2}, [][]int{{0, 1, 2}}},
		{"homogeneous, rank 0", false, 3, nil, []int{0}, [][]int{{0, 1}}},
		{"shared memory, homogeneous", true, 3, nil, []int{1}, [][]int{{0, 1}}},
		{"3 clusters, one loses its leader", false, 6, []int{2, 2, 2}, []int{2}, [][]int{{0, 1}, {2}, {3, 4}}},
		{"3 clusters, one loses every rank", false, 6, []int{2, 2, 2}, []int{2, 3}, [][]int{{0, 1}, {2, 3}}},
		{"shared memory, 3 clusters", true, 5, []int{2, 1, 2}, []int{2}, [][]int{{0, 1}, {2, 3}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.shm {
				t.Setenv("FLAGCX_SHM_DISABLE", "1")
			}
			comms := startRevocable(t, tc.n, core.WithSplitList(tc.split))
			res := runUntilFailure(t, comms, tc.victims, uint64(time.Now().UnixNano())+uint64(i))
			requireRevoked(t, res, tc.victims)
			survivors := shrinkAll(t, comms, tc.victims)
			requireClusters(t, survivors[0], tc.clusters)
			checkAll(t, survivors, heterotest.Matrix(len(survivors), []int{1, 37}, []sdk.DataType{sdk.Float32, sdk.Int64}, 5))
			for _, c := range append(comms, survivors...) {
				_ = c.Abort()
			}
			require.Empty(t, core.FlagcxFiles(t), "nothing left in /dev/shm")
		})
	}
}

// TestPlannedShrink: every rank alive, the survivors shrink without a
// rank that calls Shrink too (and gets nil); the old communicator stays
// usable, the new one is exact.
func TestPlannedShrink(t *testing.T) {
	comms := startRevocable(t, 5, core.WithSplitList([]int{2, 1, 2}))
	survivors := shrinkAll(t, comms, []int{0, 2})
	requireClusters(t, survivors[0], [][]int{{0}, {1, 2}})
	checkAll(t, survivors, heterotest.Matrix(len(survivors), []int{1, 37}, []sdk.DataType{sdk.Float32}, 9))
	checkAll(t, comms, heterotest.Matrix(len(comms), []int{5}, []sdk.DataType{sdk.Int32}, 3))
}

// TestShrinkBadExclude: a bad exclude list is one clear argument error.
func TestShrinkBadExclude(t *testing.T) {
	comms := startRevocable(t, 2)
	for _, tc := range []struct {
		exclude []int
		want    string
	}{
		{[]int{2}, "excluded rank 2 is out of range for 2 ranks"},
		{[]int{1, 1}, "rank 1 is excluded twice"},
		{[]int{0, 1}, "every rank is excluded"},
	} {
		_, err := comms[0].Shrink(tc.exclude)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.ErrorContains(t, err, tc.want)
	}
}

// startRevocable is startHetero with a deadline no survivor should wait
// out; the old communicators are aborted at the end (a revoked one has
// nothing to wait for).
func startRevocable(t *testing.T, n int, opts ...core.Option) []*core.Comm {
	t.Helper()
	comms := startHetero(t, n, append(opts, core.WithTimeout(revokeDeadline))...)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	return comms
}

func requireClusters(t *testing.T, c *core.Comm, want [][]int) {
	t.Helper()
	var got [][]int
	for _, cl := range c.Layout().Clusters {
		got = append(got, cl.Ranks)
	}
	require.Equal(t, want, got)
	for _, cl := range c.Layout().Clusters {
		require.Equal(t, cl.Ranks[0], cl.Leader)
	}
}

// TestDoGivesUp: a rank that gives up on its call (its context's deadline
// passes while a peer has not joined) revokes the communicator: its call
// ends with ctx's error, the peer waiting in the same call ends with the
// verdict at once, the late rank's next call too; all of them shrink with
// no exclusion to a fresh communicator that is exact.
func TestDoGivesUp(t *testing.T) {
	t.Setenv("FLAGCX_SHM_DISABLE", "1")
	comms := startRevocable(t, 3)
	errs := make([]error, 3)
	buf := func() core.Buffer { return core.HostBuffer(make([]byte, 4096)) }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		errs[0] = comms[0].Do(ctx, func() error {
			return comms[0].AllReduce(buf(), buf(), 1024, sdk.Float32, sdk.Sum, 0)
		})
	}()
	go func() {
		defer wg.Done()
		errs[1] = comms[1].AllReduce(buf(), buf(), 1024, sdk.Float32, sdk.Sum, 0)
	}()
	wg.Wait()
	<-comms[2].Revoked()
	errs[2] = comms[2].AllReduce(buf(), buf(), 1024, sdk.Float32, sdk.Sum, 0)
	require.ErrorIs(t, errs[0], context.DeadlineExceeded)
	for r, err := range errs {
		var re *core.RevokedError
		require.ErrorAs(t, err, &re, "rank %d", r)
		require.Empty(t, re.Failed)
		require.Equal(t, 0, re.By)
		require.Equal(t, "rank 0 gave up on its call: context deadline exceeded", re.Cause)
	}
	require.NotErrorIs(t, errs[1], context.DeadlineExceeded, "only the rank that gave up")
	fresh := shrinkAll(t, comms, nil)
	checkAll(t, fresh, heterotest.Matrix(3, []int{7}, []sdk.DataType{sdk.Float32}, 2))
}
