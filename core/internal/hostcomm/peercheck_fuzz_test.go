package hostcomm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// FuzzAnnounce: a rank's announcement, as the rendezvous reads it.
func FuzzAnnounce(f *testing.F) {
	good, _ := json.Marshal(goodAnnounce())
	f.Add(good)
	f.Add([]byte(`{"rank":1,"addr":"127.0.0.1:1","pid":3,"shm":"../../tmp/victim.txt","nranks":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAnnounce(b, "127.0.0.1:2")
		if err != nil {
			return
		}
		if a.NRanks < 1 || a.Rank < 0 || a.Rank >= a.NRanks || strings.Contains(a.Shm, "/") || hostnet.CheckAddr(a.Addr) != nil {
			t.Fatalf("accepted %+v", a)
		}
	})
}

// FuzzRendezvousReply: the rendezvous's answer, as a rank reads it.
func FuzzRendezvousReply(f *testing.F) {
	self := goodAnnounce()
	good, _ := json.Marshal(rendezvousReply{Peers: []peerInfo{{Rank: 0, Addr: "10.0.0.1:5000", Pid: 76}, self.peerInfo}})
	f.Add(good)
	f.Add([]byte(`{"error":"ranks 1 of 2 did not join"}`))
	f.Add([]byte(`{"peers":[null,{"rank":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		peers, err := decodeReply(b, self, "127.0.0.1:3")
		if err != nil {
			return
		}
		if len(peers) != self.NRanks || peers[self.Rank] != self.peerInfo || hostnet.CheckPeers(peers) != nil {
			t.Fatalf("accepted table %+v", peers)
		}
	})
}
