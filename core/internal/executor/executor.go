package executor

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Device is the plugin's calls that wait for the device or enqueue work
// on it, each bounded by the communicator's watchdog (core/guard.go's
// watchedPlugin). The calls that neither wait nor enqueue (names,
// events made and destroyed, a relay's launch, a stream's query) go to
// the plugin itself (Config.Plugin), as they always did.
type Device interface {
	Memcpy(dst, src uintptr, n int, kind loader.MemcpyKind, s loader.Stream) error
	ReduceLocal(dev int, dst uintptr, srcs []uintptr, count int, dt sdk.DataType, op sdk.RedOp, avgDivisor int, s loader.Stream) error
	StreamSynchronize(s loader.Stream) error
	StreamWaitEvent(s loader.Stream, e loader.Event) error
	EventRecord(e loader.Event, s loader.Stream) error
	EventSynchronize(e loader.Event) error
	GroupEnd() error
}

// Vendor is the cluster's vendor communicator, its calls bounded by the
// watchdog (core/guard.go's watchedComm): what a plan's intra-cluster
// steps run on a device rank (sdk.Dispatch, and a step's sends and
// receives).
type Vendor = sdk.Collectives[uintptr, loader.Stream]

// Owner is the communicator that holds the executor (core.Comm), for what
// a failed call does to it (docs/resilience.md, "the abort order").
type Owner interface {
	// Failure records that p failed with err and returns the call's
	// error: a plan across communicators aborts the communicator (the
	// peers told first), which then refuses further calls.
	Failure(p *sched.Plan, err error) error
	// FailStart is Failure's first half, which waits for nothing: the
	// peers learn what failed, the host side is shut and the vendor
	// communicator aborted, once. A call that holds the shared windows
	// runs it before it waits for its device (RunShm).
	FailStart(p *sched.Plan, err error)
	// ShutHost fails every wait on the rank's host communicators at once,
	// here and on the peers; it never blocks.
	ShutHost()
	// Calls numbers the calls that ran so far (StepRan).
	Calls() uint64
}

// Config is what core gives the executor of one rank.
type Config struct {
	Rank, N int
	// Plugin and DeviceIndex are the rank's device; Plugin nil: the host.
	Plugin      *loader.Plugin
	DeviceIndex int
	Layout      *sched.Layout
	// HostPath: the plans go over the host (FLAGCX_USE_HOST_COMM), never
	// through the shared windows.
	HostPath bool
	// World, Intra and Inter are the host communicators of every rank,
	// this rank's cluster and the cluster leaders (nil on other ranks).
	World, Intra, Inter *hostcomm.Comm
	// Device is the plugin's watched calls (nil on a host rank); Vendor
	// the vendor communicator (nil where the rank has none).
	Device Device
	Vendor Vendor
	Owner  Owner
	// WantDeviceReduce: FLAGCX_DEVICE_REDUCE on this rank.
	WantDeviceReduce bool
	// Logf writes an INFO line of the INIT subsystem; nil: INIT is off.
	Logf func(format string, args ...any)
}

// Executor is a rank's executor of plans; core.Comm holds one. Like the
// communicator it is used by one goroutine at a time, but for
// RelayFailure, which any may call.
type Executor struct {
	rank, n  int
	plugin   *loader.Plugin // nil on a host rank
	device   int
	layout   *sched.Layout
	hostPath bool

	world, intra, inter *hostcomm.Comm
	dev                 Device // nil on a host rank
	vendor              Vendor // nil without a vendor communicator
	owner               Owner
	logf                func(format string, args ...any)

	d2h, h2d loader.Stream // staging copies (device ranks)
	shm      *shmPlane     // the zero-copy plane (every rank on one host), or nil
	// relays is the shared plane's relay proxy, kept for RelayFailure,
	// which other goroutines may call while Close drops shm (nil: none).
	relays atomic.Pointer[relayProxy]
	regs   memRegs // the host ranks' MemAlloc memory a device rank registered
	// wantDeviceReduce: FLAGCX_DEVICE_REDUCE on this rank (sched.Options'
	// ShmDeviceReduce and StagedDeviceReduce are what the ranks agreed).
	wantDeviceReduce bool
	events           []loader.Event // ordering the steps of staged plans (device ranks; see chain)
	pieceEvents      []loader.Event // the staged AllReduce's pieces (staged.go)
	stagedInPieces   int            // staged AllReduces run in pieces (tests read it)

	stagePtr   uintptr // pinned staging (device ranks)
	stage      []byte  // staging (host memory on host ranks)
	scratchPtr uintptr // device scratch (device ranks)
	scratchLen int
	hscratch   []byte // scratch on host ranks

	workers int
	// foldSrcs hold a device fold's inputs (devFold), one list per lane:
	// a lane's steps run one after the other (Execute, RunShm), and a
	// list of the executor's own passes through Device (an interface)
	// without an allocation, where a local array would escape.
	foldSrcs [sched.NumLanes][sched.MaxDeviceReduceClusters]uintptr
}

// New makes the executor of cfg's rank; core's start then calls Start
// and SetupShm.
func New(cfg Config) *Executor {
	return &Executor{rank: cfg.Rank, n: cfg.N, plugin: cfg.Plugin, device: cfg.DeviceIndex, layout: cfg.Layout, hostPath: cfg.HostPath,
		world: cfg.World, intra: cfg.Intra, inter: cfg.Inter, dev: cfg.Device, vendor: cfg.Vendor, owner: cfg.Owner, logf: cfg.Logf,
		wantDeviceReduce: cfg.WantDeviceReduce, workers: hostWorkers(cfg.World)}
}

// hostWorkers is how many goroutines this rank's host folds use: the
// cores its host leaves each of its ranks (all of them where its ranks
// share no host's windows), bounded (reduce.Workers).
func hostWorkers(world *hostcomm.Comm) int {
	if node := world.Mesh().Node; node != nil {
		return reduce.Workers(node.Cores())
	}
	return reduce.Workers(runtime.GOMAXPROCS(0))
}

// Start makes a device rank's copy streams, unless the vendor library
// does everything (a homogeneous communicator off the host path).
func (e *Executor) Start() error {
	p, dev := e.plugin, e.device
	if p == nil || e.layout.IsHomogeneous() && !e.hostPath {
		return nil // no staging
	}
	var err error
	if e.d2h, err = p.StreamCreate(dev); err == nil {
		e.h2d, err = p.StreamCreate(dev)
	}
	if err != nil {
		return fmt.Errorf("rank %d: creating copy streams on %s device %d: %w", e.rank, p.Name, dev, err)
	}
	return nil
}

// HasShm reports whether the shared-memory plane is set up.
func (e *Executor) HasShm() bool { return e != nil && e.shm != nil }

// RelaysOn reports whether this rank relays (a device rank of the plane
// whose plugin relays).
func (e *Executor) RelaysOn() bool { return e.shm != nil && e.shm.relay.on }

// ShmWindow is the smallest window of the host (the same on every rank);
// the plane must be set up.
func (e *Executor) ShmWindow() int { return e.shm.windowMin() }

// RelayFailure is the error of the first relay that failed after its
// call returned (AsyncError), or nil; any goroutine may ask.
func (e *Executor) RelayFailure() error {
	if e == nil {
		return nil
	}
	if p := e.relays.Load(); p != nil {
		return p.failure()
	}
	return nil
}

// AbandonShm drops the plane of a rank whose plugin call is stuck (the
// watchdog fired): its relay proxy stops without a wait, and nothing the
// device may still use is freed.
func (e *Executor) AbandonShm() {
	if e == nil {
		return
	}
	e.shm.abandonRelays()
	e.shm = nil
}

// Free releases a device rank's streams, events, staging and scratch,
// after the host communicators closed; not where a plugin call is stuck
// (it may still use them, and freeing may block behind it).
func (e *Executor) Free() error {
	if e == nil || e.plugin == nil {
		return nil
	}
	p := e.plugin
	var errs []error
	for _, s := range []loader.Stream{e.d2h, e.h2d} {
		if s != 0 {
			errs = append(errs, p.StreamDestroy(s))
		}
	}
	for _, ev := range append(e.events, e.pieceEvents...) {
		errs = append(errs, p.EventDestroy(ev))
	}
	e.events, e.pieceEvents = nil, nil
	if e.stagePtr != 0 {
		errs = append(errs, p.HostFree(e.stagePtr))
		e.stagePtr, e.stage = 0, nil
	}
	if e.scratchPtr != 0 {
		errs = append(errs, p.DeviceFree(e.scratchPtr))
		e.scratchPtr, e.scratchLen = 0, 0
	}
	return errors.Join(errs...)
}

// StagedInPieces is how many staged AllReduces ran in pieces (core's
// tests read it: staged.go).
func (e *Executor) StagedInPieces() int { return e.stagedInPieces }

// CloseAndAwaitRelay closes the shared windows, as core's Destroy and
// Abort do, then waits as the relay proxy does for a landed word that
// never comes (on the idle d2h stream), and returns the wait's error:
// core's tests require that it ends (RelayWaitAfterClose in
// core/export_test.go).
func (e *Executor) CloseAndAwaitRelay() error {
	e.shm.node.Close()
	var word uint64
	return e.awaitWord(&word, 1, e.d2h, "land", e.shm.relay.proxy.closing)
}
