package core

import (
	"errors"
	"fmt"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// The one-sided state of a communicator: its own links, the window table,
// the signal slots, the completion counter, and the goroutines that serve
// the peers. The transports are in files of their own: onesided_link.go
// (messages over the one-sided links: shared-memory rings, TCP, the net
// plugin), onesided_shm.go (same host, straight into a peer's shared
// window), onesided_device.go (device memory, through host staging).

// rmaKind is what an RMA call does.
type rmaKind uint8

const (
	rmaPut rmaKind = iota + 1
	rmaGet
	rmaPutSignal
	rmaSignal
)

// osState is a communicator's one-sided machinery, started by its first
// window registration (collective, so every rank starts it at the same
// call).
type osState struct {
	c       *Comm
	rank, n int
	// rma is a host communicator of every rank whose links carry nothing
	// but one-sided traffic (see startOneSided).
	rma     *hostcomm.Comm
	timeout time.Duration

	mu      sync.Mutex
	windows []*osWindow // by registration number

	peers []*osPeer // by rank; nil for this rank

	sigMu  sync.Mutex                // serializes the device slots' read-modify-write, and swaps
	sig    atomic.Pointer[osSignals] // the slots in use
	ownSig []uint64                  // the communicator's own slots

	// local counts the completed operations that needed no peer's
	// acknowledgement (to this rank itself, or straight into a same-host
	// window).
	local atomic.Uint64

	staging    []byte // RegisterStaging's, or nil
	ownStaging []byte

	bell    osBell
	wg      sync.WaitGroup
	stopped chan struct{}
	stopMu  sync.Mutex
	down    error // why the machinery stopped (Destroy, Abort)
}

// osBell wakes the goroutines waiting for a signal, an acknowledgement or
// an answer: ring closes the channel that wait handed out.
type osBell struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *osBell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *osBell) ring() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// osTag labels every frame of the one-sided links. Its low 4 bits are 0,
// which no collective's digest has (digest.go: they hold the collective
// + 1), so one-sided traffic and a collective's can never be taken for
// each other, even on a link that carried both.
const osTag = 0x4f530000 // "OS"

// startOneSided starts c's one-sided machinery: every rank calls it at the
// same registration. Its links are a communicator of their own, split from
// the world one (the same transports, picked by the same table: shared
// memory on a host, TCP or the net plugin between hosts): the host
// engine's collectives read their links one message at a time, as each
// step expects, and a progress goroutine reading the same links would take
// their messages.
func (c *Comm) startOneSided(name string) (*osState, error) {
	if c.os != nil {
		return c.os, nil
	}
	rma, err := c.world.Split(0, c.rank)
	if err != nil {
		return nil, fmt.Errorf("%s on rank %d: starting the one-sided links: %w", name, c.rank, err)
	}
	rma.SetInner(fmt.Sprintf("rank %d", c.rank))
	o := &osState{c: c, rank: c.rank, n: c.n, rma: rma, timeout: c.world.Config().Timeout, peers: make([]*osPeer, c.n),
		ownSig: make([]uint64, c.n), stopped: make(chan struct{}), staging: c.osStaging}
	if o.timeout <= 0 {
		o.timeout = hostnet.DefaultTimeout
	}
	o.sig.Store(&osSignals{host: o.ownSig})
	for r, l := range rma.Mesh().Links {
		if l != nil {
			o.peers[r] = newOSPeer(o, r, l)
		}
	}
	for _, p := range o.peers {
		if p != nil {
			o.wg.Add(2)
			go p.serve()
			go p.answer()
		}
	}
	c.os = o
	return o, nil
}

// stopOneSided stops the progress goroutines (closing the one-sided
// links ends their waits), then releases the windows. abort: the
// goroutines are not waited for longer than a moment (one may be inside
// a plugin call that the watchdog gave up on).
func (c *Comm) stopOneSided(abort bool) error {
	o := c.os
	if o == nil {
		return nil
	}
	o.stopMu.Lock()
	if o.down == nil {
		o.down = fmt.Errorf("%w: the communicator was destroyed or aborted", sdk.ErrInvalidUsage)
		close(o.stopped)
	}
	o.stopMu.Unlock()
	o.bell.ring()
	var errs []error
	if abort {
		errs = append(errs, o.rma.Abort())
	} else {
		errs = append(errs, o.rma.Destroy())
	}
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	wait := o.timeout
	if abort || c.wd.Err() != nil {
		wait = time.Second
	}
	select {
	case <-done:
	case <-time.After(wait):
		// A goroutine is stuck inside a plugin call: the memory it may
		// still use is left, not freed under it.
		return errors.Join(append(errs, fmt.Errorf("%w: rank %d: a one-sided progress goroutine did not stop within %v; its windows were left allocated", sdk.ErrSystemError, c.rank, wait))...)
	}
	o.mu.Lock()
	ws := o.windows
	o.mu.Unlock()
	for _, w := range ws {
		errs = append(errs, w.release())
	}
	return errors.Join(errs...)
}

// stoppedErr says why the machinery stopped, or nil while it runs.
func (o *osState) stoppedErr() error {
	select {
	case <-o.stopped:
		return o.down
	default:
		return nil
	}
}

// begin checks what every one-sided call needs: a usable communicator,
// outside a group.
func (c *Comm) osBegin(name string) error {
	if err := c.usable(name); err != nil {
		return err
	}
	if c.group > 0 {
		return fmt.Errorf("%w: %s on rank %d inside a group: one-sided calls are not grouped (call GroupEnd first)", sdk.ErrInvalidUsage, name, c.rank)
	}
	return nil
}

// osNeed is c's machinery for a call that needs a registered window.
func (c *Comm) osNeed(name string) (*osState, error) {
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	if c.os == nil {
		return nil, fmt.Errorf("%w: %s on rank %d: no window is registered (RegisterWindow or AllocWindow first, on every rank)", sdk.ErrInvalidUsage, name, c.rank)
	}
	if err := c.os.stoppedErr(); err != nil {
		return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	return c.os, nil
}

// ---- signals ---------------------------------------------------------------

// osSignals are a rank's signal slots: host memory (the communicator's own,
// or the caller's), or the caller's device memory (read and written by
// copies, under osState.sigMu).
type osSignals struct {
	host []uint64
	dev  uintptr
}

// addSignal adds one to slot r (a peer's signal, or this rank's own).
func (o *osState) addSignal(r int) error {
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

// loadSignal reads slot r.
func (o *osState) loadSignal(r int) (uint64, error) {
	s := o.sig.Load()
	if s.host != nil {
		return atomic.LoadUint64(&s.host[r]), nil
	}
	o.sigMu.Lock()
	defer o.sigMu.Unlock()
	var v uint64
	err := o.devRead(unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8), s.dev+uintptr(8*r))
	return v, err
}

func (c *Comm) registerSignals(buf Buffer) error {
	const name = "RegisterSignals"
	if err := c.osBegin(name); err != nil {
		return err
	}
	var next *osSignals
	if buf.n != 0 || buf.host != nil || buf.ptr != 0 {
		if err := c.checkMem(name, "signal", buf); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
		}
		need := 8 * c.n
		addr := buf.ptr
		if !buf.dev && len(buf.host) > 0 {
			addr = uintptr(unsafe.Pointer(unsafe.SliceData(buf.host)))
		}
		if buf.n < need || addr%8 != 0 {
			return fmt.Errorf("%w: %s on rank %d: the signal buffer must hold %d ranks' 8-byte slots (%d bytes, 8-byte aligned); it has %d bytes at %#x",
				sdk.ErrInvalidArgument, name, c.rank, c.n, need, buf.n, addr)
		}
		next = &osSignals{dev: buf.ptr}
		if !buf.dev {
			next = &osSignals{host: unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(buf.host))), c.n)}
		}
	}
	o, err := c.startOneSided(name)
	if err != nil {
		return err
	}
	if next == nil {
		next = &osSignals{host: o.ownSig}
	}
	o.sigMu.Lock()
	o.sig.Store(next)
	o.sigMu.Unlock()
	// Every rank swapped before any returns: a signal sent after this
	// call lands in the new slots.
	if err := c.world.Run(&sdk.Call{Coll: sdk.Barrier}, nil, nil); err != nil {
		return c.callError(name, err)
	}
	return nil
}

func (c *Comm) signalValue(peer int) (uint64, error) {
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
	return c.os.loadSignal(peer)
}

func (c *Comm) waitSignal(waits []SignalWait, s Stream) error {
	const name = "WaitSignal"
	if len(waits) == 0 {
		return nil
	}
	o, err := c.osNeed(name)
	if err != nil {
		return err
	}
	for _, w := range waits {
		if err := sdk.CheckPeer(w.Peer, c.n); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
		}
	}
	if err := o.syncStream(s); err != nil {
		return c.callError(name, err)
	}
	have := make([]uint64, len(waits))
	ready := func() (bool, error) {
		all := true
		for i, w := range waits {
			v, err := o.loadSignal(w.Peer)
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
		var peers []int
		for i, w := range waits {
			if have[i] < w.Value {
				missing = append(missing, fmt.Sprintf("rank %d%s signalled %d times, %d awaited", w.Peer, o.rma.HostOf(w.Peer), have[i], w.Value))
				peers = append(peers, w.Peer)
			}
		}
		return fmt.Errorf("%w: %s on rank %d: no signal before the deadline: %s (is the peer alive, and does it signal as often as this rank waits? %s sets the deadline, %v): %w",
			sdk.ErrRemoteError, name, c.rank, strings.Join(missing, "; "), hostnet.EnvTimeout, o.timeout, ErrTimeout)
	}
	return o.await(name, ready, progress, late)
}

// ---- the counter -----------------------------------------------------------

func (c *Comm) readCounter() uint64 {
	if c.os == nil {
		return 0
	}
	return c.os.counter()
}

// counter is the operations complete: the local ones and each peer's
// acknowledged ones (a peer acknowledges in order, so its count is the
// last sequence number it acknowledged).
func (o *osState) counter() uint64 {
	n := o.local.Load()
	for _, p := range o.peers {
		if p != nil {
			n += p.done.Load()
		}
	}
	return n
}

// issued is how many operations this rank issued: those complete when
// issued (local), and those sent to each peer, which its acknowledgements
// complete. The counter counts completions of exactly these, so it never
// passes issued.
func (o *osState) issued() uint64 {
	n := o.local.Load()
	for _, p := range o.peers {
		if p != nil {
			n += p.issued.Load()
		}
	}
	return n
}

func (c *Comm) waitCounter(target uint64) error {
	const name = "WaitCounter"
	o, err := c.osNeed(name)
	if err != nil {
		if c.os == nil && target == 0 {
			return nil
		}
		return err
	}
	// A target past what this rank issued can never be reached: the
	// counter counts completions of issued operations, and none is issued
	// while this waits (a Comm is used by one goroutine at a time, and the
	// C API holds the communicator's lock). Fail now, not at the deadline.
	if issued := o.issued(); target > issued {
		return fmt.Errorf("%w: %s(%d) on rank %d: only %d one-sided operations were issued (the counter, %d now, counts their completions and cannot reach %d): wait for at most %d, or issue the operations first",
			sdk.ErrInvalidArgument, name, target, c.rank, issued, o.counter(), target, issued)
	}
	ready := func() (bool, error) {
		// The counter is read before the refusals: a peer sends its
		// refusal of an operation before the acknowledgement that counts
		// it, so a count that covers a refused operation is never seen
		// without its refusal.
		reached := o.counter() >= target
		if err := o.takeFailure(); err != nil {
			return false, err
		}
		if reached {
			return true, nil
		}
		for _, p := range o.peers {
			if p != nil && p.done.Load() < p.issued.Load() {
				if err := p.brokenErr(); err != nil {
					return false, err
				}
			}
		}
		return false, nil
	}
	late := func() error {
		var out []string
		for _, p := range o.peers {
			if p != nil && p.done.Load() < p.issued.Load() {
				out = append(out, fmt.Sprintf("rank %d%s completed %d of the %d operations this rank sent it", p.rank, o.rma.HostOf(p.rank), p.done.Load(), p.issued.Load()))
			}
		}
		what := strings.Join(out, "; ")
		if what == "" {
			what = fmt.Sprintf("the counter is %d of the %d operations issued", o.counter(), o.issued())
		}
		return fmt.Errorf("%w: %s(%d) on rank %d: not reached before the deadline: %s (%s sets the deadline, %v): %w",
			sdk.ErrRemoteError, name, target, c.rank, what, hostnet.EnvTimeout, o.timeout, ErrTimeout)
	}
	return o.await(name, ready, o.counter, late)
}

// takeFailure returns, once, the first error a peer reported for this
// rank's operations (a window it freed, say), or nil.
func (o *osState) takeFailure() error {
	for _, p := range o.peers {
		if p != nil {
			if err := p.takeNak(); err != nil {
				return err
			}
		}
	}
	return nil
}

// await waits until ready says so: it checks, spins a moment, then sleeps
// until the bell rings. It fails with late() when progress() stays the
// same for the deadline, and when the machinery stops.
func (o *osState) await(name string, ready func() (bool, error), progress func() uint64, late func() error) error {
	last, since := progress(), time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for spin := 0; ; spin++ {
		bell := o.bell.wait()
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		if err := o.stoppedErr(); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
		}
		if p := progress(); p != last {
			last, since = p, time.Now()
		}
		left := o.timeout - time.Since(since)
		if left <= 0 {
			return late()
		}
		if spin < 64 {
			continue // a signal a moment away costs no sleep
		}
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-bell:
		case <-timer.C:
		case <-o.stopped:
		}
	}
}

// ---- staging ---------------------------------------------------------------

func (c *Comm) registerStaging(buf []byte) error {
	const name = "RegisterStaging"
	if err := c.osBegin(name); err != nil {
		return err
	}
	if buf != nil && len(buf) < osMinStaging {
		return fmt.Errorf("%w: %s on rank %d: %d bytes of staging are too few: pass at least %d", sdk.ErrInvalidArgument, name, c.rank, len(buf), osMinStaging)
	}
	c.osStaging = buf
	if c.os != nil {
		c.os.mu.Lock()
		c.os.staging = buf
		c.os.mu.Unlock()
	}
	return nil
}

// ---- the calls -------------------------------------------------------------

// rmaCall runs Put, PutBatch, Get, PutSignal and Signal: checked on this
// rank first (nothing is sent for a bad call), then each operation on the
// transport that reaches peer's memory of its window.
func (c *Comm) rmaCall(name string, peer int, ops []RMA, k rmaKind, s Stream) error {
	o, err := c.osNeed(name)
	if err != nil {
		return err
	}
	if err := sdk.CheckPeer(peer, c.n); err != nil {
		return fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	for _, op := range ops {
		if err := c.checkRMA(name, peer, op); err != nil {
			return err
		}
		if k != rmaPutSignal && op.Local == nil {
			return fmt.Errorf("%w: %s on rank %d: the RMA needs both windows (Local and Remote)", sdk.ErrInvalidArgument, name, c.rank)
		}
	}
	if err := o.syncStream(s); err != nil {
		return c.callError(name, err)
	}
	if peer == c.rank {
		return o.self(name, ops, k)
	}
	p := o.peers[peer]
	if err := p.takeNak(); err != nil {
		return fmt.Errorf("%s: an earlier operation failed: %w", name, err)
	}
	if err := p.brokenErr(); err != nil {
		return fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	switch k {
	case rmaSignal:
		return p.send(osMsgSignal, RMA{})
	case rmaGet:
		if o.direct(ops[0].Remote, peer) {
			if err := o.copyDirect(name, peer, ops[0], false); err != nil {
				return err
			}
			o.local.Add(1)
			return nil
		}
		return p.fetch(name, ops[0])
	}
	for _, op := range ops {
		kind := osMsgPut
		if k == rmaPutSignal {
			kind = osMsgPutSignal
		}
		if op.Bytes == 0 && kind == osMsgPutSignal {
			op, kind = RMA{}, osMsgSignal
		}
		if op.Remote != nil && o.direct(op.Remote, peer) {
			if err := o.copyDirect(name, peer, op, true); err != nil {
				return err
			}
			if kind == osMsgPut {
				o.local.Add(1)
				continue
			}
			op, kind = RMA{}, osMsgSignal // the bytes are there: the signal follows them
		}
		if err := p.send(kind, op); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
		}
	}
	return nil
}

// self runs operations of this rank on its own windows.
func (o *osState) self(name string, ops []RMA, k rmaKind) error {
	for _, op := range ops {
		if op.Bytes > 0 {
			dst, doff, src, soff := op.Remote.os.mem, op.RemoteOff, op.Local.os.mem, op.LocalOff
			if k == rmaGet {
				dst, doff, src, soff = src, soff, dst, doff
			}
			if err := o.copyLocal(dst, doff, src, soff, op.Bytes); err != nil {
				return o.c.callError(name, err)
			}
		}
		if k == rmaPutSignal {
			if err := o.addSignal(o.rank); err != nil {
				return o.c.callError(name, err)
			}
		}
		o.local.Add(1)
	}
	if k == rmaSignal {
		if err := o.addSignal(o.rank); err != nil {
			return o.c.callError(name, err)
		}
		o.local.Add(1)
	}
	return nil
}
