package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// osWindow is the one-sided state behind a Window handle.
type osWindow struct {
	o     *osState
	index int
	mem   osMem // this rank's memory
	sizes []int
	// peer is the mapping of each same-host peer's shared memory of this
	// window (its header first, onesided_shm.go), nil where the peer is
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

// osMem is one rank's memory of a window: host memory, or device memory
// of the rank's plugin.
type osMem struct {
	host []byte
	ptr  uintptr
	n    int
	dev  bool
}

func memOf(b Buffer) osMem { return osMem{host: b.host, ptr: b.ptr, n: b.n, dev: b.dev} }

// Records of a registration, exchanged by every rank (onesided_shm.go
// fills the name of shared memory).
const (
	osRecBytes  = 256
	osRecOK     = 1
	osRecDevice = 2
	osRecShared = 4
	osNameMax   = osRecBytes - 17
)

func (c *Comm) registerWindow(name string, buf Buffer, n int) (*Window, error) {
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	alloc := name == "AllocWindow"
	if !alloc && (buf.n != 0 || buf.host != nil || buf.ptr != 0) {
		if err := c.checkMem(name, "window", buf); err != nil {
			return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
		}
	}
	o, err := c.startOneSided(name)
	if err != nil {
		return nil, err
	}
	w := &osWindow{o: o, mem: memOf(buf), peer: make([][]byte, c.n)}
	var mine error
	if alloc {
		mine = o.allocate(w, n)
	}
	rec := make([]byte, osRecBytes)
	if mine == nil {
		rec[0] = osRecOK
		if w.mem.dev {
			rec[0] |= osRecDevice
		}
		binary.LittleEndian.PutUint64(rec[8:], uint64(w.mem.n))
		if nm := o.sharedName(w); nm != "" {
			rec[0] |= osRecShared
			rec[16] = byte(len(nm))
			copy(rec[17:], nm)
		}
	}
	all := make([]byte, osRecBytes*c.n)
	if err := c.world.Run(&sdk.Call{Coll: sdk.AllGather, Count: osRecBytes, DType: sdk.Uint8}, rec, all); err != nil {
		w.release()
		return nil, c.callError(name, err)
	}
	if err := o.adopt(w, all, mine); err != nil {
		w.release()
		return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
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
	oks := make([]byte, c.n)
	err = c.world.Run(&sdk.Call{Coll: sdk.AllGather, Count: 1, DType: sdk.Uint8}, ok[:], oks)
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
		w.release()
		return nil, c.callError(name, err)
	}
	buf = Buffer{host: w.mem.host, ptr: w.mem.ptr, n: w.mem.n, dev: w.mem.dev}
	return &Window{c: c, index: w.index, buf: buf, sizes: w.sizes, os: w}, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// adopt reads every rank's record: their sizes, and whether every rank
// registered (all fail alike when one did not).
func (o *osState) adopt(w *osWindow, all []byte, mine error) error {
	w.sizes = make([]int, o.n)
	var bad []int
	for r := 0; r < o.n; r++ {
		rec := all[r*osRecBytes : (r+1)*osRecBytes]
		if rec[0]&osRecOK == 0 {
			bad = append(bad, r)
			continue
		}
		sz := binary.LittleEndian.Uint64(rec[8:])
		if sz > 1<<50 || rec[16] > osNameMax {
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

func (c *Comm) windowAt(name string, index int) (*Window, error) {
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	w, err := c.os.window(index)
	if err != nil {
		return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	buf := Buffer{host: w.mem.host, ptr: w.mem.ptr, n: w.mem.n, dev: w.mem.dev}
	return &Window{c: c, index: w.index, buf: buf, sizes: w.sizes, os: w}, nil
}

// window is registration index of this rank (nil o: none yet).
func (o *osState) window(index int) (*osWindow, error) {
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
	osOK uint8 = iota
	osNoWindow
	osFreed
	osRange
	osFailed // a device copy failed on the peer
)

func osStatusText(code uint8) string {
	switch code {
	case osNoWindow:
		return "the window is not registered there"
	case osFreed:
		return "it freed its memory of the window (Window.Free) while this rank still used it"
	case osRange:
		return "the bytes lie outside its memory of the window"
	case osFailed:
		return "copying its device memory failed (see its log)"
	}
	return fmt.Sprintf("status %d", code)
}

// serving looks up window index for a peer's operation on [off, off+n)
// and holds it shared; release with w.mu.RUnlock. A status other than
// osOK says why not (nothing is held then).
func (o *osState) serving(index uint32, off, n uint64) (*osWindow, uint8) {
	o.mu.Lock()
	var w *osWindow
	if int64(index) < int64(len(o.windows)) {
		w = o.windows[index]
	}
	o.mu.Unlock()
	if w == nil {
		return nil, osNoWindow
	}
	w.mu.RLock()
	switch {
	case w.freed:
		w.mu.RUnlock()
		return nil, osFreed
	case off > uint64(w.mem.n) || n > uint64(w.mem.n)-off:
		w.mu.RUnlock()
		return nil, osRange
	}
	return w, osOK
}

func (w *Window) free() error {
	c := w.c
	if w.os.isFreed() {
		return nil
	}
	if err := c.usable("Window.Free"); err != nil {
		return err
	}
	return w.os.release()
}

// release unregisters the window here and frees what AllocWindow made,
// once the progress goroutines are done with it.
func (w *osWindow) release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed {
		return nil
	}
	w.freed = true
	return errors.Join(w.releaseShared(), w.releaseDevice())
}

// check is an operation's view of window w on both sides: its handle
// valid, its bytes inside this rank's and peer's memory.
func (c *Comm) checkRMA(name string, peer int, op RMA) error {
	if op.Local == nil || op.Remote == nil {
		if op.Bytes == 0 && op.Local == nil && op.Remote == nil {
			return nil
		}
		return fmt.Errorf("%w: %s on rank %d: the RMA needs both windows (Local and Remote)", sdk.ErrInvalidArgument, name, c.rank)
	}
	for _, w := range []*Window{op.Local, op.Remote} {
		if w.c != c {
			return fmt.Errorf("%w: %s on rank %d: window %d belongs to another communicator", sdk.ErrInvalidArgument, name, c.rank, w.index)
		}
	}
	if op.Local.os.isFreed() {
		return fmt.Errorf("%w: %s on rank %d: window %d was freed on this rank (Window.Free)", sdk.ErrInvalidUsage, name, c.rank, op.Local.index)
	}
	if op.Bytes < 0 || op.LocalOff < 0 || op.RemoteOff < 0 {
		return fmt.Errorf("%w: %s on rank %d: negative offset or length (local %d, remote %d, %d bytes)", sdk.ErrInvalidArgument, name, c.rank, op.LocalOff, op.RemoteOff, op.Bytes)
	}
	if ln := op.Local.sizes[c.rank]; op.LocalOff > ln || op.Bytes > ln-op.LocalOff {
		return fmt.Errorf("%w: %s on rank %d: bytes [%d, %d) lie outside this rank's %d bytes of window %d", sdk.ErrInvalidArgument, name, c.rank, op.LocalOff, op.LocalOff+op.Bytes, ln, op.Local.index)
	}
	if rn := op.Remote.sizes[peer]; op.RemoteOff > rn || op.Bytes > rn-op.RemoteOff {
		return fmt.Errorf("%w: %s on rank %d: bytes [%d, %d) lie outside rank %d's %d bytes of window %d", sdk.ErrInvalidArgument, name, c.rank, op.RemoteOff, op.RemoteOff+op.Bytes, peer, rn, op.Remote.index)
	}
	return nil
}

func (w *osWindow) isFreed() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.freed
}
