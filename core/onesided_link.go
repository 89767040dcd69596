package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// The message transport of one-sided calls: every peer that is not reached
// straight through shared memory (onesided_shm.go) is served by its own
// progress goroutines over the one-sided links (shared-memory rings on a
// host, TCP or the net plugin between hosts: whatever hostnet's table
// picked for the pair). Per pair and direction the protocol is
//
//	initiator                         target (serve)            target (answer)
//	put/putSignal hdr, payload  ->    write window, signal ->   ack (cumulative) / nak
//	signal hdr                  ->    signal               ->   ack
//	get hdr                     ->    queue                ->   data hdr, payload
//
// Every message starts with a fixed header; a payload follows as messages
// of at most the header's chunk bytes, cut alike on both sides. The
// target applies operations in the order they came (one goroutine reads
// the link), numbered 1, 2, ... per pair: an acknowledgement of n
// completes the first n. Answers go out on a goroutine of their own, so
// that a serving goroutine never waits for its peer's (two ranks answering
// each other with full links would wait forever).

// Message kinds.
const (
	osMsgPut uint8 = iota + 1
	osMsgPutSignal
	osMsgSignal
	osMsgGet
	osMsgAck
	osMsgNak
	osMsgData
)

// osChunk is the most payload bytes one message carries: large enough
// that a TCP link stripes it over its sockets, small enough that a
// device's staging and a refused payload's discard buffer stay small.
const osChunk = 4 << 20

// osMinStaging is the least host staging RegisterStaging takes.
const osMinStaging = 64 << 10

const osHdrBytes = 40

// osHdr is a message's header: kind, status (answers), window, sequence
// number, offset and length of the bytes, and the payload's chunk.
type osHdr struct {
	kind, status uint8
	win          uint32
	seq          uint64
	off, n       uint64
	chunk        uint64
}

func (h *osHdr) put(b []byte) {
	clear(b[:osHdrBytes])
	b[0], b[1] = h.kind, h.status
	binary.LittleEndian.PutUint32(b[4:], h.win)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.off)
	binary.LittleEndian.PutUint64(b[24:], h.n)
	binary.LittleEndian.PutUint64(b[32:], h.chunk)
}

func parseOSHdr(b []byte) osHdr {
	return osHdr{kind: b[0], status: b[1], win: binary.LittleEndian.Uint32(b[4:]), seq: binary.LittleEndian.Uint64(b[8:]),
		off: binary.LittleEndian.Uint64(b[16:]), n: binary.LittleEndian.Uint64(b[24:]), chunk: binary.LittleEndian.Uint64(b[32:])}
}

// osPeer is this rank's end of the one-sided link to one peer.
type osPeer struct {
	o    *osState
	rank int
	link hostnet.Link
	smu  sync.Mutex // one message (header and payload) at a time on the link
	shdr [osHdrBytes]byte

	// The initiator's side: sequence numbers sent (by the user's
	// goroutine) and completed by the peer (its acknowledgements), when
	// the peer last sent anything (unix ns), and the refusals not yet
	// reported.
	issued, done atomic.Uint64
	alive        atomic.Int64
	broken       atomic.Pointer[error]
	nmu          sync.Mutex
	naks         []error
	get          atomic.Pointer[osGet] // the Get waiting for its data

	// The target's side: what the answering goroutine has to send.
	qmu     sync.Mutex
	ackTo   uint64
	qnak    []osHdr
	qget    []osHdr
	qbell   chan struct{}
	sentAck uint64 // answer's own

	bounce, abounce []byte // serve's and answer's device staging / discard buffers
}

// osGet is a Get waiting for its bytes.
type osGet struct {
	seq  uint64
	mem  osMem
	off  int
	n    int
	done chan error
}

func newOSPeer(o *osState, r int, l hostnet.Link) *osPeer {
	p := &osPeer{o: o, rank: r, link: l, qbell: make(chan struct{}, 1)}
	p.alive.Store(time.Now().UnixNano())
	return p
}

// fail breaks the pair: the link is closed (the peer's goroutines see it
// too), a Get waiting ends, waits wake up.
func (p *osPeer) fail(err error) {
	if p.broken.CompareAndSwap(nil, &err) {
		p.link.Close()
	}
	if g := p.get.Swap(nil); g != nil {
		g.done <- p.brokenErr()
	}
	p.o.bell.ring()
}

// brokenErr is why the pair is unusable, named for the user, or nil.
func (p *osPeer) brokenErr() error {
	b := p.broken.Load()
	if b == nil {
		return nil
	}
	if err := p.o.stoppedErr(); err != nil {
		return err
	}
	return p.o.rma.LinkError(*b, fmt.Sprintf("the one-sided link to rank %d", p.rank), p.rank)
}

func (p *osPeer) takeNak() error {
	p.nmu.Lock()
	defer p.nmu.Unlock()
	if len(p.naks) == 0 {
		return nil
	}
	err := p.naks[0]
	p.naks = p.naks[1:]
	return err
}

// ---- the initiator's side --------------------------------------------------

// sendHdr sends h (under smu).
func (p *osPeer) sendHdr(h *osHdr) error {
	h.put(p.shdr[:])
	return hostnet.SendTagged(p.link, p.shdr[:], osTag)
}

// linkErr names a failed send or receive for the user and breaks the pair.
func (p *osPeer) linkErr(doing string, err error) error {
	p.fail(err)
	if serr := p.o.stoppedErr(); serr != nil {
		return serr
	}
	return p.o.rma.LinkError(err, fmt.Sprintf("%s rank %d", doing, p.rank), p.rank)
}

// send sends one operation: its header, then op's local bytes in chunks.
func (p *osPeer) send(kind uint8, op RMA) error {
	p.smu.Lock()
	defer p.smu.Unlock()
	seq := p.issued.Load() + 1
	h := osHdr{kind: kind, seq: seq}
	var staging []byte
	if op.Remote != nil {
		h.win, h.off, h.n = uint32(op.Remote.index), uint64(op.RemoteOff), uint64(op.Bytes)
		h.chunk = osChunk
		if op.Local.os.mem.dev {
			staging = p.o.userStaging()
			h.chunk = uint64(len(staging))
		}
	}
	if err := p.sendHdr(&h); err != nil {
		return p.linkErr("sending to", err)
	}
	for off := 0; off < op.Bytes; off += int(h.chunk) {
		size := min(int(h.chunk), op.Bytes-off)
		var b []byte
		if m := op.Local.os.mem; m.dev {
			b = staging[:size]
			if err := p.o.devRead(b, m.ptr+uintptr(op.LocalOff+off)); err != nil {
				// The peer waits for the rest of the payload: the pair
				// cannot go on.
				p.fail(err)
				return err
			}
		} else {
			b = m.host[op.LocalOff+off : op.LocalOff+off+size]
		}
		if err := hostnet.SendTagged(p.link, b, osTag); err != nil {
			return p.linkErr("sending to", err)
		}
	}
	p.issued.Store(seq)
	return nil
}

// fetch runs a Get over the link: the request, then the wait for the
// data, which the serving goroutine writes into the window.
func (p *osPeer) fetch(name string, op RMA) error {
	g := &osGet{mem: op.Local.os.mem, off: op.LocalOff, n: op.Bytes, done: make(chan error, 1)}
	p.smu.Lock()
	g.seq = p.issued.Load() + 1
	p.get.Store(g)
	h := osHdr{kind: osMsgGet, win: uint32(op.Remote.index), seq: g.seq, off: uint64(op.RemoteOff), n: uint64(op.Bytes)}
	err := p.sendHdr(&h)
	if err == nil {
		p.issued.Store(g.seq)
	}
	p.smu.Unlock()
	if err != nil {
		p.get.Store(nil)
		return p.linkErr("asking", err)
	}
	timer := time.NewTimer(p.o.timeout)
	defer timer.Stop()
	for {
		select {
		case err := <-g.done:
			return err
		case <-p.o.stopped:
			return p.o.stoppedErr()
		case <-timer.C:
			idle := time.Since(time.Unix(0, p.alive.Load()))
			if idle < p.o.timeout {
				timer.Reset(p.o.timeout - idle)
				continue
			}
			p.get.Store(nil)
			err := fmt.Errorf("%w: %s on rank %d: rank %d%s sent nothing of window %d's bytes [%d, %d) for %v (is it alive? its progress goroutines answer without its help; %s sets the deadline): %w",
				sdk.ErrRemoteError, name, p.o.rank, p.rank, p.o.rma.HostOf(p.rank), op.Remote.index, op.RemoteOff, op.RemoteOff+op.Bytes, p.o.timeout, hostnet.EnvTimeout, ErrTimeout)
			p.fail(err) // its answer may still come, into a window nobody waits on
			return err
		}
	}
}

// ---- the target's side (and the answers the initiator receives) -----------

// serve reads the link: the peer's operations on this rank's windows, and
// the answers to this rank's operations. It runs until the link closes.
func (p *osPeer) serve() {
	defer p.o.wg.Done()
	defer p.o.deviceThread()()
	hdr := make([]byte, osHdrBytes)
	for {
		if err := hostnet.RecvIdle(p.link, hdr, osTag); err != nil {
			p.fail(err)
			return
		}
		p.alive.Store(time.Now().UnixNano())
		h := parseOSHdr(hdr)
		var err error
		switch h.kind {
		case osMsgPut, osMsgPutSignal:
			err = p.servePut(&h)
		case osMsgSignal:
			st := osOK
			if p.o.addSignal(p.rank) != nil {
				st = osFailed
			}
			p.answered(&h, st)
		case osMsgGet:
			p.qmu.Lock()
			p.qget = append(p.qget, h)
			p.qmu.Unlock()
			p.ring()
		case osMsgAck:
			p.completed(h.seq)
		case osMsgNak:
			p.refused(&h)
		case osMsgData:
			err = p.takeData(&h)
		default:
			err = fmt.Errorf("rank %d sent a one-sided message of unknown kind %d: %w", p.rank, h.kind, hostnet.ErrProtocol)
		}
		if err != nil {
			p.fail(err)
			return
		}
	}
}

// payload receives n bytes cut in chunks of chunk into dst(off, size),
// the window's bytes or a staging buffer, and hands each chunk to then
// (a device window's copy), which may return false to stop writing.
func (p *osPeer) payload(n, chunk uint64, dst func(off, size int) []byte, then func(off int, b []byte)) error {
	if n > 0 && (chunk == 0 || chunk > osChunk) {
		return fmt.Errorf("rank %d sent a one-sided payload in chunks of %d bytes (1..%d): %w", p.rank, chunk, osChunk, hostnet.ErrProtocol)
	}
	for off := uint64(0); off < n; off += chunk {
		size := int(min(chunk, n-off))
		b := dst(int(off), size)
		if err := hostnet.RecvTagged(p.link, b, osTag); err != nil {
			return err
		}
		if then != nil {
			then(int(off), b)
		}
	}
	return nil
}

// scratch is serve's buffer of n bytes (device staging, or the discard of
// a refused payload).
func (p *osPeer) scratch(n int) []byte {
	if len(p.bounce) < n {
		p.bounce = make([]byte, osChunk)
	}
	return p.bounce[:n]
}

func (p *osPeer) servePut(h *osHdr) error {
	w, st := p.o.serving(h.win, h.off, h.n)
	dst := func(off, size int) []byte {
		if st == osOK && !w.mem.dev {
			return w.mem.host[int(h.off)+off : int(h.off)+off+size]
		}
		return p.scratch(size)
	}
	var then func(int, []byte)
	if st == osOK && w.mem.dev {
		then = func(off int, b []byte) {
			if st == osOK && p.o.devWrite(w.mem.ptr+uintptr(int(h.off)+off), b) != nil {
				st = osFailed
			}
		}
	}
	held := st == osOK
	err := p.payload(h.n, h.chunk, dst, then)
	if held {
		w.mu.RUnlock()
	}
	if err != nil {
		return err
	}
	if st == osOK && h.kind == osMsgPutSignal && p.o.addSignal(p.rank) != nil {
		st = osFailed
	}
	p.answered(h, st)
	return nil
}

// answered acknowledges h (or refuses it): at once on this goroutine
// where that cannot wait forever, else through the answering goroutine.
func (p *osPeer) answered(h *osHdr, st uint8) {
	if st == osOK && p.ackNow(h.seq) {
		return
	}
	p.qmu.Lock()
	if st != osOK {
		nak := *h
		nak.kind, nak.status, nak.chunk = osMsgNak, st, 0
		p.qnak = append(p.qnak, nak)
	}
	p.ackTo = h.seq
	p.qmu.Unlock()
	p.ring()
}

// ackNow sends the acknowledgement of seq from the serving goroutine,
// which saves waking the answering one (a thread wake-up on each side of a
// Put's round trip), when that is safe: the link is free (nobody holds
// smu), nothing is queued before it (a refusal must reach the peer before
// an acknowledgement that covers it), and this rank has no operation in
// flight to the peer. The last makes the send finish: the peer's serving
// goroutine has an operation of its own in flight (the one acknowledged
// here), so it sends nothing itself by this path and keeps reading, and
// this rank's link to it carries no operation of this rank that it has
// not read. Two serving goroutines sending to each other over full links
// would otherwise wait for each other forever.
func (p *osPeer) ackNow(seq uint64) bool {
	if p.issued.Load() != p.done.Load() || !p.smu.TryLock() {
		return false
	}
	defer p.smu.Unlock()
	p.qmu.Lock()
	idle := len(p.qnak) == 0 && len(p.qget) == 0
	if idle {
		p.ackTo = seq
	}
	p.qmu.Unlock()
	if !idle {
		return false
	}
	if err := p.sendHdr(&osHdr{kind: osMsgAck, seq: seq}); err != nil {
		p.fail(err)
		return true
	}
	p.sentAck = seq
	return true
}

func (p *osPeer) ring() {
	select {
	case p.qbell <- struct{}{}:
	default:
	}
}

// completed records the peer's acknowledgement of the first seq
// operations.
func (p *osPeer) completed(seq uint64) {
	for {
		d := p.done.Load()
		if seq <= d || p.done.CompareAndSwap(d, seq) {
			break
		}
	}
	p.o.bell.ring()
}

// refused records the peer's refusal of one of this rank's operations,
// reported by the next call to that peer or WaitCounter.
func (p *osPeer) refused(h *osHdr) {
	kind := sdk.ErrInvalidUsage
	switch h.status {
	case osRange:
		kind = sdk.ErrInvalidArgument
	case osFailed:
		kind = sdk.ErrSystemError
	}
	err := fmt.Errorf("%w: rank %d: rank %d%s refused operation %d of this rank, on its window %d bytes [%d, %d): %s",
		kind, p.o.rank, p.rank, p.o.rma.HostOf(p.rank), h.seq, h.win, h.off, h.off+h.n, osStatusText(h.status))
	p.nmu.Lock()
	p.naks = append(p.naks, err)
	p.nmu.Unlock()
	p.o.bell.ring()
}

// takeData receives the answer to this rank's Get.
func (p *osPeer) takeData(h *osHdr) error {
	g := p.get.Load()
	if g == nil || g.seq != h.seq || (h.status == osOK && h.n != uint64(g.n)) {
		// A Get that timed out: its late answer is read and dropped.
		return p.payload(h.n, h.chunk, func(_, size int) []byte { return p.scratch(size) }, nil)
	}
	if h.status != osOK {
		kind := sdk.ErrInvalidUsage
		if h.status == osFailed {
			kind = sdk.ErrSystemError
		}
		p.completed(h.seq)
		if !p.get.CompareAndSwap(g, nil) {
			return nil // fail took it
		}
		g.done <- fmt.Errorf("%w: Get on rank %d: rank %d%s refused it, on its window %d bytes [%d, %d): %s",
			kind, p.o.rank, p.rank, p.o.rma.HostOf(p.rank), h.win, h.off, h.off+h.n, osStatusText(h.status))
		return nil
	}
	var failed error
	dst := func(off, size int) []byte {
		if !g.mem.dev {
			return g.mem.host[g.off+off : g.off+off+size]
		}
		return p.scratch(size)
	}
	var then func(int, []byte)
	if g.mem.dev {
		then = func(off int, b []byte) {
			if failed == nil {
				failed = p.o.devWrite(g.mem.ptr+uintptr(g.off+off), b)
			}
		}
	}
	if err := p.payload(h.n, h.chunk, dst, then); err != nil {
		return err
	}
	p.completed(h.seq)
	if p.get.CompareAndSwap(g, nil) {
		g.done <- failed
	}
	return nil
}

// answer sends what serve queued: refusals, the data of Gets, then the
// acknowledgement of everything applied. It runs until the machinery stops
// or the link fails.
func (p *osPeer) answer() {
	defer p.o.wg.Done()
	defer p.o.deviceThread()()
	for {
		select {
		case <-p.qbell:
		case <-p.o.stopped:
			return
		}
		for {
			more, err := p.sendAnswers()
			if err != nil {
				p.fail(err)
				return
			}
			if !more {
				break
			}
		}
	}
}

// sendAnswers sends what is queued, and says whether there was any. It
// takes the queue with the link held, so that ackNow cannot send an
// acknowledgement between a refusal taken here and its sending.
func (p *osPeer) sendAnswers() (bool, error) {
	p.smu.Lock()
	defer p.smu.Unlock()
	p.qmu.Lock()
	naks, gets, ack := p.qnak, p.qget, p.ackTo
	p.qnak, p.qget = nil, nil
	p.qmu.Unlock()
	if len(naks) == 0 && len(gets) == 0 && ack <= p.sentAck {
		return false, nil
	}
	return true, p.sendQueued(naks, gets, ack)
}

func (p *osPeer) sendQueued(naks, gets []osHdr, ack uint64) error {
	for i := range naks {
		if err := p.sendHdr(&naks[i]); err != nil {
			return err
		}
	}
	for i := range gets {
		if err := p.sendData(&gets[i]); err != nil {
			return err
		}
	}
	if ack > p.sentAck {
		if err := p.sendHdr(&osHdr{kind: osMsgAck, seq: ack}); err != nil {
			return err
		}
		p.sentAck = ack
	}
	return nil
}

// sendData answers a Get (under smu): the header with the status, then
// the window's bytes.
func (p *osPeer) sendData(req *osHdr) error {
	w, st := p.o.serving(req.win, req.off, req.n)
	h := *req
	h.kind, h.status, h.chunk = osMsgData, st, osChunk
	if st != osOK {
		h.chunk = 0
		return p.sendHdr(&h)
	}
	defer w.mu.RUnlock()
	if err := p.sendHdr(&h); err != nil {
		return err
	}
	for off := 0; off < int(h.n); off += osChunk {
		size := min(osChunk, int(h.n)-off)
		var b []byte
		if w.mem.dev {
			if len(p.abounce) < size {
				p.abounce = make([]byte, osChunk)
			}
			b = p.abounce[:size]
			if err := p.o.devRead(b, w.mem.ptr+uintptr(int(h.off)+off)); err != nil {
				// The peer waits for these bytes: the pair cannot go on.
				return errors.Join(fmt.Errorf("rank %d: copying window %d for rank %d's Get: %w", p.o.rank, h.win, p.rank, err), hostnet.ErrClosed)
			}
		} else {
			b = w.mem.host[int(h.off)+off : int(h.off)+off+size]
		}
		if err := hostnet.SendTagged(p.link, b, osTag); err != nil {
			return err
		}
	}
	return nil
}
