package main

// exports_ext.go: the cgo side of the flagcx-go extensions (shim_ext.c).

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// capiCommSplit splits communicator id (core's Split): *got is 0 for a
// rank that passed FLAGCX_SPLIT_NOCOLOR, else 1 with the new communicator's
// handle number, device and placement in *out, *outDev and *onDev.
//
//export capiCommSplit
func capiCommSplit(id C.uint64_t, color, key C.int, got *C.int, out *C.uint64_t, outDev, onDev *C.int) C.int {
	return withComm(id, "flagcxCommSplit", func(c *comm) error {
		nc, err := c.split(int(color), int(key))
		if err != nil || nc == nil {
			return err
		}
		*got = 1
		*out = C.uint64_t(register(nc))
		*outDev = C.int(nc.dev)
		*onDev = 0
		if nc.onDevice() {
			*onDev = 1
		}
		return nil
	})
}

// capiRedOpCreate makes a pre-multiplying sum op of communicator id
// (premul.go): *out is its number, above the built-in ops.
//
//export capiRedOpCreate
func capiRedOpCreate(id C.uint64_t, out *C.int, scalar unsafe.Pointer, dt, residence C.int) C.int {
	return withComm(id, "flagcxRedOpCreatePreMulSum", func(c *comm) error {
		op, err := c.createPreMulSum(scalar, sdk.DataType(dt), int(residence))
		*out = C.int(op)
		return err
	})
}

//export capiRedOpDestroy
func capiRedOpDestroy(id C.uint64_t, op C.int) C.int {
	return withComm(id, "flagcxRedOpDestroy", func(c *comm) error { return c.destroyRedOp(sdk.RedOp(op)) })
}

// capiCommRevoke revokes communicator id on every rank (core's Revoke).
//
//export capiCommRevoke
func capiCommRevoke(id C.uint64_t) C.int {
	return withComm(id, "flagcxCommRevoke", func(c *comm) error {
		c.hc.Revoke(fmt.Sprintf("rank %d called flagcxCommRevoke", c.rank()))
		return nil
	})
}

// capiCommShrink shrinks communicator id by the n ranks at exclude (core's
// Shrink): *got is 0 for an excluded rank, else 1 with the new
// communicator as capiCommSplit gives it.
//
//export capiCommShrink
func capiCommShrink(id C.uint64_t, exclude *C.int, n C.int, got *C.int, out *C.uint64_t, outDev, onDev *C.int) C.int {
	return withComm(id, "flagcxCommShrink", func(c *comm) error {
		ex := make([]int, n)
		if n > 0 {
			for i, r := range unsafe.Slice(exclude, int(n)) {
				ex[i] = int(r)
			}
		}
		nc, err := c.shrink(ex)
		if err != nil || nc == nil {
			return err
		}
		*got = 1
		*out = C.uint64_t(register(nc))
		*outDev = C.int(nc.dev)
		*onDev = 0
		if nc.onDevice() {
			*onDev = 1
		}
		return nil
	})
}
