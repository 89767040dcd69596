//go:build linux

package shm

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// ShmNode is what the ranks of one host share for collectives: every
// rank's staging window, and a step counter per rank with which they agree
// that a step's data is in place.
//
// A step is: write into your own window, Sync (publish the step, wait
// until every rank of the host has published it), read any window. The
// caller keeps the rule that makes two halves of each window enough: at
// step t a rank writes only into half t&1 of its window (or, after Sync,
// into half (t+1)&1 for the next step), and reads step t's data only
// before its next Sync. Every rank's reads of a half then end before
// anyone writes that half again (two Syncs later).
type ShmNode struct {
	ranks   []int // communicator ranks of this host, ascending
	me      int   // this rank's index in ranks
	segs    []*ShmSegment
	timeout time.Duration
	pol     shmPolicy
	step    uint32       // the last step this rank published
	sig     uint64       // its label
	watch   []*nodeWatch // per rank index, made once (an interface conversion per wait would allocate)
	mem     memMaps      // registered memory (NewMem, MapMem)

	mu     sync.RWMutex // held shared from Enter to Exit; Close waits for it before the Mesh unmaps
	closed atomic.Bool
	// closeOnce runs Close's wait once; released is its outcome.
	closeOnce sync.Once
	released  bool
	broken    error
	gate      func() error // SetGate
}

// SetGate makes every Enter run gate once it holds the windows, and fail
// with its error: a rank whose device, or a goroutine it handed a step to,
// may still use the windows for earlier steps (core's relays) finishes
// them before anything else writes a window or publishes a step. Each
// step lets the other ranks write a half of their windows again, and a
// rank writes its own half only after its last step is published.
func (n *ShmNode) SetGate(gate func() error) { n.gate = gate }

// Size is the number of ranks of the host; Index this rank's position.
func (n *ShmNode) Size() int  { return len(n.ranks) }
func (n *ShmNode) Index() int { return n.me }

// Ranks are the communicator ranks of the host, ascending.
func (n *ShmNode) Ranks() []int { return append([]int(nil), n.ranks...) }

// Window is the staging window of the rank at index i; this rank writes
// only its own.
func (n *ShmNode) Window(i int) []byte { return n.segs[i].window }

// Step is the last step published by Sync (0 before the first).
func (n *ShmNode) Step() uint32 { return n.step }

// Cores is how many cores each rank of the host may keep busy: the
// host's cores shared evenly, at least one.
func (n *ShmNode) Cores() int { return max(1, runtime.NumCPU()/len(n.ranks)) }

// Enter starts a use of the windows (steps and the reads and writes between
// them) that lasts until Exit: the mappings stay until then, even when
// another goroutine closes the node (its Post and Wait then fail fast).
func (n *ShmNode) Enter() error {
	if err := n.EnterUngated(); err != nil {
		return err
	}
	if n.gate != nil {
		if err := n.gate(); err != nil {
			n.mu.RUnlock()
			return err
		}
	}
	return nil
}

// EnterUngated is Enter without the gate (SetGate), for the uses that
// keep the gate's rule themselves: core's relay that follows relays on
// the same stream, and its drain when the communicator ends.
func (n *ShmNode) EnterUngated() error {
	n.mu.RLock()
	if n.closed.Load() {
		n.mu.RUnlock()
		return n.closedErr()
	}
	return nil
}

// Hold takes one more use of the windows, to be ended by Exit on another
// goroutine: a caller inside Enter hands a step over that way, and the
// windows stay mapped until it is done. It never waits; once the node is
// shut it fails.
func (n *ShmNode) Hold() error {
	if !n.mu.TryRLock() {
		return n.closedErr()
	}
	if n.closed.Load() {
		n.mu.RUnlock()
		return n.closedErr()
	}
	return nil
}

// Exit ends what Enter started.
func (n *ShmNode) Exit() { n.mu.RUnlock() }

// Sync publishes the next step, labelled sig (what the step is for: the
// same operation and count give the same label on every rank), and waits
// until every rank of the host has published it: Post, then Wait for each.
// Like Post and Wait, it is called between Enter and Exit.
func (n *ShmNode) Sync(sig uint64) error {
	if err := n.Post(sig); err != nil {
		return err
	}
	for i := range n.segs {
		if err := n.Wait(i); err != nil {
			return err
		}
	}
	return nil
}

// Post publishes step Step()+1 labelled sig. After an error of Wait the
// node is broken (the ranks are out of step) and Post fails at once.
func (n *ShmNode) Post(sig uint64) error {
	if n.closed.Load() {
		return n.closedErr()
	}
	if n.broken != nil {
		// %v: the earlier Wait's error (a timeout, a mismatch) is not this
		// call's; it matches ErrClosed alone.
		return fmt.Errorf("hostnet: shm step: %w: unusable after an earlier error (%v)", wire.ErrClosed, n.broken)
	}
	n.step++
	n.sig = sig
	own := n.segs[n.me]
	// Two labels, by parity: a peer can be one step ahead (it saw this
	// rank publish), never two.
	atomic.StoreUint64(&own.sig[n.step&1], sig)
	shmPost(own.seq, own.sleepers, n.step)
	return nil
}

// Wait waits until the rank at index i has published step Step(); a rank
// that labelled it otherwise gives an error wrapping ErrMismatch. Waiting
// for this rank itself returns at once.
func (n *ShmNode) Wait(i int) error {
	if i == n.me {
		return nil
	}
	if n.closed.Load() {
		return n.closedErr()
	}
	if n.broken != nil {
		// %v: as in Post, the earlier error is not this call's.
		return fmt.Errorf("hostnet: shm step: %w: unusable after an earlier error (%v)", wire.ErrClosed, n.broken)
	}
	s := n.segs[i]
	_, err := shmAwait(s.seq, s.sleepers, n.step, n.pol, n.timeout, n.watch[i])
	if err == nil {
		if got := atomic.LoadUint64(&s.sig[n.step&1]); got != n.sig {
			err = fmt.Errorf("%s: %w", n.watch[i].what(), &wire.MismatchError{Got: got, Want: n.sig})
		}
	}
	if err != nil {
		n.broken = err
		// Peers waiting for this rank would otherwise wait for the deadline.
		own := n.segs[n.me]
		atomic.CompareAndSwapUint32(own.closed, shmOpen, shmClosedByError)
		futexWake(own.seq)
	}
	return err
}

type nodeWatch struct {
	n *ShmNode
	i int
}

func (w *nodeWatch) what() string {
	return "hostnet: shm step " + strconv.FormatUint(uint64(w.n.step), 10) + " waiting for rank " + strconv.Itoa(w.n.ranks[w.i])
}

func (w *nodeWatch) stopped() error {
	n, s := w.n, w.n.segs[w.i]
	if n.closed.Load() {
		return n.closedErr()
	}
	switch atomic.LoadUint32(s.closed) {
	case shmClosedByClose:
		return fmt.Errorf("%s: %w (it destroyed or aborted its communicator)", w.what(), wire.ErrClosed)
	case shmClosedByError:
		return fmt.Errorf("%s: %w (it failed an earlier step)", w.what(), wire.ErrClosed)
	}
	if why := processGone(s.pid); why != "" {
		return peerGoneErr(w.what(), s.pid, why)
	}
	return nil
}

func (w *nodeWatch) timeoutErr(d time.Duration) error {
	return fmt.Errorf("%s: no progress for %v (is it alive and running the same sequence of operations? %s sets the limit): %w",
		w.what(), d, wire.EnvTimeout, wire.ErrTimeout)
}

func (n *ShmNode) closedErr() error {
	return fmt.Errorf("hostnet: shm step: %w (closed by this side)", wire.ErrClosed)
}

// Closing reports whether Close has begun: a wait that is not the node's
// own (a device's word that a hold waits for) stops at it, since Close
// waits for the holds to end.
func (n *ShmNode) Closing() bool { return n.closed.Load() }

// Shut is the first half of Close, and never waits: it tells the host's
// ranks that this one is gone and wakes every wait on the windows (here
// and theirs), which then fails. A rank tearing down shuts its node before
// anything that may wait on it (a device whose stream a use of the windows
// synchronizes), and closes it after.
func (n *ShmNode) Shut() {
	if n.closed.Swap(true) {
		return
	}
	own := n.segs[n.me]
	atomic.CompareAndSwapUint32(own.closed, shmOpen, shmClosedByClose)
	for _, s := range n.segs {
		futexWake(s.seq)
	}
}

// Close shuts the node and waits for this rank's uses of the windows
// (Enter or Hold to Exit) to end, for at most the node's deadline. It
// reports whether they ended: when one did not (a device copy it waits
// for may still write a window), the windows must stay mapped, and the
// Mesh leaks them rather than unmap memory still in use. Closing twice
// is harmless.
func (n *ShmNode) Close() (released bool) {
	n.Shut()
	n.closeOnce.Do(func() {
		n.released = n.awaitUses()
		n.unlinkAllMem()
	})
	return n.released
}

// awaitUses waits until no use of the windows is left. It polls rather
// than queue for the write lock: a queued writer would block every later
// Enter and Hold, which must instead see the node closed and leave.
func (n *ShmNode) awaitUses() bool {
	start := time.Now()
	for nap := time.Microsecond; ; nap = min(2*nap, time.Millisecond) {
		if n.mu.TryLock() {
			n.mu.Unlock()
			return true
		}
		if n.timeout > 0 && time.Since(start) > n.timeout {
			return false
		}
		time.Sleep(nap)
	}
}
