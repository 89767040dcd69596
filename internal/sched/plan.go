package sched

import (
	"fmt"
	"io"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/sdk"
)

// Xfer is one send or receive of a SendRecv call or step. In a Call, Peer is a
// rank of the communicator and Bytes the message size; in a Step, Peer is a
// rank of the step's communicator and Ref the buffer.
type Xfer struct {
	Peer  int  `json:"peer"`
	Recv  bool `json:"recv"`
	Bytes int  `json:"bytes,omitempty"`
	Ref   Ref  `json:"ref"`
}

// Call is one collective call as every rank makes it.
type Call struct {
	Coll  sdk.Collective `json:"coll"`
	Count int            `json:"count"` // elements, as the API's count argument
	DType sdk.DataType   `json:"dtype"`
	Op    sdk.RedOp      `json:"op"`
	Root  int            `json:"root"`
	// AlltoAllv's arguments, in elements, one per rank.
	SendCounts, SDispls, RecvCounts, RDispls []int `json:"-"`
	// SendRecv's operations, in the order they were issued (any group of
	// Send and Recv calls); a Ref of Buf User names each one's buffer (Idx
	// is the position in this list).
	Ops []Xfer `json:"-"`
}

// CallOf is the call every rank makes when this rank issues c: c's
// arguments, and for SendRecv its send and its receive as Ops. (A Call
// holds any group, so that the schedules take what GroupStart ... GroupEnd
// collects; sdk.Call holds the one send and one receive that Dispatch
// issues.)
func CallOf(c sdk.Call) Call {
	call := Call{Coll: c.Coll, Count: c.Count, DType: c.DType, Op: c.Op, Root: c.Root,
		SendCounts: c.SendCounts, SDispls: c.SDispls, RecvCounts: c.RecvCounts, RDispls: c.RDispls}
	if c.Coll == sdk.SendRecv {
		bytes := c.Count * c.DType.Size()
		call.Ops = []Xfer{{Peer: c.SendPeer, Bytes: bytes}, {Peer: c.RecvPeer, Recv: true, Bytes: bytes}}
	}
	return call
}

// Args is the call as sdk.Dispatch issues it (any collective but SendRecv,
// whose Ops a group runs, and Barrier).
func (c Call) Args() sdk.Call {
	return sdk.Call{Coll: c.Coll, Count: c.Count, DType: c.DType, Op: c.Op, Root: c.Root,
		SendCounts: c.SendCounts, SDispls: c.SDispls, RecvCounts: c.RecvCounts, RDispls: c.RDispls}
}

func (c Call) String() string {
	s := c.Coll.Title()
	if c.Coll == sdk.SendRecv {
		return fmt.Sprintf("%s (%d operations)", s, len(c.Ops))
	}
	if c.Coll == sdk.Barrier {
		return s
	}
	s += " " + c.DType.String()
	if c.Coll.Reduces() {
		s += " " + c.Op.String()
	}
	if c.Coll.Rooted() {
		s += fmt.Sprintf(" root %d", c.Root)
	}
	return s + fmt.Sprintf(" count %d", c.Count)
}

// Path is how a call runs.
type Path int

const (
	// PathVendor: a single cluster on a plugin; its library does the call.
	PathVendor Path = iota
	// PathHostComm: a single cluster on the host backend; host collectives.
	PathHostComm
	// PathC2C: cluster-to-cluster schedule: inside each cluster on its
	// library, between clusters among the leaders over hostnet, through
	// pinned staging, pipelined in chunks.
	PathC2C
	// PathP2P: data movement as direct transfers: the vendor library
	// between ranks of one cluster, hostnet through pinned staging between
	// ranks of different clusters.
	PathP2P
	// PathHost: the host path (FLAGCX_USE_HOST_COMM=1, and the fallback):
	// every rank copies its data to the host, one host collective over all
	// ranks runs, every rank copies the result back.
	PathHost
	// PathShm: every rank on one host, device ranks able to register the
	// host's shared-memory windows with their runtime: device copies land
	// in the windows, where the peers read them (no private staging, no
	// host copy), every rank of every cluster carries a part, and every
	// rank reduces a piece on the host. See ShmPlan.
	PathShm
)

var pathNames = []string{"vendor", "host-comm", "c2c", "p2p", "host", "c2c-shm"}

func (p Path) String() string {
	if p < 0 || int(p) >= len(pathNames) {
		return fmt.Sprintf("path(%d)", int(p))
	}
	return pathNames[p]
}

// Lane is where a step runs. Each lane runs its steps in plan order, and
// the lanes run concurrently: that is the pipeline (chunk k on the network
// while chunk k+1 is copied to the host and chunk k-1 back to the device).
type Lane int

const (
	// LaneIntra: vendor operations and device copies on the caller's
	// stream, or host operations on the cluster's host communicator.
	LaneIntra Lane = iota
	// LaneD2H: copies into staging, on the communicator's own stream.
	LaneD2H
	// LaneNet: hostnet operations and host reductions.
	LaneNet
	// LaneH2D: copies out of staging, on another stream of its own.
	LaneH2D
	NumLanes
)

var laneNames = [NumLanes]string{"intra", "d2h", "net", "h2d"}

func (l Lane) String() string {
	if l < 0 || l >= NumLanes {
		return fmt.Sprintf("lane(%d)", int(l))
	}
	return laneNames[l]
}

// Kind is what a step does.
type Kind int

const (
	// KindCopy copies each of Copies (device to host, host to device,
	// device to device or host to host, as the memory is).
	KindCopy Kind = iota
	// KindIntra runs Coll on the cluster's communicator: the vendor library
	// on a device cluster, host collectives on a host cluster. Roots and
	// peers are cluster-local ranks.
	KindIntra
	// KindInter runs Coll among the cluster leaders on hostnet (inter rank
	// = cluster index), on host memory.
	KindInter
	// KindWorld runs Coll over every rank of the communicator on hostnet,
	// on host memory.
	KindWorld
	// KindScale divides Dst by N (avg = sum, then one division).
	KindScale
	// KindReduce combines Src into Dst with Op on the host, on every core.
	KindReduce

	// The shared-memory plane's own kinds (PathShm, shm_steps.go): its
	// copies are KindCopy and its intra-cluster steps KindIntra, with
	// BufWindow refs for the windows.

	// KindMark records that the work enqueued on Lane so far (a device
	// stream) is done for Chunk (-1 on LaneIntra: the caller's earlier
	// work), for a later KindAwait.
	KindMark
	// KindAwait waits for From's mark of Chunk: Lane's stream waits, or on
	// LaneNet the host.
	KindAwait
	// KindDrain: the host waits until Lane's stream has done everything.
	KindDrain
	// KindSync publishes step Label in the windows and waits for every
	// rank's.
	KindSync
	// KindPost publishes step Label without waiting (a KindFoldPosted
	// waits for each rank in turn).
	KindPost
	// KindFold folds each of Folds (Srcs in order, with Op, avg dividing
	// by N) into its Dst, and its Also, on the host's cores.
	KindFold
	// KindFoldPosted folds Folds[0] as KindFold does, waiting for each
	// source's rank to have posted before reading it.
	KindFoldPosted
	// KindDevFold folds each of Folds on this rank's device (the
	// plugin's reduceLocal), on Lane's stream.
	KindDevFold
	// KindRelay is a one-step call of a device rank in one launch on
	// Lane's stream (the plugin's relayReduce): the device puts
	// Copies[0] in this rank's window and raises the landed word, the
	// host publishes step Label and waits for every rank's, the device
	// folds Folds[0]. Dst holds the landed and go words (two lines of
	// this rank's window).
	KindRelay
)

var kindNames = []string{"copy", "intra", "inter", "world", "scale", "reduce", "mark", "await", "drain", "step", "post", "fold", "fold-posted", "devfold", "relay"}

// collective reports whether a step of kind k runs a collective (Coll).
func (k Kind) collective() bool { return k == KindIntra || k == KindInter || k == KindWorld }

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("kind(%d)", int(k))
	}
	return kindNames[k]
}

// Buf names a buffer of a call.
type Buf int

const (
	BufNone Buf = iota
	BufSend
	BufRecv
	// BufScratch is this rank's scratch: device memory on a device rank,
	// host memory on a host rank.
	BufScratch
	// BufStage is host memory: pinned on a device rank.
	BufStage
	// BufUser is buffer Idx of a SendRecv call's operations.
	BufUser
	// BufWindow is rank Idx's shared-memory window (PathShm); a one-shot
	// plan's offsets are in the half of the windows the call uses.
	BufWindow
	// BufPeerSend and BufPeerRecv are host rank Idx's send and recv
	// buffers, registered memory this rank maps (PathShm's registered
	// plans: Plan.Registered).
	BufPeerSend
	BufPeerRecv
)

var bufNames = []string{"-", "send", "recv", "scratch", "stage", "user", "win", "send", "recv"}

// Ref is a byte range of a buffer.
type Ref struct {
	Buf Buf `json:"buf"`
	Idx int `json:"idx,omitempty"`
	Off int `json:"off"`
	Len int `json:"len"`
}

func (r Ref) String() string {
	if r.Buf == BufNone {
		return "-"
	}
	name := bufNames[r.Buf]
	switch r.Buf {
	case BufUser:
		name = fmt.Sprintf("op%d", r.Idx)
	case BufWindow:
		name = fmt.Sprintf("win%d", r.Idx)
	case BufPeerSend, BufPeerRecv:
		name = fmt.Sprintf("r%d.%s", r.Idx, name)
	}
	return fmt.Sprintf("%s[%s:%s]", name, bytesize.Compact(int64(r.Off)), bytesize.Compact(int64(r.Off+r.Len)))
}

// Sub is the n bytes at off inside r.
func (r Ref) Sub(off, n int) Ref { return Ref{Buf: r.Buf, Idx: r.Idx, Off: r.Off + off, Len: n} }

// CopyPair is one copy of a KindCopy step; Src and Dst have the same Len.
type CopyPair struct{ Src, Dst Ref }

// Fold is one reduction of a KindFold, KindFoldPosted or KindDevFold
// step: Srcs, in order, into Dst (and into Also where it is not BufNone).
type Fold struct {
	Dst, Also Ref
	Srcs      []Ref
}

// Step is one operation of a plan.
type Step struct {
	Lane Lane `json:"lane"`
	Kind Kind `json:"kind"`
	// Coll, Src, Dst, Count, DType, Op and Root are the collective of an
	// intra, inter or world step (Count in elements of DType; data movement
	// runs as bytes, DType uint8, so it never depends on the library's
	// types). Src == Dst is in place.
	Coll  sdk.Collective `json:"coll"`
	Src   Ref            `json:"src"`
	Dst   Ref            `json:"dst"`
	Count int            `json:"count"`
	DType sdk.DataType   `json:"dtype"`
	Op    sdk.RedOp      `json:"op"`
	Root  int            `json:"root"`
	// Copies of a copy step.
	Copies []CopyPair `json:"copies,omitempty"`
	// Xfers of a SendRecv step.
	Xfers []Xfer `json:"xfers,omitempty"`
	// AlltoAllv's counts and displacements (elements) of a world step.
	SendCounts, SDispls, RecvCounts, RDispls []int `json:"-"`
	// N divides a scale step, and the avg of a fold.
	N int `json:"n,omitempty"`
	// Folds of a fold step.
	Folds []Fold `json:"folds,omitempty"`
	// From is the lane whose mark an await step waits for.
	From Lane `json:"from,omitempty"`
	// Label names a sync or post step in the windows (2k+phase for chunk
	// k's phase; -2 opens a pipelined call, 2*Chunks closes it).
	Label int `json:"label,omitempty"`
	// Chunk is the pipeline chunk this step works on (-1: the whole call).
	Chunk int `json:"chunk"`
	// Deps are steps of other lanes that must be complete first (a lane's
	// own earlier steps always are).
	Deps []int `json:"deps,omitempty"`
}

// Args is an intra, inter or world step's collective as sdk.Dispatch
// issues it on the step's communicator (any but SendRecv, whose Xfers a
// group runs, and Barrier).
func (s *Step) Args() sdk.Call {
	return sdk.Call{Coll: s.Coll, Count: s.Count, DType: s.DType, Op: s.Op, Root: s.Root,
		SendCounts: s.SendCounts, SDispls: s.SDispls, RecvCounts: s.RecvCounts, RDispls: s.RDispls}
}

// Plan is one rank's schedule for one call.
type Plan struct {
	Call   Call    `json:"call"`
	Rank   int     `json:"rank"`
	Path   Path    `json:"path"`
	Why    string  `json:"why,omitempty"` // why this path (fallbacks say what is missing)
	Layout *Layout `json:"-"`
	// Chunks is the pipeline depth, ChunkBytes its chunk size.
	Chunks     int    `json:"chunks"`
	ChunkBytes int    `json:"chunk_bytes"`
	Steps      []Step `json:"steps"`
	// Async: the steps are enqueued on the caller's stream and the call
	// returns before they complete (the vendor library's own semantics).
	// Otherwise the call returns when its result is in place.
	Async bool `json:"async"`
	// Shm is the geometry of a PathShm plan (its steps are in Steps, as
	// every path's: see ShmPlan and shm_steps.go).
	Shm *ShmPlan `json:"shm,omitempty"`
	// Registered is the plan a PathShm call runs instead when every host
	// rank's send and recv buffers are registered memory (the
	// communicator's MemAlloc), which the ranks agree on at the call's
	// start (shm_registered.go).
	Registered *Plan `json:"registered,omitempty"`
}

// StageBytes and ScratchBytes are the sizes the plan's refs need.
func (p *Plan) StageBytes() int   { return p.extent(BufStage) }
func (p *Plan) ScratchBytes() int { return p.extent(BufScratch) }

func (p *Plan) extent(b Buf) int {
	n := 0
	see := func(r Ref) {
		if r.Buf == b {
			n = max(n, r.Off+r.Len)
		}
	}
	for _, s := range p.Steps {
		see(s.Src)
		see(s.Dst)
		for _, c := range s.Copies {
			see(c.Src)
			see(c.Dst)
		}
		for _, x := range s.Xfers {
			see(x.Ref)
		}
		for _, f := range s.Folds {
			see(f.Dst)
			for _, r := range f.Srcs {
				see(r)
			}
		}
	}
	return n
}

// Lanes lists the lanes that have steps.
func (p *Plan) Lanes() []Lane {
	var used [NumLanes]bool
	for _, s := range p.Steps {
		used[s.Lane] = true
	}
	var out []Lane
	for l, u := range used {
		if u {
			out = append(out, Lane(l))
		}
	}
	return out
}

// Count returns how many steps match kind (and coll, for intra, inter and
// world steps; pass -1 for any).
func (p *Plan) Count(kind Kind, coll sdk.Collective) int {
	n := 0
	for _, s := range p.Steps {
		if s.Kind == kind && (coll < 0 || !kind.collective() || s.Coll == coll) {
			n++
		}
	}
	return n
}

// String describes one step.
func (s Step) String() string {
	var b strings.Builder
	switch s.Kind {
	case KindCopy:
		b.WriteString("copy ")
		for i, c := range s.Copies {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == 3 && len(s.Copies) > 4 {
				fmt.Fprintf(&b, "... (%d copies)", len(s.Copies))
				break
			}
			fmt.Fprintf(&b, "%s -> %s", c.Src, c.Dst)
		}
	case KindScale:
		fmt.Fprintf(&b, "scale %s %s by 1/%d", s.DType, s.Dst, s.N)
	case KindReduce:
		fmt.Fprintf(&b, "reduce %s %s: %s op= %s", s.DType, s.Op, s.Dst, s.Src)
	case KindMark, KindAwait, KindDrain, KindSync, KindPost, KindFold, KindFoldPosted, KindDevFold, KindRelay:
		s.shmString(&b)
	default:
		fmt.Fprintf(&b, "%s %s", s.Kind, s.Coll.Title())
		if s.Coll == sdk.SendRecv {
			for i, x := range s.Xfers {
				if i == 4 && len(s.Xfers) > 5 {
					fmt.Fprintf(&b, " ... (%d transfers)", len(s.Xfers))
					break
				}
				if x.Recv {
					fmt.Fprintf(&b, " recv %s<-%d", x.Ref, x.Peer)
				} else {
					fmt.Fprintf(&b, " send %s->%d", x.Ref, x.Peer)
				}
			}
			break
		}
		if s.Coll == sdk.Barrier {
			break
		}
		fmt.Fprintf(&b, " %s", s.DType)
		if s.Coll.Reduces() {
			fmt.Fprintf(&b, " %s", s.Op)
		}
		if s.Src == s.Dst {
			fmt.Fprintf(&b, " %s in place", s.Src)
		} else {
			fmt.Fprintf(&b, " %s -> %s", s.Src, s.Dst)
		}
		fmt.Fprintf(&b, " count %d", s.Count)
		if s.Coll.Rooted() {
			fmt.Fprintf(&b, " root %d", s.Root)
		}
	}
	return b.String()
}

// Format writes the plan: a header, then one line per step. With more than
// maxChunks pipeline chunks, only the steps of the first maxChunks-1 chunks
// and of the last one are listed (0 lists all).
func (p *Plan) Format(w io.Writer, maxChunks int) {
	fmt.Fprintf(w, "plan rank %d: %s: path %s", p.Rank, p.Call, p.Path)
	if p.Chunks > 1 {
		fmt.Fprintf(w, ", %d chunks of %s", p.Chunks, bytesize.Compact(int64(p.ChunkBytes)))
	}
	if p.Async {
		fmt.Fprint(w, ", enqueued on the caller's stream")
	}
	fmt.Fprintln(w)
	if p.Why != "" {
		fmt.Fprintf(w, "  why: %s\n", p.Why)
	}
	if p.Layout != nil && p.Rank >= 0 && p.Rank < p.Layout.NRanks() {
		c := p.Layout.ClusterOf(p.Rank)
		role := "member"
		if c.Leader == p.Rank {
			role = "leader"
		}
		mem := "host memory"
		if c.OnDevice() {
			mem = fmt.Sprintf("%s device %d", c.Plugin, p.Layout.Members[p.Rank].Device)
		}
		fmt.Fprintf(w, "  rank %d: %s of cluster %d (%s, ranks %s), %s\n", p.Rank, role, c.Index, c.Vendor, FormatRanks(c.Ranks), mem)
	}
	if g := p.Shm; g != nil && g.Registered && g.SlotBytes == 0 {
		fmt.Fprintln(w, "  windows: none (the host ranks' buffers are the device's to read and write)")
	} else if g != nil {
		fmt.Fprintf(w, "  windows: %d slots of %s (input area %s)", g.Slots, bytesize.Compact(int64(g.SlotBytes)), bytesize.Compact(int64(g.In)))
		if g.OneShot {
			fmt.Fprint(w, ", in the half of each window the host engine leaves free")
		}
		fmt.Fprintln(w)
	}
	if len(p.Steps) == 0 {
		fmt.Fprintln(w, "  (nothing to do on this rank)")
		return
	}
	skipped := 0
	for i, s := range p.Steps {
		if maxChunks > 0 && p.Chunks > maxChunks && s.Chunk >= maxChunks-1 && s.Chunk < p.Chunks-1 {
			skipped++
			continue
		}
		if skipped > 0 {
			writeSkipped(w, skipped, maxChunks-1, p.Chunks-2)
			skipped = 0
		}
		fmt.Fprintln(w, p.StepLine(i))
	}
	if skipped > 0 {
		writeSkipped(w, skipped, maxChunks-1, p.Chunks-2)
	}
	if p.Registered != nil {
		fmt.Fprintln(w, "  instead, when every host rank's buffers are registered memory (MemAlloc; the ranks agree in a first step):")
		var alt strings.Builder
		p.Registered.Format(&alt, maxChunks)
		for _, line := range strings.SplitAfter(strings.TrimSuffix(alt.String(), "\n"), "\n") {
			fmt.Fprint(w, "  "+line)
		}
		fmt.Fprintln(w)
	}
}

// StepLine is the line Format prints for step i (core's tests compare
// these lines with the steps its executors ran).
func (p *Plan) StepLine(i int) string {
	s := &p.Steps[i]
	chunk := "   "
	if s.Chunk >= 0 {
		chunk = fmt.Sprintf("c%-2d", s.Chunk)
	}
	line := fmt.Sprintf("  %3d %-5s %s %s", i, s.Lane, chunk, s)
	if len(s.Deps) > 0 {
		deps := make([]string, len(s.Deps))
		for j, d := range s.Deps {
			deps[j] = fmt.Sprint(d)
		}
		line += "  (after " + strings.Join(deps, ",") + ")"
	}
	return line
}

func writeSkipped(w io.Writer, steps, from, to int) {
	chunks := fmt.Sprintf("chunks %d-%d", from, to)
	if from == to {
		chunks = fmt.Sprintf("chunk %d", from)
	}
	noun := "steps"
	if steps == 1 {
		noun = "step"
	}
	fmt.Fprintf(w, "        ... %d %s of %s, alike\n", steps, noun, chunks)
}

// String is Format with at most 3 chunks listed.
func (p *Plan) String() string {
	var b strings.Builder
	p.Format(&b, 3)
	return b.String()
}
