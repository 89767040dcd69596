//go:build linux

package hostnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Segment layout (see shm.go). Offsets in bytes.
const (
	shmMagic   uint64 = 0x31304d4853584346 // "FCXSHM01", little endian
	shmPage           = 4096
	shmLine           = 128 // apart enough that two words never share a line or a prefetched pair
	shmSlotHdr        = 64

	offMagic    = 0
	offSlotSize = 8
	offSlots    = 16
	offSize     = 24
	offPid      = 1 * shmLine // int32 per side: creator, opener
	offClosed   = 2 * shmLine // uint32 per side: shmOpen, shmClosedBy*, written by that side

	ctlHead     = 0 * shmLine // slots published by the sender
	ctlTail     = 1 * shmLine // slots released by the receiver
	ctlRecvWait = 2 * shmLine // 1 while the receiver sleeps on head
	ctlSendWait = 3 * shmLine // 1 while the sender sleeps on tail
	ctlSlotHdrs = 4 * shmLine // per slot: message length uint64, piece index uint64
)

// Values of a side's closed word.
const (
	shmOpen uint32 = iota
	shmClosedByClose
	shmClosedByError
)

// Waiting (see shm.go). Variables, not constants, so tests can tune them.
// On the 2-core development VM running 4 ranks, 50..200 polls measured
// alike, no polling somewhat slower and 2000 polls clearly slower (the
// spinning rank takes the core from the rank it waits for).
var (
	shmSpin          = 100                    // polls (each with a Gosched) before sleeping
	shmNap           = 50 * time.Millisecond  // longest futex sleep between checks
	shmLivenessEvery = 100 * time.Millisecond // how often a sleeper asks whether the peer lives
)

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared (no FUTEX_PRIVATE_FLAG): the word lives in two processes
	futexWakeOp = 1 // FUTEX_WAKE
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32, n int) {
	_, _, _ = syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(n), 0, 0, 0)
}

func shmSegmentSize(slotSize, slots int) (ctl, size int) {
	ctl = roundUp(ctlSlotHdrs+slots*shmSlotHdr, shmPage)
	return ctl, shmPage + 2*ctl + 2*roundUp(slots*slotSize, shmPage)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// shmRing is one side's view of one direction.
type shmRing struct {
	head, tail, recvWait, sendWait *uint32
	hdrs                           []byte // slots x shmSlotHdr
	data                           []byte // slots x slotSize
	pos                            uint64 // slots this side published (sender) or released (receiver)
	seen                           uint32 // last value read of the other side's counter
}

func (r *shmRing) hdr(slot int) (total, piece *uint64) {
	h := unsafe.Pointer(&r.hdrs[slot*shmSlotHdr])
	return (*uint64)(h), (*uint64)(unsafe.Add(h, 8))
}

// ShmLink is a Link over shared memory to a process of this host; see
// SetupShmLink for how one is made and shm.go for the segment.
//
// Like a Link it is full duplex (one Send and one Recv may run at once; two
// Sends or two Recvs must not overlap) and Close, from any goroutine,
// unblocks both sides. After a failure in the middle of a message or a
// length mismatch it is broken: later calls fail at once with an error
// wrapping ErrClosed that quotes the first error, and the peer's blocked or
// later calls fail with ErrClosed too. A Recv that timed out before any
// part of the next message arrived leaves it usable.
type ShmLink struct {
	mem      []byte
	side     int // 0: creator, 1: opener
	slotSize int
	slots    int
	timeout  time.Duration
	tx, rx   shmRing
	pid      [2]*int32
	closedW  [2]*uint32
	peerPid  int
	path     string // the file, until unlinked (creator only)

	mu     sync.RWMutex // Send/Recv hold it shared; Close exclusive before unmapping
	closed atomic.Bool
	broken atomic.Pointer[error]
	pathMu sync.Mutex
}

func (l *ShmLink) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&l.mem[off])) }

// layout points the link's fields into l.mem.
func (l *ShmLink) layout() {
	ctl, _ := shmSegmentSize(l.slotSize, l.slots)
	ringBytes := roundUp(l.slots*l.slotSize, shmPage)
	ring := func(d int) shmRing {
		c := shmPage + d*ctl
		data := shmPage + 2*ctl + d*ringBytes
		return shmRing{
			head:     l.word(c + ctlHead),
			tail:     l.word(c + ctlTail),
			recvWait: l.word(c + ctlRecvWait),
			sendWait: l.word(c + ctlSendWait),
			hdrs:     l.mem[c+ctlSlotHdrs : c+ctlSlotHdrs+l.slots*shmSlotHdr],
			data:     l.mem[data : data+l.slots*l.slotSize],
		}
	}
	// Ring 0 carries creator -> opener, ring 1 opener -> creator.
	l.tx, l.rx = ring(l.side), ring(1-l.side)
	for s := 0; s < 2; s++ {
		l.pid[s] = (*int32)(unsafe.Pointer(&l.mem[offPid+4*s]))
		l.closedW[s] = l.word(offClosed + 4*s)
	}
}

func mapShm(f *os.File, size int) ([]byte, error) {
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %s (%d bytes): %w", f.Name(), size, err)
	}
	return mem, nil
}

// createShm makes and maps a new segment with sc's geometry; l.path names
// the file until unlink.
func createShm(cfg Config, sc ShmConfig) (*ShmLink, error) {
	slotSize, slots := roundShmSlot(sc.SlotSize), max(sc.Slots, 1)
	if slots > MaxShmSlots || slotSize > MaxShmSlotSize || slots*slotSize > MaxShmRingBytes {
		return nil, fmt.Errorf("%w: %d slots of %d bytes (at most %d slots, %d bytes per slot, 1 GiB per ring)", ErrConfig, slots, slotSize, MaxShmSlots, MaxShmSlotSize)
	}
	_, size := shmSegmentSize(slotSize, slots)
	dir := sc.dir()
	f, err := os.CreateTemp(dir, "flagcx-shm-*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("creating a segment in %s: %w", dir, err)
	}
	defer f.Close() // the mapping outlives the descriptor
	ok := false
	defer func() {
		if !ok {
			os.Remove(f.Name())
		}
	}()
	// Reserve the pages now: tmpfs hands out pages lazily, and a full
	// /dev/shm would otherwise kill the process with SIGBUS on first touch.
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return nil, fmt.Errorf("%s has no room for a %d-byte segment (enlarge it, e.g. docker --shm-size, or lower %s / %s)", dir, size, EnvShmSlots, EnvShmSlotSize)
		}
		if err := f.Truncate(int64(size)); err != nil {
			return nil, fmt.Errorf("sizing %s to %d bytes: %w", f.Name(), size, err)
		}
	}
	mem, err := mapShm(f, size)
	if err != nil {
		return nil, err
	}
	l := &ShmLink{mem: mem, side: 0, slotSize: slotSize, slots: slots, timeout: cfg.Timeout, path: f.Name()}
	put := func(off int, v uint64) { *(*uint64)(unsafe.Pointer(&mem[off])) = v }
	put(offSlotSize, uint64(slotSize))
	put(offSlots, uint64(slots))
	put(offSize, uint64(size))
	l.layout()
	atomic.StoreInt32(l.pid[0], int32(os.Getpid()))
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[offMagic])), shmMagic)
	ok = true
	return l, nil
}

// openShm maps the segment at path that process creatorPid made.
func openShm(path string, cfg Config, creatorPid int) (*ShmLink, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the segment: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening the segment: %w", err)
	}
	size := st.Size()
	if size < shmPage || size > 4*MaxShmRingBytes {
		return nil, fmt.Errorf("%s is %d bytes, not a flagcx segment: %w", path, size, ErrProtocol)
	}
	mem, err := mapShm(f, int(size))
	if err != nil {
		return nil, err
	}
	get := func(off int) uint64 { return *(*uint64)(unsafe.Pointer(&mem[off])) }
	slotSize, slots := get(offSlotSize), get(offSlots)
	bad := ""
	switch {
	case atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offMagic]))) != shmMagic:
		bad = "bad magic"
	case slots < 1 || slots > MaxShmSlots || slotSize < MinShmSlotSize || slotSize > MaxShmSlotSize || slotSize%64 != 0:
		bad = fmt.Sprintf("impossible geometry %d x %d", slots, slotSize)
	case get(offSize) != uint64(size):
		bad = fmt.Sprintf("size %d in the header, %d on disk", get(offSize), size)
	default:
		if _, want := shmSegmentSize(int(slotSize), int(slots)); int64(want) != size {
			bad = fmt.Sprintf("%d bytes where %d x %d slots need %d", size, slots, slotSize, want)
		}
	}
	if bad != "" {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("%s is not a flagcx segment (%s): %w", path, bad, ErrProtocol)
	}
	l := &ShmLink{mem: mem, side: 1, slotSize: int(slotSize), slots: int(slots), timeout: cfg.Timeout}
	l.layout()
	if got := int(atomic.LoadInt32(l.pid[0])); got != creatorPid {
		l.Close()
		return nil, fmt.Errorf("%s was created by pid %d, not %d: %w", path, got, creatorPid, ErrProtocol)
	}
	l.peerPid = creatorPid
	atomic.StoreInt32(l.pid[1], int32(os.Getpid()))
	return l, nil
}

// attachedPid is the opener's pid as written in the segment (0: none yet).
func (l *ShmLink) attachedPid() int { return int(atomic.LoadInt32(l.pid[1])) }

// unlink removes the segment's file; the mappings stay.
func (l *ShmLink) unlink() {
	l.pathMu.Lock()
	defer l.pathMu.Unlock()
	if l.path != "" {
		os.Remove(l.path)
		l.path = ""
	}
}

// PeerPid is the process on the other side.
func (l *ShmLink) PeerPid() int { return l.peerPid }

// SlotSize and Slots are the ring geometry (per direction).
func (l *ShmLink) SlotSize() int { return l.slotSize }
func (l *ShmLink) Slots() int    { return l.slots }

// String describes the link, e.g. "shm to pid 42 (8 x 256 KiB)".
func (l *ShmLink) String() string {
	return fmt.Sprintf("shm to pid %d (%d x %d KiB)", l.peerPid, l.slots, l.slotSize>>10)
}

// Close marks this side closed in the segment, wakes everybody waiting on
// it (here and in the peer), waits for this side's Send and Recv to return
// and unmaps. Closing twice is harmless.
func (l *ShmLink) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.unlink()
	l.markClosed(shmClosedByClose)
	l.mu.Lock() // in-flight Send/Recv saw closed (or the wake) and left
	defer l.mu.Unlock()
	err := syscall.Munmap(l.mem)
	l.mem = nil
	return err
}

// markClosed tells the peer (and any sleeper) that this side is done.
func (l *ShmLink) markClosed(how uint32) {
	atomic.CompareAndSwapUint32(l.closedW[l.side], shmOpen, how)
	for _, w := range []*uint32{l.tx.head, l.tx.tail, l.rx.head, l.rx.tail} {
		futexWake(w, 1<<30)
	}
}

func (l *ShmLink) describe(op string) string {
	return fmt.Sprintf("hostnet: shm %s pid %d", op, l.peerPid)
}

// begin enters a Send or Recv: the mapping stays until it returns.
func (l *ShmLink) begin(op string) error {
	l.mu.RLock()
	if l.closed.Load() {
		l.mu.RUnlock()
		return l.closedErr(op)
	}
	if b := l.broken.Load(); b != nil {
		l.mu.RUnlock()
		return fmt.Errorf("%s: %w: unusable after an earlier error (%v); close it and connect again", l.describe(op), ErrClosed, *b)
	}
	return nil
}

// fail breaks the link (the first error is kept and quoted later) and tells
// the peer, whose blocked calls then fail instead of waiting for the deadline.
func (l *ShmLink) fail(err error) error {
	if l.broken.CompareAndSwap(nil, &err) && !l.closed.Load() {
		l.markClosed(shmClosedByError)
	}
	return err
}

func (l *ShmLink) closedErr(op string) error {
	return fmt.Errorf("%s: %w (closed by this side)", l.describe(op), ErrClosed)
}

func (l *ShmLink) peerClosedErr(op string, how uint32) error {
	why := "closed by the peer"
	if how == shmClosedByError {
		why = "closed by the peer after an error on its side (a length mismatch or a broken message)"
	}
	return fmt.Errorf("%s: %w (%s)", l.describe(op), ErrClosed, why)
}

// Send sends p as one message.
func (l *ShmLink) Send(p []byte) error {
	const op = "send to"
	if err := l.begin(op); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	if how := atomic.LoadUint32(l.closedW[1-l.side]); how != shmOpen {
		return l.fail(l.peerClosedErr(op, how))
	}
	r, S, K := &l.tx, l.slotSize, uint32(l.slots)
	n := len(p)
	pieces := max(1, (n+S-1)/S)
	var dst, src [][]byte
	for i := 0; i < pieces; {
		if i > 0 && l.closed.Load() {
			return l.fail(l.closedErr(op))
		}
		pos := uint32(r.pos)
		r.seen = atomic.LoadUint32(r.tail)
		if pos-r.seen >= K {
			v, err := l.await(op, r.tail, r.sendWait, func(v uint32) bool { return pos-v < K })
			if err != nil {
				return l.fail(err)
			}
			r.seen = v
		}
		// Fill every free slot at once: one publication, and the copies
		// of a large batch spread over cores (one core's memcpy is the
		// bottleneck of a same-host link).
		m := min(int(K-(pos-r.seen)), pieces-i)
		dst, src = dst[:0], src[:0]
		for j := 0; j < m; j++ {
			slot := int((r.pos + uint64(j)) % uint64(K))
			lo := (i + j) * S
			dst = append(dst, r.data[slot*S:(slot+1)*S])
			src = append(src, p[lo:min(lo+S, n)])
			total, piece := r.hdr(slot)
			*total, *piece = uint64(n), uint64(i+j)
		}
		copyAll(dst, src)
		r.pos += uint64(m)
		i += m
		atomic.StoreUint32(r.head, uint32(r.pos))
		if atomic.LoadUint32(r.recvWait) != 0 {
			futexWake(r.head, 1)
		}
	}
	return nil
}

// Recv receives one message of exactly len(p) bytes into p. A message of
// another length gives *LengthError (p untouched) and breaks the link.
func (l *ShmLink) Recv(p []byte) error {
	const op = "recv from"
	if err := l.begin(op); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	r, S, K := &l.rx, l.slotSize, uint32(l.slots)
	n := len(p)
	pieces := max(1, (n+S-1)/S)
	var dst, src [][]byte
	for i := 0; i < pieces; {
		if i > 0 && l.closed.Load() {
			return l.fail(l.closedErr(op))
		}
		pos := uint32(r.pos)
		r.seen = atomic.LoadUint32(r.head)
		if r.seen == pos {
			v, err := l.await(op, r.head, r.recvWait, func(v uint32) bool { return v != pos })
			if err != nil {
				if i == 0 && errors.Is(err, ErrTimeout) {
					return err // nothing consumed: still in step
				}
				return l.fail(err)
			}
			r.seen = v
		}
		// Take every filled slot of this message at once (see Send).
		m := min(int(r.seen-pos), pieces-i)
		dst, src = dst[:0], src[:0]
		for j := 0; j < m; j++ {
			slot := int((r.pos + uint64(j)) % uint64(K))
			tp, pp := r.hdr(slot)
			total, piece := *tp, *pp
			if total != uint64(n) && piece == 0 && i+j == 0 {
				le := &LengthError{Got: int(min(total, uint64(maxInt))), Want: n}
				l.fail(le)
				return le
			}
			if total != uint64(n) || piece != uint64(i+j) {
				return l.fail(fmt.Errorf("%s: slot %d holds piece %d of a %d-byte message where piece %d of %d bytes was due: %w",
					l.describe(op), slot, piece, total, i+j, n, ErrProtocol))
			}
			lo := (i + j) * S
			dst = append(dst, p[lo:min(lo+S, n)])
			src = append(src, r.data[slot*S:(slot+1)*S])
		}
		copyAll(dst, src)
		r.pos += uint64(m)
		i += m
		atomic.StoreUint32(r.tail, uint32(r.pos))
		if atomic.LoadUint32(r.sendWait) != 0 {
			futexWake(r.tail, 1)
		}
	}
	return nil
}

const maxInt = int(^uint(0) >> 1)

// await waits until ready(*word) and returns that value: first polling,
// then sleeping on the futex word with sleeping announced in flag,
// rechecking the closed flags after every nap and the peer's life every
// shmLivenessEvery.
func (l *ShmLink) await(op string, word, flag *uint32, ready func(uint32) bool) (uint32, error) {
	for i := 0; i < shmSpin; i++ {
		if v := atomic.LoadUint32(word); ready(v) {
			return v, nil
		}
		runtime.Gosched()
	}
	start := time.Now()
	lastCheck := start
	for {
		if l.closed.Load() {
			return 0, l.closedErr(op)
		}
		atomic.StoreUint32(flag, 1)
		v := atomic.LoadUint32(word)
		if ready(v) {
			atomic.StoreUint32(flag, 0)
			return v, nil
		}
		if how := atomic.LoadUint32(l.closedW[1-l.side]); how != shmOpen {
			atomic.StoreUint32(flag, 0)
			if v := atomic.LoadUint32(word); ready(v) { // sent, then closed
				return v, nil
			}
			return 0, l.peerClosedErr(op, how)
		}
		nap := shmNap
		if l.timeout > 0 {
			left := l.timeout - time.Since(start)
			if left <= 0 {
				atomic.StoreUint32(flag, 0)
				return 0, fmt.Errorf("%s: no progress for %v (is the peer alive and running the same sequence of operations? %s sets the limit): %w",
					l.describe(op), l.timeout, EnvTimeout, ErrTimeout)
			}
			nap = min(nap, left)
		}
		futexWait(word, v, nap)
		atomic.StoreUint32(flag, 0)
		if now := time.Now(); now.Sub(lastCheck) >= shmLivenessEvery {
			lastCheck = now
			if why := processGone(l.peerPid); why != "" {
				if v := atomic.LoadUint32(word); ready(v) {
					return v, nil
				}
				return 0, fmt.Errorf("%s: %w: process %d %s", l.describe(op), ErrClosed, l.peerPid, why)
			}
		}
	}
}

// processGone says why pid no longer runs ("" while it does, or when that
// cannot be told).
func processGone(pid int) string {
	if pid <= 0 || pid == os.Getpid() {
		return ""
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return "died (it was killed or crashed)"
	}
	// A dead child that its parent has not reaped yet still answers kill.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return "died (it was killed or crashed; a zombie now)"
	}
	return ""
}

// parallelCopyMin is the batch size from which copyAll spreads its copies
// over goroutines: below it, starting them costs more than it saves.
const parallelCopyMin = 1 << 20

// copyThreads is how many goroutines copy a large batch
// (FLAGCX_SHM_COPY_THREADS, default 4; 1 copies on the calling goroutine).
var copyThreads = func() int {
	if n, err := strconv.Atoi(os.Getenv("FLAGCX_SHM_COPY_THREADS")); err == nil && n >= 1 && n <= 64 {
		return n
	}
	return 4
}()

// copyAll copies src[i] into dst[i] (each pair as copy does), spreading a
// large batch over copyThreads goroutines.
func copyAll(dst, src [][]byte) {
	total := 0
	for _, s := range src {
		total += len(s)
	}
	workers := min(copyThreads, len(src), runtime.GOMAXPROCS(0))
	if total < parallelCopyMin || workers < 2 {
		for i := range src {
			copy(dst[i], src[i])
		}
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(src); i += workers {
				copy(dst[i], src[i])
			}
		}(w)
	}
	for i := 0; i < len(src); i += workers {
		copy(dst[i], src[i])
	}
	wg.Wait()
}
