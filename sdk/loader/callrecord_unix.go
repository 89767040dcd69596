//go:build unix

package loader

import "syscall"

// mapCallRecord maps the call record on descriptor fd and closes fd (the
// mapping stays; the descriptor would only leak into child processes). It
// returns nil, touching nothing, unless fd is a regular file of the
// record's size that starts with its magic.
func mapCallRecord(fd int) []byte {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || uint32(st.Mode)&syscall.S_IFMT != syscall.S_IFREG || st.Size != recordSize {
		return nil
	}
	mem, err := syscall.Mmap(fd, 0, recordSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	if string(mem[:len(recordMagic)]) != recordMagic {
		_ = syscall.Munmap(mem)
		return nil
	}
	_ = syscall.Close(fd)
	return mem
}
