package main

// hostspan.go: what the C API can know of a host buffer's length. C passes
// pointers without lengths, so a host rank's buffers are taken to be as
// long as the count says (comm.span). A count far beyond the memory then
// reached core's checker as two long spans, which overlap: "send and recv
// buffers overlap" for what is a buffer too small for the count, and, for
// spans that happen not to overlap, a fault. A buffer lies in the
// process's mappings, so a span that runs past them is too small, whatever
// else is wrong.

import (
	"fmt"
	"syscall"

	"github.com/flagcx/flagcx-go/sdk"
)

// spanCheckMin is the smallest span checked: the check is a system call
// (under a microsecond), which a call moving this much hides; a smaller
// one would add it to the host backend's small-message latency.
const spanCheckMin = 1 << 20

// mapped reports whether the n bytes at p are all in this process's
// mappings, as far as it can tell: msync(MS_ASYNC) fails with ENOMEM on a
// range with a hole and does nothing else (since Linux 2.6.19). Another
// error says nothing about the range: mapped then says yes, so that a
// buffer is never refused for it.
func mapped(p, n uintptr) bool {
	if n > ^uintptr(0)-p { // past the top of the address space
		return false
	}
	page := uintptr(syscall.Getpagesize())
	start := p &^ (page - 1)
	_, _, errno := syscall.Syscall(syscall.SYS_MSYNC, start, n+(p-start), syscall.MS_ASYNC)
	return errno != syscall.ENOMEM
}

// mappedFrom is how many of the n bytes at p (not all mapped) are mapped
// from p on: the pages up to the first hole, found by halving (about 30
// system calls for a terabyte; only a refused call pays them).
func mappedFrom(p, n uintptr) uintptr {
	n = min(n, ^uintptr(0)-p)
	if mapped(p, n) { // all but what lies past the top of the address space
		return n
	}
	page := uintptr(syscall.Getpagesize())
	start := p &^ (page - 1)
	// The first lo pages from start are mapped, the first hi are not.
	lo, hi := uintptr(0), (n+(p-start)+page-1)/page
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if mapped(start, mid*page) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 { // p's own page is not mapped
		return 0
	}
	return lo*page - (p - start)
}

// checkHostSpan checks that the n bytes at p, a host rank's which buffer
// ("send", "recv", "buffer") that what needs ("4 elements of float32"),
// lie in mapped memory: a buffer too small for its count is refused as
// that, before anything reads it.
func checkHostSpan(which string, p uintptr, n int, what string) error {
	if p == 0 || n <= 0 || mapped(p, uintptr(n)) {
		return nil
	}
	return fmt.Errorf("%w: %s holds at most %d bytes (the memory mapped from %#x on) but %s need %d: pass a buffer of at least %d bytes or a smaller count",
		sdk.ErrInvalidArgument, sdk.BufferName(which), mappedFrom(p, uintptr(n)), p, what, n, n)
}
