//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Segment header (see shm.go). Offsets in bytes; every word a peer writes
// or waits on has a 128-byte line of its own.
const (
	segMagic    uint64 = 0x3230474553584346 // "FCXSEG02", little endian
	shmLine            = 128
	offMagic           = 0
	offSize            = 8
	offP2P             = 16
	offWindow          = 24
	offPid             = 32
	offToken           = 40
	offClosed          = 1 * shmLine // owner closed its communicator (uint32)
	offSeq             = 2 * shmLine // owner's collective step counter (uint32, futex word)
	offSleepers        = 3 * shmLine // ranks sleeping on offSeq (uint32)
	offSig             = 4 * shmLine // what the owner's steps are for, by step parity (2 x uint64)
)

// ShmSegment is one rank's segment: its own (created by CreateShmSegment)
// or a peer's (mapped by openShmSegment).
type ShmSegment struct {
	mem    []byte
	name   string // file name in dir
	dir    string
	own    bool
	pid    int
	token  uint64
	p2p    []byte
	window []byte

	closed, seq, sleepers *uint32
	sig                   *[2]uint64
	unlinked              atomic.Bool
}

// Name is the segment's file name (in its directory), which peers map.
func (s *ShmSegment) Name() string { return s.name }

func (s *ShmSegment) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *ShmSegment) u64(off int) uint64 {
	return *(*uint64)(unsafe.Pointer(&s.mem[off]))
}
func (s *ShmSegment) put64(off int, v uint64) { *(*uint64)(unsafe.Pointer(&s.mem[off])) = v }

func (s *ShmSegment) layout() {
	p2p, win := int(s.u64(offP2P)), int(s.u64(offWindow))
	s.p2p = s.mem[shmPage : shmPage+p2p : shmPage+p2p]
	s.window = s.mem[shmPage+p2p : shmPage+p2p+win : shmPage+p2p+win]
	s.closed, s.seq, s.sleepers = s.word(offClosed), s.word(offSeq), s.word(offSleepers)
	s.sig = (*[2]uint64)(unsafe.Pointer(&s.mem[offSig]))
}

// CleanStaleShm removes the segments in sc's directory whose creator, a
// process of this kernel and pid namespace, no longer runs (a rank killed
// before its peers mapped its segment). It returns how many it removed.
func CleanStaleShm(sc ShmConfig) int {
	dir := sc.Path()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	boot, ns := bootTag(BootID()), nsID(PidNamespace())
	removed := 0
	for _, e := range ents {
		b, n, pid, _, ok := ParseSegName(e.Name())
		if !ok || b != boot || n != ns || processGone(pid) == "" {
			continue
		}
		if RemoveShmFile(dir, e.Name()) == nil {
			removed++
		}
	}
	return removed
}

// CreateShmSegment makes and maps this rank's segment, after removing stale
// ones and checking that it fits in what is free.
func CreateShmSegment(sc ShmConfig) (*ShmSegment, error) {
	if sc.Disable {
		return nil, fmt.Errorf("%w: %s=1", ErrShmUnavailable, EnvShmDisable)
	}
	CleanStaleShm(sc)
	if err := CheckShmFree(1, sc, ReadHostMemory(sc)); err != nil {
		return nil, err
	}
	p2p := roundUp(max(sc.P2PBytes, MinShmAreaBytes), shmPage)
	win := roundUp(max(sc.WindowBytes, MinShmAreaBytes), shmPage)
	if sc.WindowBytes == 0 {
		win = shmWindowMax
	}
	size := sc.SegmentBytes()
	dir := sc.Path()
	mem, name, token, err := createShmFile(dir, size, "segment",
		fmt.Sprintf("shrink %s / %s, or set %s=1 to use TCP", EnvShmP2PSize, EnvShmWindowSize, EnvShmDisable))
	if err != nil {
		return nil, err
	}
	s := &ShmSegment{mem: mem, name: name, dir: dir, own: true, pid: os.Getpid(), token: token}
	s.put64(offSize, uint64(size))
	s.put64(offP2P, uint64(p2p))
	s.put64(offWindow, uint64(win))
	s.put64(offPid, uint64(s.pid))
	s.put64(offToken, token)
	s.layout()
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[offMagic])), segMagic)
	return s, nil
}

// createShmFile makes a file in dir named for this process and a fresh
// random token (so CleanStaleShm can tell when its creator is gone),
// reserves size bytes of it and maps them. what names the file in errors
// ("segment", "allocation"), hint says what the user can change. On
// failure nothing is left in dir.
func createShmFile(dir string, size int, what, hint string) (mem []byte, name string, token uint64, err error) {
	var tb [8]byte
	if _, err := rand.Read(tb[:]); err != nil {
		return nil, "", 0, fmt.Errorf("%w: %w", ErrShmUnavailable, err)
	}
	token = binary.LittleEndian.Uint64(tb[:])
	name = SegName(BootID(), PidNamespace(), os.Getpid(), token)
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", 0, fmt.Errorf("%w: creating a %s in %s: %w (%s)", ErrShmUnavailable, what, dir, err, hint)
	}
	defer f.Close() // the mapping outlives the descriptor
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	// Reserve the pages now: tmpfs hands them out lazily, and a full
	// /dev/shm would otherwise kill a process with SIGBUS on first touch.
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return nil, "", 0, fmt.Errorf("%w: %s has no room for a %s %s: enlarge it (e.g. docker --shm-size), or %s",
				ErrShmCapacity, dir, bytesize.Human(int64(size)), what, hint)
		}
		if err := f.Truncate(int64(size)); err != nil {
			return nil, "", 0, fmt.Errorf("%w: sizing %s to %d bytes: %w", ErrShmUnavailable, path, size, err)
		}
	}
	if mem, err = mapShm(f, size); err != nil {
		return nil, "", 0, fmt.Errorf("%w: %w", ErrShmUnavailable, err)
	}
	return mem, name, token, nil
}

func mapShm(f *os.File, size int) ([]byte, error) {
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %s (%d bytes): %w", f.Name(), size, err)
	}
	return mem, nil
}

// openShmSegment maps the segment name in dir that process pid created.
func openShmSegment(dir, name string, pid int) (*ShmSegment, error) {
	_, _, npid, token, ok := ParseSegName(name)
	if !ok || npid != pid {
		return nil, fmt.Errorf("%s is not the name of a flagcx segment of pid %d: %w", wire.QuoteIfOdd(name, 96), pid, wire.ErrProtocol)
	}
	path := filepath.Join(dir, name) // for messages: the file is opened through openShmFile
	f, err := openShmFile(dir, name)
	if err != nil {
		return nil, fmt.Errorf("opening the segment of pid %d: %w", pid, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening the segment of pid %d: %w", pid, err)
	}
	size := st.Size()
	if size < 3*shmPage || size > 3*MaxShmAreaBytes {
		return nil, fmt.Errorf("%s is %d bytes, not a flagcx segment: %w", path, size, wire.ErrProtocol)
	}
	mem, err := mapShm(f, int(size))
	if err != nil {
		return nil, err
	}
	s := &ShmSegment{mem: mem, name: name, dir: dir, pid: pid, token: token}
	p2p, win := s.u64(offP2P), s.u64(offWindow)
	bad := ""
	switch {
	case atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offMagic]))) != segMagic:
		bad = "bad magic"
	case s.u64(offSize) != uint64(size) || p2p%shmPage != 0 || win%shmPage != 0 || shmPage+p2p+win != uint64(size):
		bad = fmt.Sprintf("impossible geometry (%d bytes: %d + %d)", size, p2p, win)
	case s.u64(offPid) != uint64(pid):
		bad = fmt.Sprintf("made by pid %d, not %d", s.u64(offPid), pid)
	case s.u64(offToken) != token:
		bad = fmt.Sprintf("its token %016x is not the %016x in its name", s.u64(offToken), token)
	}
	if bad != "" {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("%s is not the segment peer pid %d announced (%s): %w", path, pid, bad, wire.ErrProtocol)
	}
	s.layout()
	return s, nil
}

// unlink removes the segment's file (own segments only); mappings stay.
func (s *ShmSegment) Unlink() {
	if s != nil && s.own && !s.unlinked.Swap(true) {
		RemoveShmFile(s.dir, s.name)
	}
}

// abandon tells the ranks that mapped the segment that its owner gave up
// (their waits on it fail at once).
func (s *ShmSegment) Abandon() {
	if s != nil && s.mem != nil {
		atomic.CompareAndSwapUint32(s.closed, shmOpen, shmClosedByError)
		futexWake(s.seq)
	}
}

// Close unlinks the file if still there and unmaps the segment.
func (s *ShmSegment) Close() error {
	if s == nil || s.mem == nil {
		return nil
	}
	s.Unlink()
	err := syscall.Munmap(s.mem)
	s.mem = nil
	return err
}

// fsSpace is the size and free bytes of the file system holding dir.
func fsSpace(dir string) (size, free int64) {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0, 0
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Bavail) * int64(st.Bsize)
}

// memInfo reads MemTotal and MemAvailable from /proc/meminfo.
func memInfo() (total, avail int64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = kb << 10
		case "MemAvailable:":
			avail = kb << 10
		}
	}
	return total, avail
}
