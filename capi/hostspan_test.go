package main

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestCheckHostSpan: a span is refused exactly when it runs past the
// memory mapped at its start (three pages here, a hole after them), with
// how much is mapped from there, and never by an overflowing end.
func TestCheckHostSpan(t *testing.T) {
	page := syscall.Getpagesize()
	// Raw mmap and munmap: syscall.Munmap unmaps only whole mappings it
	// made, and the hole is the end of one: 16 pages, which a small
	// mapping made meanwhile by another thread is unlikely to fill.
	const hole = 16
	base, _, errno := syscall.Syscall6(syscall.SYS_MMAP, 0, uintptr((3+hole)*page), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE, ^uintptr(0), 0)
	require.Zero(t, errno)
	t.Cleanup(func() { _, _, _ = syscall.Syscall(syscall.SYS_MUNMAP, base, uintptr(3*page), 0) })
	_, _, errno = syscall.Syscall(syscall.SYS_MUNMAP, base+uintptr(3*page), uintptr(hole*page), 0)
	require.Zero(t, errno)
	at := func(off int) uintptr { return base + uintptr(off) }
	for _, tc := range []struct {
		name string
		p    uintptr
		n    int
		want string // "" when the span is accepted
	}{
		{"all three pages", at(0), 3 * page, ""},
		{"the end of the last page", at(3*page - 8), 8, ""},
		{"nothing", at(0), 0, ""},
		{"a NULL buffer (its own check says so)", 0, 1 << 40, ""},
		{"one byte into the hole", at(0), 3*page + 1, fmt.Sprintf("send buffer holds at most %d bytes (the memory mapped from %#x on) but 4 elements of float32 need %d", 3*page, at(0), 3*page+1)},
		{"from the middle of a page", at(page + 100), 3 * page, fmt.Sprintf("send buffer holds at most %d bytes", 2*page-100)},
		{"a terabyte", at(8), 1 << 40, fmt.Sprintf("send buffer holds at most %d bytes", 3*page-8)},
		{"past the top of the address space", ^uintptr(0) - 15, 32, "send buffer holds at most "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHostSpan("send", tc.p, tc.n, "4 elements of float32")
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, fmt.Sprintf("need %d: pass a buffer of at least %d bytes or a smaller count", tc.n, tc.n))
		})
	}
}
