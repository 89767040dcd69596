// Package reference computes the inputs and the exact expected outputs of
// every collective analytically, so that results are checked against
// arithmetic rather than against a second implementation.
//
// Inputs are small integers that every data type represents exactly, and
// they are chosen per reduction so that the reduced result is exact as well,
// whatever order an implementation combines them in and in whatever type it
// accumulates:
//
//   - sum: per-rank values bounded so that the sum of their magnitudes over
//     all ranks stays within the type's exact range (<= 120 for int8,
//     <= 256 for bfloat16, <= 2048 for float16), so every partial sum is
//     exact too (with more ranks than that budget, only the first ranks
//     contribute, 0 or +-1);
//   - prod: every rank contributes 1 except at most two ranks per element,
//     which contribute 2 or -1 (2 or 3 for unsigned types): no overflow for
//     any rank count;
//   - max, min: each rank holds a distinct value (consecutive integers from a
//     random base, rotated per element), so picking the wrong rank shows;
//   - avg: base + deviation, the deviations summing to zero over the ranks,
//     so sum/n is exactly the base; deviations and values are non-zero, so a
//     result that skipped a rank differs whether it divided by n or n-1. (An implementation that
//     averages floats by pre-multiplying each input by 1/n, as NCCL does,
//     rounds for rank counts that are not powers of two.)
//   - data movement (NoOp): values spread over the type's exact range.
//
// Values depend only on (data type, op, rank count, rank, element index,
// seed). Receive buffers are modelled as starting zeroed: ExpectedInto writes
// the elements a rank receives and leaves the rest of the buffer alone, so
// ranks that receive nothing (non-roots of Reduce and Gather) and the gaps of
// AlltoAllv must come back unchanged.
//
// A Case is one call of a collective (type, op, ranks, root, count, seed):
// FillInput writes a rank's input, Expected and ExpectedInto its exact
// receive buffer, ExpectedRange a window of it (a share of an output that
// several ranks receive alike: Shared), and Compare counts the elements
// that differ; Case.Call is the call as sdk describes it.
//
// Elements are little-endian. Float16 and bfloat16 are converted here
// (Float32ToFloat16, Float32ToBfloat16 and back); Encode, Decode and
// Format read and write single elements of any type.
package reference

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/flagcx/flagcx-go/sdk"
)

// Case is one call of a collective.
type Case struct {
	Coll   sdk.Collective
	Type   sdk.DataType
	Op     sdk.RedOp // reducing collectives only
	NRanks int
	Root   int // rooted collectives only
	// Count is the count argument of the call: elements per rank for
	// AllReduce, Reduce, Broadcast and SendRecv; per-rank chunk for
	// AllGather (sendcount), ReduceScatter (recvcount), AlltoAll (per
	// peer), Gather and Scatter; the slot per peer for AlltoAllv (see
	// AlltoAllvCounts).
	Count int
	Seed  uint64
}

// Validate reports a case that names no real call.
func (c Case) Validate() error {
	if !c.Coll.Valid() || c.Coll.Info().Bus == sdk.BusNone { // a barrier moves no data: nothing to compute
		return fmt.Errorf("%w: invalid collective %d", sdk.ErrInvalidArgument, int(c.Coll))
	}
	switch {
	case !c.Type.Valid():
		return fmt.Errorf("%w: invalid data type %d", sdk.ErrInvalidArgument, int32(c.Type))
	case c.Coll.Reduces() && !c.Op.Valid():
		return fmt.Errorf("%w: invalid reduction op %d", sdk.ErrInvalidArgument, int32(c.Op))
	case c.NRanks < 1:
		return fmt.Errorf("%w: %d ranks (need at least 1)", sdk.ErrInvalidArgument, c.NRanks)
	case c.Coll.Rooted() && (c.Root < 0 || c.Root >= c.NRanks):
		return fmt.Errorf("%w: root %d outside 0..%d", sdk.ErrInvalidArgument, c.Root, c.NRanks-1)
	case c.Count < 0:
		return fmt.Errorf("%w: negative count %d", sdk.ErrInvalidArgument, c.Count)
	}
	return nil
}

// Call is rank's call of the case, as sdk.Dispatch issues it: AlltoAllv
// with rank's counts and displacements (AlltoAllvCounts), SendRecv as the
// ring whose results ExpectedInto gives (send to rank+1, receive from
// rank-1).
func (c Case) Call(rank int) sdk.Call {
	call := sdk.Call{Coll: c.Coll, Count: c.Count, DType: c.Type, Op: c.Op, Root: c.Root}
	if c.Coll == sdk.AlltoAllv {
		call.SendCounts, call.SDispls, call.RecvCounts, call.RDispls = AlltoAllvCounts(c.NRanks, c.Count, rank)
	}
	if c.Coll == sdk.SendRecv {
		call.SendPeer, call.RecvPeer = (rank+1)%c.NRanks, (rank-1+c.NRanks)%c.NRanks
	}
	return call
}

func (c Case) op() sdk.RedOp {
	if c.Coll.Reduces() {
		return c.Op
	}
	return NoOp
}

// SendCount is the number of elements in a rank's send buffer. Every rank
// has one of this size, as nccl-tests allocates them (Scatter's non-roots and
// Broadcast's non-roots included).
func (c Case) SendCount() int {
	send, _ := c.Coll.BufElems(c.Count, c.NRanks)
	return send
}

// RecvCount is the number of elements in a rank's receive buffer (the
// non-roots of Reduce and Gather included).
func (c Case) RecvCount() int {
	_, recv := c.Coll.BufElems(c.Count, c.NRanks)
	return recv
}

// Input is element j of rank's send buffer.
func (c Case) Input(rank, j int) int64 {
	return newGen(c.Type, c.op(), c.NRanks, c.Seed).value(rank, j)
}

// FillInput writes rank's send buffer: SendCount() elements into dst.
// Large buffers are filled in parallel (see parallelFor).
func FillInput(c Case, rank int, dst []byte) {
	g := newGen(c.Type, c.op(), c.NRanks, c.Seed)
	sz := c.Type.Size()
	n := min(c.SendCount(), len(dst)/sz)
	parallelFor(n, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			Encode(c.Type, g.value(rank, j), dst[j*sz:])
		}
	})
}

// Expected is rank's receive buffer after the call, starting from a zeroed
// buffer of RecvCount() elements.
func Expected(c Case, rank int) []byte {
	dst := make([]byte, c.RecvCount()*c.Type.Size())
	ExpectedInto(c, rank, dst)
	return dst
}

// ExpectedInto writes, into rank's receive buffer image dst (RecvCount()
// elements), every element the call delivers to rank, and leaves every
// other element as it is.
func ExpectedInto(c Case, rank int, dst []byte) {
	ExpectedRange(c, rank, dst, 0)
}

// ExpectedRange is ExpectedInto for a window of the receive buffer: dst
// holds the elements from index lo on (dst[0] is element lo), and only the
// delivered elements inside the window are written. A checker can so
// compute a share of an output that several ranks receive alike (Shared)
// without computing the rest. Large windows are computed in parallel.
func ExpectedRange(c Case, rank int, dst []byte, lo int) {
	g := newGen(c.Type, c.op(), c.NRanks, c.Seed)
	sz := c.Type.Size()
	hi := lo + len(dst)/sz
	for _, s := range deliveries(c, g, rank) {
		a, b := max(s.at, lo), min(s.at+s.n, hi)
		if a >= b {
			continue
		}
		parallelFor(b-a, func(x, y int) {
			for at := a + x; at < a+y; at++ {
				Encode(c.Type, s.value(at-s.at), dst[(at-lo)*sz:])
			}
		})
	}
}

// Shared reports whether every rank that receives data gets the same
// receive buffer: every rank for AllReduce, Broadcast and AllGather, the
// root alone for Reduce and Gather (Receives says which).
func (c Case) Shared() bool { return c.Coll.Valid() && c.Coll.Info().Same }

// Receives reports whether rank's receive buffer gets data.
func (c Case) Receives(rank int) bool {
	return !c.Coll.Valid() || !c.Coll.Info().Recv.RootOnly() || rank == c.Root
}

// delivery is a run of elements a call delivers to a rank: elements at to
// at+n-1 of its receive buffer get value(0) to value(n-1).
type delivery struct {
	at, n int
	value func(k int) int64
}

// deliveries lists what the call of c delivers to rank (nothing to a
// rank whose receive buffer gets no data).
func deliveries(c Case, g *gen, rank int) []delivery {
	if !c.Coll.Valid() || !c.Receives(rank) || delivered[c.Coll] == nil {
		return nil
	}
	return delivered[c.Coll](c, g, rank)
}

// delivered is what each collective delivers to a rank that receives,
// indexed by collective.
var delivered = [sdk.NumCollectives]func(c Case, g *gen, rank int) []delivery{
	sdk.AllReduce: func(c Case, g *gen, _ int) []delivery { return whole(c, g.reduced) },
	sdk.Reduce:    func(c Case, g *gen, _ int) []delivery { return whole(c, g.reduced) },
	sdk.Broadcast: func(c Case, g *gen, _ int) []delivery {
		return whole(c, func(k int) int64 { return g.value(c.Root, k) })
	},
	sdk.AllGather: func(c Case, g *gen, _ int) []delivery { return perPeer(c, g.value) },
	sdk.ReduceScatter: func(c Case, g *gen, rank int) []delivery {
		return whole(c, func(k int) int64 { return g.reduced(rank*c.Count + k) })
	},
	sdk.AlltoAll: func(c Case, g *gen, rank int) []delivery {
		return perPeer(c, func(p, k int) int64 { return g.value(p, rank*c.Count+k) })
	},
	sdk.AlltoAllv: func(c Case, g *gen, rank int) []delivery {
		n := c.NRanks
		_, _, recvcounts, rdispls := AlltoAllvCounts(n, c.Count, rank)
		d := make([]delivery, n)
		for p := range d {
			_, sdispls, _, _ := AlltoAllvCounts(n, c.Count, p)
			d[p] = delivery{rdispls[p], recvcounts[p], func(k int) int64 { return g.value(p, sdispls[rank]+k) }}
		}
		return d
	},
	sdk.Gather: func(c Case, g *gen, _ int) []delivery { return perPeer(c, g.value) },
	sdk.Scatter: func(c Case, g *gen, rank int) []delivery {
		return whole(c, func(k int) int64 { return g.value(c.Root, rank*c.Count+k) })
	},
	sdk.SendRecv: func(c Case, g *gen, rank int) []delivery {
		from := (rank - 1 + c.NRanks) % c.NRanks
		return whole(c, func(k int) int64 { return g.value(from, k) })
	},
}

// whole: the receive buffer's count elements get f(0..count-1).
func whole(c Case, f func(k int) int64) []delivery { return []delivery{{0, c.Count, f}} }

// perPeer: block p of the receive buffer gets f(p, 0..count-1).
func perPeer(c Case, f func(p, k int) int64) []delivery {
	d := make([]delivery, c.NRanks)
	for p := range d {
		d[p] = delivery{p * c.Count, c.Count, func(k int) int64 { return f(p, k) }}
	}
	return d
}

// parallelMin is the fewest elements worth a goroutine of their own: below
// it, starting goroutines costs more than the values.
const parallelMin = 1 << 15

// parallelFor calls fn on consecutive pieces [lo, hi) that together cover
// 0..n-1, on up to GOMAXPROCS goroutines at once, and returns when every
// piece is done. Values depend only on their index, so the pieces need no
// coordination.
func parallelFor(n int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/parallelMin)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(n*w/workers, n*(w+1)/workers)
		}()
	}
	wg.Wait()
}

// AlltoAllvCount is how many elements rank src sends to rank dst in AlltoAllv
// with a slot of count elements per peer: an uneven pattern between 0 and
// count, count*((src+2*dst+1) mod (n+1))/n, which includes zero counts for
// every n >= 2 (from rank n-2 to rank 1, among others).
func AlltoAllvCount(nranks, count, src, dst int) int {
	return count * ((src + 2*dst + 1) % (nranks + 1)) / nranks
}

// AlltoAllvCounts gives rank's arguments for AlltoAllv with a slot of count
// elements per peer: the send and receive buffers hold nranks*count
// elements; the data for (from) peer p sits at the start of slot p
// (displacement p*count), and the rest of each slot is a gap that the call
// must leave alone.
func AlltoAllvCounts(nranks, count, rank int) (sendcounts, sdispls, recvcounts, rdispls []int) {
	sendcounts = make([]int, nranks)
	sdispls = make([]int, nranks)
	recvcounts = make([]int, nranks)
	rdispls = make([]int, nranks)
	for p := 0; p < nranks; p++ {
		sendcounts[p] = AlltoAllvCount(nranks, count, rank, p)
		recvcounts[p] = AlltoAllvCount(nranks, count, p, rank)
		sdispls[p] = p * count
		rdispls[p] = p * count
	}
	return
}

// Compare counts the elements of type dt that differ between got and want.
// Integers compare bitwise; floating-point elements compare by value, so +0
// equals -0 and a NaN is always wrong (none is ever expected). Elements past
// the end of the shorter buffer count as wrong.
func Compare(dt sdk.DataType, got, want []byte) int {
	sz := dt.Size()
	if sz == 0 {
		return max(len(got), len(want))
	}
	ng, nw := len(got)/sz, len(want)/sz
	n := min(ng, nw)
	wrong := max(ng, nw) - n
	if !dt.IsFloat() {
		for i := 0; i < n; i++ {
			o := i * sz
			for k := 0; k < sz; k++ {
				if got[o+k] != want[o+k] {
					wrong++
					break
				}
			}
		}
		return wrong
	}
	for i := 0; i < n; i++ {
		o := i * sz
		g, w := got[o:o+sz], want[o:o+sz]
		if string(g) == string(w) && Decode(dt, w) == Decode(dt, w) {
			continue // identical and not NaN
		}
		if Decode(dt, g) != Decode(dt, w) {
			wrong++
		}
	}
	return wrong
}
