package sched

import "github.com/flagcx/flagcx-go/sdk"

// How sched builds each collective's plans: one entry per collective,
// read where the builders would otherwise switch on the collective. What
// a collective is (its buffers, reduces, rooted) stays in sdk's table
// (sdk/colltable.go); this table holds only how its schedules go.

// collSched is how sched builds one collective's plans.
type collSched struct {
	// c2c builds the staged cluster-to-cluster schedule (c2c.go), for the
	// collectives that take it across clusters; nil: they move data as
	// direct transfers (p2p).
	c2c func(b *builder)
	// transfers lists this rank's sends and receives of a data-movement
	// call that runs as direct transfers (p2p.go).
	transfers func(b *builder, add func(peer int, recv bool, r Ref))
	// shm is how the collective runs in the shared windows (PathShm),
	// nil for one that does not.
	shm *shmColl
}

// schedules is the table, indexed by collective.
var schedules = [sdk.NumCollectives]collSched{
	sdk.AllReduce: {c2c: (*builder).allReduce, shm: &shmColl{pieces: true, intra: true, oneShot: true, deviceReduce: true,
		sources: Sources, get: (*shmBuilder).getAllReduce}},
	sdk.Reduce: {c2c: (*builder).reduce, shm: &shmColl{pieces: true, oneShot: true, deviceReduce: true, sources: everyRank,
		get: (*shmBuilder).getAtRoot}},
	sdk.Broadcast:     {c2c: (*builder).broadcast, shm: &shmColl{rootOnly: true, oneShot: true, get: (*shmBuilder).getFromRoot}},
	sdk.AllGather:     {c2c: (*builder).allGather, shm: &shmColl{oneShot: true, get: (*shmBuilder).getEvery}},
	sdk.ReduceScatter: {c2c: (*builder).reduceScatter, shm: &shmColl{blockPerRank: true, oneShot: true, deviceReduce: true, get: (*shmBuilder).getOwnBlock}},
	sdk.AlltoAll:      {transfers: alltoallTransfers},
	sdk.AlltoAllv:     {transfers: alltoallvTransfers},
	sdk.Gather:        {transfers: gatherTransfers},
	sdk.Scatter:       {transfers: scatterTransfers},
	sdk.SendRecv:      {transfers: sendRecvTransfers},
}

// schedOf is coll's entry (the zero entry for a value that is not a
// collective).
func schedOf(coll sdk.Collective) collSched {
	if !coll.Valid() {
		return collSched{}
	}
	return schedules[coll]
}

// shmColl is how one collective runs on PathShm: what its geometry needs
// (NewShmPlan) and how a rank's steps put its input in and take the
// result out (shm_steps.go).
type shmColl struct {
	// pieces: the reducers reduce every chunk piece by piece on the host,
	// in a second step of the chunk (AllReduce, Reduce).
	pieces bool
	// intra: a device cluster of several ranks reduces a chunk inside the
	// cluster first, each rank carrying a part (AllReduce).
	intra bool
	// oneShot: small calls take one step (shmBuilder.oneShot);
	// deviceReduce: large ones may fold on the devices
	// (sched.DeviceFolds; AllReduce, Reduce, ReduceScatter).
	oneShot, deviceReduce bool
	// rootOnly: only the root puts its input in, and copies it to its own
	// recv itself (Broadcast).
	rootOnly bool
	// blockPerRank: a rank puts in one block per rank, and a slot's
	// output area holds a whole chunk (ReduceScatter).
	blockPerRank bool
	// sources are the ranks whose input areas hold a contribution to the
	// piece r of a chunk of chunkLen bytes (pieces).
	sources func(l *Layout, chunkLen, size int, r Range) []Source
	// get adds the steps that take chunk k's result out of the windows.
	get func(s *shmBuilder, k int)
}

// everyRank: every rank's input area holds a contribution to every byte
// (Reduce: every rank puts its whole input in).
func everyRank(l *Layout, _, _ int, r Range) []Source {
	s := Source{Range: r}
	for q := 0; q < l.NRanks(); q++ {
		s.Ranks = append(s.Ranks, q)
	}
	return []Source{s}
}

// getAllReduce: every rank takes the reduced pieces that cover its part
// (sched.Holders), or folds the other clusters' parts on its device.
func (s *shmBuilder) getAllReduce(k int) {
	if s.g.DeviceReduce {
		s.foldOnDevice(k)
		return
	}
	off, L := s.g.Span(k)
	pt := s.part(k)
	s.getCopies(k, s.held(k, L, pt, off))
	if s.dev {
		s.landed(k)
	}
}

// getAtRoot: the root takes every reduced piece, or folds every rank's
// input on its device (Reduce).
func (s *shmBuilder) getAtRoot(k int) {
	if s.rank != s.call.Root {
		return
	}
	if s.g.DeviceReduce {
		off, L := s.g.Span(k)
		s.foldRanks(k, Range{Off: off, Len: L}, 0)
		return
	}
	off, L := s.g.Span(k)
	if s.getCopies(k, s.held(k, L, Range{Len: L}, off)) && s.dev {
		s.mark(LaneH2D, k)
	}
}

// getFromRoot: every other rank copies the root's input (Broadcast).
func (s *shmBuilder) getFromRoot(k int) {
	if s.rank == s.call.Root {
		return
	}
	off, L := s.g.Span(k)
	cp := CopyPair{Src: s.win(s.call.Root, s.g.InArea(k), L), Dst: ref(BufRecv, off, L)}
	if s.getCopies(k, []CopyPair{cp}) && s.dev {
		s.mark(LaneH2D, k)
	}
}

// getEvery: every rank copies every other rank's input to its block, and
// its own from its send (AllGather): on a device on the caller's stream,
// where it crosses no link (from the window it took the link twice,
// which held split 1,1 well below its bound: docs/performance.md,
// "AllGather between two device clusters: a rank's own block stays on its
// device").
func (s *shmBuilder) getEvery(k int) {
	off, L := s.g.Span(k)
	s.copies(s.copyLane(LaneIntra), k, []CopyPair{{Src: ref(BufSend, off, L), Dst: ref(BufRecv, s.rank*s.block+off, L)}})
	var cps []CopyPair
	for q := 0; q < s.n; q++ {
		if q != s.rank {
			cps = append(cps, CopyPair{Src: s.win(q, s.g.InArea(k), L), Dst: ref(BufRecv, q*s.block+off, L)})
		}
	}
	if s.getCopies(k, cps) && s.dev {
		s.mark(LaneH2D, k)
	}
}

// getOwnBlock: every rank folds its block of every rank's input, into its
// recv on the host, into its output area (then copied to the device) on a
// device, or on its device (DeviceReduce) (ReduceScatter).
func (s *shmBuilder) getOwnBlock(k int) {
	off, L := s.g.Span(k)
	if s.g.DeviceReduce {
		s.foldRanks(k, Range{Off: s.rank*s.block + off, Len: L}, s.g.Block(s.rank))
		return
	}
	in := s.g.InArea(k) + s.g.Block(s.rank)
	f := Fold{Dst: ref(BufRecv, off, L)}
	if s.dev {
		f.Dst = s.win(s.rank, s.g.OutArea(k), L)
	}
	for q := 0; q < s.n; q++ {
		f.Srcs = append(f.Srcs, s.win(q, in, L))
	}
	s.fold(KindFold, LaneNet, k, f)
	if s.dev {
		s.getCopies(k, []CopyPair{{Src: f.Dst, Dst: ref(BufRecv, off, L)}})
		s.mark(LaneH2D, k)
	}
}
