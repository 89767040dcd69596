package sched

import (
	"fmt"
	"math/bits"

	"github.com/flagcx/flagcx-go/sdk"
)

// Needs gives the bytes rank's send and receive buffers must hold for call
// on n ranks (0 where the buffer is not used on this rank).
func Needs(call Call, rank, n int) (send, recv int, err error) {
	size := call.DType.Size()
	b, err := mulBytes(call.Count, size, 1)
	if err != nil {
		return 0, 0, err
	}
	nb, err := mulBytes(call.Count, size, n)
	if err != nil {
		return 0, 0, err
	}
	d := call.Coll.Info()
	if d == nil {
		return 0, 0, nil
	}
	if d.Send == sdk.ExtentVector {
		s, err := extent(call.SendCounts, call.SDispls, size, "send")
		if err != nil {
			return 0, 0, err
		}
		r, err := extent(call.RecvCounts, call.RDispls, size, "receive")
		return s, r, err
	}
	of := func(e sdk.Extent) int {
		switch {
		case e.RootOnly() && rank != call.Root, e == sdk.ExtentNone:
			return 0
		case e.PerRank():
			return nb
		}
		return b
	}
	return of(d.Send), of(d.Recv), nil
}

func mulBytes(count, size, n int) (int, error) {
	if count < 0 {
		return 0, fmt.Errorf("%w: count %d is negative: pass a number of elements, 0 or more", sdk.ErrInvalidArgument, count)
	}
	hi, lo := bits.Mul64(uint64(count), uint64(size))
	hi2, lo2 := bits.Mul64(lo, uint64(n))
	if hi != 0 || hi2 != 0 || lo2 > uint64(maxInt) {
		return 0, fmt.Errorf("%w: count %d overflows the address space: use a smaller count", sdk.ErrInvalidArgument, count)
	}
	return int(lo2), nil
}

const maxInt = int(^uint(0) >> 1)

// extent is the bytes a buffer with these counts and displacements spans.
func extent(counts, displs []int, size int, which string) (int, error) {
	end := 0
	for p := range counts {
		if counts[p] < 0 || displs[p] < 0 {
			return 0, fmt.Errorf("%w: AlltoAllv %s count %d or displacement %d for rank %d is negative", sdk.ErrInvalidArgument, which, counts[p], displs[p], p)
		}
		// Zero counts count too: the host backend checks every region.
		e, err := mulBytes(counts[p]+displs[p], size, 1)
		if err != nil {
			return 0, err
		}
		end = max(end, e)
	}
	return end, nil
}

// Validate checks what every rank can check about a call before building
// its plan.
func Validate(call Call, n int) error {
	switch {
	case !call.Coll.Valid():
		return fmt.Errorf("%w: unknown collective %d", sdk.ErrInvalidArgument, int(call.Coll))
	case call.Coll == sdk.SendRecv || call.Coll == sdk.Barrier:
	case !call.DType.Valid():
		return fmt.Errorf("%w: data type %d is not valid: use one of int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16 (0..9)", sdk.ErrInvalidArgument, int32(call.DType))
	case call.Coll.Reduces() && !call.Op.Valid():
		return fmt.Errorf("%w: reduction op %d is not valid: use sum, prod, max, min or avg (0..4)", sdk.ErrInvalidArgument, int32(call.Op))
	case call.Coll.Rooted() && (call.Root < 0 || call.Root >= n):
		return fmt.Errorf("%w: root %d is out of range for %d ranks: use a rank in 0..%d", sdk.ErrInvalidArgument, call.Root, n, n-1)
	case call.Count < 0:
		return fmt.Errorf("%w: count %d is negative: pass a number of elements, 0 or more", sdk.ErrInvalidArgument, call.Count)
	}
	if call.Coll == sdk.AlltoAllv {
		for _, a := range [][]int{call.SendCounts, call.SDispls, call.RecvCounts, call.RDispls} {
			if len(a) != n {
				return fmt.Errorf("%w: AlltoAllv needs %d counts and displacements (one per rank), got %d", sdk.ErrInvalidArgument, n, len(a))
			}
		}
	}
	if call.Coll == sdk.SendRecv {
		for i, x := range call.Ops {
			if x.Peer < 0 || x.Peer >= n {
				return fmt.Errorf("%w: operation %d: peer %d is out of range for %d ranks", sdk.ErrInvalidArgument, i, x.Peer, n)
			}
			if x.Bytes < 0 {
				return fmt.Errorf("%w: operation %d: negative size", sdk.ErrInvalidArgument, i)
			}
		}
	}
	return nil
}

// checkSelf: in a group, sends to oneself and receives from oneself pair
// up in order and must agree in number and size.
func checkSelf(call Call, rank int) error {
	if call.Coll != sdk.SendRecv {
		return nil
	}
	var sends, recvs []int
	for _, x := range call.Ops {
		if x.Peer == rank && x.Bytes > 0 {
			if x.Recv {
				recvs = append(recvs, x.Bytes)
			} else {
				sends = append(sends, x.Bytes)
			}
		}
	}
	if len(sends) != len(recvs) {
		return fmt.Errorf("%w: rank %d sends %d messages to itself but receives %d from itself: pair every send to self with a receive from self in the same group",
			sdk.ErrInvalidArgument, rank, len(sends), len(recvs))
	}
	for i := range sends {
		if sends[i] != recvs[i] {
			return fmt.Errorf("%w: send %d to self has %d bytes but receive %d from self has %d: make the sizes agree", sdk.ErrInvalidArgument, i, sends[i], i, recvs[i])
		}
	}
	return nil
}

func pick(cond bool, v int) int {
	if cond {
		return v
	}
	return 0
}
