package bench

import (
	"fmt"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// `flagcx bench put` and `flagcx bench get`: one-sided transfers timed in
// nccl-tests' table. Every rank puts into (or gets from) the next rank's
// window, as nccl-tests' sendrecv sends to the next rank, while its own
// window is served by its progress goroutines. The row's two halves are
//
//	one at a time  each Put waits for its completion (WaitCounter) before
//	               the next: the latency of a Put made visible at the peer;
//	               each Get is one round trip
//	in flight      the iterations' Puts issued back to back, one
//	               WaitCounter at the end: the bandwidth of a stream of
//	               Puts (N/A for Get, which returns with its bytes)
//
// Sizes are bytes of int8, as FlagCX's test_put and test_get count them;
// -c 1 checks one more transfer of each size byte for byte.

// oneSidedSpec is the put or get benchmark (Config.OneSided).
type oneSidedSpec struct{ name string }

var (
	osPutSpec = &oneSidedSpec{"put"}
	osGetSpec = &oneSidedSpec{"get"}
)

// parseOneSided is the one-sided benchmark a collective argument names,
// or nil.
func parseOneSided(name string) *oneSidedSpec {
	switch name {
	case "put":
		return osPutSpec
	case "get":
		return osGetSpec
	}
	return nil
}

// osWindows are the benchmark's two windows on this rank: the source of
// its Puts (and of the peers' Gets), and the destination of the peers'
// Puts (and of its Gets), each with the Buf that reads and writes it.
type osWindows struct {
	src, dst       *core.Window
	srcBuf, dstBuf Buf
	free           []func() error
}

func (w *osWindows) close() {
	for _, f := range w.free {
		_ = f()
	}
}

// ownAllocator is a backend whose Alloc is collective (heteroBackend's
// takes a share of MemAlloc on every rank) but which can also allocate a
// rank's own memory alone: windows are made so, since a host rank's
// AllocWindow and a device rank's Alloc would not pair up.
type ownAllocator interface{ allocOwn(n int) (Buf, error) }

// windows registers the benchmark's windows of size bytes: with --window
// alloc, AllocWindow's on a host rank (shared with the peers of its host:
// zero copy), else RegisterWindow of buffers of the rank's memory.
func (r *rankRun) osWindows(c *core.Comm, size int) (*osWindows, error) {
	w := &osWindows{}
	one := func() (*core.Window, Buf, error) {
		if r.cfg.Window == "alloc" && !c.Backend().OnDevice() {
			win, err := c.AllocWindow(size)
			if err != nil {
				return nil, nil, err
			}
			w.free = append(w.free, win.Free)
			return win, &hostBuf{b: win.Buffer().Host()}, nil
		}
		alloc := r.be.Alloc
		if o, ok := r.be.(ownAllocator); ok {
			alloc = o.allocOwn
		}
		b, err := alloc(size)
		if err != nil {
			return nil, nil, err
		}
		w.free = append(w.free, b.Free)
		win, err := c.RegisterWindow(region{b, 0, size}.buffer())
		if err != nil {
			return nil, nil, err
		}
		w.free = append([]func() error{win.Free}, w.free...) // the window goes before its memory
		return win, b, nil
	}
	var err error
	if w.src, w.srcBuf, err = one(); err == nil {
		w.dst, w.dstBuf, err = one()
	}
	if err != nil {
		w.close()
		return nil, fmt.Errorf("rank %d: registering the windows: %w", r.rank, err)
	}
	return w, nil
}

// runOneSided is run for put and get.
func (r *rankRun) runOneSided() error {
	c, ok := r.coreComm()
	if !ok {
		return fmt.Errorf("bench %s needs a core communicator", r.cfg.OneSided.name)
	}
	w, err := r.osWindows(c, int(r.cfg.MaxBytes))
	if err != nil {
		return err
	}
	defer w.close()
	r.rep.section(r.cfg.OneSided.name, true)
	for _, size := range r.cfg.Sizes {
		r.prog.show(r.cfg.OneSided.name, sdk.Int8, -1, size, r.done)
		res, err := r.benchOneSided(c, w, int(size))
		r.prog.clear()
		if err != nil {
			return err
		}
		r.rep.row(res)
		r.done++
	}
	// Nobody may still read or write a window that goes.
	return r.comm.HostAllGather(nil, nil)
}

// coreComm is the run's core.Comm.
func (r *rankRun) coreComm() (*core.Comm, bool) {
	cm := r.comm
	if w, ok := cm.(communicator); ok {
		cm = w.Comm
	}
	c, ok := cm.(*core.Comm)
	return c, ok
}

// benchOneSided times and checks one size.
func (r *rankRun) benchOneSided(c *core.Comm, w *osWindows, size int) (*Result, error) {
	put := r.cfg.OneSided == osPutSpec
	next := (r.rank + 1) % r.n
	op := core.RMA{Local: w.src, Remote: w.dst, Bytes: size}
	if !put {
		op = core.RMA{Local: w.dst, Remote: w.src, Bytes: size}
	}
	once := func() error {
		if put {
			base := c.ReadCounter()
			if err := c.Put(next, op, 0); err != nil {
				return err
			}
			return c.WaitCounter(base + 1)
		}
		return c.Get(next, op, 0)
	}
	stream := func(n int) error {
		base := c.ReadCounter()
		for i := 0; i < n; i++ {
			if err := c.Put(next, op, 0); err != nil {
				return err
			}
		}
		return c.WaitCounter(base + uint64(n))
	}
	times := [2]float64{-1, -1}
	var err error
	if times[0], err = r.timeOneSided(func(n int) error {
		for i := 0; i < n; i++ {
			if err := once(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("rank %d: %s of %d bytes: %w", r.rank, r.cfg.OneSided.name, size, err)
	}
	if put {
		if times[1], err = r.timeOneSided(stream); err != nil {
			return nil, fmt.Errorf("rank %d: %s of %d bytes in flight: %w", r.rank, r.cfg.OneSided.name, size, err)
		}
	}
	var wrong [2]int64
	if r.cfg.Check {
		n, err := r.checkOneSided(w, once, size, put)
		if err != nil {
			return nil, fmt.Errorf("rank %d: checking %s of %d bytes: %w", r.rank, r.cfg.OneSided.name, size, err)
		}
		wrong = [2]int64{n, n}
	}
	res := &Result{Collective: r.cfg.OneSided.name, Datatype: sdk.Int8.String(), RedOp: "none", Root: -1, Size: int64(size), Count: size}
	t, wr, err := r.agreeOn(times, wrong)
	if err != nil {
		return nil, err
	}
	for half, h := range []*Half{&res.OutOfPlace, &res.InPlace} {
		if times[half] < 0 {
			h.TimeUS = -1 // not measured (a Get in flight)
			continue
		}
		r.tally(h, int64(size), t[half], 1, wr[half], r.cfg.Check)
	}
	r.results = append(r.results, *res)
	return res, nil
}

// timeOneSided runs the warmup of f, a barrier, then times r.cfg.Iters
// iterations of f and returns the seconds per iteration.
func (r *rankRun) timeOneSided(f func(n int) error) (float64, error) {
	if err := f(r.cfg.Warmup); err != nil {
		return 0, err
	}
	if err := r.comm.HostAllGather(nil, nil); err != nil {
		return 0, fmt.Errorf("barrier before timing: %w", err)
	}
	t0 := time.Now()
	if err := f(r.cfg.Iters); err != nil {
		return 0, err
	}
	return time.Since(t0).Seconds() / float64(r.cfg.Iters), nil
}

// checkOneSided runs one more transfer of fresh bytes and counts the
// bytes of its destination that differ: this rank's dst window from the
// previous rank's Put, or from the next rank's window by its own Get.
func (r *rankRun) checkOneSided(w *osWindows, once func() error, size int, put bool) (int64, error) {
	pattern := func(rank int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i*131 + rank*17 + size + i>>9)
		}
		return b
	}
	if err := w.srcBuf.Write(0, pattern(r.rank)); err != nil {
		return 0, err
	}
	if err := w.dstBuf.Zero(size); err != nil {
		return 0, err
	}
	if err := r.comm.HostAllGather(nil, nil); err != nil {
		return 0, err
	}
	if err := once(); err != nil {
		return 0, err
	}
	// Every Put has completed once every rank passed this barrier.
	if err := r.comm.HostAllGather(nil, nil); err != nil {
		return 0, err
	}
	from := (r.rank + 1) % r.n
	if put {
		from = (r.rank + r.n - 1) % r.n
	}
	got := make([]byte, size)
	if err := w.dstBuf.Read(0, got); err != nil {
		return 0, err
	}
	var wrong int64
	for i, b := range pattern(from) {
		if got[i] != b {
			wrong++
		}
	}
	return wrong, nil
}
