package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/onesided"
	"github.com/flagcx/flagcx-go/sdk"
)

// One-sided communication: registered windows, Put and Get of bytes between
// a window of this rank and the same window of a peer, signals and a
// completion counter (FlagCX's flagcxOneSideRegister, flagcxPut, flagcxGet,
// flagcxPutSignal, flagcxSignal, flagcxWaitSignal, flagcxReadCounter,
// flagcxWaitCounter; docs/onesided.md has the design, the transports and
// the limits). The machinery is core/internal/onesided; these methods
// check what is the communicator's (usable, outside a group, memory of the
// rank's kind) and hand each call to it (core/onesided_comm.go has what it
// asks of the communicator).
//
// A window is registered collectively: every rank calls RegisterWindow (or
// AllocWindow) in the same order, each with its own memory of any size, and
// gets a handle whose Index is the same on every rank (FlagCX's
// memory-region index). The handle then names that window on every rank:
// Put(peer, RMA{Local: w, LocalOff: a, Remote: w, RemoteOff: b, Bytes: n})
// writes n bytes of this rank's window w at a into peer's window w at b.
// Local and Remote may be different windows.
//
// Every rank has a signal slot per rank: slot r counts the signals rank r
// sent it (PutSignal, Signal), as in FlagCX, where the signal of rank r
// lands at offset 8*r of the target's signal buffer. WaitSignal waits until
// slots reach values. The slots are this communicator's own memory unless
// RegisterSignals gives it the caller's.
//
// A passive target calls nothing: progress goroutines of each communicator
// serve the peers' puts, gets and signals while its user does anything
// else, and Destroy stops them.
//
//	w, err := c.AllocWindow(1 << 20)            // every rank: 1 MiB each, shared memory where it can
//	buf := w.Buffer().Host()                    // this rank's memory (a host rank)
//	if c.Rank() == 0 {
//		copy(buf, data)
//		err = c.PutSignal(1, core.RMA{Local: w, Remote: w, Bytes: len(data)}, 0)
//	} else if c.Rank() == 1 {
//		err = c.WaitSignal([]core.SignalWait{{Peer: 0, Value: 1}}, 0) // data is in buf now
//	}
//	err = w.Free()                              // every rank, once no peer uses it
//
// Ordering and completion. Operations of one rank to one peer take effect at
// the peer in the order they were issued: once a signal that rank r sent
// after a Put is seen, the Put's bytes are in place. On a host rank (stream
// 0) Put, PutBatch, PutSignal and Signal return once their source may be
// reused, Get once its bytes are in the local window; the completion
// counter (ReadCounter) counts the operations this rank issued whose effect
// at the peer is complete (a Put's bytes written there, a Get's bytes
// here), and WaitCounter waits for it. On a device rank each call first
// waits for the work already on s (the source may be a kernel's output),
// and a Get's bytes are in the device window when it returns, so the next
// work on s may use them: the calls are ordered on s as the collectives of
// a heterogeneous communicator are.
//
// Every wait is bounded by the communicator's deadline (FLAGCX_TIMEOUT,
// WithTimeout): a peer that never signals, or a Get it never answers,
// fails the wait with sdk.ErrRemoteError and ErrTimeout naming that peer.
// A window freed on its rank while a peer still uses it fails that peer's
// operation with sdk.ErrInvalidUsage naming the rank and the window.

// Window is one registered memory region of a communicator: this rank's
// memory, and the handle by which a peer's memory of the same registration
// is named. Its methods are for the goroutine that uses the communicator.
type Window struct {
	c   *Comm
	buf Buffer // this rank's memory
	// os is the one-sided state behind the handle
	// (core/internal/onesided/window.go).
	os *onesided.Window
}

// RMA is one one-sided transfer between this rank and a peer: Bytes bytes
// at LocalOff of this rank's window Local and at RemoteOff of the peer's
// window Remote (the peer's memory of that registration). Put reads the
// local side and writes the remote one, Get the reverse. Offsets and
// lengths are in bytes, any value that keeps both sides inside their
// windows (unaligned ones included).
type RMA struct {
	Local     *Window
	LocalOff  int
	Remote    *Window
	RemoteOff int
	Bytes     int
}

// SignalWait is what WaitSignal waits for: this rank's signal slot of Peer
// (the count of signals Peer sent it) to reach at least Value.
type SignalWait struct {
	Peer  int
	Value uint64
}

// RegisterWindow registers buf, this rank's memory (host memory on a host
// rank, device memory of its plugin on a device rank; any size, 0
// included), as a window for one-sided calls, and returns its handle. It
// is collective: every rank calls it, in the same order relative to the
// other registrations and collective calls, and it returns once every
// rank has registered its memory. The memory must stay valid until
// Window.Free. Peers reach it through this rank's progress goroutines
// (a copy through the links' buffers); AllocWindow's memory is read and
// written by the peers of this host directly.
func (c *Comm) RegisterWindow(buf Buffer) (*Window, error) {
	const name = "RegisterWindow"
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	m := memOf(buf)
	if !m.IsZero() {
		if err := c.checkMem(name, "window", buf); err != nil {
			return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
		}
	}
	o, err := c.startOneSided(name)
	if err != nil {
		return nil, err
	}
	return c.handle(o.Register(name, m))
}

// AllocWindow allocates n zeroed bytes of this rank's memory and registers
// them as a window (as RegisterWindow; collective). On a host rank whose
// host has other ranks of the communicator, the memory is shared memory
// that those ranks map: their Puts and Gets copy straight into and out of
// it, without this rank's progress goroutines (zero-copy). Elsewhere it
// is ordinary host memory, and on a device rank device memory of its
// plugin. Window.Free releases it.
func (c *Comm) AllocWindow(n int) (*Window, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: AllocWindow on rank %d: size %d is negative", sdk.ErrInvalidArgument, c.rank, n)
	}
	const name = "AllocWindow"
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	o, err := c.startOneSided(name)
	if err != nil {
		return nil, err
	}
	return c.handle(o.Alloc(name, n))
}

// Window is the window of registration number index (0 for the first
// RegisterWindow or AllocWindow, FlagCX's memory-region index), or an
// error naming the registered range.
func (c *Comm) Window(index int) (*Window, error) {
	const name = "Window"
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	w, err := c.os.Window(index)
	if err != nil {
		return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	return c.handle(w, nil)
}

// Index is the window's registration number, the same on every rank.
func (w *Window) Index() int { return w.os.Index() }

// Buffer is this rank's memory of the window (for AllocWindow, the memory
// it allocated).
func (w *Window) Buffer() Buffer { return w.buf }

// Size is rank's size of the window (as it registered it).
func (w *Window) Size(rank int) int { return w.os.Size(rank) }

// Free unregisters the window on this rank (and releases AllocWindow's
// memory) once the peers' operations on it that are being served have
// finished; later operations of peers on this rank's window fail with an
// error naming it, and so do this rank's operations on the handle. It is
// not collective: each rank frees its own, after its peers are done with
// it (a barrier, or a signal, tells it so). A second Free does nothing.
func (w *Window) Free() error {
	if w.os.Freed() {
		return nil
	}
	if err := w.c.usable("Window.Free"); err != nil {
		return err
	}
	return w.os.Release()
}

// Put writes op.Bytes bytes of this rank's window op.Local at op.LocalOff
// into peer's window op.Remote at op.RemoteOff (see the ordering and
// completion rules above).
func (c *Comm) Put(peer int, op RMA, s Stream) error {
	return c.rma("Put", peer, []RMA{op}, onesided.Put, s)
}

// PutBatch is Put of each of ops to peer, in order (FlagCX's
// flagcxBatchPut), issued together.
func (c *Comm) PutBatch(peer int, ops []RMA, s Stream) error {
	return c.rma("PutBatch", peer, ops, onesided.Put, s)
}

// Get reads op.Bytes bytes of peer's window op.Remote at op.RemoteOff into
// this rank's window op.Local at op.LocalOff, and returns once they are in
// place.
func (c *Comm) Get(peer int, op RMA, s Stream) error {
	return c.rma("Get", peer, []RMA{op}, onesided.Get, s)
}

// PutSignal is Put followed by a signal to peer: once peer sees its slot
// of this rank grow by one, the bytes are in place. With op.Bytes 0 it is
// Signal.
func (c *Comm) PutSignal(peer int, op RMA, s Stream) error {
	return c.rma("PutSignal", peer, []RMA{op}, onesided.PutSignal, s)
}

// Signal adds one to peer's signal slot of this rank, after this rank's
// earlier operations on peer took effect.
func (c *Comm) Signal(peer int, s Stream) error {
	return c.rma("Signal", peer, nil, onesided.Signal, s)
}

// WaitSignal waits until each of this rank's signal slots named in waits
// holds at least its value (FlagCX's flagcxWaitSignal: Value is the count
// of signals expected from Peer since the slot was last zero). An empty
// waits returns at once. Past the deadline it fails naming the peers
// whose signals are missing, and how far each got.
func (c *Comm) WaitSignal(waits []SignalWait, s Stream) error {
	const name = "WaitSignal"
	if len(waits) == 0 {
		return nil
	}
	o, err := c.osNeed(name)
	if err != nil {
		return err
	}
	ws := make([]onesided.Wait, len(waits))
	for i, w := range waits {
		ws[i] = onesided.Wait{Peer: w.Peer, Value: w.Value}
	}
	return o.WaitSignal(name, ws, s)
}

// SignalValue is this rank's signal slot of peer: how many signals peer
// sent it since the slot was last zero.
func (c *Comm) SignalValue(peer int) (uint64, error) {
	const name = "SignalValue"
	if err := c.osBegin(name); err != nil {
		return 0, err
	}
	if err := sdk.CheckPeer(peer, c.n); err != nil {
		return 0, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	if c.os == nil {
		return 0, nil
	}
	return c.os.SignalValue(peer)
}

// RegisterSignals makes buf this rank's signal slots (FlagCX's
// flagcxOneSideSignalRegister): Count() 8-byte words, word r counting the
// signals of rank r, that the caller may read or reset (to zero, between
// rounds its peers agree on). buf is host memory on a host rank, device
// memory on a device rank (its slots are then read and written by copies),
// 8-byte aligned and at least 8*Count() bytes. The zero Buffer returns to
// the communicator's own slots, which start at zero. It is collective (so
// that no peer signals into the slots being replaced) and keeps the slots'
// values only where the caller's memory holds them.
func (c *Comm) RegisterSignals(buf Buffer) error {
	const name = "RegisterSignals"
	if err := c.osBegin(name); err != nil {
		return err
	}
	m := memOf(buf)
	if !m.IsZero() {
		if err := c.checkMem(name, "signal", buf); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
		}
		if err := onesided.CheckSignals(name, c.rank, c.n, m); err != nil {
			return err
		}
	}
	o, err := c.startOneSided(name)
	if err != nil {
		return err
	}
	return o.RegisterSignals(name, m)
}

// RegisterStaging gives this rank host memory (FlagCX's
// flagcxOneSideStagingRegister) through which the transfers of a device
// rank's windows are staged, in pieces of its length, instead of memory
// the communicator allocates from its plugin (HostMalloc). On a host rank
// it is accepted and unused. nil returns to the communicator's own. The
// memory must stay valid until the next RegisterStaging or Destroy.
func (c *Comm) RegisterStaging(buf []byte) error {
	const name = "RegisterStaging"
	if err := c.osBegin(name); err != nil {
		return err
	}
	if err := onesided.CheckStaging(name, c.rank, buf); err != nil {
		return err
	}
	c.osStaging = buf
	if c.os != nil {
		c.os.SetStaging(buf)
	}
	return nil
}

// ReadCounter is the number of one-sided operations this rank issued
// whose effect at the peer is complete (each RMA of a PutBatch counts
// one; Signal one). It only grows.
func (c *Comm) ReadCounter() uint64 {
	if c.os == nil {
		return 0
	}
	return c.os.Counter()
}

// WaitCounter waits until ReadCounter reaches target, or fails past the
// deadline naming the peers whose operations are outstanding, or with the
// first error a peer reported for this rank's operations (a window it
// freed, say). A target above the operations this rank has issued, which
// the counter can never reach, fails at once (sdk.ErrInvalidArgument,
// naming both).
func (c *Comm) WaitCounter(target uint64) error {
	o, err := c.osNeed("WaitCounter")
	if err != nil {
		if c.os == nil && target == 0 {
			return nil
		}
		return err
	}
	return o.WaitCounter(target)
}
