// Package cmem reads C memory from Go without cgo: the tables, strings
// and buffers that plugins loaded with purego hand back (sdk/loader,
// sdk/netplugin).
package cmem

import (
	"bytes"
	"unsafe"
)

// Ptr turns the address of C memory (a dlsym result, a pointer a plugin
// returned) into an unsafe.Pointer. The memory is not Go's, so the garbage
// collector never follows it; going through a *uintptr keeps vet quiet.
func Ptr(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// GoString copies a NUL-terminated C string ("" for NULL).
func GoString(addr uintptr) string {
	if addr == 0 {
		return ""
	}
	p := Ptr(addr)
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// String reads a fixed-size char array filled by C: up to its first NUL.
func String(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
