package core_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// onRanks runs fn on every rank concurrently and returns each rank's error.
func onRanks(comms []*core.Comm, fn func(c *core.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

// TestGroupedCollectives: groups of 2 to 8 collectives of mixed kinds
// (with sends and receives among them) give every rank the reference's
// exact results on the host placement and on host ranks split into
// clusters (the shared-memory plane, the staged plan executor, the host
// path).
func TestGroupedCollectives(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		split []int
		host  bool
	}{
		{"host placement, 2 ranks", 2, nil, false},
		{"host placement, 3 ranks", 3, nil, false},
		{"host placement, 4 ranks", 4, nil, false},
		{"clusters 2+2", 4, []int{2, 2}, false},
		{"clusters 1+1+1", 3, []int{1, 1, 1}, false},
		{"host path, clusters 1+2", 3, []int{1, 2}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comms := startHetero(t, tc.n, core.WithSplitList(tc.split), core.WithHostPath(tc.host))
			for _, set := range heterotest.GroupSets(tc.n) {
				wrong := make([][]int, tc.n)
				errs := onRanks(comms, func(c *core.Comm) (err error) {
					wrong[c.Rank()], err = heterotest.RunGroup(c, heterotest.HostMem{}, set.Cases, 0)
					return err
				})
				for r := range comms {
					require.NoError(t, errs[r], "%s: rank %d", set.Name, r)
					require.Equal(t, make([]int, len(set.Cases)), wrong[r], "%s: rank %d: wrong elements per call", set.Name, r)
				}
			}
		})
	}
}

// TestGroupedCollectivesMisuse: a bad collective in a group fails when it
// is called and the group is then not run (no rank's buffers change),
// a barrier cannot be grouped, a small AllReduce that reads what an
// earlier one of the group writes is refused, and the communicator works
// afterwards.
func TestGroupedCollectivesMisuse(t *testing.T) {
	for _, split := range [][]int{nil, {1, 1}} {
		t.Run(fmt.Sprint("split ", split), func(t *testing.T) {
			comms := startHetero(t, 2, core.WithSplitList(split))
			cases := []groupMisuse{
				{"bad root", func(c *core.Comm, a, b core.Buffer) error { return c.Broadcast(a, b, 4, sdk.Float32, 5, 0) },
					sdk.ErrInvalidArgument, "root 5 is out of range"},
				{"short buffer", func(c *core.Comm, a, b core.Buffer) error { return c.AllGather(a, b, 4, sdk.Float32, 0) },
					sdk.ErrInvalidArgument, "recv buffer holds 16 bytes"},
				{"barrier", func(c *core.Comm, _, _ core.Buffer) error { return c.Barrier() },
					sdk.ErrInvalidUsage, "a barrier cannot be grouped"},
			}
			if split == nil { // what the host engine checks beyond sdk's checker
				cases = append(cases, groupMisuse{"reads an earlier allreduce's result", func(c *core.Comm, _, b core.Buffer) error {
					return c.AllReduce(b, b, 4, sdk.Float32, sdk.Sum, 0)
				}, sdk.ErrInvalidUsage, "reads the recv buffer of the group's collective 1"},
					groupMisuse{"alltoallv receive regions overlap", func(c *core.Comm, a, b core.Buffer) error {
						return c.AlltoAllv(a, []int{1, 1}, []int{0, 1}, b, []int{1, 1}, []int{0, 0}, sdk.Int32, 0)
					}, sdk.ErrInvalidArgument, "receive regions of ranks 0 and 1 overlap"})
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					recvs, good, bad := make([][]byte, 2), make([]error, 2), make([]error, 2)
					errs := onRanks(comms, func(c *core.Comm) error {
						r := c.Rank()
						send, recv := make([]byte, 16), make([]byte, 16)
						send[0] = 1
						recvs[r] = recv
						c.GroupStart()
						good[r] = c.AllReduce(core.HostBuffer(send), core.HostBuffer(recv), 4, sdk.Float32, sdk.Sum, 0)
						bad[r] = tc.bad(c, core.HostBuffer(send), core.HostBuffer(recv))
						return c.GroupEnd()
					})
					for r, err := range errs {
						require.NoError(t, good[r], "rank %d", r)
						require.ErrorIs(t, bad[r], tc.is, "rank %d: the bad call fails itself", r)
						require.ErrorContains(t, bad[r], tc.want)
						require.ErrorIs(t, err, sdk.ErrInvalidUsage, "rank %d", r)
						require.ErrorContains(t, err, "the group was not run")
						require.ErrorContains(t, err, tc.want)
						require.Equal(t, make([]byte, 16), recvs[r], "rank %d: nothing of the group ran", r)
					}
					allReduceWorks(t, comms)
				})
			}
		})
	}
}

// groupMisuse is a bad call made in a group after a good AllReduce.
type groupMisuse struct {
	name string
	bad  func(c *core.Comm, a, b core.Buffer) error
	is   error
	want string
}

// allReduceWorks: an AllReduce on every rank gives the exact sum.
func allReduceWorks(t *testing.T, comms []*core.Comm) {
	t.Helper()
	recvs := make([][]byte, len(comms))
	errs := onRanks(comms, func(c *core.Comm) error {
		recvs[c.Rank()] = make([]byte, 4)
		return c.AllReduce(core.HostBuffer([]byte{byte(c.Rank() + 1), 0, 0, 0}), core.HostBuffer(recvs[c.Rank()]), 1, sdk.Int32, sdk.Sum, 0)
	})
	want := byte(len(comms) * (len(comms) + 1) / 2)
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, []byte{want, 0, 0, 0}, recvs[r], "rank %d", r)
	}
}

// TestNestedGroups: an inner GroupEnd runs nothing (the results are not
// there yet); the outermost runs the collectives of every level, and the
// sends and receives after them.
func TestNestedGroups(t *testing.T) {
	for _, split := range [][]int{nil, {1, 2}} {
		t.Run(fmt.Sprint("split ", split), func(t *testing.T) {
			const n = 3
			comms := startHetero(t, n, core.WithSplitList(split))
			errs := onRanks(comms, func(c *core.Comm) error {
				r := c.Rank()
				a, b, ring := make([]byte, 4), make([]byte, 4), make([]byte, 1)
				c.GroupStart()
				c.GroupStart()
				if err := c.AllReduce(core.HostBuffer([]byte{byte(r + 1), 0, 0, 0}), core.HostBuffer(a), 1, sdk.Int32, sdk.Sum, 0); err != nil {
					return err
				}
				if err := c.Send(core.HostBuffer([]byte{byte(10 + r)}), 1, sdk.Uint8, (r+1)%n, 0); err != nil {
					return err
				}
				if err := c.GroupEnd(); err != nil {
					return err
				}
				if a[0] != 0 {
					return fmt.Errorf("rank %d: the inner GroupEnd ran the AllReduce", r)
				}
				c.GroupStart()
				if err := c.Recv(core.HostBuffer(ring), 1, sdk.Uint8, (r+n-1)%n, 0); err != nil {
					return err
				}
				if err := c.GroupEnd(); err != nil {
					return err
				}
				if err := c.AllReduce(core.HostBuffer([]byte{byte(2 * r), 0, 0, 0}), core.HostBuffer(b), 1, sdk.Int32, sdk.Max, 0); err != nil {
					return err
				}
				if err := c.GroupEnd(); err != nil {
					return err
				}
				if a[0] != 6 || b[0] != 4 || ring[0] != byte(10+(r+n-1)%n) {
					return fmt.Errorf("rank %d: sum %d (want 6), max %d (want 4), from the ring %d (want %d)", r, a[0], b[0], ring[0], 10+(r+n-1)%n)
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}

// BenchmarkGroupedAllReduces: 8 AllReduces of 1 KiB on 2 host ranks, one
// after the other or in one group (where the host engine runs them as one
// packed call): the cost of NCCL's coalesced small allreduces (per group
// of 8).
func BenchmarkGroupedAllReduces(b *testing.B) {
	const n, k, size = 2, 8, 1024
	for _, grouped := range []bool{false, true} {
		b.Run(fmt.Sprint("grouped=", grouped), func(b *testing.B) {
			comms := startComms(b, n, loopback(20*time.Second))
			defer func() {
				for _, c := range comms {
					c.Destroy()
				}
			}()
			iters := b.N
			b.ResetTimer()
			errs := onRanks(comms, func(c *core.Comm) error {
				bufs := make([]core.Buffer, 2*k)
				for i := range bufs {
					bufs[i] = core.HostBuffer(make([]byte, size))
				}
				for range iters {
					if grouped {
						c.GroupStart()
					}
					for j := range k {
						if err := c.AllReduce(bufs[2*j], bufs[2*j+1], size/4, sdk.Float32, sdk.Sum, 0); err != nil {
							return err
						}
					}
					if grouped {
						if err := c.GroupEnd(); err != nil {
							return err
						}
					}
				}
				return nil
			})
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
