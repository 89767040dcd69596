package onesided

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// The window table: windows registered collectively, each named by its
// registration number on every rank, and the lookups of the peers'
// operations on this rank's windows.

// Window is this rank's state of one registered window (the state behind
// core's Window handle).
type Window struct {
	o     *State
	index int
	mem   Mem // this rank's memory
	sizes []int
	// peer is the mapping of each same-host peer's shared memory of this
	// window (its header first, shm.go), nil where the peer is
	// reached through its progress goroutines.
	peer [][]byte
	// shared is this rank's own shared memory of the window (header
	// first), when AllocWindow made it so; dev: AllocWindow's device
	// memory. Free releases them.
	shared  []byte
	shmName string
	dev     uintptr

	// mu: the progress goroutines serving a peer hold it shared while
	// they read or write mem; Free takes it exclusively.
	mu    sync.RWMutex
	freed bool
}

// Mem is one rank's memory (core's Buffer): host memory, or device memory
// of the rank's plugin.
type Mem struct {
	Host []byte
	Ptr  uintptr
	Len  int
	Dev  bool
}

// IsZero reports whether m names no memory (core's zero Buffer).
func (m Mem) IsZero() bool { return m.Len == 0 && m.Host == nil && m.Ptr == 0 }

// Records of a registration, exchanged by every rank (shm.go
// fills the name of shared memory).
const (
	recBytes  = 256
	recOK     = 1
	recDevice = 2
	recShared = 4
	nameMax   = recBytes - 17
)

// Register registers m, this rank's memory of the kind its rank has
// (checked by the caller), as a window for the user's call name
// (RegisterWindow). It is collective: it returns once every rank has
// registered, or with the same failure on every rank.
func (o *State) Register(name string, m Mem) (*Window, error) {
	return o.register(name, &Window{o: o, mem: m, peer: make([][]byte, o.n)}, false, 0)
}

// Alloc allocates n zeroed bytes of this rank's memory and registers them
// as a window (AllocWindow; collective, as Register): shared memory that
// the host's other ranks map on a host rank with peers on its host,
// device memory on a device rank, plain host memory otherwise.
func (o *State) Alloc(name string, n int) (*Window, error) {
	return o.register(name, &Window{o: o, peer: make([][]byte, o.n)}, true, n)
}

// register runs the two exchanges of a registration: every rank's record
// (whether it has its memory, its size, the name of its shared memory),
// then whether every rank mapped its host's peers' shared memory.
func (o *State) register(name string, w *Window, alloc bool, n int) (*Window, error) {
	var mine error
	if alloc {
		mine = o.allocate(w, n)
	}
	all := make([]byte, recBytes*o.n)
	if err := o.c.AllGather(o.record(w, mine), all); err != nil {
		w.Release()
		return nil, o.c.CallError(name, err)
	}
	if err := o.adopt(w, all, mine); err != nil {
		w.Release()
		return nil, fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
	}
	// The window is in the table before the second exchange: a peer that
	// returns from it may use the window at once.
	o.mu.Lock()
	w.index = len(o.windows)
	o.windows = append(o.windows, w)
	o.mu.Unlock()
	var ok [1]byte
	if mine = o.mapPeers(w, all); mine == nil {
		ok[0] = 1
	}
	oks := make([]byte, o.n)
	err := o.c.AllGather(ok[:], oks)
	o.unlinkShared(w) // every peer mapped it, or gave up
	var bad []int
	for r, v := range oks {
		if v != 1 {
			bad = append(bad, r)
		}
	}
	if err == nil && len(bad) > 0 {
		err = fmt.Errorf("%w: ranks %s could not map the shared memory of their host's peers (see their errors)%s", sdk.ErrSystemError, sched.FormatRanks(bad), errText(mine))
	}
	if err != nil {
		// Every rank saw the same statuses: all drop the registration.
		o.mu.Lock()
		o.windows = o.windows[:w.index]
		o.mu.Unlock()
		w.Release()
		return nil, o.c.CallError(name, err)
	}
	return w, nil
}

// record is this rank's record of w for the first exchange (all zero when
// its memory failed: mine).
func (o *State) record(w *Window, mine error) []byte {
	rec := make([]byte, recBytes)
	if mine == nil {
		rec[0] = recOK
		if w.mem.Dev {
			rec[0] |= recDevice
		}
		binary.LittleEndian.PutUint64(rec[8:], uint64(w.mem.Len))
		if nm := o.sharedName(w); nm != "" {
			rec[0] |= recShared
			rec[16] = byte(len(nm))
			copy(rec[17:], nm)
		}
	}
	return rec
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// adopt reads every rank's record: their sizes, and whether every rank
// registered (all fail alike when one did not).
func (o *State) adopt(w *Window, all []byte, mine error) error {
	w.sizes = make([]int, o.n)
	var bad []int
	for r := 0; r < o.n; r++ {
		rec := all[r*recBytes : (r+1)*recBytes]
		if rec[0]&recOK == 0 {
			bad = append(bad, r)
			continue
		}
		sz := binary.LittleEndian.Uint64(rec[8:])
		if sz > 1<<50 || rec[16] > nameMax {
			return fmt.Errorf("%w: rank %d sent a window record that does not parse (size %d, name of %d bytes)", sdk.ErrInternalError, r, sz, rec[16])
		}
		w.sizes[r] = int(sz)
	}
	if mine != nil {
		return mine
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: ranks %s could not allocate their memory of the window (see their errors)", sdk.ErrSystemError, sched.FormatRanks(bad))
	}
	return nil
}

// Window is registration index of this rank (nil o: none yet).
func (o *State) Window(index int) (*Window, error) {
	if o == nil {
		return nil, fmt.Errorf("%w: no window is registered", sdk.ErrInvalidUsage)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if index < 0 || index >= len(o.windows) {
		return nil, fmt.Errorf("%w: window %d is not registered (windows 0..%d are)", sdk.ErrInvalidArgument, index, len(o.windows)-1)
	}
	return o.windows[index], nil
}

// Why a peer refused an operation on one of this rank's windows (the
// status of its answer).
const (
	statusOK uint8 = iota
	statusNoWindow
	statusFreed
	statusRange
	statusFailed // a device copy failed on the peer
)

func statusText(code uint8) string {
	switch code {
	case statusNoWindow:
		return "the window is not registered there"
	case statusFreed:
		return "it freed its memory of the window (Window.Free) while this rank still used it"
	case statusRange:
		return "the bytes lie outside its memory of the window"
	case statusFailed:
		return "copying its device memory failed (see its log)"
	}
	return fmt.Sprintf("status %d", code)
}

// serving looks up window index for a peer's operation on [off, off+n)
// and holds it shared; release with w.mu.RUnlock. A status other than
// statusOK says why not (nothing is held then).
func (o *State) serving(index uint32, off, n uint64) (*Window, uint8) {
	o.mu.Lock()
	var w *Window
	if int64(index) < int64(len(o.windows)) {
		w = o.windows[index]
	}
	o.mu.Unlock()
	if w == nil {
		return nil, statusNoWindow
	}
	w.mu.RLock()
	switch {
	case w.freed:
		w.mu.RUnlock()
		return nil, statusFreed
	case off > uint64(w.mem.Len) || n > uint64(w.mem.Len)-off:
		w.mu.RUnlock()
		return nil, statusRange
	}
	return w, statusOK
}

// Index is the window's registration number, the same on every rank.
func (w *Window) Index() int { return w.index }

// Size is rank's size of the window (as it registered it), 0 for a rank
// out of range.
func (w *Window) Size(rank int) int {
	if rank < 0 || rank >= len(w.sizes) {
		return 0
	}
	return w.sizes[rank]
}

// Mem is this rank's memory of the window (for Alloc, the memory it
// allocated).
func (w *Window) Mem() Mem { return w.mem }

// Release unregisters the window here and frees what Alloc made, once the
// progress goroutines are done with it (Window.Free; a second does
// nothing).
func (w *Window) Release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed {
		return nil
	}
	w.freed = true
	return errors.Join(w.releaseShared(), w.releaseDevice())
}

// Freed reports whether the window was released on this rank.
func (w *Window) Freed() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.freed
}
