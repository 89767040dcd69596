package executor

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

// MemAlloc allocates n bytes that every rank maps (core's Comm.MemAlloc
// says what for) and, on a device rank of the plane whose layout has
// registered plans (registered: sched.RegisteredFolds, by core's agreed
// options), registers the host ranks' memory of it (registerMem).
func (e *Executor) MemAlloc(n int, registered bool) ([]byte, error) {
	b, err := e.world.MemAlloc(n)
	if err == nil && registered {
		e.registerMem(b)
	}
	return b, err
}

// MemFree releases memory from MemAlloc on this rank, and a device rank's
// registration of the host ranks' share.
func (e *Executor) MemFree(b []byte) error {
	var errs []error
	if len(b) > 0 {
		if addrs, ok := e.regs.addrs[&b[0]]; ok {
			delete(e.regs.addrs, &b[0])
			defer e.bindDevice()()
			for _, a := range addrs {
				errs = append(errs, e.plugin.HostUnregister(a))
			}
		}
	}
	return errors.Join(append(errs, e.world.MemFree(b))...)
}

// registerMem: a device rank of the shared-memory plane registers every
// host rank's memory of the allocation mine belongs to. A failure is not
// the call's: the rank's vote turns registered plans off (and INFO says
// why).
func (e *Executor) registerMem(mine []byte) {
	p := e.plugin
	if e.shm == nil || p == nil || e.regs.failed {
		return
	}
	peers := e.world.Engine().MemPeers(mine)
	if peers == nil {
		return
	}
	hosts := sched.HostRanks(e.layout)
	defer e.bindDevice()()
	addrs := make([]uintptr, 0, len(hosts))
	for _, q := range hosts {
		m := peers[q]
		a := hostAddr(m)
		if err := p.HostRegister(a, len(m)); err != nil {
			if e.logf != nil {
				e.logf("cannot register rank %d's MemAlloc memory with %s (%v): its AllReduces stage through the windows", q, p.Name, err)
			}
			for _, a := range addrs {
				_ = p.HostUnregister(a)
			}
			e.regs.failed = true
			return
		}
		addrs = append(addrs, a)
	}
	if e.regs.addrs == nil {
		e.regs.addrs = map[*byte][]uintptr{}
	}
	e.regs.addrs[&mine[0]] = addrs
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
	e, eng := r.e, r.e.world.Engine()
	half := (e.shm.windowMin() / 2) &^ 63 // the half a one-shot call would use
	base := int((r.node.Step()+1)&1) * half
	d := r.node.Window(e.rank)[base : base+host.MemDescBytes]
	if r.dev == nil {
		eng.MemDesc(d, r.b.Send.Host, r.b.Recv.Host)
	} else {
		clear(d)
		if !e.regs.failed {
			d[0] = 1 // the descriptor's flag word, with nothing to find
		}
	}
	if err := r.sync(r.sig(agreeLabel)); err != nil {
		return false, err
	}
	for q := 0; q < e.n; q++ {
		if binary.LittleEndian.Uint64(r.node.Window(q)[base:]) != 1 {
			return false, nil
		}
	}
	if r.dev == nil {
		return true, nil
	}
	sp := e.shm
	if len(sp.peerSend) < e.n {
		sp.peerSend, sp.peerRecv = make([][]byte, e.n), make([][]byte, e.n)
	}
	n := r.p.Call.Count * r.p.Call.DType.Size()
	for _, q := range sched.HostRanks(e.layout) {
		var err error
		if sp.peerSend[q], sp.peerRecv[q], _, err = eng.PeerBufs("AllReduce", q, r.node.Window(q)[base:], n, n); err != nil {
			return false, err
		}
	}
	return true, nil
}

// peerMem is host rank q's send or recv buffer as this device rank maps
// it (found by agreeRegistered).
func (r *shmRun) peerMem(ref sched.Ref) (mem, error) {
	sp := r.e.shm
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
