package core

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Relays: a device rank's small one-step AllReduce in one launch (the
// plugin's relayReduce, ABI v5; the step is internal/sched/shm_steps.go's
// relay). The device puts the rank's input in its window and raises the
// landed word; this rank's host publishes the step, waits for every
// rank's and raises the go word; the device folds every window into the
// receive buffer while the call has already returned, in the caller's
// stream's order. Two host waits on device copies (each a round trip
// through the runtime) become one poll of a word in host memory.
//
// The device still reads the other ranks' windows after the call
// returns, and every step this rank publishes lets them write a half of
// their windows again. So a rank publishes nothing until its last relay
// is done (relayGate, the node's post gate): a relay on the same stream
// is behind it by stream order; anything else waits for its event.

// relayState is a device rank's relays (on shmPlane).
type relayState struct {
	// on: this rank's plugin relays (probed once, by setupShm).
	on bool
	// value numbers the relays of this rank (the landed and go words
	// hold the last one's).
	value uint64
	// done marks the end of the last relay on its stream; pending while
	// it may not be reached.
	done    loader.Event
	stream  loader.Stream
	pending bool
}

// relayLine is the offset of the go word after the landed word: a cache
// line apart, since the device writes one and the host the other.
const relayLine = 64

// probeRelay reports whether the plugin relays on this rank's device (an
// empty relay), and makes the event that marks a relay's end.
func (c *Comm) probeRelay() bool {
	p, sp := c.be.Plugin, c.shm
	if !p.CanRelay() || sp.scratch == 0 {
		return false
	}
	err := p.RelayReduce(c.be.Device, &loader.Relay{Srcs: []uintptr{sp.scratch}, DType: sdk.Float32, Op: sdk.Sum, AvgDivisor: 1}, 0)
	if err == nil {
		sp.relay.done, err = p.EventCreate(c.be.Device)
	}
	if err != nil && c.debug.init {
		c.logf("INIT", "%s does not relay on device %d (%v): small calls copy through the host", p.Name, c.be.Device, err)
	}
	return err == nil
}

// relayGate runs before this rank publishes any step in the windows: the
// last relay must be done with them.
func (c *Comm) relayGate() error {
	rs := &c.shm.relay
	if !rs.pending {
		return nil
	}
	if err := c.dev.EventSynchronize(rs.done); err != nil {
		return fmt.Errorf("waiting for the device's last relay to leave the shared windows: %w", err)
	}
	rs.pending = false
	return nil
}

// relay runs a KindRelay step.
func (r *shmRun) relay(st *sched.Step) error {
	if len(st.Copies) != 1 || len(st.Folds) != 1 || st.Dst.Len < 2*relayLine {
		return fmt.Errorf("%w: %s", sdk.ErrInternalError, st)
	}
	rel, words, err := r.relayArgs(st)
	if err != nil {
		return err
	}
	c, rs := r.c, &r.c.shm.relay
	strm := c.laneStream(st.Lane, r.s)
	if rs.pending && rs.stream == strm {
		rs.pending = false // this relay starts after it
	}
	if err := c.relayGate(); err != nil {
		return err
	}
	rs.value++
	rel.Value = rs.value
	landed := (*uint64)(unsafe.Pointer(&words[0]))
	goWord := (*uint64)(unsafe.Pointer(&words[relayLine]))
	if err := r.dev.RelayReduce(c.be.Device, &rel, strm); err != nil {
		return fmt.Errorf("%s's relay: %w", r.dev.Name, err)
	}
	// From here the device waits for the go word: every way out answers.
	answer := rel.Value | loader.RelayAbort
	defer func() { atomic.StoreUint64(goWord, answer) }()
	if err := r.dev.EventRecord(rs.done, strm); err != nil {
		return err
	}
	if err := r.awaitLanded(landed, rel.Value, strm); err != nil {
		return err
	}
	if err := r.sync(r.sig(st.Label)); err != nil {
		return err
	}
	rs.stream, rs.pending = strm, true
	answer = rel.Value
	return nil
}

// relayArgs resolves a relay step's memory: the put, the fold and the
// landed and go words (host memory of this rank's window).
func (r *shmRun) relayArgs(st *sched.Step) (loader.Relay, []byte, error) {
	var rel loader.Relay
	cp, f := st.Copies[0], st.Folds[0]
	src, err := r.mem(cp.Src)
	if err != nil {
		return rel, nil, err
	}
	win, err := r.mem(cp.Dst)
	if err != nil {
		return rel, nil, err
	}
	dst, err := r.mem(f.Dst)
	if err != nil {
		return rel, nil, err
	}
	words, err := r.hostMem(st.Dst)
	if err != nil {
		return rel, nil, err
	}
	if !src.dev || win.dev || !dst.dev {
		return rel, nil, fmt.Errorf("%w: relay %s", sdk.ErrInternalError, st)
	}
	rel = loader.Relay{Src: src.ptr, Window: win.ptr, Bytes: cp.Src.Len, Dst: dst.ptr, Count: f.Dst.Len / st.DType.Size(),
		DType: st.DType, Op: st.Op, AvgDivisor: st.N, Srcs: make([]uintptr, 0, len(f.Srcs))}
	rel.Landed = uintptr(unsafe.Pointer(&words[0]))
	rel.Go = uintptr(unsafe.Pointer(&words[relayLine]))
	for _, s := range f.Srcs {
		m, err := r.mem(s)
		if err != nil {
			return rel, nil, err
		}
		rel.Srcs = append(rel.Srcs, m.ptr)
	}
	return rel, words, nil
}

// relaySpin is how long awaitLanded polls before it yields between polls;
// relayQuery how often it then asks whether the stream failed.
const (
	relaySpin  = 200 * time.Microsecond
	relayQuery = time.Millisecond
)

// awaitLanded waits until the device stored v to the landed word. The
// stream may first run the caller's earlier work, so the wait polls, then
// yields, and asks the stream now and then whether it failed; the deadline
// is the communicator's (FLAGCX_TIMEOUT).
func (r *shmRun) awaitLanded(landed *uint64, v uint64, strm loader.Stream) error {
	start := time.Now()
	next := relaySpin
	for i := 0; ; i++ {
		if atomic.LoadUint64(landed) == v {
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
		if waited < next {
			continue
		}
		next = waited + relayQuery
		done, err := r.dev.StreamQuery(strm)
		switch {
		case err != nil && !errors.Is(err, sdk.ErrNotSupported):
			return fmt.Errorf("%s's relay: %w", r.dev.Name, err)
		case done && atomic.LoadUint64(landed) != v:
			return fmt.Errorf("%w: %s's relay finished without raising its landed word", sdk.ErrInternalError, r.dev.Name)
		}
		if t := r.c.world.cfg.Timeout; t > 0 && waited > t {
			return fmt.Errorf("rank %d: the device did not put its input in the shared window within %v (is earlier work on the stream still running? %s sets the limit): %w",
				r.c.rank, t, wire.EnvTimeout, wire.ErrTimeout)
		}
	}
}
