package bench

import (
	"fmt"
	"runtime"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/launch"
)

// join finds the unique id (the launcher's job's, or a new one for a
// single rank) and joins this rank to the communicator on its backend.
func join(cfg *Config, e Env, job launch.Job, launched bool, nranks, rank int) (communicator, backend, error) {
	var id core.UniqueID
	var err error
	if launched {
		id, err = job.ID()
	} else {
		id, err = core.GetUniqueID()
	}
	if err != nil {
		return communicator{}, nil, err
	}
	cfg.Hetero = cfg.hetero(e.Lookup)
	hostnet.UseEmulatedNet(cfg.Emulated) // --emulated: the network plugin runs on the emulated verbs
	comm, be, err := joinBackend(cfg, job, launched, id, nranks, rank)
	job.Joined()
	if err != nil {
		err = fmt.Errorf("rank %d of %d could not join the communicator: %w", rank, nranks, err)
		reportStuck(e, err)
		return communicator{}, nil, err
	}
	return comm, be, nil
}

// communicator is the rank's core.Comm as the run uses it beside the
// backend, and what Run tears down at the end. guard, when set,
// runs the benchmark so that a plugin call stuck for good strands only the
// benchmark's goroutine (core.Comm.Guard).
type communicator struct {
	Comm
	destroy, abort func() error
	guard          func(func() error) error
}

func (c communicator) run(fn func() error) error {
	if c.guard == nil {
		return fn()
	}
	return c.guard(fn)
}

// joinBackend joins this rank to the communicator on its backend: the host
// backend, or the device of a plugin that this rank's place (or local rank)
// picks.
func joinBackend(cfg *Config, job launch.Job, launched bool, id core.UniqueID, nranks, rank int) (communicator, backend, error) {
	name, dev := cfg.Backend, rank
	switch {
	case cfg.Placement != nil:
		name, dev = cfg.Placement[rank], cfg.Placement.localIndex(rank)
	case launched && job.LocalRank >= 0:
		dev = job.LocalRank
	}
	// A host rank runs the communicator's own calls too unless the
	// communicator, once joined, is the host placement: only the layout
	// the ranks agreed on at init says so alike on every rank (a host rank
	// started without --backend cannot tell from its own flags that device
	// ranks of the same job make it heterogeneous).
	be := core.HostBackend()
	if name != HostBackendName {
		// A vendor runtime keeps per-thread state (the current device and
		// context); the first call on a thread that never touched it pays
		// to set it up (docs/performance.md, "nvidia plugin vs raw NCCL on
		// 2 x H200"), and Go moves goroutines between threads. Pinning the
		// rank to one thread for its life keeps that out of the timings.
		// The pin ends with the rank's process; the benchmark itself runs
		// on a goroutine that core.Comm.Guard pins in the same way.
		runtime.LockOSThread()
		p, err := openPlugin(name, cfg.PluginDir, cfg.Emulated)
		if err != nil {
			return communicator{}, nil, err
		}
		if n, err := p.DeviceCount(); err != nil {
			return communicator{}, nil, err
		} else if dev >= n {
			return communicator{}, nil, fmt.Errorf("rank %d needs %s device %d, but the plugin sees %d device(s): start fewer ranks per host", rank, name, dev, n)
		}
		be = core.DeviceBackend(p, dev)
	}
	hc, err := core.InitRank(id, nranks, rank, core.WithBackend(be))
	if err != nil {
		return communicator{}, nil, err
	}
	return wrapComm(cfg, be, hc)
}

// wrapComm is hc, this rank's communicator on be, as the run uses it,
// with the backend that runs the measured collectives.
func wrapComm(cfg *Config, be core.Backend, hc *core.Comm) (communicator, backend, error) {
	if !be.OnDevice() && !cfg.Hetero && hc.IsHomogeneous() {
		// The host placement with no cluster settings: the benchmark
		// times the communicator's calls on host memory from MemAlloc.
		return communicator{hc, hc.Destroy, hc.Abort, nil}, newHostBackend(hc), nil
	}
	hb, err := newHeteroBackend(hc)
	if err != nil {
		_ = hc.Abort()
		return communicator{}, nil, err
	}
	return communicator{hc, hc.Destroy, hc.Abort, hc.Guard}, hb, nil
}
