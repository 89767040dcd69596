// Package mem holds the host copy the shared-memory collectives need beside
// Go's copy: a streaming copy whose stores bypass the cache.
package mem

// StreamMin is the smallest copy that Stream streams: below it the stores
// go through the cache as copy's do.
const StreamMin = 64 << 10

// Stream copies src into dst (len(dst) >= len(src), no overlap) with
// non-temporal stores where the CPU has them, so that writing a large
// result the caller does not read back soon neither reads the destination
// lines first (read-for-ownership) nor evicts the data the ranks of a host
// share through the cache. Go's copy streams only from 1 MiB on; the
// collectives write their results in slices below that.
func Stream(dst, src []byte) {
	n := len(src)
	if n < StreamMin || !haveStream {
		copy(dst, src)
		return
	}
	dst = dst[:n]
	// Align the destination to 16 bytes, stream whole 64-byte blocks,
	// copy the rest.
	head := int((16 - uintptrOf(dst)%16) % 16)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	streamBlocks(&dst[head], &src[head], uintptr(body))
	copy(dst[head+body:], src[head+body:])
}
