package sched

import "github.com/flagcx/flagcx-go/sdk"

// Registered AllReduce on PathShm: host ranks whose buffers the device
// reads and writes itself.
//
// A host rank's buffers are private memory unless it took them from the
// communicator's MemAlloc, which every rank of the host maps; a device
// rank registers the host ranks' allocations with its runtime (core's
// Comm.MemAlloc), so its copy engines can read and write them like the
// windows. When every host rank's send and recv buffers of a call lie in
// such memory (the ranks agree on it in the call's first step), the
// devices fold the whole message and the host copies nothing. One device
// cluster:
//
//	device rank (h2d stream)        h2d part j of every host rank's send -> scratch
//	device rank (caller's stream)   cluster of m > 1: intra ReduceScatter of the chunk (rank j keeps part j)
//	                                fold part j, every rank's contribution in rank order -> recv
//	device rank (d2h stream)        d2h part j -> every host rank's recv
//	device rank (caller's stream)   cluster of m > 1: intra AllGather
//	host rank                       step at the start | step at the end (its buffers are in use between)
//
// Per byte of the message a device rank's link carries each host rank's
// input in and the result out to each host rank, split over the
// cluster's links; host memory sees those DMA reads and writes and
// nothing else. With host folds (shm.go) every byte crossed host memory
// many times over, which bounded nvidia:1,host:2 well below its link
// (docs/performance.md, "Small heterogeneous calls in one launch,
// device-pipeline chunks by size").
//
// In place is exact: rank j reads part j of a host rank's chunk on its h2d
// stream and writes it on its d2h stream after the fold, which waits for
// that read; no other rank touches part j.
//
// Two device clusters or more (two vendors, or a split, beside host
// ranks): every cluster needs the other clusters' sums, which only the
// windows carry, and folding every host rank's input on every cluster
// would cost each link one chunk per host rank in. So each chunk has one
// host-facing cluster, the device clusters in turn (each as often as it
// has ranks, so that every link carries its share), and the pipeline is
// the device-reduced one of shm.go (one step a chunk):
//
//	host-facing rank (caller's stream)  intra ReduceScatter | h2d part j of every host rank's send -> scratch
//	                                    | fold them with the cluster's part in rank order -> recv (the partial sum)
//	every device rank                   d2h its part (the partial sum, or its cluster's) -> own window | step
//	                                    | h2d the other clusters' carriers' parts | fold in rank order (foldOnDevice)
//	host-facing rank (d2h stream)       d2h part j -> every host rank's recv
//	host rank                           a step a chunk, nothing else
//
// With split 1,1 and H host ranks each link carries on average (H/2+1)
// chunks each way, against H+1 in and 1 out were every cluster to read
// the host ranks. In place stays exact: only chunk k's host-facing rank
// reads and writes a host rank's part j of it, in stream order.
//
// Chunks are as the device-reduced pipeline's (deviceChunk): on one H200
// beside one and two host ranks, 512 KiB to 2 MiB chunks were slower at
// every size from 4 MiB, and ends cut to a quarter and a half of a chunk
// (a shorter fill and drain) were no faster (docs/performance.md, "Host
// ranks' buffers the device reads and writes: registered AllReduce").

// RegisteredFolds reports whether coll on PathShm has a registered plan:
// an AllReduce, every plugin reduces on its device, host ranks beside
// device clusters, and one fold takes each step's inputs (the cluster's
// with every host rank's; every device cluster's).
func RegisteredFolds(l *Layout, o Options, coll sdk.Collective) bool {
	if coll != sdk.AllReduce || !o.ShmDeviceReduce {
		return false
	}
	devs, hosts := 0, 0
	for _, c := range l.Clusters {
		if c.OnDevice() {
			devs++
		} else {
			hosts += len(c.Ranks)
		}
	}
	return devs >= 1 && hosts > 0 && 1+hosts <= MaxDeviceReduceClusters && devs <= MaxDeviceReduceClusters
}

// HostRanks are the layout's host ranks, in rank order.
func HostRanks(l *Layout) []int {
	var out []int
	for r, m := range l.Members {
		if !m.OnDevice() {
			out = append(out, r)
		}
	}
	return out
}

// registered builds the plan this rank runs when every host rank's
// buffers are registered: the same call, its own geometry and steps (nil
// where the windows cannot hold the exchange of several clusters).
func (b *builder) registered() *Plan {
	bytes := b.call.Count * b.size
	one := deviceClusters(b.l) == 1
	var g *ShmPlan
	why := "every rank on one host and the host ranks' buffers registered (MemAlloc): the device cluster reads every host rank's input and writes its result itself, folding on its devices (reduceLocal); the host copies nothing"
	if one {
		chunk := min(deviceChunk(bytes), b.o.Chunk)
		g = &ShmPlan{Coll: b.call.Coll, Registered: true, DeviceReduce: true, Slots: 2, Lag: 1,
			Spans: Spans(bytes, b.size, chunk, MinPipeChunk), Blocks: 1}
	} else {
		var err error
		if g, err = NewShmPlan(b.call.Coll, bytes, b.size, b.n, nil, b.o.ShmWindow, b.o.Chunk, true); err != nil || g.OneShot {
			return nil
		}
		g.Registered = true
		why = "every rank on one host and the host ranks' buffers registered (MemAlloc): each chunk's host-facing device cluster (in turn) folds the host ranks' inputs into its sum and writes their results; the clusters exchange their sums in the windows and fold them on their devices (reduceLocal); the host copies nothing"
	}
	p := &Plan{Call: b.call, Rank: b.rank, Layout: b.l, Path: PathShm, Shm: g, Chunks: g.Chunks(), ChunkBytes: g.Spans[0].Len, Why: why}
	rb := *b
	rb.p = p
	s := &shmBuilder{builder: &rb, g: g, sc: schedOf(b.call.Coll).shm, block: bytes, got: make([]bool, g.Chunks())}
	s.partMax = s.part(0).Len
	if one {
		s.registeredSteps()
	} else {
		s.p.Steps = make([]Step, 0, 8+g.Chunks()*(12+2*s.m))
		s.pipeline()
	}
	return p
}

// deviceClusters counts l's device clusters.
func deviceClusters(l *Layout) int {
	n := 0
	for _, c := range l.Clusters {
		if c.OnDevice() {
			n++
		}
	}
	return n
}

// facesHosts reports whether this rank's cluster is chunk k's host-facing
// one in a registered plan of several device clusters: the device
// clusters take the chunks in turn, each as many as it has ranks.
func (s *shmBuilder) facesHosts(k int) bool {
	if !s.dev || !s.g.Registered {
		return false
	}
	total := 0
	for _, c := range s.l.Clusters {
		if c.OnDevice() {
			total += len(c.Ranks)
		}
	}
	turn := k % total // the turn's index among the device ranks, cluster by cluster
	for i, c := range s.l.Clusters {
		if !c.OnDevice() {
			continue
		}
		if turn < len(c.Ranks) {
			return i == s.l.ClusterOf(s.rank).Index
		}
		turn -= len(c.Ranks)
	}
	return false
}

// hostsFold: this rank, facing the host ranks for chunk k, folds every
// host rank's input to its part with its cluster's into recv (its
// cluster's partial sum), all on the caller's stream (which orders the
// scratch area's reuse), and has the d2h stream wait for it.
func (s *shmBuilder) hostsFold(k int) Range {
	off, _ := s.g.Span(k)
	pt := s.part(k)
	if s.m > 1 {
		s.reduceScatter(k)
	}
	base := s.g.Slots * len(s.l.Clusters) * s.partMax // past foldOnDevice's areas
	cps, f := s.hostInputs(off, pt, func(i int) int { return base + i*alignUp(s.partMax, shmAlign) })
	s.copies(LaneIntra, k, cps)
	s.fold(KindDevFold, LaneIntra, k, f)
	// A partial sum: Avg divides once, in foldOnDevice's fold of the sums.
	s.p.Steps[len(s.p.Steps)-1].Op = reduceOp(s.call.Op)
	s.mark(LaneIntra, k)
	s.await(LaneD2H, LaneIntra, k)
	return pt
}

// hostInputs are the copies of every host rank's input to pt of the
// chunk at off into scratch (host rank i's at area(i)), and the fold of
// them with this rank's cluster's contribution, in rank order (the
// cluster's at this rank's place, as Sources orders carriers), into recv.
func (s *shmBuilder) hostInputs(off int, pt Range, area func(i int) int) ([]CopyPair, Fold) {
	var cps []CopyPair
	f := Fold{Dst: ref(BufRecv, off+pt.Off, pt.Len)}
	for q := 0; q < s.n; q++ {
		switch {
		case q == s.rank:
			own := ref(BufSend, off+pt.Off, pt.Len)
			if s.m > 1 {
				own.Buf = BufRecv // the ReduceScatter's part
			}
			f.Srcs = append(f.Srcs, own)
		case !s.l.Members[q].OnDevice():
			at := ref(BufScratch, area(len(cps)), pt.Len)
			cps = append(cps, CopyPair{Src: Ref{Buf: BufPeerSend, Idx: q, Off: off + pt.Off, Len: pt.Len}, Dst: at})
			f.Srcs = append(f.Srcs, at)
		}
	}
	return cps, f
}

// hostResults are the copies of the result pt of the chunk at off (in
// recv) to every host rank's recv.
func (s *shmBuilder) hostResults(off int, pt Range) []CopyPair {
	var out []CopyPair
	for _, q := range HostRanks(s.l) {
		out = append(out, CopyPair{Src: ref(BufRecv, off+pt.Off, pt.Len), Dst: Ref{Buf: BufPeerRecv, Idx: q, Off: off + pt.Off, Len: pt.Len}})
	}
	return out
}

// registeredSteps: a host rank's buffers are read and written by the
// device ranks between its two steps; a device rank's chunks run on its
// streams, chained by marks, with no step between them (nothing of a
// window is used). The h2d stream only copies the host ranks' inputs in
// (into one of Slots scratch areas), the caller's stream folds (after the
// cluster's ReduceScatter) and gathers, and the d2h stream copies the
// results out: so the fold of chunk k runs while chunk k+1 comes in and
// chunk k-1 goes out, instead of holding up both links.
func (s *shmBuilder) registeredSteps() {
	K, slots := s.g.Chunks(), s.g.Slots
	if !s.dev {
		s.p.Steps = make([]Step, 0, 2)
		s.sync(-1, 0)
		s.sync(K, 0)
		return
	}
	s.p.Steps = make([]Step, 0, 3+K*(8+2*s.m))
	hosts := HostRanks(s.l)
	stride := alignUp(s.partMax, shmAlign) // a host rank's scratch area
	s.sync(-1, 0)                          // every host rank's send is written
	for k := 0; k < K; k++ {
		off, _ := s.g.Span(k)
		pt := s.part(k)
		if k >= slots {
			s.await(LaneH2D, LaneIntra, k-slots) // its fold is done with the slot
		}
		cps, f := s.hostInputs(off, pt, func(i int) int { return ((k%slots)*len(hosts) + i) * stride })
		s.copies(LaneH2D, k, cps)
		s.mark(LaneH2D, k)
		if s.m > 1 {
			s.reduceScatter(k)
		}
		s.await(LaneIntra, LaneH2D, k)
		s.fold(KindDevFold, LaneIntra, k, f)
		s.mark(LaneIntra, k)
		s.await(LaneD2H, LaneIntra, k)
		s.copies(LaneD2H, k, s.hostResults(off, pt))
		if s.m > 1 {
			s.allGather(k)
		}
	}
	s.drain(LaneD2H)
	s.drain(LaneIntra)
	s.sync(K, 0)
}
