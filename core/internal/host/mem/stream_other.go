//go:build !amd64

package mem

const haveStream = false

func uintptrOf([]byte) uintptr               { return 0 }
func streamBlocks(dst, src *byte, n uintptr) {}
