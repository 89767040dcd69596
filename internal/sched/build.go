package sched

import (
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
)

// Pipeline chunking. A call of B bytes is cut into ceil(B/Chunk) chunks,
// and into at least 4 (of at least MinPipeChunk bytes each) when it is
// large enough, so that copies to the host, the network and copies back
// overlap even for messages not much larger than a chunk.
//
// Over TCP the network is so much slower than the copies that overlapping
// them gains little, while every chunk costs a host collective's latency
// and runs it at a smaller message's rate: there chunks are at least
// TCPMinChunk (Options.MinChunk), a size at which a host AllReduce over
// TCP runs far faster than at the smaller chunks it would otherwise be cut
// into (docs/performance.md, "Figures that were in comments (issue 41)",
// and "Small messages and the staged path over TCP").
const (
	// FLAGCX_NET_CHUNK_SIZE default; FlagCX uses 4M, 16M measured better
	// on H200 (docs/performance.md, "Heterogeneous communicators on 2 x
	// H200").
	DefaultChunk = 16 << 20
	MinPipeChunk = 256 << 10
	TCPMinChunk  = 4 << 20
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
	// ShmDeviceReduce: every device rank's plugin reduces on its device
	// (ABI v4's reduceLocal), so an AllReduce over device clusters only
	// on PathShm reduces there and the host only relays (shm.go).
	ShmDeviceReduce bool
	// ShmRelay: every device rank's plugin relays (ABI v5's relayReduce),
	// so a device rank's small AllReduce or Reduce on PathShm takes one
	// launch (shm_steps.go, relays).
	ShmRelay bool
	// StagedDeviceReduce: every device rank's plugin reduces on its
	// device, so a device leader of a staged ReduceScatter folds what the
	// other leaders send it there (c2c.go, rsDevFolds).
	StagedDeviceReduce bool
	// MinChunk is the smallest chunk the staged schedules cut a call into
	// for the sake of overlap (0 means MinPipeChunk): TCPMinChunk where
	// cluster leaders talk TCP.
	MinChunk int
}

// span is a byte range [Off, Off+Len).
type span = Range

// Spans cuts bytes (whole elements of size bytes) into pipeline chunks of
// at most chunk bytes, and into up to 4 of at least minChunk bytes
// (MinPipeChunk where minChunk <= 0) for overlap. Every rank computes the
// same chunks from the same call.
func Spans(bytes, size, chunk, minChunk int) []span {
	if bytes <= 0 || size <= 0 {
		return nil
	}
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	if minChunk <= 0 {
		minChunk = MinPipeChunk
	}
	elems := bytes / size
	per := max(chunk/size, 1)
	k := (elems + per - 1) / per
	if k < minPipeDepth {
		k = max(k, min(minPipeDepth, bytes/minChunk))
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
	if call.Coll != sdk.SendRecv && call.Coll != sdk.Barrier {
		b.size = call.DType.Size()
	}
	b.choose()
	return b.p, nil
}

// choose picks the path and builds its steps.
func (b *builder) choose() {
	call := b.call
	if call.Coll == sdk.Barrier {
		b.p.Path = PathHost
		b.p.Why = "a barrier is a host barrier over all ranks"
		b.add(Step{Lane: LaneNet, Kind: KindWorld, Coll: sdk.Barrier, Chunk: -1})
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
	if ShmColl(call.Coll) && b.o.ShmWindow > 0 && call.Count > 0 {
		b.shm()
		return
	}
	if ShmColl(call.Coll) {
		b.p.Path = PathC2C
		b.c2c()
		return
	}
	b.p.Path = PathP2P
	b.p2p()
}

// c2c builds the staged cluster-to-cluster schedule of call (c2c.go; the
// collective's entry in schedules, colls.go).
func (b *builder) c2c() {
	if f := schedOf(b.call.Coll).c2c; f != nil {
		f(b)
	}
}

// spans are the call's pipeline chunks over bytes, recorded in the plan.
func (b *builder) spans(bytes int) []span {
	sp := Spans(bytes, max(b.size, 1), b.o.Chunk, b.o.MinChunk)
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
	if call.Coll == sdk.SendRecv {
		// A group of sends and receives, each with its own peer and buffer.
		for i, x := range call.Ops {
			if x.Bytes > 0 {
				s.Xfers = append(s.Xfers, Xfer{Peer: x.Peer, Recv: x.Recv, Ref: Ref{Buf: BufUser, Idx: i, Len: x.Bytes}})
			}
		}
		if len(s.Xfers) > 0 {
			s.Src, s.Dst = Ref{}, Ref{}
			b.add(s)
		}
		return
	}
	vector := call.Coll.Info().Send == sdk.ExtentVector
	if vector {
		// Never skipped: a rank with nothing to move still takes part.
		s.SendCounts, s.SDispls, s.RecvCounts, s.RDispls = call.SendCounts, call.SDispls, call.RecvCounts, call.RDispls
	} else if call.Count == 0 {
		return
	}
	if b.dev && !call.Coll.Reduces() && !b.c.Supports(call.DType, 0, false) {
		// Data movement never needs the element type: move bytes.
		b.p.Why = fmt.Sprintf("%s's library has no %s: the data moves as bytes", b.c.Plugin, call.DType)
		s.Count, s.DType = call.Count*b.size, sdk.Uint8
		if vector {
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
