package host

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
)

// DefaultLocalTimeout is how long a LocalPeers Send or Recv waits for its
// partner before failing.
const DefaultLocalTimeout = 10 * time.Second

// LocalOption configures NewLocalPeers.
type LocalOption func(*localNet)

// WithLocalTimeout sets how long Send and Recv wait for the other side
// (default DefaultLocalTimeout), so that a bug or a count mismatch fails
// instead of hanging.
func WithLocalTimeout(d time.Duration) LocalOption {
	return func(n *localNet) { n.timeout = d }
}

// NewLocalPeers connects n ranks in memory, for tests and for running
// several ranks in one process (one goroutine each). Element i is rank i.
//
// The links do not buffer: a Send waits until the receiver has copied the
// message (a rendezvous), which is the strictest transport an algorithm
// can meet, so one that completes here completes over any buffering.
// Recv checks the length (a different one is an error wrapping
// sdk.ErrInvalidUsage: the ranks disagree on a count). A partner that does
// not show up within the timeout gives an error wrapping
// sdk.ErrRemoteError. Breaking the Peers contract (two Sends to one peer,
// or two Recvs from one peer, at the same time) gives an error wrapping
// sdk.ErrInvalidUsage.
func NewLocalPeers(n int, opts ...LocalOption) []Peers {
	if n < 1 {
		panic(fmt.Sprintf("host: NewLocalPeers(%d): need at least one rank", n))
	}
	net := &localNet{n: n, timeout: DefaultLocalTimeout}
	for _, o := range opts {
		o(net)
	}
	net.links = make([]localLink, n*n)
	for i := range net.links {
		net.links[i].ch = make(chan *localMsg)
		net.links[i].msg.done = make(chan struct{}, 1)
	}
	peers := make([]Peers, n)
	for r := range peers {
		peers[r] = &localPeer{net: net, rank: r}
	}
	return peers
}

type localNet struct {
	n       int
	timeout time.Duration
	links   []localLink // [from*n + to]
}

// localLink carries messages one way between two ranks. The Peers contract
// allows one Send and one Recv on it at a time, so the single msg is reused.
type localLink struct {
	ch                 chan *localMsg
	msg                localMsg
	sending, receiving atomic.Bool
}

type localMsg struct {
	buf  []byte
	done chan struct{}
}

type localPeer struct {
	net  *localNet
	rank int
}

func (p *localPeer) Rank() int { return p.rank }
func (p *localPeer) Size() int { return p.net.n }

func (p *localPeer) link(from, to int) (*localLink, error) {
	if from < 0 || from >= p.net.n || to < 0 || to >= p.net.n {
		return nil, fmt.Errorf("%w: local peers: rank %d out of range for %d ranks", sdk.ErrInvalidArgument, max(from, to), p.net.n)
	}
	return &p.net.links[from*p.net.n+to], nil
}

func (p *localPeer) Send(peer int, buf []byte) error {
	l, err := p.link(p.rank, peer)
	if err != nil {
		return err
	}
	if !l.sending.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: local peers: rank %d has two Sends to rank %d at once (the Peers contract allows one)", sdk.ErrInvalidUsage, p.rank, peer)
	}
	defer l.sending.Store(false)
	l.msg.buf = buf
	t := time.NewTimer(p.net.timeout)
	defer t.Stop()
	select {
	case l.ch <- &l.msg:
	case <-t.C:
		return fmt.Errorf("%w: local peers: rank %d waited %v for rank %d to receive %d bytes: is that rank stuck, or do the ranks disagree on the sequence of operations?",
			sdk.ErrRemoteError, p.rank, p.net.timeout, peer, len(buf))
	}
	<-l.msg.done // the receiver has copied (or rejected) the message
	return nil
}

func (p *localPeer) Recv(peer int, buf []byte) error {
	l, err := p.link(peer, p.rank)
	if err != nil {
		return err
	}
	if !l.receiving.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: local peers: rank %d has two Recvs from rank %d at once (the Peers contract allows one)", sdk.ErrInvalidUsage, p.rank, peer)
	}
	defer l.receiving.Store(false)
	t := time.NewTimer(p.net.timeout)
	defer t.Stop()
	var m *localMsg
	select {
	case m = <-l.ch:
	case <-t.C:
		return fmt.Errorf("%w: local peers: rank %d waited %v for %d bytes from rank %d: is that rank stuck, or do the ranks disagree on the sequence of operations?",
			sdk.ErrRemoteError, p.rank, p.net.timeout, len(buf), peer)
	}
	got := len(m.buf)
	if got == len(buf) {
		copy(buf, m.buf)
	}
	m.done <- struct{}{}
	if got != len(buf) {
		return fmt.Errorf("%w: local peers: rank %d got %d bytes from rank %d where %d were expected: the ranks disagree on a count or data type",
			sdk.ErrInvalidUsage, p.rank, got, peer, len(buf))
	}
	return nil
}
