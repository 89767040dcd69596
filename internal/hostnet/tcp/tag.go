package tcp

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// noticeTag marks a failure notice instead of data (internal/hostnet/tag.go).
const (
	noticeTag = ^uint32(0)
	// maxNotice bounds a notice's text.
	maxNotice = 4096
	// noticeWait bounds the write of a notice: the peer may have stopped
	// reading, and a notice is best effort.
	noticeWait = time.Second
)

// SendTagged is Send with every frame labelled tag (hostnet.SendTagged).
func (l *TCPLink) SendTagged(p []byte, tag uint32) error {
	for _, c := range l.conns {
		c.wtag = tag
	}
	return l.Send(p)
}

// RecvTagged is Recv expecting frames labelled tag (hostnet.RecvTagged).
func (l *TCPLink) RecvTagged(p []byte, tag uint32) error {
	for _, c := range l.conns {
		c.rtag = tag
	}
	return l.Recv(p)
}

// SendStream sends p, labelled tag, as one message on connection i alone
// (hostnet.SendStream): the other connections neither wait for it nor
// carry part of it. A failure breaks every connection of the link.
func (l *TCPLink) SendStream(i int, p []byte, tag uint32) error {
	c := l.conns[i]
	c.wtag = tag
	return l.brokenBy(c.sendFrame(p, len(p)))
}

// RecvStream receives exactly len(p) bytes, labelled tag, from connection
// i alone (hostnet.RecvStream).
func (l *TCPLink) RecvStream(i int, p []byte, tag uint32) error {
	c := l.conns[i]
	c.rtag = tag
	return l.brokenBy(c.recvFrame(p, len(p)))
}

// brokenBy breaks every connection of l after one failed (the others are
// out of step with the peer now, and a goroutine waiting on one of them
// would otherwise wait for its deadline) and returns err.
func (l *TCPLink) brokenBy(err error) error {
	if err != nil {
		for _, c := range l.conns {
			c.abort(err)
		}
	}
	return err
}

// Notify sends on the first connection between frames: the first, which
// every message's receiver reads, where it can (a receiver of a striped
// message reads them all, and a notice on any fails its receive).
func (l *TCPLink) Notify(what string) {
	for _, c := range l.conns {
		if c.notify(what) {
			return
		}
	}
}

// notify sends what as a notice unless a frame is partly written (a link
// aborted by another stream's failure is still between frames when this
// side had not begun to send), and says whether it did.
func (c *Conn) notify(what string) bool {
	if c.closed.Load() || c.wopen.Load() {
		return false
	}
	if len(what) > maxNotice {
		what = what[:maxNotice]
	}
	var hdr [frameHdrLen]byte
	copy(hdr[0:4], frameMagic)
	binary.LittleEndian.PutUint32(hdr[4:8], noticeTag)
	binary.LittleEndian.PutUint64(hdr[8:16], uint64(len(what)))
	binary.LittleEndian.PutUint64(hdr[16:24], uint64(len(what)))
	c.wopen.Store(true) // no data after the notice
	c.fail(fmt.Errorf("this side failed and sent a failure notice: %w", wire.ErrClosed))
	_ = c.nc.SetWriteDeadline(time.Now().Add(noticeWait))
	_, err := c.nc.Write(append(hdr[:], what...))
	return err == nil
}

// checkTag checks the tag of the frame header just read (n payload bytes):
// a notice is read and returned as *PeerFailure, a tag other than the
// expected one as *MismatchError; either breaks the Conn.
func (c *Conn) checkTag(n int) error {
	got := binary.LittleEndian.Uint32(c.rhdr[4:8])
	switch {
	case got == noticeTag:
		if n > maxNotice {
			return c.fail(fmt.Errorf("hostnet: recv from %s: a %d-byte failure notice, above %d: %w", c.remote, n, maxNotice, wire.ErrProtocol))
		}
		b := make([]byte, n)
		if err := c.readPayload(b); err != nil {
			return err
		}
		return c.fail(fmt.Errorf("hostnet: recv from %s: %w", c.remote, &wire.PeerFailure{What: string(b)}))
	case got != 0 && c.rtag != 0 && got != c.rtag:
		return c.fail(fmt.Errorf("hostnet: recv from %s: %w", c.remote, &wire.MismatchError{Got: uint64(got), Want: uint64(c.rtag)}))
	}
	return nil
}
