package sched

import (
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/sdk"
)

// The steps of a PathShm plan: what one rank does, in the order core's
// executor runs them (one goroutine; device work is enqueued on the
// caller's stream, LaneIntra, and the d2h and h2d streams, and chained
// with marks and awaits). The geometry and the reasons are in shm.go.
//
// A pipelined call opens with a step (label -2) and closes with one
// (label 2*Chunks), so that nobody reads the windows' halves across the
// call (the host engine's rule), and keeps Slots chunks in flight. Slots
// are reused safely because each rank, before it publishes chunk k, waits
// for its own reads that the next writes would overwrite:
//
//   - two steps (the pieces' reductions): the input area of chunk k is
//     read before the chunk's second step, so chunk k+Slots is put in
//     after it; the output area is read by device copies, so a rank waits
//     for its copies of chunk k-Slots before publishing chunk k.
//   - one step: a rank waits for its copies of chunk k-Lag before
//     publishing chunk k, so once chunk k is published every read of
//     chunk k-Lag is done and chunk k-Lag+Slots may be put in.

// shmBuilder makes one rank's PathShm steps.
type shmBuilder struct {
	*builder
	g     *ShmPlan
	sc    *shmColl
	block int // bytes of the count argument (the message, or one rank's block)
	// partMax is the longest part this rank carries (its part of chunk 0,
	// the longest): the device scratch's area per cluster and slot.
	partMax int
	got     []bool // chunk k's copies out of the windows were marked
}

// shmSteps adds this rank's steps of g to the plan.
func (b *builder) shmSteps(g *ShmPlan) {
	s := &shmBuilder{builder: b, g: g, sc: schedOf(b.call.Coll).shm, block: b.call.Count * b.size, got: make([]bool, g.Chunks())}
	// Room for the steps up front: a Step is a few hundred bytes, and
	// growing the list by doubling would copy them several times (on the
	// small calls' latency path among others).
	if g.OneShot {
		b.p.Steps = make([]Step, 0, 6)
		s.oneShot()
		return
	}
	b.p.Steps = make([]Step, 0, 8+g.Chunks()*(10+2*b.m))
	s.partMax = s.part(0).Len
	s.pipeline()
}

// win is n bytes at off of rank q's window.
func (s *shmBuilder) win(q, off, n int) Ref { return Ref{Buf: BufWindow, Idx: q, Off: off, Len: n} }

// copyLane is where this rank copies: a device rank's copies in and out
// on their streams, a host rank's on the host.
func (s *shmBuilder) copyLane(dev Lane) Lane {
	if s.dev {
		return dev
	}
	return LaneNet
}

// copies adds a step of copies; a host rank's copies right after its
// copies (a chunk's copies out beside the next chunk's copies in) join
// them, so that its executor splits them over its cores at once.
func (s *shmBuilder) copies(lane Lane, k int, cps []CopyPair) {
	if n := len(s.p.Steps); !s.dev && n > 0 && s.p.Steps[n-1].Kind == KindCopy && s.p.Steps[n-1].Lane == lane {
		s.p.Steps[n-1].Copies = append(s.p.Steps[n-1].Copies, cps...)
		return
	}
	s.add(Step{Lane: lane, Kind: KindCopy, Copies: cps, Chunk: k})
}

// mark and await chain a device rank's streams (a host rank has none).
func (s *shmBuilder) mark(lane Lane, k int) {
	if s.dev {
		s.add(Step{Lane: lane, Kind: KindMark, Chunk: k})
		if lane == LaneH2D {
			s.got[k] = true
		}
	}
}

func (s *shmBuilder) await(lane, from Lane, k int) {
	if s.dev {
		s.add(Step{Lane: lane, Kind: KindAwait, From: from, Chunk: k})
	}
}

func (s *shmBuilder) drain(lane Lane) {
	if s.dev {
		s.add(Step{Lane: lane, Kind: KindDrain, Chunk: -1})
	}
}

// sync is step label 2k+phase of chunk k (-1 opens, Chunks closes).
func (s *shmBuilder) sync(k, phase int) {
	c := k
	if k < 0 || k >= s.g.Chunks() {
		c = -1
	}
	s.add(Step{Lane: LaneNet, Kind: KindSync, Label: 2*k + phase, Chunk: c})
}

func (s *shmBuilder) fold(kind Kind, lane Lane, k int, f ...Fold) {
	s.add(Step{Lane: lane, Kind: kind, Folds: f, DType: s.call.DType, Op: s.call.Op, N: s.n, Chunk: k})
}

// part is the range of chunk k this rank carries: part j of m in a device
// cluster that reduces inside first, the whole chunk otherwise.
func (s *shmBuilder) part(k int) Range {
	_, L := s.g.Span(k)
	if !s.dev || s.m == 1 || !s.sc.intra {
		return Range{Len: L}
	}
	return Part(L, s.size, s.m, s.local)
}

// oneShot: one copy in, one fold (or none), one copy out. Every rank
// with input puts it in its window (ReduceScatter: its n blocks) and
// publishes the step; a rank that reduces folds its part of every rank's
// input in rank order as each is posted (a device rank into its own
// window beside its input, then copied back), the others wait for every
// rank's step and copy out what they take. A device rank's copies are
// synchronous (the caller's stream). Every rank waits for every rank's
// step, so that none writes a half of its window (the host engine's rule
// alternates them) that another still reads.
func (s *shmBuilder) oneShot() {
	B, coll := s.block, s.call.Coll
	if s.relays() {
		s.relay()
		return
	}
	if s.puts() {
		var cps []CopyPair
		for bl := 0; bl < s.g.Blocks; bl++ {
			cps = append(cps, CopyPair{Src: ref(BufSend, bl*B, B), Dst: s.win(s.rank, s.g.Block(bl), B)})
		}
		s.copies(s.copyLane(LaneIntra), -1, cps)
		s.drain(LaneIntra)
	}
	var out []CopyPair
	if coll.Reduces() && (!coll.Rooted() || s.rank == s.call.Root) {
		s.add(Step{Lane: LaneNet, Kind: KindPost, Chunk: -1})
		f := Fold{Dst: ref(BufRecv, 0, B)}
		if s.dev {
			f.Dst = s.win(s.rank, s.g.In, B)
			out = append(out, CopyPair{Src: f.Dst, Dst: ref(BufRecv, 0, B)})
		}
		at := 0
		if s.g.Blocks > 1 {
			at = s.g.Block(s.rank) // ReduceScatter: its own block
		}
		for q := 0; q < s.n; q++ {
			f.Srcs = append(f.Srcs, s.win(q, at, B))
		}
		s.fold(KindFoldPosted, LaneNet, -1, f)
	} else {
		s.add(Step{Lane: LaneNet, Kind: KindSync, Chunk: -1})
		out = s.oneShotOut()
	}
	if len(out) > 0 {
		s.copies(s.copyLane(LaneIntra), -1, out)
		s.drain(LaneIntra)
	}
}

// relayWords are the bytes after a one-step call's input area in which a
// relaying rank's landed and go words sit, a cache line each.
const relayWords = 128

// relays reports whether this rank's one-step call takes one launch
// (KindRelay): a device rank whose plugin relays (every device rank's
// does: Options.ShmRelay), a block of at most ShmRelayMax bytes, room for
// the words after the window half's input area, and a call one relay
// does (relay): AllReduce and the Reduce it roots from at most
// MaxDeviceReduceClusters inputs, the Reduce it does not root (its put
// alone), and the Broadcast it roots. Another rank's Broadcast keeps its
// copy out: with nothing to put, the relay saves no wait on the host and
// a lone call took longer than the copy (docs/performance.md, "700 B
// beside host ranks: relays that return once launched, folds after one
// bus trip").
// AllGather and ReduceScatter put or take several blocks, which one
// relay's one put and one fold do not.
func (s *shmBuilder) relays() bool {
	if !s.dev || !s.o.ShmRelay || s.block > ShmRelayMax || s.g.In+relayWords > s.o.ShmWindow/2 {
		return false
	}
	coll := s.call.Coll
	folds := coll == sdk.AllReduce || (coll == sdk.Reduce && s.rank == s.call.Root)
	rooted := coll.Rooted() && s.rank == s.call.Root
	return coll == sdk.Broadcast && rooted || coll == sdk.Reduce && !folds || folds && s.n <= MaxDeviceReduceClusters
}

// relay: the device puts this rank's input in its window (where another
// rank reads it) and raises the landed word; the host publishes the step
// and waits for every rank's, then raises the go word; the device folds
// what this rank takes into the receive buffer: every rank's input (its
// own from the send buffer, where it already is) for AllReduce and the
// Reduce it roots, nothing for another rank's Reduce, its own input (a
// fold of one: a copy) for the Broadcast it roots. The host waits for no
// device work: the fold follows in the caller's stream.
func (s *shmBuilder) relay() {
	B, call := s.block, s.call
	st := Step{Lane: LaneIntra, Kind: KindRelay, Dst: s.win(s.rank, s.g.In, relayWords), DType: call.DType, Op: call.Op, N: s.n, Chunk: -1}
	put := []CopyPair{{Src: ref(BufSend, 0, B), Dst: s.win(s.rank, 0, B)}}
	st.Copies = put
	if call.Coll == sdk.Broadcast {
		st.Op, st.N = sdk.Sum, 1
		st.Folds = []Fold{{Dst: ref(BufRecv, 0, B), Srcs: []Ref{ref(BufSend, 0, B)}}}
		s.add(st)
		return
	}
	if call.Coll == sdk.Reduce && s.rank != call.Root {
		s.add(st) // the put alone
		return
	}
	f := Fold{Dst: ref(BufRecv, 0, B)}
	for q := 0; q < s.n; q++ {
		src := s.win(q, 0, B)
		if q == s.rank {
			src = ref(BufSend, 0, B)
		}
		f.Srcs = append(f.Srcs, src)
	}
	st.Folds = []Fold{f}
	s.add(st)
}

// oneShotOut are the copies out of the windows of a one-step call that
// folds nothing here: AllGather's every block, Broadcast's root's input
// (the root's own copy), none for Reduce's other ranks.
func (s *shmBuilder) oneShotOut() []CopyPair {
	B, coll := s.block, s.call.Coll
	switch {
	case coll.Reduces():
		return nil
	case !coll.Rooted():
		var cps []CopyPair
		for q := 0; q < s.n; q++ {
			src := s.win(q, 0, B)
			if q == s.rank {
				src = ref(BufSend, 0, B) // no trip over the link (getEvery)
			}
			cps = append(cps, CopyPair{Src: src, Dst: ref(BufRecv, q*B, B)})
		}
		return cps
	case s.rank == s.call.Root:
		return []CopyPair{{Src: ref(BufSend, 0, B), Dst: ref(BufRecv, 0, B)}}
	}
	return []CopyPair{{Src: s.win(s.call.Root, 0, B), Dst: ref(BufRecv, 0, B)}}
}

// puts reports whether this rank puts input in its window: not the root
// of a device-reduced Reduce, which reads its own input on its device.
func (s *shmBuilder) puts() bool {
	if s.g.Registered && !s.dev {
		return false // the host-facing clusters read its input where it is
	}
	if s.sc.rootOnly || (s.g.DeviceReduce && s.call.Coll.Rooted()) {
		return s.sc.rootOnly == (s.rank == s.call.Root)
	}
	return true
}

// pipeline: the chunks, Slots of them in flight, one or two steps a chunk.
func (s *shmBuilder) pipeline() {
	g := s.g
	// The d2h stream reads the input after the caller's earlier work.
	s.mark(LaneIntra, -1)
	s.await(LaneD2H, LaneIntra, -1)
	if !s.puts() {
		// Nothing of this rank's waits for the d2h stream, so its copies
		// and folds on the h2d stream wait for the caller's work directly.
		s.await(LaneH2D, LaneIntra, -1)
	}
	s.sync(-1, 0)
	if s.sc.rootOnly && s.rank == s.call.Root {
		// The root's own copy.
		s.copies(s.copyLane(LaneIntra), -1, []CopyPair{{Src: ref(BufSend, 0, s.block), Dst: ref(BufRecv, 0, s.block)}})
	}
	K, two := g.Chunks(), g.Steps() == 2
	issued := 0
	put := func(upTo int) {
		for ; issued < K && issued <= upTo; issued++ {
			s.put(issued)
		}
	}
	put(g.Slots - 1)
	lag := max(g.Lag, 1)
	if two {
		lag = g.Slots
	}
	for k := 0; k < K; k++ {
		if k-lag >= 0 && s.got[k-lag] {
			s.await(LaneNet, LaneH2D, k-lag)
		}
		if s.puts() {
			s.await(LaneNet, LaneD2H, k)
		}
		s.sync(k, 0)
		if two {
			s.reducePiece(k)
			s.sync(k, 1)
		}
		s.sc.get(s, k)
		upTo := k + g.Slots
		if !two {
			upTo = k - lag + g.Slots
		}
		put(upTo)
	}
	s.drain(LaneH2D)
	s.drain(LaneIntra)
	if g.Registered {
		s.drain(LaneD2H) // the host ranks' results
	}
	s.sync(K, 0)
}

// put adds chunk k's input into this rank's window's input area.
func (s *shmBuilder) put(k int) {
	if !s.puts() {
		return
	}
	g := s.g
	off, L := g.Span(k)
	in := g.InArea(k)
	var cps []CopyPair
	switch {
	case s.facesHosts(k):
		// The cluster's partial sum with the host ranks' inputs
		// (shm_registered.go).
		pt := s.hostsFold(k)
		cps = append(cps, CopyPair{Src: ref(BufRecv, off+pt.Off, pt.Len), Dst: s.win(s.rank, in+pt.Off, pt.Len)})
	case s.dev && s.sc.intra && s.m > 1:
		pt := s.intraReduce(k, LaneD2H)
		cps = append(cps, CopyPair{Src: ref(BufRecv, off+pt.Off, pt.Len), Dst: s.win(s.rank, in+pt.Off, pt.Len)})
	case !s.dev && s.sc.pieces:
		// A host rank reduces its own piece straight from its send
		// buffer: it puts the rest of the chunk in.
		own := Range{Off: L}
		if i := g.ReducerIndex(s.rank); i >= 0 {
			own = g.Piece(L, s.size, i)
		}
		for _, r := range []Range{{0, own.Off}, {own.End(), L - own.End()}} {
			if r.Len > 0 {
				cps = append(cps, CopyPair{Src: ref(BufSend, off+r.Off, r.Len), Dst: s.win(s.rank, in+r.Off, r.Len)})
			}
		}
	default:
		for bl := 0; bl < g.Blocks; bl++ {
			if g.DeviceReduce && g.Blocks > 1 && bl == s.rank {
				continue // ReduceScatter: its own block it folds from send
			}
			from := off + bl*s.block // ReduceScatter: block bl's chunk
			cps = append(cps, CopyPair{Src: ref(BufSend, from, L), Dst: s.win(s.rank, in+g.Block(bl), L)})
		}
	}
	if len(cps) > 0 {
		s.copies(s.copyLane(LaneD2H), k, cps)
	}
	s.mark(LaneD2H, k)
}

// intraReduce adds a device cluster's reduction of chunk k (one
// ReduceScatter where its parts are even, else one Reduce per part), after
// which this rank's part is in its recv (that part), and has lane next
// wait for it.
func (s *shmBuilder) intraReduce(k int, next Lane) Range {
	pt := s.reduceScatter(k)
	s.mark(LaneIntra, k)
	s.await(next, LaneIntra, k)
	return pt
}

// reduceScatter adds the intra steps of intraReduce: this rank's part of
// chunk k is in its recv after them (that part).
func (s *shmBuilder) reduceScatter(k int) Range {
	off, L := s.g.Span(k)
	pt := s.part(k)
	st := Step{Lane: LaneIntra, Kind: KindIntra, DType: s.call.DType, Op: reduceOp(s.call.Op), Chunk: k}
	if (L/s.size)%s.m == 0 {
		st.Coll, st.Src, st.Dst, st.Count = sdk.ReduceScatter, ref(BufSend, off, L), ref(BufRecv, off+pt.Off, pt.Len), pt.Len/s.size
		s.add(st)
	} else {
		for jj := 0; jj < s.m; jj++ {
			q := Part(L, s.size, s.m, jj)
			st.Coll, st.Src, st.Dst, st.Count, st.Root = sdk.Reduce, ref(BufSend, off+q.Off, q.Len), ref(BufRecv, off+q.Off, q.Len), q.Len/s.size, jj
			s.add(st)
		}
	}
	return pt
}

// reducePiece: a reducer folds every contribution to its piece of chunk k
// into its output area, and a host rank that gets the result into its
// recv too; a host rank reads its own contribution from its send buffer.
func (s *shmBuilder) reducePiece(k int) {
	g := s.g
	i := g.ReducerIndex(s.rank)
	if i < 0 {
		return
	}
	off, L := g.Span(k)
	piece := g.Piece(L, s.size, i)
	if piece.Len == 0 {
		return
	}
	out, in := g.OutArea(k), g.InArea(k)
	gets := !s.dev && (!s.call.Coll.Rooted() || s.rank == s.call.Root)
	var folds []Fold
	for _, src := range s.sc.sources(s.l, L, s.size, piece) {
		f := Fold{Dst: s.win(s.rank, out+src.Off-piece.Off, src.Len)}
		if gets {
			f.Also = ref(BufRecv, off+src.Off, src.Len)
		}
		for _, q := range src.Ranks {
			r := s.win(q, in+src.Off, src.Len)
			if q == s.rank && !s.dev {
				r = ref(BufSend, off+src.Off, src.Len)
			}
			f.Srcs = append(f.Srcs, r)
		}
		folds = append(folds, f)
	}
	s.fold(KindFold, LaneNet, k, folds...)
}

// held are the copies of the reduced bytes r of chunk k (of L bytes, at
// off in recv) out of the reducers' output areas; a host rank skips its
// own piece, which its fold wrote to its recv.
func (s *shmBuilder) held(k, L int, r Range, off int) []CopyPair {
	var cps []CopyPair
	for _, h := range s.g.Holders(L, s.size, r) {
		if h.Rank == s.rank && !s.dev {
			continue
		}
		cps = append(cps, CopyPair{Src: s.win(h.Rank, s.g.OutArea(k)+h.At, h.Len), Dst: ref(BufRecv, off+h.Off, h.Len)})
	}
	return cps
}

// getCopies adds copies of chunk k's result out of the windows, if any.
func (s *shmBuilder) getCopies(k int, cps []CopyPair) bool {
	if len(cps) == 0 {
		return false
	}
	s.copies(s.copyLane(LaneH2D), k, cps)
	return true
}

// landed marks a device rank's copies of chunk k's result and, in a
// cluster that reduced inside first, its library gathers the parts (as
// bytes: one AllGather where the parts are even, else one Broadcast each).
func (s *shmBuilder) landed(k int) {
	s.mark(LaneH2D, k)
	if s.m > 1 {
		s.await(LaneIntra, LaneH2D, k)
		s.allGather(k)
	}
}

// allGather: the cluster's library gathers chunk k's parts (on the
// caller's stream, after what is there).
func (s *shmBuilder) allGather(k int) {
	off, L := s.g.Span(k)
	pt := s.part(k)
	st := Step{Lane: LaneIntra, Kind: KindIntra, DType: sdk.Uint8, Chunk: k}
	if (L/s.size)%s.m == 0 {
		st.Coll, st.Src, st.Dst, st.Count = sdk.AllGather, ref(BufRecv, off+pt.Off, pt.Len), ref(BufRecv, off, L), pt.Len
		s.add(st)
		return
	}
	for jj := 0; jj < s.m; jj++ {
		q := Part(L, s.size, s.m, jj)
		st.Coll, st.Src, st.Dst, st.Count, st.Root = sdk.Broadcast, ref(BufRecv, off+q.Off, q.Len), ref(BufRecv, off+q.Off, q.Len), q.Len, jj
		s.add(st)
	}
}

// foldOnDevice takes chunk k of a device-reduced AllReduce: this rank
// copies the other clusters' contributions to its part from their
// carriers' input areas into device scratch (one area per cluster and
// slot), folds every cluster's contribution in rank order into recv on
// its device, and lands the chunk. Every copy and fold is on the h2d
// stream, so it runs in order after the copies it reads and before the
// next chunk's copies into the same scratch. In a registered plan the
// host ranks' inputs are in the host-facing cluster's contribution, and
// that cluster writes the result to them (shm_registered.go).
func (s *shmBuilder) foldOnDevice(k int) {
	if !s.dev {
		return // a registered plan's host rank
	}
	off, L := s.g.Span(k)
	pt := s.part(k)
	facing := s.facesHosts(k)
	own := BufSend // a cluster of one: its input itself
	if s.m > 1 || facing {
		own = BufRecv // the intra ReduceScatter's part, or the partial sum
	}
	area := (k % s.g.Slots) * len(s.l.Clusters) * s.partMax
	in := s.g.InArea(k)
	for _, src := range Sources(s.l, L, s.size, pt) {
		var cps []CopyPair
		f := Fold{Dst: ref(BufRecv, off+src.Off, src.Len)}
		for _, q := range src.Ranks {
			r := ref(own, off+src.Off, src.Len)
			switch {
			case s.g.Registered && !s.l.Members[q].OnDevice():
				continue
			case q != s.rank:
				r = ref(BufScratch, area+s.l.ClusterOf(q).Index*s.partMax+src.Off-pt.Off, src.Len)
				cps = append(cps, CopyPair{Src: s.win(q, in+src.Off, src.Len), Dst: r})
			}
			f.Srcs = append(f.Srcs, r)
		}
		if len(cps) > 0 {
			s.copies(LaneH2D, k, cps)
		}
		s.fold(KindDevFold, LaneH2D, k, f)
	}
	s.landed(k)
	if facing {
		s.await(LaneD2H, LaneH2D, k)
		s.copies(LaneD2H, k, s.hostResults(off, pt))
	}
}

// foldRanks takes chunk k of a device-reduced Reduce (at the root) or
// ReduceScatter: this rank copies every other rank's contribution (at at
// in its input area) into device scratch (one area per other rank and
// slot) and folds them with its own (send at own) in rank order into recv
// on its device, on the h2d stream, as foldOnDevice does.
func (s *shmBuilder) foldRanks(k int, own Range, at int) {
	off, L := s.g.Span(k)
	area := (k % s.g.Slots) * (s.n - 1) * s.partMax
	in := s.g.InArea(k) + at
	f := Fold{Dst: ref(BufRecv, off, L)}
	var cps []CopyPair
	for q := 0; q < s.n; q++ {
		if q == s.rank {
			f.Srcs = append(f.Srcs, ref(BufSend, own.Off, own.Len))
			continue
		}
		i := q
		if q > s.rank {
			i--
		}
		r := ref(BufScratch, area+i*s.partMax, L)
		cps = append(cps, CopyPair{Src: s.win(q, in, L), Dst: r})
		f.Srcs = append(f.Srcs, r)
	}
	s.copies(LaneH2D, k, cps)
	s.fold(KindDevFold, LaneH2D, k, f)
	s.mark(LaneH2D, k)
}

// shmString describes a step of the shared-memory plane's own kinds.
func (s Step) shmString(b *strings.Builder) {
	switch s.Kind {
	case KindMark:
		b.WriteString("mark")
		if s.Chunk < 0 {
			b.WriteString(" (the caller's earlier work)")
		}
	case KindAwait:
		fmt.Fprintf(b, "await %s's mark", s.From)
	case KindDrain:
		b.WriteString("drain (the host waits for the stream)")
	case KindSync:
		fmt.Fprintf(b, "step %d (publish, wait for every rank's)", s.Label)
	case KindPost:
		fmt.Fprintf(b, "post step %d", s.Label)
	case KindRelay:
		fmt.Fprintf(b, "relay (one launch; landed and go words in %s): ", s.Dst)
		if len(s.Copies) == 1 {
			fmt.Fprintf(b, "copy %s -> %s, ", s.Copies[0].Src, s.Copies[0].Dst)
		}
		fmt.Fprintf(b, "post step %d, wait for every rank's", s.Label)
		if len(s.Folds) == 1 {
			b.WriteString("; on the device, ")
			Step{Kind: KindFold, DType: s.DType, Op: s.Op, Folds: s.Folds}.shmString(b)
		}
	default: // the folds
		fmt.Fprintf(b, "%s %s %s:", s.Kind, s.DType, s.Op)
		for i, f := range s.Folds {
			if i == 3 && len(s.Folds) > 4 {
				fmt.Fprintf(b, " ... (%d folds)", len(s.Folds))
				break
			}
			if i > 0 {
				b.WriteString(";")
			}
			for j, r := range f.Srcs {
				if j == 4 && len(f.Srcs) > 5 {
					fmt.Fprintf(b, " ... (%d inputs)", len(f.Srcs))
					break
				}
				if j > 0 {
					b.WriteString(" +")
				}
				fmt.Fprintf(b, " %s", r)
			}
			fmt.Fprintf(b, " -> %s", f.Dst)
			if f.Also.Buf != BufNone {
				fmt.Fprintf(b, " and %s", f.Also)
			}
		}
	}
}
