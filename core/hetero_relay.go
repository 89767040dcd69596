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
// is done with them (relayGate, the node's post gate), which the device
// says in the landed word (value | RelayDone): a relay on the same stream
// is behind it by stream order; anything else polls that word.

// relayState is a device rank's relays (on shmPlane).
type relayState struct {
	// on: this rank's plugin relays (probed once, by setupShm).
	on bool
	// value numbers the relays of this rank (the landed and go words
	// hold the last one's).
	value uint64
	// landed is the last relay's landed word, and stream its stream;
	// pending until the device said it is done.
	landed  *uint64
	stream  loader.Stream
	pending bool
	// srcs holds a relay's sources (no allocation on the latency path).
	srcs [sched.MaxDeviceReduceClusters]uintptr
}

// relayLine is the offset of the go word after the landed word: a cache
// line apart, since the device writes one and the host the other.
const relayLine = 64

// probeRelay reports whether the plugin relays on this rank's device (an
// empty relay).
func (c *Comm) probeRelay() bool {
	p, sp := c.be.Plugin, c.shm
	if !p.CanRelay() || sp.scratch == 0 {
		return false
	}
	err := p.RelayReduce(c.be.Device, &loader.Relay{Srcs: []uintptr{sp.scratch}, DType: sdk.Float32, Op: sdk.Sum, AvgDivisor: 1}, 0)
	if err != nil && c.debug.init {
		c.logf("INIT", "%s does not relay on device %d (%v): small calls copy through the host", p.Name, c.be.Device, err)
	}
	return err == nil
}

// relayGate runs before this rank publishes any step in the windows: the
// last relay must be done with them.
func (c *Comm) relayGate() error { return c.settleRelay(&c.shm.relay) }

// settleRelay waits until the device is done with rs's last relay.
func (c *Comm) settleRelay(rs *relayState) error {
	if !rs.pending {
		return nil
	}
	if err := c.awaitWord(rs.landed, rs.value|loader.RelayDone, rs.stream, "finish its last relay (fold the shared windows)"); err != nil {
		return err
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
	if err := c.settleRelay(rs); err != nil {
		return err
	}
	rs.value++
	rel.Value = rs.value
	landed := (*uint64)(unsafe.Pointer(&words[0]))
	goWord := (*uint64)(unsafe.Pointer(&words[relayLine]))
	end := region("relay.launch")
	err = c.dev.RelayReduce(c.be.Device, &rel, strm)
	end()
	if err != nil {
		return fmt.Errorf("%s's relay: %w", r.dev.Name, err)
	}
	// From here the device waits for the go word: every way out answers,
	// and the device then reads host memory until it says it is done
	// (this relay's own step must not wait for that: pending only after).
	answer := rel.Value | loader.RelayAbort
	defer func() {
		atomic.StoreUint64(goWord, answer)
		rs.landed, rs.stream, rs.pending = landed, strm, true
	}()
	end = region("relay.landed")
	err = c.awaitWord(landed, rel.Value, strm, "put its input in the shared window")
	end()
	if err != nil {
		return err
	}
	defer region("relay.step")()
	if err := r.sync(r.sig(st.Label)); err != nil {
		return err
	}
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
		DType: st.DType, Op: st.Op, AvgDivisor: st.N, Srcs: r.c.shm.relay.srcs[:0]}
	if len(f.Srcs) > len(r.c.shm.relay.srcs) {
		return rel, nil, fmt.Errorf("%w: a relay of %d inputs, more than %d", sdk.ErrInternalError, len(f.Srcs), len(r.c.shm.relay.srcs))
	}
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

// relaySpin is how long awaitWord polls before it yields between polls;
// relayQuery how often it then asks whether the stream failed.
const (
	relaySpin  = 200 * time.Microsecond
	relayQuery = time.Millisecond
)

// awaitWord waits until the device stored v to word (a relay's landed
// word), what the device does meanwhile saying what for. The stream may
// first run the caller's earlier work, so the wait polls, then yields,
// and asks the stream now and then whether it failed; the deadline is the
// communicator's (FLAGCX_TIMEOUT).
func (c *Comm) awaitWord(word *uint64, v uint64, strm loader.Stream, what string) error {
	start := time.Now()
	next := relaySpin
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
		if waited < next {
			continue
		}
		next = waited + relayQuery
		done, err := c.dev.StreamQuery(strm)
		switch {
		case err != nil && !errors.Is(err, sdk.ErrNotSupported):
			return fmt.Errorf("%s's relay: %w", c.dev.Name, err)
		case done && atomic.LoadUint64(word) != v:
			return fmt.Errorf("%w: %s's relay left its stream without a word to %s", sdk.ErrInternalError, c.dev.Name, what)
		}
		if t := c.world.cfg.Timeout; t > 0 && waited > t {
			return fmt.Errorf("rank %d: waited %v for the device to %s (is earlier work on the stream still running? %s sets the limit): %w",
				c.rank, t, what, wire.EnvTimeout, wire.ErrTimeout)
		}
	}
}
