package core

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

func testNet(timeout time.Duration) hostnet.Config {
	cfg := hostnet.DefaultConfig()
	cfg.IfName = "lo"
	cfg.Streams = 2
	cfg.Timeout = timeout
	return cfg
}

// startComms brings up n ranks as goroutines over loopback.
func startComms(t testing.TB, n int, cfg hostnet.Config) []*Comm {
	t.Helper()
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	return joinComms(t, id, n, cfg)
}

// joinComms starts n ranks on the rendezvous of id, destroyed when the
// test ends.
func joinComms(t testing.TB, id UniqueID, n int, cfg hostnet.Config) []*Comm {
	t.Helper()
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = InitRank(id, n, r, WithNetConfig(cfg))
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

// onAll runs f on every rank concurrently and returns each rank's error.
func onAll(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func(r int, c *Comm) {
			defer wg.Done()
			errs[r] = f(c)
		}(r, c)
	}
	wg.Wait()
	return errs
}

func f32s(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestCommAllReduceAcrossRankCounts(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms := startComms(t, n, testNet(10*time.Second))
			recv := make([][]byte, n)
			errs := onAll(comms, func(c *Comm) error {
				recv[c.Rank()] = make([]byte, 8)
				return c.AllReduce(HostBuffer(f32s(float32(c.Rank()), 1)), HostBuffer(recv[c.Rank()]), 2, sdk.Float32, sdk.Sum, 0)
			})
			want := f32s(float32(n*(n-1)/2), float32(n))
			for r := range comms {
				require.NoError(t, errs[r])
				require.Equal(t, want, recv[r], "rank %d", r)
				require.Equal(t, r, comms[r].Rank())
				require.Equal(t, n, comms[r].Count())
			}
		})
	}
}

func TestCommRefusesPeerWithoutSecret(t *testing.T) {
	cfg := testNet(10 * time.Second)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	intruder := id
	intruder.Secret[0] ^= 1
	_, err = InitRank(intruder, 2, 1, WithNetConfig(cfg))
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.ErrorContains(t, err, "belongs to another communicator")

	// The communicator carries on with the rightful ranks.
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) { defer wg.Done(); comms[r], errs[r] = InitRank(id, 2, r, WithNetConfig(cfg)) }(r)
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for _, err := range onAll(comms, func(c *Comm) error { return c.Barrier() }) {
		require.NoError(t, err)
	}
	for _, c := range comms {
		c.Destroy()
	}
}

func TestInitRankNamesMissingRanks(t *testing.T) {
	cfg := testNet(500 * time.Millisecond)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	start := time.Now()
	_, err = InitRank(id, 3, 0, WithNetConfig(cfg))
	require.Error(t, err)
	require.ErrorContains(t, err, "ranks 1,2 of 3 did not join")
	require.ErrorIs(t, err, ErrTimeout, "ranks that never came are a timeout, not a usage error of the rank that did")
	require.Equal(t, sdk.RemoteError, sdk.ResultOf(err))
	require.Less(t, time.Since(start), 10*time.Second)
}

// The rendezvous waits for its first rank past FLAGCX_TIMEOUT: nobody waits
// on that rank yet, and a process slow to call InitRank after GetUniqueID
// (a loaded machine, an id passed through a launcher) must still join.
func TestRendezvousWaitsForItsFirstRank(t *testing.T) {
	cfg := testNet(200 * time.Millisecond)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	time.Sleep(3 * cfg.Timeout)
	c, err := InitRank(id, 1, 0, WithNetConfig(cfg))
	require.NoError(t, err)
	require.NoError(t, c.Destroy())
}

// A malformed FLAGCX_TIMEOUT is the caller's invalid argument, named with
// what it takes, wherever the environment is read.
func TestBadNetVariableIsInvalidArgument(t *testing.T) {
	t.Setenv(hostnet.EnvTimeout, "soon")
	for name, call := range map[string]func() error{
		"GetUniqueID": func() error { _, err := GetUniqueID(); return err },
		"InitRank": func() error {
			_, err := InitRank(NewUniqueID("127.0.0.1:1", hostnet.Secret{}), 1, 0)
			return err
		},
	} {
		err := call()
		require.Equal(t, sdk.InvalidArgument, sdk.ResultOf(err), "%s: %v", name, err)
		require.ErrorContains(t, err, `FLAGCX_TIMEOUT="soon": allowed is a positive number of seconds`, name)
	}
}

func TestInitRankRejectsBadArguments(t *testing.T) {
	id := NewUniqueID("127.0.0.1:1", hostnet.Secret{})
	for _, tc := range []struct {
		name         string
		nranks, rank int
		want         string
	}{
		{"no ranks", 0, 0, "at least 1 rank"},
		{"rank too big", 2, 2, "out of range"},
		{"negative rank", 2, -1, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := InitRank(id, tc.nranks, tc.rank)
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRanksDisagreeingOnNRanksAreTold(t *testing.T) {
	cfg := testNet(2 * time.Second)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, n := range []int{2, 3} {
		wg.Add(1)
		go func(r, n int) { defer wg.Done(); _, errs[r] = InitRank(id, n, r, WithNetConfig(cfg)) }(r, n)
		time.Sleep(50 * time.Millisecond) // rank 0 arrives first and sets the count
	}
	wg.Wait()
	require.ErrorContains(t, errs[1], "give every rank the same count")
}

func TestCountMismatchIsAnErrorNotCorruption(t *testing.T) {
	comms := startComms(t, 2, testNet(2*time.Second))
	bufs := [][]byte{make([]byte, 16), make([]byte, 64)}
	for i := range bufs[1] {
		bufs[1][i] = 0xAA
	}
	errs := onAll(comms, func(c *Comm) error {
		if c.Rank() == 0 {
			return c.Send(HostBuffer(bufs[0]), 16, sdk.Uint8, 1, 0)
		}
		return c.Recv(HostBuffer(bufs[1]), 8, sdk.Uint8, 0, 0)
	})
	require.ErrorIs(t, errs[1], sdk.ErrInvalidUsage)
	require.ErrorContains(t, errs[1], "disagree on the count")
	for _, b := range bufs[1][8:] {
		require.Equal(t, byte(0xAA), b, "bytes beyond the expected count were written")
	}
}

func TestDeadPeerIsReportedWithinDeadline(t *testing.T) {
	comms := startComms(t, 3, testNet(3*time.Second))
	comms[2].Abort()
	start := time.Now()
	errs := onAll(comms[:2], func(c *Comm) error {
		return c.AllReduce(HostBuffer(f32s(1)), HostBuffer(make([]byte, 4)), 1, sdk.Float32, sdk.Sum, 0)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.ErrorIs(t, err, sdk.ErrRemoteError)
	}
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestSilentPeerTimesOutNamingIt(t *testing.T) {
	comms := startComms(t, 2, testNet(400*time.Millisecond))
	err := comms[0].Recv(HostBuffer(make([]byte, 4)), 4, sdk.Uint8, 1, 0)
	require.ErrorIs(t, err, sdk.ErrRemoteError)
	require.ErrorContains(t, err, "waiting for 4 bytes from rank 1")
}

func TestAbortStopsOperationInFlight(t *testing.T) {
	comms := startComms(t, 2, testNet(20*time.Second))
	done := make(chan error, 1)
	go func() { done <- comms[0].Recv(HostBuffer(make([]byte, 4)), 4, sdk.Uint8, 1, 0) }()
	time.Sleep(100 * time.Millisecond)
	comms[0].Abort()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "aborted")
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not stop the receive")
	}
}

func TestSplitByColorAndKey(t *testing.T) {
	comms := startComms(t, 5, testNet(10*time.Second))
	// Colors: even ranks 0, odd ranks 1, rank 4 opts out. Keys reverse order.
	subs := make([]*Comm, 5)
	errs := onAll(comms, func(c *Comm) error {
		color := c.Rank() % 2
		if c.Rank() == 4 {
			color = SplitNoColor
		}
		var err error
		subs[c.Rank()], err = c.Split(color, -c.Rank())
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.Nil(t, subs[4])
	for _, tc := range []struct{ rank, newRank, size int }{{0, 1, 2}, {2, 0, 2}, {1, 1, 2}, {3, 0, 2}} {
		require.Equal(t, tc.newRank, subs[tc.rank].Rank(), "rank %d", tc.rank)
		require.Equal(t, tc.size, subs[tc.rank].Count())
	}
	sums := make([][]byte, 4)
	errs = make([]error, 4)
	var wg sync.WaitGroup
	for i, c := range subs[:4] {
		wg.Add(1)
		go func(i int, c *Comm) {
			defer wg.Done()
			sums[i] = make([]byte, 4)
			errs[i] = c.AllReduce(HostBuffer(f32s(float32(i))), HostBuffer(sums[i]), 1, sdk.Float32, sdk.Sum, 0)
		}(i, c)
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.Equal(t, f32s(2), sums[0]) // 0 + 2
	require.Equal(t, f32s(4), sums[1]) // 1 + 3
	for _, s := range subs[:4] {
		s.Destroy()
	}
}

func TestGroupedSendRecvRingDoesNotDeadlock(t *testing.T) {
	const n = 4
	comms := startComms(t, n, testNet(10*time.Second))
	got := make([][]byte, n)
	errs := onAll(comms, func(c *Comm) error {
		r := c.Rank()
		got[r] = make([]byte, 1<<20)
		send := make([]byte, 1<<20)
		for i := range send {
			send[i] = byte(r + i)
		}
		c.GroupStart()
		if err := c.Send(HostBuffer(send), len(send), sdk.Uint8, (r+1)%n, 0); err != nil {
			return err
		}
		if err := c.Recv(HostBuffer(got[r]), len(got[r]), sdk.Uint8, (r+n-1)%n, 0); err != nil {
			return err
		}
		return c.GroupEnd()
	})
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r])
		from := (r + n - 1) % n
		for _, i := range []int{0, 1, 1<<20 - 1} {
			require.Equal(t, byte(from+i), got[r][i])
		}
	}
}

// TestHostPlacementGoesToTheEngine: a communicator of host ranks in one
// cluster sends its calls to the host engine straight (its plan would be
// that one call); clusters, the host path and printed plans take the
// schedules.
func TestHostPlacementGoesToTheEngine(t *testing.T) {
	cfg := testNet(10 * time.Second)
	for _, tc := range []struct {
		name   string
		opts   []Option
		engine bool
	}{
		{"host placement", nil, true},
		{"two host clusters", []Option{WithSplitList([]int{1, 1})}, false},
		{"host path", []Option{WithHostPath(true)}, false},
		{"plans printed", []Option{WithEnv(func(k string) (string, bool) {
			v, ok := map[string]string{EnvDebug: "INFO", EnvDebugSubsys: "COLL"}[k]
			return v, ok
		})}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := GetUniqueID(WithIDNetConfig(cfg))
			require.NoError(t, err)
			comms := make([]*Comm, 2)
			errs := onAllRanks(2, func(r int) (err error) {
				comms[r], err = InitRank(id, 2, r, append([]Option{WithNetConfig(cfg)}, tc.opts...)...)
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for _, c := range comms {
				require.Equal(t, tc.engine, c.host != nil)
				if tc.engine {
					require.Same(t, c.world, c.host)
				}
			}
			onAll(comms, func(c *Comm) error { return c.Destroy() })
		})
	}
}

// onAllRanks runs f for ranks 0..n-1 concurrently and returns each
// rank's error.
func onAllRanks(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = f(r)
		}(r)
	}
	wg.Wait()
	return errs
}
