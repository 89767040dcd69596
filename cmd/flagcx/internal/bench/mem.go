package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
)

// Mem is where a rank's benchmark buffers live. Host memory (HostMem) is
// the only kind for now; the device memory of a vendor backend will
// implement the same interface, and the op table then calls that backend's
// collectives on it.
type Mem interface {
	// Name describes the memory as the "# Using devices" block shows it.
	Name() string
	// Alloc makes a zeroed buffer of n bytes.
	Alloc(n int) (Buf, error)
}

// Buf is one buffer of a Mem. Offsets and lengths are in bytes.
type Buf interface {
	Len() int
	// Write copies src from host memory into the buffer at off.
	Write(off int, src []byte) error
	// Read copies the buffer's bytes at off into dst in host memory.
	Read(off int, dst []byte) error
	// Zero clears the first n bytes.
	Zero(n int) error
	// Host is the buffer's memory when the host addresses it directly (the
	// form core's host collectives take), nil otherwise.
	Host() []byte
	Free() error
}

// HostMem is ordinary process memory.
type HostMem struct{}

func (HostMem) Name() string { return "host (cpu)" }

func (HostMem) Alloc(n int) (b Buf, err error) {
	if n < 0 {
		return nil, fmt.Errorf("cannot allocate %d bytes", n)
	}
	defer func() {
		if recover() != nil { // makeslice: len out of range
			b, err = nil, fmt.Errorf("cannot allocate %s of host memory", bytesize.Human(int64(n)))
		}
	}()
	return &hostBuf{b: make([]byte, n)}, nil
}

type hostBuf struct{ b []byte }

func (h *hostBuf) Len() int     { return len(h.b) }
func (h *hostBuf) Host() []byte { return h.b }
func (h *hostBuf) Free() error  { h.b = nil; return nil }

func (h *hostBuf) Write(off int, src []byte) error {
	if off < 0 || off+len(src) > len(h.b) {
		return fmt.Errorf("write of %d bytes at %d outside a %d-byte buffer", len(src), off, len(h.b))
	}
	copy(h.b[off:], src)
	return nil
}

func (h *hostBuf) Read(off int, dst []byte) error {
	if off < 0 || off+len(dst) > len(h.b) {
		return fmt.Errorf("read of %d bytes at %d outside a %d-byte buffer", len(dst), off, len(h.b))
	}
	copy(dst, h.b[off:])
	return nil
}

func (h *hostBuf) Zero(n int) error {
	clear(h.b[:min(n, len(h.b))])
	return nil
}

// view returns n bytes of b at off in host memory: the buffer itself when
// the host addresses it, else a copy in scratch (grown as needed).
func view(b Buf, off, n int, scratch *[]byte) ([]byte, error) {
	if h := b.Host(); h != nil {
		return h[off : off+n], nil
	}
	if cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	s := (*scratch)[:n]
	return s, b.Read(off, s)
}

// availableMemory reads MemAvailable from /proc/meminfo; ok is false where
// it cannot (another OS, a container without it).
func availableMemory() (bytes int64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// hostBytesPerRank is the host memory one rank uses at the largest size: the
// send and receive buffers, and with checking the input and expected images.
func hostBytesPerRank(maxBytes Size, check bool) int64 {
	n := 2 * int64(maxBytes)
	if check {
		n += 2 * int64(maxBytes)
	}
	return n
}

// checkMemory refuses a run whose buffers do not fit in this host's
// available memory, instead of letting the allocation kill the process.
func checkMemory(maxBytes Size, check bool, localRanks int) error {
	avail, ok := availableMemory()
	if !ok {
		return nil
	}
	per := hostBytesPerRank(maxBytes, check)
	if localRanks < 1 {
		localRanks = 1
	}
	if per > avail/int64(localRanks) {
		return fmt.Errorf("-e/--maxbytes %s needs about %s of host memory per rank (%d on this host), but %s is available: lower -e/--maxbytes",
			maxBytes, bytesize.Human(per), localRanks, bytesize.Human(avail))
	}
	return nil
}
