package hostcomm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/stretchr/testify/require"
)

func goodAnnounce() announce {
	return announce{peerInfo: peerInfo{Rank: 1, Addr: "10.0.0.2:5000", Host: "n2", Pid: 77}, NRanks: 2}
}

func TestDecodeAnnounce(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(a *announce)
		want string
	}{
		{"valid", func(a *announce) {}, ""},
		{"count zero", func(a *announce) { a.NRanks = 0 }, "rank 1 (10.0.0.2:5000) says the communicator has 0 ranks"},
		{"count huge", func(a *announce) { a.NRanks = hostnet.MaxRanks + 1 }, "ranks (1..1048576)"},
		{"rank beyond count", func(a *announce) { a.Rank = 2 }, "a rank out of range 0..1"},
		{"traversal", func(a *announce) { a.Shm = "../x" }, `shm name "../x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := goodAnnounce()
			tc.edit(&a)
			b, err := json.Marshal(a)
			require.NoError(t, err)
			got, err := decodeAnnounce(b, "10.0.0.2:40000")
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, a, got)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := decodeAnnounce([]byte("{"), "10.0.0.2:40000")
	require.ErrorContains(t, err, "malformed announcement from 10.0.0.2:40000")
}

func TestDecodeReply(t *testing.T) {
	self := goodAnnounce()
	zero := peerInfo{Rank: 0, Addr: "10.0.0.1:5000", Host: "n1", Pid: 76}
	for _, tc := range []struct {
		name  string
		reply rendezvousReply
		want  string
	}{
		{"valid", rendezvousReply{Peers: []peerInfo{zero, self.peerInfo}}, ""},
		{"error", rendezvousReply{Error: "ranks 1 of 2 did not join"}, "rendezvous 10.0.0.1:29500: ranks 1 of 2 did not join"},
		{"short table", rendezvousReply{Peers: []peerInfo{zero}}, "a table of 1 ranks, expected 2"},
		{"bad entry", rendezvousReply{Peers: []peerInfo{{Rank: 0, Addr: "x", Pid: 1}, self.peerInfo}}, "peer rank 0 (x) announced a listener address"},
		{"self changed", rendezvousReply{Peers: []peerInfo{zero, {Rank: 1, Addr: "10.0.0.9:1", Pid: 77}}}, "says this rank is rank 1 (10.0.0.9:1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.reply)
			require.NoError(t, err)
			got, err := decodeReply(b, self, "10.0.0.1:29500")
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, tc.reply.Peers, got)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// The hole of issue 28, replayed: a process admitted to the rendezvous (it
// holds the secret) announces itself as rank 1 of this host with a dead pid
// and a segment name that walks out of /dev/shm. Rank 0's failed setup used
// to remove "dead peers' segments" by joining that name to /dev/shm, which
// deleted the victim file.
func TestPeerShmNameCannotMakeRankZeroDeleteAFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte("keep me"), 0o600))
	rel, err := filepath.Rel(hostnet.DefaultShmDir, victim)
	require.NoError(t, err)
	require.Contains(t, rel, "..")
	dead := exec.Command("true")
	require.NoError(t, dead.Run())

	cfg := testNet(2 * time.Second)
	id, err := NewID("", cfg, nil)
	require.NoError(t, err)
	var attackErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(50 * time.Millisecond) // rank 0 first, as in the report
		evil := announce{peerInfo: peerInfo{Rank: 1, Addr: "127.0.0.1:1", Host: hostname(), Pid: dead.Process.Pid,
			BootID: hostnet.BootID(), PidNS: hostnet.PidNamespace(), Shm: rel}, NRanks: 2}
		_, attackErr = joinRendezvous(id, cfg, evil)
	}()
	_, err = Init(id, 2, 0, cfg)
	wg.Wait()
	require.Error(t, err)
	require.FileExists(t, victim, "rank 0 removed a file a peer named")
	// The door refuses the announcement and says which peer and what.
	require.Error(t, attackErr)
	require.ErrorContains(t, attackErr, "rank 1 (127.0.0.1:1)")
	require.ErrorContains(t, attackErr, "shm name")
	require.ErrorContains(t, err, "ranks 1 of 2 did not join")
}
