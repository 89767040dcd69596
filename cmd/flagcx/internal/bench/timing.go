package bench

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/flagcx/flagcx-go/conformance/reference"
)

// timeHalf runs x on the inputs of c (out of place or in place) for the
// warmup, then times r.cfg.Iters of it; it returns the seconds per call.
func (r *rankRun) timeHalf(op *opSpec, c reference.Case, x *call, inPlace bool) (float64, error) {
	if err := r.prepare(op, c, inPlace, false); err != nil {
		return 0, err
	}
	// Each half warms up on its own buffers: the in-place half
	// follows host copies that leave the device idle, and its first
	// collectives on new addresses cost once what 20 timed
	// iterations then average in (in place ran behind NCCL's in-place
	// figures when only the out-of-place half warmed up:
	// docs/performance.md, "Figures that were in comments (issue 41)").
	for i := 0; i < r.cfg.Warmup; i++ {
		if err := r.be.issue(x); err != nil {
			return 0, r.collError(op, c, inPlace, err)
		}
	}
	if err := r.be.sync(); err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	if err := r.comm.HostAllGather(nil, nil); err != nil {
		return 0, fmt.Errorf("barrier before timing: %w", err)
	}
	stop, err := r.be.startTimer()
	if err != nil {
		return 0, err
	}
	for i := 0; i < r.cfg.Iters; i++ {
		if err := r.be.issue(x); err != nil {
			return 0, r.collError(op, c, inPlace, err)
		}
		if r.cfg.Blocking {
			if err := r.be.sync(); err != nil {
				return 0, r.collError(op, c, inPlace, err)
			}
		}
	}
	elapsed, err := stop()
	if err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	return elapsed.Seconds() / float64(r.cfg.Iters), nil
}

// agree fills res's halves with what the ranks agree on (the slowest
// rank's time, every rank's wrong elements) and adds them to the run's
// totals.
func (r *rankRun) agree(op *opSpec, res *Result, times [2]float64, wrong [2]int64) error {
	t, w, err := r.agreeOn(times, wrong)
	if err != nil {
		return err
	}
	for phase, h := range []*Half{&res.OutOfPlace, &res.InPlace} {
		r.tally(h, res.Size, t[phase], op.coll.BusFactor(r.n), w[phase], r.cfg.Check && (phase == 0 || op.inPlaceChecked))
	}
	return nil
}

// tally fills half h of a row of size bytes from the time the ranks agree
// on (seconds) and, when checked, their wrong elements, and adds it to the
// run's totals (the summary's average bus bandwidth and verdict).
func (r *rankRun) tally(h *Half, size int64, secs, busFactor float64, wrong int64, checked bool) {
	h.TimeUS = secs * 1e6
	if secs > 0 {
		h.AlgBW = float64(size) / 1e9 / secs
	}
	h.BusBW = h.AlgBW * busFactor
	if checked {
		n := wrong
		h.Wrong = &n
		r.checked++
		if n != 0 {
			r.badRows++
			r.wrongEls += n
		}
	}
	r.busSum += h.BusBW
	r.busCount++
}

// agreeOn exchanges every rank's timings and wrong-element counts of both
// halves in one exchange of host bytes, and returns the slowest rank's
// times and the counts summed over the ranks.
func (r *rankRun) agreeOn(times [2]float64, wrong [2]int64) ([2]float64, [2]int64, error) {
	const rec = 4 * 8
	send := make([]byte, 0, rec)
	for i := range times {
		send = binary.LittleEndian.AppendUint64(send, math.Float64bits(times[i]))
		send = binary.LittleEndian.AppendUint64(send, uint64(wrong[i]))
	}
	all := make([]byte, rec*r.n)
	if err := r.comm.HostAllGather(send, all); err != nil {
		return times, wrong, fmt.Errorf("rank %d: agreeing on the timings and error counts: %w", r.rank, err)
	}
	var t [2]float64
	var w [2]int64
	for k := 0; k < r.n; k++ {
		b := all[k*rec:]
		for i := range t {
			t[i] = max(t[i], math.Float64frombits(binary.LittleEndian.Uint64(b[16*i:])))
			w[i] += int64(binary.LittleEndian.Uint64(b[16*i+8:]))
		}
	}
	return t, w, nil
}
