package onesided

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// The one-sided state of a communicator: its own links, the window table,
// the signal slots, the completion counter, and the goroutines that serve
// the peers. The transports are in files of their own: pair.go and
// serve.go (messages over the one-sided links: shared-memory rings, TCP,
// the net plugin), shm.go (same host, straight into a peer's shared
// window), device.go (device memory, through host staging).

// State is a communicator's one-sided machinery, started by its first
// window registration (collective, so every rank starts it at the same
// call).
type State struct {
	c       Comm
	rank, n int
	// links carry nothing but one-sided traffic (see Start).
	links   Links
	dev     Device // nil on a host rank
	timeout time.Duration

	mu      sync.Mutex
	windows []*Window // by registration number

	peers []*pair // by rank; nil for this rank

	sigMu  sync.Mutex            // serializes the device slots' read-modify-write, and swaps
	sig    atomic.Pointer[slots] // the slots in use
	ownSig []uint64              // the communicator's own slots

	// local counts the completed operations that needed no peer's
	// acknowledgement (to this rank itself, or straight into a same-host
	// window).
	local atomic.Uint64

	staging    []byte // RegisterStaging's, or nil
	ownStaging []byte

	bell    doorbell
	wg      sync.WaitGroup
	stopped chan struct{}
	stopMu  sync.Mutex
	down    error // why the machinery stopped (Destroy, Abort)
}

// doorbell wakes the goroutines waiting for a signal, an acknowledgement or
// an answer: ring closes the channel that wait handed out.
type doorbell struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *doorbell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *doorbell) ring() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// Start starts c's one-sided machinery for the user's call name: every
// rank calls it at the same registration. Its links are c.Split's (see
// Links); staging is RegisterStaging's memory, or nil.
func Start(name string, c Comm, staging []byte) (*State, error) {
	rank, n := c.Rank(), c.Size()
	links, err := c.Split()
	if err != nil {
		return nil, fmt.Errorf("%s on rank %d: starting the one-sided links: %w", name, rank, err)
	}
	o := &State{c: c, rank: rank, n: n, links: links, dev: c.Device(), timeout: c.Timeout(), peers: make([]*pair, n),
		ownSig: make([]uint64, n), stopped: make(chan struct{}), staging: staging}
	if o.timeout <= 0 {
		o.timeout = hostnet.DefaultTimeout
	}
	o.sig.Store(&slots{host: o.ownSig})
	for r := range n {
		if l := links.Link(r); l != nil {
			o.peers[r] = newPair(o, r, l)
		}
	}
	for _, p := range o.peers {
		if p != nil {
			o.wg.Add(2)
			go p.serve()
			go p.answer()
		}
	}
	return o, nil
}

// Links are the links the machinery runs on.
func (o *State) Links() Links { return o.links }

// Stop stops the progress goroutines (closing the one-sided links ends
// their waits), then releases the windows. abort: the links are aborted.
// quick: the goroutines are not waited for longer than a moment (one may
// be inside a plugin call that the watchdog gave up on).
func (o *State) Stop(abort, quick bool) error {
	o.stopMu.Lock()
	if o.down == nil {
		o.down = fmt.Errorf("%w: the communicator was destroyed or aborted", sdk.ErrInvalidUsage)
		close(o.stopped)
	}
	o.stopMu.Unlock()
	o.bell.ring()
	errs := []error{o.links.Close(abort)}
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	wait := o.timeout
	if quick {
		wait = time.Second
	}
	select {
	case <-done:
	case <-time.After(wait):
		// A goroutine is stuck inside a plugin call: the memory it may
		// still use is left, not freed under it.
		return errors.Join(append(errs, fmt.Errorf("%w: rank %d: a one-sided progress goroutine did not stop within %v; its windows were left allocated", sdk.ErrSystemError, o.rank, wait))...)
	}
	o.mu.Lock()
	ws := o.windows
	o.mu.Unlock()
	for _, w := range ws {
		errs = append(errs, w.Release())
	}
	return errors.Join(errs...)
}

// Stopped says why the machinery stopped, or nil while it runs.
func (o *State) Stopped() error {
	select {
	case <-o.stopped:
		return o.down
	default:
		return nil
	}
}

// await waits until ready says so: it checks, spins a moment, then sleeps
// until the bell rings. It fails with late() when progress() stays the
// same for the deadline, and when the machinery stops.
func (o *State) await(name string, ready func() (bool, error), progress func() uint64, late func() error) error {
	last, since := progress(), time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for spin := 0; ; spin++ {
		bell := o.bell.wait()
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		if err := o.Stopped(); err != nil {
			return fmt.Errorf("%s on rank %d: %w", name, o.rank, err)
		}
		if p := progress(); p != last {
			last, since = p, time.Now()
		}
		left := o.timeout - time.Since(since)
		if left <= 0 {
			return late()
		}
		if spin < 64 {
			continue // a signal a moment away costs no sleep
		}
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-bell:
		case <-timer.C:
		case <-o.stopped:
		}
	}
}
