package host

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// duplexPeers is Peers that exchange on the calling goroutine
// (host.Duplex): the message goes out in pieces from a helper goroutine
// while the caller receives it in pieces, so that progress reports bytes
// received ahead of bytes sent and the other way round, with piece
// boundaries inside elements. refuse makes Exchange decline, as a link
// that cannot does; lean is what Lean says.
type duplexPeers struct {
	Peers
	refuse, lean bool
	exchanges    atomic.Int32
}

func (p *duplexPeers) Lean(int) bool { return p.lean }

const duplexTestPiece = 48<<10 + 3

func (p *duplexPeers) Exchange(peer int, out, in []byte, progress func(got, sent int)) (bool, error) {
	if p.refuse {
		return false, nil
	}
	p.exchanges.Add(1)
	var sent atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(out); off += duplexTestPiece {
			end := min(off+duplexTestPiece, len(out))
			if err := p.Send(peer, out[off:end]); err != nil {
				errc <- err
				return
			}
			sent.Store(int64(end))
		}
		errc <- nil
	}()
	for got := 0; got < len(in); {
		end := min(got+duplexTestPiece, len(in))
		if err := p.Recv(peer, in[got:end]); err != nil {
			return true, err
		}
		got = end
		if progress != nil {
			progress(got, int(sent.Load()))
		}
	}
	if err := <-errc; err != nil {
		return true, err
	}
	if progress != nil {
		progress(len(in), len(out))
	}
	return true, nil
}

// TestAllReduceDuplex: two ranks whose link exchanges on one goroutine
// reduce as the bytes come in, exact in every type and op, in place (where
// only what went out may be overwritten) and not: up to maxExchange in one
// exchange of the whole buffers, but beyond minHalves over a lean link in
// two of halves a segment (a segment made small here); a link that
// declines takes the pipe or the ring instead, and beyond maxExchange so
// does one that is not lean, with the same result.
func TestAllReduceDuplex(t *testing.T) {
	const testChunk = 64 << 10 // segments of 512 KiB
	counts := []int{DefaultSmallLimit/4 + 1, 3*duplexGrain/4 + 5, 1<<18 - 3, 1<<19 + 7}
	links := []struct{ refuse, lean bool }{{false, true}, {false, false}, {true, true}}
	for _, link := range links {
		refuse := link.refuse
		for _, dt := range sdk.AllDataTypes() {
			for _, op := range sdk.AllRedOps() {
				for _, count := range counts {
					for _, inPlace := range []bool{false, true} {
						name := fmt.Sprintf("refuse=%v/lean=%v/%v/%v/count=%d/inplace=%v", refuse, link.lean, dt, op, count, inPlace)
						t.Run(name, func(t *testing.T) {
							bytes := count * dt.Size()
							if bytes <= DefaultSmallLimit {
								t.Skip("not an exchange's size for this type")
							}
							want := redExpect(dt, op, 2, 0, count)
							got := make([][]byte, 2)
							peers := make([]*duplexPeers, 2)
							base := NewLocalPeers(2, WithLocalTimeout(5*time.Second))
							var wg sync.WaitGroup
							errs := make([]error, 2)
							for r := range 2 {
								peers[r] = &duplexPeers{Peers: base[r], refuse: refuse, lean: link.lean}
								send := redInput(dt, op, r, 0, count)
								recv := send
								if !inPlace {
									recv = garbage(count * dt.Size())
								}
								got[r] = recv
								wg.Add(1)
								go func() {
									defer wg.Done()
									errs[r] = New(peers[r], WithChunk(testChunk)).AllReduce(send, recv, count, dt, op)
								}()
							}
							wg.Wait()
							requireNoErrors(t, errs)
							for r := range got {
								requireElems(t, dt, want, got[r], "rank %d", r)
								want := int32(1)
								switch {
								case refuse, bytes > maxExchange && !link.lean:
									want = 0
								case bytes > minHalves && link.lean:
									// a segment's halves out, then its reduced halves back
									seg := halvesChunks * testChunk / dt.Size()
									want = int32(2 * ((count + seg - 1) / seg))
								}
								require.Equal(t, want, peers[r].exchanges.Load(), "rank %d's exchanges", r)
							}
						})
					}
				}
			}
		}
	}
}
