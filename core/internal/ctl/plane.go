// Package ctl is a communicator's control plane: beside its data links,
// every rank of a communicator of two or more listens on a socket of its
// own (its address travels in core's init exchange, core/init.go agree),
// which a revoke does not close and which answers on a goroutine of its
// own while the rank is busy in a call. A rank asks a peer there (Ask)
// whether it is there (Probe), hands it a verdict (Revoke) or the
// survivors' new unique id (Shrink); every hello is answered with what the
// peer knows: the verdict it adopted, if any, and the first failure it
// told its peers of.
//
// The package carries the messages; what a rank does with them is core's
// (core/revoke.go: when to probe, who is lost, adopting a verdict;
// core/shrink.go), which the serving side reaches through one interface,
// Answerer.
package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// Answerer is what the plane needs of its rank's communicator (core's
// Comm) to answer a peer.
type Answerer interface {
	// Answer acts on m, a peer's checked message (a revoke: adopt its
	// verdict), and returns this rank's answer; false: the rank answers
	// nothing (its user destroyed or aborted it), so that a peer that
	// probes takes it for lost.
	Answer(m Msg) (Answer, bool)
}

// Plane is one rank's side of the control plane.
type Plane struct {
	l       *hostnet.Listener
	cfg     hostnet.Config
	secret  hostnet.Secret
	rank, n int
	addrs   []string // every rank's control address (SetAddrs)
	shrinks chan Msg // shrink messages from the survivors' leader
}

// shrinkQueue is how many shrink messages wait for a Shrink: a Shrink
// nobody waits for drops the later ones, the oldest are enough.
const shrinkQueue = 8

// Listen opens the control plane of rank of n on the interface of cfg
// (the rank's data links), for the peers that hold secret; Serve answers
// them.
func Listen(cfg hostnet.Config, secret hostnet.Secret, rank, n int) (*Plane, error) {
	l, err := hostnet.Listen(cfg, secret)
	if err != nil {
		return nil, fmt.Errorf("%w: the control plane: %w", sdk.ErrSystemError, err)
	}
	return &Plane{l: l, cfg: cfg, secret: secret, rank: rank, n: n, shrinks: make(chan Msg, shrinkQueue)}, nil
}

// Addr is the address peers reach this plane at.
func (p *Plane) Addr() string { return p.l.Addr() }

// SetAddrs sets every rank's control address, indexed by rank, before
// the first Ask.
func (p *Plane) SetAddrs(addrs []string) { p.addrs = addrs }

// Shrinks delivers the shrink messages peers sent, oldest first.
func (p *Plane) Shrinks() <-chan Msg { return p.shrinks }

// Close stops listening and answering; a nil Plane (a communicator of one
// rank has none) is left as it is.
func (p *Plane) Close() {
	if p != nil {
		p.l.Close()
	}
}

// Serve answers the plane through a, each peer on a goroutine of its own,
// until Close: run it on a goroutine of its own, so that the rank answers
// while it is busy in a call.
func (p *Plane) Serve(a Answerer) {
	for {
		conn, hello, err := p.l.Accept()
		if errors.Is(err, hostnet.ErrClosed) {
			return
		}
		if err != nil {
			continue // nobody came within the deadline: keep listening
		}
		go p.answer(a, conn, hello)
	}
}

func (p *Plane) answer(a Answerer, conn *hostnet.Conn, hello []byte) {
	defer conn.Close()
	m, err := decode(hello, p.n)
	if err != nil {
		return // a stranger's or a broken peer's: no answer
	}
	ans, ok := a.Answer(m)
	if !ok {
		return
	}
	if m.Kind == Shrink {
		select {
		case p.shrinks <- m:
		default: // a Shrink nobody waits for: the oldest are enough
		}
	}
	rep := reply{Failure: ans.Failure}
	if ans.Verdict != nil {
		v := RevokeMsg(*ans.Verdict)
		v.From = p.rank
		rep.Revoked, _ = json.Marshal(v)
	}
	b, _ := json.Marshal(rep)
	_ = conn.Send(b)
}

// Ask sends m, from this rank, to rank r's control plane, within wait, and
// returns r's answer.
func (p *Plane) Ask(r int, m Msg, wait time.Duration) (Answer, error) {
	if r < 0 || r >= len(p.addrs) {
		return Answer{}, fmt.Errorf("%w: the control plane knows no address of rank %d (it knows %d)", sdk.ErrInvalidUsage, r, len(p.addrs))
	}
	cfg := p.cfg
	cfg.Timeout = wait
	m.From = p.rank
	hello, err := json.Marshal(m)
	if err != nil {
		return Answer{}, err
	}
	conn, err := hostnet.Dial(p.addrs[r], cfg, p.secret, hello)
	if err != nil {
		return Answer{}, err
	}
	defer conn.Close()
	b, err := conn.RecvMsg(hostnet.MaxHello)
	if err != nil {
		return Answer{}, err
	}
	var rep reply
	if err := json.Unmarshal(b, &rep); err != nil {
		return Answer{}, fmt.Errorf("%w: a malformed control reply from rank %d: %v", sdk.ErrRemoteError, r, err)
	}
	a := Answer{Failure: rep.Failure}
	if len(rep.Revoked) == 0 {
		return a, nil
	}
	v, err := decode(rep.Revoked, p.n)
	if err != nil {
		return Answer{}, fmt.Errorf("rank %d's verdict: %w", r, err)
	}
	verdict := v.Verdict()
	a.Verdict = &verdict
	return a, nil
}
