package executor

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Relays: a device rank's small one-step AllReduce, Reduce or the
// Broadcast it roots, in one launch (the plugin's relayReduce, ABI v5; the
// step is internal/sched/shm_steps.go's relay). The device puts the
// rank's input in its window and raises the landed word; the rank's relay
// proxy (relay_proxy.go) sees it, publishes the step, waits for
// every rank's and raises the go word; the device then folds what the
// rank takes from the windows into the receive buffer. The call returns
// once the launch is enqueued, as a stream-ordered collective does: the
// proxy finishes its host half while the caller enqueues the next one,
// so back-to-back calls overlap one launch with the step before it. A
// failure the proxy meets after the call returned ends the next call (and
// core's Comm.AsyncError reports it: RelayFailure); the device is told to
// stop (the abort bit in the go word), so the stream never waits forever.
//
// The windows' rule (internal/hostnet/shm/shm_node_linux.go) holds as
// follows. A relay writes its window half only once its kernel runs,
// behind the last relay on the same stream, whose go came after that
// relay's step: so relays on one stream need no wait on the host. Any
// other use of the windows (another plan, a relay on another stream, the
// host engine's steps) first drains the relays (relayGate, the node's
// gate): the proxy idle, and the device done reading the windows, which
// it says in the landed word (value | RelayDone).

// relayState is a device rank's relays (on shmPlane); the caller's
// goroutine owns it, the proxy only what each job carries.
type relayState struct {
	// on: this rank's plugin relays (probed once, by SetupShm).
	on bool
	// value numbers the relays of this rank (the landed and go words
	// hold the last one's).
	value uint64
	// landed is the last relay's landed word, stream its stream and
	// step the step it publishes; pending until drained.
	landed  *uint64
	stream  loader.Stream
	step    uint32
	pending bool
	// proxy finishes the relays' host halves (started by SetupShm).
	proxy *relayProxy
	// armed is the go word the relays since the last drain use, cleared
	// before the first of them (armGo).
	armed *uint64
	// srcs holds a relay's sources (no allocation on the latency path).
	srcs [sched.MaxDeviceReduceClusters]uintptr
}

// relayLine is the offset of the go word after the landed word: a cache
// line apart, since the device writes one and the host the other.
const relayLine = 64

// probeRelay reports whether the plugin relays on this rank's device (an
// empty relay).
func (e *Executor) probeRelay() bool {
	p, sp := e.plugin, e.shm
	if !p.CanRelay() || sp.scratch == 0 {
		return false
	}
	err := p.RelayReduce(e.device, &loader.Relay{Srcs: []uintptr{sp.scratch}, DType: sdk.Float32, Op: sdk.Sum, AvgDivisor: 1}, 0)
	if err != nil && e.logf != nil {
		e.logf("%s does not relay on device %d (%v): small calls copy through the host", p.Name, e.device, err)
	}
	return err == nil
}

// relayGate runs whenever this rank enters the windows for anything but
// a relay (the node's gate): it drains the relays.
func (e *Executor) relayGate() error { return e.drainRelays(&e.shm.relay) }

// drainRelays waits until the proxy has finished every relay handed to
// it and the device is done with the last one; it returns the proxy's
// failure, if any.
func (e *Executor) drainRelays(rs *relayState) error {
	if !rs.pending {
		return nil
	}
	idle := rs.proxy.drain()
	// After a failure the device was told to stop; it still says when it
	// is done with the windows.
	if err := e.awaitWord(rs.landed, rs.value|loader.RelayDone, rs.stream, "finish its last relay (fold the shared windows)", nil); err != nil {
		return errors.Join(idle, err)
	}
	rs.pending, rs.armed = false, nil
	return idle
}

// armGo readies the go word w of a relay about to launch. The words live
// in the window, where other calls' data lands between relays, and the
// device stops at any abort bit beside a value >= its own (the abort of a
// later relay stops an earlier one: flagcx_plugin.h), so a word the
// pending relays do not use is cleared first: stale data must not read
// as an abort. The words sit after a call's input (sched's relay step),
// so a call of another size puts them where a pending relay's input may
// lie, which the other ranks' devices may still read: the relays are
// drained first (the drain's step lets nobody read that half any more).
// The word the pending relays use holds only their answers, which an
// earlier relay may still have to read: it is left alone.
func (e *Executor) armGo(rs *relayState, w *uint64) error {
	if rs.armed == w {
		return nil
	}
	if err := e.drainRelays(rs); err != nil {
		return err
	}
	atomic.StoreUint64(w, 0)
	rs.armed = w
	return nil
}

// oneShotStep is the step a one-shot call of this rank follows: the
// node's last, or the one its last relay publishes while the proxy may
// still be publishing it (reading the node's then would race with it).
func (e *Executor) oneShotStep() uint32 {
	if rs := &e.shm.relay; rs.pending {
		return rs.step
	}
	return e.shm.node.Step()
}

// relay runs a KindRelay step.
func (r *shmRun) relay(st *sched.Step) error {
	if len(st.Copies) > 1 || len(st.Folds) > 1 || len(st.Copies)+len(st.Folds) == 0 || st.Dst.Len < 2*relayLine {
		return fmt.Errorf("%w: %s", sdk.ErrInternalError, st)
	}
	rel, words, err := r.relayArgs(st)
	if err != nil {
		return err
	}
	e, rs := r.e, &r.e.shm.relay
	strm := e.laneStream(st.Lane, r.s)
	if err := rs.proxy.failure(); err != nil {
		return err
	}
	if rs.pending && rs.stream != strm {
		// Not behind the last relay: it could run beside it.
		if err := e.drainRelays(rs); err != nil {
			return err
		}
	}
	goWord := (*uint64)(unsafe.Pointer(&words[relayLine]))
	if err := e.armGo(rs, goWord); err != nil {
		return err
	}
	// The proxy holds the windows until it raised the go word, across
	// its wait for the device's landed word: the device reads and writes
	// the windows until then. The hold cannot block an abort: that wait
	// ends once the node is shut (relayProxy.closing), the first step of
	// core's abortAll.
	if err := r.node.Hold(); err != nil {
		return e.world.StepError(err, -1)
	}
	rs.value++
	rel.Value = rs.value
	end := region("relay.launch")
	err = e.plugin.RelayReduce(e.device, &rel, strm)
	end()
	if err != nil {
		r.node.Exit()
		return fmt.Errorf("%s's relay: %w", e.plugin.Name, err)
	}
	landed := (*uint64)(unsafe.Pointer(&words[0]))
	rs.proxy.hand(relayJob{landed: landed, goWord: goWord,
		value: rel.Value, stream: strm, sig: r.sig(st.Label), call: hostcomm.CallOf(r.p.Call)})
	rs.landed, rs.stream, rs.step, rs.pending = landed, strm, r.after+1, true
	return nil
}

// relayArgs resolves a relay step's memory: the put and the fold, where
// the step has them, and the landed and go words (host memory of this
// rank's window). A relay without a fold names the words as its one
// source, which the device never reads (count 0): the ABI wants one.
func (r *shmRun) relayArgs(st *sched.Step) (loader.Relay, []byte, error) {
	rs := &r.e.shm.relay
	words, err := r.hostMem(st.Dst)
	if err != nil {
		return loader.Relay{}, nil, err
	}
	rel := loader.Relay{Landed: uintptr(unsafe.Pointer(&words[0])), Go: uintptr(unsafe.Pointer(&words[relayLine])),
		DType: st.DType, Op: st.Op, AvgDivisor: st.N, Srcs: rs.srcs[:0]}
	if len(st.Copies) == 1 {
		cp := st.Copies[0]
		src, err := r.mem(cp.Src)
		if err != nil {
			return rel, nil, err
		}
		win, err := r.mem(cp.Dst)
		if err != nil {
			return rel, nil, err
		}
		if !src.dev || win.dev {
			return rel, nil, fmt.Errorf("%w: relay %s", sdk.ErrInternalError, st)
		}
		rel.Src, rel.Window, rel.Bytes = src.ptr, win.ptr, cp.Src.Len
	}
	if len(st.Folds) == 0 {
		rel.Srcs = append(rel.Srcs, rel.Landed)
		return rel, words, nil
	}
	f := st.Folds[0]
	dst, err := r.mem(f.Dst)
	if err != nil {
		return rel, nil, err
	}
	if !dst.dev || len(f.Srcs) > len(rs.srcs) {
		return rel, nil, fmt.Errorf("%w: relay %s (at most %d inputs)", sdk.ErrInternalError, st, len(rs.srcs))
	}
	rel.Dst, rel.Count = dst.ptr, f.Dst.Len/st.DType.Size()
	for _, s := range f.Srcs {
		m, err := r.mem(s)
		if err != nil {
			return rel, nil, err
		}
		rel.Srcs = append(rel.Srcs, m.ptr)
	}
	return rel, words, nil
}

// relaySpin is how long awaitWord polls before it yields between polls;
// relayQuery how often it asks whether the stream failed. Rarely: a
// failed stream is rare, and a stream query can block in the runtime
// while relays wait on the host. In a trace of nvidia:2,host:3 (2 x H200)
// a landed word came 0.5 ms late, the wait then asked (every 1 ms after
// the first 0.2 ms, as it did), and the query returned 198 ms later: a
// 700-byte benchmark row read 100 us a call.
const (
	relaySpin  = 200 * time.Microsecond
	relayQuery = 10 * time.Millisecond
)

// awaitWord waits until the device stored v to word (a relay's landed
// word), what the device does meanwhile saying what for. The stream may
// first run the caller's earlier work, so the wait polls, then yields,
// and asks the stream now and then whether it failed; the deadline is the
// communicator's (FLAGCX_TIMEOUT), and stop (nil: none), asked as often
// as the wait yields, ends it early with its error.
func (e *Executor) awaitWord(word *uint64, v uint64, strm loader.Stream, what string, stop func() error) error {
	start := time.Now()
	next := relayQuery
	for i := 0; ; i++ {
		if atomic.LoadUint64(word) == v {
			return nil
		}
		if i&63 != 0 {
			continue
		}
		waited := time.Since(start)
		if waited < relaySpin {
			continue
		}
		runtime.Gosched()
		if stop != nil {
			if err := stop(); err != nil {
				return err
			}
		}
		if waited < next {
			continue
		}
		next = waited + relayQuery
		done, err := e.plugin.StreamQuery(strm)
		switch {
		case err != nil && !errors.Is(err, sdk.ErrNotSupported):
			return fmt.Errorf("%s's relay: %w", e.plugin.Name, err)
		case done && atomic.LoadUint64(word) != v:
			return fmt.Errorf("%w: %s's relay left its stream without a word to %s", sdk.ErrInternalError, e.plugin.Name, what)
		}
		if t := e.world.Config().Timeout; t > 0 && waited > t {
			return fmt.Errorf("rank %d: waited %v for the device to %s (is earlier work on the stream still running? %s sets the limit): %w",
				e.rank, t, what, hostnet.EnvTimeout, hostnet.ErrTimeout)
		}
	}
}
