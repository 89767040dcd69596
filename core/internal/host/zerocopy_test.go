package host

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// regCase is one AllReduce over registered memory. unregistered is a rank
// whose buffers are ordinary memory (-1: none), so that all ranks must
// agree on the staged path.
type regCase struct {
	n, count     int
	dt           sdk.DataType
	op           sdk.RedOp
	inPlace      bool
	unregistered int
	window       int
}

// checkRegistered allocates every rank's buffers with MemAlloc, runs the
// AllReduce twice (the second time on the first's results' buffers, so
// that the steps of consecutive calls interleave) and checks every rank's
// result and, out of place, that its send buffer is unchanged.
func checkRegistered(t *testing.T, c regCase) {
	t.Helper()
	size := c.dt.Size()
	nb := c.count * size
	want := redExpect(c.dt, c.op, c.n, 0, c.count)
	direct := make([]bool, c.n)
	var g *localShared
	errs := runRanks(t, c.n, []Option{withTestShm(c.window), WithWorkers(3)}, func(e *Engine) error {
		r := e.Rank()
		g = e.sh.(*sharedView).g
		if !e.CanMemAlloc() {
			return fmt.Errorf("rank %d cannot allocate", r)
		}
		alloc := func() ([]byte, func() error, error) {
			b, err := e.MemAlloc(nb) // collective: the unregistered rank too
			free := func() error { return e.MemFree(b) }
			if r == c.unregistered {
				return garbage(nb), free, err
			}
			return b, free, err
		}
		send, freeSend, err := alloc()
		if err != nil {
			return err
		}
		defer freeSend()
		recv := send
		if !c.inPlace {
			var freeRecv func() error
			if recv, freeRecv, err = alloc(); err != nil {
				return err
			}
			defer freeRecv()
		}
		for round := 0; round < 2; round++ {
			in := redInput(c.dt, c.op, r, 0, c.count)
			copy(send, in)
			if !c.inPlace {
				copy(recv, garbage(nb))
			}
			if err := e.AllReduce(send, recv, c.count, c.dt, c.op); err != nil {
				return err
			}
			if !bytes.Equal(want, recv) {
				return fmt.Errorf("rank %d round %d: wrong result", r, round)
			}
			if !c.inPlace && !bytes.Equal(in, send) {
				return fmt.Errorf("rank %d round %d: the send buffer changed", r, round)
			}
		}
		direct[r] = e.zcScratch != nil
		return nil
	})
	requireNoErrors(t, errs)
	for r := range direct {
		_, sn := split(c.count, c.n, r)
		require.Equal(t, c.unregistered < 0 && sn > 0, direct[r], "rank %d: zero-copy path taken", r)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Empty(t, g.mems, "every segment is unlinked once mapped")
	require.Zero(t, g.maps, "every mapping is freed")
}

// withOneStep sets shmOneStep for a test (0: every size takes the two-step
// paths, so that tiny counts go zero-copy).
func withOneStep(t *testing.T, v int) {
	old := shmOneStep
	shmOneStep = v
	t.Cleanup(func() { shmOneStep = old })
}

func TestAllReduceRegisteredSizes(t *testing.T) {
	withOneStep(t, 0)
	for n := 2; n <= 9; n++ {
		for _, count := range []int{1, 3, 7, 1000, 64<<10 + 13} {
			for _, inPlace := range []bool{false, true} {
				dt := sdk.Float32
				if count > 60000 && n%2 == 1 {
					dt = sdk.Int8
				}
				c := regCase{n: n, count: count, dt: dt, op: sdk.Sum, inPlace: inPlace, unregistered: -1, window: 8 << 20}
				t.Run(fmt.Sprintf("n=%d/count=%d/inplace=%v", n, count, inPlace), func(t *testing.T) { checkRegistered(t, c) })
			}
		}
	}
}

func TestAllReduceRegisteredTypesOps(t *testing.T) {
	withOneStep(t, 0)
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			for _, n := range []int{2, 3, 5, 8, 9} {
				for _, count := range []int{7, 301} {
					c := regCase{n: n, count: count, dt: dt, op: op, inPlace: (n+count)%2 == 0, unregistered: -1, window: 4096}
					t.Run(fmt.Sprintf("%v/%v/n=%d/count=%d", dt, op, n, count), func(t *testing.T) { checkRegistered(t, c) })
				}
			}
		}
	}
}

// One rank's buffers are ordinary memory: every rank takes the staged
// path, with the default one-step size too (large counts only agree).
func TestAllReduceRegisteredMixed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		oneStep int
		c       regCase
	}{
		{"staged/in-place", 0, regCase{n: 4, count: 1001, dt: sdk.Int32, op: sdk.Max, inPlace: true, unregistered: 2, window: 4096}},
		{"staged/out-of-place", 0, regCase{n: 3, count: 1001, dt: sdk.Float16, op: sdk.Avg, unregistered: 0, window: 4096}},
		{"default-onestep/large", shmOneStep, regCase{n: 5, count: 64<<10 + 13, dt: sdk.Float64, op: sdk.Sum, unregistered: -1, window: 8 << 20}},
		{"default-onestep/small", shmOneStep, regCase{n: 5, count: 13, dt: sdk.Float64, op: sdk.Sum, inPlace: true, unregistered: 4, window: 8 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withOneStep(t, tc.oneStep)
			checkRegistered(t, tc.c)
		})
	}
}

func TestMemAllocErrors(t *testing.T) {
	// No shared memory: not supported.
	errs := runRanks(t, 2, nil, func(e *Engine) error {
		if e.CanMemAlloc() {
			return fmt.Errorf("CanMemAlloc without shared memory")
		}
		_, err := e.MemAlloc(64)
		return err
	})
	for _, err := range errs {
		require.ErrorIs(t, err, sdk.ErrNotSupported)
	}
	// Windows too small for an allocation step.
	errs = runRanks(t, 2, []Option{withTestShm(256)}, func(e *Engine) error {
		_, err := e.MemAlloc(64)
		return err
	})
	for _, err := range errs {
		require.ErrorIs(t, err, sdk.ErrNotSupported)
	}
	errs = runRanks(t, 2, []Option{withTestShm(4096)}, func(e *Engine) error {
		if _, err := e.MemAlloc(0); err == nil {
			return fmt.Errorf("MemAlloc(0) succeeded")
		}
		// Ranks that disagree on the size fail instead of mapping wrongly.
		if _, err := e.MemAlloc(64 + e.Rank()); err == nil {
			return fmt.Errorf("MemAlloc of different sizes succeeded")
		}
		return nil
	})
	requireNoErrors(t, errs)
	errs = runRanks(t, 2, []Option{withTestShm(4096)}, func(e *Engine) error {
		b, err := e.MemAlloc(64)
		if err != nil {
			return err
		}
		if err := e.MemFree(b[8:]); err == nil {
			return fmt.Errorf("MemFree of a part succeeded")
		}
		if err := e.MemFree(b); err != nil {
			return err
		}
		return e.MemFree(b)
	})
	for _, err := range errs {
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	}
}
