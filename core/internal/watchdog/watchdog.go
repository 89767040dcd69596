// Package watchdog bounds the plugin calls of one rank's communicator by
// its deadline (FLAGCX_TIMEOUT): core's Comm starts one per device rank
// (core/init.go, InitRank) and marks its blocking plugin calls on it
// (core/guard.go). core re-exports Watchdog, PluginCall and TimeoutError
// under the same names (core/watchdog.go), which are the public API.
//
// What only the communicator may do, a call that is refused once the
// watchdog fired (Do) and stopping it (Close), are functions of this
// package rather than methods: core.Watchdog is an alias of Watchdog, so
// its methods are core's public API, and a user's Close would leave the
// communicator unwatched.
package watchdog

import (
	"fmt"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// TimeoutError is a plugin call that did not return within the
// communicator's deadline (FLAGCX_TIMEOUT). errors.Is matches
// core.ErrTimeout and sdk.ErrSystemError.
type TimeoutError struct {
	Rank    int           // the rank whose call timed out
	Plugin  string        // the plugin's name ("nvidia")
	Call    string        // the plugin entry: "allReduce", "streamSynchronize"
	After   string        // the collective begun before a call that waits for the device, or ""
	Timeout time.Duration // the deadline it missed
	// Stalled lists the ranks of this host whose process was gone or
	// stopped when the watchdog fired ("rank 2 (process 4242) is
	// stopped (...)"), the likely cause of a collective that never
	// returned; "" when there were none.
	Stalled string
}

// Error names the rank, the plugin call and the deadline, and what to look
// at.
func (e *TimeoutError) Error() string {
	call := e.Call
	if e.After != "" {
		call += " after " + e.After
	}
	if e.Stalled != "" {
		return fmt.Sprintf("rank %d: %s plugin: %s did not return within %v; the communicator was aborted (on this host %s)",
			e.Rank, e.Plugin, call, e.Timeout, e.Stalled)
	}
	return fmt.Sprintf("rank %d: %s plugin: %s did not return within %v; the communicator was aborted "+
		"(a device or a peer rank is stuck, or the work queued before the call needs longer than %s allows: "+
		"look at the other ranks' errors, or raise %s)",
		e.Rank, e.Plugin, call, e.Timeout, hostnet.EnvTimeout, hostnet.EnvTimeout)
}

// Unwrap makes errors.Is see core.ErrTimeout (which is hostnet.ErrTimeout)
// and sdk.ErrSystemError.
func (e *TimeoutError) Unwrap() []error { return []error{hostnet.ErrTimeout, sdk.ErrSystemError} }

// Watchdog bounds the plugin calls of one rank's communicator by its
// deadline (FLAGCX_TIMEOUT). When a call is still in flight past it, the
// watchdog aborts the communicator from its own goroutine, so that a vendor
// library blocked in a collective returns where it supports that (as
// NCCL's ncclCommAbort makes it), and that call, every later one, Err and
// Fired report a *TimeoutError naming the plugin, the call and the rank.
//
// Marking a call costs a mutex and a clock reading, no allocation and no
// goroutine, so that the calls on the latency path can all be marked; one
// goroutine per watchdog looks at the calls in flight a few times per
// deadline.
//
// A call that does not return even after the abort cannot be taken back:
// purego runs C on the calling goroutine's own OS thread, Go cannot unwind
// a C stack, and ending that thread would end the process. The goroutine
// and its thread are abandoned. This is why core's Comm.Guard runs work on a
// goroutine of its own: its caller still gets the error.
type Watchdog struct {
	rank    int
	plugin  string
	timeout time.Duration
	onFire  func(*TimeoutError) // aborts the communicator
	stalled func() string       // the peers of this host that are gone or stopped (TimeoutError.Stalled), or nil
	epoch   time.Time           // the clock of watchedCall.since

	mu     sync.Mutex
	calls  []watchedCall // in flight where busy; slots are reused
	last   string        // the last collective begun: what a later synchronize waits for
	err    *TimeoutError // set once, when the watchdog fires
	fired  chan struct{} // closed when it fires
	stop   chan struct{} // closed by Close
	closed bool
}

type watchedCall struct {
	busy        bool
	since       time.Duration // time.Since(epoch) when the call began
	call, after string
}

// PluginCall is one plugin call in flight, from Watchdog.Begin.
type PluginCall struct {
	w    *Watchdog
	slot int // -1: refused, the watchdog had fired
}

// New starts the watchdog of a rank on plugin; onFire runs once, on the
// watchdog's goroutine, when a call is overdue. stalled, if not nil, says
// which peers are gone or stopped then (TimeoutError.Stalled).
func New(rank int, plugin string, timeout time.Duration, onFire func(*TimeoutError), stalled func() string) *Watchdog {
	if timeout <= 0 {
		timeout = hostnet.DefaultTimeout
	}
	w := &Watchdog{rank: rank, plugin: plugin, timeout: timeout, onFire: onFire, stalled: stalled, epoch: time.Now(),
		fired: make(chan struct{}), stop: make(chan struct{})}
	go w.run()
	return w
}

// Timeout is the deadline of one plugin call.
func (w *Watchdog) Timeout() time.Duration {
	if w == nil {
		return 0
	}
	return w.timeout
}

// Begin marks a plugin call that the caller is about to make, End ends it:
//
//	call := wd.Begin("streamSynchronize")
//	err := call.End(p.StreamSynchronize(s))
//
// A nil Watchdog (a host rank's) marks nothing.
func (w *Watchdog) Begin(call string) PluginCall {
	c, _ := w.enter(call, false)
	return c
}

// End ends the call and returns err, or the watchdog's *TimeoutError once
// it has fired (the call's own error then follows from the abort).
func (c PluginCall) End(err error) error {
	w := c.w
	if w == nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.slot >= 0 {
		w.calls[c.slot].busy = false
	}
	if w.err != nil {
		return w.err
	}
	return err
}

// Fired is closed when the watchdog gives up on a call (never, for a nil
// Watchdog).
func (w *Watchdog) Fired() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.fired
}

// Err is the *TimeoutError of the call the watchdog gave up on, or nil.
func (w *Watchdog) Err() error {
	if e := w.fault(); e != nil {
		return e
	}
	return nil
}

func (w *Watchdog) fault() *TimeoutError {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// enter marks a call. A collective is remembered as what later calls wait
// for. Once the watchdog has fired it refuses, with its error: the vendor
// communicator may be freed by then.
func (w *Watchdog) enter(call string, collective bool) (PluginCall, error) {
	if w == nil {
		return PluginCall{}, nil
	}
	now := time.Since(w.epoch)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return PluginCall{w: w, slot: -1}, w.err
	}
	i := 0
	for i < len(w.calls) && w.calls[i].busy {
		i++
	}
	if i == len(w.calls) {
		w.calls = append(w.calls, watchedCall{}) // only when more calls than ever before overlap
	}
	after := w.last
	if collective {
		w.last, after = call, ""
	}
	w.calls[i] = watchedCall{busy: true, since: now, call: call, after: after}
	return PluginCall{w: w, slot: i}, nil
}

// Do makes one plugin call under w: a collective is remembered as what
// later calls wait for, and once w has fired the call is refused with its
// error without calling fn. fn is only called, never kept, so the closures
// of the callers stay on their stacks: the latency path allocates
// nothing. A nil w (a host rank's) just calls fn.
func Do(w *Watchdog, call string, collective bool, fn func() error) error {
	c, err := w.enter(call, collective)
	if err != nil {
		return err
	}
	return c.End(fn())
}

// period is how often the watchdog looks: it fires at most an eighth of
// the deadline late, and wakes at most 100 times a second.
func (w *Watchdog) period() time.Duration {
	return min(max(w.timeout/8, 10*time.Millisecond), time.Second)
}

func (w *Watchdog) run() {
	tick := time.NewTicker(w.period())
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		if e := w.overdue(); e != nil {
			// The verdict is out (Fired, Err) before the abort, which
			// calls into the plugin and may block behind the stuck call.
			w.onFire(e)
			return
		}
	}
}

// overdue fires the watchdog when the oldest call in flight began more
// than the deadline ago.
func (w *Watchdog) overdue() *TimeoutError {
	now := time.Since(w.epoch)
	w.mu.Lock()
	defer w.mu.Unlock()
	oldest := -1
	for i, c := range w.calls {
		if c.busy && (oldest < 0 || c.since < w.calls[oldest].since) {
			oldest = i
		}
	}
	if oldest < 0 || now-w.calls[oldest].since <= w.timeout {
		return nil
	}
	c := w.calls[oldest]
	w.err = &TimeoutError{Rank: w.rank, Plugin: w.plugin, Call: c.call, After: c.after, Timeout: w.timeout}
	if w.stalled != nil {
		// Before the error is out: it is read without the lock later.
		// (stalled only reads /proc; it takes no lock of ours.)
		w.err.Stalled = w.stalled()
	}
	close(w.fired)
	return w.err
}

// Close stops w's goroutine; a nil w, or one closed already, is left as
// it is.
func Close(w *Watchdog) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
}
