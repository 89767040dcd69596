package bench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// heteroBackend runs the benchmark through a core.Comm's own calls: any
// placement of ranks on the host and on plugins' devices. Host ranks use
// host buffers, device ranks device buffers; each rank times itself with
// its device's events where it has them, else with the host clock, and the
// run reports the slowest rank.
type heteroBackend struct {
	comm *core.Comm
	d    *deviceBackend // nil on a host rank
	reg  registrar
}

func newHeteroBackend(comm *core.Comm) (*heteroBackend, error) {
	h := &heteroBackend{comm: comm, reg: registrar{ma: comm, rank: comm.Rank()}}
	if be := comm.Backend(); be.OnDevice() {
		d, err := newDeviceBackend(be.Plugin, be.Device, comm.Watchdog())
		if err != nil {
			return nil, err
		}
		h.d = d
	}
	return h, nil
}

func (h *heteroBackend) Name() string {
	if h.d == nil {
		return HostMem{}.Name()
	}
	return h.d.Name()
}

// Alloc: a host rank's buffers in registered memory where the registrar
// gives it (the devices then read and write them directly); a device
// rank's on its device, beside its share of the same allocation.
func (h *heteroBackend) Alloc(n int) (Buf, error) {
	reg, err := h.reg.take(n)
	if err != nil {
		return nil, err
	}
	if h.d == nil {
		if reg == nil {
			return HostMem{}.Alloc(n)
		}
		return &regBuf{hostBuf: hostBuf{b: reg}, free: h.comm.MemFree}, nil
	}
	b, err := h.d.Alloc(n)
	if err != nil || reg == nil {
		if reg != nil {
			_ = h.comm.MemFree(reg)
		}
		return b, err
	}
	d := b.(*deviceBuf)
	d.partner = func() error { return h.comm.MemFree(reg) }
	return d, nil
}

// allocOwn is the rank's own memory, registered with nobody.
func (h *heteroBackend) allocOwn(n int) (Buf, error) {
	if h.d == nil {
		return HostMem{}.Alloc(n)
	}
	return h.d.Alloc(n)
}

func (h *heteroBackend) stream() loader.Stream {
	if h.d == nil {
		return 0
	}
	return h.d.stream
}

// buffer is a region as the communicator takes it.
func (r region) buffer() core.Buffer {
	if d, ok := r.buf.(*deviceBuf); ok {
		return core.DeviceBuffer(d.ptr+uintptr(r.off), r.n)
	}
	return core.HostBuffer(r.host())
}

func (h *heteroBackend) issue(x *call) error {
	return sdk.Dispatch(h.comm, x.args, x.send.buffer(), x.recv.buffer(), h.stream())
}

func (h *heteroBackend) sync() error {
	if h.d == nil {
		return nil
	}
	return h.d.sync()
}

func (h *heteroBackend) startTimer() (func() (time.Duration, error), error) {
	if h.d != nil {
		return h.d.startTimer()
	}
	t0 := time.Now()
	return func() (time.Duration, error) { return time.Since(t0), nil }, nil
}

// describe names the communicator's clusters, this rank's plugin and how
// ranks are timed.
func (h *heteroBackend) describe() []string {
	l := h.comm.Layout()
	kind := "heterogeneous"
	if l.IsHomogeneous() {
		kind = "homogeneous"
	}
	how := "schedules: host collectives directly"
	switch {
	case l.IsHomogeneous() && l.Clusters[0].OnDevice() && !l.HostPath:
		how = "schedules: the vendor library directly (the host path for types or ops it lacks)"
	case l.HostPath:
		how = "schedules: host path (FLAGCX_USE_HOST_COMM=1): copy to host, host collective over all ranks, copy back"
	case !l.IsHomogeneous() && l.ShmWindow > 0:
		how = fmt.Sprintf("schedules: c2c-shm (zero-copy in the host's shared windows, %s each) for allreduce, reduce, broadcast, allgather, reducescatter; direct p2p across clusters for alltoall(v), gather, scatter, sendrecv", bytesize.Compact(int64(l.ShmWindow)))
		if l.DeviceReduce {
			how += fmt.Sprintf("; allreduces (and reduces and reducescatters of up to %d ranks) beyond the one-step size fold on the devices (reduceLocal)", sched.MaxDeviceReduceClusters)
		}
		if l.Registered {
			how += "; allreduces beyond the one-step size whose host ranks' buffers are MemAlloc's (this benchmark's, unless FLAGCX_SHM_REGISTER=0) are read, folded and written by the devices"
		}
		if l.Relay {
			how += fmt.Sprintf("; a device rank's allreduces and reduces, and the broadcasts it roots, of up to %s take one launch (relayReduce)", bytesize.Compact(int64(sched.ShmRelayMax)))
		}
	case !l.IsHomogeneous():
		how = fmt.Sprintf("schedules: c2c for allreduce, reduce, broadcast, allgather, reducescatter (pipeline chunk %s); direct p2p across clusters for alltoall(v), gather, scatter, sendrecv", bytesize.Compact(int64(l.Chunk)))
		if l.StagedDeviceReduce {
			how += "; device leaders fold reducescatters and reduces (and two leaders allreduce chunks beyond 1 MiB) on their devices (reduceLocal)"
		}
	}
	lines := []string{fmt.Sprintf("Communicator: %s, %d cluster(s); %s", kind, len(l.Clusters), how)}
	for _, c := range l.Clusters {
		what := "host (cpu)"
		if c.OnDevice() {
			what = fmt.Sprintf("%s (%s plugin", c.Vendor, c.Plugin)
			if c.Emulated {
				what += ", EMULATED"
			}
			what += ")"
		}
		lines = append(lines, fmt.Sprintf("  cluster %d: %s, ranks %s, leader %d", c.Index, what, sched.FormatRanks(c.Ranks), c.Leader))
	}
	if h.d != nil {
		lines = append(lines, h.d.describe()...)
	}
	timing := "per rank: device events on device ranks that have them, host clock elsewhere; each row reports the slowest rank"
	if l.IsHomogeneous() {
		if h.d == nil {
			timing = "host clock"
		} else if h.d.start != 0 {
			timing = "device events"
		} else {
			timing = "host clock around stream synchronize (the runtime has no event timing)"
		}
	}
	// The device backend's own timing line describes one plugin; replace
	// it with the communicator's.
	for i, ln := range lines {
		if strings.HasPrefix(ln, "Timing: ") {
			lines = append(lines[:i], lines[i+1:]...)
			break
		}
	}
	return append(lines, "Timing: "+timing)
}

func (h *heteroBackend) close() error {
	if h.d == nil {
		return nil
	}
	return h.d.close()
}

// printPlans writes, as comment lines, every rank's plan for the call the
// benchmark makes at size bytes.
func (h *heteroBackend) printPlans(w io.Writer, o *opSpec, dt sdk.DataType, op sdk.RedOp, root int, size int) error {
	n := h.comm.Count()
	count := o.callCount(size/dt.Size(), n)
	fmt.Fprintf(w, "# Plans of %s %s", o.name(), dt)
	if o.coll.Reduces() {
		fmt.Fprintf(w, " %s", op)
	}
	fmt.Fprintf(w, " at %d bytes (count %d):\n", size, count)
	c := reference.Case{Coll: o.coll, Type: dt, Op: op, NRanks: n, Count: count}
	if o.coll.Rooted() {
		c.Root = root
	}
	for r := 0; r < n; r++ {
		p, err := h.comm.Plan(r, c.Call(r))
		if err != nil {
			return err
		}
		for _, line := range strings.Split(strings.TrimRight(p.Text, "\n"), "\n") {
			fmt.Fprintf(w, "#   %s\n", line)
		}
	}
	return nil
}
