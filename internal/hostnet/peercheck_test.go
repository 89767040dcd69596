package hostnet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
)

// goodPeer is a valid announcement of rank 1 with a segment of pid 4242.
func goodPeer() Peer {
	return Peer{Rank: 1, Addr: "10.0.0.2:5000", Host: "node2", Pid: 4242, BootID: "3f2a-77", PidNS: "pid:[4026531836]",
		Shm: shm.SegName("3f2a-77", "pid:[4026531836]", 4242, 0xabcdef)}
}

func TestPeerCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *Peer)
		want string // "" when valid
	}{
		{"valid", func(p *Peer) {}, ""},
		{"no shm", func(p *Peer) { p.Shm, p.NoShm = "", "disabled\nby FLAGCX_SHM_DISABLE" }, ""},
		{"traversal", func(p *Peer) { p.Shm = "../../tmp/victim.txt" }, `peer rank 1 (10.0.0.2:5000) announced shm name "../../tmp/victim.txt", which is not a flagcx segment name`},
		{"absolute", func(p *Peer) { p.Shm = "/etc/passwd" }, "not a flagcx segment name"},
		{"prefix then traversal", func(p *Peer) { p.Shm = "flagcx-a-1-4242-../../x" }, "not a flagcx segment name"},
		{"dot dot token", func(p *Peer) { p.Shm = "flagcx-a-1-4242-..00000000000000" }, "not a flagcx segment name"},
		{"another pid's segment", func(p *Peer) { p.Pid = 7 }, "made by pid 4242, but it says it is pid 7"},
		{"rank out of range", func(p *Peer) { p.Rank = 2 }, "a rank out of range 0..1"},
		{"negative rank", func(p *Peer) { p.Rank = -1 }, "a rank out of range"},
		{"no port", func(p *Peer) { p.Addr = "10.0.0.2" }, "listener address"},
		{"port zero", func(p *Peer) { p.Addr = "10.0.0.2:0" }, "no port in 1..65535"},
		{"pid zero", func(p *Peer) { p.Pid = 0 }, "pid 0"},
		{"huge pid", func(p *Peer) { p.Pid = 1 << 40 }, "pid 1099511627776"},
		{"control in host", func(p *Peer) { p.Host = "a\x1b[2Jb" }, "host name"},
		{"long reason", func(p *Peer) { p.NoShm = strings.Repeat("x", maxPeerWhy+1) }, "reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := goodPeer()
			tc.edit(&p)
			err := p.Check(2)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrProtocol)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCheckPeersWantsRankOrder(t *testing.T) {
	a, b := goodPeer(), goodPeer()
	a.Rank, a.Shm, a.Addr = 0, "", "10.0.0.1:5000"
	require.NoError(t, CheckPeers([]Peer{a, b}))
	err := CheckPeers([]Peer{b, a})
	require.ErrorIs(t, err, ErrProtocol)
	require.ErrorContains(t, err, "entry 0 of the peer table is rank 1 (10.0.0.2:5000)")
	require.ErrorContains(t, CheckPeers(nil), "a peer table of 0 ranks")
}

// The traversal of issue 28 at the mesh: a same-host rank 1 with a dead pid
// and a segment name out of the shm directory. Connect refuses the table
// before anything uses the name, so the failed setup removes nothing.
func TestConnectRefusesATraversingSegmentName(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	victim := filepath.Join(base, "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o600))
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	mcs := prepareMesh(t, 2, meshCfg(2*time.Second), func(int) shm.ShmConfig { return smallShm(dir) }, func(r int, p *Peer) {
		if r == 1 {
			p.Pid, p.Shm = dead.Process.Pid, "../../victim.txt"
		}
	})
	m, err := Connect(mcs[0])
	require.Nil(t, m)
	require.ErrorIs(t, err, ErrProtocol)
	require.ErrorContains(t, err, `peer rank 1 (`+mcs[0].Peers[1].Addr+`) announced shm name "../../victim.txt"`)
	require.FileExists(t, victim)
	mcs[1].Segment.Close()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "rank 0's segment is gone after its failed setup")
}

func TestDecodeMeshHello(t *testing.T) {
	for _, tc := range []struct {
		hello string
		want  string
	}{
		{`{"rank":2,"stream":1}`, ""},
		{`{"rank":1,"stream":0}`, "dialed rank 1, which only ranks 2..3 dial"},
		{`{"rank":4,"stream":0}`, "dialed rank 1"},
		{`{"rank":2,"stream":2}`, "opened stream 2 of 2"},
		{`{"rank":2,"stream":-1}`, "opened stream -1"},
		{`{"rank":`, "malformed"},
	} {
		h, err := decodeMeshHello([]byte(tc.hello), "127.0.0.1:9", 1, 4, 2)
		if tc.want == "" {
			require.NoError(t, err)
			require.Equal(t, meshHello{Rank: 2, Stream: 1}, h)
			continue
		}
		require.ErrorIs(t, err, ErrProtocol, tc.hello)
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, err, "127.0.0.1:9")
	}
}

func TestSameHostAndTransportFor(t *testing.T) {
	base := Peer{Rank: 0, Addr: "10.0.0.1:5000", Host: "node1", Pid: 100, BootID: "boot-a", PidNS: "pid:[4026531836]", Shm: "flagcx-seg-0"}
	peer := func(f func(*Peer)) Peer { p := base; p.Rank, p.Pid, p.Shm = 1, 200, "flagcx-seg-1"; f(&p); return p }
	tests := []struct {
		name      string
		a, b      Peer
		same      bool
		transport string
	}{
		{"same host, both with a segment", base, peer(func(*Peer) {}), true, "shm"},
		{"addresses do not matter", base, peer(func(p *Peer) { p.Addr = "10.9.9.9:1" }), true, "shm"},
		{"other boot id", base, peer(func(p *Peer) { p.BootID = "boot-b" }), false, "tcp"},
		{"other host name", base, peer(func(p *Peer) { p.Host = "node2" }), false, "tcp"},
		{"other pid namespace", base, peer(func(p *Peer) { p.PidNS = "pid:[4026532000]" }), false, "tcp"},
		{"no boot id on either side", peer(func(p *Peer) { p.BootID = "" }), peer(func(p *Peer) { p.BootID = "" }), false, "tcp"},
		{"no boot id on one side", base, peer(func(p *Peer) { p.BootID = "" }), false, "tcp"},
		{"peer without a segment", base, peer(func(p *Peer) { p.Shm, p.NoShm = "", "FLAGCX_SHM_DISABLE=1" }), true, "tcp"},
		{"this rank without a segment", peer(func(p *Peer) { p.Shm = "" }), base, true, "tcp"},
		{"neither has a segment", peer(func(p *Peer) { p.Shm = "" }), peer(func(p *Peer) { p.Shm = "" }), true, "tcp"},
		{"segment but other host", base, peer(func(p *Peer) { p.Host = "node2"; p.BootID = "boot-b" }), false, "tcp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.same, SameHost(tc.a, tc.b))
			require.Equal(t, tc.same, SameHost(tc.b, tc.a), "symmetric")
			require.Equal(t, tc.transport, TransportFor(tc.a, tc.b))
			require.Equal(t, tc.transport, TransportFor(tc.b, tc.a), "both ends choose the same")
		})
	}
}
