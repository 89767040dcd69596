package hostnet

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Tags. The word at [4:8] of a frame header (conn.go) carries the sender's
// tag: what the message is part of, in the caller's terms (core puts the
// digest of the collective call there). A receiver that expects another
// tag fails with *MismatchError rather than hand over bytes its caller
// would misread; 0 on either side is untagged and never checked. The same
// check guards a shared-memory step's label (ShmNode.Wait), so one
// caller's digest serves every transport that carries it.
//
// noticeTag marks a failure notice instead of data: a rank that fails
// tells its peers what failed first (Notify), so that a rank that fails
// later because of it names the first failure rather than its neighbour.
const (
	noticeTag = ^uint32(0)
	// maxNotice bounds a notice's text.
	maxNotice = 4096
	// noticeWait bounds the write of a notice: the peer may have stopped
	// reading, and a notice is best effort.
	noticeWait = time.Second
)

// PeerFailure is a failure notice received instead of data: What is the
// text the failing peer sent (Notify).
type PeerFailure struct{ What string }

func (e *PeerFailure) Error() string { return "the peer reported a failure: " + e.What }

// taggedLink is a Link whose messages carry tags and notices (TCPLink).
type taggedLink interface {
	sendTagged(p []byte, tag uint32) error
	recvTagged(p []byte, tag uint32) error
	notify(what string)
}

// SendTagged is l.Send(p) with p labelled tag where l's transport carries
// tags; elsewhere it is plain Send.
func SendTagged(l Link, p []byte, tag uint32) error {
	if t, ok := l.(taggedLink); ok {
		return t.sendTagged(p, tag)
	}
	return l.Send(p)
}

// RecvTagged is l.Recv(p) that expects the message to be labelled tag
// where l's transport carries tags: a message labelled otherwise gives an
// error wrapping *MismatchError, a notice one wrapping *PeerFailure.
func RecvTagged(l Link, p []byte, tag uint32) error {
	if t, ok := l.(taggedLink); ok {
		return t.recvTagged(p, tag)
	}
	return l.Recv(p)
}

// Notify sends what as a failure notice on l, best effort: only where the
// transport carries notices and l's sending side is between messages, and
// within about a second. The link is unusable for data afterwards.
func Notify(l Link, what string) {
	if t, ok := l.(taggedLink); ok {
		t.notify(what)
	}
}

func (l *TCPLink) sendTagged(p []byte, tag uint32) error {
	for _, c := range l.conns {
		c.wtag = tag
	}
	return l.Send(p)
}

func (l *TCPLink) recvTagged(p []byte, tag uint32) error {
	for _, c := range l.conns {
		c.rtag = tag
	}
	return l.Recv(p)
}

// notify sends on the first connection between frames: the first, which
// every message's receiver reads, where it can (a receiver of a striped
// message reads them all, and a notice on any fails its receive).
func (l *TCPLink) notify(what string) {
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
	c.fail(fmt.Errorf("this side failed and sent a failure notice: %w", ErrClosed))
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
			return c.fail(fmt.Errorf("hostnet: recv from %s: a %d-byte failure notice, above %d: %w", c.remote, n, maxNotice, ErrProtocol))
		}
		b := make([]byte, n)
		if err := c.readPayload(b); err != nil {
			return err
		}
		return c.fail(fmt.Errorf("hostnet: recv from %s: %w", c.remote, &PeerFailure{What: string(b)}))
	case got != 0 && c.rtag != 0 && got != c.rtag:
		return c.fail(fmt.Errorf("hostnet: recv from %s: %w", c.remote, &MismatchError{Got: uint64(got), Want: uint64(c.rtag)}))
	}
	return nil
}
