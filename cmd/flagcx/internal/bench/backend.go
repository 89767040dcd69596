package bench

import (
	"fmt"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
)

// backend runs the benchmark's collectives on one kind of memory: host
// buffers through a host communicator, or device buffers through a vendor
// plugin's collective library.
type backend interface {
	Mem
	// issue starts one call of coll (on a device: enqueues it).
	issue(coll reference.Collective, x *call) error
	// sync waits until every issued call has completed.
	sync() error
	// startTimer starts timing issued calls; stop returns the time from
	// start until everything issued in between completed.
	startTimer() (stop func() (time.Duration, error), err error)
	// describe is the header lines naming the backend (plugin, libraries).
	describe() []string
	close() error
}

// hostBackend runs collectives on host memory through a communicator; the
// calls are synchronous, so wall-clock time is the time.
type hostBackend struct {
	HostMem
	comm Comm
}

func (h *hostBackend) issue(coll reference.Collective, x *call) error {
	c := h.comm
	switch coll {
	case reference.AllReduce:
		return c.AllReduce(x.send.host(), x.recv.host(), x.count, x.dt, x.op)
	case reference.Reduce:
		return c.Reduce(x.send.host(), x.recv.host(), x.count, x.dt, x.op, x.root)
	case reference.Broadcast:
		return c.Broadcast(x.send.host(), x.recv.host(), x.count, x.dt, x.root)
	case reference.AllGather:
		return c.AllGather(x.send.host(), x.recv.host(), x.count, x.dt)
	case reference.ReduceScatter:
		return c.ReduceScatter(x.send.host(), x.recv.host(), x.count, x.dt, x.op)
	case reference.AlltoAll:
		return c.AlltoAll(x.send.host(), x.recv.host(), x.count, x.dt)
	case reference.AlltoAllv:
		return c.AlltoAllv(x.send.host(), x.sendcounts, x.sdispls, x.recv.host(), x.recvcounts, x.rdispls, x.dt)
	case reference.Gather:
		return c.Gather(x.send.host(), x.recv.host(), x.count, x.dt, x.root)
	case reference.Scatter:
		return c.Scatter(x.send.host(), x.recv.host(), x.count, x.dt, x.root)
	case reference.SendRecv:
		n, r := c.Count(), c.Rank()
		c.GroupStart()
		if err := c.Send(x.send.host(), x.count, x.dt, (r+1)%n); err != nil {
			_ = c.GroupEnd()
			return err
		}
		if err := c.Recv(x.recv.host(), x.count, x.dt, (r-1+n)%n); err != nil {
			_ = c.GroupEnd()
			return err
		}
		return c.GroupEnd()
	}
	return fmt.Errorf("collective %v has no host implementation", coll)
}

func (h *hostBackend) sync() error { return nil }

func (h *hostBackend) startTimer() (func() (time.Duration, error), error) {
	t0 := time.Now()
	return func() (time.Duration, error) { return time.Since(t0), nil }, nil
}

func (h *hostBackend) describe() []string { return nil }
func (h *hostBackend) close() error       { return nil }
