package executor

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The staged AllReduce in pieces. A device cluster's leader that
// AllReduces with one other leader over a TCP link of several sockets runs
// the plan's three steps "copy the buffer to staging, AllReduce staging
// with the other leader, copy staging back" as one: the copy to the host
// goes in pieces (copyInParts), each followed by an event; the host engine
// sends a stripe (one per socket) as soon as the pieces under it are
// copied, and the copy back of a stripe is enqueued as soon as it is
// reduced (host.Engine.AllReduceStaged). The device copies then overlap
// the network instead of adding to it. The plan is unchanged and prints as
// it runs: the same three steps, on the same buffers, in pieces.

// stagedSteps reports whether steps i, i+1 and i+2 of p are that triple on
// one staging range, and the leaders' engine would cut it into pieces.
func (e *Executor) stagedSteps(p *sched.Plan, i int, ch *chain) bool {
	if ch.ev == nil || e.inter == nil || i+2 >= len(p.Steps) {
		return false
	}
	in, net, out := &p.Steps[i], &p.Steps[i+1], &p.Steps[i+2]
	if in.Kind != sched.KindCopy || len(in.Copies) != 1 || net.Kind != sched.KindInter ||
		out.Kind != sched.KindCopy || len(out.Copies) != 1 || net.Coll != sdk.AllReduce {
		return false
	}
	stage := in.Copies[0].Dst
	if stage.Buf != sched.BufStage || net.Src != stage || net.Dst != stage || out.Copies[0].Src != stage {
		return false
	}
	return stage.Len >= stagedMin && e.inter.Engine().Stripes(stage.Len) > 1
}

// stagedMin is the smallest AllReduce run in pieces. Below it the pieces'
// extra copies, events and waits cost about what the overlap saves: on
// 2 x H200 (split 1,1, two machines, three interleaved rounds each) 1 MiB
// took 469-592 us in pieces against 523-623 unfused, 256 KiB 251-353
// against 214-301.
const stagedMin = 512 << 10

// runStaged runs steps i..i+2 (stagedSteps) in pieces.
func (e *Executor) runStaged(p *sched.Plan, i int, b *Bufs, s loader.Stream, ch *chain) error {
	in, net, out := &p.Steps[i], &p.Steps[i+1], &p.Steps[i+2]
	e.stagedInPieces++
	src, err := e.resolve(b, in.Copies[0].Src)
	if err != nil {
		return err
	}
	dst, err := e.resolve(b, out.Copies[0].Dst)
	if err != nil {
		return err
	}
	stage, err := e.resolve(b, net.Dst)
	if err != nil {
		return err
	}
	if !src.dev || !dst.dev || stage.dev {
		return fmt.Errorf("%w: staged AllReduce in pieces from %s to %s", sdk.ErrInternalError, in.Copies[0].Src, out.Copies[0].Dst)
	}
	if stepRan != nil {
		for k := i; k <= i+2; k++ {
			stepRan(p, e.owner.Calls(), k) // all three run, in pieces, from here on
		}
	}
	if err := ch.await(i); err != nil {
		return err
	}
	endCopyIn := region("staged: copy in")
	pieces, err := e.copyInPieces(src.ptr, stage.host, net.Count, net.DType)
	endCopyIn()
	if err != nil {
		return err
	}
	if err := ch.record(i); err != nil {
		return err
	}
	st := &stager{ready: make([]chan struct{}, len(pieces)), pieces: pieces, done: make(chan [2]int, len(pieces)+1)}
	for j := range st.ready {
		st.ready[j] = make(chan struct{})
	}
	cm := e.inter
	cm.Begin(sdk.AllReduce, net.Count, net.DType, net.Op, 0)
	errc := make(chan error, 1)
	go func() {
		defer region("staged: host AllReduce")()
		errc <- cm.Engine().AllReduceStaged(stage.host, net.Count, net.DType, net.Op, st)
	}()
	endAwait := region("staged: await copy in")
	st.fail = e.awaitPieces(pieces)
	endAwait()
	for _, r := range st.ready {
		close(r)
	}
	var netErr, copyErr error
	for running := true; running; {
		select {
		case d := <-st.done:
			copyErr = e.copyBack(copyErr, dst.ptr, stage.host, d)
		case netErr = <-errc:
			running = false
		}
	}
	for len(st.done) > 0 {
		copyErr = e.copyBack(copyErr, dst.ptr, stage.host, <-st.done)
	}
	if netErr = cm.OpError("AllReduce", netErr); netErr != nil {
		if !e.layout.IsHomogeneous() {
			netErr = fmt.Errorf("in %s: %w", e.interWhat(), netErr)
		}
		return netErr
	}
	if st.fail != nil {
		return st.fail
	}
	if copyErr != nil {
		return copyErr
	}
	return ch.record(i + 2)
}

// piece is one part of the copy to the host and its event.
type piece struct {
	lo, hi int
	ev     loader.Event
}

// copyInParts is how many pieces the copy to the host is cut into. Each
// costs a copy and an event record, and a wait, on top of the first: on
// 2 x H200 over loopback (4 sockets, three interleaved rounds, split 1,1)
// 2 pieces took 469-527 us at 1 MiB and 251-266 at 256 KiB, one piece per
// socket (4) 483-543 and 268-293, the three steps unfused 554-623 and
// 231-270.
const copyInParts = 2

// copyInPieces enqueues the copy of count elements from the device at src
// to stage in copyInParts pieces cut at element boundaries, each followed
// by its event; a stripe of the engine waits for every piece under it
// (stager.Ready).
func (e *Executor) copyInPieces(src uintptr, stage []byte, count int, dt sdk.DataType) ([]piece, error) {
	pl, size := e.dev, dt.Size()
	k := min(copyInParts, count)
	for len(e.pieceEvents) < k {
		ev, err := e.plugin.EventCreate(e.device)
		if err != nil {
			return nil, fmt.Errorf("creating an event on %s device %d: %w", e.plugin.Name, e.device, err)
		}
		e.pieceEvents = append(e.pieceEvents, ev)
	}
	pieces := make([]piece, k)
	for j := range pieces {
		first, n := count/k*j+min(j, count%k), count/k
		if j < count%k {
			n++
		}
		pc := piece{lo: first * size, hi: (first + n) * size, ev: e.pieceEvents[j]}
		if err := pl.Memcpy(hostAddr(stage[pc.lo:pc.hi]), src+uintptr(pc.lo), pc.hi-pc.lo, loader.DeviceToHost, e.d2h); err != nil {
			return nil, fmt.Errorf("copying piece %d of the staged AllReduce to the host: %w", j, err)
		}
		if err := pl.EventRecord(pc.ev, e.d2h); err != nil {
			return nil, err
		}
		pieces[j] = pc
	}
	return pieces, nil
}

// awaitPieces waits for each piece's copy in order (the caller's thread
// has the device bound; the engine's goroutines need not) and returns the
// first failure.
func (e *Executor) awaitPieces(pieces []piece) error {
	for j := range pieces {
		if err := e.dev.EventSynchronize(pieces[j].ev); err != nil {
			return fmt.Errorf("waiting for piece %d of the staged AllReduce's copy to the host: %w", j, err)
		}
	}
	return nil
}

// copyBack enqueues the copy of stage[d[0]:d[1]] back to the device at
// dst on the h2d stream, unless an earlier one failed (prev).
func (e *Executor) copyBack(prev error, dst uintptr, stage []byte, d [2]int) error {
	if prev != nil {
		return prev
	}
	defer region("staged: copy back")()
	if err := e.dev.Memcpy(dst+uintptr(d[0]), hostAddr(stage[d[0]:d[1]]), d[1]-d[0], loader.HostToDevice, e.h2d); err != nil {
		return fmt.Errorf("copying bytes %d..%d of the staged AllReduce back to the device: %w", d[0], d[1], err)
	}
	return nil
}

// stager is the staged AllReduce's host.Stager: Ready waits for the
// pieces a range needs, Done queues a reduced range for copyBack.
type stager struct {
	pieces []piece
	ready  []chan struct{} // closed once the piece's copy is done (or failed)
	fail   error           // set before ready closes: the copy in failed
	done   chan [2]int
}

func (s *stager) Ready(lo, hi int) error {
	for j, pc := range s.pieces {
		if pc.lo < hi && lo < pc.hi {
			<-s.ready[j]
		}
	}
	return s.fail
}

func (s *stager) Done(lo, hi int) { s.done <- [2]int{lo, hi} }
