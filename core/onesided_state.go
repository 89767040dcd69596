package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
)

// rmaKind is what an RMA call does.
type rmaKind uint8

const (
	rmaPut rmaKind = iota + 1
	rmaGet
	rmaPutSignal
	rmaSignal
)

// osWindow is the one-sided state of a window (filled in by the
// implementation).
type osWindow struct{}

func notYet(name string, rank int) error {
	return fmt.Errorf("%w: %s on rank %d: one-sided communication is being implemented", sdk.ErrNotSupported, name, rank)
}

func (c *Comm) registerWindow(name string, buf Buffer, n int) (*Window, error) {
	return nil, notYet(name, c.rank)
}
func (c *Comm) windowAt(name string, index int) (*Window, error) { return nil, notYet(name, c.rank) }
func (w *Window) free() error                                     { return notYet("Free", w.c.rank) }
func (c *Comm) rmaCall(name string, peer int, ops []RMA, k rmaKind, s Stream) error {
	return notYet(name, c.rank)
}
func (c *Comm) waitSignal(waits []SignalWait, s Stream) error { return notYet("WaitSignal", c.rank) }
func (c *Comm) signalValue(peer int) (uint64, error)          { return 0, notYet("SignalValue", c.rank) }
func (c *Comm) registerSignals(buf Buffer) error              { return notYet("RegisterSignals", c.rank) }
func (c *Comm) registerStaging(buf []byte) error              { return notYet("RegisterStaging", c.rank) }
func (c *Comm) readCounter() uint64                           { return 0 }
func (c *Comm) waitCounter(target uint64) error               { return notYet("WaitCounter", c.rank) }
