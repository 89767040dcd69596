package host

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
)

// localShared is an in-process Shared for tests: windows in Go memory,
// steps in atomics, the same protocol as shm.ShmNode (a label per
// step parity, a mismatch is an error).
type localShared struct {
	mu    sync.Mutex
	mems  map[string][]byte // NewMem's "segments" by name, until unlinked
	maps  int               // NewMem and MapMem results not yet freed
	win   [][]byte
	steps []atomic.Uint32
	sigs  [][2]atomic.Uint64
}

func newLocalShared(n, window int) *localShared {
	g := &localShared{win: make([][]byte, n), steps: make([]atomic.Uint32, n), sigs: make([][2]atomic.Uint64, n)}
	for r := range g.win {
		g.win[r] = garbage(window) // stale bytes must never leak into results
	}
	return g
}

type sharedView struct {
	g    *localShared
	rank int
	step uint32
	sig  uint64
}

func (v *sharedView) Window(r int) []byte { return v.g.win[r] }
func (v *sharedView) Enter() error        { return nil }
func (v *sharedView) Exit()               {}
func (v *sharedView) Step() uint32        { return v.step }

func (v *sharedView) Post(sig uint64) error {
	v.step++
	v.sig = sig
	v.g.sigs[v.rank][v.step&1].Store(sig)
	v.g.steps[v.rank].Store(v.step)
	return nil
}

func (v *sharedView) Wait(r int) error {
	deadline := time.Now().Add(10 * time.Second)
	for int32(v.g.steps[r].Load()-v.step) < 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: step %d: rank %d never came", sdk.ErrRemoteError, v.step, r)
		}
		runtime.Gosched()
	}
	if v.g.sigs[r][v.step&1].Load() != v.sig {
		return fmt.Errorf("%w: step %d: rank %d runs another operation", sdk.ErrInvalidUsage, v.step, r)
	}
	return nil
}

// NewMem, MapMem, UnlinkMem and FreeMem make sharedView a SharedMem:
// "segments" are Go memory that the ranks find by name.
func (v *sharedView) NewMem(n int) ([]byte, string, error) {
	g := v.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mems == nil {
		g.mems = map[string][]byte{}
	}
	name := fmt.Sprintf("mem-%d-%d", v.rank, len(g.mems)+g.maps)
	b := make([]byte, n)
	g.mems[name] = b
	g.maps++
	return b, name, nil
}

func (v *sharedView) MapMem(r int, name string, n int) ([]byte, error) {
	g := v.g
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.mems[name]
	if !ok || len(b) != n {
		return nil, fmt.Errorf("no segment %q of %d bytes", name, n)
	}
	g.maps++
	return b, nil
}

func (v *sharedView) UnlinkMem(name string) {
	v.g.mu.Lock()
	defer v.g.mu.Unlock()
	delete(v.g.mems, name)
}

func (v *sharedView) FreeMem([]byte) error {
	v.g.mu.Lock()
	defer v.g.mu.Unlock()
	v.g.maps--
	return nil
}

// testShm is an Option placeholder that runRanks replaces with a view of
// a fresh localShared of window bytes per rank (a Shared is per rank, an
// Option list is shared by all).
type testShm struct{ window int }

func (testShm) Enter() error        { return nil }
func (testShm) Exit()               {}
func (testShm) Window(int) []byte   { return nil }
func (testShm) Step() uint32        { return 0 }
func (testShm) Post(uint64) error   { return nil }
func (testShm) Wait(int) error      { return nil }
func withTestShm(window int) Option { return WithShared(testShm{window}) }

// bindShared gives e its view of g when its options asked for one.
func bindShared(e *Engine, g **localShared) {
	p, ok := e.sh.(testShm)
	if !ok {
		return
	}
	if *g == nil {
		*g = newLocalShared(e.n, p.window)
	}
	e.sh = &sharedView{g: *g, rank: e.rank}
}
