package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Exchange sends out to the peer as one message while it receives the
// peer's message of exactly len(in) bytes into in, both on the calling
// goroutine, over a link of one polled socket (Conn.SetSpin): it writes
// what the socket takes, reads what has come, and sleeps in one ppoll for
// either only when neither moves. progress, when set, is called whenever
// bytes moved, with how many of in have arrived and how many of out have
// gone (both only grow). Both sides must call Exchange (or Send and Recv)
// with the same tag.
//
// Why: a send goroutine beside a receiving one (the host engine's pipes)
// keeps two threads busy and hands every message between them. Where a
// rank has few cores, and emulated hosts share two, those threads take
// turns with the kernel's own work and with the peer: a single thread
// that polls both directions is what OpenMPI's progress loop does.
//
// ok is false, and nothing is sent or received, where the link cannot:
// several sockets, a message it would stripe, or a socket in the Go
// netpoller. A failure breaks the link as a failed Send or Recv does.
func (l *TCPLink) Exchange(out, in []byte, tag uint32, progress func(got, sent int)) (ok bool, err error) {
	c := l.conns[0]
	if len(l.conns) != 1 || c.spin <= 0 {
		return false, nil
	}
	if _, polled := c.nc.(*sock); !polled {
		return false, nil
	}
	c.wtag, c.rtag = tag, tag
	return true, l.brokenBy(c.exchange(out, in, progress))
}

// exchange is Exchange on one Conn whose socket is a *sock.
func (c *Conn) exchange(out, in []byte, progress func(got, sent int)) error {
	if err := c.usable("exchange with"); err != nil {
		return err
	}
	s := c.nc.(*sock)
	if !s.acquire() {
		return c.fail(c.ioErr("exchange with", net.ErrClosed))
	}
	defer s.release()
	c.wopen.Store(true)
	c.putHeader(len(out), len(out))
	c.wvec[0], c.wvec[1] = c.whdr[:], out
	wbufs := c.wvec[:]
	defer func() { c.wvec[1] = nil }()
	x := exchangeState{c: c, s: s, in: in, wbufs: wbufs, outLen: len(out), wleft: frameHdrLen + len(out)}
	// Bytes of the peer's frame that an earlier Recv read ahead come first.
	x.hdr = copy(c.rhdr[:], c.rbuf[c.rpos:c.rend])
	c.rpos += x.hdr
	if x.hdr == frameHdrLen {
		if err := x.headerDone(); err != nil {
			return err
		}
	}
	if err := x.run(progress); err != nil {
		return err
	}
	c.wopen.Store(false)
	return nil
}

// exchangeState is one exchange in progress.
type exchangeState struct {
	c      *Conn
	s      *sock
	in     []byte
	wbufs  [][]byte
	outLen int  // payload bytes to write
	wleft  int  // header and payload bytes still to write
	hdr    int  // header bytes of the peer's frame read
	inHdr  bool // the peer's header is read and checked
	got    int  // payload bytes of in read
	sent   int  // payload bytes of out written
	idleAt time.Time
}

func (x *exchangeState) done() bool { return x.wleft == 0 && x.inHdr && x.got == len(x.in) }

func (x *exchangeState) run(progress func(got, sent int)) error {
	c := x.c
	last := time.Now()
	for !x.done() {
		moved, err := x.step()
		if err != nil {
			return err
		}
		now := time.Now()
		if moved {
			last = now
			x.idleAt = time.Time{}
			if progress != nil {
				progress(x.got, x.sent)
			}
			continue
		}
		// Nothing moved: poll on for c.spin (yielding the core between
		// tries once the wait is past pollYieldAfter), then sleep until
		// either direction can move.
		if x.idleAt.IsZero() {
			x.idleAt = now
		}
		if idle := now.Sub(x.idleAt); idle < c.spin {
			if idle >= pollYieldAfter {
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
			continue
		}
		var events int16
		if x.wleft > 0 {
			events |= pollOut
		}
		if !x.inHdr || x.got < len(x.in) {
			events |= pollIn
		}
		if c.timeout > 0 {
			setDeadline(&x.s.rdl, last.Add(c.timeout))
		} else {
			setDeadline(&x.s.rdl, time.Time{})
		}
		// An abort (another stream failed) sets a deadline in the past
		// after it marks the Conn: one that raced with the line above is
		// seen here, and one after it ends the wait.
		if c.aborted.Load() {
			return c.fail(c.ioErr("exchange with", errAborted))
		}
		if err := x.s.wait(events, &x.s.rdl); err != nil {
			return c.fail(c.ioErr("exchange with", err))
		}
	}
	return nil
}

// step writes and reads what the socket allows now and says whether
// anything moved.
func (x *exchangeState) step() (bool, error) {
	c, moved := x.c, false
	if x.wleft > 0 {
		n, err := x.s.writevNow(x.wbufs)
		if err != nil {
			return false, c.fail(c.ioErr("send to", err))
		}
		if n > 0 {
			x.wbufs = consumed(x.wbufs, n)
			x.wleft -= n
			x.sent = x.outLen - min(x.wleft, x.outLen)
			moved = true
		}
	}
	var n int
	var err error
	switch {
	case !x.inHdr:
		if n, err = x.s.readNow(c.rhdr[x.hdr:]); n > 0 {
			if x.hdr += n; x.hdr == frameHdrLen {
				if err := x.headerDone(); err != nil {
					return false, err
				}
			}
		}
	case x.got < len(x.in):
		n, err = x.s.readNow(x.in[x.got:])
		x.got += n
	}
	if err != nil {
		if errors.Is(err, io.EOF) && (x.hdr > 0 || x.got > 0) {
			err = io.ErrUnexpectedEOF
		}
		return false, c.fail(c.ioErr("recv from", err))
	}
	return moved || n > 0, nil
}

// headerDone checks the peer's frame header, as Recv does, and takes the
// payload bytes read ahead with it.
func (x *exchangeState) headerDone() error {
	c := x.c
	n, total, err := c.parseHeader()
	if err != nil {
		return err
	}
	if err := c.checkTag(n); err != nil {
		return err
	}
	if total != len(x.in) {
		le := &wire.LengthError{Got: total, Want: len(x.in)}
		c.fail(le)
		return le
	}
	if n != len(x.in) {
		return c.fail(fmt.Errorf("hostnet: recv from %s: peer cut a %d-byte message into a %d-byte piece where this side exchanges it whole: %w", c.remote, total, n, wire.ErrProtocol))
	}
	x.inHdr = true
	x.got = copy(x.in, c.rbuf[c.rpos:c.rend])
	c.rpos += x.got
	return nil
}
