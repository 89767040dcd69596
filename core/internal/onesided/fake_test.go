package onesided

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// What the machinery's tests run on: in-process ranks whose Comm is a
// fake (fakeComm) over real hostnet meshes, without core, and a device
// whose memory is Go memory (fakeDevice), so that the staging paths run
// without a plugin.

const testTimeout = 20 * time.Second

var testSecret = hostnet.Secret{0: 0x05, 7: 0x1d, 15: 0x41}

// fakeComm is one rank's Comm: an in-process all-gather, and links that
// Split connects from a mesh configuration prepared beforehand.
type fakeComm struct {
	rank, n int
	g       *gather
	mc      hostnet.MeshConfig
	dev     Device // nil: a host rank
}

func (f *fakeComm) Rank() int                         { return f.rank }
func (f *fakeComm) Size() int                         { return f.n }
func (f *fakeComm) Timeout() time.Duration            { return testTimeout }
func (f *fakeComm) Device() Device                    { return f.dev }
func (f *fakeComm) AllGather(send, recv []byte) error { return f.g.all(f.rank, send, recv) }

func (f *fakeComm) CallError(name string, err error) error {
	return fmt.Errorf("%s on rank %d: %w", name, f.rank, err)
}

func (f *fakeComm) Split() (Links, error) {
	m, err := hostnet.Connect(f.mc)
	if err != nil {
		return nil, err
	}
	return meshLinks{m, f.mc.Listener}, nil
}

// meshLinks are the links of one rank's mesh.
type meshLinks struct {
	m *hostnet.Mesh
	l *hostnet.Listener
}

func (l meshLinks) Link(peer int) hostnet.Link { return l.m.Links[peer] }
func (l meshLinks) Node() *hostnet.ShmNode     { return l.m.Node }
func (l meshLinks) HostOf(int) string          { return "" }

func (l meshLinks) LinkError(err error, doing string, _ int) error {
	return fmt.Errorf("%s: %w", doing, err)
}

func (l meshLinks) Close(abort bool) error {
	if abort {
		_ = l.m.Shut()
	}
	return errors.Join(l.l.Close(), l.m.Close())
}

// gather is an all-gather of in-process ranks: each round's parts, and a
// channel closed once all are in.
type gather struct {
	mu    sync.Mutex
	n     int
	parts [][]byte
	got   int
	done  chan struct{}
}

func newGather(n int) *gather {
	return &gather{n: n, parts: make([][]byte, n), done: make(chan struct{})}
}

func (g *gather) all(rank int, send, recv []byte) error {
	g.mu.Lock()
	parts, done := g.parts, g.done
	parts[rank] = append([]byte(nil), send...)
	if g.got++; g.got == g.n {
		close(done)
		g.parts, g.got, g.done = make([][]byte, g.n), 0, make(chan struct{})
	}
	g.mu.Unlock()
	select {
	case <-done:
	case <-time.After(testTimeout):
		return fmt.Errorf("rank %d: the other ranks did not all-gather within %v: %w", rank, testTimeout, hostnet.ErrTimeout)
	}
	for r, p := range parts {
		copy(recv[r*len(p):], p)
	}
	return nil
}

// fakeComms prepares n ranks on this host: shared, they share memory
// (the mesh picks shared memory between them), else they talk TCP (they
// announce no boot id). device: each rank gets a fakeDevice.
func fakeComms(t *testing.T, n int, shared, device bool) []*fakeComm {
	t.Helper()
	if shared && hostnet.BootID() == "" {
		t.Skip("no shared memory here")
	}
	cfg := hostnet.DefaultConfig()
	cfg.Timeout = testTimeout
	host, err := os.Hostname()
	require.NoError(t, err)
	// The smallest areas (64 KiB: shm.MinShmAreaBytes, which hostnet does
	// not name): a Put of a chunk wraps the rings many times.
	sc := hostnet.ShmConfig{P2PBytes: 64 << 10, WindowBytes: 64 << 10, Dir: shmDir(t)}
	g := newGather(n)
	peers := make([]hostnet.Peer, n)
	fs := make([]*fakeComm, n)
	for r := range n {
		l, err := hostnet.ListenAddr("127.0.0.1:0", cfg, testSecret)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		p := hostnet.Peer{Rank: r, Addr: l.Addr(), Host: host, Pid: os.Getpid()}
		var seg *hostnet.ShmSegment
		if shared {
			p.BootID, p.PidNS = hostnet.BootID(), hostnet.PidNamespace()
			seg, err = hostnet.CreateShmSegment(sc)
			require.NoError(t, err)
			p.Shm = seg.Name()
		}
		peers[r] = p
		fs[r] = &fakeComm{rank: r, n: n, g: g, mc: hostnet.MeshConfig{Net: cfg, Shm: sc, Secret: testSecret, Listener: l, Segment: seg, Rank: r}}
		if device {
			fs[r].dev = &fakeDevice{mem: map[uintptr][]byte{}}
		}
	}
	for _, f := range fs {
		f.mc.Peers = append([]hostnet.Peer(nil), peers...)
	}
	return fs
}

// shmDir is a fresh directory on /dev/shm's tmpfs, removed after the test
// (t.TempDir where there is none).
func shmDir(t *testing.T) string {
	dir, err := os.MkdirTemp(hostnet.DefaultShmDir, "onesided-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startAll starts every rank's machinery at once (Start is collective);
// each is stopped after the test.
func startAll(t *testing.T, fs []*fakeComm) []*State {
	t.Helper()
	states := make([]*State, len(fs))
	errs := onAll(len(fs), func(r int) error {
		var err error
		states[r], err = Start("Test", fs[r], nil)
		return err
	})
	require.NoError(t, errors.Join(errs...))
	t.Cleanup(func() {
		require.NoError(t, errors.Join(onAll(len(states), func(r int) error { return states[r].Stop(false, false) })...))
	})
	return states
}

// onAll runs f for every rank at once.
func onAll(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// fakeDevice is device memory in Go's heap (kept alive by mem): its
// copies are plain copies, its stream waits count.
type fakeDevice struct {
	mu    sync.Mutex
	mem   map[uintptr][]byte
	syncs int
}

// at is the n bytes at addr, device or host memory alike.
func at(addr uintptr, n int) []byte { return unsafe.Slice((*byte)(cmem.Ptr(addr)), n) }

func (d *fakeDevice) Memcpy(dst, src uintptr, n int, _ loader.MemcpyKind, _ loader.Stream) error {
	copy(at(dst, n), at(src, n))
	return nil
}

func (d *fakeDevice) StreamSynchronize(loader.Stream) error {
	d.mu.Lock()
	d.syncs++
	d.mu.Unlock()
	return nil
}

func (d *fakeDevice) Bind() error { return nil }

func (d *fakeDevice) Alloc(n int) (uintptr, error) {
	b := make([]byte, max(n, 1))
	ptr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	d.mu.Lock()
	d.mem[ptr] = b
	d.mu.Unlock()
	return ptr, nil
}

func (d *fakeDevice) Free(ptr uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.mem[ptr]; !ok {
		return fmt.Errorf("fake device: %#x was not allocated", ptr)
	}
	delete(d.mem, ptr)
	return nil
}
