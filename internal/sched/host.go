package sched

import "github.com/flagcx/flagcx-go/sdk"

// host is the host path: device ranks copy their input to pinned staging,
// one host collective runs over all ranks, device ranks copy the result
// back; host ranks run the collective on their buffers. AllReduce, Reduce
// and Broadcast are pipelined in chunks; every rank cuts the same chunks,
// so the collectives line up.
func (b *builder) host() {
	b.p.Path = PathHost
	call := b.call
	if call.Coll == sdk.SendRecv {
		b.hostP2P()
		return
	}
	sendB, recvB, _ := Needs(call, b.rank, b.n)
	if call.Coll != sdk.AlltoAllv && call.Count == 0 {
		return
	}
	reads := sendB > 0
	writes := recvB > 0
	world := Step{Lane: LaneNet, Kind: KindWorld, Coll: call.Coll, DType: call.DType, Op: call.Op, Root: call.Root, Chunk: -1,
		SendCounts: call.SendCounts, SDispls: call.SDispls, RecvCounts: call.RecvCounts, RDispls: call.RDispls}
	if !b.dev {
		world.Src, world.Dst = ref(BufSend, 0, sendB), ref(BufRecv, 0, recvB)
	} else {
		world.Src, world.Dst = ref(BufStage, 0, sendB), ref(BufStage, sendB, recvB)
	}
	chunked := call.Coll == sdk.AllReduce || call.Coll == sdk.Reduce || call.Coll == sdk.Broadcast
	if !chunked {
		world.Count = call.Count
		in := -1
		if b.dev && reads {
			in = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{ref(BufSend, 0, sendB), world.Src}}, Chunk: -1})
		}
		world.Deps = deps(in)
		net := b.add(world)
		if b.dev && writes {
			var cp []CopyPair
			if call.Coll == sdk.AlltoAllv {
				for p := range call.RecvCounts {
					if n := call.RecvCounts[p] * b.size; n > 0 {
						off := call.RDispls[p] * b.size
						cp = append(cp, CopyPair{ref(BufStage, sendB+off, n), ref(BufRecv, off, n)})
					}
				}
			} else {
				cp = []CopyPair{{world.Dst, ref(BufRecv, 0, recvB)}}
			}
			if len(cp) > 0 {
				b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: cp, Chunk: -1, Deps: deps(net)})
			}
		}
		return
	}
	B := call.Count * b.size
	for i, sp := range b.spans(B) {
		w := world
		w.Chunk = i
		w.Count = b.count(sp.Len)
		w.Src = ref(w.Src.Buf, w.Src.Off+sp.Off, pick(reads, sp.Len))
		w.Dst = ref(w.Dst.Buf, w.Dst.Off+sp.Off, pick(writes, sp.Len))
		if !b.dev {
			w.Src = ref(BufSend, sp.Off, pick(reads, sp.Len))
			w.Dst = ref(BufRecv, sp.Off, pick(writes, sp.Len))
		}
		in := -1
		if b.dev && reads {
			in = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{ref(BufSend, sp.Off, sp.Len), w.Src}}, Chunk: i})
		}
		w.Deps = deps(in)
		net := b.add(w)
		if b.dev && writes {
			b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: []CopyPair{{w.Dst, ref(BufRecv, sp.Off, sp.Len)}}, Chunk: i, Deps: deps(net)})
		}
	}
}

// hostP2P: every send and receive of a group over hostnet, through staging
// on device ranks.
func (b *builder) hostP2P() {
	var xs []xfer
	for i, x := range b.call.Ops {
		if x.Bytes > 0 {
			xs = append(xs, xfer{peer: x.Peer, recv: x.Recv, ref: Ref{Buf: BufUser, Idx: i, Len: x.Bytes}})
		}
	}
	if len(xs) > 0 {
		b.hostnetXfers(xs)
	}
}
