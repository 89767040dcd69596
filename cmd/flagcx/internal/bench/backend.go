package bench

import (
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/sdk"
)

// backend runs the benchmark's collectives on one kind of memory: host
// buffers through a host communicator, or device buffers through a vendor
// plugin's collective library.
type backend interface {
	Mem
	// issue starts one call (on a device: enqueues it).
	issue(x *call) error
	// sync waits until every issued call has completed.
	sync() error
	// startTimer starts timing issued calls; stop returns the time from
	// start until everything issued in between completed.
	startTimer() (stop func() (time.Duration, error), err error)
	// describe is the header lines naming the backend (plugin, libraries).
	describe() []string
	close() error
}

// hostComm is a communicator whose collectives the host backend times:
// core.Comm's, on host buffers, as users call them.
type hostComm interface {
	Comm
	sdk.Collectives[core.Buffer, core.Stream]
}

var _ hostComm = (*core.Comm)(nil)

// hostBackend runs collectives on host memory through a communicator; the
// calls are synchronous, so wall-clock time is the time.
type hostBackend struct {
	HostMem
	comm Comm
	// calls is comm as sdk.Dispatch takes it, converted once rather than
	// on every call of the latency path.
	calls sdk.Collectives[core.Buffer, core.Stream]
	reg   registrar
}

func newHostBackend(c hostComm) *hostBackend {
	h := &hostBackend{comm: c, calls: c}
	h.reg.ma, _ = c.(memAllocator)
	h.reg.rank = c.Rank()
	return h
}

// memAllocator is a communicator that allocates registered host memory
// (core.Comm's MemAlloc).
type memAllocator interface {
	CanMemAlloc() bool
	MemAlloc(n int) ([]byte, error)
	MemFree(b []byte) error
}

var _ memAllocator = (*core.Comm)(nil)

// registrar takes the benchmark's buffers from the communicator's
// registered memory when it offers it and FLAGCX_SHM_REGISTER is not 0:
// every rank allocates the same buffers in the same order, as MemAlloc
// requires (a device rank too, beside its device buffer: the host ranks'
// share is what its copies then read and write).
type registrar struct {
	ma   memAllocator // nil: the communicator has none
	rank int
	// off is set once a registered allocation failed: the run goes on in
	// ordinary memory.
	off bool
}

// take is n bytes of registered memory, or nil where the run uses
// ordinary memory.
func (g *registrar) take(n int) ([]byte, error) {
	if on, err := env.ShmRegister.Get(nil); err != nil {
		return nil, err
	} else if g.ma == nil || !on || n <= 0 || g.off || !g.ma.CanMemAlloc() {
		return nil, nil
	}
	b, err := g.ma.MemAlloc(n)
	if err != nil {
		// MemAlloc fails on every rank or on none (its ranks agree), so
		// every rank falls back alike: a small /dev/shm (a container's
		// 64 MiB) costs speed, not the run.
		g.off = true
		if g.rank == 0 {
			flog.Default().Warn("benchmark buffers in ordinary memory, without the zero-copy path (set FLAGCX_SHM_REGISTER=0 to skip trying): " + err.Error())
		}
		return nil, nil
	}
	return b, nil
}

// Alloc takes registered memory where the registrar gives it, ordinary
// memory otherwise.
func (h *hostBackend) Alloc(n int) (Buf, error) {
	b, err := h.reg.take(n)
	switch {
	case err != nil:
		return nil, err
	case b == nil:
		return h.HostMem.Alloc(n)
	}
	return &regBuf{hostBuf: hostBuf{b: b}, free: h.reg.ma.MemFree}, nil
}

// regBuf is a hostBuf in registered memory.
type regBuf struct {
	hostBuf
	free func([]byte) error
}

func (r *regBuf) Free() error {
	b := r.b
	r.b = nil
	if b == nil {
		return nil
	}
	return r.free(b)
}

func (h *hostBackend) issue(x *call) error {
	return sdk.Dispatch(h.calls, x.args, core.HostBuffer(x.send.host()), core.HostBuffer(x.recv.host()), 0)
}

func (h *hostBackend) sync() error { return nil }

func (h *hostBackend) startTimer() (func() (time.Duration, error), error) {
	t0 := time.Now()
	return func() (time.Duration, error) { return time.Since(t0), nil }, nil
}

func (h *hostBackend) describe() []string { return nil }
func (h *hostBackend) close() error       { return nil }
