package core

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
	c  *Comm
	p  *sched.Plan
	s  loader.Stream
	ev []loader.Event // per step; 0 where the step enqueues no device work
}

// onDevice reports whether a step's work is enqueued on a stream.
func onDevice(st *sched.Step) bool {
	return st.Kind == sched.KindCopy || st.Kind == sched.KindIntra || st.Kind == sched.KindDevFold
}

func (c *Comm) newChain(p *sched.Plan, s loader.Stream) (*chain, error) {
	ch := &chain{c: c, p: p, s: s}
	pl := c.dev
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
	for len(c.events) < n+1 {
		e, err := pl.EventCreate(c.be.Device)
		if err != nil {
			return nil, fmt.Errorf("creating an event on %s device %d: %w", pl.Name, c.be.Device, err)
		}
		c.events = append(c.events, e)
	}
	next := 1
	for i := range p.Steps {
		if onDevice(&p.Steps[i]) {
			ch.ev[i] = c.events[next]
			next++
		}
	}
	// The copy streams read the input after the work before the call.
	start := c.events[0]
	if err := pl.EventRecord(start, s); err != nil {
		return nil, err
	}
	for _, strm := range []loader.Stream{c.d2h, c.h2d} {
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
	st, pl := &ch.p.Steps[i], ch.c.dev
	for _, d := range st.Deps {
		e := ch.ev[d]
		if e == 0 {
			continue
		}
		var err error
		if onDevice(st) {
			err = pl.StreamWaitEvent(ch.c.laneStream(st.Lane, ch.s), e)
		} else {
			err = pl.EventSynchronize(e)
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
	return ch.c.dev.EventRecord(ch.ev[i], ch.c.laneStream(ch.p.Steps[i].Lane, ch.s))
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
		if err := ch.c.dev.StreamSynchronize(ch.c.laneStream(l, ch.s)); err != nil {
			return err
		}
	}
	return nil
}
