package hostnet

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
)

// Fuzz targets: one per message a peer can send to hostnet. Each decoder
// must return a value or an error for any bytes, never panic, and what it
// accepts must keep its promise (checked below). The seed corpora are in
// testdata/fuzz/<target>; `make fuzz-smoke` runs each target briefly.

// FuzzPeerTable: the peer table (from the rendezvous) and one announcement.
func FuzzPeerTable(f *testing.F) {
	good, _ := json.Marshal([]Peer{{Rank: 0, Addr: "10.0.0.1:5000", Host: "n1", Pid: 1}, goodPeer()})
	f.Add(good)
	f.Add([]byte(`[{"rank":0,"addr":"h:1","pid":9,"shm":"../../tmp/victim.txt"}]`))
	f.Add([]byte(`{"rank":1,"addr":"[::1]:80","pid":4242,"shm":"flagcx-noboot-0-4242-00000000000000ff"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var table []Peer
		if json.Unmarshal(b, &table) == nil && CheckPeers(table) == nil {
			for _, p := range table {
				checkAcceptedPeer(t, p)
			}
		}
		var p Peer
		if json.Unmarshal(b, &p) == nil && p.Check(4) == nil {
			checkAcceptedPeer(t, p)
		}
	})
}

func checkAcceptedPeer(t *testing.T, p Peer) {
	if p.Shm == "" {
		return
	}
	if strings.ContainsAny(p.Shm, `/\`) || strings.Contains(p.Shm, "..") || filepath.Join(shm.DefaultShmDir, p.Shm) != shm.DefaultShmDir+"/"+p.Shm {
		t.Fatalf("accepted shm name %q leaves the shm directory", p.Shm)
	}
	if _, _, pid, _, ok := shm.ParseSegName(p.Shm); !ok || pid != p.Pid {
		t.Fatalf("accepted shm name %q of pid %d", p.Shm, p.Pid)
	}
}

// FuzzMeshHello: the hello of a TCP socket of the mesh.
func FuzzMeshHello(f *testing.F) {
	f.Add([]byte(`{"rank":2,"stream":1}`), 1, 4, 2)
	f.Add([]byte(`{"rank":-9,"stream":99}`), 0, 2, 1)
	f.Fuzz(func(t *testing.T, b []byte, rank, n, streams int) {
		h, err := decodeMeshHello(b, "127.0.0.1:1", rank, n, streams)
		if err == nil && (h.Rank <= rank || h.Rank >= n || h.Stream < 0 || h.Stream >= streams) {
			t.Fatalf("accepted %+v for rank %d of %d with %d streams", h, rank, n, streams)
		}
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("error %v does not wrap ErrProtocol", err)
		}
	})
}
