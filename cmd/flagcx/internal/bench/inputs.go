package bench

import (
	"github.com/flagcx/flagcx-go/conformance/reference"
)

// prepare writes the inputs of one call (and, for a check, the image of
// its receive region before the call into expImg, which countWrong
// completes): zeroed receive buffer, this rank's input in the send
// buffer or at its in-place offset.
func (r *rankRun) prepare(op *opSpec, c reference.Case, inPlace, forCheck bool) error {
	ts := c.Type.Size()
	sendN, recvN := c.SendCount()*ts, c.RecvCount()*ts
	var input []byte
	if forCheck {
		input = r.inputImg[:sendN]
	} else {
		// Timing inputs go straight into the buffer when the host can
		// address it.
		if inPlace {
			if h := r.recv.Host(); h != nil {
				so, _ := op.inPlace.Offsets(r.rank, c.Count)
				input = h[so*ts : so*ts+sendN]
			}
		} else if h := r.send.Host(); h != nil {
			input = h[:sendN]
		}
		if input == nil {
			if cap(r.scratch) < sendN {
				r.scratch = make([]byte, sendN)
			}
			input = r.scratch[:sendN]
		}
	}
	reference.FillInput(c, r.rank, input)
	so, ro := op.inPlace.Offsets(r.rank, c.Count)
	if inPlace {
		// The receive buffer holds both: zero it, put the input in place.
		if forCheck {
			if err := r.recv.Zero(max(so*ts+sendN, ro*ts+recvN)); err != nil {
				return err
			}
		}
		if err := r.recv.Write(so*ts, input); err != nil {
			return err
		}
	} else {
		if err := r.send.Write(0, input); err != nil {
			return err
		}
		if err := r.recv.Zero(recvN); err != nil {
			return err
		}
	}
	if !forCheck {
		return nil
	}
	// The expected image starts as the receive region does: zeros, with
	// the input where an in-place input overlaps it.
	exp := r.expImg[:recvN]
	clear(exp)
	if inPlace {
		lo, hi := max(so, ro)*ts, min(so*ts+sendN, ro*ts+recvN)
		if lo < hi {
			copy(exp[lo-ro*ts:hi-ro*ts], input[lo-so*ts:hi-so*ts])
		}
	}
	return nil
}
