package core

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// Registered memory on the shared-memory plane: what the registered
// AllReduce (internal/sched/shm_registered.go) needs of the communicator.
// A device rank registers the host ranks' MemAlloc allocations with its
// runtime as they are made; a call with a registered plan agrees in its
// first step on whether every host rank's buffers lie in such memory and
// every device rank registered it, and runs that plan if so.

// memRegs are the host ranks' allocations a device rank registered, by
// the first byte of its own memory of each allocation (MemFree's key).
type memRegs struct {
	addrs map[*byte][]uintptr
	// failed: an allocation could not be registered, so this rank votes
	// against registered plans from then on.
	failed bool
}

// MemAlloc allocates n zeroed bytes of host memory that every rank of the
// communicator maps (a shared-memory segment per allocation, unlinked once
// all ranks mapped it), like NCCL's ncclMemAlloc + ncclCommRegister or
// MPI_Alloc_mem. On the host placement, an AllReduce whose send and recv
// buffers lie in such memory on every rank runs zero-copy: each rank
// reduces its slice straight from the peers' send buffers into every
// rank's recv buffer. With device ranks beside the host ranks, a device
// rank registers the host ranks' memory with its runtime, and an
// AllReduce whose host ranks' buffers all lie in it is read and written
// by the devices directly. It is collective: every rank calls it with the
// same n, in the same order relative to the other calls (a device rank
// too, though its own buffers are device memory: its share is never
// touched, so it costs no memory). It fails with sdk.ErrNotSupported
// where the ranks do not all share one host's memory (CanMemAlloc).
func (c *Comm) MemAlloc(n int) ([]byte, error) {
	b, err := c.world.MemAlloc(n)
	if err == nil {
		c.registerMem(b)
	}
	return b, err
}

// MemFree releases memory from MemAlloc on this rank (and a device rank's
// registration of the host ranks' share); every rank frees the same
// allocation, after the calls that use it. The memory stays mapped until
// then, even after Destroy.
func (c *Comm) MemFree(b []byte) error {
	var errs []error
	if len(b) > 0 {
		if addrs, ok := c.regs.addrs[&b[0]]; ok {
			delete(c.regs.addrs, &b[0])
			defer c.bindDevice()()
			for _, a := range addrs {
				errs = append(errs, c.be.Plugin.HostUnregister(a))
			}
		}
	}
	return errors.Join(append(errs, c.world.MemFree(b))...)
}

// registerMem: a device rank of the shared-memory plane whose layout has
// registered plans (sched.RegisteredFolds) registers every host rank's
// memory of the allocation mine belongs to. A failure is not the call's:
// the rank's vote turns registered plans off (and INFO says why).
func (c *Comm) registerMem(mine []byte) {
	p := c.be.Plugin
	if c.shm == nil || p == nil || c.regs.failed || !sched.RegisteredFolds(c.layout, c.opts, sdk.AllReduce) {
		return
	}
	peers := c.world.Engine().MemPeers(mine)
	if peers == nil {
		return
	}
	hosts := sched.HostRanks(c.layout)
	defer c.bindDevice()()
	addrs := make([]uintptr, 0, len(hosts))
	for _, q := range hosts {
		m := peers[q]
		a := hostAddr(m)
		if err := p.HostRegister(a, len(m)); err != nil {
			if c.debug.init {
				c.logf("INIT", "cannot register rank %d's MemAlloc memory with %s (%v): its AllReduces stage through the windows", q, p.Name, err)
			}
			for _, a := range addrs {
				_ = p.HostUnregister(a)
			}
			c.regs.failed = true
			return
		}
		addrs = append(addrs, a)
	}
	if c.regs.addrs == nil {
		c.regs.addrs = map[*byte][]uintptr{}
	}
	c.regs.addrs[&mine[0]] = addrs
}

// agreeLabel labels the agreement's step in the windows (the pipeline's
// own labels are -2 up to 2*chunks).
const agreeLabel = -3

// agreeRegistered is the first step of a call with a registered plan:
// every host rank publishes where its send and recv buffers are
// registered, every device rank whether it registered all it was given.
// It reports whether every rank can run the registered plan, and on a
// device rank finds the host ranks' buffers in its mappings.
func (r *shmRun) agreeRegistered() (bool, error) {
	c, e := r.c, r.c.world.Engine()
	half := (c.shm.windowMin() / 2) &^ 63 // the half a one-shot call would use
	base := int((r.node.Step()+1)&1) * half
	d := r.node.Window(c.rank)[base : base+host.MemDescBytes]
	if r.dev == nil {
		e.MemDesc(d, r.b.send.host, r.b.recv.host)
	} else {
		clear(d)
		if !c.regs.failed {
			d[0] = 1 // the descriptor's flag word, with nothing to find
		}
	}
	if err := r.sync(r.sig(agreeLabel)); err != nil {
		return false, err
	}
	for q := 0; q < c.n; q++ {
		if binary.LittleEndian.Uint64(r.node.Window(q)[base:]) != 1 {
			return false, nil
		}
	}
	if r.dev == nil {
		return true, nil
	}
	sp := c.shm
	if len(sp.peerSend) < c.n {
		sp.peerSend, sp.peerRecv = make([][]byte, c.n), make([][]byte, c.n)
	}
	n := r.p.Call.Count * r.p.Call.DType.Size()
	for _, q := range sched.HostRanks(c.layout) {
		var err error
		if sp.peerSend[q], sp.peerRecv[q], _, err = e.PeerBufs("AllReduce", q, r.node.Window(q)[base:], n, n); err != nil {
			return false, err
		}
	}
	return true, nil
}

// peerMem is host rank q's send or recv buffer as this device rank maps
// it (found by agreeRegistered).
func (r *shmRun) peerMem(ref sched.Ref) (mem, error) {
	sp := r.c.shm
	var bufs [][]byte
	if ref.Buf == sched.BufPeerSend {
		bufs = sp.peerSend
	} else {
		bufs = sp.peerRecv
	}
	if ref.Idx < 0 || ref.Idx >= len(bufs) || bufs[ref.Idx] == nil || ref.Off < 0 || ref.Off+ref.Len > len(bufs[ref.Idx]) {
		return mem{}, fmt.Errorf("%w: plan refers to %s, which no agreement found", sdk.ErrInternalError, ref)
	}
	h := bufs[ref.Idx][ref.Off : ref.Off+ref.Len : ref.Off+ref.Len]
	return mem{ptr: hostAddr(h), host: h}, nil
}
