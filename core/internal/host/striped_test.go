package host

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// streamPeers is Peers with k streams to each peer (host.Streams): stream
// i is its own LocalPeers net, so that streams wait for nothing of each
// other, as a TCP link's sockets do. failOn, when set, makes that rank's
// receives on that stream fail at once.
type streamPeers struct {
	Peers
	streams []Peers
	failOn  int // a stream index, or -1
}

var errStreamBroken = errors.New("stream broken (test)")

func (p *streamPeers) Streams(int) int { return len(p.streams) }
func (p *streamPeers) SendStream(peer, i int, buf []byte) error {
	return p.streams[i].Send(peer, buf)
}

func (p *streamPeers) RecvStream(peer, i int, buf []byte) error {
	if i == p.failOn {
		return errStreamBroken
	}
	return p.streams[i].Recv(peer, buf)
}

// runStriped runs fn on 2 ranks over streamPeers of k streams and returns
// the errors by rank; rank failRank's stream failStream fails.
func runStriped(t *testing.T, k, failRank, failStream int, fn func(e *Engine) error) []error {
	t.Helper()
	const timeout = 5 * time.Second
	base := NewLocalPeers(2, WithLocalTimeout(timeout))
	nets := make([][]Peers, k)
	for i := range nets {
		nets[i] = NewLocalPeers(2, WithLocalTimeout(timeout))
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		p := &streamPeers{Peers: base[r], failOn: -1}
		for i := range nets {
			p.streams = append(p.streams, nets[i][r])
		}
		if r == failRank {
			p.failOn = failStream
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = fn(New(p)) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * timeout):
		t.Fatalf("ranks did not finish in %v", 3*timeout)
	}
	return errs
}

// TestAllReduceStriped: two ranks whose link has several streams cut the
// exchange into one piece per stream; the result is exact in every type
// and op, in place and not, with piece boundaries inside elements'
// neighbourhoods (odd counts), and a count too small to stripe takes the
// one-stream exchange.
func TestAllReduceStriped(t *testing.T) {
	counts := []int{minStripe/4 - 1, 4*minStripe + 13, 200<<10 + 7}
	for _, k := range []int{2, 3, 4} {
		for _, dt := range sdk.AllDataTypes() {
			for _, op := range sdk.AllRedOps() {
				for _, count := range counts {
					for _, inPlace := range []bool{false, true} {
						t.Run(fmt.Sprintf("k=%d/%v/%v/count=%d/inplace=%v", k, dt, op, count, inPlace), func(t *testing.T) {
							want := redExpect(dt, op, 2, 0, count)
							got := make([][]byte, 2)
							errs := runStriped(t, k, -1, -1, func(e *Engine) error {
								send := redInput(dt, op, e.Rank(), 0, count)
								recv := send
								if !inPlace {
									recv = garbage(count * dt.Size())
								}
								got[e.Rank()] = recv
								return e.AllReduce(send, recv, count, dt, op)
							})
							requireNoErrors(t, errs)
							for r := range got {
								requireElems(t, dt, want, got[r], "rank %d", r)
							}
						})
					}
				}
			}
		}
	}
}

// TestAllReduceStripedFailure: one stream failing on one rank fails the
// call on that rank with the stream's error, and on the other within the
// transport's deadline, never a hang.
func TestAllReduceStripedFailure(t *testing.T) {
	for _, stream := range []int{0, 2} {
		t.Run(fmt.Sprintf("stream %d", stream), func(t *testing.T) {
			count := 64 << 10
			errs := runStriped(t, 3, 1, stream, func(e *Engine) error {
				send := redInput(sdk.Float32, sdk.Sum, e.Rank(), 0, count)
				return e.AllReduce(send, send, count, sdk.Float32, sdk.Sum)
			})
			require.ErrorIs(t, errs[1], errStreamBroken)
			require.ErrorContains(t, errs[1], "host AllReduce: rank 1 receiving")
			require.Error(t, errs[0], "the peer of a failed stream must not succeed")
		})
	}
}

// lateInput is a Stager whose buffer fills piece by piece on another
// goroutine (a device copy, in the staged path): Ready waits for the
// pieces it needs; Done records what was handed on.
type lateInput struct {
	mu     sync.Mutex
	cond   sync.Cond
	filled int // bytes of the buffer that hold the input
	done   [][2]int
}

func newLateInput(buf, input []byte, pieces int) *lateInput {
	s := &lateInput{}
	s.cond.L = &s.mu
	go func() {
		for i := 0; i < pieces; i++ {
			time.Sleep(time.Millisecond)
			lo, hi := i*len(buf)/pieces, (i+1)*len(buf)/pieces
			copy(buf[lo:hi], input[lo:hi])
			s.mu.Lock()
			s.filled = hi
			s.mu.Unlock()
			s.cond.Broadcast()
		}
	}()
	return s
}

func (s *lateInput) Ready(_, hi int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.filled < hi {
		s.cond.Wait()
	}
	return nil
}

func (s *lateInput) Done(lo, hi int) {
	s.mu.Lock()
	s.done = append(s.done, [2]int{lo, hi})
	s.mu.Unlock()
}

// TestAllReduceStaged: an in-place AllReduce whose input arrives late,
// piece by piece, is exact, and hands every byte of the result on exactly
// once: per stripe over several streams, whole on one.
func TestAllReduceStaged(t *testing.T) {
	const count = 100<<10 + 3
	dt, op := sdk.Float32, sdk.Sum
	for _, k := range []int{1, 4} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			want := redExpect(dt, op, 2, 0, count)
			bufs := make([][]byte, 2)
			stagers := make([]*lateInput, 2)
			errs := runStriped(t, k, -1, -1, func(e *Engine) error {
				r := e.Rank()
				bufs[r] = garbage(count * dt.Size())
				stagers[r] = newLateInput(bufs[r], redInput(dt, op, r, 0, count), 5)
				return e.AllReduceStaged(bufs[r], count, dt, op, stagers[r])
			})
			requireNoErrors(t, errs)
			for r := range bufs {
				requireElems(t, dt, want, bufs[r], "rank %d", r)
				covered := make([]int, count*dt.Size())
				for _, d := range stagers[r].done {
					for b := d[0]; b < d[1]; b++ {
						covered[b]++
					}
				}
				require.Equal(t, make([]int, len(covered)), slicesMinus1(covered), "rank %d: every byte handed on exactly once", r)
				require.Len(t, stagers[r].done, k, "rank %d: one hand-on per stripe", r)
			}
		})
	}
}

// slicesMinus1 subtracts 1 from every element (0 everywhere: each byte
// was counted once).
func slicesMinus1(c []int) []int {
	out := make([]int, len(c))
	for i, v := range c {
		out[i] = v - 1
	}
	return out
}
