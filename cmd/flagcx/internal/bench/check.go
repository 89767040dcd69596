package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/internal/base/flog"
)

// The exact check. Computing a reduced element takes every rank's input at
// it, so a rank that computes its whole expected AllReduce output does
// nranks times the arithmetic of the collective it checks, and at many
// ranks checking took longer than running (docs/performance.md, "Figures
// that were in comments (issue 41)"). Where the receivers of a call share
// one expected buffer (reference.Case.Shared), each rank computes 1/nranks
// of it exactly and the ranks exchange a digest per share; a receiver
// compares its own share element by element and the others by digest, and
// recomputes only a share whose digest differs, to count its wrong elements
// exactly as before.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// digest is two CRC-32s of b (Castagnoli and IEEE, both in hardware where
// the CPU has it): a share that differs from its reference passes with a
// chance of about 2^-64.
func digest(b []byte) uint64 {
	return uint64(crc32.Checksum(b, castagnoli))<<32 | uint64(crc32.ChecksumIEEE(b))
}

// share is the element range [lo, hi) of total elements that rank k of n
// computes.
func share(total, n, k int) (lo, hi int) { return total * k / n, total * (k + 1) / n }

// countWrong counts the elements of got, this rank's receive region after
// the call of c, that differ from the reference; exp is the region's image
// before the call (zeros, and the input where an in-place input overlaps
// it), which the call must leave as it is where it delivers nothing.
func (r *rankRun) countWrong(c reference.Case, got, exp []byte) (int64, error) {
	if !c.Shared() || r.n == 1 {
		reference.ExpectedInto(c, r.rank, exp)
		return int64(reference.Compare(c.Type, got, exp)), nil
	}
	ts, total := c.Type.Size(), c.RecvCount()
	receiver := r.rank
	if !c.Receives(receiver) {
		receiver = c.Root
	}
	lo, hi := share(total, r.n, r.rank)
	mine := r.shareBuf(0, (hi-lo)*ts)
	reference.ExpectedRange(c, receiver, mine, lo)
	sums, err := r.exchangeDigests(digest(mine))
	if err != nil {
		return 0, err
	}
	if !c.Receives(r.rank) {
		return int64(reference.Compare(c.Type, got, exp)), nil
	}
	var wrong int64
	for k := range r.n {
		a, b := share(total, r.n, k)
		g := got[a*ts : b*ts]
		switch {
		case k == r.rank:
			wrong += int64(reference.Compare(c.Type, g, mine))
		case digest(g) != sums[k]:
			// Differs from the reference: worth computing here, to
			// count exactly which elements are wrong.
			want := r.shareBuf(1, len(g))
			reference.ExpectedRange(c, receiver, want, a)
			wrong += int64(reference.Compare(c.Type, g, want))
		}
	}
	return wrong, nil
}

// exchangeDigests gathers every rank's digest of its share.
func (r *rankRun) exchangeDigests(own uint64) ([]uint64, error) {
	send := binary.LittleEndian.AppendUint64(nil, own)
	all := make([]byte, 8*r.n)
	if err := r.comm.HostAllGather(send, all); err != nil {
		return nil, fmt.Errorf("rank %d: exchanging the check's digests: %w", r.rank, err)
	}
	sums := make([]uint64, r.n)
	for k := range sums {
		sums[k] = binary.LittleEndian.Uint64(all[8*k:])
	}
	return sums, nil
}

// shareBuf is scratch buffer i (0: this rank's share, 1: a share
// recomputed) of n bytes, kept between sizes.
func (r *rankRun) shareBuf(i, n int) []byte {
	if cap(r.shares[i]) < n {
		r.shares[i] = make([]byte, n)
	}
	return r.shares[i][:n]
}

// sizeTimes is where one size's wall time went on this rank: running the
// collectives (warmup and timed calls, both halves) and checking them.
type sizeTimes struct {
	coll, check time.Duration
}

// debugTimes logs, on rank 0 with --debug (FLAGCX_DEBUG=INFO), its times
// of one size, so that a check that costs more than the collectives it
// checks shows. (Rank 0's own: agreeing on the slowest would take a
// collective that every rank must join, and whether a rank logs is its own
// environment's choice.)
func (r *rankRun) debugTimes(op *opSpec, res *Result, t sizeTimes) {
	sub := flog.Coll
	if !flog.Enabled(flog.LevelInfo, sub) {
		sub = flog.Init
	}
	if r.rank != 0 || !r.cfg.Check || !flog.Enabled(flog.LevelInfo, sub) {
		return
	}
	flog.Default().Log(context.Background(), flog.LevelInfo,
		fmt.Sprintf("bench %s %s %d bytes: check %.3f s, collectives %.3f s (%d calls: %d warmup and %d timed per half, both halves)",
			op.name(), res.Datatype, res.Size, t.check.Seconds(), t.coll.Seconds(), 2*(r.cfg.Warmup+r.cfg.Iters), r.cfg.Warmup, r.cfg.Iters),
		slog.String(flog.KeySubsys, sub), slog.Int(flog.KeyRank, 0))
}

// WrongError reports results that differ from the reference.
type WrongError struct {
	Results, Checked int   // results (out-of-place or in-place rows) with wrong elements, of those checked
	Elements         int64 // wrong elements in all
}

func (e *WrongError) Error() string {
	return fmt.Sprintf("%d of %d checked results were wrong (%d wrong elements in all): the collectives returned data that differs from the exact reference",
		e.Results, e.Checked, e.Elements)
}

// IsWrong reports whether err is a wrong-results error.
func IsWrong(err error) bool {
	var w *WrongError
	return errors.As(err, &w)
}

// verdict is how a finished run ends: rank 0 reports wrong results (every
// rank knows them; one report is enough, and a launcher that sees rank 0
// fail reports the job as failed).
func (r *rankRun) verdict() error {
	if r.wrong != nil && r.rank == 0 {
		return r.wrong
	}
	return nil
}

// checkHalf runs x once on the check inputs of c and counts the elements of
// its result (recvN bytes at off of the receive buffer) that differ from
// the reference (countWrong).
func (r *rankRun) checkHalf(op *opSpec, c reference.Case, x *call, inPlace bool, off, recvN int) (int64, error) {
	if err := r.prepare(op, c, inPlace, true); err != nil {
		return 0, err
	}
	if err := r.be.issue(x); err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	if err := r.be.sync(); err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	got, err := view(r.recv, off, recvN, &r.scratch)
	if err != nil {
		return 0, err
	}
	return r.countWrong(c, got, r.expImg[:recvN])
}
