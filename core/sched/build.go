package sched

import (
	"fmt"
	"math/bits"

	"github.com/flagcx/flagcx-go/sdk"
)

// Pipeline chunking. A call of B bytes is cut into ceil(B/Chunk) chunks,
// and into at least 4 (of at least MinPipeChunk bytes each) when it is
// large enough, so that copies to the host, the network and copies back
// overlap even for messages not much larger than a chunk.
const (
	DefaultChunk = 16 << 20 // FLAGCX_NET_CHUNK_SIZE default; FlagCX uses 4M, 16M measured better on H200 (docs/performance.md)
	MinPipeChunk = 256 << 10
	minPipeDepth = 4
)

// Options are the communicator-wide settings that shape plans; every rank
// must use the same (the communicator checks at init).
type Options struct {
	// HostPath forces the host path for every call (FLAGCX_USE_HOST_COMM=1).
	HostPath bool
	// Chunk is the pipeline chunk in bytes (FLAGCX_NET_CHUNK_SIZE; 0 means
	// DefaultChunk).
	Chunk int
	// ShmWindow is the smallest shared-memory window of the ranks when
	// every rank shares one host and every device rank registered every
	// window with its runtime (0 otherwise): AllReduce then takes PathShm.
	ShmWindow int
}

// span is a byte range [Off, Off+Len).
type span = Range

// Spans cuts bytes (whole elements of size bytes) into pipeline chunks.
// Every rank computes the same chunks from the same call.
func Spans(bytes, size, chunk int) []span {
	if bytes <= 0 || size <= 0 {
		return nil
	}
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	elems := bytes / size
	per := max(chunk/size, 1)
	k := (elems + per - 1) / per
	if k < minPipeDepth {
		k = max(k, min(minPipeDepth, bytes/MinPipeChunk))
	}
	k = max(min(k, elems), 1)
	out := make([]span, k)
	base, rem := elems/k, elems%k
	off := 0
	for i := range out {
		n := base
		if i < rem {
			n++
		}
		out[i] = span{off * size, n * size}
		off += n
	}
	return out
}

// Needs gives the bytes rank's send and receive buffers must hold for call
// on n ranks (0 where the buffer is not used on this rank).
func Needs(call Call, rank, n int) (send, recv int, err error) {
	size := call.DType.Size()
	b, err := mulBytes(call.Count, size, 1)
	if err != nil {
		return 0, 0, err
	}
	nb, err := mulBytes(call.Count, size, n)
	if err != nil {
		return 0, 0, err
	}
	root := rank == call.Root
	switch call.Coll {
	case AllReduce:
		return b, b, nil
	case Reduce:
		return b, pick(root, b), nil
	case Broadcast:
		return pick(root, b), b, nil
	case AllGather:
		return b, nb, nil
	case ReduceScatter:
		return nb, b, nil
	case AlltoAll:
		return nb, nb, nil
	case Gather:
		return b, pick(root, nb), nil
	case Scatter:
		return pick(root, nb), b, nil
	case AlltoAllv:
		s, err := extent(call.SendCounts, call.SDispls, size, "send")
		if err != nil {
			return 0, 0, err
		}
		r, err := extent(call.RecvCounts, call.RDispls, size, "receive")
		return s, r, err
	}
	return 0, 0, nil
}

func pick(cond bool, v int) int {
	if cond {
		return v
	}
	return 0
}

func mulBytes(count, size, n int) (int, error) {
	if count < 0 {
		return 0, fmt.Errorf("%w: count %d is negative: pass a number of elements, 0 or more", sdk.ErrInvalidArgument, count)
	}
	hi, lo := bits.Mul64(uint64(count), uint64(size))
	hi2, lo2 := bits.Mul64(lo, uint64(n))
	if hi != 0 || hi2 != 0 || lo2 > uint64(maxInt) {
		return 0, fmt.Errorf("%w: count %d overflows the address space: use a smaller count", sdk.ErrInvalidArgument, count)
	}
	return int(lo2), nil
}

const maxInt = int(^uint(0) >> 1)

// extent is the bytes a buffer with these counts and displacements spans.
func extent(counts, displs []int, size int, which string) (int, error) {
	end := 0
	for p := range counts {
		if counts[p] < 0 || displs[p] < 0 {
			return 0, fmt.Errorf("%w: AlltoAllv %s count %d or displacement %d for rank %d is negative", sdk.ErrInvalidArgument, which, counts[p], displs[p], p)
		}
		// Zero counts count too: the host backend checks every region.
		e, err := mulBytes(counts[p]+displs[p], size, 1)
		if err != nil {
			return 0, err
		}
		end = max(end, e)
	}
	return end, nil
}

// Validate checks what every rank can check about a call before building
// its plan.
func Validate(call Call, n int) error {
	switch {
	case call.Coll < 0 || call.Coll >= numColls:
		return fmt.Errorf("%w: unknown collective %d", sdk.ErrInvalidArgument, int(call.Coll))
	case call.Coll == P2P || call.Coll == Barrier:
	case !call.DType.Valid():
		return fmt.Errorf("%w: data type %d is not valid: use one of int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16 (0..9)", sdk.ErrInvalidArgument, int32(call.DType))
	case call.Coll.Reduces() && !call.Op.Valid():
		return fmt.Errorf("%w: reduction op %d is not valid: use sum, prod, max, min or avg (0..4)", sdk.ErrInvalidArgument, int32(call.Op))
	case call.Coll.Rooted() && (call.Root < 0 || call.Root >= n):
		return fmt.Errorf("%w: root %d is out of range for %d ranks: use a rank in 0..%d", sdk.ErrInvalidArgument, call.Root, n, n-1)
	case call.Count < 0:
		return fmt.Errorf("%w: count %d is negative: pass a number of elements, 0 or more", sdk.ErrInvalidArgument, call.Count)
	}
	if call.Coll == AlltoAllv {
		for _, a := range [][]int{call.SendCounts, call.SDispls, call.RecvCounts, call.RDispls} {
			if len(a) != n {
				return fmt.Errorf("%w: AlltoAllv needs %d counts and displacements (one per rank), got %d", sdk.ErrInvalidArgument, n, len(a))
			}
		}
	}
	if call.Coll == P2P {
		for i, x := range call.Ops {
			if x.Peer < 0 || x.Peer >= n {
				return fmt.Errorf("%w: operation %d: peer %d is out of range for %d ranks", sdk.ErrInvalidArgument, i, x.Peer, n)
			}
			if x.Bytes < 0 {
				return fmt.Errorf("%w: operation %d: negative size", sdk.ErrInvalidArgument, i)
			}
		}
	}
	return nil
}

// checkSelf: in a group, sends to oneself and receives from oneself pair
// up in order and must agree in number and size.
func checkSelf(call Call, rank int) error {
	if call.Coll != P2P {
		return nil
	}
	var sends, recvs []int
	for _, x := range call.Ops {
		if x.Peer == rank && x.Bytes > 0 {
			if x.Recv {
				recvs = append(recvs, x.Bytes)
			} else {
				sends = append(sends, x.Bytes)
			}
		}
	}
	if len(sends) != len(recvs) {
		return fmt.Errorf("%w: rank %d sends %d messages to itself but receives %d from itself: pair every send to self with a receive from self in the same group",
			sdk.ErrInvalidArgument, rank, len(sends), len(recvs))
	}
	for i := range sends {
		if sends[i] != recvs[i] {
			return fmt.Errorf("%w: send %d to self has %d bytes but receive %d from self has %d: make the sizes agree", sdk.ErrInvalidArgument, i, sends[i], i, recvs[i])
		}
	}
	return nil
}

// builder holds what every plan builder needs about the rank.
type builder struct {
	l      *Layout
	p      *Plan
	o      Options
	call   Call
	rank   int
	n, k   int // ranks, clusters
	c      *Cluster
	m      int // ranks in this rank's cluster
	local  int // index in it
	dev    bool
	leader bool
	size   int // element size
}

func (b *builder) add(s Step) int {
	b.p.Steps = append(b.p.Steps, s)
	return len(b.p.Steps) - 1
}

func deps(ids ...int) []int {
	var out []int
	for _, d := range ids {
		if d >= 0 {
			out = append(out, d)
		}
	}
	return out
}

func ref(buf Buf, off, n int) Ref { return Ref{Buf: buf, Off: off, Len: n} }

// reduceOp is the op the steps before the final division use: avg is a
// sum divided once by the rank count at the end, on the host.
func reduceOp(op sdk.RedOp) sdk.RedOp {
	if op == sdk.Avg {
		return sdk.Sum
	}
	return op
}

// Build makes rank's plan for call on layout l.
func Build(l *Layout, rank int, call Call, o Options) (*Plan, error) {
	n := l.NRanks()
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("%w: rank %d is out of range for %d ranks", sdk.ErrInvalidArgument, rank, n)
	}
	if err := Validate(call, n); err != nil {
		return nil, err
	}
	if _, _, err := Needs(call, rank, n); err != nil {
		return nil, err
	}
	if err := checkSelf(call, rank); err != nil {
		return nil, err
	}
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	c := l.ClusterOf(rank)
	b := &builder{
		l: l, o: o, call: call, rank: rank, n: n, k: len(l.Clusters), c: c, m: len(c.Ranks),
		local: l.LocalRank(rank), dev: c.OnDevice(), leader: c.Leader == rank,
		p: &Plan{Call: call, Rank: rank, Layout: l, Chunks: 1},
	}
	if call.Coll != P2P && call.Coll != Barrier {
		b.size = call.DType.Size()
	}
	b.choose()
	return b.p, nil
}

// choose picks the path and builds its steps.
func (b *builder) choose() {
	call := b.call
	if call.Coll == Barrier {
		b.p.Path = PathHost
		b.p.Why = "a barrier is a host barrier over all ranks"
		b.add(Step{Lane: LaneNet, Kind: KindWorld, Coll: Barrier, Chunk: -1})
		return
	}
	reducing := call.Coll.Reduces()
	if b.o.HostPath {
		b.p.Why = "FLAGCX_USE_HOST_COMM=1"
		b.host()
		return
	}
	if b.l.IsHomogeneous() {
		c := b.l.Clusters[0]
		if !c.OnDevice() {
			b.p.Path = PathHostComm
			b.direct()
			return
		}
		if reducing && !c.Supports(call.DType, call.Op, true) {
			b.p.Why = fmt.Sprintf("%s's collective library has no %s %s", c.Plugin, call.DType, call.Op)
			b.host()
			return
		}
		b.p.Path = PathVendor
		b.p.Async = true
		b.direct()
		return
	}
	if reducing {
		for _, c := range b.l.Clusters {
			if c.OnDevice() && len(c.Ranks) > 1 && !c.Supports(call.DType, reduceOp(call.Op), true) {
				b.p.Why = fmt.Sprintf("cluster %d's library (%s) has no %s %s", c.Index, c.Plugin, call.DType, reduceOp(call.Op))
				b.host()
				return
			}
		}
	}
	switch call.Coll {
	case AllReduce:
		if b.o.ShmWindow > 0 && call.Count > 0 {
			b.shm()
			return
		}
		b.p.Path = PathC2C
		b.allReduce()
	case Reduce:
		b.p.Path = PathC2C
		b.reduce()
	case Broadcast:
		b.p.Path = PathC2C
		b.broadcast()
	case AllGather:
		b.p.Path = PathC2C
		b.allGather()
	case ReduceScatter:
		b.p.Path = PathC2C
		b.reduceScatter()
	default:
		b.p.Path = PathP2P
		b.p2p()
	}
}

// spans are the call's pipeline chunks over bytes, recorded in the plan.
func (b *builder) spans(bytes int) []span {
	sp := Spans(bytes, max(b.size, 1), b.o.Chunk)
	if len(sp) > 0 {
		b.p.Chunks = len(sp)
		b.p.ChunkBytes = sp[0].Len
	}
	return sp
}

// bytesCount is the element count of n bytes of the call's type.
func (b *builder) count(n int) int { return n / b.size }

// direct is a single cluster's own library doing the call: the vendor's on
// a device cluster (data movement as bytes where the library lacks the
// type), host collectives on a host cluster.
func (b *builder) direct() {
	call := b.call
	sendB, recvB, _ := Needs(call, b.rank, b.n)
	s := Step{Lane: LaneIntra, Kind: KindIntra, Coll: call.Coll, Src: ref(BufSend, 0, sendB), Dst: ref(BufRecv, 0, recvB),
		Count: call.Count, DType: call.DType, Op: call.Op, Root: call.Root, Chunk: -1}
	switch call.Coll {
	case P2P:
		for i, x := range call.Ops {
			if x.Bytes > 0 {
				s.Xfers = append(s.Xfers, Xfer{Peer: x.Peer, Recv: x.Recv, Ref: Ref{Buf: BufUser, Idx: i, Len: x.Bytes}})
			}
		}
		if len(s.Xfers) == 0 {
			return
		}
		s.Src, s.Dst = Ref{}, Ref{}
		b.add(s)
		return
	case AlltoAllv:
		// Never skipped: a rank with nothing to move still takes part.
		s.SendCounts, s.SDispls, s.RecvCounts, s.RDispls = call.SendCounts, call.SDispls, call.RecvCounts, call.RDispls
	default:
		if call.Count == 0 {
			return
		}
	}
	if b.dev && !call.Coll.Reduces() && !b.c.Supports(call.DType, 0, false) {
		// Data movement never needs the element type: move bytes.
		b.p.Why = fmt.Sprintf("%s's library has no %s: the data moves as bytes", b.c.Plugin, call.DType)
		s.Count, s.DType = call.Count*b.size, sdk.Uint8
		if call.Coll == AlltoAllv {
			scale := func(v []int) []int {
				out := make([]int, len(v))
				for i, x := range v {
					out[i] = x * b.size
				}
				return out
			}
			s.SendCounts, s.SDispls, s.RecvCounts, s.RDispls = scale(call.SendCounts), scale(call.SDispls), scale(call.RecvCounts), scale(call.RDispls)
		}
	}
	b.add(s)
}

// host is the host path: device ranks copy their input to pinned staging,
// one host collective runs over all ranks, device ranks copy the result
// back; host ranks run the collective on their buffers. AllReduce, Reduce
// and Broadcast are pipelined in chunks; every rank cuts the same chunks,
// so the collectives line up.
func (b *builder) host() {
	b.p.Path = PathHost
	call := b.call
	if call.Coll == P2P {
		b.hostP2P()
		return
	}
	sendB, recvB, _ := Needs(call, b.rank, b.n)
	if call.Coll != AlltoAllv && call.Count == 0 {
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
	chunked := call.Coll == AllReduce || call.Coll == Reduce || call.Coll == Broadcast
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
			if call.Coll == AlltoAllv {
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
	var xs []Xfer
	var in, out []CopyPair
	off := 0
	for i, x := range b.call.Ops {
		if x.Bytes == 0 {
			continue
		}
		user := Ref{Buf: BufUser, Idx: i, Len: x.Bytes}
		r := user
		if b.dev {
			r = ref(BufStage, off, x.Bytes)
			off += x.Bytes
			if x.Recv {
				out = append(out, CopyPair{r, user})
			} else {
				in = append(in, CopyPair{user, r})
			}
		}
		xs = append(xs, Xfer{Peer: x.Peer, Recv: x.Recv, Ref: r})
	}
	if len(xs) == 0 {
		return
	}
	first := -1
	if len(in) > 0 {
		first = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: in, Chunk: -1})
	}
	net := b.add(Step{Lane: LaneNet, Kind: KindWorld, Coll: P2P, Xfers: xs, Chunk: -1, Deps: deps(first)})
	if len(out) > 0 {
		b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: out, Chunk: -1, Deps: deps(net)})
	}
}

// ---- cluster-to-cluster schedules --------------------------------------
//
// The leader (first rank) of each cluster is its inter rank: the inter
// communicator's rank of cluster c is c. Inside a cluster the vendor
// library (or the host backend) gathers the cluster's contribution at the
// leader; the leader copies it to pinned staging chunk by chunk, runs the
// inter-cluster step on hostnet chunk by chunk, copies each chunk back, and
// the cluster's library spreads the result. Every cluster member issues
// the same intra steps in the same order; every leader the same inter
// steps.

// hostSide is where a leader's host-side data lives: pinned staging on
// a device, the user's own buffer on the host backend.
func (b *builder) hostSide(user Ref) Ref {
	if b.dev {
		return ref(BufStage, user.Off, user.Len)
	}
	return user
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
			red[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Reduce, Src: ref(BufSend, s.Off, s.Len), Dst: ref(BufRecv, s.Off, s.Len),
				Count: b.count(s.Len), DType: call.DType, Op: opR, Root: 0, Chunk: i})
		}
		src = BufRecv
	}
	fin := make([]int, len(sp))
	if b.leader {
		for i, s := range sp {
			in, out := ref(src, s.Off, s.Len), ref(BufRecv, s.Off, s.Len)
			last := red[i]
			if b.dev {
				stage := ref(BufStage, s.Off, s.Len)
				last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{in, stage}}, Chunk: i, Deps: deps(last)})
				in, out = stage, stage
			}
			last = b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: AllReduce, Src: in, Dst: out, Count: b.count(s.Len),
				DType: call.DType, Op: opR, Chunk: i, Deps: deps(last)})
			if call.Op == sdk.Avg {
				last = b.add(Step{Lane: LaneNet, Kind: KindScale, Dst: out, DType: call.DType, N: b.n, Chunk: i})
			}
			if b.dev {
				last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: []CopyPair{{out, ref(BufRecv, s.Off, s.Len)}}, Chunk: i, Deps: deps(last)})
			}
			fin[i] = last
		}
	}
	if b.m > 1 {
		for i, s := range sp {
			d := -1
			if b.leader {
				d = fin[i]
			}
			r := ref(BufRecv, s.Off, s.Len)
			b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Broadcast, Src: r, Dst: r, Count: s.Len, DType: sdk.Uint8, Root: 0, Chunk: i, Deps: deps(d)})
		}
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
			red[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Reduce, Src: ref(BufSend, s.Off, s.Len), Dst: ref(dst, s.Off, s.Len),
				Count: b.count(s.Len), DType: call.DType, Op: opR, Root: 0, Chunk: i})
		}
	}
	fin := make([]int, len(sp))
	if b.leader {
		for i, s := range sp {
			in := ref(acc, s.Off, s.Len)
			out := in // a non-root's buffers are left alone by the host Reduce
			last := red[i]
			if b.dev {
				stage := ref(BufStage, s.Off, s.Len)
				last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{in, stage}}, Chunk: i, Deps: deps(last)})
				in, out = stage, stage
			} else if isRoot {
				out = ref(BufRecv, s.Off, s.Len)
			}
			last = b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: Reduce, Src: in, Dst: out, Count: b.count(s.Len),
				DType: call.DType, Op: opR, Root: c0.Index, Chunk: i, Deps: deps(last)})
			if inC0 {
				if call.Op == sdk.Avg {
					last = b.add(Step{Lane: LaneNet, Kind: KindScale, Dst: out, DType: call.DType, N: b.n, Chunk: i})
				}
				if b.dev {
					to := BufScratch
					if isRoot {
						to = BufRecv
					}
					last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: []CopyPair{{out, ref(to, s.Off, s.Len)}}, Chunk: i, Deps: deps(last)})
				}
			}
			fin[i] = last
		}
	}
	// The root is not its cluster's leader: the leader hands it the result.
	if inC0 && c0.Leader != root {
		for i, s := range sp {
			switch {
			case b.leader:
				b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: P2P, Xfers: []Xfer{{Peer: rootLocal, Ref: ref(BufScratch, s.Off, s.Len)}}, Chunk: i, Deps: deps(fin[i])})
			case isRoot:
				b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: P2P, Xfers: []Xfer{{Peer: 0, Recv: true, Ref: ref(BufRecv, s.Off, s.Len)}}, Chunk: i})
			}
		}
	}
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
				ready[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Broadcast, Src: from, Dst: ref(BufRecv, s.Off, s.Len),
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
			r := ref(src, s.Off, s.Len)
			last := ready[i]
			if b.dev {
				stage := ref(BufStage, s.Off, s.Len)
				last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: []CopyPair{{r, stage}}, Chunk: i, Deps: deps(last)})
				r = stage
			}
			b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: Broadcast, Src: r, Dst: r, Count: s.Len, DType: sdk.Uint8, Root: c0.Index, Chunk: i, Deps: deps(last)})
		}
		return
	}
	fin := make([]int, len(sp))
	if b.leader {
		for i, s := range sp {
			user := ref(BufRecv, s.Off, s.Len)
			r := b.hostSide(user)
			last := b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: Broadcast, Src: r, Dst: r, Count: s.Len, DType: sdk.Uint8, Root: c0.Index, Chunk: i})
			if b.dev {
				last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: []CopyPair{{r, user}}, Chunk: i, Deps: deps(last)})
			}
			fin[i] = last
		}
	}
	if b.m > 1 {
		for i, s := range sp {
			d := -1
			if b.leader {
				d = fin[i]
			}
			r := ref(BufRecv, s.Off, s.Len)
			b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Broadcast, Src: r, Dst: r, Count: s.Len, DType: sdk.Uint8, Root: 0, Chunk: i, Deps: deps(d)})
		}
	}
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
			gat[i] = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Gather, Src: src, Dst: dst, Count: s.Len, DType: sdk.Uint8, Root: 0, Chunk: i})
		}
	}
	if !b.leader {
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Broadcast, Src: whole, Dst: whole, Count: nB, DType: sdk.Uint8, Root: 0, Chunk: -1})
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
		last := b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: P2P, Xfers: xs, Chunk: i, Deps: deps(in)})
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
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Broadcast, Src: whole, Dst: whole, Count: nB, DType: sdk.Uint8, Root: 0, Chunk: -1, Deps: fin})
	}
}

// reduceScatter: each cluster reduces the whole input at its leader; the
// leaders send each other the partial blocks the other clusters' ranks
// own (slice by slice), each leader combines what it receives for its own
// ranks' blocks, and its cluster library scatters them.
func (b *builder) reduceScatter() {
	call := b.call
	B := call.Count * b.size
	nB := b.n * B
	opR := reduceOp(call.Op)
	sp := b.spans(B)
	partial := BufSend // where this leader's partial sums of all n blocks are
	red := -1
	if b.m > 1 {
		dst := ref(BufSend, 0, nB) // ignored off the intra root
		if b.leader {
			dst = ref(BufScratch, 0, nB)
			partial = BufScratch
		}
		red = b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Reduce, Src: ref(BufSend, 0, nB), Dst: dst,
			Count: b.count(nB), DType: call.DType, Op: opR, Root: 0, Chunk: -1})
	}
	// The scattered blocks of a cluster of several ranks, in cluster order.
	scat := ref(BufScratch, nB, b.m*B)
	if !b.leader {
		r := ref(BufRecv, 0, B)
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Scatter, Src: r, Dst: r, Count: B, DType: sdk.Uint8, Root: 0, Chunk: -1})
		return
	}
	var others []*Cluster
	for i := range b.l.Clusters {
		if i != b.c.Index {
			others = append(others, &b.l.Clusters[i])
		}
	}
	// Host-side layout: this leader's partials of all n blocks at
	// [g*B], then one receive area of m blocks per other cluster. On a
	// host leader the partials stay where they are (send or scratch); the
	// accumulation happens in its own blocks' final places.
	var part, acc func(g, j int, s span) Ref
	var area func(t, j int, s span) Ref
	if b.dev {
		part = func(g, _ int, s span) Ref { return ref(BufStage, g*B+s.Off, s.Len) }
		acc = part
		area = func(t, j int, s span) Ref { return ref(BufStage, nB+(t*b.m+j)*B+s.Off, s.Len) }
	} else {
		part = func(g, _ int, s span) Ref { return ref(partial, g*B+s.Off, s.Len) }
		base := nB + b.m*B // after the partials and the scatter area in scratch
		area = func(t, j int, s span) Ref { return ref(BufScratch, base+(t*b.m+j)*B+s.Off, s.Len) }
		if b.m > 1 {
			acc = func(_, j int, s span) Ref { return scat.Sub(j*B+s.Off, s.Len) }
		} else {
			acc = func(_, _ int, s span) Ref { return ref(BufRecv, s.Off, s.Len) }
		}
	}
	var fin []int
	for i, s := range sp {
		last := red
		if b.dev {
			var cp []CopyPair
			if len(sp) == 1 {
				cp = []CopyPair{{ref(partial, 0, nB), ref(BufStage, 0, nB)}}
			} else {
				for g := 0; g < b.n; g++ {
					cp = append(cp, CopyPair{ref(partial, g*B+s.Off, s.Len), part(g, 0, s)})
				}
			}
			last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: cp, Chunk: i, Deps: deps(last)})
		} else {
			// Start each of this cluster's blocks from this cluster's partial.
			var cp []CopyPair
			for j, g := range b.c.Ranks {
				cp = append(cp, CopyPair{part(g, j, s), acc(g, j, s)})
			}
			last = b.add(Step{Lane: LaneD2H, Kind: KindCopy, Copies: cp, Chunk: i, Deps: deps(last)})
		}
		var xs []Xfer
		for t, o := range others {
			for _, g := range o.Ranks {
				xs = append(xs, Xfer{Peer: o.Index, Ref: part(g, 0, s)})
			}
			for j := range b.c.Ranks {
				xs = append(xs, Xfer{Peer: o.Index, Recv: true, Ref: area(t, j, s)})
			}
		}
		last = b.add(Step{Lane: LaneNet, Kind: KindInter, Coll: P2P, Xfers: xs, Chunk: i, Deps: deps(last)})
		for t := range others {
			for j, g := range b.c.Ranks {
				b.add(Step{Lane: LaneNet, Kind: KindReduce, Src: area(t, j, s), Dst: acc(g, j, s), DType: call.DType, Op: opR, Chunk: i})
			}
		}
		if call.Op == sdk.Avg {
			for j, g := range b.c.Ranks {
				last = b.add(Step{Lane: LaneNet, Kind: KindScale, Dst: acc(g, j, s), DType: call.DType, N: b.n, Chunk: i})
			}
		} else if len(others) > 0 {
			last = len(b.p.Steps) - 1
		}
		if b.dev {
			var cp []CopyPair
			for j, g := range b.c.Ranks {
				to := ref(BufRecv, s.Off, s.Len)
				if b.m > 1 {
					to = scat.Sub(j*B+s.Off, s.Len)
				}
				cp = append(cp, CopyPair{acc(g, j, s), to})
			}
			last = b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: cp, Chunk: i, Deps: deps(last)})
		}
		fin = append(fin, last)
	}
	if b.m > 1 {
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: Scatter, Src: scat, Dst: ref(BufRecv, 0, B), Count: B, DType: sdk.Uint8, Root: 0, Chunk: -1, Deps: fin})
	}
}

// ---- direct transfers ----------------------------------------------------

// xfer is one transfer of a p2p plan, with a communicator-wide peer.
type xfer struct {
	peer int
	recv bool
	ref  Ref
}

// transfers lists this rank's sends and receives for a data-movement call.
func (b *builder) transfers() []xfer {
	call := b.call
	B := call.Count * b.size
	var xs []xfer
	add := func(peer int, recv bool, r Ref) {
		if r.Len > 0 {
			xs = append(xs, xfer{peer, recv, r})
		}
	}
	switch call.Coll {
	case AlltoAll:
		for p := 0; p < b.n; p++ {
			add(p, false, ref(BufSend, p*B, B))
			add(p, true, ref(BufRecv, p*B, B))
		}
	case AlltoAllv:
		for p := 0; p < b.n; p++ {
			add(p, false, ref(BufSend, call.SDispls[p]*b.size, call.SendCounts[p]*b.size))
			add(p, true, ref(BufRecv, call.RDispls[p]*b.size, call.RecvCounts[p]*b.size))
		}
	case Gather:
		add(call.Root, false, ref(BufSend, 0, B))
		if b.rank == call.Root {
			for p := 0; p < b.n; p++ {
				add(p, true, ref(BufRecv, p*B, B))
			}
		}
	case Scatter:
		if b.rank == call.Root {
			for p := 0; p < b.n; p++ {
				add(p, false, ref(BufSend, p*B, B))
			}
		}
		add(call.Root, true, ref(BufRecv, 0, B))
	case P2P:
		for i, x := range call.Ops {
			add(x.Peer, x.Recv, Ref{Buf: BufUser, Idx: i, Len: x.Bytes})
		}
	}
	return xs
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
		b.add(Step{Lane: LaneIntra, Kind: KindIntra, Coll: P2P, Xfers: s, Chunk: -1})
	}
	if len(cross) == 0 {
		return
	}
	var s []Xfer
	var in, out []CopyPair
	off := 0
	for _, x := range cross {
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
	net := b.add(Step{Lane: LaneNet, Kind: KindWorld, Coll: P2P, Xfers: s, Chunk: -1, Deps: deps(first)})
	if len(out) > 0 {
		b.add(Step{Lane: LaneH2D, Kind: KindCopy, Copies: out, Chunk: -1, Deps: deps(net)})
	}
}
