package onesided

import (
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The calls that move bytes or signals: Put, PutBatch, Get, PutSignal and
// Signal, checked on this rank, then each operation on the transport that
// reaches the peer's memory of its window.

// Kind is what an RMA call does.
type Kind uint8

// The kinds of RMA calls (PutBatch is Put of several operations).
const (
	Put Kind = iota + 1
	Get
	PutSignal
	Signal
)

// Op is one transfer between this rank and a peer (core.RMA): Bytes bytes
// at LocalOff of this rank's window Local and at RemoteOff of the peer's
// memory of window Remote.
type Op struct {
	Local     *Window
	LocalOff  int
	Remote    *Window
	RemoteOff int
	Bytes     int
}

// RMA runs the user's call name of kind k, ops to peer, after the work on
// s: checked on this rank first (nothing is sent for a bad call), then
// each operation on the transport that reaches peer's memory of its
// window.
func (o *State) RMA(name string, peer int, ops []Op, k Kind, s loader.Stream) error {
	if err := sdk.CheckPeer(peer, o.n); err != nil {
		return fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
	}
	for _, op := range ops {
		if err := o.check(name, peer, op); err != nil {
			return err
		}
		if k != PutSignal && op.Local == nil {
			return fmt.Errorf("%w: %s on rank %d: the RMA needs both windows (Local and Remote)", sdk.ErrInvalidArgument, name, o.rank)
		}
	}
	if err := o.syncStream(s); err != nil {
		return o.c.CallError(name, err)
	}
	if peer == o.rank {
		return o.self(name, ops, k)
	}
	p := o.peers[peer]
	if err := p.takeNak(); err != nil {
		return fmt.Errorf("%s: an earlier operation failed: %w", name, err)
	}
	if err := p.brokenErr(); err != nil {
		return fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
	}
	switch k {
	case Signal:
		return p.send(msgSignal, Op{})
	case Get:
		if o.direct(ops[0].Remote, peer) {
			if err := o.copyDirect(name, peer, ops[0], false); err != nil {
				return err
			}
			o.local.Add(1)
			return nil
		}
		return p.fetch(name, ops[0])
	}
	return o.puts(name, p, ops, k)
}

// puts runs the Puts (and PutSignals) of ops to p's rank in order: straight
// into its shared memory where it has some, else as messages.
func (o *State) puts(name string, p *pair, ops []Op, k Kind) error {
	for _, op := range ops {
		kind := msgPut
		if k == PutSignal {
			kind = msgPutSignal
		}
		if op.Bytes == 0 && kind == msgPutSignal {
			op, kind = Op{}, msgSignal
		}
		if op.Remote != nil && o.direct(op.Remote, p.rank) {
			if err := o.copyDirect(name, p.rank, op, true); err != nil {
				return err
			}
			if kind == msgPut {
				o.local.Add(1)
				continue
			}
			op, kind = Op{}, msgSignal // the bytes are there: the signal follows them
		}
		if err := p.send(kind, op); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
		}
	}
	return nil
}

// self runs operations of this rank on its own windows.
func (o *State) self(name string, ops []Op, k Kind) error {
	for _, op := range ops {
		if op.Bytes > 0 {
			dst, doff, src, soff := op.Remote.mem, op.RemoteOff, op.Local.mem, op.LocalOff
			if k == Get {
				dst, doff, src, soff = src, soff, dst, doff
			}
			if err := o.copyLocal(dst, doff, src, soff, op.Bytes); err != nil {
				return o.c.CallError(name, err)
			}
		}
		if k == PutSignal {
			if err := o.addSignal(o.rank); err != nil {
				return o.c.CallError(name, err)
			}
		}
		o.local.Add(1)
	}
	if k == Signal {
		if err := o.addSignal(o.rank); err != nil {
			return o.c.CallError(name, err)
		}
		o.local.Add(1)
	}
	return nil
}

// check is an operation's view of its windows on both sides: its handles
// valid, its bytes inside this rank's and peer's memory.
func (o *State) check(name string, peer int, op Op) error {
	if op.Local == nil || op.Remote == nil {
		if op.Bytes == 0 && op.Local == nil && op.Remote == nil {
			return nil
		}
		return fmt.Errorf("%w: %s on rank %d: the RMA needs both windows (Local and Remote)", sdk.ErrInvalidArgument, name, o.rank)
	}
	for _, w := range []*Window{op.Local, op.Remote} {
		if w.o != o {
			return fmt.Errorf("%w: %s on rank %d: window %d belongs to another communicator", sdk.ErrInvalidArgument, name, o.rank, w.index)
		}
	}
	if op.Local.Freed() {
		return fmt.Errorf("%w: %s on rank %d: window %d was freed on this rank (Window.Free)", sdk.ErrInvalidUsage, name, o.rank, op.Local.index)
	}
	if op.Bytes < 0 || op.LocalOff < 0 || op.RemoteOff < 0 {
		return fmt.Errorf("%w: %s on rank %d: negative offset or length (local %d, remote %d, %d bytes)", sdk.ErrInvalidArgument, name, o.rank, op.LocalOff, op.RemoteOff, op.Bytes)
	}
	if ln := op.Local.sizes[o.rank]; op.LocalOff > ln || op.Bytes > ln-op.LocalOff {
		return fmt.Errorf("%w: %s on rank %d: bytes [%d, %d) lie outside this rank's %d bytes of window %d", sdk.ErrInvalidArgument, name, o.rank, op.LocalOff, op.LocalOff+op.Bytes, ln, op.Local.index)
	}
	if rn := op.Remote.sizes[peer]; op.RemoteOff > rn || op.Bytes > rn-op.RemoteOff {
		return fmt.Errorf("%w: %s on rank %d: bytes [%d, %d) lie outside rank %d's %d bytes of window %d", sdk.ErrInvalidArgument, name, o.rank, op.RemoteOff, op.RemoteOff+op.Bytes, peer, rn, op.Remote.index)
	}
	return nil
}
