//go:build linux

package hostnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/nettest"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// shmTestDir is a fresh directory on the tmpfs of /dev/shm (so that
// fallocate, sizes and futexes behave as in production), removed after the
// test; t.TempDir where there is no /dev/shm.
func shmTestDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(shm.DefaultShmDir, "hostnet-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// smallShm is the smallest segment: 64 KiB of rings (one peer: 8 slots of
// 7.5 KiB) and a 64 KiB window, so that ring wrap-around is cheap to reach.
func smallShm(dir string) shm.ShmConfig {
	return shm.ShmConfig{P2PBytes: shm.MinShmAreaBytes, WindowBytes: shm.MinShmAreaBytes, Dir: dir}
}

// meshCfg is a loopback configuration with 2 streams per TCP link.
func meshCfg(timeout time.Duration) Config {
	cfg := testConfig(timeout)
	cfg.Streams = 2
	cfg.StripeMin = 4 << 10
	return cfg
}

// testHost is what the in-process ranks announce as their host.
func testHost(t testing.TB) string {
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}

// prepareMesh does for n in-process ranks what a rank does before
// Connect: listen on loopback, create its segment (with sc(r); a failure
// goes into Peer.NoShm as in core), announce a Peer. edit (may be nil)
// changes what rank r announces. Every rank gets its own copy of the peer
// table.
func prepareMesh(t testing.TB, n int, cfg Config, sc func(r int) shm.ShmConfig, edit func(r int, p *Peer)) []MeshConfig {
	t.Helper()
	host := testHost(t)
	peers := make([]Peer, n)
	mcs := make([]MeshConfig, n)
	for r := range n {
		l, err := tcp.ListenAddr("127.0.0.1:0", cfg, testSecret)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		p := Peer{Rank: r, Addr: l.Addr(), Host: host, Pid: os.Getpid(), BootID: shm.BootID(), PidNS: shm.PidNamespace()}
		src := sc(r)
		seg, err := shm.CreateShmSegment(src)
		if err != nil {
			p.NoShm = err.Error()
		} else {
			p.Shm = seg.Name()
		}
		if edit != nil {
			edit(r, &p)
		}
		peers[r] = p
		mcs[r] = MeshConfig{Net: cfg, Shm: src, Secret: testSecret, Listener: l, Segment: seg, Rank: r}
	}
	for r := range mcs {
		mcs[r].Peers = append([]Peer(nil), peers...)
	}
	return mcs
}

// connectAll runs Connect for every rank at once; the meshes are closed
// after the test. A panic in Connect fails the test (instead of the whole
// test binary) and counts as that rank's error.
func connectAll(t testing.TB, mcs []MeshConfig) ([]*Mesh, []error) {
	t.Helper()
	ms := make([]*Mesh, len(mcs))
	errs := make([]error, len(mcs))
	var wg sync.WaitGroup
	for r := range mcs {
		wg.Go(func() { ms[r], errs[r] = safeConnect(mcs[r]) })
	}
	wg.Wait()
	for r, err := range errs {
		if errors.Is(err, errConnectPanicked) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, m := range ms {
			if m != nil {
				m.Close()
			}
		}
	})
	return ms, errs
}

var errConnectPanicked = errors.New("Connect panicked")

// safeConnect is Connect with a panic turned into an error wrapping
// errConnectPanicked.
func safeConnect(mc MeshConfig) (m *Mesh, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("%w: %v (at %s)", errConnectPanicked, p, panicSite())
		}
	}()
	return Connect(mc)
}

// panicSite names the frames of hostnet's own code that panicked.
func panicSite() string {
	var sites []string
	lines := strings.Split(string(debug.Stack()), "\n")
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.Contains(l, "/hostnet/") && !strings.Contains(l, "_test.go") {
			sites = append(sites, filepath.Base(strings.Fields(l)[0]))
		}
	}
	return strings.Join(sites, " <- ")
}

// newMesh connects n in-process ranks that all use sc.
func newMesh(t testing.TB, n int, cfg Config, sc shm.ShmConfig) []*Mesh {
	t.Helper()
	ms, errs := connectAll(t, prepareMesh(t, n, cfg, func(int) shm.ShmConfig { return sc }, nil))
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return ms
}

func shmLink(t testing.TB, l Link) *shm.ShmLink {
	t.Helper()
	s, ok := l.(*shm.ShmLink)
	require.True(t, ok, "%T is not a *shm.ShmLink", l)
	return s
}

// dirEntries lists the names in dir.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// msgFor is the content rank from sends to rank to as its i-th message.
func msgFor(from, to, i, n int) []byte {
	return nettest.RandomBytes(uint64(from)<<40|uint64(to)<<20|uint64(i), n)
}

// exchange sends sizes over a->b and b->a at the same time (full duplex)
// and checks every message byte for byte, in order, and that Recv wrote
// nothing past its buffer.
func exchange(t testing.TB, a, b Link, ra, rb int, sizes []int) {
	t.Helper()
	require.NoError(t, exchangeErr(a, b, ra, rb, sizes))
}

// exchangeErr is exchange for any goroutine: it returns the first failure.
func exchangeErr(a, b Link, ra, rb int, sizes []int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	send := func(l Link, from, to int) {
		for i, n := range sizes {
			if err := l.Send(msgFor(from, to, i, n)); err != nil {
				errs <- fmt.Errorf("rank %d send %d (%d bytes) to %d: %w", from, i, n, to, err)
				return
			}
		}
	}
	recv := func(l Link, from, to int) {
		for i, n := range sizes {
			buf := bytes.Repeat([]byte{0x5A}, n+64)
			if err := l.Recv(buf[:n]); err != nil {
				errs <- fmt.Errorf("rank %d recv %d (%d bytes) from %d: %w", to, i, n, from, err)
				return
			}
			if !bytes.Equal(msgFor(from, to, i, n), buf[:n]) {
				errs <- fmt.Errorf("message %d (%d bytes) from rank %d to %d differs", i, n, from, to)
				return
			}
			if !bytes.Equal(bytes.Repeat([]byte{0x5A}, 64), buf[n:]) {
				errs <- fmt.Errorf("message %d (%d bytes) from rank %d to %d: Recv wrote past its buffer", i, n, from, to)
				return
			}
		}
	}
	wg.Go(func() { send(a, ra, rb) })
	wg.Go(func() { send(b, rb, ra) })
	wg.Go(func() { recv(a, rb, ra) })
	wg.Go(func() { recv(b, ra, rb) })
	wg.Wait()
	close(errs)
	return <-errs
}

// slotSizes are the interesting message sizes for a ring of 8 slots of S bytes.
func slotSizes(S int) []int {
	return []int{0, 1, S - 1, S, S + 1, 2*S + 3, 8*S - 1, 8 * S, 8*S + 1, 3*8*S + 7, 0, 5}
}

func TestMeshConnectShm(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n, " ranks"), func(t *testing.T) {
			dir := shmTestDir(t)
			mcs := prepareMesh(t, n, meshCfg(5*time.Second), func(int) shm.ShmConfig { return smallShm(dir) }, nil)
			require.Len(t, dirEntries(t, dir), n, "one segment per rank, not per pair")
			ms, errs := connectAll(t, mcs)
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
				m := ms[r]
				require.Empty(t, m.Warnings)
				require.Nil(t, m.Links[r])
				for p, l := range m.Links {
					if p == r {
						continue
					}
					require.Equal(t, "shm", l.Transport(), "rank %d to %d", r, p)
					sl := shmLink(t, l)
					require.Equal(t, os.Getpid(), sl.PeerPid())
					require.Contains(t, sl.String(), fmt.Sprintf("shm to rank %d (pid %d, 8 x ", p, os.Getpid()))
				}
				require.NotNil(t, m.Node)
				require.Equal(t, n, m.Node.Size())
				require.Equal(t, r, m.Node.Index())
				require.Equal(t, ranksUpTo(n), m.Node.Ranks())
				require.Equal(t, uint32(1), m.Node.Step(), "the setup's step")
				for i := range n {
					require.Len(t, m.Node.Window(i), shm.MinShmAreaBytes)
				}
			}
			require.Empty(t, dirEntries(t, dir), "every segment is unlinked once all ranks mapped it")
			for a := range n {
				for b := a + 1; b < n; b++ {
					exchange(t, ms[a].Links[b], ms[b].Links[a], a, b, []int{0, 1, 100})
				}
			}
		})
	}
}

func ranksUpTo(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// TestMeshSegmentSize: each rank adds one segment of SegmentBytes to
// /dev/shm, its pages reserved up front, and the files go once connected.
func TestMeshSegmentSize(t *testing.T) {
	const n = 4
	dir := shmTestDir(t)
	sc := shm.ShmConfig{P2PBytes: 256 << 10, Dir: dir}.ForRanks(n)
	require.Equal(t, 32<<20, sc.WindowBytes)
	mcs := prepareMesh(t, n, meshCfg(5*time.Second), func(int) shm.ShmConfig { return sc }, nil)
	names := dirEntries(t, dir)
	require.Len(t, names, n)
	var total int64
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, int64(sc.SegmentBytes()), fi.Size(), name)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "only this user may map it")
		st := fi.Sys().(*syscall.Stat_t)
		total += st.Blocks * 512
		_, _, pid, token, ok := shm.ParseSegName(name)
		require.True(t, ok, name)
		require.Equal(t, os.Getpid(), pid)
		require.Equal(t, shm.SegName(shm.BootID(), shm.PidNamespace(), pid, token), name)
	}
	require.Equal(t, int64(n*sc.SegmentBytes()), total, "/dev/shm grows by SegmentBytes per rank, reserved at creation")
	ms, errs := connectAll(t, mcs)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Len(t, ms[r].Node.Window(r), 32<<20)
	}
	require.Empty(t, dirEntries(t, dir))
}

// TestMeshLinkMessages: every size from empty to several ring-fulls arrives
// whole, in order, both ways at once, with the smallest rings and the
// default ones (whose large batches are copied by several goroutines).
func TestMeshLinkMessages(t *testing.T) {
	tests := []struct {
		name  string
		p2p   int
		sizes func(S int) []int
	}{
		{"64K rings", shm.MinShmAreaBytes, slotSizes},
		// Fewer, but batches of 1 MiB slots, copied by several goroutines.
		{"default 8M rings", shm.DefaultShmP2PBytes, func(S int) []int { return []int{0, 1, S - 1, S + 1, 8*S + 1, 2*8*S + 3, 7} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := smallShm(shmTestDir(t))
			sc.P2PBytes = tc.p2p
			ms := newMesh(t, 2, meshCfg(10*time.Second), sc)
			a, b := shmLink(t, ms[0].Links[1]), shmLink(t, ms[1].Links[0])
			S := a.Probe().SlotSize()
			require.Equal(t, 8, a.Probe().Slots())
			require.Equal(t, (tc.p2p-shm.RingHeader)/8&^63, S)
			require.Equal(t, S, b.Probe().SlotSize())
			exchange(t, a, b, 0, 1, tc.sizes(S))
		})
	}
}

func TestMeshLinkManyMessagesInOrder(t *testing.T) {
	ms := newMesh(t, 2, meshCfg(10*time.Second), smallShm(shmTestDir(t)))
	S := shmLink(t, ms[0].Links[1]).Probe().SlotSize()
	sizes := make([]int, 1500)
	for i := range sizes {
		sizes[i] = (i * 977) % (3*S + 5)
	}
	exchange(t, ms[0].Links[1], ms[1].Links[0], 0, 1, sizes)
}

// TestMeshLinkCountersWrap: the 32-bit ring counters wrap in the middle of
// messages of every size.
func TestMeshLinkCountersWrap(t *testing.T) {
	ms := newMesh(t, 2, meshCfg(10*time.Second), smallShm(shmTestDir(t)))
	a, b := shmLink(t, ms[0].Links[1]), shmLink(t, ms[1].Links[0])
	const start = ^uint32(0) - 20 // 21 slots before the wrap
	a.Probe().StartCountersAt(start)
	b.Probe().StartCountersAt(start)
	S := a.Probe().SlotSize()
	exchange(t, a, b, 0, 1, append(slotSizes(S), slotSizes(S)...))
	require.Less(t, a.Probe().SendPos(), start, "the counters wrapped")
	require.Less(t, b.Probe().RecvPos(), start)
}

// TestMeshHeterogeneousConfigs: ranks sized differently still talk; each
// sends with the geometry of the receiver's segment.
func TestMeshHeterogeneousConfigs(t *testing.T) {
	dir := shmTestDir(t)
	scs := []shm.ShmConfig{
		{P2PBytes: 64 << 10, WindowBytes: 64 << 10, Dir: dir},
		{P2PBytes: 1 << 20, WindowBytes: 128 << 10, Dir: dir},
	}
	ms, errs := connectAll(t, prepareMesh(t, 2, meshCfg(5*time.Second), func(r int) shm.ShmConfig { return scs[r] }, nil))
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	a, b := shmLink(t, ms[0].Links[1]), shmLink(t, ms[1].Links[0])
	require.Equal(t, ((1<<20)-shm.RingHeader)/8&^63, a.Probe().SlotSize(), "rank 0 sends into rank 1's rings")
	require.Equal(t, ((64<<10)-shm.RingHeader)/8&^63, b.Probe().SlotSize(), "rank 1 sends into rank 0's rings")
	for _, m := range ms {
		require.Len(t, m.Node.Window(0), 64<<10)
		require.Len(t, m.Node.Window(1), 128<<10)
	}
	exchange(t, a, b, 0, 1, append(slotSizes(a.Probe().SlotSize()), slotSizes(b.Probe().SlotSize())...))
}

// TestMeshNineRanks: one segment holds the rings of 8 peers, none
// overlapping: every pair streams several ring-fulls at once.
func TestMeshNineRanks(t *testing.T) {
	const n = 9
	dir := shmTestDir(t)
	ms := newMesh(t, n, meshCfg(20*time.Second), smallShm(dir))
	require.Empty(t, dirEntries(t, dir))
	const ring = 8 << 10 // 64 KiB / 8 peers
	S := (ring - shm.RingHeader) / 8
	for r, m := range ms {
		for p, l := range m.Links {
			if p == r {
				continue
			}
			sl := shmLink(t, l)
			require.Equal(t, 8, sl.Probe().Slots())
			require.Equal(t, S, sl.Probe().SlotSize(), "rank %d to %d", r, p)
			require.Equal(t, fmt.Sprintf("shm to rank %d (pid %d, 8 x 512 B)", p, os.Getpid()), sl.String())
		}
	}
	sizes := []int{1, S + 1, 3*8*S + 11, 0, 8 * S}
	var wg sync.WaitGroup
	errs := make(chan error, n*n)
	for a := range n {
		for b := a + 1; b < n; b++ {
			wg.Go(func() {
				if err := exchangeErr(ms[a].Links[b], ms[b].Links[a], a, b, sizes); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestMeshP2PTooSmall: 10 ranks cannot divide the smallest area (64 KiB)
// into rings of at least 8 KiB: every rank fails fast with a capacity
// error that says what to raise, and nothing stays in /dev/shm.
func TestMeshP2PTooSmall(t *testing.T) {
	const n = 10
	dir := shmTestDir(t)
	start := time.Now()
	ms, errs := connectAll(t, prepareMesh(t, n, meshCfg(10*time.Second), func(int) shm.ShmConfig { return smallShm(dir) }, nil))
	for r := range n {
		require.Nil(t, ms[r])
		require.ErrorIs(t, errs[r], shm.ErrShmCapacity, "rank %d", r)
		require.Contains(t, errs[r].Error(), shm.EnvShmP2PSize)
		require.Contains(t, errs[r].Error(), "9 peers")
	}
	require.Less(t, time.Since(start), 5*time.Second, "no rank waited for the deadline")
	require.Empty(t, dirEntries(t, dir))
}

// TestMeshFallsBackToTCP: a rank without a segment (disabled, or its
// creation failed) or on another host/kernel/pid namespace talks TCP; the
// same-host ones that could have shared memory say so in a warning.
func TestMeshFallsBackToTCP(t *testing.T) {
	const n = 3
	tests := []struct {
		name string
		sc   func(dir string, r int) shm.ShmConfig
		edit func(r int, p *Peer)
		tcp  [][2]int         // pairs that talk TCP; the others shm
		warn map[int][]string // rank -> substrings, one warning per string
		node map[int][]int    // rank -> its Node's ranks (absent: nil Node)
	}{
		{
			name: "rank 1 disabled",
			sc: func(dir string, r int) shm.ShmConfig {
				sc := smallShm(dir)
				sc.Disable = r == 1
				return sc
			},
			tcp: [][2]int{{0, 1}, {1, 2}},
			warn: map[int][]string{
				0: {"rank 0 talks TCP to rank 1 of its own host: rank 1 has no shared memory (shared memory unavailable: FLAGCX_SHM_DISABLE=1)"},
				2: {"rank 2 talks TCP to rank 1 of its own host"},
			},
			node: map[int][]int{0: {0, 2}, 2: {0, 2}},
		},
		{
			name: "rank 2 could not create its segment",
			sc: func(dir string, r int) shm.ShmConfig {
				sc := smallShm(dir)
				if r == 2 {
					sc.Dir = filepath.Join(dir, "no-such-dir")
				}
				return sc
			},
			tcp: [][2]int{{0, 2}, {1, 2}},
			warn: map[int][]string{
				0: {"rank 0 talks TCP to rank 2 of its own host: rank 2 has no shared memory (shared memory unavailable: creating a segment in"},
				1: {"rank 2 has no shared memory"},
				2: {"rank 2 talks TCP to rank 0 of its own host: this rank has no shared memory (", "rank 2 talks TCP to rank 1"},
			},
			node: map[int][]int{0: {0, 1}, 1: {0, 1}},
		},
		{
			name: "rank 2 on another host",
			sc:   func(dir string, r int) shm.ShmConfig { return smallShm(dir) },
			edit: func(r int, p *Peer) {
				if r == 2 {
					p.BootID, p.Host = "0000-other-boot", "elsewhere"
				}
			},
			tcp:  [][2]int{{0, 2}, {1, 2}},
			node: map[int][]int{0: {0, 1}, 1: {0, 1}},
		},
		{
			name: "rank 0 in another pid namespace",
			sc:   func(dir string, r int) shm.ShmConfig { return smallShm(dir) },
			edit: func(r int, p *Peer) {
				if r == 0 {
					p.PidNS = "pid:[1]"
				}
			},
			tcp:  [][2]int{{0, 1}, {0, 2}},
			node: map[int][]int{1: {1, 2}, 2: {1, 2}},
		},
		{
			name: "every rank disabled",
			sc: func(dir string, r int) shm.ShmConfig {
				sc := smallShm(dir)
				sc.Disable = true
				return sc
			},
			tcp: [][2]int{{0, 1}, {0, 2}, {1, 2}},
		},
		{
			name: "three hosts",
			sc:   func(dir string, r int) shm.ShmConfig { return smallShm(dir) },
			edit: func(r int, p *Peer) { p.BootID = fmt.Sprint("boot-", r) },
			tcp:  [][2]int{{0, 1}, {0, 2}, {1, 2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shmTestDir(t)
			ms, errs := connectAll(t, prepareMesh(t, n, meshCfg(5*time.Second), func(r int) shm.ShmConfig { return tc.sc(dir, r) }, tc.edit))
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
			}
			isTCP := func(a, b int) bool {
				for _, p := range tc.tcp {
					if (p[0] == a && p[1] == b) || (p[0] == b && p[1] == a) {
						return true
					}
				}
				return false
			}
			for a := range n {
				for b := range n {
					if a == b {
						continue
					}
					want := "shm"
					if isTCP(a, b) {
						want = "tcp"
					}
					require.Equal(t, want, ms[a].Links[b].Transport(), "rank %d to %d", a, b)
				}
			}
			for r := range n {
				require.Len(t, ms[r].Warnings, len(tc.warn[r]), "rank %d: %q", r, ms[r].Warnings)
				for i, s := range tc.warn[r] {
					require.Contains(t, ms[r].Warnings[i], s)
					require.Contains(t, ms[r].Warnings[i], shm.EnvShmDisable+"=1 to choose TCP quietly")
				}
				if want, ok := tc.node[r]; ok {
					require.NotNil(t, ms[r].Node, "rank %d", r)
					require.Equal(t, want, ms[r].Node.Ranks())
				} else {
					require.Nil(t, ms[r].Node, "rank %d", r)
				}
			}
			require.Empty(t, dirEntries(t, dir), "segments nobody maps are unlinked too")
			sizes := []int{0, 1, 5000, 300 << 10}
			for a := range n {
				for b := a + 1; b < n; b++ {
					exchange(t, ms[a].Links[b], ms[b].Links[a], a, b, sizes)
				}
			}
		})
	}
}

// nodeSync is one step between Enter and Exit.
func nodeSync(n *shm.ShmNode, sig uint64) error {
	if err := n.Enter(); err != nil {
		return err
	}
	defer n.Exit()
	return n.Sync(sig)
}

// asleep waits until a goroutine sleeps on the futex counted by word.
func asleep(t testing.TB, word *uint32) {
	t.Helper()
	require.Eventually(t, func() bool { return atomic.LoadUint32(word) != 0 }, 5*time.Second, time.Millisecond, "nobody went to sleep")
}

func TestMeshLinkLengthMismatch(t *testing.T) {
	const S = (shm.MinShmAreaBytes - shm.RingHeader) / 8 &^ 63
	tests := []struct {
		name      string
		sent, exp int
	}{
		{"small, sender longer", 9, 7},
		{"small, sender shorter", 7, 9},
		{"one slot vs two", S, S + 1},
		{"multi-slot, sender longer", 3*S + 1, 3 * S},
		{"multi-slot, sender shorter", 3 * S, 3*S + 1},
		{"several ring-fulls, receiver expects little", 3 * 8 * S, 100},
		{"receiver expects several ring-fulls", 100, 3 * 8 * S},
		{"empty message, receiver expects bytes", 0, 5},
		{"bytes, receiver expects an empty message", 5, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := newMesh(t, 2, meshCfg(20*time.Second), smallShm(shmTestDir(t)))
			a, b := shmLink(t, ms[0].Links[1]), shmLink(t, ms[1].Links[0])
			require.Equal(t, S, a.Probe().SlotSize())
			errc := make(chan error, 1)
			go func() { errc <- a.Send(nettest.RandomBytes(3, tc.sent)) }()
			buf := bytes.Repeat([]byte{0xAA}, tc.exp+64)
			start := time.Now()
			err := b.Recv(buf[:tc.exp])
			var le *LengthError
			require.ErrorAs(t, err, &le)
			require.Equal(t, LengthError{Got: tc.sent, Want: tc.exp}, *le)
			require.Equal(t, bytes.Repeat([]byte{0xAA}, tc.exp+64), buf, "the receiver wrote nothing, in p or past it")
			// The receiver's link is broken and says so at once ...
			err = b.Recv(make([]byte, tc.sent))
			require.ErrorIs(t, err, ErrClosed)
			require.Contains(t, err.Error(), "unusable after an earlier error")
			// ... and a sender stuck on a full ring is released, not left
			// to the deadline; one that finished fails on its next send.
			select {
			case err := <-errc:
				if err == nil {
					err = a.Send([]byte("x"))
				}
				require.ErrorIs(t, err, ErrClosed)
				require.Contains(t, err.Error(), "closed by the peer after an error on its side")
			case <-time.After(5 * time.Second):
				t.Fatal("the sender was not released")
			}
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

func TestMeshLinkCloseUnblocks(t *testing.T) {
	const S = (shm.MinShmAreaBytes - shm.RingHeader) / 8 &^ 63
	tests := []struct {
		name  string
		op    func(a, b *shm.ShmLink) error // blocks on b
		sleep func(b *shm.ShmLink) *uint32  // the sleeper count it waits on
	}{
		{"recv",
			func(a, b *shm.ShmLink) error { return b.Recv(make([]byte, 10)) },
			func(b *shm.ShmLink) *uint32 { return b.Probe().RecvSleepers() }},
		{"recv mid-message",
			func(a, b *shm.ShmLink) error {
				a.Probe().PublishPiece(3*S, 0) // the first piece of three arrives
				return b.Recv(make([]byte, 3*S))
			},
			func(b *shm.ShmLink) *uint32 { return b.Probe().RecvSleepers() }},
		{"send on a full ring",
			func(a, b *shm.ShmLink) error { return b.Send(make([]byte, 10*8*S)) },
			func(b *shm.ShmLink) *uint32 { return b.Probe().SendSleepers() }},
	}
	for _, tc := range tests {
		for _, who := range []string{"this side", "this side's mesh", "the peer", "the peer's mesh"} {
			t.Run(tc.name+"/closed by "+who, func(t *testing.T) {
				ms := newMesh(t, 2, meshCfg(time.Minute), smallShm(shmTestDir(t)))
				a, b := shmLink(t, ms[0].Links[1]), shmLink(t, ms[1].Links[0])
				errc := make(chan error, 1)
				go func() { errc <- tc.op(a, b) }()
				asleep(t, tc.sleep(b))
				var closer interface{ Close() error } = b
				switch who {
				case "this side's mesh":
					closer = ms[1]
				case "the peer":
					closer = a
				case "the peer's mesh":
					closer = ms[0]
				}
				start := time.Now()
				require.NoError(t, closer.Close())
				select {
				case err := <-errc:
					require.ErrorIs(t, err, ErrClosed)
					want := "closed by the peer"
					if strings.HasPrefix(who, "this side") {
						want = "closed by this side"
					}
					require.Contains(t, err.Error(), want)
					require.NotContains(t, err.Error(), "after an error")
				case <-time.After(2 * time.Second):
					t.Fatal("Close did not unblock the call")
				}
				require.Less(t, time.Since(start), time.Second)
				require.ErrorIs(t, b.Send([]byte("x")), ErrClosed)
				require.ErrorIs(t, b.Recv(make([]byte, 1)), ErrClosed)
				require.NoError(t, closer.Close(), "closing twice is harmless")
			})
		}
	}
}

func TestMeshLinkDataSentBeforeCloseIsDelivered(t *testing.T) {
	ms := newMesh(t, 2, meshCfg(5*time.Second), smallShm(shmTestDir(t)))
	a, b := ms[0].Links[1], ms[1].Links[0]
	S := shmLink(t, a).Probe().SlotSize()
	msg := nettest.RandomBytes(9, 2*S+3) // fits the ring: Send returns at once
	require.NoError(t, a.Send(msg))
	require.NoError(t, a.Close())
	buf := make([]byte, len(msg))
	require.NoError(t, b.Recv(buf))
	require.Equal(t, msg, buf)
	err := b.Recv(buf)
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "closed by the peer")
}

func TestMeshLinkSilentPeerTimesOut(t *testing.T) {
	const timeout = 400 * time.Millisecond
	tests := []struct {
		name   string
		op     func(a, b *shm.ShmLink) error
		usable bool // the link still works afterwards
	}{
		{"recv, nothing arrived", func(a, b *shm.ShmLink) error { return b.Recv(make([]byte, 8)) }, true},
		{"empty recv, nothing arrived", func(a, b *shm.ShmLink) error { return b.Recv(nil) }, true},
		{"send on a full ring", func(a, b *shm.ShmLink) error { return a.Send(make([]byte, 9*a.Probe().SlotSize()*a.Probe().Slots())) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := newMesh(t, 2, meshCfg(timeout), smallShm(shmTestDir(t)))
			a, b := shmLink(t, ms[0].Links[1]), shmLink(t, ms[1].Links[0])
			start := time.Now()
			err := tc.op(a, b)
			took := time.Since(start)
			require.ErrorIs(t, err, ErrTimeout)
			require.Contains(t, err.Error(), tcp.EnvTimeout)
			require.Contains(t, err.Error(), "no progress for "+timeout.String())
			require.GreaterOrEqual(t, took, timeout)
			require.Less(t, took, 3*time.Second)
			if !tc.usable {
				require.ErrorIs(t, a.Send([]byte("x")), ErrClosed, "broken after a timeout mid-message")
				return
			}
			// Nothing was consumed: both sides are still in step, both ways.
			exchange(t, a, b, 0, 1, []int{0, 8, 3 * 8 * a.Probe().SlotSize()})
		})
	}
}

// TestShmNodeSyncSteps: every rank writes its half of its window, Syncs,
// and reads every window: each step sees exactly that step's data.
func TestShmNodeSyncSteps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first uint32 // the step counters start here (after the setup's step)
	}{{"from the start", 1}, {"across the wrap", ^uint32(0) - 150}} {
		t.Run(tc.name, func(t *testing.T) { testShmNodeSyncSteps(t, tc.first) })
	}
}

func testShmNodeSyncSteps(t *testing.T, first uint32) {
	const n, steps = 3, 300
	ms := newMesh(t, n, meshCfg(10*time.Second), smallShm(shmTestDir(t)))
	for _, m := range ms {
		m.Node.Probe().StartStepsAt(first)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r, m := range ms {
		wg.Go(func() {
			node := m.Node
			if err := node.Enter(); err != nil {
				errs <- err
				return
			}
			defer node.Exit() // the windows stay mapped while this rank reads them
			for s := range steps {
				step := node.Step() + 1 // the step being published
				half := len(node.Window(r)) / 2
				off := int(step&1) * half
				binary.LittleEndian.PutUint64(node.Window(r)[off:], uint64(r)<<32|uint64(s))
				var err error
				if s%2 == 0 {
					err = node.Sync(uint64(s % 7))
				} else { // Post, then Wait per rank, last rank first
					err = node.Post(uint64(s % 7))
					for i := n - 1; i >= 0 && err == nil; i-- {
						err = node.Wait(i)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("rank %d step %d: %w", r, s, err)
					return
				}
				if node.Step() != step {
					errs <- fmt.Errorf("rank %d: Step() = %d after publishing %d", r, node.Step(), step)
					return
				}
				for i := range n {
					if got := binary.LittleEndian.Uint64(node.Window(i)[off:]); got != uint64(i)<<32|uint64(s) {
						errs <- fmt.Errorf("rank %d step %d: window of rank %d holds %#x", r, s, i, got)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, m := range ms {
		require.Equal(t, first+steps, m.Node.Step())
	}
}

// TestShmNodeGateAndHold: Enter runs the gate (and fails with its error,
// holding nothing), EnterUngated does not; a Hold taken inside Enter keeps
// the windows mapped after that Exit, until its own Exit on another
// goroutine; and Hold fails rather than waits once Close waits for them.
func TestShmNodeGateAndHold(t *testing.T) {
	ms := newMesh(t, 2, meshCfg(5*time.Second), smallShm(shmTestDir(t)))
	node := ms[0].Node
	gated, refuse := 0, error(nil)
	node.SetGate(func() error { gated++; return refuse })
	require.NoError(t, node.Enter())
	node.Exit()
	require.NoError(t, node.EnterUngated())
	node.Exit()
	require.Equal(t, 1, gated, "Enter runs the gate, EnterUngated does not")
	refuse = errors.New("the device still reads the windows")
	require.ErrorIs(t, node.Enter(), refuse)
	node.SetGate(nil)

	require.NoError(t, node.Enter())
	require.NoError(t, node.Hold())
	node.Exit()
	closed := make(chan struct{})
	go func() { node.Close(); close(closed) }()
	require.Eventually(t, func() bool {
		if node.Hold() == nil {
			node.Exit() // before Close began
			return false
		}
		return true
	}, 5*time.Second, time.Millisecond, "Hold fails while Close waits")
	select {
	case <-closed:
		t.Fatal("Close returned while a Hold was still held")
	case <-time.After(50 * time.Millisecond):
	}
	go node.Exit() // the holder is done on another goroutine
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits after the Hold ended")
	}
	require.ErrorIs(t, node.Hold(), ErrClosed)
}

func TestShmNodeSyncMismatch(t *testing.T) {
	ms := newMesh(t, 2, meshCfg(5*time.Second), smallShm(shmTestDir(t)))
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, m := range ms {
		wg.Go(func() { errs[r] = nodeSync(m.Node, uint64(100+r)) })
	}
	wg.Wait()
	require.Less(t, time.Since(start), 2*time.Second, "no rank waited for the deadline")
	mismatches := 0
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		if err != nil && strings.Contains(err.Error(), ErrMismatch.Error()) {
			require.ErrorIs(t, err, ErrMismatch)
			require.Contains(t, err.Error(), fmt.Sprintf("waiting for rank %d", 1-r))
			mismatches++
		} else {
			require.ErrorIs(t, err, ErrClosed)
		}
		// The node is out of step for good.
		err = nodeSync(ms[r].Node, 100)
		require.ErrorIs(t, err, ErrClosed)
		require.Contains(t, err.Error(), "unusable after an earlier error")
	}
	require.GreaterOrEqual(t, mismatches, 1)
}

// TestShmNodeOwnMeshClosedWhileWaiting: closing the mesh (an abort from
// another goroutine) fails the waits of a collective at once, but unmaps
// the windows only after the collective's Exit.
func TestShmNodeOwnMeshClosedWhileWaiting(t *testing.T) {
	ms := newMesh(t, 2, meshCfg(time.Minute), smallShm(shmTestDir(t)))
	node := ms[0].Node
	errc := make(chan error, 1)
	var exited atomic.Bool
	go func() {
		if err := node.Enter(); err != nil {
			errc <- err
			return
		}
		err := node.Sync(1)
		// Still inside: the windows are mapped, whatever the error.
		node.Window(0)[0]++
		_ = node.Window(1)[len(node.Window(1))-1]
		exited.Store(true)
		node.Exit()
		errc <- err
	}()
	asleep(t, node.Probe().Sleepers(1))
	require.NoError(t, ms[0].Close())
	require.True(t, exited.Load(), "Close returned before the collective's Exit")
	err := awaitErr(t, errc)
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "closed by this side")
	err = ms[0].Node.Enter()
	require.ErrorIs(t, err, ErrClosed, "no use of the windows after Close")
	// The peer completes the step rank 0 published before it closed, and
	// learns at its next one.
	require.NoError(t, nodeSync(ms[1].Node, 1))
	err = nodeSync(ms[1].Node, 2)
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "destroyed or aborted its communicator")
}

func TestShmNodePeerClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before bool // the peer closes before this rank's Sync starts
	}{{"while waiting", false}, {"before the step", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := newMesh(t, 3, meshCfg(time.Minute), smallShm(shmTestDir(t)))
			require.NoError(t, ms[1].Node.Enter())
			require.NoError(t, ms[1].Node.Post(1)) // rank 1 is in step: only rank 2 is missing
			ms[1].Node.Exit()
			start := time.Now()
			if tc.before {
				require.NoError(t, ms[2].Close())
			}
			errc := make(chan error, 1)
			go func() { errc <- nodeSync(ms[0].Node, 1) }()
			if !tc.before {
				asleep(t, ms[0].Node.Probe().Sleepers(2))
				start = time.Now()
				require.NoError(t, ms[2].Close())
			}
			select {
			case err := <-errc:
				require.ErrorIs(t, err, ErrClosed)
				require.Contains(t, err.Error(), "waiting for rank 2")
				require.Contains(t, err.Error(), "destroyed or aborted its communicator")
			case <-time.After(3 * time.Second):
				t.Fatal("Sync did not notice the closed peer")
			}
			require.Less(t, time.Since(start), 2*time.Second)
			err := nodeSync(ms[2].Node, 1)
			require.ErrorIs(t, err, ErrClosed)
			require.Contains(t, err.Error(), "closed by this side")
		})
	}
}

func TestShmNodeSilentPeerTimesOut(t *testing.T) {
	const timeout = 400 * time.Millisecond
	ms := newMesh(t, 2, meshCfg(timeout), smallShm(shmTestDir(t)))
	start := time.Now()
	err := nodeSync(ms[0].Node, 1)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "shm step 2 waiting for rank 1")
	require.Contains(t, err.Error(), tcp.EnvTimeout)
	require.GreaterOrEqual(t, took, timeout)
	require.Less(t, took, 3*time.Second)
	// Rank 1, late, is told that rank 0 gave up on the step after it.
	require.NoError(t, nodeSync(ms[1].Node, 1), "the step rank 0 published is there")
	err = nodeSync(ms[1].Node, 2)
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "it failed an earlier step")
}

// TestMeshPeerNeverConnects: a same-host rank that is alive but never
// connects makes Connect time out naming it; its segment is left to it,
// this rank's is gone.
func TestMeshPeerNeverConnects(t *testing.T) {
	const timeout = 400 * time.Millisecond
	dir := shmTestDir(t)
	mcs := prepareMesh(t, 2, meshCfg(timeout), func(int) shm.ShmConfig { return smallShm(dir) }, nil)
	defer mcs[1].Segment.Close()
	start := time.Now()
	m, err := safeConnect(mcs[0])
	took := time.Since(start)
	require.Nil(t, m)
	require.NotErrorIs(t, err, errConnectPanicked)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "rank 0 waiting for the ranks of its host to map shared memory")
	require.Contains(t, err.Error(), "waiting for rank 1")
	require.GreaterOrEqual(t, took, timeout)
	require.Less(t, took, 3*time.Second)
	require.Equal(t, []string{mcs[1].Segment.Name()}, dirEntries(t, dir), "a live peer's segment stays, this rank's is gone")
}

// TestMeshMapFailureReleasesPeers: a rank whose Connect fails while it maps
// the host's segments must tell the ranks that already mapped its own, so
// that they fail at once instead of waiting in the setup step for the
// deadline. (Rank 1 looks for segments in another directory than the one
// it made its own in: it cannot map rank 0's, but rank 0 maps rank 1's.)
func TestMeshMapFailureReleasesPeers(t *testing.T) {
	const timeout = 3 * time.Second
	dir, elsewhere := shmTestDir(t), shmTestDir(t)
	mcs := prepareMesh(t, 2, meshCfg(timeout), func(int) shm.ShmConfig { return smallShm(dir) }, nil)
	mcs[1].Shm.Dir = elsewhere
	res := make(chan connResult, 1)
	go func() {
		m, err := safeConnect(mcs[0])
		res <- connResult{m, err}
	}()
	asleep(t, mcs[1].Segment.Sleepers()) // rank 0 mapped rank 1's segment and waits for its step
	m1, err1 := safeConnect(mcs[1])
	require.Nil(t, m1)
	require.NotErrorIs(t, err1, errConnectPanicked)
	require.ErrorIs(t, err1, shm.ErrShmUnavailable)
	failed := time.Now()
	var r connResult
	select {
	case r = <-res:
	case <-time.After(2 * timeout):
		t.Fatal("rank 0's Connect hung")
	}
	if r.m != nil {
		r.m.Close()
	}
	require.Error(t, r.err)
	require.NotErrorIs(t, r.err, errConnectPanicked)
	require.Less(t, time.Since(failed), time.Second, "rank 0 waited for the deadline after rank 1 had given up: %v", r.err)
	require.ErrorIs(t, r.err, ErrClosed)
	require.Contains(t, r.err.Error(), "waiting for rank 1")
	require.Empty(t, dirEntries(t, dir))
}

// BenchmarkShmLink measures one-way ShmLink throughput between two ranks of
// one process (goroutines), next to BenchmarkLinkLoopback for TCP:
//
//	go test -run '^$' -bench 'BenchmarkShmLink|BenchmarkLinkLoopback' ./hostnet/
//
// FLAGCX_SHM_P2P_SIZE applies.
func BenchmarkShmLink(b *testing.B) {
	sc, err := shm.ShmConfigFromEnv()
	require.NoError(b, err)
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20, 256 << 20} {
		b.Run("size="+nettest.SizeName(size), func(b *testing.B) {
			sc.Dir, sc.WindowBytes = shmTestDir(b), shm.MinShmAreaBytes
			ms := newMesh(b, 2, testConfig(time.Minute), sc)
			nettest.BenchStream(b, ms[0].Links[1], ms[1].Links[0], size)
		})
	}
}

// BenchmarkShmPingPong is BenchmarkConnPingPong over shared memory.
func BenchmarkShmPingPong(b *testing.B) {
	ms := newMesh(b, 2, testConfig(time.Minute), smallShm(shmTestDir(b)))
	d, a := ms[0].Links[1], ms[1].Links[0]
	nettest.BenchPingPong(b, d, a)
}

// BenchmarkShmNodeSync measures one collective step of ranks of one
// process.
func BenchmarkShmNodeSync(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprint("ranks=", n), func(b *testing.B) {
			ms := newMesh(b, n, testConfig(time.Minute), smallShm(shmTestDir(b)))
			errs := make(chan error, n)
			b.ResetTimer()
			for _, m := range ms[1:] {
				go func() {
					if err := m.Node.Enter(); err != nil {
						errs <- err
						return
					}
					defer m.Node.Exit()
					for i := 0; i < b.N; i++ {
						if err := m.Node.Sync(uint64(i)); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			require.NoError(b, ms[0].Node.Enter())
			for i := 0; i < b.N; i++ {
				if err := ms[0].Node.Sync(uint64(i)); err != nil {
					b.Fatal(err)
				}
			}
			ms[0].Node.Exit()
			for range ms[1:] {
				require.NoError(b, <-errs)
			}
		})
	}
}

// TestPairStreams: where no variable chose the socket count, a link gets
// at most half the cores per rank of the more crowded of its two hosts (at
// least one socket), and both ends compute the same count.
func TestPairStreams(t *testing.T) {
	host := hostPeers
	auto, fixed := tcp.DefaultConfig(), tcp.DefaultConfig()
	fixed.AutoStreams = false
	tests := []struct {
		name string
		cfg  Config
		a, b []Peer
		want int
	}{
		{"2 cores, one rank per host", auto, host("a", 2, 1), host("b", 2, 1), 1},
		{"32 cores, 2 ranks per host", auto, host("a", 32, 2), host("b", 32, 2), 4},
		{"8 cores, 2 ranks per host", auto, host("a", 8, 2), host("b", 8, 2), 2},
		{"the crowded host decides", auto, host("a", 64, 2), host("b", 16, 8), 1},
		{"cores not said", auto, host("a", 0, 1), host("b", 0, 1), tcp.DefaultStreams},
		{"variables set", fixed, host("a", 2, 1), host("b", 2, 1), tcp.DefaultStreams},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := append(append([]Peer(nil), tc.a...), tc.b...)
			onHost := ranksOnHost(peers)
			a, b := 0, len(tc.a)
			require.Equal(t, tc.want, pairStreams(tc.cfg, peers, onHost, a, b))
			require.Equal(t, tc.want, pairStreams(tc.cfg, peers, onHost, b, a), "both ends agree")
		})
	}
}

// TestPollsLink: a link polls where both its hosts leave a core free, and
// is lean where the more crowded host has at most leanCores cores a rank;
// both ends decide alike (a one-core host next to a roomy one made one
// end exchange on one thread while the other ran the pipe).
func TestPollsLink(t *testing.T) {
	host := hostPeers
	tests := []struct {
		name        string
		a, b        []Peer
		polls, lean bool
	}{
		{"2 cores, one rank per host", host("a", 2, 1), host("b", 2, 1), true, true},
		{"one core on one side", host("a", 1, 1), host("b", 16, 1), false, true},
		{"one host full", host("a", 2, 2), host("b", 2, 1), false, true},
		{"both roomy", host("a", 16, 4), host("b", 16, 4), true, false},
		{"3 cores a rank", host("a", 6, 2), host("b", 16, 1), true, false},
		{"cores not said", host("a", 0, 1), host("b", 0, 1), runtime.NumCPU() > 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := append(append([]Peer(nil), tc.a...), tc.b...)
			onHost := ranksOnHost(peers)
			a, b := 0, len(tc.a)
			require.Equal(t, tc.polls, pollsLink(peers, onHost, a, b))
			require.Equal(t, tc.polls, pollsLink(peers, onHost, b, a), "both ends agree")
			require.Equal(t, tc.lean, linkIsLean(peers, onHost, a, b))
			require.Equal(t, tc.lean, linkIsLean(peers, onHost, b, a), "both ends agree")
		})
	}
}

// hostPeers is the table rows of ranks ranks on host name of cores cores.
func hostPeers(name string, cores, ranks int) []Peer {
	ps := make([]Peer, ranks)
	for i := range ps {
		ps[i] = Peer{Host: name, BootID: "boot-" + name, PidNS: "pid:[1]", Cores: cores}
	}
	return ps
}
