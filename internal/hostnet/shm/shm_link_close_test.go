//go:build linux

package shm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestShmLinkEveryCloseWaits: every Close of a link returns only once
// its Send and Recv in flight left the rings, the second Close too. The
// Mesh unmaps the rings once its own Close of the link returns; a
// one-sided peer that failed had closed the link first, and the Mesh's
// Close then returned at once and unmapped the rings under a Recv still
// leaving them (a SIGSEGV in shmAwait, in the serve of
// core/internal/onesided/serve.go).
func TestShmLinkEveryCloseWaits(t *testing.T) {
	words := make([]uint32, 16)
	ring := func(i int) shmRing {
		w := words[i*8:]
		return shmRing{head: &w[0], tail: &w[1], recvSleepers: &w[2], sendSleepers: &w[3], senderClosed: &w[4], recverClosed: &w[5]}
	}
	l := &ShmLink{tx: ring(0), rx: ring(1)}
	l.mu.RLock() // a Recv in flight, woken, not yet gone

	first, second := make(chan struct{}), make(chan struct{})
	go func() { _ = l.Close(); close(first) }()
	require.Eventually(t, l.closed.Load, 5*time.Second, time.Millisecond, "the first Close marks the link closed")
	go func() { _ = l.Close(); close(second) }()
	for name, ch := range map[string]chan struct{}{"first": first, "second": second} {
		select {
		case <-ch:
			t.Fatalf("the %s Close returned while a Recv was still in the rings", name)
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.Equal(t, shmClosedByClose, words[4], "this side's closed word in the ring it sends on")
	l.mu.RUnlock()
	for name, ch := range map[string]chan struct{}{"first": first, "second": second} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("the %s Close did not return once the Recv left", name)
		}
	}
}
