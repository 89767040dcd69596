package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flagcx/flagcx-go/internal/env"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Environment variables of heterogeneous communicators (FlagCX's names,
// declared in internal/env).
var (
	// EnvClusterSplitList splits clusters further: sizes in rank order
	// (see sched.NewLayout).
	EnvClusterSplitList = env.ClusterSplitList.Name
	// EnvUseHostComm=1 forces the host path for every collective.
	EnvUseHostComm = env.UseHostComm.Name
	// EnvNetChunkSize is the pipeline chunk of heterogeneous schedules
	// (bytes, K/M/G 1024-based, 1.5M allowed; default 16M, sched.DefaultChunk).
	EnvNetChunkSize = env.NetChunkSize.Name
)

// Backend is where a rank runs: the built-in host backend (Plugin nil) or
// device Device of an initialized plugin.
type Backend struct {
	Plugin *loader.Plugin
	Device int
}

// HostBackend is the CPU as a device.
func HostBackend() Backend { return Backend{} }

// DeviceBackend is device dev of plugin p (initialized with p.Init).
func DeviceBackend(p *loader.Plugin, dev int) Backend { return Backend{Plugin: p, Device: dev} }

// OnDevice reports whether the backend is a plugin's device.
func (b Backend) OnDevice() bool { return b.Plugin != nil }

// Vendor is the backend's cluster key.
func (b Backend) Vendor() string {
	if b.Plugin == nil {
		return sched.HostVendor
	}
	return b.Plugin.Vendor
}

func (b Backend) String() string {
	if b.Plugin == nil {
		return "host"
	}
	return fmt.Sprintf("%s:%d", b.Plugin.Name, b.Device)
}

// Buffer is one rank's memory for a collective: host memory on a host
// rank, device memory of the rank's plugin on a device rank (a pointer
// from DeviceMalloc, or pinned memory from HostMalloc, with its length).
// One API then serves every rank of a heterogeneous communicator.
type Buffer struct {
	host []byte
	ptr  uintptr
	n    int
	dev  bool
}

// HostBuffer wraps host memory.
func HostBuffer(b []byte) Buffer { return Buffer{host: b, n: len(b)} }

// DeviceBuffer wraps n bytes of device memory at ptr.
func DeviceBuffer(ptr uintptr, n int) Buffer { return Buffer{ptr: ptr, n: n, dev: true} }

// Len is the buffer's size in bytes.
func (b Buffer) Len() int { return b.n }

// OnDevice reports whether the buffer is device memory.
func (b Buffer) OnDevice() bool { return b.dev }

// Host is a host buffer's memory (nil for device memory).
func (b Buffer) Host() []byte { return b.host }

// Ptr is a device buffer's address (0 for host memory).
func (b Buffer) Ptr() uintptr { return b.ptr }

// Slice is the n bytes at off, for NCCL's in-place layouts (AllGather's
// send = recv.Slice(rank*bytes, bytes), and so on).
func (b Buffer) Slice(off, n int) (Buffer, error) {
	if off < 0 || n < 0 || off > b.n || n > b.n-off {
		return Buffer{}, fmt.Errorf("%w: slice [%d, %d+%d) of a %d-byte buffer: keep it inside the buffer", sdk.ErrInvalidArgument, off, off, n, b.n)
	}
	if b.dev {
		return Buffer{ptr: b.ptr + uintptr(off), n: n, dev: true}, nil
	}
	return Buffer{host: b.host[off : off+n], n: n}, nil
}

// HeteroOption configures InitHeteroRank.
type HeteroOption func(*heteroOptions)

type heteroOptions struct {
	comm     []Option
	split    *[]int
	hostPath *bool
	chunk    int
	lookup   func(string) (string, bool)
}

// WithCommOptions passes options to the host communicators underneath.
func WithCommOptions(opts ...Option) HeteroOption {
	return func(o *heteroOptions) { o.comm = append(o.comm, opts...) }
}

// WithSplitList splits clusters as FLAGCX_CLUSTER_SPLIT_LIST would (and
// overrides it); nil or empty: no split.
func WithSplitList(sizes []int) HeteroOption {
	return func(o *heteroOptions) { s := append([]int(nil), sizes...); o.split = &s }
}

// WithHostPath forces (or, with false, forbids) the host path, overriding
// FLAGCX_USE_HOST_COMM.
func WithHostPath(on bool) HeteroOption { return func(o *heteroOptions) { o.hostPath = &on } }

// WithChunk sets the pipeline chunk in bytes, overriding
// FLAGCX_NET_CHUNK_SIZE.
func WithChunk(bytes int) HeteroOption { return func(o *heteroOptions) { o.chunk = bytes } }

// WithEnv reads the FLAGCX_* settings through lookup instead of the
// process environment (tests; ranks as goroutines).
func WithEnv(lookup func(string) (string, bool)) HeteroOption {
	return func(o *heteroOptions) { o.lookup = lookup }
}

// HeteroComm is a communicator whose ranks may run on different backends:
// the host and the devices of several vendors' plugins. Ranks of one vendor
// form a cluster (split further by FLAGCX_CLUSTER_SPLIT_LIST). With one
// cluster, collectives go straight to its library (the vendor's, enqueued
// on the caller's stream, or the host backend's); with several, each call
// runs a schedule (package sched) that composes the clusters' libraries
// with host transfers between the cluster leaders, through pinned staging,
// and returns when the result is in place.
//
// On a device rank every plugin call that can block is bounded by the
// deadline (FLAGCX_TIMEOUT): see Watchdog and Guard.
//
// Like an NCCL communicator it is used by one goroutine at a time; Abort
// may be called from another. On a device rank, call it from a goroutine
// locked to its OS thread (runtime.LockOSThread) for steady latency: vendor
// runtimes keep per-thread state, and the first call on a thread new to it
// pays to set that up (about 1.5 ms seen with CUDA on H200s).
type HeteroComm struct {
	rank, n int
	be      Backend
	layout  *sched.Layout
	opts    sched.Options

	world *Comm        // every rank, over hostnet
	intra *Comm        // this rank's cluster (== world when homogeneous)
	inter *Comm        // the cluster leaders (leaders only; heterogeneous only)
	ccl   *loader.Comm // the cluster's vendor communicator (device ranks)

	d2h, h2d loader.Stream // staging copies (device ranks)
	shm      *shmPlane     // the zero-copy plane (every rank on one host), or nil
	// wantDeviceReduce: FLAGCX_DEVICE_REDUCE on this rank (sched.Options'
	// ShmDeviceReduce is what the ranks agreed).
	wantDeviceReduce bool
	events           []loader.Event // ordering the steps of staged plans (device ranks; see chain)

	stagePtr   uintptr // pinned staging (device ranks)
	stage      []byte  // staging (host memory on host ranks)
	scratchPtr uintptr // device scratch (device ranks)
	scratchLen int
	hscratch   []byte // scratch on host ranks

	workers int
	debug   collDebug
	printed map[string]bool

	group     int
	groupOps  []groupOp
	groupErr  error
	groupStrm loader.Stream

	wd         *Watchdog      // bounds this rank's plugin calls (device ranks)
	dev        *watchedPlugin // the plugin's calls that can block, under wd (device ranks)
	vendorGone atomic.Bool    // ccl was aborted or destroyed (see abortVendor)

	mu       sync.Mutex // guards failed and closed against Abort
	failed   error
	closed   bool
	stopOnce sync.Once
}

type groupOp struct {
	buf   Buffer
	bytes int
	peer  int
	recv  bool
}

// initRecord is what every rank tells the others at init: its backend and
// the settings that must agree.
type initRecord struct {
	Member   sched.Member `json:"member"`
	Split    string       `json:"split"`
	HostPath bool         `json:"host_path"`
	Chunk    int          `json:"chunk"`
}

const initRecordBytes = 1024

// InitHeteroRank joins rank (0 <= rank < nranks) on backend be to the
// communicator of id. All ranks call it concurrently, each with its own
// backend. It builds the host communicator of all ranks, agrees on the
// cluster layout, then starts each cluster's communicator (the vendor
// library's on device clusters) and the leaders' inter-cluster one.
func InitHeteroRank(id UniqueID, nranks, rank int, be Backend, opts ...HeteroOption) (*HeteroComm, error) {
	o := heteroOptions{lookup: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	rec, err := settings(&o)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	if err := checkBackend(be); err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	rec.Member = member(rank, be)

	world, err := InitRank(id, nranks, rank, append(o.comm[:len(o.comm):len(o.comm)], nearNet(be))...)
	if err != nil {
		return nil, err
	}
	c := &HeteroComm{rank: rank, n: nranks, be: be, world: world, workers: runtime.GOMAXPROCS(0), debug: collDebugFromEnv(o.lookup), printed: map[string]bool{}}
	// A value this rank cannot read counts as "off": start turns device
	// reductions off for everyone when any rank has them off.
	c.wantDeviceReduce, _ = env.DeviceReduce.Get(env.Lookup(o.lookup))
	if err := c.agree(rec); err != nil {
		_ = world.Abort()
		return nil, err
	}
	if be.OnDevice() {
		c.wd = newWatchdog(rank, be.Plugin.Name, world.cfg.Timeout, c.onTimeout,
			func() string { return stalledPeers(world.peers, rank) })
		c.dev = &watchedPlugin{be.Plugin, c.wd}
	}
	if err := c.start(); err != nil {
		c.stop(true)
		return nil, err
	}
	if c.debug.init {
		c.logf("INIT", "%s", c.layout)
	}
	return c, nil
}

// settings reads the split list, host-path switch and chunk size.
func settings(o *heteroOptions) (initRecord, error) {
	var r initRecord
	lookup := env.Lookup(o.lookup)
	if o.split != nil {
		parts := make([]string, len(*o.split))
		for i, s := range *o.split {
			parts[i] = strconv.Itoa(s)
		}
		r.Split = strings.Join(parts, ",")
	} else {
		r.Split, _ = env.ClusterSplitList.Get(lookup)
	}
	if _, err := sched.ParseSplitList(r.Split); err != nil {
		return r, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}
	if o.hostPath != nil {
		r.HostPath = *o.hostPath
	} else {
		on, err := env.UseHostComm.Get(lookup)
		if err != nil {
			return r, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		r.HostPath = on
	}
	r.Chunk = o.chunk
	if r.Chunk == 0 {
		// Unset, the chunk is the schedules' own default, which the
		// registry documents (TestChunkDefault keeps them equal).
		n, set, err := env.NetChunkSize.Find(lookup)
		if err != nil {
			return r, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		if set {
			r.Chunk = n
		}
	}
	if r.Chunk <= 0 {
		r.Chunk = sched.DefaultChunk
	}
	return r, nil
}

func checkBackend(be Backend) error {
	if be.Plugin == nil {
		return nil
	}
	p := be.Plugin
	if !p.Initialized() {
		return fmt.Errorf("%w: plugin %s is not initialized: call its Init (loader.LoadAll does) before InitHeteroRank", sdk.ErrInvalidUsage, p.Name)
	}
	if p.Caps&loader.CapCCL == 0 {
		return fmt.Errorf("%w: plugin %s has no collective library: run this rank on the host backend or another plugin", sdk.ErrInvalidUsage, p.Name)
	}
	n, err := p.DeviceCount()
	if err != nil {
		return err
	}
	if be.Device < 0 || be.Device >= n {
		return fmt.Errorf("%w: %s device %d does not exist (the plugin sees %d): use a device in 0..%d, or fewer ranks per host", sdk.ErrInvalidArgument, p.Name, be.Device, n, n-1)
	}
	return nil
}

func member(rank int, be Backend) sched.Member {
	m := sched.Member{Rank: rank, Vendor: be.Vendor(), Device: be.Device, Types: ^uint32(0), Ops: ^uint32(0)}
	if be.Plugin != nil {
		m.Plugin = be.Plugin.Name
		m.Emulated = be.Plugin.Emulated()
		m.Types, m.Ops = 0, 0
		for _, t := range sdk.AllDataTypes() {
			if be.Plugin.SupportsDataType(t) {
				m.Types |= 1 << uint(t)
			}
		}
		for _, op := range sdk.AllRedOps() {
			if be.Plugin.SupportsRedOp(op) {
				m.Ops |= 1 << uint(op)
			}
		}
	} else {
		m.Device = -1
	}
	return m
}

// agree exchanges every rank's record and makes the layout. Every rank
// reaches the same verdict from the same records.
func (c *HeteroComm) agree(rec initRecord) error {
	mine, err := json.Marshal(rec)
	if err != nil || len(mine) > initRecordBytes {
		return fmt.Errorf("%w: rank %d: init record of %d bytes", sdk.ErrInternalError, c.rank, len(mine))
	}
	buf := make([]byte, initRecordBytes)
	copy(buf, mine)
	all := make([]byte, initRecordBytes*c.n)
	if err := c.world.AllGather(buf, all, initRecordBytes, sdk.Uint8); err != nil {
		return fmt.Errorf("rank %d: exchanging backends: %w", c.rank, err)
	}
	members := make([]sched.Member, c.n)
	recs := make([]initRecord, c.n)
	for r := range recs {
		b := all[r*initRecordBytes : (r+1)*initRecordBytes]
		if i := strings.IndexByte(string(b), 0); i >= 0 {
			b = b[:i]
		}
		if err := json.Unmarshal(b, &recs[r]); err != nil {
			return fmt.Errorf("%w: rank %d's init record is malformed: %w", sdk.ErrInternalError, r, err)
		}
		members[r] = recs[r].Member
	}
	for r := 1; r < c.n; r++ {
		a, b := recs[0], recs[r]
		switch {
		case a.Split != b.Split:
			return fmt.Errorf("%w: %s differs between ranks: rank 0 has %q, rank %d has %q: give every rank the same value", sdk.ErrInvalidUsage, EnvClusterSplitList, a.Split, r, b.Split)
		case a.HostPath != b.HostPath:
			return fmt.Errorf("%w: %s differs between ranks (rank 0: %v, rank %d: %v): give every rank the same value", sdk.ErrInvalidUsage, EnvUseHostComm, a.HostPath, r, b.HostPath)
		case a.Chunk != b.Chunk:
			return fmt.Errorf("%w: %s differs between ranks (rank 0: %d, rank %d: %d): give every rank the same value", sdk.ErrInvalidUsage, EnvNetChunkSize, a.Chunk, r, b.Chunk)
		}
	}
	split, _ := sched.ParseSplitList(rec.Split)
	l, err := sched.NewLayout(members, split)
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.rank, err)
	}
	c.layout = l
	c.opts = sched.Options{HostPath: rec.HostPath, Chunk: rec.Chunk}
	return nil
}

// start brings up the cluster and leader communicators and the streams.
// A failure anywhere is shared, so that every rank returns an error.
func (c *HeteroComm) start() error {
	l := c.layout
	cl := l.ClusterOf(c.rank)
	var startErr error
	if l.IsHomogeneous() {
		c.intra = c.world
	} else {
		sub, err := c.world.Split(cl.Index, c.rank)
		if err != nil {
			return fmt.Errorf("rank %d: starting cluster %d's communicator: %w", c.rank, cl.Index, err)
		}
		c.intra = sub
		sub.inner = true
		color := SplitNoColor
		if cl.Leader == c.rank {
			color = 0
		}
		inter, err := c.world.Split(color, cl.Index)
		if err != nil {
			return fmt.Errorf("rank %d: starting the leaders' communicator: %w", c.rank, err)
		}
		c.inter = inter
		if inter != nil {
			inter.inner = true
		}
	}
	if c.be.OnDevice() {
		startErr = c.startDevice(cl)
	}
	shmOK := startErr == nil && c.setupShm()
	// Share the outcome: a rank whose vendor library failed must not
	// leave the others waiting in their first collective; the zero-copy
	// plane runs only if every rank can take part, and reduces on the
	// devices only if every rank wants it and every device rank can.
	const failed, noShm, noDeviceReduce = 1, 2, 4
	flag := []byte{0}
	if startErr != nil {
		flag[0] |= failed
	}
	if !shmOK {
		flag[0] |= noShm
	}
	if !shmOK || !c.shm.reducesOnDevice {
		flag[0] |= noDeviceReduce
	}
	flags := make([]byte, c.n)
	if err := c.world.AllGather(flag, flags, 1, sdk.Uint8); err != nil {
		return errors.Join(startErr, fmt.Errorf("rank %d: agreeing on the start: %w", c.rank, err))
	}
	if startErr != nil {
		return startErr
	}
	var bad []int
	deviceReduce := shmOK
	for r, f := range flags {
		if f&failed != 0 {
			bad = append(bad, r)
		}
		shmOK = shmOK && f&noShm == 0
		deviceReduce = deviceReduce && f&noDeviceReduce == 0
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: rank %d: ranks %s could not start their cluster's library (see their errors)", sdk.ErrRemoteError, c.rank, sched.FormatRanks(bad))
	}
	if shmOK {
		c.opts.ShmWindow = c.shm.windowMin()
		c.opts.ShmDeviceReduce = deviceReduce
	} else if err := c.releaseShm(); err != nil {
		return fmt.Errorf("rank %d: releasing the shared windows: %w", c.rank, err)
	}
	return nil
}

func (c *HeteroComm) startDevice(cl *sched.Cluster) error {
	p, dev := c.be.Plugin, c.be.Device
	var err error
	var cm *loader.Comm
	if len(cl.Ranks) > 1 {
		var vid []byte
		if vid, err = shareVendorID(c.intra, p); err == nil {
			cm, err = c.commInit(p, dev, len(cl.Ranks), vid, c.layout.LocalRank(c.rank))
		}
	} else if c.layout.IsHomogeneous() {
		// A one-rank communicator still runs on the vendor library. In a
		// heterogeneous one, a cluster of one needs no library: its
		// schedules only copy.
		var vid []byte
		if vid, err = p.UniqueID(); err == nil {
			cm, err = c.commInit(p, dev, 1, vid, 0)
		}
	}
	if err != nil {
		return fmt.Errorf("rank %d: starting %s's collective library on device %d: %w", c.rank, p.Name, dev, err)
	}
	c.ccl = cm // only now: the watchdog reads it when it fires
	if c.layout.IsHomogeneous() && !c.opts.HostPath {
		return nil // no staging: the vendor library does everything
	}
	if c.d2h, err = p.StreamCreate(dev); err == nil {
		c.h2d, err = p.StreamCreate(dev)
	}
	if err != nil {
		return fmt.Errorf("rank %d: creating copy streams on %s device %d: %w", c.rank, p.Name, dev, err)
	}
	return nil
}

// Rank is this rank; Count the number of ranks.
func (c *HeteroComm) Rank() int  { return c.rank }
func (c *HeteroComm) Count() int { return c.n }

// Backend is this rank's backend.
func (c *HeteroComm) Backend() Backend { return c.be }

// Layout is the communicator's clusters (the same on every rank).
func (c *HeteroComm) Layout() *sched.Layout { return c.layout }

// Clusters lists the clusters, numbered by their first rank.
func (c *HeteroComm) Clusters() []sched.Cluster {
	return append([]sched.Cluster(nil), c.layout.Clusters...)
}

// IsHomogeneous reports whether all ranks form one cluster.
func (c *HeteroComm) IsHomogeneous() bool { return c.layout.IsHomogeneous() }

// Options are the settings every rank agreed on at init.
func (c *HeteroComm) Options() sched.Options { return c.opts }

// Host is the host communicator over all ranks, for out-of-band exchanges
// on host memory (agreeing on timings, say). Do not use it while a
// collective of this communicator runs.
func (c *HeteroComm) Host() *Comm { return c.world }

// Vendor is this rank's cluster's vendor communicator (nil on the host).
func (c *HeteroComm) Vendor() *loader.Comm { return c.ccl }

// PlanFor builds rank's plan for call (any rank's: plans are pure data).
func (c *HeteroComm) PlanFor(rank int, call sched.Call) (*sched.Plan, error) {
	return sched.Build(c.layout, rank, call, c.opts)
}

// Destroy releases the communicator after its operations completed.
func (c *HeteroComm) Destroy() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	return c.stop(false)
}

// Abort tears the communicator down at once: operations in flight fail,
// and peers waiting on this rank see an error naming it.
func (c *HeteroComm) Abort() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.stop(true)
}

// stop releases everything once (abort: without waiting for peers).
func (c *HeteroComm) stop(abort bool) error {
	var errs []error
	c.stopOnce.Do(func() {
		defer c.wd.close()
		if abort {
			c.abortHost()
			if err := c.abortVendor(); err != nil && !errors.Is(err, sdk.ErrNotSupported) {
				errs = append(errs, err)
			}
		} else {
			errs = append(errs, c.destroyVendor())
		}
		// After the watchdog gave up, a call may still be inside the
		// plugin, using the streams, events and memory below: they are
		// leaked rather than freed under it (freeing may also block
		// behind it).
		stuck := c.wd.Err() != nil
		// The windows go with the host communicators: unregister first.
		if stuck {
			c.shm = nil
		} else if err := c.releaseShm(); err != nil && !abort {
			errs = append(errs, err)
		}
		for _, cm := range c.hostComms() {
			if abort {
				errs = append(errs, cm.Abort())
			} else {
				errs = append(errs, cm.Destroy())
			}
		}
		if p := c.be.Plugin; p != nil && !stuck {
			for _, s := range []loader.Stream{c.d2h, c.h2d} {
				if s != 0 {
					errs = append(errs, p.StreamDestroy(s))
				}
			}
			for _, e := range c.events {
				errs = append(errs, p.EventDestroy(e))
			}
			c.events = nil
			if c.stagePtr != 0 {
				errs = append(errs, p.HostFree(c.stagePtr))
				c.stagePtr, c.stage = 0, nil
			}
			if c.scratchPtr != 0 {
				errs = append(errs, p.DeviceFree(c.scratchPtr))
				c.scratchPtr, c.scratchLen = 0, 0
			}
		}
	})
	return errors.Join(errs...)
}

// hostComms are the distinct host communicators this rank holds.
func (c *HeteroComm) hostComms() []*Comm {
	out := []*Comm{c.world}
	if c.intra != nil && c.intra != c.world {
		out = append(out, c.intra)
	}
	if c.inter != nil {
		out = append(out, c.inter)
	}
	return out
}

// abortHost closes the host communicators at once, so that lanes waiting
// in hostnet return and peers waiting on this rank see it gone.
func (c *HeteroComm) abortHost() {
	for _, cm := range c.hostComms() {
		if cm != nil {
			_ = cm.Abort()
		}
	}
}

// usable refuses calls on a communicator that failed or was closed.
func (c *HeteroComm) usable(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.failed != nil:
		// %v: this call is a usage error; the earlier failure (a timeout,
		// a remote error) was that call's and must not match here.
		return fmt.Errorf("%w: %s on rank %d: the communicator failed in an earlier call (%v): destroy it and make a new one", sdk.ErrInvalidUsage, name, c.rank, c.failed)
	case c.closed:
		return fmt.Errorf("%w: %s on rank %d: the communicator was destroyed or aborted", sdk.ErrInvalidUsage, name, c.rank)
	}
	return nil
}
