package tcp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// TCPLink bundles the connections to one peer and stripes large messages over
// them.
//
// A message of n bytes travels whole on conns[0] when n < StripeMin or when
// there is one connection. Otherwise it is cut into k contiguous pieces of
// n/k bytes (the first n%k pieces one byte longer), piece i sent on
// conns[i], all at once, where k grows with the size: 2 from StripeMin,
// one more per StripeMin/2 bytes, at most len(conns) (pieces), so that a
// message just above StripeMin is not cut into pieces too small to keep
// a socket busy. The receiver computes the same cut from its own len(p)
// and reads each piece straight into its slice of p. Both sides must therefore build their Link
// from the same number of connections, paired in the same order (let the
// dialer put the stream index in its hello), with the same StripeMin.
//
// Messages arrive in the order they were sent: both sides cut
// deterministically and each socket is FIFO.
//
// Like a Conn, a Link is full duplex: one goroutine may Send while another
// Recvs, but two Sends (or two Recvs) must not overlap. When a piece fails,
// the other pieces of that message are aborted and every connection of the
// Link is broken; Close it and build a new one. Close unblocks a blocked
// Send or Recv with an error wrapping ErrClosed.
type TCPLink struct {
	conns     []*Conn
	stripeMin int
	closed    atomic.Bool
	// lean: the hosts at its ends have few cores per rank (SetLean).
	lean bool
}

// SetLean says that the link's hosts have few cores per rank, so that a
// reduction on the thread that moves both directions beats a thread per
// direction (set before the link carries messages, alike at both ends).
func (l *TCPLink) SetLean(lean bool) { l.lean = lean }

// Lean is what SetLean said.
func (l *TCPLink) Lean() bool { return l.lean }

// NewTCPLink bundles conns (at least one, all to the same peer) with
// cfg.StripeMin. The Link owns the connections from now on.
func NewTCPLink(conns []*Conn, cfg Config) *TCPLink {
	if len(conns) == 0 {
		panic("hostnet: NewTCPLink needs at least one connection")
	}
	for i, c := range conns {
		if c == nil {
			panic(fmt.Sprintf("hostnet: NewTCPLink: connection %d is nil", i))
		}
	}
	return &TCPLink{conns: append([]*Conn(nil), conns...), stripeMin: max(cfg.StripeMin, 0)}
}

// Streams is the number of connections of the Link.
func (l *TCPLink) Streams() int { return len(l.conns) }

// RemoteAddr is the peer's address (of the first connection).
func (l *TCPLink) RemoteAddr() string { return l.conns[0].RemoteAddr() }

// pieces is how many connections a message of n bytes is cut over.
func (l *TCPLink) pieces(n int) int {
	if len(l.conns) == 1 || n < l.stripeMin || n < 2 {
		return 1
	}
	k := len(l.conns)
	if half := l.stripeMin / 2; half > 0 {
		k = min(k, max(2, n/half))
	}
	return min(k, n)
}

// Send sends p as one message (striped when large).
func (l *TCPLink) Send(p []byte) error {
	k := l.pieces(len(p))
	if k == 1 {
		return l.conns[0].sendFrame(p, len(p))
	}
	total := len(p)
	return l.each(p, k, func(c *Conn, piece []byte) error { return c.sendFrame(piece, total) })
}

// Recv receives one message of exactly len(p) bytes into p. A message of
// another length gives *LengthError with both whole-message lengths; p is
// never written past its end.
func (l *TCPLink) Recv(p []byte) error {
	k := l.pieces(len(p))
	if k == 1 {
		return l.conns[0].recvFrame(p, len(p))
	}
	total := len(p)
	return l.each(p, k, func(c *Conn, piece []byte) error { return c.recvFrame(piece, total) })
}

// each cuts p into n pieces and runs op on (conns[i], piece i) for all i
// at once, piece 0 on the calling goroutine. The first failure aborts the
// others and is returned.
func (l *TCPLink) each(p []byte, n int, op func(*Conn, []byte) error) error {
	base, rem := len(p)/n, len(p)%n
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	failed := func(err error) {
		once.Do(func() {
			first = err
			// Unblock every other piece, and anything the other direction
			// has in flight: the streams are out of step with the peer now.
			// (The failed Conn keeps its own error as the first one.)
			for _, c := range l.conns {
				c.abort(err)
			}
		})
	}
	off := base + min(rem, 1) // piece 0 stays on this goroutine
	for i := 1; i < n; i++ {
		size := base
		if i < rem {
			size++
		}
		piece := p[off : off+size : off+size]
		off += size
		wg.Add(1)
		go func(c *Conn) {
			defer wg.Done()
			if err := op(c, piece); err != nil {
				failed(err)
			}
		}(l.conns[i])
	}
	size0 := base + min(rem, 1)
	if err := op(l.conns[0], p[:size0:size0]); err != nil {
		failed(err)
	}
	wg.Wait()
	return first
}

// Close closes every connection of the Link.
func (l *TCPLink) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, c := range l.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Transport is "tcp".
func (l *TCPLink) Transport() string { return "tcp" }

// Conns is the link's sockets in stream order: the first carries every
// message that is not striped (the mesh and the net plugin's negotiation
// use it directly).
func (l *TCPLink) Conns() []*Conn { return l.conns }
