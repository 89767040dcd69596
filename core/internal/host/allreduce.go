package host

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime/trace"
	"sync"

	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// AllReduce leaves in recv, on every rank, the elementwise reduction of all
// ranks' send (count elements of dt). In place: send and recv are the same
// buffer. Avg divides the sum by the rank count once at the end.
func (e *Engine) AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	const name = "AllReduce"
	bytes, _, err := e.check(sdk.Call{Coll: sdk.AllReduce, Count: count, DType: dt, Op: op}, send, recv)
	if err != nil || count == 0 {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allReduce(name, send[:bytes], recv[:bytes], count, dt, op)
}

// Stager feeds an in-place AllReduce piece by piece: the staged
// heterogeneous path, where a device copy fills the host buffer and
// another empties it, lets the network start on the first piece copied
// and the copy back start on the first piece reduced.
type Stager interface {
	// Ready blocks until buf[lo:hi] holds this rank's input, or returns
	// why it never will.
	Ready(lo, hi int) error
	// Done says that buf[lo:hi] holds the result and the engine is done
	// with it. It must not block; each byte is done once, or not at all
	// when the call fails.
	Done(lo, hi int)
}

// AllReduceStaged is AllReduce in place on buf, whose input arrives and
// whose result leaves as st says. The striped exchange (allReduceStriped)
// sends each piece when it is ready and hands each piece of the result on
// when it is final; every other algorithm waits for all of buf first and
// hands all of it on at the end.
func (e *Engine) AllReduceStaged(buf []byte, count int, dt sdk.DataType, op sdk.RedOp, st Stager) error {
	const name = "AllReduce"
	bytes, _, err := e.check(sdk.Call{Coll: sdk.AllReduce, Count: count, DType: dt, Op: op}, buf, buf)
	if err != nil || count == 0 {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	buf = buf[:bytes]
	if k := e.Stripes(bytes); k > 1 {
		return e.allReduceStriped(name, e.p.(Streams), k, buf, buf, count, dt, op, st)
	}
	if err := st.Ready(0, bytes); err != nil {
		return err
	}
	if err := e.allReduce(name, buf, buf, count, dt, op); err != nil {
		return err
	}
	st.Done(0, bytes)
	return nil
}

// allReduce picks the algorithm.
func (e *Engine) allReduce(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	bytes := len(recv)
	switch {
	case e.n == 1:
		copyIn(recv, send) // the reduction of one; Avg divides by 1
		return nil
	case e.shared():
		return e.allReduceShm(name, send, recv, count, dt, op)
	case e.hier() != nil:
		return e.allReduceHier(name, e.hier(), send, recv, count, dt, op)
	}
	if d, ok := e.p.(Duplex); ok && e.n == 2 && bytes > minHalves && d.Lean(1-e.rank) {
		if done, err := e.allReduceHalves(name, d, send, recv, count, dt, op); done {
			return err
		}
	}
	switch {
	case e.n == 2 && bytes > e.smallLimit && bytes <= maxExchange:
		if k := e.Stripes(bytes); k > 1 {
			return e.allReduceStriped(name, e.p.(Streams), k, send, recv, count, dt, op, nil)
		}
		return e.allReduceExchange(name, send, recv, count, dt, op)
	case bytes <= e.smallLimit:
		return e.allReduceDoubling(name, send, recv, dt, op)
	}
	return e.allReduceRing(name, send, recv, count, dt, op)
}

// allReduceDoubling is recursive doubling: log2(p) rounds in which partners
// at distance 1, 2, 4, ... exchange their whole partial results, where p is
// the largest power of two <= n. The first 2*(n-p) ranks pair up first: the
// even one of each pair hands its data to the odd one, sits out, and gets
// the result back at the end. Both partners of an exchange compute
// (lower rank's data) op (higher rank's data), so every rank ends with the
// same bits.
func (e *Engine) allReduceDoubling(name string, send, recv []byte, dt sdk.DataType, op sdk.RedOp) error {
	n, r := e.n, e.rank
	p := 1 << (bits.Len(uint(n)) - 1)
	extra := n - p
	tmp := e.buf(scratchA, len(recv))

	var vrank int
	switch {
	case r < 2*extra && r%2 == 0:
		if err := e.send(name, r+1, send); err != nil {
			return err
		}
		return e.recv(name, r+1, recv)
	case r < 2*extra:
		if err := e.recv(name, r-1, tmp); err != nil {
			return err
		}
		reduce.Into(recv, tmp, send, dt, op)
		vrank = r / 2
	default:
		copyIn(recv, send)
		vrank = r - extra
	}
	for mask := 1; mask < p; mask <<= 1 {
		pv := vrank ^ mask
		peer := pv + extra
		if pv < extra {
			peer = 2*pv + 1
		}
		if err := e.sendrecv(name, peer, recv, peer, tmp); err != nil {
			return err
		}
		if peer < r {
			reduce.Into(recv, tmp, recv, dt, op)
		} else {
			reduce.Into(recv, recv, tmp, dt, op)
		}
	}
	if op == sdk.Avg {
		reduce.Scale(recv, dt, n)
	}
	if r < 2*extra {
		return e.send(name, r-1, recv)
	}
	return nil
}

// allReduceRing is a ring reduce-scatter followed by a ring allgather, as
// one pipe of 2(n-1) steps. The buffer is cut into n blocks (sizes differ
// by at most one element, possibly zero) and every block into C chunks; in
// step s rank r sends block r-s to r+1 and receives block r-s-1 from r-1.
// In the first n-1 steps a received chunk lands in a slot and is reduced
// into recv (recv[b] = send[b] op slot: the first write of recv[b], so
// nothing is copied first); after step n-2 rank r holds the final block
// r+1 (scaled there for Avg). The last n-1 steps circulate final blocks,
// received straight into recv and forwarded from there.
//
// Messages are numbered j = s*C + c. Waits: sending j (s > 0) needs j-C
// processed (the same chunk of the previous step); receiving into slot
// j%K needs j-K processed; receiving a final chunk over recv needs the
// send that last read that region, j-(n-1)C, done.
func (e *Engine) allReduceRing(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	n, r, size := e.n, e.rank, dt.Size()
	maxBlock := (count + n - 1) / n
	C := e.nchunks(maxBlock, size)
	slotBytes := ((maxBlock + C - 1) / C) * size
	const K = pipeSlots
	slots := e.buf(scratchA, K*slotBytes)
	slot := func(j, length int) []byte { return slots[(j%K)*slotBytes:][:length] }
	// chunk returns the byte range of chunk c of block b.
	chunk := func(b, c int) (lo, hi int) {
		bs, bn := split(count, n, b)
		cs, cn := split(bn, C, c)
		return (bs + cs) * size, (bs + cs + cn) * size
	}
	return e.runPipe(&pipe{
		name:  name,
		total: 2 * (n - 1) * C,
		to:    (r + 1) % n,
		from:  mod(r-1, n),
		sendMsg: func(j int) ([]byte, int) {
			s, c := j/C, j%C
			lo, hi := chunk(mod(r-s, n), c)
			if s == 0 {
				return send[lo:hi], -1
			}
			return recv[lo:hi], j - C
		},
		recvMsg: func(j int) ([]byte, int, int) {
			s, c := j/C, j%C
			lo, hi := chunk(mod(r-s-1, n), c)
			if s < n-1 {
				return slot(j, hi-lo), j - K, -1
			}
			return recv[lo:hi], -1, j - (n-1)*C
		},
		process: func(j int, data []byte) {
			s, c := j/C, j%C
			if s >= n-1 {
				return
			}
			lo, hi := chunk(mod(r-s-1, n), c)
			e.reduceInto(recv[lo:hi], send[lo:hi], data, dt, op)
			if s == n-2 && op == sdk.Avg {
				e.scale(recv[lo:hi], dt)
			}
		},
	})
}

// maxExchange is the largest AllReduce of two ranks that exchanges whole
// buffers (over a lean link, from minHalves on, the halves do); larger
// ones take the ring or the halves, which reduce half as much per rank
// and copies fewer bytes: on 2 ranks over loopback TCP (16 cores) the
// exchange was ahead up to 1 MiB and behind from 4 MiB
// (docs/performance.md, "TCP between hosts: one-read frames, exchange of
// two ranks, hierarchy").
const maxExchange = 1 << 20

// minExchangeChunk is the smallest chunk allReduceExchange cuts a buffer
// into for the sake of overlap: over TCP a message costs a few system
// calls and wake-ups whatever its size, so smaller pieces cost more than
// the overlap gains.
const minExchangeChunk = 128 << 10

// allReduceExchange is the AllReduce of two ranks: each sends its whole
// input to the other while receiving the other's, chunk by chunk, and
// reduces every chunk as it arrives (rank 0's data op rank 1's on both, so
// both end with the same bits). Sending never waits for anything, so the
// link streams in both directions at once, and a ring would move the same bytes
// in two dependent halves; recursive doubling, which small buffers take,
// is this exchange in one round trip, unpipelined. In place, a
// chunk is reduced (and so overwritten) only after it was sent.
func (e *Engine) allReduceExchange(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	if d, ok := e.p.(Duplex); ok {
		if done, err := e.allReduceDuplex(name, d, send, recv, dt, op); done {
			return err
		}
	}
	size, peer := dt.Size(), 1-e.rank
	bytes := count * size
	C := max((bytes+e.chunk-1)/e.chunk, min(4, bytes/minExchangeChunk), 1)
	C = min(C, count)
	slotBytes := ((count + C - 1) / C) * size
	const K = pipeSlots
	slots := e.buf(scratchA, min(K, C)*slotBytes)
	span := func(c int) (lo, hi int) {
		s, k := split(count, C, c)
		return s * size, (s + k) * size
	}
	return e.runPipe(&pipe{
		name:  name,
		total: C,
		to:    peer,
		from:  peer,
		sendMsg: func(j int) ([]byte, int) {
			lo, hi := span(j)
			return send[lo:hi], -1
		},
		recvMsg: func(j int) ([]byte, int, int) {
			lo, hi := span(j)
			return slots[(j%K)*slotBytes:][:hi-lo], j - K, -1
		},
		processAfterSent: same(send, recv),
		process: func(j int, data []byte) {
			lo, hi := span(j)
			e.reducePair(recv[lo:hi], send[lo:hi], data, dt, op)
		},
	})
}

// reducePair sets dst to the reduction of a two-rank AllReduce's data,
// own this rank's and theirs the peer's, as rank 0's op rank 1's on both
// ranks (so both compute the same bits), Avg's scaling included.
func (e *Engine) reducePair(dst, own, theirs []byte, dt sdk.DataType, op sdk.RedOp) {
	if e.rank != 0 {
		own, theirs = theirs, own
	}
	e.reduceInto(dst, own, theirs, dt, op)
	if op == sdk.Avg {
		e.scale(dst, dt)
	}
}

// duplexGrain is the least allReduceDuplex reduces at once, but for the
// last bytes: a reduction between socket calls holds up both directions.
const duplexGrain = 64 << 10

// allReduceDuplex is allReduceExchange on the calling goroutine alone,
// where the link can (Duplex): the whole input goes out while the peer's
// comes in, and what has come in is reduced, duplexGrain at a time,
// between the socket's reads and writes (in place, only what has gone
// out). done is false, with nothing moved, where the link cannot.
func (e *Engine) allReduceDuplex(name string, d Duplex, send, recv []byte, dt sdk.DataType, op sdk.RedOp) (done bool, err error) {
	size, peer, bytes := dt.Size(), 1-e.rank, len(recv)
	in := e.buf(scratchA, bytes)
	inPlace := same(send, recv)
	reduced := 0
	reduceTo := func(hi int) {
		if hi <= reduced {
			return
		}
		lo := reduced
		e.reducePair(recv[lo:hi], send[lo:hi], in[lo:hi], dt, op)
		reduced = hi
	}
	ok, err := d.Exchange(peer, send, in, func(got, sent int) {
		hi := got
		if inPlace {
			hi = min(hi, sent)
		}
		if hi -= hi % size; hi-reduced >= duplexGrain {
			reduceTo(hi)
		}
	})
	if !ok || err != nil {
		if err != nil {
			err = fmt.Errorf("host %s: rank %d: %w", name, e.rank, err)
		}
		return ok, err
	}
	reduceTo(bytes)
	return true, nil
}

// minHalves: over a lean link allReduceHalves takes the two-rank
// AllReduces above it from the whole-buffer exchange too. Across 2
// emulated hosts (rounds alternated) 1 MiB was faster that way than
// exchanging whole buffers, and 512 KiB was even (docs/performance.md,
// "Two ranks across hosts: the ring as halves on one thread").
const minHalves = 512 << 10

// halvesChunks is how many chunks (WithChunk, 1 MiB by default)
// allReduceHalves reduces at a time: its scratch is half of that, kept
// between calls. Across 2 emulated hosts of 2 cores (1 rank each, rounds
// alternated with the ring) halves were ahead of the ring at 2 and 4 MiB,
// and in segments of 8 MiB (or 2, no different) at 64 and 256 MiB
// (docs/performance.md, "Two ranks across hosts: the ring as halves on one
// thread", and "Figures that were in comments (issue 41)").
const halvesChunks = 8

// allReduceHalves is the ring of two ranks on the calling goroutine alone,
// where the link can (Duplex) and its hosts have few cores per rank
// (Duplex.Lean: with cores to spare, a thread per direction was faster),
// a segment at a time: the half of the segment that the peer reduces goes
// out while the peer's contribution to this rank's half comes in and is
// reduced, duplexGrain at a time, between the socket's reads and writes;
// then the reduced halves cross. The bytes
// on the wire are the whole exchange's (allReduceDuplex), but each rank
// reduces half, and no goroutine hands a chunk to another (the pipe's
// cost where a rank has few cores). Each half is reduced by one rank, so
// both end with the same bits. done is false, with nothing moved, where
// the link cannot.
func (e *Engine) allReduceHalves(name string, d Duplex, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) (done bool, err error) {
	size := dt.Size()
	seg := max(halvesChunks*e.chunk/size, 2)
	for lo := 0; lo < count; lo += seg {
		hi := min(lo+seg, count)
		ok, err := e.halves(d, send[lo*size:hi*size], recv[lo*size:hi*size], hi-lo, dt, op)
		switch {
		case !ok && lo > 0: // segments moved already
			err = stoppedExchanging(1 - e.rank)
		case !ok:
			return false, nil
		}
		if err != nil {
			return true, fmt.Errorf("host %s: rank %d: %w", name, e.rank, err)
		}
	}
	return true, nil
}

// stoppedExchanging is the error of a link that declined to exchange after
// it had exchanged part of a call (it cannot: Duplex.Exchange declines
// alike for a link's life).
func stoppedExchanging(peer int) error {
	return fmt.Errorf("%w: the link to rank %d stopped exchanging on one thread", sdk.ErrInternalError, peer)
}

// halves is allReduceHalves on one segment.
func (e *Engine) halves(d Duplex, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) (ok bool, err error) {
	size, peer := dt.Size(), 1-e.rank
	half := func(r int) (lo, hi int) {
		s, k := split(count, 2, r)
		return s * size, (s + k) * size
	}
	mlo, mhi := half(e.rank)
	plo, phi := half(peer)
	mine, own := recv[mlo:mhi], send[mlo:mhi]
	in := e.buf(scratchA, mhi-mlo)
	reduced := 0
	reduceTo := func(hi int) {
		lo := reduced
		e.reducePair(mine[lo:hi], own[lo:hi], in[lo:hi], dt, op)
		reduced = hi
	}
	// In place, the peer's half goes out of recv while this rank's half
	// of recv is written: the two do not meet.
	ok, err = d.Exchange(peer, send[plo:phi], in, func(got, _ int) {
		if hi := got - got%size; hi-reduced >= duplexGrain {
			reduceTo(hi)
		}
	})
	if !ok || err != nil {
		return ok, err
	}
	if reduced < len(in) {
		reduceTo(len(in))
	}
	// The link exchanged a moment ago: it cannot decline now, with the
	// first half moved.
	if ok, err = d.Exchange(peer, mine, recv[plo:phi], nil); !ok {
		err = stoppedExchanging(peer)
	}
	return true, err
}

// minStripe is the smallest piece allReduceStriped gives a stream.
const minStripe = 16 << 10

// Stripes is how many streams the two-rank AllReduce of bytes runs on
// (allReduceStriped, AllReduceStaged's pieces): the link's streams, each
// with at least minStripe bytes, or 1 (no striping) where the ranks are
// not two exchanging over a link of several streams.
func (e *Engine) Stripes(bytes int) int {
	st, ok := e.p.(Streams)
	if !ok || e.n != 2 || bytes <= e.smallLimit || bytes > maxExchange || e.shared() || e.hier() != nil {
		return 1
	}
	return max(1, min(st.Streams(1-e.rank), bytes/minStripe))
}

// allReduceStriped is allReduceExchange over k streams of the link at
// once: piece i of the buffer goes out on stream i while piece i of the
// peer's comes in on it, and each received piece is reduced by the
// goroutine that received it, so that the pieces' transfers and their
// reductions all overlap, with no chunk waiting for another. (In place, a
// piece is reduced only after it was sent.) Chunked as allReduceExchange
// is, a message striped over the link's sockets waits for its slowest
// piece before the next goes out, and a single receiver reduces: on the
// 2 x H200 host over loopback TCP (4 sockets) striping took 256 KiB and
// 1 MiB in far less time (docs/performance.md, "Two ranks over TCP in
// pieces: striped exchange and the staged AllReduce").
//
// With a Stager (AllReduceStaged), a piece goes out once st says it is
// ready and is handed on once reduced.
func (e *Engine) allReduceStriped(name string, st Streams, k int, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, stager Stager) error {
	size, peer := dt.Size(), 1-e.rank
	tmp := e.buf(scratchA, count*size)
	inPlace := same(send, recv)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	// fail keeps the error the call returns: the first to happen, unless
	// a later one is this rank's own diagnosis of a misuse (ErrInvalidUsage,
	// e.g. a peer running another operation), which says more than the
	// broken streams it leaves behind on both ranks.
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil || (errors.Is(err, sdk.ErrInvalidUsage) && !errors.Is(first, sdk.ErrInvalidUsage)) {
			first = err
		}
	}
	for i := 0; i < k; i++ {
		s, n := split(count, k, i)
		lo, hi := s*size, (s+n)*size
		sent := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer close(sent)
			if stager != nil {
				if err := stager.Ready(lo, hi); err != nil {
					fail(err)
					return
				}
			}
			defer trace.StartRegion(context.Background(), "stripe send").End()
			if err := st.SendStream(peer, i, send[lo:hi]); err != nil {
				fail(fmt.Errorf("host %s: rank %d sending %d bytes to rank %d: %w", name, e.rank, hi-lo, peer, err))
			}
		}()
		go func() {
			defer wg.Done()
			data := tmp[lo:hi]
			recvd := trace.StartRegion(context.Background(), "stripe recv")
			if err := st.RecvStream(peer, i, data); err != nil {
				fail(fmt.Errorf("host %s: rank %d receiving %d bytes from rank %d: %w", name, e.rank, hi-lo, peer, err))
				return
			}
			recvd.End()
			if inPlace {
				<-sent
			}
			defer trace.StartRegion(context.Background(), "stripe reduce").End()
			if e.rank == 0 {
				reduce.Into(recv[lo:hi], send[lo:hi], data, dt, op)
			} else {
				reduce.Into(recv[lo:hi], data, send[lo:hi], dt, op)
			}
			if op == sdk.Avg {
				reduce.Scale(recv[lo:hi], dt, e.n)
			}
			if stager != nil {
				stager.Done(lo, hi)
			}
		}()
	}
	wg.Wait()
	return first
}
