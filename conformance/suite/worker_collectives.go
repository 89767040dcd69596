package suite

// Collectives, point-to-point patterns and groups: how a worker prepares,
// issues and verifies them, and the cases built on them.

import (
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

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
