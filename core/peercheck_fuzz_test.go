package core

import (
	"encoding/json"
	"testing"

	"github.com/flagcx/flagcx-go/internal/sched"
)

// Fuzz targets: one per message core reads from a peer or from a unique
// id (see peercheck.go). Each decoder returns a value or an error for any
// bytes, never panics, and what it accepts keeps its promise. The seed
// corpora are in testdata/fuzz/<target>; `make fuzz-smoke` runs each
// target briefly.

// FuzzInitRecord: a rank's init record (agree).
func FuzzInitRecord(f *testing.F) {
	good, _ := json.Marshal(initRecord{Member: sched.Member{Rank: 1, Vendor: sched.HostVendor, Device: -1}, Split: "1,1", Chunk: 1 << 20})
	f.Add(append(good, 0, 0, 0))
	f.Add([]byte(`{"member":{"rank":1,"vendor":"X","device":99999999},"chunk":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeInitRecord(b, 1, "rank 1")
		if err != nil {
			return
		}
		if r.Member.Rank != 1 || r.Member.Vendor == "" || r.Chunk < 1 {
			t.Fatalf("accepted %+v", r)
		}
		if _, err := sched.ParseSplitList(r.Split); err != nil {
			t.Fatalf("accepted split %q: %v", r.Split, err)
		}
	})
}

// FuzzUniqueID: both forms of a unique id (the 256 bytes of
// flagcxUniqueId, and the string), which reach a rank from its launcher or,
// in Split, from a peer.
func FuzzUniqueID(f *testing.F) {
	id := UniqueID{Addr: "10.0.0.1:29500", Secret: Secret{1, 2, 3}}
	b := id.Bytes()
	f.Add(b[:])
	f.Add([]byte(id.String()))
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, err := UniqueIDFromBytes(b); err == nil {
			again := id.Bytes()
			if string(again[:]) != string(b) {
				t.Fatalf("UniqueIDFromBytes accepted bytes that do not round-trip")
			}
		}
		if id, err := ParseUniqueID(string(b)); err == nil {
			if again, err := ParseUniqueID(id.String()); err != nil || again != id {
				t.Fatalf("ParseUniqueID accepted %q, which does not round-trip", b)
			}
		}
	})
}
