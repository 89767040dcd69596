package sched

import (
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
)

// Needs gives the bytes rank's send and receive buffers must hold for call
// on n ranks (0 where the buffer is not used on this rank), as sdk's one
// checker (sdk.Call.Check) gives them; a SendRecv's buffers are its Ops'.
func Needs(call Call, rank, n int) (send, recv int, err error) {
	if call.Coll == sdk.SendRecv || call.Coll == sdk.Barrier {
		return 0, 0, nil
	}
	args := call.Args()
	return args.Check(rank, n)
}

// Validate checks what every rank can check about a call before building
// its plan: sdk's one checker, and a SendRecv's operations.
func Validate(call Call, n int) error {
	if call.Coll != sdk.SendRecv {
		_, _, err := Needs(call, 0, n)
		return err
	}
	for i, x := range call.Ops {
		if err := sdk.CheckPeer(x.Peer, n); err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
		if x.Bytes < 0 {
			return fmt.Errorf("%w: operation %d: negative size", sdk.ErrInvalidArgument, i)
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
