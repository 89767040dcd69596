package onesided

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The signal slots: one 8-byte slot per rank, slot r counting the signals
// rank r sent this rank (FlagCX's layout of a signal buffer).

// slots are a rank's signal slots: host memory (the communicator's own,
// or the caller's), or the caller's device memory (read and written by
// copies, under State.sigMu).
type slots struct {
	host []uint64
	dev  uintptr
}

// Wait is what WaitSignal waits for: this rank's slot of Peer to reach at
// least Value (core.SignalWait).
type Wait struct {
	Peer  int
	Value uint64
}

// addSignal adds one to slot r (a peer's signal, or this rank's own).
func (o *State) addSignal(r int) error {
	s := o.sig.Load()
	if s.host != nil {
		atomic.AddUint64(&s.host[r], 1)
		o.bell.ring()
		return nil
	}
	o.sigMu.Lock()
	defer o.sigMu.Unlock()
	s = o.sig.Load() // swapped while this waited?
	if s.host != nil {
		atomic.AddUint64(&s.host[r], 1)
	} else {
		var v uint64
		b := unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)
		if err := o.devRead(b, s.dev+uintptr(8*r)); err != nil {
			return err
		}
		v++
		if err := o.devWrite(s.dev+uintptr(8*r), b); err != nil {
			return err
		}
	}
	o.bell.ring()
	return nil
}

// SignalValue reads this rank's slot of peer (0 <= peer < Size()).
func (o *State) SignalValue(peer int) (uint64, error) {
	s := o.sig.Load()
	if s.host != nil {
		return atomic.LoadUint64(&s.host[peer]), nil
	}
	o.sigMu.Lock()
	defer o.sigMu.Unlock()
	var v uint64
	err := o.devRead(unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8), s.dev+uintptr(8*peer))
	return v, err
}

// CheckSignals checks m, a caller's memory of the rank's kind, as the
// signal slots of n ranks: 8 bytes each, 8-byte aligned. It runs before
// the machinery starts, so that a bad buffer starts nothing.
func CheckSignals(name string, rank, n int, m Mem) error {
	need := 8 * n
	addr := m.Ptr
	if !m.Dev && len(m.Host) > 0 {
		addr = uintptr(unsafe.Pointer(unsafe.SliceData(m.Host)))
	}
	if m.Len < need || addr%8 != 0 {
		return fmt.Errorf("%w: %s on rank %d: the signal buffer must hold %d ranks' 8-byte slots (%d bytes, 8-byte aligned); it has %d bytes at %#x",
			sdk.ErrInvalidArgument, name, rank, n, need, m.Len, addr)
	}
	return nil
}

// RegisterSignals makes m (checked by CheckSignals) this rank's slots, or
// the zero Mem the machinery's own. It is collective.
func (o *State) RegisterSignals(name string, m Mem) error {
	next := &slots{host: o.ownSig}
	switch {
	case m.IsZero():
	case m.Dev:
		next = &slots{dev: m.Ptr}
	default:
		next = &slots{host: unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(m.Host))), o.n)}
	}
	o.sigMu.Lock()
	o.sig.Store(next)
	o.sigMu.Unlock()
	// Every rank swapped before any returns: a signal sent after this
	// call lands in the new slots.
	if err := o.c.AllGather(nil, nil); err != nil {
		return o.c.CallError(name, err)
	}
	return nil
}

// WaitSignal waits until each slot named in waits (at least one) holds at
// least its value, after the work on s.
func (o *State) WaitSignal(name string, waits []Wait, s loader.Stream) error {
	for _, w := range waits {
		if err := sdk.CheckPeer(w.Peer, o.n); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
		}
	}
	if err := o.syncStream(s); err != nil {
		return o.c.CallError(name, err)
	}
	have := make([]uint64, len(waits))
	ready := func() (bool, error) {
		all := true
		for i, w := range waits {
			v, err := o.SignalValue(w.Peer)
			if err != nil {
				return false, err
			}
			have[i] = v
			all = all && v >= w.Value
		}
		return all, nil
	}
	progress := func() uint64 {
		var sum uint64
		for _, v := range have {
			sum += v
		}
		return sum
	}
	late := func() error {
		var missing []string
		for i, w := range waits {
			if have[i] < w.Value {
				missing = append(missing, fmt.Sprintf("rank %d%s signalled %d times, %d awaited", w.Peer, o.links.HostOf(w.Peer), have[i], w.Value))
			}
		}
		return fmt.Errorf("%w: %s on rank %d: no signal before the deadline: %s (is the peer alive, and does it signal as often as this rank waits? %s sets the deadline, %v): %w",
			sdk.ErrRemoteError, name, o.rank, strings.Join(missing, "; "), hostnet.EnvTimeout, o.timeout, hostnet.ErrTimeout)
	}
	return o.await(name, ready, progress, late)
}
