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
// such memory (the ranks agree on it in the call's first step), the one
// device cluster folds the whole message and the host copies nothing:
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
// about 11 times, which bounded nvidia:1,host:2 at a third of its link.
//
// Only one device cluster: with two, both would fold the host ranks'
// inputs and one would write their results, which in place needs a step
// between the other's reads and those writes. In place is exact here:
// rank j reads part j of a host rank's chunk on its h2d stream and writes
// it on its d2h stream after the fold, which waits for that read; no
// other rank touches part j.
//
// Chunks are as the device-reduced pipeline's (deviceChunk): on one H200
// beside one and two host ranks, 512 KiB to 2 MiB chunks were slower at
// every size from 4 MiB, and ends cut to a quarter and a half of a chunk
// (a shorter fill and drain) were no faster (docs/performance.md).

// RegisteredFolds reports whether coll on PathShm has a registered plan:
// an AllReduce, every plugin reduces on its device, one device cluster,
// host ranks beside it, and one fold takes them all.
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
	return devs == 1 && hosts > 0 && 1+hosts <= MaxDeviceReduceClusters
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
// buffers are registered: the same call, its own geometry and steps.
func (b *builder) registered() *Plan {
	bytes := b.call.Count * b.size
	chunk := min(deviceChunk(bytes), b.o.Chunk)
	g := &ShmPlan{Coll: b.call.Coll, Registered: true, DeviceReduce: true, Slots: 2, Lag: 1,
		Spans: Spans(bytes, b.size, chunk, MinPipeChunk), Blocks: 1}
	p := &Plan{Call: b.call, Rank: b.rank, Layout: b.l, Path: PathShm, Shm: g, Chunks: g.Chunks(), ChunkBytes: g.Spans[0].Len,
		Why: "every rank on one host and the host ranks' buffers registered (MemAlloc): the device cluster reads every host rank's input and writes its result itself, folding on its devices (reduceLocal); the host copies nothing"}
	rb := *b
	rb.p = p
	s := &shmBuilder{builder: &rb, g: g, sc: schedOf(b.call.Coll).shm, block: bytes, got: make([]bool, g.Chunks())}
	s.partMax = s.part(0).Len
	s.registeredSteps()
	return p
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
		// Every host rank's input and the cluster's, in rank order (the
		// cluster's at this rank's place, as Sources orders carriers).
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
				at := ref(BufScratch, ((k%slots)*len(hosts)+len(cps))*stride, pt.Len)
				cps = append(cps, CopyPair{Src: Ref{Buf: BufPeerSend, Idx: q, Off: off + pt.Off, Len: pt.Len}, Dst: at})
				f.Srcs = append(f.Srcs, at)
			}
		}
		s.copies(LaneH2D, k, cps)
		s.mark(LaneH2D, k)
		if s.m > 1 {
			s.reduceScatter(k)
		}
		s.await(LaneIntra, LaneH2D, k)
		s.fold(KindDevFold, LaneIntra, k, f)
		s.mark(LaneIntra, k)
		s.await(LaneD2H, LaneIntra, k)
		out := make([]CopyPair, 0, len(hosts))
		for _, q := range hosts {
			out = append(out, CopyPair{Src: f.Dst, Dst: Ref{Buf: BufPeerRecv, Idx: q, Off: off + pt.Off, Len: pt.Len}})
		}
		s.copies(LaneD2H, k, out)
		if s.m > 1 {
			s.allGather(k)
		}
	}
	s.drain(LaneD2H)
	s.drain(LaneIntra)
	s.sync(K, 0)
}
