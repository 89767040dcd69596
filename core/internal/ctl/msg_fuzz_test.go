package ctl

import (
	"encoding/json"
	"testing"
)

// FuzzCtl: a message of a peer's control plane, as a rank reads it (a
// hello, or the verdict of a reply): decode returns a message or an error
// for any bytes, never panics, and what it accepts keeps its promise; its
// verdict, handed on (RevokeMsg), is accepted again.
func FuzzCtl(f *testing.F) {
	good, _ := json.Marshal(Msg{Kind: Revoke, From: 1, Failed: []int{2}, Hosts: []string{"h"}, By: 1, Cause: "x"})
	f.Add(good)
	f.Add([]byte(`{"kind":"revoke","failed":[3,1],"hosts":["a"]}`))
	f.Add([]byte(`{"kind":"shrink","exclude":[0,0],"id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		const n = 4
		m, err := decode(b, n)
		if err != nil {
			return
		}
		if m.From < 0 || m.From >= n || m.By < 0 || m.By >= n || len(m.Hosts) != len(m.Failed) ||
			!ascendingRanks(m.Failed, n) || !ascendingRanks(m.Exclude, n) || len(m.Cause) > maxCause+3 || len(m.ID) > maxID {
			t.Fatalf("accepted %+v", m)
		}
		for _, h := range m.Hosts {
			if len(h) > maxHost {
				t.Fatalf("accepted a host of %d bytes", len(h))
			}
		}
		again := RevokeMsg(m.Verdict())
		again.From = m.From
		b, _ = json.Marshal(again)
		if _, err := decode(b, n); err != nil {
			t.Fatalf("the verdict of %+v, handed on, is refused: %v", m, err)
		}
	})
}
