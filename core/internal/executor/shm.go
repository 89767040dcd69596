package executor

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The zero-copy data plane of a heterogeneous communicator whose ranks all
// share one host (sched.PathShm): the host's shared-memory windows,
// registered with every device rank's runtime, are the staging. The
// geometry and the reasons are in internal/sched/shm.go, a rank's steps in
// internal/sched/shm_steps.go; this file holds the plane, and
// shm_exec.go runs the steps.

// shmPlane is what a rank holds for PathShm.
type shmPlane struct {
	node *hostnet.ShmNode
	// workers is how many goroutines one rank's copies and reductions use:
	// the host's cores shared by its ranks.
	workers int
	// registered are the windows this rank registered with its runtime
	// (device ranks: every rank's window, as mapped here).
	registered []uintptr
	// Events per slot: the intra reduction of a chunk done (on the
	// caller's stream), its input in the window (d2h), its output back
	// on the device (h2d); start marks the caller's earlier work.
	start                 loader.Event
	reduced, input, outpt []loader.Event
	// reducesOnDevice: this rank can take part in device-reduced
	// AllReduces (a host rank always can; a device rank when its plugin's
	// reduceLocal works and FLAGCX_DEVICE_REDUCE is on). scratch holds
	// the other clusters' contributions on the device (scratchBytes).
	reducesOnDevice bool
	scratch         uintptr
	scratchBytes    int
	// relay is a device rank's relays (relay.go).
	relay relayState
	// copies gathers a host rank's copies of a step, kept so that the
	// step allocates nothing (it is on small calls' latency path).
	copies reduce.Copies
	// peerSend and peerRecv are, on a device rank, the host ranks' buffers
	// of the registered plan running (by rank; agreeRegistered).
	peerSend, peerRecv [][]byte
}

// scratchProbe is the device scratch SetupShm allocates to ask the plugin
// whether it reduces (a reduceLocal of no elements); calls grow it.
const scratchProbe = 4096

// SetupShm makes the zero-copy plane when every rank is on this host and
// shares its windows: a device rank registers every window with its
// runtime. It returns whether this rank can take part (every rank must,
// or nobody does: core's start agrees, and releases the plane otherwise).
func (e *Executor) SetupShm() bool {
	node := e.world.Mesh().Node
	if e.layout.IsHomogeneous() || e.hostPath || node == nil || node.Size() != e.n {
		return false
	}
	sp := &shmPlane{node: node, workers: reduce.Workers(node.Cores()), reducesOnDevice: e.wantDeviceReduce}
	e.shm = sp
	p := e.plugin
	if p == nil {
		return true
	}
	sp.reducesOnDevice = e.wantDeviceReduce && e.probeDeviceReduce()
	// A relay folds on the device too: FLAGCX_DEVICE_REDUCE=0 turns both off.
	if sp.relay.on = sp.reducesOnDevice && e.probeRelay(); sp.relay.on {
		sp.relay.proxy = e.startRelayProxy(node)
		e.relays.Store(sp.relay.proxy)
		node.SetGate(e.relayGate)
	}
	if !p.CanRegisterHost() {
		return false // ABI v1: the staged schedules run
	}
	for i := 0; i < node.Size(); i++ {
		w := node.Window(i)
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(w)))
		if err := p.HostRegister(addr, len(w)); err != nil {
			if e.logf != nil {
				e.logf("cannot register rank %d's shared window with %s (%v): the staged schedules run", i, p.Name, err)
			}
			return false
		}
		sp.registered = append(sp.registered, addr)
	}
	var err error
	sp.start, err = p.EventCreate(e.device)
	return err == nil
}

// probeDeviceReduce reports whether the plugin reduces on this rank's
// device: a reduceLocal of no elements on a first scratch allocation
// (the shared windows' scratch where they are set up).
func (e *Executor) probeDeviceReduce() bool {
	p, sp := e.plugin, e.shm
	if !p.CanReduceLocal() {
		return false
	}
	buf, err := p.DeviceMalloc(e.device, scratchProbe)
	if err == nil {
		if sp != nil {
			sp.scratch, sp.scratchBytes = buf, scratchProbe
		} else {
			defer func() { _ = p.DeviceFree(buf) }()
		}
		err = p.ReduceLocal(e.device, buf, []uintptr{buf}, 0, sdk.Float32, sdk.Sum, 1, 0)
	}
	if err != nil && e.logf != nil {
		e.logf("%s does not reduce on device %d (%v): clusters reduce on the host", p.Name, e.device, err)
	}
	return err == nil
}

// ReducesOnDevice reports whether this rank can take part in device
// folds: FLAGCX_DEVICE_REDUCE is on, and a device rank's plugin reduces
// there (probed once, by SetupShm where it set up the windows). A
// communicator without schedules across clusters has none (and does not
// probe: a plugin may compile its kernels on the first fold).
func (e *Executor) ReducesOnDevice() bool {
	switch {
	case !e.wantDeviceReduce || e.layout.IsHomogeneous() || e.hostPath:
		return false
	case e.plugin == nil:
		return true
	case e.shm != nil:
		return e.shm.reducesOnDevice
	}
	return e.probeDeviceReduce()
}

// ensureScratch makes the device scratch at least n bytes. Every copy
// into it of an earlier call is done: a call ends synchronised.
func (e *Executor) ensureScratch(n int) error {
	sp, p := e.shm, e.plugin
	if n <= sp.scratchBytes {
		return nil
	}
	if sp.scratch != 0 {
		if err := p.DeviceFree(sp.scratch); err != nil {
			return err
		}
		sp.scratch, sp.scratchBytes = 0, 0
	}
	buf, err := p.DeviceMalloc(e.device, n)
	if err != nil {
		return fmt.Errorf("device scratch of %d bytes for the other clusters' data on %s device %d: %w", n, p.Name, e.device, err)
	}
	sp.scratch, sp.scratchBytes = buf, n
	return nil
}

// windowMin is the smallest window of the host (the same on every rank).
func (sp *shmPlane) windowMin() int {
	w := len(sp.node.Window(0))
	for i := 1; i < sp.node.Size(); i++ {
		w = min(w, len(sp.node.Window(i)))
	}
	return w
}

// events makes sure there are n events of each kind.
func (e *Executor) shmEvents(n int) error {
	sp, p := e.shm, e.plugin
	for _, evs := range []*[]loader.Event{&sp.reduced, &sp.input, &sp.outpt} {
		for len(*evs) < n {
			ev, err := p.EventCreate(e.device)
			if err != nil {
				return fmt.Errorf("creating an event on %s device %d: %w", p.Name, e.device, err)
			}
			*evs = append(*evs, ev)
		}
	}
	return nil
}

// ReleaseShm unregisters the windows and destroys the events (core's
// start where the ranks do not all take part, and stop).
func (e *Executor) ReleaseShm() error {
	if e == nil {
		return nil
	}
	sp, p := e.shm, e.plugin
	e.shm = nil
	if sp == nil || p == nil {
		return nil
	}
	var errs []error
	// The device may still read the windows; where they are already
	// unmapped here (the host communicators failed), there is no word to
	// read, and the registration below keeps the pages until it is undone.
	if sp.relay.pending && sp.node.EnterUngated() == nil {
		errs = append(errs, e.drainRelays(&sp.relay))
		sp.node.Exit()
	}
	if sp.relay.proxy != nil {
		sp.relay.proxy.close()
	}
	sp.node.SetGate(nil)
	for _, addr := range sp.registered {
		errs = append(errs, p.HostUnregister(addr))
	}
	for _, ev := range append(append(append([]loader.Event{sp.start}, sp.reduced...), sp.input...), sp.outpt...) {
		if ev != 0 {
			errs = append(errs, p.EventDestroy(ev))
		}
	}
	if sp.scratch != 0 {
		errs = append(errs, p.DeviceFree(sp.scratch))
	}
	return errors.Join(errs...)
}
