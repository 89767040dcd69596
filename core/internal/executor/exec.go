package executor

import (
	"runtime"
	"sync"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Execute runs a plan: each lane in its own goroutine, steps in plan order
// within a lane, a step starting once the steps it depends on are done. A
// failure stops every lane; on a schedule that spans communicators it also
// aborts this communicator (Owner.Failure), so that the other ranks,
// waiting on this one, fail at once instead of at their deadline.
func (e *Executor) Execute(p *sched.Plan, b *Bufs, s loader.Stream) error {
	if p.Path == sched.PathShm {
		if err := e.RunShm(p, b, s); err != nil {
			return e.owner.Failure(p, err)
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
	defer e.bindDevice()()
	if err := e.ensure(p); err != nil {
		return err
	}
	ch, err := e.newChain(p, s)
	if err != nil {
		return e.owner.Failure(p, err)
	}
	lanes := p.Lanes()
	if len(lanes) == 1 || inOrder(p) {
		if err := e.runInOrder(p, b, s, ch, len(lanes) > 1); err != nil {
			return e.owner.Failure(p, err)
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
			if Spans(p) {
				e.owner.ShutHost() // unblocks lanes waiting in hostnet, here and on peers
			}
		})
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Add(1)
		go func(lane sched.Lane) {
			defer wg.Done()
			defer e.bindDevice()()
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
					err = e.step(p, i, b, s)
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
		return e.owner.Failure(p, first)
	}
	return nil
}

// runInOrder runs a plan's steps one after the other on the calling
// goroutine (bound to the device: Execute); with several lanes a step
// first waits for the device work of the steps it depends on (one lane's
// stream orders its steps itself).
func (e *Executor) runInOrder(p *sched.Plan, b *Bufs, s loader.Stream, ch *chain, lanes bool) error {
	for i := 0; i < len(p.Steps); i++ {
		if e.stagedSteps(p, i, ch) {
			if err := e.runStaged(p, i, b, s, ch); err != nil {
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
			err = e.step(p, i, b, s)
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

// BindDevice keeps the calling goroutine on its OS thread and makes
// device dev of p current there (nothing on the host: p nil), as vendor
// runtimes want for work on a device's memory and streams (the current
// device is per thread, and a lane's goroutine would otherwise wander
// between threads). It returns what releases the thread. core binds its
// own device work with it too (init, stop, Guard).
func BindDevice(p *loader.Plugin, dev int) func() {
	if p == nil {
		return func() {}
	}
	runtime.LockOSThread()
	_ = p.SetDevice(dev) // a plugin without setDevice binds devices itself
	return runtime.UnlockOSThread
}

func (e *Executor) bindDevice() func() { return BindDevice(e.plugin, e.device) }

// Spans reports whether a plan's steps involve several communicators,
// whose peers would wait forever on a rank that gave up.
func Spans(p *sched.Plan) bool { return p.Path != sched.PathVendor && p.Path != sched.PathHostComm }

// laneStream is the stream a lane's device work goes to.
func (e *Executor) laneStream(l sched.Lane, s loader.Stream) loader.Stream {
	switch l {
	case sched.LaneD2H:
		return e.d2h
	case sched.LaneH2D:
		return e.h2d
	}
	return s
}
