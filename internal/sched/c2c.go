package sched

import (
	"github.com/flagcx/flagcx-go/sdk"
)

// Cluster-to-cluster schedules (Path c2c).
//
// The leader (first rank) of each cluster is its inter rank: the inter
// communicator's rank of cluster c is c. Inside a cluster the vendor
// library (or the host backend) gathers the cluster's contribution at the
// leader; the leader copies it to pinned staging chunk by chunk, runs the
// inter-cluster step on hostnet chunk by chunk, copies each chunk back, and
// the cluster's library spreads the result. Every cluster member issues
// the same intra steps in the same order; every leader the same inter
// steps.

// leaderChunk adds one chunk's trip through a leader (chunk i, bytes sp
// of the call): a device leader copies in (if any) to staging, the
// inter-cluster step runs on the host side, avg is divided there when
// scale is set, and a device leader copies the result to out (if any). A
// host leader's inter step reads in and writes out (in when out is
// none; out when in is none). inter gives the step's collective; after
// is the step the input waits for. It returns the chunk's last step.
func (b *builder) leaderChunk(i int, sp span, after int, in, out Ref, inter Step, scale bool) int {
	src, dst := in, out
	if dst.Buf == BufNone {
		dst = in
	}
	if src.Buf == BufNone {
		src = dst
	}
	last := after
	if b.dev {
		stage := ref(BufStage, sp.Off, sp.Len)
		if in.Buf != BufNone {
			last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{in, stage}}, Chunk: i, Deps: deps(last)})
		}
		src, dst = stage, stage
	}
	inter.Lane, inter.Kind, inter.Chunk, inter.Src, inter.Dst, inter.Deps = LaneNet, KindInter, i, src, dst, deps(last)
	last = b.add(inter)
	if scale {
		last = b.add(Step{Lane: LaneNet, Kind: KindScale, Dst: dst, DType: b.call.DType, N: b.n, Chunk: i})
	}
	if b.dev && out.Buf != BufNone {
		last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: []CopyPair{{dst, out}}, Chunk: i, Deps: deps(last)})
	}
	return last
}

func (b *builder) allReduce() {
	call := b.call
	B := call.Count * b.size
	opR := reduceOp(call.Op)
	sp := b.spans(B)
	src := BufSend
	red := make([]int, len(sp))
	for i := range red {
		red[i] = -1
	}
	if b.m > 1 {
		for i, s := range sp {
			red[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Reduce, Src: ref(BufSend, s.Off, s.Len), Dst: ref(BufRecv, s.Off, s.Len),
				Count: b.count(s.Len), DType: call.DType, Op: opR, Root: 0, Chunk: i})
		}
		src = BufRecv
	}
	fin := make([]int, len(sp))
	devFold := b.allReduceDevFolds(sp)
	if devFold {
		b.p.Why = "the two device leaders exchange their partials and fold them on their devices (reduceLocal)"
	}
	if b.leader {
		for i, s := range sp {
			if devFold {
				fin[i] = b.allReduceDevChunk(i, s, red[i], ref(src, s.Off, s.Len))
				continue
			}
			fin[i] = b.leaderChunk(i, s, red[i], ref(src, s.Off, s.Len), ref(BufRecv, s.Off, s.Len),
				Step{Coll: sdk.AllReduce, Count: b.count(s.Len), DType: call.DType, Op: opR}, call.Op == sdk.Avg)
		}
	}
	b.spreadChunks(sp, fin)
}

// StagedFusedMax is the largest chunk whose staged AllReduce the two
// leaders' host engines run fused with the device copies, in pieces over
// the link's streams (core/internal/executor/staged.go; the engine's
// exchange limit, core/internal/host/allreduce.go's maxExchange).
const StagedFusedMax = 1 << 20

// allReduceDevFolds reports whether a staged AllReduce's leaders exchange
// their partials and fold them on their devices: every plugin can, there
// are two clusters, both led by device ranks, and every chunk is beyond
// StagedFusedMax. Each leader then sends its chunk and receives the
// other's (the bytes a two-rank ring sends), copies it to its device (the
// bytes the host fold copied back), and the host folds nothing; smaller
// chunks keep the fused exchange, which overlaps the copies with the link.
func (b *builder) allReduceDevFolds(sp []span) bool {
	if len(sp) == 0 || len(b.l.Clusters) != 2 || !b.o.StagedDeviceReduce {
		return false
	}
	for _, c := range b.l.Clusters {
		if !b.l.Members[c.Leader].OnDevice() {
			return false
		}
	}
	return sp[len(sp)-1].Len > StagedFusedMax // the last span is the shortest
}

// allReduceDevChunk adds a device leader's steps for chunk i (span s) of
// a staged AllReduce that folds on the devices: its partial (src, after
// the intra Reduce) to staging, the exchange with the other leader, the
// other's partial to device scratch, and the fold of both, in cluster
// order, into recv (Avg divides there). It returns the fold.
func (b *builder) allReduceDevChunk(i int, s span, after int, src Ref) int {
	B := b.call.Count * b.size
	mine, theirs := ref(BufStage, s.Off, s.Len), ref(BufStage, B+s.Off, s.Len)
	dev := ref(BufScratch, s.Off, s.Len)
	peer := 1 - b.c.Index
	last := b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{src, mine}}, Chunk: i, Deps: deps(after)})
	last = b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: sdk.SendRecv, Xfers: []Xfer{{Peer: peer, Ref: mine}, {Peer: peer, Recv: true, Ref: theirs}}, Chunk: i, Deps: deps(last)})
	last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: []CopyPair{{theirs, dev}}, Chunk: i, Deps: deps(last)})
	f := Fold{Dst: ref(BufRecv, s.Off, s.Len), Srcs: []Ref{src, dev}}
	if b.c.Index == 1 {
		f.Srcs = []Ref{dev, src}
	}
	return b.add(Step{Lane: LaneH2D, Kind: KindDevFold, Folds: []Fold{f}, DType: b.call.DType, Op: b.call.Op, N: b.n, Chunk: i, Deps: deps(last, after)})
}

// spreadChunks adds, in a cluster of several ranks, the intra Broadcast of
// each chunk of the receive buffer from the leader, after the leader's
// last step of that chunk (fin).
func (b *builder) spreadChunks(sp []span, fin []int) {
	if b.m == 1 {
		return
	}
	for i, s := range sp {
		d := -1
		if b.leader {
			d = fin[i]
		}
		r := ref(BufRecv, s.Off, s.Len)
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Broadcast, Src: r, Dst: r, Count: s.Len, DType: sdk.Uint8, Root: 0, Chunk: i, Deps: deps(d)})
	}
}

func (b *builder) reduce() {
	call := b.call
	B := call.Count * b.size
	opR := reduceOp(call.Op)
	root := call.Root
	c0 := b.l.ClusterOf(root)
	inC0 := c0.Index == b.c.Index
	rootLocal := b.l.LocalRank(root)
	isRoot := b.rank == root
	sp := b.spans(B)
	// Where the leader's partial result lives on its side of the intra
	// reduce: the root's receive buffer when the leader is the root,
	// scratch otherwise (a non-root's receive buffer must stay untouched).
	acc := BufSend
	red := make([]int, len(sp))
	for i := range red {
		red[i] = -1
	}
	if b.m > 1 {
		dst := BufSend // ignored off the intra root
		if b.leader {
			dst = BufScratch
			if isRoot {
				dst = BufRecv
			}
			acc = dst
		}
		for i, s := range sp {
			red[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Reduce, Src: ref(BufSend, s.Off, s.Len), Dst: ref(dst, s.Off, s.Len),
				Count: b.count(s.Len), DType: call.DType, Op: opR, Root: 0, Chunk: i})
		}
	}
	// The result lands in the root's receive buffer, or in the scratch of
	// the root's leader; a host leader that is not the root leaves its
	// buffers alone (the host Reduce writes only the root's).
	to := Buf(BufNone)
	switch {
	case inC0 && isRoot:
		to = BufRecv
	case inC0 && b.dev:
		to = BufScratch
	}
	fin := make([]int, len(sp))
	devRoot := b.stagedDevFolds(c0)
	if devRoot {
		b.p.Why = "the root's leader folds the other leaders' partials on its device (reduceLocal)"
	}
	if b.leader {
		for i, s := range sp {
			if devRoot {
				fin[i] = b.reduceDevChunk(i, s, red[i], c0, ref(acc, s.Off, s.Len), ref(to, s.Off, s.Len))
				continue
			}
			fin[i] = b.leaderChunk(i, s, red[i], ref(acc, s.Off, s.Len), ref(to, s.Off, s.Len),
				Step{Coll: sdk.Reduce, Count: b.count(s.Len), DType: call.DType, Op: opR, Root: c0.Index}, inC0 && call.Op == sdk.Avg)
		}
	}
	// The root is not its cluster's leader: the leader hands it the result.
	if inC0 && c0.Leader != root {
		for i, s := range sp {
			switch {
			case b.leader:
				b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.SendRecv, Xfers: []Xfer{{Peer: rootLocal, Ref: ref(BufScratch, s.Off, s.Len)}}, Chunk: i, Deps: deps(fin[i])})
			case isRoot:
				b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.SendRecv, Xfers: []Xfer{{Peer: 0, Recv: true, Ref: ref(BufRecv, s.Off, s.Len)}}, Chunk: i})
			}
		}
	}
}

// stagedDevFolds reports whether the leader of cluster c folds what the
// other leaders send on its device (a staged ReduceScatter's leaders, a
// staged Reduce's root's leader): every plugin can, c's leader is a
// device rank, and there are at most three clusters. On the host it
// copies its n partials in and its result out; on the device it copies in
// only what the others fold and out what it received, (clusters-1) parts:
// with up to three clusters its link carries no more, and the host folds
// nothing (its single fold a block is the slowest step where the host's
// memory is shared by several leaders). Every rank decides the same from
// the layout, so the leaders agree on the exchange.
func (b *builder) stagedDevFolds(c *Cluster) bool {
	return b.o.StagedDeviceReduce && b.l.Members[c.Leader].OnDevice() && len(b.l.Clusters) <= min(3, MaxDeviceReduceClusters)
}

// reduceDevChunk adds a leader's steps for chunk i (span s) of a staged
// Reduce whose root's leader, in cluster c0, folds on its device: every
// other leader sends its partial (acc; through staging from a device),
// and the root's leader receives them into staging, copies them to device
// scratch (after its own partial's room) and folds every cluster's
// partial, in cluster order, into to (Avg divides there). after is the
// intra Reduce; it returns the chunk's last step.
func (b *builder) reduceDevChunk(i int, s span, after int, c0 *Cluster, acc, to Ref) int {
	if b.c.Index != c0.Index {
		src, last := acc, after
		if b.dev {
			src = ref(BufStage, s.Off, s.Len)
			last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{acc, src}}, Chunk: i, Deps: deps(after)})
		}
		return b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: sdk.SendRecv, Xfers: []Xfer{{Peer: c0.Index, Ref: src}}, Chunk: i, Deps: deps(last)})
	}
	B := b.call.Count * b.size
	var xs []Xfer
	var cps []CopyPair
	f := Fold{Dst: to}
	t := 0
	for _, o := range b.l.Clusters {
		if o.Index == c0.Index {
			f.Srcs = append(f.Srcs, acc)
			continue
		}
		stage, dev := ref(BufStage, t*B+s.Off, s.Len), ref(BufScratch, (t+1)*B+s.Off, s.Len)
		xs = append(xs, Xfer{Peer: o.Index, Recv: true, Ref: stage})
		cps = append(cps, CopyPair{stage, dev})
		f.Srcs = append(f.Srcs, dev)
		t++
	}
	got := b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: sdk.SendRecv, Xfers: xs, Chunk: i})
	in := b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: cps, Chunk: i, Deps: deps(got)})
	return b.add(Step{Lane: LaneH2D, Kind: KindDevFold, Folds: []Fold{f}, DType: b.call.DType, Op: b.call.Op, N: b.n, Chunk: i, Deps: deps(in, after)})
}

func (b *builder) broadcast() {
	call := b.call
	B := call.Count * b.size
	root := call.Root
	c0 := b.l.ClusterOf(root)
	sp := b.spans(B)
	if c0.Index == b.c.Index {
		// The root's cluster: its library broadcasts from the root; the
		// leader forwards the result to the other leaders as it arrives.
		src := BufSend
		ready := make([]int, len(sp))
		for i, s := range sp {
			ready[i] = -1
			if b.m > 1 {
				from := ref(BufRecv, s.Off, s.Len) // ignored off the root
				if b.rank == root {
					from = ref(BufSend, s.Off, s.Len)
				}
				ready[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Broadcast, Src: from, Dst: ref(BufRecv, s.Off, s.Len),
					Count: s.Len, DType: sdk.Uint8, Root: b.l.LocalRank(root), Chunk: i})
			}
		}
		if b.m > 1 {
			src = BufRecv
		} else {
			// A lone root keeps its own copy (nothing to do in place).
			b.add(Step{Lane: LaneIntra, Kind: KindCopy, Copies: []CopyPair{{ref(BufSend, 0, B), ref(BufRecv, 0, B)}}, Chunk: -1})
		}
		if !b.leader {
			return
		}
		for i, s := range sp {
			b.leaderChunk(i, s, ready[i], ref(src, s.Off, s.Len), Ref{},
				Step{Coll: sdk.Broadcast, Count: s.Len, DType: sdk.Uint8, Root: c0.Index}, false)
		}
		return
	}
	fin := make([]int, len(sp))
	if b.leader {
		for i, s := range sp {
			fin[i] = b.leaderChunk(i, s, -1, Ref{}, ref(BufRecv, s.Off, s.Len),
				Step{Coll: sdk.Broadcast, Count: s.Len, DType: sdk.Uint8, Root: c0.Index}, false)
		}
	}
	b.spreadChunks(sp, fin)
}

// allGather: each cluster gathers its blocks at its leader (slice by
// slice: slice i is bytes [off, off+len) of every block), the leaders
// exchange their clusters' slices on hostnet, and each leader's cluster
// library broadcasts the whole result.
func (b *builder) allGather() {
	call := b.call
	B := call.Count * b.size
	nB := b.n * B
	sp := b.spans(B)
	whole := ref(BufRecv, 0, nB)
	gat := make([]int, len(sp))
	for i, s := range sp {
		gat[i] = -1
		if b.m > 1 {
			src := ref(BufSend, s.Off, s.Len)
			dst := src // ignored off the intra root
			if b.leader {
				dst = ref(BufScratch, b.m*s.Off, b.m*s.Len)
			}
			gat[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Gather, Src: src, Dst: dst, Count: s.Len, DType: sdk.Uint8, Root: 0, Chunk: i})
		}
	}
	if !b.leader {
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Broadcast, Src: whole, Dst: whole, Count: nB, DType: sdk.Uint8, Root: 0, Chunk: -1})
		return
	}
	side := BufRecv
	if b.dev {
		side = BufStage
	}
	block := func(buf Buf, g int, s span) Ref { return ref(buf, g*B+s.Off, s.Len) }
	var fin []int
	for i, s := range sp {
		var cp []CopyPair
		for j, g := range b.c.Ranks {
			from := ref(BufSend, s.Off, s.Len)
			if b.m > 1 {
				from = ref(BufScratch, b.m*s.Off+j*s.Len, s.Len)
			}
			cp = append(cp, CopyPair{from, block(side, g, s)})
		}
		in := b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: cp, Chunk: i, Deps: deps(gat[i])})
		var xs []Xfer
		for _, o := range b.l.Clusters {
			if o.Index == b.c.Index {
				continue
			}
			for _, g := range b.c.Ranks {
				xs = append(xs, Xfer{Peer: o.Index, Ref: block(side, g, s)})
			}
			for _, g := range o.Ranks {
				xs = append(xs, Xfer{Peer: o.Index, Recv: true, Ref: block(side, g, s)})
			}
		}
		last := b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: sdk.SendRecv, Xfers: xs, Chunk: i, Deps: deps(in)})
		if b.dev {
			var out []CopyPair
			if len(sp) == 1 {
				out = []CopyPair{{ref(BufStage, 0, nB), whole}}
			} else {
				for g := 0; g < b.n; g++ {
					out = append(out, CopyPair{block(BufStage, g, s), block(BufRecv, g, s)})
				}
			}
			last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: out, Chunk: i, Deps: deps(last)})
		}
		fin = append(fin, last)
	}
	if b.m > 1 {
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Broadcast, Src: whole, Dst: whole, Count: nB, DType: sdk.Uint8, Root: 0, Chunk: -1, Deps: fin})
	}
}

// reduceScatter: each cluster reduces the whole input at its leader; the
// leaders send each other the partial blocks the other clusters' ranks
// own (slice by slice), each leader combines what it receives for its own
// ranks' blocks, and its cluster library scatters them. A device leader
// combines them on the host, or on its device (stagedDevFolds): it then
// copies in only the other clusters' blocks, copies what it received
// back, and folds it with its own partials there, and the host folds
// nothing.
func (b *builder) reduceScatter() {
	B := b.call.Count * b.size
	nB := b.n * B
	sp := b.spans(B) // also sets the plan's chunking, leader or not
	partial, red := b.rsReduce(nB)
	// The scattered blocks of a cluster of several ranks, in cluster order.
	scat := ref(BufScratch, nB, b.m*B)
	if !b.leader {
		r := ref(BufRecv, 0, B)
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Scatter, Src: r, Dst: r, Count: B, DType: sdk.Uint8, Root: 0, Chunk: -1})
		return
	}
	lay := b.rsHostLayout(B, partial, scat)
	if lay.devFold {
		b.p.Why = "the leaders fold what the other clusters send on their devices (reduceLocal)"
	}
	var fin []int
	for i, s := range sp {
		fin = append(fin, b.rsChunk(&lay, i, s, len(sp), red))
	}
	if b.m > 1 {
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Scatter, Src: scat, Dst: ref(BufRecv, 0, B), Count: B, DType: sdk.Uint8, Root: 0, Chunk: -1, Deps: fin})
	}
}

// rsReduce adds, in a cluster of several ranks, the intra Reduce of the
// whole input (nB bytes) at the leader. It returns where the leader's
// partial sums of all n blocks are, and the step (-1: none).
func (b *builder) rsReduce(nB int) (partial Buf, red int) {
	partial, red = BufSend, -1
	if b.m > 1 {
		dst := ref(BufSend, 0, nB) // ignored off the intra root
		if b.leader {
			dst = ref(BufScratch, 0, nB)
			partial = BufScratch
		}
		red = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.Reduce, Src: ref(BufSend, 0, nB), Dst: dst,
			Count: b.count(nB), DType: b.call.DType, Op: reduceOp(b.call.Op), Root: 0, Chunk: -1})
	}
	return partial, red
}

// rsLayout is where a reduceScatter leader keeps its blocks on the host
// side: part(g) is its partial of rank g's block, acc(g, j) the block of
// its cluster's j-th rank g being accumulated, area(t, j) the receive area
// of the other cluster t's partial of that block.
type rsLayout struct {
	B, nB     int
	partial   Buf
	scat      Ref
	others    []*Cluster
	part, acc func(g, j int, s span) Ref
	area      func(t, j int, s span) Ref
	// devFold: a device leader folds on its device (stagedDevFolds); devArea
	// is area's copy in its device scratch.
	devFold bool
	devArea func(t, j int, s span) Ref
}

// rsHostLayout lays out the host side: this leader's partials of all n
// blocks at [g*B], then one receive area of m blocks per other cluster. On
// a host leader the partials stay where they are (send or scratch); the
// accumulation happens in its own blocks' final places.
func (b *builder) rsHostLayout(B int, partial Buf, scat Ref) rsLayout {
	nB := b.n * B
	lay := rsLayout{B: B, nB: nB, partial: partial, scat: scat}
	for i := range b.l.Clusters {
		if i != b.c.Index {
			lay.others = append(lay.others, &b.l.Clusters[i])
		}
	}
	if b.dev {
		lay.part = func(g, _ int, s span) Ref { return ref(BufStage, g*B+s.Off, s.Len) }
		lay.acc = lay.part
		lay.area = func(t, j int, s span) Ref { return ref(BufStage, nB+(t*b.m+j)*B+s.Off, s.Len) }
		if lay.devFold = b.stagedDevFolds(b.c); lay.devFold {
			base := 0 // after the partials and the scatter area, if any
			if b.m > 1 {
				base = nB + b.m*B
			}
			lay.devArea = func(t, j int, s span) Ref { return ref(BufScratch, base+(t*b.m+j)*B+s.Off, s.Len) }
		}
		return lay
	}
	lay.part = func(g, _ int, s span) Ref { return ref(partial, g*B+s.Off, s.Len) }
	base := nB + b.m*B // after the partials and the scatter area in scratch
	lay.area = func(t, j int, s span) Ref { return ref(BufScratch, base+(t*b.m+j)*B+s.Off, s.Len) }
	if b.m > 1 {
		lay.acc = func(_, j int, s span) Ref { return scat.Sub(j*B+s.Off, s.Len) }
	} else {
		lay.acc = func(_, _ int, s span) Ref { return ref(BufRecv, s.Off, s.Len) }
	}
	return lay
}

// rsChunk adds a leader's steps for slice i (span s of each block, of
// chunks slices): its partials to the host side, the exchange with the
// other leaders, the reduction of what arrived (and avg's division), and
// on a device leader the copy back. after is the intra Reduce; it returns
// the slice's last step.
func (b *builder) rsChunk(lay *rsLayout, i int, s span, chunks, after int) int {
	last := b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: b.rsCopyIn(lay, s, chunks), Chunk: i, Deps: deps(after)})
	var xs []Xfer
	for t, o := range lay.others {
		for _, g := range o.Ranks {
			xs = append(xs, Xfer{Peer: o.Index, Ref: lay.part(g, 0, s)})
		}
		for j := range b.c.Ranks {
			xs = append(xs, Xfer{Peer: o.Index, Recv: true, Ref: lay.area(t, j, s)})
		}
	}
	last = b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: sdk.SendRecv, Xfers: xs, Chunk: i, Deps: deps(last)})
	if lay.devFold {
		return b.rsDevFold(lay, i, s, last)
	}
	opR := reduceOp(b.call.Op)
	for t := range lay.others {
		for j, g := range b.c.Ranks {
			last = b.add(Step{Lane: LaneNet, Kind: KindReduce, Src: lay.area(t, j, s), Dst: lay.acc(g, j, s), DType: b.call.DType, Op: opR, Chunk: i})
		}
	}
	if b.call.Op == sdk.Avg {
		for j, g := range b.c.Ranks {
			last = b.add(Step{Lane: LaneNet, Kind: KindScale, Dst: lay.acc(g, j, s), DType: b.call.DType, N: b.n, Chunk: i})
		}
	}
	if b.dev {
		var cp []CopyPair
		for j, g := range b.c.Ranks {
			to := ref(BufRecv, s.Off, s.Len)
			if b.m > 1 {
				to = lay.scat.Sub(j*lay.B+s.Off, s.Len)
			}
			cp = append(cp, CopyPair{lay.acc(g, j, s), to})
		}
		last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: cp, Chunk: i, Deps: deps(last)})
	}
	return last
}

// rsDevFold adds a device leader's fold of slice i (span s of each
// block) on its device, after the exchange (after): the received partials
// go to device scratch, and each of its cluster's blocks is folded from
// every cluster's partial, in cluster order, into its place (the receive
// buffer, or the area its cluster scatters from). It returns the fold.
func (b *builder) rsDevFold(lay *rsLayout, i int, s span, after int) int {
	var cps []CopyPair
	var folds []Fold
	for j, g := range b.c.Ranks {
		f := Fold{Dst: ref(BufRecv, s.Off, s.Len)}
		if b.m > 1 {
			f.Dst = lay.scat.Sub(j*lay.B+s.Off, s.Len)
		}
		t := 0
		for _, c := range b.l.Clusters {
			if c.Index == b.c.Index {
				f.Srcs = append(f.Srcs, ref(lay.partial, g*lay.B+s.Off, s.Len))
				continue
			}
			cps = append(cps, CopyPair{lay.area(t, j, s), lay.devArea(t, j, s)})
			f.Srcs = append(f.Srcs, lay.devArea(t, j, s))
			t++
		}
		folds = append(folds, f)
	}
	in := b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: cps, Chunk: i, Deps: deps(after)})
	return b.add(Step{Lane: LaneH2D, Kind: KindDevFold, Folds: folds, DType: b.call.DType, Op: b.call.Op, N: b.n, Chunk: i, Deps: deps(in)})
}

// rsCopyIn is the copies that start slice s (of chunks slices) on the host
// side: a device leader's partials to staging (the whole buffer at once
// when there is one slice), a host leader's own partial into each of its
// cluster's blocks.
func (b *builder) rsCopyIn(lay *rsLayout, s span, chunks int) []CopyPair {
	var cp []CopyPair
	if !b.dev {
		for j, g := range b.c.Ranks {
			cp = append(cp, CopyPair{lay.part(g, j, s), lay.acc(g, j, s)})
		}
		return cp
	}
	if lay.devFold {
		// Only what the other clusters fold.
		for _, o := range lay.others {
			for _, g := range o.Ranks {
				cp = append(cp, CopyPair{ref(lay.partial, g*lay.B+s.Off, s.Len), lay.part(g, 0, s)})
			}
		}
		return cp
	}
	if chunks == 1 {
		return []CopyPair{{ref(lay.partial, 0, lay.nB), ref(BufStage, 0, lay.nB)}}
	}
	for g := 0; g < b.n; g++ {
		cp = append(cp, CopyPair{ref(lay.partial, g*lay.B+s.Off, s.Len), lay.part(g, 0, s)})
	}
	return cp
}
