package sched

import "github.com/flagcx/flagcx-go/sdk"

// ---- direct transfers ----------------------------------------------------

// xfer is one transfer of a p2p plan, with a communicator-wide peer.
type xfer struct {
	peer int
	recv bool
	ref  Ref
}

// transfers lists this rank's sends and receives for a data-movement call
// (the collective's entry in schedules, colls.go).
func (b *builder) transfers() []xfer {
	var xs []xfer
	if f := schedOf(b.call.Coll).transfers; f != nil {
		f(b, func(peer int, recv bool, r Ref) {
			if r.Len > 0 {
				xs = append(xs, xfer{peer, recv, r})
			}
		})
	}
	return xs
}

func alltoallTransfers(b *builder, add func(int, bool, Ref)) {
	B := b.call.Count * b.size
	for p := 0; p < b.n; p++ {
		add(p, false, ref(BufSend, p*B, B))
		add(p, true, ref(BufRecv, p*B, B))
	}
}

func alltoallvTransfers(b *builder, add func(int, bool, Ref)) {
	call := b.call
	for p := 0; p < b.n; p++ {
		add(p, false, ref(BufSend, call.SDispls[p]*b.size, call.SendCounts[p]*b.size))
		add(p, true, ref(BufRecv, call.RDispls[p]*b.size, call.RecvCounts[p]*b.size))
	}
}

func gatherTransfers(b *builder, add func(int, bool, Ref)) {
	B := b.call.Count * b.size
	add(b.call.Root, false, ref(BufSend, 0, B))
	if b.rank == b.call.Root {
		for p := 0; p < b.n; p++ {
			add(p, true, ref(BufRecv, p*B, B))
		}
	}
}

func scatterTransfers(b *builder, add func(int, bool, Ref)) {
	B := b.call.Count * b.size
	if b.rank == b.call.Root {
		for p := 0; p < b.n; p++ {
			add(p, false, ref(BufSend, p*B, B))
		}
	}
	add(b.call.Root, true, ref(BufRecv, 0, B))
}

func sendRecvTransfers(b *builder, add func(int, bool, Ref)) {
	for i, x := range b.call.Ops {
		add(x.Peer, x.Recv, Ref{Buf: BufUser, Idx: i, Len: x.Bytes})
	}
}

// p2p moves data directly: to itself by a copy, to ranks of its cluster
// through the cluster's library, to other clusters' ranks over hostnet
// (through pinned staging on device ranks). The intra-cluster part and
// the hostnet part run at the same time.
func (b *builder) p2p() {
	xs := b.transfers()
	var selfSends, selfRecvs []Ref
	var intra, cross []xfer
	for _, x := range xs {
		switch {
		case x.peer == b.rank && x.recv:
			selfRecvs = append(selfRecvs, x.ref)
		case x.peer == b.rank:
			selfSends = append(selfSends, x.ref)
		case b.l.ClusterOf(x.peer).Index == b.c.Index:
			intra = append(intra, x)
		default:
			cross = append(cross, x)
		}
	}
	if len(selfSends) > 0 {
		cp := make([]CopyPair, len(selfSends))
		for i := range selfSends {
			cp[i] = CopyPair{selfSends[i], selfRecvs[i]}
		}
		b.add(Step{Lane: LaneIntra, Kind: KindCopy, Copies: cp, Chunk: -1})
	}
	if len(intra) > 0 {
		var s []Xfer
		for _, x := range intra {
			s = append(s, Xfer{Peer: b.l.LocalRank(x.peer), Recv: x.recv, Ref: x.ref})
		}
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: sdk.SendRecv, Xfers: s, Chunk: -1})
	}
	if len(cross) > 0 {
		b.hostnetXfers(cross)
	}
}

// hostnetXfers adds the transfers of xs over hostnet (a KindWorld SendRecv
// step), through pinned staging on a device rank: its sends are copied to
// staging first (d2h), its receives out of it after (h2d).
func (b *builder) hostnetXfers(xs []xfer) {
	var s []Xfer
	var in, out []CopyPair
	off := 0
	for _, x := range xs {
		r := x.ref
		if b.dev {
			r = ref(BufStage, off, x.ref.Len)
			off += x.ref.Len
			if x.recv {
				out = append(out, CopyPair{r, x.ref})
			} else {
				in = append(in, CopyPair{x.ref, r})
			}
		}
		s = append(s, Xfer{Peer: x.peer, Recv: x.recv, Ref: r})
	}
	first := -1
	if len(in) > 0 {
		first = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: in, Chunk: -1})
	}
	net := b.add(Step{Lane: LaneNet, Kind: KindWorld, Coll: sdk.SendRecv, Xfers: s, Chunk: -1, Deps: deps(first)})
	if len(out) > 0 {
		b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: out, Chunk: -1, Deps: deps(net)})
	}
}
