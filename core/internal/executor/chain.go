package executor

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// chain orders a plan's device work with events instead of waiting for
// each step: a step that enqueues device work (a copy, a vendor
// operation) records an event after it; a step that depends on it waits
// for that event on its own stream when it runs on the device too, or on
// the host (EventSynchronize) when it runs there. Lanes thus enqueue
// ahead, and the host blocks only where it reads what a device step
// wrote. The caller's earlier work orders the copy streams through one
// event; the streams are synchronised once, at the end.
type chain struct {
	e  *Executor
	p  *sched.Plan
	s  loader.Stream
	ev []loader.Event // per step; 0 where the step enqueues no device work
}

// onDevice reports whether a step's work is enqueued on a stream.
func onDevice(st *sched.Step) bool {
	return st.Kind == sched.KindCopy || st.Kind == sched.KindIntra || st.Kind == sched.KindDevFold
}

func (e *Executor) newChain(p *sched.Plan, s loader.Stream) (*chain, error) {
	ch := &chain{e: e, p: p, s: s}
	pl := e.dev
	if pl == nil || p.Async {
		return ch, nil // host memory, or enqueued on the caller's stream alone
	}
	ch.ev = make([]loader.Event, len(p.Steps))
	n := 0
	for i := range p.Steps {
		if onDevice(&p.Steps[i]) {
			n++
		}
	}
	for len(e.events) < n+1 {
		ev, err := e.plugin.EventCreate(e.device)
		if err != nil {
			return nil, fmt.Errorf("creating an event on %s device %d: %w", e.plugin.Name, e.device, err)
		}
		e.events = append(e.events, ev)
	}
	next := 1
	for i := range p.Steps {
		if onDevice(&p.Steps[i]) {
			ch.ev[i] = e.events[next]
			next++
		}
	}
	// The copy streams read the input after the work before the call.
	start := e.events[0]
	if err := pl.EventRecord(start, s); err != nil {
		return nil, err
	}
	for _, strm := range []loader.Stream{e.d2h, e.h2d} {
		if err := pl.StreamWaitEvent(strm, start); err != nil {
			return nil, err
		}
	}
	return ch, nil
}

// await makes step i wait for the device work of the steps it depends on.
func (ch *chain) await(i int) error {
	if ch.ev == nil {
		return nil
	}
	st, pl := &ch.p.Steps[i], ch.e.dev
	for _, d := range st.Deps {
		ev := ch.ev[d]
		if ev == 0 {
			continue
		}
		var err error
		if onDevice(st) {
			err = pl.StreamWaitEvent(ch.e.laneStream(st.Lane, ch.s), ev)
		} else {
			err = pl.EventSynchronize(ev)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// record marks the end of step i's device work.
func (ch *chain) record(i int) error {
	if ch.ev == nil || ch.ev[i] == 0 {
		return nil
	}
	return ch.e.dev.EventRecord(ch.ev[i], ch.e.laneStream(ch.p.Steps[i].Lane, ch.s))
}

// finish waits for the device work of the call: its result is in place.
func (ch *chain) finish() error {
	if ch.ev == nil {
		return nil
	}
	defer region("sync streams")()
	for _, l := range ch.p.Lanes() {
		if l == sched.LaneNet {
			continue
		}
		if err := ch.e.dev.StreamSynchronize(ch.e.laneStream(l, ch.s)); err != nil {
			return err
		}
	}
	return nil
}
