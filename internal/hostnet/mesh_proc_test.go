//go:build linux

package hostnet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// Ranks in other processes: the test binary re-executed with envMeshChild
// set runs TestMeshChildProcess, which plays one rank as childSpec says.

const envMeshChild = "FLAGCX_TEST_MESH_CHILD"

type childSpec struct {
	// Mode is what the child does:
	//   segment  create its segment, print its name, wait
	//   setup    create its segment, announce its Peer, wait (never connects)
	//   exit     connect, send "hello" to rank 0, exit without Close
	//   wait     connect, send "hello" to rank 0, wait
	// A child waits by reading stdin until EOF, so it ends with its parent.
	Mode    string        `json:"mode"`
	Dir     string        `json:"dir"` // segments
	Rdv     string        `json:"rdv"` // one <rank>.json per rank
	N       int           `json:"n"`
	Rank    int           `json:"rank"`
	Timeout time.Duration `json:"timeout"`
}

// Exit codes of a child (a Go panic exits with 2).
const (
	childOK          = 0
	childSetupFailed = 10 // before Connect
	childConnFailed  = 11 // Connect or the hello failed
	childWaited      = 12 // its stdin was closed
)

func TestMeshChildProcess(t *testing.T) {
	spec := os.Getenv(envMeshChild)
	if spec == "" {
		t.Skip("helper process of the multi-process mesh tests")
	}
	os.Exit(runMeshChild(spec))
}

func runMeshChild(spec string) int {
	var cs childSpec
	if err := json.Unmarshal([]byte(spec), &cs); err != nil {
		fmt.Fprintln(os.Stderr, "bad", envMeshChild, err)
		return childSetupFailed
	}
	wait := func() int {
		_, _ = io.Copy(io.Discard, os.Stdin)
		return childWaited
	}
	seg, err := shm.CreateShmSegment(smallShm(cs.Dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return childSetupFailed
	}
	if cs.Mode == "segment" {
		fmt.Println(seg.Name())
		return wait()
	}
	cfg := meshCfg(cs.Timeout)
	l, err := tcp.ListenAddr("127.0.0.1:0", cfg, testSecret)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return childSetupFailed
	}
	host, _ := os.Hostname()
	self := Peer{Rank: cs.Rank, Addr: l.Addr(), Host: host, Pid: os.Getpid(), BootID: shm.BootID(), PidNS: shm.PidNamespace(), Shm: seg.Name()}
	if err := publishPeer(cs.Rdv, self); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return childSetupFailed
	}
	if cs.Mode == "setup" {
		return wait()
	}
	peers, err := awaitPeers(cs.Rdv, cs.N, cs.Timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return childSetupFailed
	}
	m, err := Connect(MeshConfig{Net: cfg, Shm: smallShm(cs.Dir), Secret: testSecret, Listener: l, Segment: seg, Peers: peers, Rank: cs.Rank})
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return childConnFailed
	}
	if err := m.Links[0].Send([]byte("hello")); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		return childConnFailed
	}
	if cs.Mode == "exit" {
		return childOK // no Close: the closed words stay down
	}
	return wait()
}

// publishPeer announces p in dir (written aside, then renamed: readers
// never see half a file).
func publishPeer(dir string, p Peer) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%d.tmp", p.Rank))
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("%d.json", p.Rank)))
}

// awaitPeers waits until the n ranks announced themselves in dir.
func awaitPeers(dir string, n int, timeout time.Duration) ([]Peer, error) {
	deadline := time.Now().Add(timeout)
	peers := make([]Peer, n)
	for r := 0; r < n; {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.json", r)))
		if err == nil {
			if err := json.Unmarshal(b, &peers[r]); err != nil {
				return nil, err
			}
			r++
			continue
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("rank %d did not announce itself in %v", r, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return peers, nil
}

// child is a rank in another process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *syncBuffer
	done   chan struct{} // closed once reaped
	reaped bool
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	os.Stderr.Write(p)
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChild(t *testing.T, cs childSpec) *child {
	t.Helper()
	spec, err := json.Marshal(cs)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestMeshChildProcess$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envMeshChild+"="+string(spec))
	c := &child{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	c.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	c.stdout = bufio.NewReader(out)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		c.stdin.Close()
		if !c.reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) kill(t testing.TB) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
}

// reap waits for the child's end and returns its exit code (-1 if killed).
func (c *child) reap(t testing.TB) int {
	t.Helper()
	c.stdin.Close()
	err := c.cmd.Wait()
	c.reaped = true
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			require.NoError(t, err)
		}
	}
	return c.cmd.ProcessState.ExitCode()
}

// die kills c and returns once it is dead, reaped (zombie false) or not.
func (c *child) die(t testing.TB, zombie bool) {
	t.Helper()
	c.kill(t)
	if zombie {
		// A zombie keeps its /proc entry, in state Z.
		require.Eventually(t, func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.pid()))
			return err == nil && strings.Contains(string(stat), ") Z ")
		}, 5*time.Second, time.Millisecond, "a zombie")
		require.True(t, shm.ProcessEnded(c.pid()))
		return
	}
	require.Equal(t, -1, c.reap(t))
}

// segmentsOf lists the segments of pid in dir.
func segmentsOf(t testing.TB, dir string, pid int) []string {
	t.Helper()
	var names []string
	for _, name := range dirEntries(t, dir) {
		if _, _, p, _, ok := shm.ParseSegName(name); ok && p == pid {
			names = append(names, name)
		}
	}
	return names
}

// procRank0 is this process as rank 0 of a job whose other ranks are
// children: its segment is made and its Peer announced in rdv.
type procRank0 struct {
	dir, rdv string
	cfg      Config
	mc       MeshConfig
}

func newProcRank0(t *testing.T, timeout time.Duration) *procRank0 {
	t.Helper()
	p := &procRank0{dir: shmTestDir(t), rdv: t.TempDir(), cfg: meshCfg(timeout)}
	seg, err := shm.CreateShmSegment(smallShm(p.dir))
	require.NoError(t, err)
	l, err := tcp.ListenAddr("127.0.0.1:0", p.cfg, testSecret)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	self := Peer{Rank: 0, Addr: l.Addr(), Host: testHost(t), Pid: os.Getpid(), BootID: shm.BootID(), PidNS: shm.PidNamespace(), Shm: seg.Name()}
	require.NoError(t, publishPeer(p.rdv, self))
	p.mc = MeshConfig{Net: p.cfg, Shm: smallShm(p.dir), Secret: testSecret, Listener: l, Segment: seg, Rank: 0}
	return p
}

func (p *procRank0) child(t *testing.T, n, rank int, mode string) *child {
	return startChild(t, childSpec{Mode: mode, Dir: p.dir, Rdv: p.rdv, N: n, Rank: rank, Timeout: p.cfg.Timeout})
}

// connect waits for the n ranks' announcements, then connects (in the
// background: the result comes on the channel).
func (p *procRank0) connect(t *testing.T, n int) chan connResult {
	t.Helper()
	peers, err := awaitPeers(p.rdv, n, 20*time.Second)
	require.NoError(t, err)
	p.mc.Peers = peers
	res := make(chan connResult, 1)
	go func() {
		m, err := safeConnect(p.mc)
		res <- connResult{m, err}
	}()
	return res
}

type connResult struct {
	m   *Mesh
	err error
}

// requireDiedSoon: err reports, within a second of died, that process pid
// died; not a timeout.
func requireDiedSoon(t testing.TB, err error, pid int, died time.Time) {
	t.Helper()
	require.Less(t, time.Since(died), time.Second, "the dead peer was noticed too late: %v", err)
	require.ErrorIs(t, err, ErrClosed)
	require.NotErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), fmt.Sprintf("process %d died", pid))
}

func awaitErr(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not return")
		return nil
	}
}

// TestMeshPeerProcessDiesInSetup: a rank killed after it created and
// announced its segment, before it connected. The others' Connect fails
// within a second, names the dead process, and removes its segment.
func TestMeshPeerProcessDiesInSetup(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		during bool // killed while rank 0's Connect waits for it (else before rank 0 connects)
		zombie bool // not reaped
	}{
		{"before rank 0 connects", 2, false, false},
		{"while rank 0 connects", 2, true, false},
		{"while rank 0 connects, zombie", 2, true, true},
		{"one of two children, while both others connect", 3, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProcRank0(t, 20*time.Second) // the deadline is far away
			victim := p.child(t, tc.n, 1, "setup")
			var other *child
			if tc.n == 3 {
				other = p.child(t, tc.n, 2, "wait")
			}
			var res chan connResult
			var died time.Time
			if tc.during {
				res = p.connect(t, tc.n)
				// Watch rank 0 go to sleep on the victim's step counter.
				vp := p.mc.Peers[1]
				watch, sleepers, err := shm.WatchSegment(p.dir, vp.Shm, vp.Pid)
				require.NoError(t, err)
				defer watch.Close()
				asleep(t, sleepers)
				victim.die(t, tc.zombie)
				died = time.Now()
			} else {
				_, err := awaitPeers(p.rdv, tc.n, 20*time.Second)
				require.NoError(t, err)
				victim.die(t, tc.zombie)
				died = time.Now()
				res = p.connect(t, tc.n)
			}
			var r connResult
			select {
			case r = <-res:
			case <-time.After(5 * time.Second):
				t.Fatal("Connect did not notice the death")
			}
			require.Nil(t, r.m)
			require.NotErrorIs(t, r.err, errConnectPanicked)
			requireDiedSoon(t, r.err, victim.pid(), died)
			require.Contains(t, r.err.Error(), "waiting for the ranks of its host to map shared memory")
			if other != nil {
				require.Equal(t, childConnFailed, other.reap(t), "the other survivor fails too")
				require.Contains(t, other.stderr.String(), fmt.Sprintf("process %d died", victim.pid()))
				require.NotContains(t, other.stderr.String(), "panic")
			}
			require.Empty(t, segmentsOf(t, p.dir, victim.pid()), "the dead rank's segment is removed by the survivors")
			require.Empty(t, dirEntries(t, p.dir), "and theirs are gone too")
		})
	}
}

// TestMeshPeerProcessDies: a connected peer process ends without closing
// (exits, or is killed while this rank waits in Recv, Send or Sync): the
// wait fails within a second of the death, saying which process died.
func TestMeshPeerProcessDies(t *testing.T) {
	tests := []struct {
		name   string
		mode   string // the child's
		zombie bool   // killed, not reaped
		// op blocks in rank 0 on the peer; sleepers is the count of the
		// futex it sleeps on.
		op       func(m *Mesh) error
		sleepers func(m *Mesh) *uint32
	}{
		{name: "exits without Close, rank 0 in Recv", mode: "exit",
			op: func(m *Mesh) error { return m.Links[1].Recv(make([]byte, 8)) }},
		{name: "killed, rank 0 in Recv", mode: "wait",
			op:       func(m *Mesh) error { return m.Links[1].Recv(make([]byte, 8)) },
			sleepers: func(m *Mesh) *uint32 { return m.Links[1].(*shm.ShmLink).Probe().RecvSleepers() }},
		{name: "killed, zombie, rank 0 in Recv", mode: "wait", zombie: true,
			op:       func(m *Mesh) error { return m.Links[1].Recv(make([]byte, 8)) },
			sleepers: func(m *Mesh) *uint32 { return m.Links[1].(*shm.ShmLink).Probe().RecvSleepers() }},
		{name: "killed, rank 0 in Send on a full ring", mode: "wait",
			op:       func(m *Mesh) error { return m.Links[1].Send(make([]byte, 1<<20)) },
			sleepers: func(m *Mesh) *uint32 { return m.Links[1].(*shm.ShmLink).Probe().SendSleepers() }},
		{name: "killed, rank 0 in ShmNode.Sync", mode: "wait",
			op:       func(m *Mesh) error { return nodeSync(m.Node, 42) },
			sleepers: func(m *Mesh) *uint32 { return m.Node.Probe().Sleepers(1) }},
		{name: "killed, zombie, rank 0 in ShmNode.Sync", mode: "wait", zombie: true,
			op:       func(m *Mesh) error { return nodeSync(m.Node, 42) },
			sleepers: func(m *Mesh) *uint32 { return m.Node.Probe().Sleepers(1) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProcRank0(t, 20*time.Second)
			c := p.child(t, 2, 1, tc.mode)
			var r connResult
			select {
			case r = <-p.connect(t, 2):
			case <-time.After(10 * time.Second):
				t.Fatal("Connect hung")
			}
			require.NoError(t, r.err)
			m := r.m
			defer m.Close()
			require.Equal(t, "shm", m.Links[1].Transport())
			require.Equal(t, c.pid(), m.Links[1].(*shm.ShmLink).PeerPid())
			hello := make([]byte, 5)
			require.NoError(t, m.Links[1].Recv(hello))
			require.Equal(t, "hello", string(hello))
			// The child sent its hello after Connect returned: its
			// segment is unlinked, as is this rank's.
			require.Empty(t, dirEntries(t, p.dir))

			errc := make(chan error, 1)
			go func() { errc <- tc.op(m) }()
			var died time.Time
			if tc.mode == "exit" {
				require.Equal(t, childOK, c.reap(t))
			} else {
				asleep(t, tc.sleepers(m))
				c.die(t, tc.zombie)
			}
			died = time.Now()
			err := awaitErr(t, errc)
			requireDiedSoon(t, err, c.pid(), died)
			// The link (or node) stays failed.
			if strings.Contains(tc.name, "Sync") {
				require.ErrorIs(t, nodeSync(m.Node, 43), ErrClosed)
			} else {
				require.ErrorIs(t, m.Links[1].Recv(make([]byte, 8)), ErrClosed)
			}
			require.NoError(t, m.Close())
			require.Empty(t, segmentsOf(t, p.dir, c.pid()))
		})
	}
}

// TestCleanStaleShmDeadProcess: the segment of a rank killed before anybody
// mapped it is removed by shm.CleanStaleShm; a live rank's segment never is.
func TestCleanStaleShmDeadProcess(t *testing.T) {
	for _, zombie := range []bool{false, true} {
		t.Run("zombie="+strconv.FormatBool(zombie), func(t *testing.T) {
			dir := shmTestDir(t)
			sc := smallShm(dir)
			own, err := shm.CreateShmSegment(sc)
			require.NoError(t, err)
			defer own.Close()
			c := startChild(t, childSpec{Mode: "segment", Dir: dir, Timeout: 10 * time.Second})
			line, err := c.stdout.ReadString('\n')
			require.NoError(t, err, "the child did not make its segment: %s", c.stderr.String())
			name := strings.TrimSpace(line)
			_, _, pid, _, ok := shm.ParseSegName(name)
			require.True(t, ok, name)
			require.Equal(t, c.pid(), pid)
			path := filepath.Join(dir, name)

			require.Equal(t, 0, shm.CleanStaleShm(sc), "the child is alive")
			require.FileExists(t, path)
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, int64(sc.SegmentBytes()), fi.Size())

			c.die(t, zombie)
			require.Equal(t, 1, shm.CleanStaleShm(sc))
			require.NoFileExists(t, path)
			require.FileExists(t, filepath.Join(dir, own.Name()), "this live process's segment stays")
			require.Equal(t, 0, shm.CleanStaleShm(sc))
		})
	}
}
