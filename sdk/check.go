package sdk

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// The one checker of a call's arguments. Every entry validates with it
// before anything is sent: core.Comm's funnel, the host engine
// (core/internal/host) and the schedules (internal/sched). Errors wrap
// ErrInvalidArgument and say what to pass instead; callers put the
// operation's name and rank in front.

func argErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// CheckType checks a data type.
func CheckType(dt DataType) error {
	if !dt.Valid() {
		return argErr("data type %d is not valid: use one of int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16 (0..9)", int32(dt))
	}
	return nil
}

// CheckCount checks count elements of dt, times mult (a rank count for
// the buffers that hold one block per rank), and returns the bytes. what
// is the count's name in the API ("count", "sendcount", ...).
func CheckCount(what string, count int, dt DataType, mult int) (int, error) {
	if err := CheckType(dt); err != nil {
		return 0, err
	}
	if count < 0 {
		return 0, argErr("%s %d is negative: pass a number of elements, 0 or more", what, count)
	}
	hi, lo := bits.Mul64(uint64(count), uint64(dt.Size()))
	hi2, lo2 := bits.Mul64(lo, uint64(max(mult, 1)))
	if hi != 0 || hi2 != 0 || lo2 > math.MaxInt {
		if mult > 1 {
			return 0, argErr("%s %d of %v times %d ranks overflows the address space: use a smaller count", what, count, dt, mult)
		}
		return 0, argErr("%s %d of %v overflows the address space: use a smaller count", what, count, dt)
	}
	return int(lo2), nil
}

// CheckPeer checks a peer rank of Send or Recv on n ranks.
func CheckPeer(peer, n int) error {
	if peer < 0 || peer >= n {
		return argErr("peer %d is out of range for %d ranks: use a rank in 0..%d", peer, n, n-1)
	}
	return nil
}

// Check validates call as rank's call on n ranks and returns the bytes
// rank's send and receive buffers must hold (0 where this rank does not
// use one: a non-root's recv in Reduce, say). Barrier needs nothing;
// SendRecv's buffers are its Count each.
func (call *Call) Check(rank, n int) (send, recv int, err error) {
	d := call.Coll.Info()
	if d == nil {
		return 0, 0, argErr("unknown collective %d", int(call.Coll))
	}
	if d.Send == ExtentNone { // Barrier: no buffers, nothing to check
		return 0, 0, nil
	}
	switch {
	case d.Reduces && !call.Op.Valid():
		if err := CheckType(call.DType); err != nil {
			return 0, 0, err
		}
		return 0, 0, argErr("reduction op %d is not valid: use sum, prod, max, min or avg (0..4)", int32(call.Op))
	case d.Rooted && (call.Root < 0 || call.Root >= n):
		return 0, 0, argErr("root %d is out of range for %d ranks: use a rank in 0..%d", call.Root, n, n-1)
	}
	if d.Send == ExtentVector {
		return call.checkVector(n)
	}
	one, err := CheckCount(d.CountName, call.Count, call.DType, 1)
	if err != nil {
		return 0, 0, err
	}
	all := one
	if d.Send.PerRank() || d.Recv.PerRank() {
		if all, err = CheckCount(d.CountName, call.Count, call.DType, n); err != nil {
			return 0, 0, err
		}
	}
	of := func(e Extent) int {
		switch {
		case e == ExtentNone, e.RootOnly() && rank != call.Root:
			return 0
		case e.PerRank():
			return all
		}
		return one
	}
	return of(d.Send), of(d.Recv), nil
}

// checkVector checks AlltoAllv's counts and displacements and returns the
// bytes its buffers span.
func (call *Call) checkVector(n int) (send, recv int, err error) {
	if err := CheckType(call.DType); err != nil {
		return 0, 0, err
	}
	size := call.DType.Size()
	sides := [2]struct {
		which          string
		counts, displs []int
		end            int
	}{{"send", call.SendCounts, call.SDispls, 0}, {"recv", call.RecvCounts, call.RDispls, 0}}
	for i := range sides {
		s := &sides[i]
		if len(s.counts) != n || len(s.displs) != n {
			return 0, 0, argErr("AlltoAllv's %scounts has %d entries and the %s displacements %d, but there are %d ranks: pass one count and one displacement per rank",
				s.which, len(s.counts), s.which, len(s.displs), n)
		}
		for p := range s.counts {
			c, d := s.counts[p], s.displs[p]
			if c < 0 || d < 0 {
				return 0, 0, argErr("AlltoAllv %s count %d or displacement %d for rank %d is negative: use 0 or more elements", s.which, c, d, p)
			}
			e, err := CheckCount(s.which+" displacement + count", c+d, call.DType, 1)
			if c+d < 0 || err != nil { // c+d wrapped
				return 0, 0, argErr("AlltoAllv %s region of rank %d (displacement %d + count %d elements of %d bytes) overflows the address space: use smaller counts", s.which, p, d, c, size)
			}
			s.end = max(s.end, e)
		}
	}
	return sides[0].end, sides[1].end, nil
}

// BufferName is how the checkers name a buffer in a message: which ("send",
// "recv") and "buffer", or which alone where it already ends in "buffer"
// (Send's and Recv's one is named "buffer"): "%s buffer" printed "buffer
// buffer holds 0 bytes" for it.
func BufferName(which string) string {
	switch {
	case which == "":
		return "buffer"
	case strings.HasSuffix(strings.ToLower(which), "buffer"):
		return which
	}
	return which + " buffer"
}

// CheckBuffer checks that rank's which buffer ("send" or "recv"), have
// bytes long, holds the need bytes Check asked of it.
func (call *Call) CheckBuffer(which string, have, need, n int) error {
	if have >= need {
		return nil
	}
	name := BufferName(which)
	if call.Coll == AlltoAllv {
		counts, displs := call.SendCounts, call.SDispls
		if which == "recv" {
			counts, displs = call.RecvCounts, call.RDispls
		}
		size := call.DType.Size()
		for p := range min(len(counts), len(displs)) {
			// CheckCount: the region's end in bytes, which must not wrap.
			end, err := CheckCount("", counts[p]+displs[p], call.DType, 1)
			if err != nil || counts[p]+displs[p] < 0 || end > have {
				return argErr("%s region of rank %d (displacement %d + count %d elements of %d bytes) ends past the %s's %d bytes: pass a larger buffer or fix the counts",
					which, p, displs[p], counts[p], size, name, have)
			}
		}
	}
	what := fmt.Sprintf("%d elements of %v", call.Count, call.DType)
	if one, err := CheckCount("", call.Count, call.DType, 1); err != nil || need > one {
		what = fmt.Sprintf("%d ranks x %d elements of %v", n, call.Count, call.DType)
	}
	return argErr("%s holds %d bytes but %s need %d: pass a buffer of at least %d bytes or a smaller count",
		name, have, what, need, need)
}

// overlap reports whether the a bytes at pa and the b bytes at pb share a
// byte, by differences: pa+a may wrap around the address space.
func overlap(pa uintptr, a int, pb uintptr, b int) bool {
	if a <= 0 || b <= 0 {
		return false
	}
	if pa <= pb {
		return pb-pa < uintptr(a)
	}
	return pa-pb < uintptr(b)
}

// sameBase reports whether send+ro == recv+so (send at offset so and recv
// at offset ro of one buffer), by differences: the sums may wrap.
func sameBase(send uintptr, so int, recv uintptr, ro int) bool {
	if send >= recv {
		return so >= ro && send-recv == uintptr(so-ro)
	}
	return ro >= so && recv-send == uintptr(ro-so)
}

// CheckPlace checks that rank's send and recv buffers (addresses and the
// bytes Check asked of each) overlap only in the collective's in-place
// layout (InPlace), or not at all: any other overlap would make the call
// read data it has already overwritten. A collective without an in-place
// form may overlap (its engine copies aside); a rooted one is checked at
// the root only, where both buffers are used. Run it after CheckBuffer:
// buffers too short for the count are that, not an overlap.
func (call *Call) CheckPlace(rank int, send uintptr, sendN int, recv uintptr, recvN int) error {
	d := call.Coll.Info()
	if d == nil || d.InPlace == InPlaceNone || !overlap(send, sendN, recv, recvN) {
		return nil
	}
	so, ro := d.InPlace.Offsets(rank, call.Count*call.DType.Size())
	if sameBase(send, so, recv, ro) {
		return nil
	}
	layout := map[InPlace]string{
		InPlaceSame:       "(send == recv)",
		InPlaceSendInRecv: fmt.Sprintf("(send == recv[rank*%s*size:])", d.CountName),
		InPlaceRecvInSend: fmt.Sprintf("(recv == send[rank*%s*size:])", d.CountName),
	}[d.InPlace]
	if d.Rooted {
		layout = layout[:len(layout)-1] + " on root)"
	}
	return argErr("send and recv buffers overlap without being in place: use disjoint buffers, or in place %s", layout)
}
