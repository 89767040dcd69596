package mem

import "unsafe"

// haveStream: every amd64 CPU has SSE2's MOVNTDQ.
const haveStream = true

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// streamBlocks copies n bytes (a multiple of 64) from src to dst (16-byte
// aligned) with MOVNTDQ, then fences so the stores are visible before the
// caller publishes them.
//
//go:noescape
func streamBlocks(dst, src *byte, n uintptr)
