package onesided

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// A pair is this rank's end of the one-sided link to one peer: the
// initiator's side of the protocol (proto.go) is here, the target's, which
// the progress goroutines run, in serve.go.

// pair is this rank's end of the one-sided link to one peer.
type pair struct {
	o    *State
	rank int
	link hostnet.Link
	smu  sync.Mutex // one message (header and payload) at a time on the link
	shdr [headerBytes]byte

	// The initiator's side: sequence numbers sent (by the user's
	// goroutine) and completed by the peer (its acknowledgements), when
	// the peer last sent anything (unix ns), and the refusals not yet
	// reported.
	issued, done atomic.Uint64
	alive        atomic.Int64
	broken       atomic.Pointer[error]
	nmu          sync.Mutex
	naks         []error
	get          atomic.Pointer[pendingGet] // the Get waiting for its data

	// The target's side: what the answering goroutine has to send.
	qmu     sync.Mutex
	ackTo   uint64
	qnak    []header
	qget    []header
	qbell   chan struct{}
	sentAck uint64 // answer's own

	bounce, abounce []byte // serve's and answer's device staging / discard buffers
}

// pendingGet is a Get waiting for its bytes.
type pendingGet struct {
	seq  uint64
	mem  Mem
	off  int
	n    int
	done chan error
}

func newPair(o *State, r int, l hostnet.Link) *pair {
	p := &pair{o: o, rank: r, link: l, qbell: make(chan struct{}, 1)}
	p.alive.Store(time.Now().UnixNano())
	return p
}

// fail breaks the pair: the link is closed (the peer's goroutines see it
// too), a Get waiting ends, waits wake up.
func (p *pair) fail(err error) {
	if p.broken.CompareAndSwap(nil, &err) {
		p.link.Close()
	}
	if g := p.get.Swap(nil); g != nil {
		g.done <- p.brokenErr()
	}
	p.o.bell.ring()
}

// brokenErr is why the pair is unusable, named for the user, or nil.
func (p *pair) brokenErr() error {
	b := p.broken.Load()
	if b == nil {
		return nil
	}
	if err := p.o.Stopped(); err != nil {
		return err
	}
	return p.o.links.LinkError(*b, fmt.Sprintf("the one-sided link to rank %d", p.rank), p.rank)
}

func (p *pair) takeNak() error {
	p.nmu.Lock()
	defer p.nmu.Unlock()
	if len(p.naks) == 0 {
		return nil
	}
	err := p.naks[0]
	p.naks = p.naks[1:]
	return err
}

// sendHdr sends h (under smu).
func (p *pair) sendHdr(h *header) error {
	h.put(p.shdr[:])
	return hostnet.SendTagged(p.link, p.shdr[:], frameTag)
}

// linkErr names a failed send or receive for the user and breaks the pair.
func (p *pair) linkErr(doing string, err error) error {
	p.fail(err)
	if serr := p.o.Stopped(); serr != nil {
		return serr
	}
	return p.o.links.LinkError(err, fmt.Sprintf("%s rank %d", doing, p.rank), p.rank)
}

// send sends one operation: its header, then op's local bytes in chunks.
func (p *pair) send(kind uint8, op Op) error {
	p.smu.Lock()
	defer p.smu.Unlock()
	seq := p.issued.Load() + 1
	h := header{kind: kind, seq: seq}
	var staging []byte
	if op.Remote != nil {
		h.win, h.off, h.n = uint32(op.Remote.index), uint64(op.RemoteOff), uint64(op.Bytes)
		h.chunk = chunkBytes
		if op.Local.mem.Dev {
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
		if m := op.Local.mem; m.Dev {
			b = staging[:size]
			if err := p.o.devRead(b, m.Ptr+uintptr(op.LocalOff+off)); err != nil {
				// The peer waits for the rest of the payload: the pair
				// cannot go on.
				p.fail(err)
				return err
			}
		} else {
			b = m.Host[op.LocalOff+off : op.LocalOff+off+size]
		}
		if err := hostnet.SendTagged(p.link, b, frameTag); err != nil {
			return p.linkErr("sending to", err)
		}
	}
	p.issued.Store(seq)
	return nil
}

// fetch runs a Get over the link: the request, then the wait for the
// data, which the serving goroutine writes into the window.
func (p *pair) fetch(name string, op Op) error {
	g := &pendingGet{mem: op.Local.mem, off: op.LocalOff, n: op.Bytes, done: make(chan error, 1)}
	p.smu.Lock()
	g.seq = p.issued.Load() + 1
	p.get.Store(g)
	h := header{kind: msgGet, win: uint32(op.Remote.index), seq: g.seq, off: uint64(op.RemoteOff), n: uint64(op.Bytes)}
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
			return p.o.Stopped()
		case <-timer.C:
			idle := time.Since(time.Unix(0, p.alive.Load()))
			if idle < p.o.timeout {
				timer.Reset(p.o.timeout - idle)
				continue
			}
			p.get.Store(nil)
			err := fmt.Errorf("%w: %s on rank %d: rank %d%s sent nothing of window %d's bytes [%d, %d) for %v (is it alive? its progress goroutines answer without its help; %s sets the deadline): %w",
				sdk.ErrRemoteError, name, p.o.rank, p.rank, p.o.links.HostOf(p.rank), op.Remote.index, op.RemoteOff, op.RemoteOff+op.Bytes, p.o.timeout, hostnet.EnvTimeout, hostnet.ErrTimeout)
			p.fail(err) // its answer may still come, into a window nobody waits on
			return err
		}
	}
}
