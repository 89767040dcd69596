package hostnet

import (
	"errors"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Tags. The word at [4:8] of a frame header (tcp/conn.go) carries the sender's
// tag: what the message is part of, in the caller's terms (core puts the
// digest of the collective call there). A receiver that expects another
// tag fails with *MismatchError rather than hand over bytes its caller
// would misread; 0 on either side is untagged and never checked. The same
// check guards a shared-memory step's label (shm.ShmNode.Wait), so one
// caller's digest serves every transport that carries it.
//
// A notice (internal/hostnet/tcp/tag.go) is sent instead of data: a rank
// that fails tells its peers what failed first (Notify), so that a rank that fails
// later because of it names the first failure rather than its neighbour.

// PeerFailure is a failure notice received instead of data (wire.PeerFailure).
type PeerFailure = wire.PeerFailure

// taggedLink is a Link whose messages carry tags and notices (tcp.TCPLink).
type taggedLink interface {
	SendTagged(p []byte, tag uint32) error
	RecvTagged(p []byte, tag uint32) error
	Notify(what string)
}

// SendTagged is l.Send(p) with p labelled tag where l's transport carries
// tags; elsewhere it is plain Send.
func SendTagged(l Link, p []byte, tag uint32) error {
	if t, ok := l.(taggedLink); ok {
		return t.SendTagged(p, tag)
	}
	return l.Send(p)
}

// RecvTagged is l.Recv(p) that expects the message to be labelled tag
// where l's transport carries tags: a message labelled otherwise gives an
// error wrapping *MismatchError, a notice one wrapping *PeerFailure.
func RecvTagged(l Link, p []byte, tag uint32) error {
	if t, ok := l.(taggedLink); ok {
		return t.RecvTagged(p, tag)
	}
	return l.Recv(p)
}

// Notify sends what as a failure notice on l, best effort: only where the
// transport carries notices and l's sending side is between messages, and
// within about a second. The link is unusable for data afterwards.
func Notify(l Link, what string) {
	if t, ok := l.(taggedLink); ok {
		t.Notify(what)
	}
}

// streamLink is a Link of several independent streams (tcp.TCPLink's sockets).
type streamLink interface {
	Streams() int
	SendStream(i int, p []byte, tag uint32) error
	RecvStream(i int, p []byte, tag uint32) error
}

// Streams is how many independent streams l carries: the sockets of a
// TCP link, 1 for every other transport.
func Streams(l Link) int {
	if s, ok := l.(streamLink); ok {
		return s.Streams()
	}
	return 1
}

// SendStream sends p, labelled tag, as one message on stream i of l alone
// (0 <= i < Streams(l)); the peer receives it with RecvStream on the same
// stream. Messages of one stream keep their order; different streams do
// not wait for each other, so that the caller can run one per goroutine
// and work on what each brings as it comes. A failure breaks every
// stream of l, as a failed Send does.
func SendStream(l Link, i int, p []byte, tag uint32) error {
	if s, ok := l.(streamLink); ok {
		return s.SendStream(i, p, tag)
	}
	return SendTagged(l, p, tag)
}

// RecvStream receives exactly len(p) bytes, labelled tag, from stream i
// of l (see SendStream).
func RecvStream(l Link, i int, p []byte, tag uint32) error {
	if s, ok := l.(streamLink); ok {
		return s.RecvStream(i, p, tag)
	}
	return RecvTagged(l, p, tag)
}

// exchangeLink is a Link that can move one message each way on the
// calling goroutine (tcp.TCPLink of one polled socket).
type exchangeLink interface {
	Exchange(out, in []byte, tag uint32, progress func(got, sent int)) (bool, error)
}

// Exchange sends out, labelled tag, while it receives exactly len(in)
// bytes labelled tag into in, both on the calling goroutine, where l's
// transport can (a TCP link of one polled socket: tcp.TCPLink.Exchange
// says why); progress, when set, hears how many bytes of each have moved.
// ok is false, with nothing moved, elsewhere: the caller sends and
// receives as usual. The peer may use Exchange or Send and Recv.
func Exchange(l Link, out, in []byte, tag uint32, progress func(got, sent int)) (ok bool, err error) {
	if x, can := l.(exchangeLink); can {
		return x.Exchange(out, in, tag, progress)
	}
	return false, nil
}

// leanLink is a Link that knows whether its hosts have few cores per
// rank (tcp.TCPLink.SetLean).
type leanLink interface {
	Lean() bool
}

// Lean reports whether l joins hosts of few cores per rank, where one
// thread should move both directions and reduce (the mesh says so of TCP
// links alike at both ends: linkIsLean).
func Lean(l Link) bool {
	x, ok := l.(leanLink)
	return ok && x.Lean()
}

// idleLink is a Link that can wait for a message without the deadline
// (NetLink: its receive fails the link when it gives up, so the wait
// cannot simply be repeated).
type idleLink interface {
	RecvIdle(p []byte) error
}

// RecvIdle is RecvTagged for a link that may be idle for long: the wait
// for the message to begin has no deadline (a passive peer's link stays
// quiet until another rank has work for it), the rest of the message has
// the link's. A closed link, a dead peer and a broken message end it as
// they end RecvTagged. TCP and shared memory keep a link whose receive
// timed out before the message began usable, so the wait is repeated.
func RecvIdle(l Link, p []byte, tag uint32) error {
	if il, ok := l.(idleLink); ok {
		return il.RecvIdle(p)
	}
	for {
		err := RecvTagged(l, p, tag)
		// A timeout in the middle of a message broke the link: the next
		// receive fails with ErrClosed, which ends the loop.
		if !errors.Is(err, ErrTimeout) {
			return err
		}
	}
}
