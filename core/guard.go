package core

import (
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/watchdog"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The watchdog of a device rank's Comm: every plugin call that can
// block (collectives, synchronizes, copies, communicator init and destroy)
// is marked on it (see Watchdog).

// Watchdog is this rank's watchdog; nil on a host rank, which makes no
// plugin calls. Mark the blocking plugin calls made beside the
// communicator's own (a stream synchronize after its collectives, say)
// with its Begin, so that they are bounded too.
func (c *Comm) Watchdog() *Watchdog { return c.wd }

// Guard runs fn, the caller's work on this communicator, on a goroutine of
// its own bound to this rank's device, and returns fn's error; or, as soon
// as the watchdog gives up on a plugin call, the watchdog's
// *TimeoutError, also when that call never returns from C: fn's goroutine
// is then abandoned there (see Watchdog for why nothing else is possible).
// On a host rank fn simply runs.
func (c *Comm) Guard(fn func() error) error {
	if c.wd == nil {
		return c.settle("", fn())
	}
	done := make(chan error, 1)
	go func() {
		defer c.bindDevice()()
		done <- fn()
	}()
	select {
	case err := <-done:
		if werr := c.wd.Err(); werr != nil {
			err = werr // the cause; fn's error follows from the abort
		}
		return c.settle("", err)
	case <-c.wd.Fired():
		return c.settle("", c.wd.Err())
	case <-c.Revoked():
		return c.revokedWith("", c.wd.Err())
	}
}

// onTimeout is the watchdog's verdict: the communicator fails and is
// aborted in abortAll's order (host side shut, vendor aborted, which is
// what unblocks a library stuck in a collective, then the host closed).
func (c *Comm) onTimeout(e *TimeoutError) {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = e
	}
	c.mu.Unlock()
	_ = c.abortAll()
}

// abortVendor aborts the vendor communicator once, whoever asks first (a
// failed schedule, the watchdog, Abort): the entry frees it, so a second
// call would free it twice.
func (c *Comm) abortVendor() error {
	if c.ccl == nil || !c.releaseVendor() {
		return nil
	}
	return c.ccl.Abort()
}

// destroyVendor destroys the vendor communicator unless it is gone or the
// watchdog, which fired, aborts it. commDestroy waits for the
// communicator's work, which never ends when a peer is stuck: it runs
// detached.
func (c *Comm) destroyVendor() error {
	if c.ccl == nil || c.wd.Err() != nil || !c.releaseVendor() {
		return nil
	}
	return c.detached("commDestroy", c.ccl.Destroy)
}

// releaseVendor marks the vendor communicator gone, once: true for the
// caller that is to free it. It waits for a poll of vendorAsyncError in
// flight (a plugin call that does not block), so that none uses the
// communicator once it is freed.
func (c *Comm) releaseVendor() bool {
	c.cclMu.Lock()
	defer c.cclMu.Unlock()
	return c.vendorGone.CompareAndSwap(false, true)
}

// vendorAsyncError is the vendor communicator's asynchronous error
// (commGetAsyncError, as ncclCommGetAsyncError), or nil while it has
// none, is gone, or the plugin cannot say (the entry is OPTIONAL). A
// non-blocking init still in progress is no error.
func (c *Comm) vendorAsyncError() error {
	if c.ccl == nil {
		return nil
	}
	c.cclMu.RLock()
	defer c.cclMu.RUnlock()
	if c.vendorGone.Load() {
		return nil
	}
	err := c.ccl.AsyncError()
	if err == nil || errors.Is(err, sdk.ErrNotSupported) || errors.Is(err, sdk.ErrInProgress) {
		return nil
	}
	return fmt.Errorf("rank %d: the %s plugin's communicator reports an asynchronous error (a collective failed on the device after its call returned): %w",
		c.rank, c.be.Plugin.Name, err)
}

// detached makes a plugin call that waits for peers on a goroutine of its
// own and returns its error, or the watchdog's as soon as it gives up on
// the call; a call that never returns then strands only that goroutine.
func (c *Comm) detached(call string, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- watchdog.Do(c.wd, call, false, fn) }()
	select {
	case err := <-done:
		return err
	case <-c.wd.Fired():
		return c.wd.Err()
	}
}

// commInit is the vendor's commInitRank, which waits for every rank of the
// cluster, detached as destroyVendor's call is. A communicator that
// arrives after the watchdog gave up is aborted there: nobody will use it.
func (c *Comm) commInit(p *loader.Plugin, dev, nranks int, id []byte, rank int) (*loader.Comm, error) {
	type result struct {
		cm  *loader.Comm
		err error
	}
	done := make(chan result, 1)
	go func() {
		call := c.wd.Begin("commInitRank")
		cm, err := p.CommInitRank(dev, nranks, id, rank)
		if err = call.End(err); err != nil && cm != nil {
			_ = cm.Abort()
			cm = nil
		}
		done <- result{cm, err}
	}()
	select {
	case r := <-done:
		return r.cm, r.err
	case <-c.wd.Fired():
		return nil, c.wd.Err()
	}
}

// vendorCalls is the vendor communicator with its calls under the
// watchdog (Comm.dev is the plugin's stream, event and copy calls).
func (c *Comm) vendorCalls() watchedComm { return watchedComm{c} }

// watchedComm is a single pointer so that it becomes an sdk.Collectives
// (sdk.Dispatch) without an allocation: the direct path allocates nothing.
// c.ccl and c.wd are set once, before any call.
type watchedComm struct{ c *Comm }

func (v watchedComm) AllReduce(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "allReduce", true, func() error { return v.c.ccl.AllReduce(send, recv, count, dt, op, s) })
}

func (v watchedComm) Reduce(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, root int, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "reduce", true, func() error { return v.c.ccl.Reduce(send, recv, count, dt, op, root, s) })
}

func (v watchedComm) Broadcast(send, recv uintptr, count int, dt sdk.DataType, root int, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "broadcast", true, func() error { return v.c.ccl.Broadcast(send, recv, count, dt, root, s) })
}

func (v watchedComm) AllGather(send, recv uintptr, count int, dt sdk.DataType, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "allGather", true, func() error { return v.c.ccl.AllGather(send, recv, count, dt, s) })
}

func (v watchedComm) ReduceScatter(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "reduceScatter", true, func() error { return v.c.ccl.ReduceScatter(send, recv, count, dt, op, s) })
}

func (v watchedComm) AlltoAll(send, recv uintptr, count int, dt sdk.DataType, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "alltoAll", true, func() error { return v.c.ccl.AlltoAll(send, recv, count, dt, s) })
}

func (v watchedComm) AlltoAllv(send uintptr, sendcounts, sdispls []int, recv uintptr, recvcounts, rdispls []int, dt sdk.DataType, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "alltoAllv", true, func() error {
		return v.c.ccl.AlltoAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, dt, s)
	})
}

func (v watchedComm) Gather(send, recv uintptr, count int, dt sdk.DataType, root int, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "gather", true, func() error { return v.c.ccl.Gather(send, recv, count, dt, root, s) })
}

func (v watchedComm) Scatter(send, recv uintptr, count int, dt sdk.DataType, root int, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "scatter", true, func() error { return v.c.ccl.Scatter(send, recv, count, dt, root, s) })
}

func (v watchedComm) Send(buf uintptr, count int, dt sdk.DataType, peer int, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "send", true, func() error { return v.c.ccl.Send(buf, count, dt, peer, s) })
}

func (v watchedComm) Recv(buf uintptr, count int, dt sdk.DataType, peer int, s loader.Stream) error {
	return watchdog.Do(v.c.wd, "recv", true, func() error { return v.c.ccl.Recv(buf, count, dt, peer, s) })
}

// watchedPlugin shadows the calls of the plugin that wait for the device
// or enqueue work; the rest (names, creating events) pass through.
type watchedPlugin struct {
	*loader.Plugin
	wd *Watchdog
}

func (p *watchedPlugin) Memcpy(dst, src uintptr, n int, kind loader.MemcpyKind, s loader.Stream) error {
	return watchdog.Do(p.wd, "memCopy", false, func() error { return p.Plugin.Memcpy(dst, src, n, kind, s) })
}

func (p *watchedPlugin) ReduceLocal(dev int, dst uintptr, srcs []uintptr, count int, dt sdk.DataType, op sdk.RedOp, avgDivisor int, s loader.Stream) error {
	return watchdog.Do(p.wd, "reduceLocal", false, func() error { return p.Plugin.ReduceLocal(dev, dst, srcs, count, dt, op, avgDivisor, s) })
}

func (p *watchedPlugin) StreamSynchronize(s loader.Stream) error {
	return watchdog.Do(p.wd, "streamSynchronize", false, func() error { return p.Plugin.StreamSynchronize(s) })
}

func (p *watchedPlugin) StreamWaitEvent(s loader.Stream, e loader.Event) error {
	return watchdog.Do(p.wd, "streamWaitEvent", false, func() error { return p.Plugin.StreamWaitEvent(s, e) })
}

func (p *watchedPlugin) EventRecord(e loader.Event, s loader.Stream) error {
	return watchdog.Do(p.wd, "eventRecord", false, func() error { return p.Plugin.EventRecord(e, s) })
}

func (p *watchedPlugin) EventSynchronize(e loader.Event) error {
	return watchdog.Do(p.wd, "eventSynchronize", false, func() error { return p.Plugin.EventSynchronize(e) })
}

// GroupEnd issues the group's work (GroupStart only opens it).
func (p *watchedPlugin) GroupEnd() error {
	return watchdog.Do(p.wd, "groupEnd", false, p.Plugin.GroupEnd)
}
