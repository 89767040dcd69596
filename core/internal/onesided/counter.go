package onesided

import (
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// The completion counter: the operations this rank issued whose effect is
// complete, and its wait.

// Counter is the operations complete: the local ones and each peer's
// acknowledged ones (a peer acknowledges in order, so its count is the
// last sequence number it acknowledged).
func (o *State) Counter() uint64 {
	n := o.local.Load()
	for _, p := range o.peers {
		if p != nil {
			n += p.done.Load()
		}
	}
	return n
}

// issued is how many operations this rank issued: those complete when
// issued (local), and those sent to each peer, which its acknowledgements
// complete. The counter counts completions of exactly these, so it never
// passes issued.
func (o *State) issued() uint64 {
	n := o.local.Load()
	for _, p := range o.peers {
		if p != nil {
			n += p.issued.Load()
		}
	}
	return n
}

// WaitCounter waits until the counter reaches target, or fails with the
// first refusal a peer reported, or past the deadline.
func (o *State) WaitCounter(target uint64) error {
	const name = "WaitCounter"
	// A target past what this rank issued can never be reached: the
	// counter counts completions of issued operations, and none is issued
	// while this waits (a State is used by one goroutine at a time, as its
	// communicator is, and the C API holds the communicator's lock). Fail
	// now, not at the deadline.
	if issued := o.issued(); target > issued {
		return fmt.Errorf("%w: %s(%d) on rank %d: only %d one-sided operations were issued (the counter, %d now, counts their completions and cannot reach %d): wait for at most %d, or issue the operations first",
			sdk.ErrInvalidArgument, name, target, o.rank, issued, o.Counter(), target, issued)
	}
	ready := func() (bool, error) {
		// The counter is read before the refusals: a peer sends its
		// refusal of an operation before the acknowledgement that counts
		// it, so a count that covers a refused operation is never seen
		// without its refusal.
		reached := o.Counter() >= target
		if err := o.takeFailure(); err != nil {
			return false, err
		}
		if reached {
			return true, nil
		}
		for _, p := range o.peers {
			if p != nil && p.done.Load() < p.issued.Load() {
				if err := p.brokenErr(); err != nil {
					return false, err
				}
			}
		}
		return false, nil
	}
	late := func() error {
		var out []string
		for _, p := range o.peers {
			if p != nil && p.done.Load() < p.issued.Load() {
				out = append(out, fmt.Sprintf("rank %d%s completed %d of the %d operations this rank sent it", p.rank, o.links.HostOf(p.rank), p.done.Load(), p.issued.Load()))
			}
		}
		what := strings.Join(out, "; ")
		if what == "" {
			what = fmt.Sprintf("the counter is %d of the %d operations issued", o.Counter(), o.issued())
		}
		return fmt.Errorf("%w: %s(%d) on rank %d: not reached before the deadline: %s (%s sets the deadline, %v): %w",
			sdk.ErrRemoteError, name, target, o.rank, what, hostnet.EnvTimeout, o.timeout, hostnet.ErrTimeout)
	}
	return o.await(name, ready, o.Counter, late)
}

// takeFailure returns, once, the first error a peer reported for this
// rank's operations (a window it freed, say), or nil.
func (o *State) takeFailure() error {
	for _, p := range o.peers {
		if p != nil {
			if err := p.takeNak(); err != nil {
				return err
			}
		}
	}
	return nil
}
