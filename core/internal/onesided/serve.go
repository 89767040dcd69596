package onesided

import (
	"errors"
	"fmt"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// The target's side of a pair: the serving goroutine reads the link (the
// peer's operations on this rank's windows, and the answers to this
// rank's own), the answering goroutine sends what it queued.

// serve reads the link: the peer's operations on this rank's windows, and
// the answers to this rank's operations. It runs until the link closes.
func (p *pair) serve() {
	defer p.o.wg.Done()
	defer p.o.deviceThread()()
	hdr := make([]byte, headerBytes)
	for {
		if err := hostnet.RecvIdle(p.link, hdr, frameTag); err != nil {
			p.fail(err)
			return
		}
		p.alive.Store(time.Now().UnixNano())
		h := parseHeader(hdr)
		var err error
		switch h.kind {
		case msgPut, msgPutSignal:
			err = p.servePut(&h)
		case msgSignal:
			st := statusOK
			if p.o.addSignal(p.rank) != nil {
				st = statusFailed
			}
			p.answered(&h, st)
		case msgGet:
			p.qmu.Lock()
			p.qget = append(p.qget, h)
			p.qmu.Unlock()
			p.ring()
		case msgAck:
			p.completed(h.seq)
		case msgNak:
			p.refused(&h)
		case msgData:
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
func (p *pair) payload(n, chunk uint64, dst func(off, size int) []byte, then func(off int, b []byte)) error {
	if n > 0 && (chunk == 0 || chunk > chunkBytes) {
		return fmt.Errorf("rank %d sent a one-sided payload in chunks of %d bytes (1..%d): %w", p.rank, chunk, chunkBytes, hostnet.ErrProtocol)
	}
	for off := uint64(0); off < n; off += chunk {
		size := int(min(chunk, n-off))
		b := dst(int(off), size)
		if err := hostnet.RecvTagged(p.link, b, frameTag); err != nil {
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
func (p *pair) scratch(n int) []byte {
	if len(p.bounce) < n {
		p.bounce = make([]byte, chunkBytes)
	}
	return p.bounce[:n]
}

func (p *pair) servePut(h *header) error {
	w, st := p.o.serving(h.win, h.off, h.n)
	dst := func(off, size int) []byte {
		if st == statusOK && !w.mem.Dev {
			return w.mem.Host[int(h.off)+off : int(h.off)+off+size]
		}
		return p.scratch(size)
	}
	var then func(int, []byte)
	if st == statusOK && w.mem.Dev {
		then = func(off int, b []byte) {
			if st == statusOK && p.o.devWrite(w.mem.Ptr+uintptr(int(h.off)+off), b) != nil {
				st = statusFailed
			}
		}
	}
	held := st == statusOK
	err := p.payload(h.n, h.chunk, dst, then)
	if held {
		w.mu.RUnlock()
	}
	if err != nil {
		return err
	}
	if st == statusOK && h.kind == msgPutSignal && p.o.addSignal(p.rank) != nil {
		st = statusFailed
	}
	p.answered(h, st)
	return nil
}

// answered acknowledges h (or refuses it): at once on this goroutine
// where that cannot wait forever, else through the answering goroutine.
func (p *pair) answered(h *header, st uint8) {
	if st == statusOK && p.ackNow(h.seq) {
		return
	}
	p.qmu.Lock()
	if st != statusOK {
		nak := *h
		nak.kind, nak.status, nak.chunk = msgNak, st, 0
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
func (p *pair) ackNow(seq uint64) bool {
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
	if err := p.sendHdr(&header{kind: msgAck, seq: seq}); err != nil {
		p.fail(err)
		return true
	}
	p.sentAck = seq
	return true
}

func (p *pair) ring() {
	select {
	case p.qbell <- struct{}{}:
	default:
	}
}

// completed records the peer's acknowledgement of the first seq
// operations.
func (p *pair) completed(seq uint64) {
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
func (p *pair) refused(h *header) {
	kind := sdk.ErrInvalidUsage
	switch h.status {
	case statusRange:
		kind = sdk.ErrInvalidArgument
	case statusFailed:
		kind = sdk.ErrSystemError
	}
	err := fmt.Errorf("%w: rank %d: rank %d%s refused operation %d of this rank, on its window %d bytes [%d, %d): %s",
		kind, p.o.rank, p.rank, p.o.links.HostOf(p.rank), h.seq, h.win, h.off, h.off+h.n, statusText(h.status))
	p.nmu.Lock()
	p.naks = append(p.naks, err)
	p.nmu.Unlock()
	p.o.bell.ring()
}

// takeData receives the answer to this rank's Get.
func (p *pair) takeData(h *header) error {
	g := p.get.Load()
	if g == nil || g.seq != h.seq || (h.status == statusOK && h.n != uint64(g.n)) {
		// A Get that timed out: its late answer is read and dropped.
		return p.payload(h.n, h.chunk, func(_, size int) []byte { return p.scratch(size) }, nil)
	}
	if h.status != statusOK {
		kind := sdk.ErrInvalidUsage
		if h.status == statusFailed {
			kind = sdk.ErrSystemError
		}
		p.completed(h.seq)
		if !p.get.CompareAndSwap(g, nil) {
			return nil // fail took it
		}
		g.done <- fmt.Errorf("%w: Get on rank %d: rank %d%s refused it, on its window %d bytes [%d, %d): %s",
			kind, p.o.rank, p.rank, p.o.links.HostOf(p.rank), h.win, h.off, h.off+h.n, statusText(h.status))
		return nil
	}
	var failed error
	dst := func(off, size int) []byte {
		if !g.mem.Dev {
			return g.mem.Host[g.off+off : g.off+off+size]
		}
		return p.scratch(size)
	}
	var then func(int, []byte)
	if g.mem.Dev {
		then = func(off int, b []byte) {
			if failed == nil {
				failed = p.o.devWrite(g.mem.Ptr+uintptr(g.off+off), b)
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
func (p *pair) answer() {
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
func (p *pair) sendAnswers() (bool, error) {
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

func (p *pair) sendQueued(naks, gets []header, ack uint64) error {
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
		if err := p.sendHdr(&header{kind: msgAck, seq: ack}); err != nil {
			return err
		}
		p.sentAck = ack
	}
	return nil
}

// sendData answers a Get (under smu): the header with the status, then
// the window's bytes.
func (p *pair) sendData(req *header) error {
	w, st := p.o.serving(req.win, req.off, req.n)
	h := *req
	h.kind, h.status, h.chunk = msgData, st, chunkBytes
	if st != statusOK {
		h.chunk = 0
		return p.sendHdr(&h)
	}
	defer w.mu.RUnlock()
	if err := p.sendHdr(&h); err != nil {
		return err
	}
	for off := 0; off < int(h.n); off += chunkBytes {
		size := min(chunkBytes, int(h.n)-off)
		var b []byte
		if w.mem.Dev {
			if len(p.abounce) < size {
				p.abounce = make([]byte, chunkBytes)
			}
			b = p.abounce[:size]
			if err := p.o.devRead(b, w.mem.Ptr+uintptr(int(h.off)+off)); err != nil {
				// The peer waits for these bytes: the pair cannot go on.
				return errors.Join(fmt.Errorf("rank %d: copying window %d for rank %d's Get: %w", p.o.rank, h.win, p.rank, err), hostnet.ErrClosed)
			}
		} else {
			b = w.mem.Host[int(h.off)+off : int(h.off)+off+size]
		}
		if err := hostnet.SendTagged(p.link, b, frameTag); err != nil {
			return err
		}
	}
	return nil
}
