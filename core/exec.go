package core

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// execute runs a plan: each lane in its own goroutine, steps in plan order
// within a lane, a step starting once the steps it depends on are done. A
// failure stops every lane; on a schedule that spans communicators it also
// aborts this communicator, so that the other ranks, waiting on this one,
// fail at once instead of at their deadline.
func (c *Comm) execute(p *sched.Plan, b *callBufs, s loader.Stream) error {
	if p.Path == sched.PathShm {
		if err := c.runShm(p, b, s); err != nil {
			return c.failure(p, err)
		}
		return nil
	}
	if len(p.Steps) == 0 {
		return nil
	}
	// From here on this goroutine makes device calls: freeing pinned or
	// device memory (ensure) synchronises the thread's current device,
	// which on a thread last bound to another rank's device of this
	// process waits for that rank's collective, itself waiting for this
	// rank (TestEnsureBindsTheDevice).
	defer c.bindDevice()()
	if err := c.ensure(p); err != nil {
		return err
	}
	ch, err := c.newChain(p, s)
	if err != nil {
		return c.failure(p, err)
	}
	lanes := p.Lanes()
	if len(lanes) == 1 || inOrder(p) {
		if err := c.runInOrder(p, b, s, ch, len(lanes) > 1); err != nil {
			return c.failure(p, err)
		}
		return nil
	}
	done := make([]chan struct{}, len(p.Steps))
	for i := range done {
		done[i] = make(chan struct{})
	}
	abort := make(chan struct{})
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() {
			first = err
			close(abort)
			if spans(p) {
				c.shutHost() // unblocks lanes waiting in hostnet, here and on peers
			}
		})
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Add(1)
		go func(lane sched.Lane) {
			defer wg.Done()
			defer c.bindDevice()()
			for i := range p.Steps {
				st := &p.Steps[i]
				if st.Lane != lane {
					continue
				}
				for _, d := range st.Deps {
					select {
					case <-done[d]:
					case <-abort:
						return
					}
				}
				select {
				case <-abort:
					return
				default:
				}
				err := ch.await(i)
				if err == nil {
					err = c.step(p, i, b, s)
				}
				if err == nil {
					err = ch.record(i)
				}
				if err != nil {
					fail(err)
					return
				}
				close(done[i])
			}
		}(lane)
	}
	wg.Wait()
	if first == nil {
		first = ch.finish()
	}
	if first != nil {
		return c.failure(p, first)
	}
	return nil
}

// runInOrder runs a plan's steps one after the other on the calling
// goroutine (bound to the device: execute); with several lanes a step
// first waits for the device work of the steps it depends on (one lane's
// stream orders its steps itself).
func (c *Comm) runInOrder(p *sched.Plan, b *callBufs, s loader.Stream, ch *chain, lanes bool) error {
	for i := 0; i < len(p.Steps); i++ {
		if c.stagedSteps(p, i, ch) {
			if err := c.runStaged(p, i, b, s, ch); err != nil {
				return err
			}
			i += 2
			continue
		}
		var err error
		if lanes {
			err = ch.await(i)
		}
		if err == nil {
			err = c.step(p, i, b, s)
		}
		if err == nil {
			err = ch.record(i)
		}
		if err != nil {
			return err
		}
	}
	return ch.finish()
}

// inOrder reports whether a plan runs best as one sequence of steps on the
// calling goroutine: a pipeline of one chunk (a chain of steps per chunk)
// leaves the lanes nothing to overlap, and a goroutine per lane would only
// add its start (a stack grown for the plugin's calls, the device bound to
// its thread) and a wake-up per step to the call. Plans without chunks (p2p
// exchanges) keep their lanes: their steps may need to run at once. Steps
// depend only on earlier ones, which plan order then satisfies.
func inOrder(p *sched.Plan) bool {
	if p.Chunks != 1 {
		return false
	}
	for i := range p.Steps {
		for _, d := range p.Steps[i].Deps {
			if d >= i {
				return false
			}
		}
	}
	return true
}

// bindDevice keeps the calling goroutine on its OS thread and makes this
// rank's device current there, as vendor runtimes want for work on a
// device's memory and streams (the current device is per thread, and a
// lane's goroutine would otherwise wander between threads). It returns
// what releases the thread.
func (c *Comm) bindDevice() func() {
	if !c.be.OnDevice() {
		return func() {}
	}
	runtime.LockOSThread()
	_ = c.be.Plugin.SetDevice(c.be.Device) // a plugin without setDevice binds devices itself
	return runtime.UnlockOSThread
}

// spans reports whether a plan's steps involve several communicators,
// whose peers would wait forever on a rank that gave up.
func spans(p *sched.Plan) bool { return p.Path != sched.PathVendor && p.Path != sched.PathHostComm }

// failure records a failed schedule: the communicator is aborted (the
// peers told what failed, then abortAll) and refuses further calls.
func (c *Comm) failure(p *sched.Plan, err error) error {
	if !spans(p) {
		return err
	}
	c.failStart(p, err)
	c.abortHost()
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.mu.Unlock()
	if c.isAbortedByUser() {
		return fmt.Errorf("%w: the communicator was aborted", sdk.ErrInvalidUsage)
	}
	return fmt.Errorf("%w (the communicator is aborted: destroy it)", err)
}

// failStart is the first half of failure, which waits for nothing: the
// peers learn what failed (before the links close: peers waiting on
// other host communicators than the one that failed learn what failed
// first), then abortAll's first two steps end every wait of this rank,
// on the host and in the vendor's library. A call that holds the shared
// windows while its device may still use them runs it before it waits
// for the device (runShm), since the device may wait on a peer that is
// gone.
func (c *Comm) failStart(p *sched.Plan, err error) {
	c.failOnce.Do(func() {
		c.notifyAll(fmt.Errorf("%s on rank %d: %w", p.Call.Coll.Title(), c.rank, err))
		c.shutHost()
		_ = c.abortVendor()
	})
}

func (c *Comm) isAbortedByUser() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// laneStream is the stream a lane's device work goes to.
func (c *Comm) laneStream(l sched.Lane, s loader.Stream) loader.Stream {
	switch l {
	case sched.LaneD2H:
		return c.d2h
	case sched.LaneH2D:
		return c.h2d
	}
	return s
}
