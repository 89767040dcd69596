package sched

import (
	"cmp"
	"fmt"
	"math"

	"github.com/flagcx/flagcx-go/sdk"
)

// PathShm: the zero-copy collectives of a heterogeneous communicator whose
// ranks share one host.
//
// Every rank maps every rank's shared-memory window (hostnet), and every
// device rank has registered all of them with its runtime, so a device
// copy can land in a window and a peer can read it from there. A call is
// cut into chunks; chunk k uses slot k%Slots of every window: an input
// area (what the rank puts in for the chunk) and an output area (what it
// reduced, for the ranks that read it). A slot is written again only
// after every rank has read it. Copies are chained with events (the
// caller's stream, a d2h and an h2d stream); the host waits for a chunk's
// copy only where the next step reads it.
//
// AllReduce (two steps a chunk). A chunk is cut into pieces, one per
// reducer (Reducers): the host ranks when there are any, else every rank.
//
//	device rank, cluster of m > 1   intra ReduceScatter of the chunk (rank j keeps part j) | d2h part j -> own input area
//	device rank alone in its cluster  d2h the chunk -> own input area
//	host rank                       copy the chunk but its own piece -> own input area
//	reducer i                       step | reduce piece i of every contribution -> own output area (and a host rank's recv) | step
//	device rank                     h2d the pieces covering its part (the chunk when alone) | cluster of m > 1: intra AllGather
//	host rank                       copy every other piece -> recv
//
// So every rank of a cluster carries a part over its own link and no byte
// is copied on the host between device and peer. Why the host ranks reduce
// when there are any: their inputs and results live in private memory, so
// a host rank that reduces its own piece reads its input and writes its
// result where they are; a piece reduced elsewhere costs it a copy in and
// a copy out, and the host's memory bandwidth, not its cores, is what
// bounds these calls. A host rank alone reduces the whole chunk and copies
// nothing. Small calls of every collective (OneShot: every rank reads at
// most ShmOneShot bytes) take one step, one copy in, one fold (or copy)
// and one copy out: every rank puts its whole input in its window (the
// root alone for Broadcast), publishes the step, and reads what it needs
// of every window itself (a reduction folds them in rank order) as each
// rank has published.
//
// AllReduce with device reductions (DeviceReduce: no host ranks, every
// plugin reduces on its device, at most MaxDeviceReduceClusters clusters),
// one step a chunk: every rank puts its part in as above; then every rank
// copies the other clusters' contributions to its part into device scratch
// (the carriers' input areas, sched.Sources) and folds them with its own
// on its device, in rank order, so the host copies nothing and reduces
// nothing: each byte crosses a rank's link once each way. Every cluster
// reduces the whole message (each rank its part), which costs each link
// (clusters-1) parts in; with two clusters, which is what split layouts
// and two vendors are, that is no more than the relay needs anyway.
//
// Reduce: as AllReduce without the intra steps (every rank puts its own
// input in), and only the root collects the pieces. Broadcast: the root
// puts the chunk in, every rank copies it out (one step a chunk).
// AllGather: every rank puts its block's chunk in and copies every other
// rank's out (its own from its send, which on a device crosses no link).
// ReduceScatter: every rank puts the chunk of each of its n blocks
// in, and reduces block r's chunk of every window into its own result.
//
// Reduce and ReduceScatter with device reductions (as AllReduce's, at
// most MaxDeviceReduceClusters ranks: they fold one input a rank), one
// step a chunk: every rank but Reduce's root puts in what the others
// fold (ReduceScatter: every block but its own); the root (every rank,
// for its block) copies the others' inputs into device scratch and folds
// them with its own send in rank order on its device (sched.foldRanks).
// Its link carries n-1 chunks in where the host fold's carried one out
// and one in, and the host folds nothing: with two ranks, what split 1,1
// and two vendors of one are, that is less on the link as well.
type ShmPlan struct {
	Coll sdk.Collective
	// OneShot: the latency path (one step, no pipeline; shm_steps.go's
	// oneShot).
	OneShot bool
	// Spans are the chunks (offsets and lengths in the call's bytes; of
	// each block for AllGather and ReduceScatter).
	Spans []Range
	// Slots are the chunks in flight; SlotBytes the window bytes of one
	// slot: the input area [0, In), then the output area [In, SlotBytes).
	Slots, SlotBytes, In int
	// Blocks is how many blocks of a chunk a rank puts in (n for
	// ReduceScatter, else 1).
	Blocks int
	// Reducers reduce the pieces of every chunk (AllReduce, Reduce):
	// piece i (Piece) is reduced by Reducers[i] into its output area.
	Reducers []int
	// DeviceReduce: the call folds on the devices (AllReduce, Reduce,
	// ReduceScatter: one step a chunk, no output areas, no reducers).
	DeviceReduce bool
	// Registered: the host ranks' buffers are registered memory that the
	// device cluster reads and writes itself (shm_registered.go).
	Registered bool
	// Lag is how many chunks a one-step pipeline keeps a rank's copies
	// out of the windows in flight: it waits for its copies of chunk k-Lag
	// before it publishes chunk k, and puts chunk k-Lag+Slots in after.
	Lag int
}

// ShmReducers are the ranks that reduce AllReduce's and Reduce's pieces
// on PathShm: the host ranks when there are any, else every rank (the
// package comment says why).
func ShmReducers(l *Layout) []int {
	var host, all []int
	for r, m := range l.Members {
		all = append(all, r)
		if !m.OnDevice() {
			host = append(host, r)
		}
	}
	if len(host) > 0 {
		return host
	}
	return all
}

// Piece is piece i of a chunk of chunkLen bytes: the part reducer i reduces.
func (p *ShmPlan) Piece(chunkLen, size, i int) Range {
	return Part(chunkLen, size, len(p.Reducers), i)
}

// ReducerIndex is rank's index in Reducers, or -1.
func (p *ShmPlan) ReducerIndex(rank int) int {
	for i, r := range p.Reducers {
		if r == rank {
			return i
		}
	}
	return -1
}

// Held is a sub-range of a chunk in a reducer's output area: Rank's area
// holds it from offset At.
type Held struct {
	Range
	Rank, At int
}

// Holders lists where the bytes r of a chunk of chunkLen bytes are once
// reduced, piece by piece in order.
func (p *ShmPlan) Holders(chunkLen, size int, r Range) []Held {
	var out []Held
	for i, q := range p.Reducers {
		pc := p.Piece(chunkLen, size, i)
		a, b := max(pc.Off, r.Off), min(pc.End(), r.End())
		if a < b {
			out = append(out, Held{Range{a, b - a}, q, a - pc.Off})
		}
	}
	return out
}

// Steps is how many steps a chunk takes: the host reductions publish their
// pieces in a second step.
func (p *ShmPlan) Steps() int {
	if !p.DeviceReduce && schedOf(p.Coll).shm.pieces {
		return 2
	}
	return 1
}

// Tuning of PathShm; every rank must use the same values.
var (
	// ShmSlots is how many chunks are in flight in the windows.
	ShmSlots = 3
	// ShmOneShot: calls whose input area (the message, or ReduceScatter's
	// n blocks) times the rank count is at most this many bytes take the
	// one-step path.
	ShmOneShot = 256 << 10
	// ShmDeviceSlots and ShmDeviceLag shape the device-reduced AllReduce:
	// with a lag of two, a rank's copies into its device for chunk k run
	// while it publishes chunk k+1, so its inbound link never waits for a
	// step; four slots keep two chunks of outbound copies ahead of them.
	ShmDeviceSlots = 4
	ShmDeviceLag   = 2
	// ShmRelayMax: a device rank relays one-step AllReduces and Reduces
	// of at most this many bytes (shm_steps.go, relays): one block of
	// the device's threads reads every rank's input over the host link,
	// which pays for small calls only.
	ShmRelayMax = 16 << 10
	// ShmDeviceChunkScale sizes the device-reduced pipeline's chunks:
	// sqrt(bytes * ShmDeviceChunkScale) (deviceChunk says why).
	ShmDeviceChunkScale = 256 << 10
)

// deviceChunk is the chunk of a device-reduced call of bytes on
// PathShm. A chunk costs a fixed o (its copies' enqueues, events and the
// step's flags) and the pipeline fills and drains about two chunks at the
// link's rate B, so a call of S bytes takes about S/B + (S/c)*o + 2c/B,
// least at c = sqrt(S*o*B/2): ShmDeviceChunkScale is o*B/2 as o and B were
// measured on an H200, which gives 4 MiB chunks at 64 MiB, 8 at 256 MiB,
// 16 at 1 GiB; chunk sizes side by side bore it out (docs/performance.md,
// "Small heterogeneous calls in one launch, device-pipeline chunks by
// size", and "Figures that were in comments (issue 41)").
func deviceChunk(bytes int) int {
	c := int(math.Sqrt(float64(bytes) * float64(ShmDeviceChunkScale)))
	return max(c, MinPipeChunk)
}

// MaxDeviceReduceClusters is the most clusters a device-reduced AllReduce
// folds, and the most ranks a device-reduced Reduce or ReduceScatter does
// (one source each in one reduceLocal call: FLAGCX_REDUCE_MAX_SRCS).
const MaxDeviceReduceClusters = 8

const shmAlign = 4096 // slot areas start on pages (and on any element)

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// ShmColl reports whether coll runs on PathShm (its entry in schedules,
// colls.go, says how).
func ShmColl(coll sdk.Collective) bool { return schedOf(coll).shm != nil }

// NewShmPlan is the geometry of coll over n ranks whose smallest window is
// window bytes: bytes (elements of size) is the message (AllReduce,
// Reduce, Broadcast) or one rank's block (AllGather, ReduceScatter), cut
// into chunks of at most chunkMax bytes (FLAGCX_NET_CHUNK_SIZE; 0: as
// large as the slots allow; a device-reduced call's at most
// deviceChunk). reducers are AllReduce's and Reduce's
// (ShmReducers; nil: every rank).
func NewShmPlan(coll sdk.Collective, bytes, size, n int, reducers []int, window, chunkMax int, deviceReduce bool) (*ShmPlan, error) {
	if !ShmColl(coll) {
		return nil, fmt.Errorf("%w: %s does not run in the shared windows", sdk.ErrInternalError, coll.Title())
	}
	sc := schedOf(coll).shm
	if reducers == nil {
		for r := 0; r < n; r++ {
			reducers = append(reducers, r)
		}
	}
	if blocks, in := oneShotIn(sc, bytes, n); in*n <= ShmOneShot && in+alignUp(bytes, 64) <= window/2 {
		return &ShmPlan{Coll: coll, OneShot: true, Spans: []Range{{0, bytes}}, Slots: 1, In: in, Blocks: blocks}, nil
	}
	deviceReduce = deviceReduce && sc.deviceReduce
	slots, lag := max(ShmSlots, 1), 1
	if deviceReduce {
		lag = min(max(ShmDeviceLag, 1), max(ShmDeviceSlots, 2)-1)
		slots = max(ShmDeviceSlots, lag+1)
	} else if !sc.pieces {
		// One step a chunk: chunk k+1 goes in while chunk k-1 may still
		// be read, so it takes two slots at least (the pipeline in
		// shm_steps.go).
		slots = max(slots, 2)
	}
	// A slot holds Blocks chunks in and, for the reductions, a piece of a
	// chunk (one per reducer; a whole chunk for ReduceScatter's result) out.
	pieces := sc.pieces && !deviceReduce
	hostOut := sc.blockPerRank && !deviceReduce // ReduceScatter's folded chunk
	blocks, outNum, outDen := 1, 0, 1
	if pieces {
		outNum, outDen = 1, len(reducers)
	}
	if sc.blockPerRank {
		blocks = n
	}
	if hostOut {
		outNum = 1
	}
	per := window/slots - 2*shmAlign
	chunk := (per * outDen / (blocks*outDen + outNum)) / shmAlign * shmAlign
	if deviceReduce {
		// FLAGCX_NET_CHUNK_SIZE stays the most a chunk may be.
		chunkMax = min(deviceChunk(bytes), cmp.Or(max(chunkMax, 0), math.MaxInt))
	}
	if chunkMax > 0 {
		chunk = min(chunk, max(chunkMax/shmAlign*shmAlign, shmAlign))
	}
	if chunk < shmAlign {
		return nil, fmt.Errorf("the shared-memory window (%d bytes) is too small for %d chunks in flight: raise FLAGCX_SHM_WINDOW_SIZE", window, slots)
	}
	p := &ShmPlan{Coll: coll, Spans: Spans(bytes, size, chunk, MinPipeChunk), Slots: slots, Blocks: blocks, DeviceReduce: deviceReduce, Lag: lag}
	if pieces {
		p.Reducers = reducers
	}
	maxLen := 0
	for _, s := range p.Spans {
		maxLen = max(maxLen, s.Len)
	}
	p.In = blocks * alignUp(maxLen, shmAlign)
	out := 0
	if pieces {
		out = p.Piece(maxLen, size, 0).Len
	}
	if hostOut {
		out = maxLen
	}
	p.SlotBytes = p.In + alignUp(out, shmAlign)
	return p, nil
}

// oneShotIn is how many blocks a rank puts in on the one-step path, and
// the input area they take: ReduceScatter's n blocks, else the message.
func oneShotIn(sc *shmColl, bytes, n int) (blocks, in int) {
	if sc.blockPerRank {
		return n, n * alignUp(bytes, 64)
	}
	return 1, alignUp(bytes, 64)
}

// Block is where block j of chunk k's input starts in an input area.
func (p *ShmPlan) Block(j int) int { return j * (p.In / p.Blocks) }

// Chunks is the number of chunks.
func (p *ShmPlan) Chunks() int { return len(p.Spans) }

// Span is chunk k's offset and length in the call's bytes.
func (p *ShmPlan) Span(k int) (off, n int) { return p.Spans[k].Off, p.Spans[k].Len }

// InArea and OutArea are the window offsets of chunk k's input and output
// areas.
func (p *ShmPlan) InArea(k int) int  { return (k % p.Slots) * p.SlotBytes }
func (p *ShmPlan) OutArea(k int) int { return (k%p.Slots)*p.SlotBytes + p.In }

// Range is a byte range [Off, Off+Len).
type Range struct{ Off, Len int }

// End is Off+Len.
func (r Range) End() int { return r.Off + r.Len }

// Part is part j of m of bytes (whole elements of size): the first
// elems%m parts have one element more.
func Part(bytes, size, m, j int) Range {
	elems := bytes / size
	base, rem := elems/m, elems%m
	off := j*base + min(j, rem)
	n := base
	if j < rem {
		n++
	}
	return Range{off * size, n * size}
}

// Source is a sub-range of a piece with the ranks whose input areas hold
// a contribution to it, in rank order.
type Source struct {
	Range
	Ranks []int
}

// Sources splits r (a range of a chunk of chunkLen bytes) where the
// carriers change and names each sub-range's contributors: the carrier of
// each device cluster (the rank whose part holds it; the rank itself in a
// cluster of one) and every host rank.
func Sources(l *Layout, chunkLen, size int, r Range) []Source {
	cuts := []int{r.Off, r.End()}
	for _, c := range l.Clusters {
		if !c.OnDevice() {
			continue
		}
		for j := 1; j < len(c.Ranks); j++ {
			if x := Part(chunkLen, size, len(c.Ranks), j).Off; x > r.Off && x < r.End() {
				cuts = append(cuts, x)
			}
		}
	}
	sortInts(cuts)
	var out []Source
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		if a == b {
			continue
		}
		s := Source{Range: Range{a, b - a}}
		for _, c := range l.Clusters {
			switch {
			case !c.OnDevice():
				s.Ranks = append(s.Ranks, c.Ranks...)
			default:
				s.Ranks = append(s.Ranks, c.Ranks[carrier(chunkLen, size, len(c.Ranks), a)])
			}
		}
		sortInts(s.Ranks)
		out = append(out, s)
	}
	return out
}

// carrier is the part of m that holds byte x of bytes.
func carrier(bytes, size, m, x int) int {
	for j := m - 1; j > 0; j-- {
		if Part(bytes, size, m, j).Off <= x {
			return j
		}
	}
	return 0
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// shm makes a plan on PathShm: the geometry and this rank's steps
// (shm_steps.go), which core's executor runs in order.
func (b *builder) shm() {
	b.p.Path = PathShm
	g, err := NewShmPlan(b.call.Coll, b.call.Count*b.size, b.size, b.n, ShmReducers(b.l), b.o.ShmWindow, b.o.Chunk, DeviceFolds(b.l, b.o, b.call.Coll))
	if err != nil {
		b.p.Why = err.Error() + "; the staged schedule runs instead"
		b.p.Path = PathC2C
		b.c2c()
		return
	}
	b.p.Shm = g
	b.p.Chunks = g.Chunks()
	b.p.ChunkBytes = g.Spans[0].Len
	b.shmSteps(g)
	if !g.OneShot && RegisteredFolds(b.l, b.o, b.call.Coll) {
		b.p.Registered = b.registered()
	}
	switch {
	case g.OneShot && b.p.Count(KindRelay, -1) > 0:
		b.p.Why = "every rank on one host: one step in the shared windows, which this device rank takes in one launch (relayReduce)"
	case g.OneShot:
		b.p.Why = "every rank on one host: one step in the shared windows"
	case g.DeviceReduce && schedOf(b.call.Coll).shm.intra:
		b.p.Why = "every rank on one host: device copies land in the shared windows, every device folds the other clusters' parts (reduceLocal)"
	case g.DeviceReduce:
		b.p.Why = "every rank on one host: device copies land in the shared windows, the devices fold every rank's input (reduceLocal)"
	default:
		b.p.Why = "every rank on one host: device copies land in the shared windows, where the peers read them"
	}
}

// DeviceReduces reports whether a pipelined AllReduce on PathShm reduces
// on the devices: every plugin can (Options.ShmDeviceReduce), no rank is
// on the host (host ranks reduce their own data where it is), and one fold
// takes every cluster.
func DeviceReduces(l *Layout, o Options) bool {
	if !o.ShmDeviceReduce || len(l.Clusters) > MaxDeviceReduceClusters {
		return false
	}
	for _, c := range l.Clusters {
		if !c.OnDevice() {
			return false
		}
	}
	return true
}

// DeviceFolds reports whether coll's pipelined call on PathShm folds on
// the devices: DeviceReduces, and one fold takes every input (AllReduce:
// one a cluster; Reduce and ReduceScatter: one a rank, as they reduce
// nothing inside a cluster first).
func DeviceFolds(l *Layout, o Options, coll sdk.Collective) bool {
	if !ShmColl(coll) || !schedOf(coll).shm.deviceReduce || !DeviceReduces(l, o) {
		return false
	}
	// AllReduce reduces inside each cluster first (intra).
	return schedOf(coll).shm.intra || l.NRanks() <= MaxDeviceReduceClusters
}
