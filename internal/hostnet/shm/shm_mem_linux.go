//go:build linux

package shm

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Registered memory: segments that a rank allocates for its own buffers
// (the communicator's MemAlloc) and that its same-host peers map, so that
// collectives read and write the buffers themselves instead of staging
// them through the windows.
//
// Each allocation is its own file, named like a rank's segment
// (flagcx-<boot>-<pidns>-<pid>-<token>, so CleanStaleShm removes it when
// its creator died before unlinking it): a header page (magic, size, pid,
// token), then the memory. The host engine unlinks it as soon as every
// same-host peer has mapped it (UnlinkMem).

const memMagic uint64 = 0x31304d454d584346 // "FCXMEM01", little endian

// memMaps are the memory mappings of a node's allocations, by the address
// of their first byte (own and peers').
type memMaps struct {
	mu    sync.Mutex
	maps  map[*byte][]byte // data start -> whole mapping
	files map[string]string
}

func (m *memMaps) add(data, whole []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.maps == nil {
		m.maps = map[*byte][]byte{}
	}
	m.maps[unsafe.SliceData(data)] = whole
}

// NewMem makes and maps a segment of n bytes (zeroed) for this rank: its
// memory, and the name with which the peers map it (MapMem). The segment
// is sized within what /dev/shm and the RAM hold now.
func (n *ShmNode) NewMem(size int) ([]byte, string, error) {
	if size <= 0 || int64(size) > 1<<40 {
		return nil, "", fmt.Errorf("%w: cannot allocate %d bytes of shared memory", ErrShmUnavailable, size)
	}
	own := n.segs[n.me]
	dir := own.dir
	total := shmPage + roundUp(size, shmPage)
	hm := ReadHostMemory(ShmConfig{Dir: dir})
	if (hm.ShmSizeBytes > 0 && int64(total) > hm.ShmFreeBytes) || (hm.AvailBytes > 0 && int64(total) > hm.AvailBytes) {
		return nil, "", fmt.Errorf("%w: a %s allocation does not fit: %s has %s free and %s of RAM is available (enlarge %s, e.g. docker --shm-size)",
			ErrShmCapacity, bytesize.Human(int64(total)), dir, bytesize.Human(hm.ShmFreeBytes), bytesize.Human(hm.AvailBytes), dir)
	}
	mem, name, token, err := createShmFile(dir, total, "allocation", "use ordinary memory for the buffers")
	if err != nil {
		return nil, "", err
	}
	h := (*[4]uint64)(unsafe.Pointer(&mem[0]))
	h[1], h[2], h[3] = uint64(size), uint64(os.Getpid()), token
	h[0] = memMagic
	data := mem[shmPage : shmPage+size : shmPage+size]
	n.mem.add(data, mem)
	n.mem.mu.Lock()
	if n.mem.files == nil {
		n.mem.files = map[string]string{}
	}
	n.mem.files[name] = filepath.Join(dir, name)
	n.mem.mu.Unlock()
	return data, name, nil
}

// MapMem maps the segment called name that the rank at index i made with
// NewMem (size bytes).
func (n *ShmNode) MapMem(i int, name string, size int) ([]byte, error) {
	pid := n.segs[i].pid
	_, _, npid, token, ok := ParseSegName(name)
	if !ok || npid != pid {
		return nil, fmt.Errorf("%s is not the name of a flagcx segment of pid %d: %w", wire.QuoteIfOdd(name, 96), pid, wire.ErrProtocol)
	}
	path := filepath.Join(n.segs[n.me].dir, name) // for messages: the file is opened through openShmFile
	f, err := openShmFile(n.segs[n.me].dir, name)
	if err != nil {
		return nil, fmt.Errorf("opening the memory segment of pid %d: %w", pid, err)
	}
	defer f.Close()
	total := shmPage + roundUp(size, shmPage)
	if st, err := f.Stat(); err != nil || st.Size() != int64(total) {
		return nil, fmt.Errorf("%s is not a %d-byte memory segment: %w", path, total, wire.ErrProtocol)
	}
	mem, err := mapShm(f, total)
	if err != nil {
		return nil, err
	}
	h := (*[4]uint64)(unsafe.Pointer(&mem[0]))
	if h[0] != memMagic || h[1] != uint64(size) || h[2] != uint64(pid) || h[3] != token {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("%s is not the memory segment pid %d announced: %w", path, pid, wire.ErrProtocol)
	}
	data := mem[shmPage : shmPage+size : shmPage+size]
	n.mem.add(data, mem)
	return data, nil
}

// UnlinkMem removes the file of this rank's segment name (every peer has
// mapped it, or the allocation failed); the mappings stay.
func (n *ShmNode) UnlinkMem(name string) {
	n.mem.mu.Lock()
	path, ok := n.mem.files[name]
	delete(n.mem.files, name)
	n.mem.mu.Unlock()
	if ok {
		os.Remove(path)
	}
}

// FreeMem unmaps memory that NewMem or MapMem returned. It outlives the
// node: memory stays mapped when the communicator is destroyed, until this.
func (n *ShmNode) FreeMem(data []byte) error {
	n.mem.mu.Lock()
	whole, ok := n.mem.maps[unsafe.SliceData(data)]
	delete(n.mem.maps, unsafe.SliceData(data))
	n.mem.mu.Unlock()
	if !ok {
		return fmt.Errorf("hostnet: FreeMem of memory not from NewMem or MapMem: %w", wire.ErrProtocol)
	}
	return syscall.Munmap(whole)
}

// unlinkAllMem removes the files of allocations not yet unlinked (the
// node closes).
func (n *ShmNode) unlinkAllMem() {
	n.mem.mu.Lock()
	files := n.mem.files
	n.mem.files = nil
	n.mem.mu.Unlock()
	for _, p := range files {
		os.Remove(p)
	}
}
