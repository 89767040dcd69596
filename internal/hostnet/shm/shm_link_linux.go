//go:build linux

package shm

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Point-to-point rings. A rank's p2p area holds one inbound ring per
// same-host peer (peer -> owner), the area divided evenly; ring k belongs
// to the k-th peer in the sorted list of the host's ranks without the
// owner. Each ring is
//
//	ctl    head (slots the sender published), tail (slots the receiver
//	       released), the sleeper counts of both, the closed words of both
//	       ends, each on its own line; then one 64-byte header per slot
//	       (message length, piece index)
//	data   slots x slotSize
//
// head and tail are 32-bit and wrap. A message of n bytes takes
// max(1, ceil(n/slotSize)) consecutive slots; every slot header repeats the
// message length, so a receiver expecting another length stops before
// copying anything.
const (
	shmSlotHdr      = 64
	shmRingSlots    = 8
	ctlHead         = 0 * shmLine
	ctlTail         = 1 * shmLine
	ctlRecvSleepers = 2 * shmLine
	ctlSendSleepers = 3 * shmLine
	ctlSenderClosed = 4 * shmLine
	ctlRecverClosed = 5 * shmLine
	ctlSlotHdrs     = 6 * shmLine
	minRingBytes    = 2 * shmPage
)

// Values of a closed word.
const (
	shmOpen uint32 = iota
	shmClosedByClose
	shmClosedByError
)

// shmRing is one side's view of one ring.
type shmRing struct {
	head, tail, recvSleepers, sendSleepers *uint32
	senderClosed, recverClosed             *uint32
	hdrs                                   []byte // slots x shmSlotHdr
	data                                   []byte // slots x slotSize
	slots, slotSize                        int
	pos                                    uint32 // slots this side published (sender) or released (receiver)
}

// ringBytes is the size of each inbound ring of an area of p2p bytes
// shared by peers peers (0 when they do not fit).
func ringBytes(p2p, peers int) int {
	if peers < 1 {
		return 0
	}
	b := p2p / peers &^ (shmPage - 1)
	if b < minRingBytes {
		return 0
	}
	return b
}

// inboundRing is ring k of segment s for a host of peers+1 ranks.
func inboundRing(s *ShmSegment, k, peers int) (shmRing, error) {
	rb := ringBytes(len(s.p2p), peers)
	if rb == 0 {
		return shmRing{}, fmt.Errorf("%w: the %s point-to-point area of pid %d cannot hold rings for %d peers (at least %s each): raise %s",
			ErrShmCapacity, bytesize.Human(int64(len(s.p2p))), s.pid, peers, bytesize.Human(minRingBytes), EnvShmP2PSize)
	}
	area := s.p2p[k*rb : (k+1)*rb]
	ctl := roundUp(ctlSlotHdrs+shmRingSlots*shmSlotHdr, shmPage)
	slotSize := (rb - ctl) / shmRingSlots &^ 63
	w := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&area[off])) }
	return shmRing{
		head: w(ctlHead), tail: w(ctlTail),
		recvSleepers: w(ctlRecvSleepers), sendSleepers: w(ctlSendSleepers),
		senderClosed: w(ctlSenderClosed), recverClosed: w(ctlRecverClosed),
		hdrs:  area[ctlSlotHdrs : ctlSlotHdrs+shmRingSlots*shmSlotHdr],
		data:  area[ctl : ctl+shmRingSlots*slotSize],
		slots: shmRingSlots, slotSize: slotSize,
	}, nil
}

func (r *shmRing) hdr(slot int) (total, piece *uint64) {
	h := unsafe.Pointer(&r.hdrs[slot*shmSlotHdr])
	return (*uint64)(h), (*uint64)(unsafe.Add(h, 8))
}

// ShmLink is a Link over shared memory to a process of this host: it sends
// through the peer's inbound ring for this rank and receives through its
// own inbound ring for the peer. Messages are whole, ordered and
// length-checked; it is full duplex (one Send and one Recv may run at once;
// two Sends or two Recvs must not overlap); Close, from any goroutine,
// unblocks both sides. After a failure in the middle of a message or a
// length mismatch it is broken: later calls fail at once with an error
// wrapping ErrClosed that quotes the first error, and the peer's calls fail
// with ErrClosed too. A Recv that timed out before any part of the next
// message arrived leaves it usable.
type ShmLink struct {
	peerRank, peerPid int
	timeout           time.Duration
	pol               shmPolicy
	tx, rx            shmRing
	sendWatch         *shmLinkWatch // made once: an interface conversion per wait would allocate
	recvWatch         *shmLinkWatch

	mu     sync.RWMutex // Send/Recv hold it shared; Close exclusive
	closed atomic.Bool
	broken atomic.Pointer[error]
}

// Transport is "shm".
func (l *ShmLink) Transport() string { return "shm" }

// PeerPid is the process on the other side.
func (l *ShmLink) PeerPid() int { return l.peerPid }

// String describes the link, e.g. "shm to rank 3 (pid 42, 8 x 1 MiB)".
func (l *ShmLink) String() string {
	return fmt.Sprintf("shm to rank %d (pid %d, %d x %s)", l.peerRank, l.peerPid, l.tx.slots, bytesize.Human(int64(l.tx.slotSize)))
}

// Close marks this side closed in both rings, wakes everybody waiting on
// them (here and in the peer) and waits for this side's Send and Recv to
// return. The mappings belong to the Mesh, which unmaps them once Close
// returns: so every Close waits, not only the first. (A one-sided peer
// that failed closes its link while the Mesh closes it too; a second Close
// that returned at once let the Mesh unmap the rings under a Recv still
// leaving them: a SIGSEGV in shmAwait.) Closing twice is harmless.
func (l *ShmLink) Close() error {
	if !l.closed.Swap(true) {
		l.markClosed(shmClosedByClose)
	}
	l.mu.Lock() // in-flight Send/Recv saw closed (or the wake) and left
	l.mu.Unlock()
	return nil
}

func (l *ShmLink) markClosed(how uint32) {
	atomic.CompareAndSwapUint32(l.tx.senderClosed, shmOpen, how)
	atomic.CompareAndSwapUint32(l.rx.recverClosed, shmOpen, how)
	for _, w := range []*uint32{l.tx.head, l.tx.tail, l.rx.head, l.rx.tail} {
		futexWake(w)
	}
}

// peerClosed is how the peer closed its side (shmOpen while it did not).
func (l *ShmLink) peerClosed() uint32 {
	if how := atomic.LoadUint32(l.rx.senderClosed); how != shmOpen {
		return how
	}
	return atomic.LoadUint32(l.tx.recverClosed)
}

func (l *ShmLink) describe(op string) string {
	return "hostnet: shm " + op + " rank " + strconv.Itoa(l.peerRank) + " (pid " + strconv.Itoa(l.peerPid) + ")"
}

// shmLinkWatch is what a blocked Send or Recv checks between naps.
type shmLinkWatch struct {
	l  *ShmLink
	op string
}

func (w *shmLinkWatch) stopped() error {
	l := w.l
	if l.closed.Load() {
		return l.closedErr(w.op)
	}
	if how := l.peerClosed(); how != shmOpen {
		return l.peerClosedErr(w.op, how)
	}
	if why := processGone(l.peerPid); why != "" {
		return peerGoneErr(l.describe(w.op), l.peerPid, why)
	}
	return nil
}

func (w *shmLinkWatch) timeoutErr(d time.Duration) error {
	return fmt.Errorf("%s: no progress for %v (is the peer alive and running the same sequence of operations? %s sets the limit): %w",
		w.l.describe(w.op), d, wire.EnvTimeout, wire.ErrTimeout)
}

// begin enters a Send or Recv.
func (l *ShmLink) begin(op string) error {
	l.mu.RLock()
	if l.closed.Load() {
		l.mu.RUnlock()
		return l.closedErr(op)
	}
	if b := l.broken.Load(); b != nil {
		l.mu.RUnlock()
		// %v: the earlier error (a timeout, say) was an earlier call's;
		// this one matches ErrClosed alone.
		return fmt.Errorf("%s: %w: unusable after an earlier error (%v); close it and connect again", l.describe(op), wire.ErrClosed, *b)
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
	return fmt.Errorf("%s: %w (closed by this side)", l.describe(op), wire.ErrClosed)
}

func (l *ShmLink) peerClosedErr(op string, how uint32) error {
	why := "closed by the peer"
	if how == shmClosedByError {
		why = "closed by the peer after an error on its side (a length mismatch or a broken message)"
	}
	return fmt.Errorf("%s: %w (%s)", l.describe(op), wire.ErrClosed, why)
}

// Send sends p as one message.
func (l *ShmLink) Send(p []byte) error {
	const op = "send to"
	if err := l.begin(op); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	if how := l.peerClosed(); how != shmOpen {
		return l.fail(l.peerClosedErr(op, how))
	}
	r := &l.tx
	S, K := r.slotSize, uint32(r.slots)
	n := len(p)
	pieces := max(1, (n+S-1)/S)
	var dst, src [][]byte
	for i := 0; i < pieces; {
		seen := atomic.LoadUint32(r.tail)
		if r.pos-seen >= K {
			v, err := shmAwait(r.tail, r.sendSleepers, r.pos-K+1, l.pol, l.timeout, l.sendWatch)
			if err != nil {
				return l.fail(err)
			}
			seen = v
		}
		// Fill every free slot at once: one publication, and the copies
		// of a large batch spread over cores.
		m := min(int(K-(r.pos-seen)), pieces-i)
		if m == 1 { // the small-message path: no slices to build
			slot := int(r.pos % K)
			lo := i * S
			total, piece := r.hdr(slot)
			*total, *piece = uint64(n), uint64(i)
			copy(r.data[slot*S:(slot+1)*S], p[lo:min(lo+S, n)])
		} else {
			dst, src = dst[:0], src[:0]
			for j := 0; j < m; j++ {
				slot := int((r.pos + uint32(j)) % K)
				lo := (i + j) * S
				dst = append(dst, r.data[slot*S:(slot+1)*S])
				src = append(src, p[lo:min(lo+S, n)])
				total, piece := r.hdr(slot)
				*total, *piece = uint64(n), uint64(i+j)
			}
			copyAll(dst, src)
		}
		r.pos += uint32(m)
		i += m
		shmPost(r.head, r.recvSleepers, r.pos)
	}
	return nil
}

// Recv receives one message of exactly len(p) bytes into p. A message of
// another length gives *LengthError (p untouched) and breaks the link.
func (l *ShmLink) Recv(p []byte) error { return l.recv(p, false) }

// RecvIdle is Recv for a link that is idle until a peer has work for it
// (hostnet.RecvIdle): the wait for the message to begin has no deadline
// and does not poll (shmPassive), so that a waiting progress goroutine
// does not keep a core, and the goroutines it hands work to, from
// running. The rest of the message is received as Recv does.
func (l *ShmLink) RecvIdle(p []byte) error { return l.recv(p, true) }

func (l *ShmLink) recv(p []byte, idle bool) error {
	const op = "recv from"
	if err := l.begin(op); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	r := &l.rx
	S, K := r.slotSize, uint32(r.slots)
	n := len(p)
	pieces := max(1, (n+S-1)/S)
	var dst, src [][]byte
	for i := 0; i < pieces; {
		seen := atomic.LoadUint32(r.head)
		if seen == r.pos {
			if how := l.peerClosed(); how != shmOpen && i == 0 {
				if seen = atomic.LoadUint32(r.head); seen == r.pos { // sent, then closed
					return l.fail(l.peerClosedErr(op, how))
				}
			}
			pol, timeout := l.pol, l.timeout
			if idle && i == 0 {
				pol, timeout = shmPassive, 0
			}
			v, err := shmAwait(r.head, r.recvSleepers, r.pos+1, pol, timeout, l.recvWatch)
			if err != nil {
				if v := atomic.LoadUint32(r.head); v != r.pos {
					seen = v // it arrived as the peer closed: take it
				} else if i == 0 && errors.Is(err, wire.ErrTimeout) {
					return err // nothing consumed: still in step
				} else {
					return l.fail(err)
				}
			} else {
				seen = v
			}
		}
		// Take every filled slot of this message at once (see Send).
		m := min(int(seen-r.pos), pieces-i)
		dst, src = dst[:0], src[:0]
		for j := 0; j < m; j++ {
			slot := int((r.pos + uint32(j)) % K)
			tp, pp := r.hdr(slot)
			total, piece := *tp, *pp
			if total != uint64(n) && piece == 0 && i+j == 0 {
				le := &wire.LengthError{Got: int(min(total, uint64(maxInt))), Want: n}
				l.fail(le)
				return le
			}
			if total != uint64(n) || piece != uint64(i+j) {
				return l.fail(fmt.Errorf("%s: slot %d holds piece %d of a %d-byte message where piece %d of %d bytes was due: %w",
					l.describe(op), slot, piece, total, i+j, n, wire.ErrProtocol))
			}
			lo := (i + j) * S
			if m == 1 {
				copy(p[lo:min(lo+S, n)], r.data[slot*S:(slot+1)*S])
				break
			}
			dst = append(dst, p[lo:min(lo+S, n)])
			src = append(src, r.data[slot*S:(slot+1)*S])
		}
		if m > 1 {
			copyAll(dst, src)
		}
		r.pos += uint32(m)
		i += m
		shmPost(r.tail, r.sendSleepers, r.pos)
	}
	return nil
}

const maxInt = int(^uint(0) >> 1)

// parallelCopyMin is the batch size from which copyAll spreads its copies
// over goroutines: below it, starting them costs more than it saves.
const parallelCopyMin = 1 << 20

// copyThreads is how many goroutines copy a large batch
// (FLAGCX_SHM_COPY_THREADS, default 4; 1 copies on the calling goroutine).
// A malformed value fails ShmConfigFromLookup first, so the default
// here only serves processes that never read their shared-memory
// configuration.
var copyThreads = func() int {
	n, err := env.ShmCopyThreads.Get(nil)
	if err != nil {
		return env.ShmCopyThreads.Default()
	}
	return n
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
