package executor

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The relay proxy: the host half of a device rank's relays (relay.go)
// on a goroutine of its own, as NCCL's proxy thread progresses what its
// kernels wait for. The caller launches a relay and hands the proxy a job;
// the proxy waits for the landed word, publishes the step, waits for every
// rank's and raises the go word, in the order the jobs came. Meanwhile the
// caller returns and enqueues its next call, so back-to-back relays cost
// about one launch each rather than a launch, the device's turn-around and
// the step.
//
// Jobs pass through a ring (one writer, one reader, no lock): the caller
// writes a slot and then publishes handed, the proxy reads it and then
// publishes done. The proxy polls for the next job a while (relaySpin)
// before it sleeps, since a job's wait for its landed word is shorter than
// the wakeup of a sleeping goroutine on a busy host.

// relayRing bounds the relays in flight: a caller that gets this far
// ahead waits for the proxy. One launch ahead is what overlaps; a few
// absorb jitter; each is a kernel queued on the device that waits on the
// host. On 2 x H200 (nvidia:2,host:3, 700 B) 4 ran 11.0-15.6 us a call
// and 2 ran 12.0-15.6 (docs/performance.md).
const relayRing = 4

// relayJob is one relay's host half.
type relayJob struct {
	landed, goWord *uint64
	value          uint64
	stream         loader.Stream
	// sig labels the step; call names it in a mismatch.
	sig  uint64
	call hostcomm.Call
}

type relayProxy struct {
	e    *Executor
	node *hostnet.ShmNode
	// spin is how long the proxy polls for its next job before it sleeps:
	// relaySpin where the host has a core for it beside the caller's,
	// none where the ranks already share cores (polling would take them).
	spin time.Duration
	ring [relayRing]relayJob
	// handed and done count the jobs written and answered.
	handed, done atomic.Uint64
	// wake holds a token when a job was handed (the proxy may sleep).
	wake chan struct{}
	quit chan struct{}
	// exited is closed when run returns.
	exited chan struct{}
	stop   sync.Once
	// failed is the first job's error; every later job aborts.
	failed atomic.Pointer[error]
}

// startRelayProxy starts e's proxy on its windows.
func (e *Executor) startRelayProxy(node *hostnet.ShmNode) *relayProxy {
	p := &relayProxy{e: e, node: node, wake: make(chan struct{}, 1), quit: make(chan struct{}), exited: make(chan struct{})}
	if node.Cores() >= 2 {
		p.spin = relaySpin
	}
	go p.run()
	return p
}

// hand gives the proxy a relay just launched, with a hold on the windows
// (ShmNode.Hold) that the proxy ends. It waits only when relayRing relays
// are in flight, each of which the proxy answers within its deadlines.
func (p *relayProxy) hand(j relayJob) {
	n := p.handed.Load()
	for i := 0; n-p.done.Load() >= relayRing; i++ {
		pause(i)
	}
	p.ring[n%relayRing] = j
	p.handed.Store(n + 1)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// drain waits until the proxy has answered every job handed to it and
// returns its failure, if any. Each job ends within the communicator's
// deadlines, and after a failure the rest end at once.
func (p *relayProxy) drain() error {
	n := p.handed.Load()
	for i := 0; p.done.Load() != n; i++ {
		pause(i)
	}
	return p.failure()
}

// failure is the error of the first relay that failed after its call
// returned.
func (p *relayProxy) failure() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// close stops the proxy once it has answered every job handed to it.
func (p *relayProxy) close() {
	p.abandon()
	<-p.exited
}

// abandon is close without the wait, for a rank whose plugin call is
// stuck (the watchdog fired): the proxy ends within its deadlines.
func (p *relayProxy) abandon() { p.stop.Do(func() { close(p.quit) }) }

// abandonRelays stops sp's proxy without waiting (nil-safe).
func (sp *shmPlane) abandonRelays() {
	if sp != nil && sp.relay.proxy != nil {
		sp.relay.proxy.abandon()
	}
}

func (p *relayProxy) run() {
	defer close(p.exited)
	for {
		next := p.done.Load()
		if !p.await(next) {
			return
		}
		p.finish(&p.ring[next%relayRing])
		p.done.Store(next + 1)
	}
}

// await waits for job next; false once quit with nothing left.
func (p *relayProxy) await(next uint64) bool {
	start := time.Now()
	for i := 0; p.handed.Load() == next; i++ {
		if p.spin > 0 && (i&63 != 0 || time.Since(start) < p.spin) {
			continue
		}
		select {
		case <-p.wake:
		case <-p.quit:
			return p.handed.Load() != next
		}
	}
	return true
}

// finish answers one job: the go word once the step is published and
// every rank's seen, else the abort. Either way the device reads host
// memory no more than it did, and the hold on the windows ends after.
func (p *relayProxy) finish(j *relayJob) {
	e := p.e
	defer p.node.Exit()
	answer := j.value | loader.RelayAbort
	defer func() { atomic.StoreUint64(j.goWord, answer) }()
	if p.failure() != nil {
		return
	}
	end := region("relay.landed")
	err := e.awaitWord(j.landed, j.value, j.stream, "put its input in the shared window", p.closing)
	end()
	if err == nil {
		end = region("relay.step")
		if err = p.node.Sync(j.sig); err != nil {
			err = fmt.Errorf("in the host's shared windows: %w", e.world.StepErrorIn(j.call, err, -1))
		}
		end()
	}
	if err != nil {
		err = fmt.Errorf("an earlier %s, relayed, failed after its call returned: %w", j.call.Describe(), err)
		p.failed.CompareAndSwap(nil, &err)
		return
	}
	answer = j.value
}

// closing ends a wait for the device once the windows close (Destroy or
// Abort): Close waits for the job's hold, and a device stuck behind
// earlier work (a vendor collective whose peer died, which only the
// vendor's abort after this ends) would hold it for FLAGCX_TIMEOUT. The
// job then answers abort, which the relay reads if it ever runs.
func (p *relayProxy) closing() error {
	if p.node.Closing() {
		return fmt.Errorf("rank %d: the shared windows closed (the communicator was destroyed or aborted) while a relay waited for the device: %w", p.e.rank, hostnet.ErrClosed)
	}
	return nil
}

// pause is a wait's i-th turn: a spin, then a yield, then (a wait that
// lasts, for peers that come late) a short sleep.
func pause(i int) {
	switch {
	case i < 64:
	case i < 4096:
		runtime.Gosched()
	default:
		time.Sleep(20 * time.Microsecond)
	}
}
