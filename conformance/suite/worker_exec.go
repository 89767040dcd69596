package suite

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"unsafe"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Every device buffer of a case has guard bytes before and after its data;
// they must come back unchanged. Receive buffers start filled with fillByte
// (in every floating type a value that is not an integer, so an element
// the plugin forgot to write never equals a reference value).
const (
	guard     = 256
	guardByte = 0x5a
	fillByte  = 0x3c
)

// devBuf is a device allocation with guards: data lives at base+lead,
// lead = guard bytes plus the case's shift (Spec.Shift), and guard bytes
// follow it.
type devBuf struct {
	base uintptr
	n    int // data bytes
	lead int
}

func (b devBuf) ptr() uintptr { return b.base + uintptr(b.lead) }

// checked is a buffer to verify after a case ran: its expected content and,
// where exactness is impossible, a per-element tolerance.
type checked struct {
	name string
	buf  devBuf
	want []byte
	dt   sdk.DataType
	tol  func(elem int) float64 // nil: exact
}

// job is a prepared operation: buffers filled, an issue function that
// enqueues it, and the buffers to verify.
type job struct {
	issue  func(s loader.Stream) error
	checks []checked
}

// scratch owns what a case allocated; free releases it all. shift moves
// the data of every buffer it allocates that many bytes off the 256-byte
// alignment of the allocation.
type scratch struct {
	w      *worker
	bufs   []devBuf
	pinned []uintptr
	shift  int
}

func (sc *scratch) free() {
	for _, b := range sc.bufs {
		_ = sc.w.p.DeviceFree(b.base)
	}
	for _, h := range sc.pinned {
		_ = sc.w.p.HostFree(h)
	}
	sc.bufs, sc.pinned = nil, nil
}

// hostAlloc allocates n bytes of the plugin's pinned host memory, freed
// with the case, and returns it as a pointer and a slice.
func (sc *scratch) hostAlloc(n int) (uintptr, []byte, error) {
	h, err := sc.w.p.HostMalloc(n)
	if err != nil {
		return 0, nil, err
	}
	sc.pinned = append(sc.pinned, h)
	return h, loader.HostSlice(h, n), nil
}

// alloc makes a guarded device buffer holding content.
func (sc *scratch) alloc(content []byte) (devBuf, error) {
	n, lead := len(content), guard+sc.shift
	base, err := sc.w.p.DeviceMalloc(sc.w.dev, lead+n+guard)
	if err != nil {
		return devBuf{}, err
	}
	b := devBuf{base: base, n: n, lead: lead}
	sc.bufs = append(sc.bufs, b)
	img := make([]byte, lead+n+guard)
	fillBytes(img[:lead], guardByte)
	copy(img[lead:], content)
	fillBytes(img[lead+n:], guardByte)
	return b, sc.w.p.CopyToDevice(base, img)
}

func fillBytes(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func filled(n int, v byte) []byte {
	b := make([]byte, n)
	fillBytes(b, v)
	return b
}

// verify reads a checked buffer back and compares it with its reference.
func (w *worker) verify(c checked) error {
	lead := c.buf.lead
	got := make([]byte, lead+c.buf.n+guard)
	if err := w.p.CopyFromDevice(got, c.buf.base); err != nil {
		return err
	}
	for i := 0; i < lead; i++ {
		if got[i] != guardByte {
			return wrongf("%s: the plugin wrote %d bytes before the start of the buffer", c.name, lead-i)
		}
	}
	for i := lead + c.buf.n; i < len(got); i++ {
		if got[i] != guardByte {
			return wrongf("%s: the plugin wrote past the end of the buffer (byte %d after it)", c.name, i-lead-c.buf.n)
		}
	}
	return compareElems(c.name, c.dt, got[lead:lead+c.buf.n], c.want, c.tol)
}

// compareElems compares element by element: integers bitwise, floating
// point by value (reference.Compare's rules), within tol where given.
func compareElems(name string, dt sdk.DataType, got, want []byte, tol func(int) float64) error {
	// got may be pinned memory that stray work of a broken plugin still
	// writes: compare a snapshot, so the message shows what was compared.
	got = append([]byte(nil), got...)
	if bytes.Equal(got, want) {
		return nil
	}
	sz := dt.Size()
	n := len(want) / sz
	wrong, first := 0, -1
	for i := 0; i < n; i++ {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if reference.Compare(dt, g, w) == 0 {
			continue
		}
		if tol != nil {
			if t := tol(i); t > 0 {
				gv, wv := reference.Decode(dt, g), reference.Decode(dt, w)
				if !math.IsNaN(gv) && math.Abs(gv-wv) <= t {
					continue
				}
			}
		}
		wrong++
		if first < 0 {
			first = i
		}
	}
	if wrong == 0 {
		return nil
	}
	o := first * sz
	return wrongf("%s: %d of %d %s elements differ; first at element %d: got %s, want %s", name, wrong, n, dt, first,
		reference.Format(dt, got[o:o+sz]), reference.Format(dt, want[o:o+sz]))
}

// unitRoundoff is u of a floating type: half the spacing of its numbers at 1.
func unitRoundoff(dt sdk.DataType) float64 {
	switch dt {
	case sdk.Float16:
		return 0x1p-11
	case sdk.Bfloat16:
		return 0x1p-8
	case sdk.Float32:
		return 0x1p-24
	}
	return 0x1p-53
}

// avgTolerance is the one inexact case (README: Tolerances). An average of
// a floating type over a rank count that is not a power of two may be
// computed, as NCCL does, by pre-multiplying every input with 1/n, which
// rounds: allow 2*n*u*max|input|. elemOf maps a buffer element to the
// reduced element it holds (-1: none, exact).
func avgTolerance(c reference.Case, elemOf func(int) int) func(int) float64 {
	n := c.NRanks
	if c.Op != sdk.Avg || !c.Type.IsFloat() || n&(n-1) == 0 {
		return nil
	}
	u := unitRoundoff(c.Type)
	return func(i int) float64 {
		e := elemOf(i)
		if e < 0 {
			return 0
		}
		m := 0.0
		for r := 0; r < n; r++ {
			m = max(m, math.Abs(float64(c.Input(r, e))))
		}
		return 2 * float64(n) * u * m
	}
}

// ---- Collectives ----------------------------------------------------------------

// prepColl allocates and fills the buffers of one collective on comm and
// returns how to issue and check it.
func (w *worker) prepColl(sc *scratch, comm *loader.Comm, s Spec) (*job, error) {
	n, rank := comm.Count(), comm.Rank()
	c := reference.Case{Coll: s.Coll, Type: s.Type, Op: s.Op, NRanks: n, Root: s.Root, Count: s.Count, Seed: s.Seed}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	dt, sz, count := s.Type, s.Type.Size(), s.Count
	input := make([]byte, c.SendCount()*sz)
	reference.FillInput(c, rank, input)
	j := &job{}
	var send, recv uintptr
	identity := func(i int) int { return i }
	if !s.InPlace {
		init := filled(c.RecvCount()*sz, fillByte)
		want := append([]byte(nil), init...)
		reference.ExpectedInto(c, rank, want)
		sb, err := sc.alloc(input)
		if err != nil {
			return nil, err
		}
		rb, err := sc.alloc(init)
		if err != nil {
			return nil, err
		}
		send, recv = sb.ptr(), rb.ptr()
		elemOf := identity
		if s.Coll == sdk.ReduceScatter {
			elemOf = func(i int) int { return rank*count + i }
		}
		j.checks = []checked{
			{name: "recv buffer", buf: rb, want: want, dt: dt, tol: avgTolerance(c, elemOf)},
			{name: "send buffer (must stay unchanged)", buf: sb, want: input, dt: dt},
		}
	} else {
		var init, want []byte
		var sendOff, recvOff int
		elemOf := identity
		switch s.Coll.Info().InPlace {
		case sdk.InPlaceSame:
			init = input
			want = append([]byte(nil), init...)
			reference.ExpectedInto(c, rank, want)
		case sdk.InPlaceSendInRecv: // sendbuff = recvbuff + rank*count
			init = filled(c.RecvCount()*sz, fillByte)
			copy(init[rank*count*sz:], input)
			want = append([]byte(nil), init...)
			reference.ExpectedInto(c, rank, want)
			sendOff = rank * count * sz
		case sdk.InPlaceRecvInSend: // recvbuff = sendbuff + rank*count
			init = input
			want = append([]byte(nil), init...)
			reference.ExpectedInto(c, rank, want[rank*count*sz:(rank+1)*count*sz])
			recvOff = rank * count * sz
			elemOf = func(i int) int {
				if i >= rank*count && i < (rank+1)*count {
					return i
				}
				return -1
			}
		default:
			return nil, fmt.Errorf("%s has no in-place form", s.Coll)
		}
		b, err := sc.alloc(init)
		if err != nil {
			return nil, err
		}
		send, recv = b.ptr()+uintptr(sendOff), b.ptr()+uintptr(recvOff)
		j.checks = []checked{{name: "in-place buffer", buf: b, want: want, dt: dt, tol: avgTolerance(c, elemOf)}}
	}
	call := c.Call(rank)
	j.issue = func(st loader.Stream) error { return sdk.Dispatch(comm, call, send, recv, st) }
	return j, nil
}

// prepRing prepares the ring (KindP2PRing), inside two nested groups for KindGroupNested.
func (w *worker) prepRing(sc *scratch, comm *loader.Comm, s Spec) (*job, error) {
	n, rank, dt, count := comm.Count(), comm.Rank(), s.Type, s.Count
	j := &job{}
	c := reference.Case{Coll: sdk.SendRecv, Type: dt, NRanks: n, Count: count, Seed: s.Seed}
	sb, rb, err := w.sendRecvBufs(sc, j, c, rank)
	if err != nil {
		return nil, err
	}
	depth := 1
	if s.Kind == KindGroupNested {
		depth = 2
	}
	j.issue = func(st loader.Stream) error {
		return grouped(comm.Plugin(), depth, func() error {
			if err := comm.Send(sb, count, dt, (rank+1)%n, st); err != nil {
				return err
			}
			return comm.Recv(rb, count, dt, (rank-1+n)%n, st)
		})
	}
	return j, nil
}

// prepExchange prepares a send and a recv with every other rank in one group.
func (w *worker) prepExchange(sc *scratch, comm *loader.Comm, s Spec) (*job, error) {
	n, rank, dt, count := comm.Count(), comm.Rank(), s.Type, s.Count
	sz := dt.Size()
	j := &job{}
	c := reference.Case{Coll: sdk.AlltoAll, Type: dt, NRanks: n, Count: count, Seed: s.Seed}
	input := make([]byte, c.SendCount()*sz)
	reference.FillInput(c, rank, input)
	init := filled(c.RecvCount()*sz, fillByte)
	full := reference.Expected(c, rank)
	want := append([]byte(nil), init...)
	for p := 0; p < n; p++ {
		if p != rank {
			copy(want[p*count*sz:(p+1)*count*sz], full[p*count*sz:])
		}
	}
	sb, err := sc.alloc(input)
	if err != nil {
		return nil, err
	}
	rb, err := sc.alloc(init)
	if err != nil {
		return nil, err
	}
	j.checks = []checked{{name: "recv buffer", buf: rb, want: want, dt: dt},
		{name: "send buffer (must stay unchanged)", buf: sb, want: input, dt: dt}}
	j.issue = func(st loader.Stream) error {
		return grouped(comm.Plugin(), 1, func() error {
			for p := 0; p < n; p++ {
				if p == rank {
					continue
				}
				off := uintptr(p * count * sz)
				if err := comm.Send(sb.ptr()+off, count, dt, p, st); err != nil {
					return err
				}
				if err := comm.Recv(rb.ptr()+off, count, dt, p, st); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return j, nil
}

// prepSelf prepares a send to this rank and its recv, in one group.
func (w *worker) prepSelf(sc *scratch, comm *loader.Comm, s Spec) (*job, error) {
	n, rank, dt, count := comm.Count(), comm.Rank(), s.Type, s.Count
	j := &job{}
	// A broadcast case rooted at this rank has the data: recv = own input.
	c := reference.Case{Coll: sdk.Broadcast, Type: dt, NRanks: n, Root: rank, Count: count, Seed: s.Seed}
	sb, rb, err := w.sendRecvBufs(sc, j, c, rank)
	if err != nil {
		return nil, err
	}
	j.issue = func(st loader.Stream) error {
		return grouped(comm.Plugin(), 1, func() error {
			if err := comm.Send(sb, count, dt, rank, st); err != nil {
				return err
			}
			return comm.Recv(rb, count, dt, rank, st)
		})
	}
	return j, nil
}

// prepPair prepares a send from rank 0 to rank n-1 outside any group.
func (w *worker) prepPair(sc *scratch, comm *loader.Comm, s Spec) (*job, error) {
	n, rank, dt, count := comm.Count(), comm.Rank(), s.Type, s.Count
	sz := dt.Size()
	j := &job{}
	// Rank 0 sends its broadcast input to rank n-1, outside any group.
	c := reference.Case{Coll: sdk.Broadcast, Type: dt, NRanks: n, Root: 0, Count: count, Seed: s.Seed}
	switch rank {
	case 0:
		input := make([]byte, count*sz)
		reference.FillInput(c, 0, input)
		sb, err := sc.alloc(input)
		if err != nil {
			return nil, err
		}
		j.checks = []checked{{name: "send buffer (must stay unchanged)", buf: sb, want: input, dt: dt}}
		j.issue = func(st loader.Stream) error { return comm.Send(sb.ptr(), count, dt, n-1, st) }
	case n - 1:
		init := filled(count*sz, fillByte)
		want := append([]byte(nil), init...)
		reference.ExpectedInto(c, rank, want)
		rb, err := sc.alloc(init)
		if err != nil {
			return nil, err
		}
		j.checks = []checked{{name: "recv buffer", buf: rb, want: want, dt: dt}}
		j.issue = func(st loader.Stream) error { return comm.Recv(rb.ptr(), count, dt, 0, st) }
	default:
		j.issue = func(loader.Stream) error { return nil }
	}
	return j, nil
}

// sendRecvBufs allocates a send buffer with rank's input of c and a receive
// buffer expecting c's result, and registers both checks.
func (w *worker) sendRecvBufs(sc *scratch, j *job, c reference.Case, rank int) (uintptr, uintptr, error) {
	sz := c.Type.Size()
	input := make([]byte, c.SendCount()*sz)
	reference.FillInput(c, rank, input)
	init := filled(c.RecvCount()*sz, fillByte)
	want := append([]byte(nil), init...)
	reference.ExpectedInto(c, rank, want)
	sb, err := sc.alloc(input)
	if err != nil {
		return 0, 0, err
	}
	rb, err := sc.alloc(init)
	if err != nil {
		return 0, 0, err
	}
	j.checks = append(j.checks, checked{name: "recv buffer", buf: rb, want: want, dt: c.Type},
		checked{name: "send buffer (must stay unchanged)", buf: sb, want: input, dt: c.Type})
	return sb.ptr(), rb.ptr(), nil
}

// grouped runs fn between depth nested groupStart and groupEnd calls; the
// groups are closed even when fn fails.
func grouped(p *loader.Plugin, depth int, fn func() error) error {
	opened := 0
	var err error
	for ; opened < depth; opened++ {
		if err = p.GroupStart(); err != nil {
			break
		}
	}
	if err == nil {
		err = fn()
	}
	for ; opened > 0; opened-- {
		if e := p.GroupEnd(); err == nil {
			err = e
		}
	}
	return err
}

// runJobs issues the jobs (inside one group when asked), waits for the
// stream and verifies every buffer.
func (w *worker) runJobs(jobs []*job, inGroup bool) error {
	issue := func() error {
		for _, j := range jobs {
			if err := j.issue(w.stream); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if inGroup {
		err = grouped(w.p, 1, issue)
	} else {
		err = issue()
	}
	if err != nil {
		return err
	}
	if err := w.p.StreamSynchronize(w.stream); err != nil {
		return err
	}
	for _, j := range jobs {
		for _, c := range j.checks {
			if err := w.verify(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// streamOrdered runs an allReduce sum whose input arrives, and whose
// result leaves, by copies on the caller's stream, with one synchronise at
// the end. A plugin that runs the collective on another stream (the NULL
// stream, say) reads its input before the copy lands or has its result
// copied out before it is written: on a device, and on the emulators,
// whose streams run asynchronously. The device buffers hold fillByte
// until the copy in lands, so stale input cannot pass for the right one.
func (w *worker) streamOrdered(s Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	p, rank := w.p, w.comm.Rank()
	c := reference.Case{Coll: sdk.AllReduce, Type: s.Type, Op: sdk.Sum, NRanks: w.comm.Count(), Count: s.Count, Seed: s.Seed}
	n := s.Count * s.Type.Size()
	sc := &scratch{w: w}
	defer sc.free()
	sb, err := sc.alloc(filled(n, fillByte))
	if err != nil {
		return err
	}
	rb, err := sc.alloc(filled(n, fillByte))
	if err != nil {
		return err
	}
	hin, in, err := sc.hostAlloc(n)
	if err != nil {
		return err
	}
	hout, out, err := sc.hostAlloc(n)
	if err != nil {
		return err
	}
	reference.FillInput(c, rank, in)
	fillBytes(out, 0)
	want := filled(n, fillByte)
	reference.ExpectedInto(c, rank, want)
	if err := inOrder(
		func() error { return p.Memcpy(sb.ptr(), hin, n, loader.HostToDevice, w.stream) },
		func() error { return w.comm.AllReduce(sb.ptr(), rb.ptr(), s.Count, s.Type, sdk.Sum, w.stream) },
		func() error { return p.Memcpy(hout, rb.ptr(), n, loader.DeviceToHost, w.stream) },
		func() error { return p.StreamSynchronize(w.stream) },
	); err != nil {
		return err
	}
	return compareElems("result copied out on the stream after the allReduce", s.Type, out, want, nil)
}

// allReduceCheck runs one allreduce sum on comm and verifies it.
func (w *worker) allReduceCheck(comm *loader.Comm, s Spec, seed uint64) error {
	return w.runColl(comm, Spec{Coll: sdk.AllReduce, Type: s.Type, Op: sdk.Sum, Count: s.Count, Seed: seed})
}

// runColl prepares, issues and verifies one collective on comm.
func (w *worker) runColl(comm *loader.Comm, s Spec) error {
	sc := &scratch{w: w, shift: s.Shift}
	defer sc.free()
	j, err := w.prepColl(sc, comm, s)
	if err != nil {
		return err
	}
	return w.runJobs([]*job{j}, false)
}

// ---- Collectives and groups as cases --------------------------------------------

// collCase runs one collective (KindColl).
func (w *worker) collCase(s Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	return w.runColl(w.comm, s)
}

// groupCollectives runs three collectives of different types in one group.
func (w *worker) groupCollectives(s Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	sc := &scratch{w: w}
	defer sc.free()
	n := w.comm.Count()
	var jobs []*job
	for i, sub := range []Spec{
		{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, Count: s.Count},
		{Coll: sdk.AllReduce, Type: sdk.Int32, Op: sdk.Max, Count: s.Count},
		{Coll: sdk.Broadcast, Type: sdk.Float64, Root: n - 1, Count: s.Count},
	} {
		sub.Seed = s.Seed + uint64(i)
		j, err := w.prepColl(sc, w.comm, sub)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	return w.runJobs(jobs, true)
}

// p2pCase adapts a point-to-point preparation to the registry.
func p2pCase(prep func(w *worker, sc *scratch, comm *loader.Comm, s Spec) (*job, error)) caseFunc {
	return func(w *worker, s Spec) error {
		if w.comm == nil {
			return errors.New("no communicator")
		}
		sc := &scratch{w: w}
		defer sc.free()
		j, err := prep(w, sc, w.comm, s)
		if err != nil {
			return err
		}
		return w.runJobs([]*job{j}, false)
	}
}

// ---- Communicators --------------------------------------------------------------------

// commUniqueID: two unique ids differ.
func (w *worker) commUniqueID(Spec) error {
	a, err := w.p.UniqueID()
	if err != nil {
		return err
	}
	b, err := w.p.UniqueID()
	if err != nil {
		return err
	}
	if bytes.Equal(a, b) {
		return wrongf("two getUniqueId calls returned the same %d bytes: two communicators would meet", len(a))
	}
	return nil
}

// commErrorString: every result code has a description.
func (w *worker) commErrorString(Spec) error {
	for r := sdk.UnhandledDeviceError; r < sdk.NumResults; r++ {
		if w.p.ErrorString(r) == "" {
			return wrongf("getErrorString(%d) is empty", int(r))
		}
	}
	return nil
}

// commSingle: a one-rank communicator works.
func (w *worker) commSingle(s Spec) error {
	c, err := w.p.CommInitRank(w.dev, 1, s.IDs[0], 0)
	if err != nil {
		return err
	}
	err = w.allReduceCheck(c, s, s.Seed)
	return errors.Join(err, c.Destroy())
}

// commLoop: communicators made and destroyed in a loop.
func (w *worker) commLoop(s Spec) error {
	for i := 0; i < s.Iters; i++ {
		c, err := w.p.CommInitRank(w.dev, w.nranks, s.IDs[i], w.rank)
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		err = w.allReduceCheck(c, s, s.Seed+uint64(i))
		if err = errors.Join(err, c.Destroy()); err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
	}
	return nil
}

// commMulti: several communicators at once, their collectives interleaved.
func (w *worker) commMulti(s Spec) error {
	var comms []*loader.Comm
	defer func() {
		for _, c := range comms {
			_ = c.Destroy()
		}
	}()
	for i := 0; i < s.Iters; i++ {
		c, err := w.p.CommInitRank(w.dev, w.nranks, s.IDs[i], w.rank)
		if err != nil {
			return fmt.Errorf("communicator %d: %w", i+1, err)
		}
		comms = append(comms, c)
	}
	sc := &scratch{w: w}
	defer sc.free()
	var jobs []*job
	for i, c := range comms {
		j, err := w.prepColl(sc, c, Spec{Coll: sdk.AllReduce, Type: s.Type, Op: sdk.Sum, Count: s.Count, Seed: s.Seed + uint64(i)})
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	if err := w.runJobs(jobs, false); err != nil {
		return err
	}
	for len(comms) > 0 {
		if err := comms[0].Destroy(); err != nil {
			return err
		}
		comms = comms[1:]
	}
	return nil
}

// commAsyncError: a healthy communicator reports no error.
func (w *worker) commAsyncError(Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	return w.comm.AsyncError()
}

// commAbort: aborting a second communicator leaves the first working.
func (w *worker) commAbort(s Spec) error {
	c, err := w.p.CommInitRank(w.dev, w.nranks, s.IDs[0], w.rank)
	if err != nil {
		return err
	}
	if err := w.allReduceCheck(c, s, s.Seed); err != nil {
		_ = c.Destroy()
		return err
	}
	if err := c.Abort(); err != nil {
		_ = c.Destroy()
		return err
	}
	if w.comm != nil {
		if err := w.allReduceCheck(w.comm, s, s.Seed+1); err != nil {
			return fmt.Errorf("the first communicator after aborting the second: %w", err)
		}
	}
	return nil
}

// commDestroy destroys the rank's communicator after all its work.
func (w *worker) commDestroy(Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	err := w.comm.Destroy()
	w.comm = nil
	return err
}

// ---- Device runtime --------------------------------------------------------------------

var pciBusID = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// pattern is n bytes of reference data (uint8 movement values).
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	reference.FillInput(reference.Case{Coll: sdk.Broadcast, Type: sdk.Uint8, NRanks: 1, Count: n, Seed: seed}, 0, b)
	return b
}

// devCtx is what a device-runtime case works with: the plugin, the
// worker's device and stream, and a scratch that frees the case's
// allocations.
type devCtx struct {
	w    *worker
	p    *loader.Plugin
	dev  int
	ndev int
	sc   *scratch
}

// deviceCase adapts a device-runtime case to the registry.
func deviceCase(fn func(*devCtx, Spec) error) caseFunc {
	return func(w *worker, s Spec) error {
		ndev, err := w.p.DeviceCount()
		if err != nil {
			return err
		}
		dc := &devCtx{w: w, p: w.p, dev: w.dev, ndev: ndev, sc: &scratch{w: w}}
		defer dc.sc.free()
		return fn(dc, s)
	}
}

// raw allocates n device bytes without guards, freed with the case.
func (dc *devCtx) raw(n int) (uintptr, error) {
	ptr, err := dc.p.DeviceMalloc(dc.dev, n)
	if err == nil {
		dc.sc.bufs = append(dc.sc.bufs, devBuf{base: ptr})
	}
	return ptr, err
}

// readBack copies n bytes at ptr to the host.
func (dc *devCtx) readBack(ptr uintptr, n int) ([]byte, error) {
	b := make([]byte, n)
	return b, dc.p.CopyFromDevice(b, ptr)
}

// pinned allocates pinned host memory freed with the case.
func (dc *devCtx) pinned(n int) (uintptr, []byte, error) { return dc.sc.hostAlloc(n) }

// bigBytes is the large transfer of the device cases: 8 MiB and an odd tail.
const bigBytes = 8<<20 + 3

func (dc *devCtx) count(s Spec) error {
	if dc.ndev < 1 {
		return wrongf("getDeviceCount reports %d devices", dc.ndev)
	}
	return nil
}

func (dc *devCtx) info(s Spec) error {
	seen := map[string]int{}
	for d := 0; d < min(dc.ndev, 64); d++ {
		info, err := dc.p.DeviceInfo(d)
		if err != nil {
			return err
		}
		if s.Kind == KindDeviceInfo {
			if info.Name == "" {
				return wrongf("device %d has no name", d)
			}
			continue
		}
		if !pciBusID.MatchString(info.PCIBusID) {
			return wrongf("device %d: PCI bus id %q is not dddd:bb:dd.f in lower case", d, info.PCIBusID)
		}
		if prev, dup := seen[info.PCIBusID]; dup {
			return wrongf("devices %d and %d have the same PCI bus id %s", prev, d, info.PCIBusID)
		}
		seen[info.PCIBusID] = d
	}
	return nil
}

func (dc *devCtx) linkSelf(s Spec) error {
	l, err := dc.p.Link(dc.dev, dc.dev)
	if err != nil {
		return err
	}
	if l.Type != loader.LinkSelf {
		return wrongf("getLinkInfo(%d, %d) says %s, want self", dc.dev, dc.dev, l.Type)
	}
	return nil
}

func (dc *devCtx) malloc(s Spec) error {
	seen := map[uintptr]bool{}
	for _, n := range []int{1, 4099, bigBytes} {
		ptr, err := dc.raw(n)
		if err != nil {
			return err
		}
		if ptr == 0 || seen[ptr] {
			return wrongf("deviceMalloc(%d) returned %#x (NULL or already in use)", n, ptr)
		}
		seen[ptr] = true
	}
	for _, b := range dc.sc.bufs {
		if err := dc.p.DeviceFree(b.base); err != nil {
			return err
		}
	}
	dc.sc.bufs = nil
	return nil
}

func (dc *devCtx) hostMalloc(s Spec) error {
	h, mem, err := dc.pinned(4099)
	if err != nil {
		return err
	}
	if h == 0 {
		return wrongf("hostMalloc returned NULL")
	}
	want := pattern(4099, s.Seed)
	copy(mem, want)
	if !bytes.Equal(mem, want) {
		return wrongf("pinned host memory does not keep what the host wrote")
	}
	return nil
}

func (dc *devCtx) memcpySync(s Spec) error {
	for _, n := range []int{1, 4099, bigBytes} {
		ptr, err := dc.raw(n + 16)
		if err != nil {
			return err
		}
		if err := dc.p.CopyToDevice(ptr, make([]byte, n+16)); err != nil {
			return err
		}
		data := pattern(n, s.Seed+uint64(n))
		if err := dc.p.CopyToDevice(ptr+3, data); err != nil {
			return err
		}
		got, err := dc.readBack(ptr, n+16)
		if err != nil {
			return err
		}
		want := make([]byte, n+16)
		copy(want[3:], data)
		if err := compareElems(fmt.Sprintf("%d bytes copied to device offset 3 and back", n), sdk.Uint8, got, want, nil); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) memcpyD2D(s Spec) error {
	const n = 1<<20 + 5
	a, err := dc.raw(n)
	if err != nil {
		return err
	}
	b, err := dc.raw(n)
	if err != nil {
		return err
	}
	data := pattern(n, s.Seed)
	if err := dc.p.CopyToDevice(a, data); err != nil {
		return err
	}
	if err := dc.p.CopyToDevice(b, make([]byte, n)); err != nil {
		return err
	}
	if err := dc.p.Memcpy(b+1, a+3, n-3, loader.DeviceToDevice, 0); err != nil {
		return err
	}
	got, err := dc.readBack(b, n)
	if err != nil {
		return err
	}
	want := make([]byte, n)
	copy(want[1:], data[3:])
	if err := compareElems("device-to-device copy between allocations", sdk.Uint8, got, want, nil); err != nil {
		return err
	}
	if err := dc.p.Memcpy(a+n/2, a+7, 4099, loader.DeviceToDevice, 0); err != nil {
		return err
	}
	got, err = dc.readBack(a, n)
	if err != nil {
		return err
	}
	copy(data[n/2:], data[7:7+4099])
	return compareElems("device-to-device copy within an allocation", sdk.Uint8, got, data, nil)
}

// roundTrip is what a copy case moves: pattern data in pinned memory
// (src), two device buffers (a, b) and a zeroed pinned destination (dst,
// seen by the host as out).
type roundTrip struct {
	src, a, b, dst uintptr
	data, out      []byte
}

func (dc *devCtx) roundTrip(n int, seed uint64) (*roundTrip, error) {
	var rt roundTrip
	var in []byte
	var err error
	if rt.src, in, err = dc.pinned(n); err != nil {
		return nil, err
	}
	if rt.dst, rt.out, err = dc.pinned(n); err != nil {
		return nil, err
	}
	if rt.a, err = dc.raw(n); err != nil {
		return nil, err
	}
	if rt.b, err = dc.raw(n); err != nil {
		return nil, err
	}
	rt.data = pattern(n, seed)
	copy(in, rt.data)
	fillBytes(rt.out, 0)
	return &rt, nil
}

// inOrder makes the calls one after the other until one fails.
func inOrder(calls ...func() error) error {
	for _, call := range calls {
		if err := call(); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) memcpyAsync(s Spec) error {
	const n = 1<<20 + 7
	rt, err := dc.roundTrip(n, s.Seed)
	if err != nil {
		return err
	}
	st := dc.w.stream
	if err := inOrder(
		func() error { return dc.p.Memcpy(rt.a, rt.src, n, loader.HostToDevice, st) },
		func() error { return dc.p.Memcpy(rt.b, rt.a, n, loader.DeviceToDevice, st) },
		func() error { return dc.p.Memcpy(rt.dst, rt.b, n, loader.DeviceToHost, st) },
		func() error { return dc.p.StreamSynchronize(st) },
	); err != nil {
		return err
	}
	return compareElems("host to device to device to host on a stream", sdk.Uint8, rt.out, rt.data, nil)
}

func (dc *devCtx) memset(s Spec) error {
	const n = 4099
	ptr, err := dc.raw(n + 16)
	if err != nil {
		return err
	}
	if err := dc.p.CopyToDevice(ptr, make([]byte, n+16)); err != nil {
		return err
	}
	var st loader.Stream
	if s.Kind == KindDeviceMemsetAsync {
		st = dc.w.stream
	}
	if err := dc.p.Memset(ptr+5, 0xa7, n, st); err != nil {
		return err
	}
	if st != 0 {
		if err := dc.p.StreamSynchronize(st); err != nil {
			return err
		}
	}
	got, err := dc.readBack(ptr, n+16)
	if err != nil {
		return err
	}
	want := make([]byte, n+16)
	fillBytes(want[5:5+n], 0xa7)
	return compareElems("memSet of 4099 bytes at offset 5", sdk.Uint8, got, want, nil)
}

func (dc *devCtx) streams(s Spec) error {
	var streams []loader.Stream
	for i := 0; i < 16; i++ {
		st, err := dc.p.StreamCreate(dc.dev)
		if err != nil {
			return err
		}
		streams = append(streams, st)
	}
	for _, st := range streams {
		if err := dc.p.StreamSynchronize(st); err != nil {
			return err
		}
	}
	for _, st := range streams {
		if err := dc.p.StreamDestroy(st); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) streamQuery(s Spec) error {
	if err := dc.p.StreamSynchronize(dc.w.stream); err != nil {
		return err
	}
	done, err := dc.p.StreamQuery(dc.w.stream)
	if err != nil {
		return err
	}
	if !done {
		return wrongf("streamQuery says an idle, synchronized stream is still busy")
	}
	return nil
}

func (dc *devCtx) event(s Spec) error {
	const n = 8 << 20
	h, hm, err := dc.pinned(n)
	if err != nil {
		return err
	}
	a, err := dc.raw(n)
	if err != nil {
		return err
	}
	data := pattern(4099, s.Seed)
	copy(hm, data)
	e0, err := dc.p.EventCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.EventDestroy(e0) }()
	e1, err := dc.p.EventCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.EventDestroy(e1) }()
	if err := inOrder(
		func() error { return dc.p.EventRecord(e0, dc.w.stream) },
		func() error { return dc.p.Memcpy(a, h, n, loader.HostToDevice, dc.w.stream) },
		func() error { return dc.p.EventRecord(e1, dc.w.stream) },
		func() error { return dc.p.EventSynchronize(e1) },
	); err != nil {
		return err
	}
	switch s.Kind {
	case KindDeviceEvent:
		got, err := dc.readBack(a, 4099)
		if err != nil {
			return err
		}
		return compareElems("copy before the synchronized event", sdk.Uint8, got, data, nil)
	case KindDeviceEventQuery:
		done, err := dc.p.EventQuery(e1)
		if err != nil {
			return err
		}
		if !done {
			return wrongf("eventQuery says a synchronized event was not reached")
		}
	case KindDeviceEventElapsed:
		d, err := dc.p.EventElapsed(e0, e1)
		if err != nil {
			return err
		}
		if d < 0 || d.Seconds() > 60 {
			return wrongf("eventElapsedTime around an 8 MiB copy is %v", d)
		}
	}
	return nil
}

func (dc *devCtx) streamWaitEvent(s Spec) error {
	const n = 4 << 20
	rt, err := dc.roundTrip(n, s.Seed)
	if err != nil {
		return err
	}
	s2, err := dc.p.StreamCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.StreamDestroy(s2) }()
	e, err := dc.p.EventCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.EventDestroy(e) }()
	st := dc.w.stream
	if err := inOrder(
		func() error { return dc.p.Memcpy(rt.a, rt.src, n, loader.HostToDevice, st) },
		func() error { return dc.p.EventRecord(e, st) },
		func() error { return dc.p.StreamWaitEvent(s2, e) },
		func() error { return dc.p.Memcpy(rt.b, rt.a, n, loader.DeviceToDevice, s2) },
		func() error { return dc.p.Memcpy(rt.dst, rt.b, n, loader.DeviceToHost, s2) },
		func() error { return dc.p.StreamSynchronize(s2) },
	); err != nil {
		return err
	}
	err = compareElems("copies on a second stream that waited for an event of the first", sdk.Uint8, rt.out, rt.data, nil)
	return errors.Join(err, dc.p.StreamSynchronize(st))
}

func (dc *devCtx) pointerKind(s Spec) error {
	d, err := dc.raw(4096)
	if err != nil {
		return err
	}
	h, _, err := dc.pinned(4096)
	if err != nil {
		return err
	}
	goMem := make([]byte, 4096)
	kinds := []struct {
		what string
		ptr  uintptr
		ok   []loader.MemoryKind
	}{
		{"deviceMalloc memory", d, []loader.MemoryKind{loader.MemDevice, loader.MemManaged}},
		{"hostMalloc memory", h, []loader.MemoryKind{loader.MemHostPinned}},
		{"pageable host memory", uintptr(unsafe.Pointer(&goMem[0])), []loader.MemoryKind{loader.MemHost, loader.MemUnknown}},
	}
	for _, k := range kinds {
		got, err := dc.p.PointerKind(k.ptr)
		if err != nil {
			return err
		}
		good := false
		for _, ok := range k.ok {
			good = good || got == ok
		}
		if !good {
			return wrongf("pointerKind of %s says %s, want %v", k.what, got, k.ok)
		}
	}
	runtime.KeepAlive(goMem)
	return nil
}

func (dc *devCtx) everyDevice(s Spec) error {
	for d := 0; d < min(dc.ndev, 16); d++ {
		ptr, err := dc.p.DeviceMalloc(d, 4099)
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		dc.sc.bufs = append(dc.sc.bufs, devBuf{base: ptr})
		data := pattern(4099, s.Seed+uint64(d))
		if err := dc.p.CopyToDevice(ptr, data); err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		st, err := dc.p.StreamCreate(d)
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		got := make([]byte, 4099)
		err = dc.p.CopyFromDevice(got, ptr)
		err = errors.Join(err, dc.p.StreamSynchronize(st), dc.p.StreamDestroy(st))
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		if err := compareElems(fmt.Sprintf("device %d: copy to the device and back", d), sdk.Uint8, got, data, nil); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) badDevice(s Spec) error {
	ptr, err := dc.p.DeviceMalloc(dc.ndev, 64)
	if err == nil {
		_ = dc.p.DeviceFree(ptr)
		return wrongf("deviceMalloc on device %d succeeded, but the plugin reports %d devices", dc.ndev, dc.ndev)
	}
	var ce *loader.CallError
	if !errors.As(err, &ce) || ce.Message == "" {
		return wrongf("deviceMalloc on device %d failed without a getLastError message (%v)", dc.ndev, err)
	}
	return nil
}

// reduceLocal checks ABI v4's reduceLocal: for every data type and op the
// plugin declares, 1, 2, 3 and 8 sources of 1 and 4099 elements, out of
// place and in place (the result over the last source, then the first).
// The sources are the reference inputs of an AllReduce over as many ranks,
// so the fold must equal that AllReduce's result, bit for bit (avg: the
// sum divided by the source count, which the reference keeps exact).
func (dc *devCtx) reduceLocal(s Spec) error {
	done := 0
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			if !dc.p.SupportsDataType(dt) || !dc.p.SupportsRedOp(op) {
				continue
			}
			for _, n := range []int{1, 2, 3, loader.MaxReduceSrcs} {
				for _, count := range []int{1, 4099} {
					for _, dstAt := range []int{-1, n - 1, 0} {
						c := reference.Case{Coll: sdk.AllReduce, Type: dt, Op: op, NRanks: n, Count: count, Seed: s.Seed}
						err := dc.reduceLocalOnce(c, dstAt)
						if errors.Is(err, sdk.ErrNotSupported) && done > 0 {
							// The ABI's rule: every declared type and op, or none.
							return wrongf("reduceLocal refused %s %s after it reduced other types and ops: %v", dt, op, err)
						}
						if err != nil {
							return err
						}
						done++
					}
				}
			}
		}
	}
	return nil
}

// reduceLocalOnce folds c's n rank inputs into a fresh buffer (dstAt < 0)
// or over source dstAt, on the worker's stream.
func (dc *devCtx) reduceLocalOnce(c reference.Case, dstAt int) error {
	bytes := c.Count * c.Type.Size()
	srcs := make([]uintptr, c.NRanks)
	bufs := make([]devBuf, c.NRanks)
	for r := range srcs {
		in := make([]byte, bytes)
		reference.FillInput(c, r, in)
		b, err := dc.sc.alloc(in)
		if err != nil {
			return err
		}
		bufs[r], srcs[r] = b, b.ptr()
	}
	where := "out of place"
	var dst devBuf
	if dstAt >= 0 {
		dst, where = bufs[dstAt], fmt.Sprintf("in place over source %d", dstAt)
	} else {
		var err error
		if dst, err = dc.sc.alloc(filled(bytes, 0x5a)); err != nil {
			return err
		}
	}
	st := dc.w.stream
	if err := dc.p.ReduceLocal(dc.dev, dst.ptr(), srcs, c.Count, c.Type, c.Op, c.NRanks, st); err != nil {
		return err
	}
	if err := dc.p.StreamSynchronize(st); err != nil {
		return err
	}
	name := fmt.Sprintf("reduceLocal of %d %s sources, %s, %d elements, %s", c.NRanks, c.Type, c.Op, c.Count, where)
	return dc.w.verify(checked{name: name, buf: dst, want: reference.Expected(c, 0), dt: c.Type})
}

// reduceLocalStream checks that reduceLocal keeps the stream's order: two
// sources copied in on the worker's stream, folded, and copied out on it,
// with one synchronise at the end. The emulators hold back work nobody
// waits for, so a fold that does not wait for the copies before it (or
// that the copy after it does not wait for) reads or yields stale data.
func (dc *devCtx) reduceLocalStream(s Spec) error {
	c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: 2, Count: 4097, Seed: s.Seed}
	n := c.Count * c.Type.Size()
	var ins [2]uintptr
	var srcs [2]uintptr
	for r := range ins {
		h, in, err := dc.pinned(n)
		if err != nil {
			return err
		}
		reference.FillInput(c, r, in)
		if srcs[r], err = dc.raw(n); err != nil {
			return err
		}
		ins[r] = h
	}
	dst, err := dc.raw(n)
	if err != nil {
		return err
	}
	out, got, err := dc.pinned(n)
	if err != nil {
		return err
	}
	fillBytes(got, 0)
	st := dc.w.stream
	if err := inOrder(
		func() error { return dc.p.Memcpy(srcs[0], ins[0], n, loader.HostToDevice, st) },
		func() error { return dc.p.Memcpy(srcs[1], ins[1], n, loader.HostToDevice, st) },
		func() error { return dc.p.ReduceLocal(dc.dev, dst, srcs[:], c.Count, c.Type, c.Op, 1, st) },
		func() error { return dc.p.Memcpy(out, dst, n, loader.DeviceToHost, st) },
		func() error { return dc.p.StreamSynchronize(st) },
	); err != nil {
		return err
	}
	return compareElems("copies in, reduceLocal and a copy out on one stream", c.Type, got, reference.Expected(c, 0), nil)
}
