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
	"time"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The environment variables of a communicator's cluster layout (FlagCX's
// names), read by InitRank unless options override them.
var (
	// EnvClusterSplitList splits the clusters further: cluster sizes in
	// rank order, e.g. "2,2" (WithSplitList).
	EnvClusterSplitList = env.ClusterSplitList.Name
	// EnvUseHostComm=1 forces the host path for every collective
	// (WithHostPath).
	EnvUseHostComm = env.UseHostComm.Name
	// EnvNetChunkSize is the pipeline chunk of heterogeneous schedules
	// (bytes, K/M/G 1024-based, 1.5M allowed; default 16M) (WithChunk).
	EnvNetChunkSize = env.NetChunkSize.Name
)

// Backend is where a rank runs (its placement): the built-in host backend
// (Plugin nil) or device Device of an initialized plugin. Ranks on one
// vendor's devices form a cluster; host ranks form the host cluster.
type Backend struct {
	Plugin *loader.Plugin // nil: the host
	Device int            // the plugin's device index, from 0
}

// HostBackend is the host (the CPU) as a rank's device: its buffers are
// host memory, and it needs no plugin.
func HostBackend() Backend { return Backend{} }

// DeviceBackend is device dev of plugin p, which must be initialized
// (p.Init; loader.LoadAll does it) and have a collective library.
func DeviceBackend(p *loader.Plugin, dev int) Backend { return Backend{Plugin: p, Device: dev} }

// OnDevice reports whether the backend is a plugin's device.
func (b Backend) OnDevice() bool { return b.Plugin != nil }

// Vendor is the backend's cluster key: the plugin's vendor, or "host".
func (b Backend) Vendor() string {
	if b.Plugin == nil {
		return sched.HostVendor
	}
	return b.Plugin.Vendor
}

// String is "host" or "<plugin>:<device>".
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

// HostBuffer wraps host memory: the buffers of a host rank.
func HostBuffer(b []byte) Buffer { return Buffer{host: b, n: len(b)} }

// DeviceBuffer wraps n bytes of device memory at ptr (from the rank's
// plugin's DeviceMalloc): the buffers of a device rank.
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

// Option configures InitRank.
type Option func(*options)

type options struct {
	be       Backend
	net      *hostnet.Config
	timeout  time.Duration
	split    *[]int
	hostPath *bool
	chunk    int
	lookup   func(string) (string, bool)
}

// WithBackend places this rank on be: HostBackend (the default) or a
// plugin's device (DeviceBackend). Ranks of one communicator may pass
// different backends.
func WithBackend(be Backend) Option { return func(o *options) { o.be = be } }

// WithNetConfig sets the host transport between the ranks (default:
// NetConfigFromEnv).
func WithNetConfig(cfg NetConfig) Option { return func(o *options) { o.net = &cfg } }

// WithTimeout bounds every wait of the communicator without progress, and
// every blocking plugin call (default FLAGCX_TIMEOUT, 30 s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithSplitList splits clusters as FLAGCX_CLUSTER_SPLIT_LIST would (and
// overrides it): cluster sizes in rank order; nil or empty: no split.
// Every rank must pass the same list.
func WithSplitList(sizes []int) Option {
	return func(o *options) { s := append([]int(nil), sizes...); o.split = &s }
}

// WithHostPath forces (or, with false, forbids) the host path, overriding
// FLAGCX_USE_HOST_COMM: every collective then copies device data to the
// host, runs on the host communicator of all ranks and copies it back.
// Every rank must pass the same value.
func WithHostPath(on bool) Option { return func(o *options) { o.hostPath = &on } }

// WithChunk sets the pipeline chunk of heterogeneous schedules in bytes,
// overriding FLAGCX_NET_CHUNK_SIZE. Every rank must pass the same value.
func WithChunk(bytes int) Option { return func(o *options) { o.chunk = bytes } }

// WithEnv reads the FLAGCX_* settings of the cluster layout
// (FLAGCX_CLUSTER_SPLIT_LIST, FLAGCX_USE_HOST_COMM, FLAGCX_NET_CHUNK_SIZE,
// FLAGCX_DEBUG) through lookup instead of the process environment: for
// ranks that run as goroutines of one process, or tests.
func WithEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookup = lookup }
}

// Comm is one rank's handle on a communicator, the one type through
// which users run collectives. Its ranks may run on different backends
// (placements): the host, and the devices of several vendors' plugins.
// A communicator whose ranks are all on the host is the host placement:
// the same type, on host buffers (HostBuffer) with stream 0.
//
// Ranks of one vendor form a cluster (split further by
// FLAGCX_CLUSTER_SPLIT_LIST or WithSplitList). With one cluster (a
// homogeneous communicator, IsHomogeneous), collectives go straight to its
// library: the vendor's, enqueued on the caller's stream, or the host
// engine's. With several, each call runs a schedule that composes the
// clusters' libraries with host transfers between the clusters, and
// returns when the result is in place.
//
// On a device rank every plugin call that can block is bounded by the
// deadline (FLAGCX_TIMEOUT, WithTimeout): see Watchdog and Guard.
//
// Like an NCCL communicator it is used by one goroutine at a time; Abort
// may be called from another. On a device rank, call it from a goroutine
// locked to its OS thread (runtime.LockOSThread) for steady latency: vendor
// runtimes keep per-thread state, and the first call on a thread new to it
// pays to set that up (about 1.5 ms seen with CUDA on H200s).
//
// What holds for every collective, Send and Recv:
//
//   - Collective calls: every rank makes the same calls in the same order,
//     with the same count, data type, op and root. Where the transfers
//     show that ranks disagree (a count that does not match), the call
//     fails with sdk.ErrInvalidUsage rather than write beyond a buffer.
//   - Counts are in elements of the data type, never in bytes.
//   - Buffers are this rank's kind of memory: HostBuffer on a host rank,
//     DeviceBuffer of the rank's plugin on a device rank. A buffer the call
//     does not use on this rank (a non-root's recv in Reduce, say) may be
//     the zero Buffer.
//   - In place: send and recv overlap only as NCCL defines it: the same
//     memory for AllReduce, Reduce and Broadcast, and the rank's own block
//     of the larger buffer for the others (AllGather: send =
//     recv.Slice(rank*sendcount*size, sendcount*size); ReduceScatter: recv
//     = send.Slice(rank*recvcount*size, recvcount*size); Gather and Scatter
//     alike at the root). AlltoAll and AlltoAllv have no in-place form.
//   - s is the caller's stream on a device rank, and 0 on a host rank
//     (ignored there). On a homogeneous device communicator the call is
//     enqueued on s and returns, as the vendor library's does. Otherwise it
//     returns once the result is in place: it first waits for the work
//     already on s, and the next work on s may use the result.
//   - Errors match sdk.ErrInvalidArgument (a bad count, type, op, root,
//     peer or buffer: nothing was sent), sdk.ErrInvalidUsage (misuse, or a
//     communicator destroyed, aborted or failed earlier), sdk.ErrRemoteError
//     (a peer failed, left or missed the deadline; the error names it) or
//     sdk.ErrSystemError; a plugin call past the deadline is a
//     *TimeoutError. After a remote or system error the communicator may be
//     unusable: destroy it.
type Comm struct {
	rank, n int
	be      Backend
	layout  *sched.Layout
	opts    sched.Options

	world *hostComm    // every rank, over hostnet
	intra *hostComm    // this rank's cluster (== world when homogeneous)
	inter *hostComm    // the cluster leaders (leaders only; heterogeneous only)
	ccl   *loader.Comm // the cluster's vendor communicator (device ranks)
	// host is world on the host placement (every rank on the host, one
	// cluster), where calls go straight to the host engine; else nil.
	host *hostComm

	d2h, h2d loader.Stream // staging copies (device ranks)
	shm      *shmPlane     // the zero-copy plane (every rank on one host), or nil
	// relays is the shared plane's relay proxy, kept for AsyncError, which
	// other goroutines may call while stop drops shm (nil: none).
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
	lookup  func(string) (string, bool) // WithEnv's, for Split
	debug   collDebug
	printed map[string]bool
	// pathLogged: the first collective has said which path runs it
	// (logFirstPath).
	pathLogged bool

	task task // the call in the funnel (enqueue)
	// plans are the plans of the calls made so far (planOf, planKey);
	// calls counts the calls that ran.
	plans map[planKey]*sched.Plan
	calls uint64

	// The open group (GroupStart): its depth, its queued collectives
	// (group.go), its sends and receives with their buffers, their last
	// stream, and its first bad call.
	group      int
	groupTasks []task
	groupOps   []sched.Xfer
	groupBufs  []Buffer
	groupErr   error
	groupStrm  loader.Stream
	fused      []byte // the packed buffer of fused AllReduces (runFused)
	// A Send's or Recv's batch of one outside a group (runP2P), and the
	// host engine's list of a batch (runHostBatch): reused, so that the
	// host latency path allocates nothing.
	oneX    [1]sched.Xfer
	oneU    [1]Buffer
	hostOps []host.P2P

	wd         *Watchdog      // bounds this rank's plugin calls (device ranks)
	dev        *watchedPlugin // the plugin's calls that can block, under wd (device ranks)
	vendorGone atomic.Bool    // ccl was aborted or destroyed (see abortVendor)
	// cclMu keeps ccl alive for vendorAsyncError, which another thread
	// (torch's watchdog) polls: held shared around that poll, and
	// exclusive where vendorGone is set, before ccl is freed.
	cclMu sync.RWMutex

	// os is the one-sided machinery (onesided_state.go), started by the
	// first window registration; osStaging is RegisterStaging's memory
	// until then.
	os        *osState
	osStaging []byte

	ctl      *ctlPlane  // the control plane (revoke.go); nil with one rank
	mu       sync.Mutex // guards failed, closed and revoked against Abort
	failed   error
	revoked  *RevokedError // the verdict this rank adopted (revoke.go)
	closed   bool
	down     atomic.Bool // closed is set: the host placement's calls then ask usable
	stopOnce sync.Once
	// failOnce runs the first half of a failed schedule's abort once
	// (failStart): the first failure is the one peers are told of.
	failOnce sync.Once
}

// initRecord is what every rank tells the others at init: its backend and
// the settings that must agree.
type initRecord struct {
	Member   sched.Member `json:"member"`
	Split    string       `json:"split"`
	HostPath bool         `json:"host_path"`
	Chunk    int          `json:"chunk"`
	Ctl      string       `json:"ctl,omitempty"` // the address of the rank's control plane (revoke.go)
}

const initRecordBytes = 1024

// InitRank joins rank (0 <= rank < nranks) to the communicator of id, on
// the backend of WithBackend (the host by default). It is collective: all
// ranks call it concurrently, each with its own backend, and it returns
// once every rank has joined, the ranks agree on the cluster layout and
// each cluster's library (the vendor's on device clusters) has started;
// or with an error naming the missing ranks when the deadline passes.
// Errors match sdk.ErrInvalidArgument (bad arguments or settings),
// sdk.ErrInvalidUsage (ranks that disagree, a plugin not initialized),
// sdk.ErrRemoteError (a peer failed or never came) or sdk.ErrSystemError.
func InitRank(id UniqueID, nranks, rank int, opts ...Option) (*Comm, error) {
	o := options{lookup: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	rec, err := settings(&o)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	be := o.be
	if err := checkBackend(be); err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	rec.Member = member(rank, be)
	nearNet(be)(&o)
	cfg, err := o.netConfig()
	if err != nil {
		return nil, err
	}
	world, err := initHost(id, nranks, rank, cfg)
	if err != nil {
		return nil, err
	}
	c := &Comm{rank: rank, n: nranks, be: be, world: world, workers: hostWorkers(world), lookup: o.lookup, debug: collDebugFromEnv(o.lookup), printed: map[string]bool{}}
	if nranks > 1 {
		if c.ctl, err = listenCtl(world.cfg, world.secret); err != nil {
			_ = world.Abort()
			return nil, fmt.Errorf("rank %d: %w", rank, err)
		}
		rec.Ctl = c.ctl.l.Addr()
		go c.serveCtl()
	}
	// A value this rank cannot read counts as "off": start turns device
	// reductions off for everyone when any rank has them off.
	c.wantDeviceReduce, _ = env.DeviceReduce.Get(env.Lookup(o.lookup))
	if err := c.agree(rec); err != nil {
		_ = world.Abort()
		c.ctl.close()
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
	if c.layout.IsHomogeneous() && !be.OnDevice() && !c.opts.HostPath && !c.debug.coll {
		// The host placement: its plan would be the host engine's call
		// of the same name, so calls go there straight.
		c.host = world
	}
	return c, nil
}

// netConfig is the transport the options ask for.
func (o *options) netConfig() (hostnet.Config, error) {
	var cfg hostnet.Config
	if o.net != nil {
		cfg = *o.net
	} else {
		c, err := NetConfigFromEnv()
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	if o.timeout > 0 {
		cfg.Timeout = o.timeout
	}
	return cfg, nil
}

// settings reads the split list, host-path switch and chunk size.
func settings(o *options) (initRecord, error) {
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
		return fmt.Errorf("%w: plugin %s is not initialized: call its Init (loader.LoadAll does) before InitRank", sdk.ErrInvalidUsage, p.Name)
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
func (c *Comm) agree(rec initRecord) error {
	mine, err := json.Marshal(rec)
	if err != nil || len(mine) > initRecordBytes {
		return fmt.Errorf("%w: rank %d: init record of %d bytes", sdk.ErrInternalError, c.rank, len(mine))
	}
	buf := make([]byte, initRecordBytes)
	copy(buf, mine)
	all := make([]byte, initRecordBytes*c.n)
	if err := c.world.run(&sdk.Call{Coll: sdk.AllGather, Count: initRecordBytes, DType: sdk.Uint8}, buf, all); err != nil {
		return fmt.Errorf("rank %d: exchanging backends: %w", c.rank, err)
	}
	members := make([]sched.Member, c.n)
	recs := make([]initRecord, c.n)
	for r := range recs {
		recs[r], err = decodeInitRecord(all[r*initRecordBytes:(r+1)*initRecordBytes], r, c.world.peerName(r))
		if err != nil {
			return fmt.Errorf("rank %d: %w", c.rank, err)
		}
		members[r] = recs[r].Member
	}
	if c.ctl != nil {
		c.ctl.addrs = make([]string, c.n)
		for r := range recs {
			c.ctl.addrs[r] = recs[r].Ctl
		}
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
func (c *Comm) start() error {
	// Device setup allocates, registers and frees on this rank's device
	// (a free synchronises the thread's current device: execute says why).
	defer c.bindDevice()()
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
		sub.who = fmt.Sprintf("rank %d", c.rank)
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
			inter.who = fmt.Sprintf("rank %d", c.rank)
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
	// Each rank's links (their transports, for the link table) travel in
	// the same exchange.
	const failed, noShm, noDeviceReduce, noStagedFold, noRelay = 1, 2, 4, 8, 16
	rec := 1 + c.n
	flag := append([]byte{0}, c.world.linkCodes()...)
	if startErr != nil {
		flag[0] |= failed
	}
	if !shmOK {
		flag[0] |= noShm
	}
	devFolds := startErr == nil && c.reducesOnDevice()
	if !shmOK || !devFolds {
		flag[0] |= noDeviceReduce
	}
	if !devFolds {
		flag[0] |= noStagedFold
	}
	if !shmOK || (c.be.OnDevice() && !c.shm.relay.on) {
		flag[0] |= noRelay
	}
	flags := make([]byte, c.n*rec)
	if err := c.world.run(&sdk.Call{Coll: sdk.AllGather, Count: rec, DType: sdk.Uint8}, flag, flags); err != nil {
		return errors.Join(startErr, fmt.Errorf("rank %d: agreeing on the start: %w", c.rank, err))
	}
	if startErr != nil {
		return startErr
	}
	c.world.links = flags
	var bad []int
	deviceReduce, relay := shmOK, shmOK
	for r := 0; r < c.n; r++ {
		f := flags[r*rec]
		if f&failed != 0 {
			bad = append(bad, r)
		}
		shmOK = shmOK && f&noShm == 0
		deviceReduce = deviceReduce && f&noDeviceReduce == 0
		relay = relay && f&noRelay == 0
		devFolds = devFolds && f&noStagedFold == 0
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: rank %d: ranks %s could not start their cluster's library (see their errors)", sdk.ErrRemoteError, c.rank, sched.FormatRanks(bad))
	}
	c.opts.StagedDeviceReduce = devFolds
	if c.leadersTalkTCP() {
		c.opts.MinChunk = sched.TCPMinChunk
	}
	if shmOK {
		c.opts.ShmWindow = c.shm.windowMin()
		c.opts.ShmDeviceReduce = deviceReduce
		c.opts.ShmRelay = relay
	} else if err := c.releaseShm(); err != nil {
		return fmt.Errorf("rank %d: releasing the shared windows: %w", c.rank, err)
	}
	return nil
}

func (c *Comm) startDevice(cl *sched.Cluster) error {
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

// Rank is this rank, 0 <= Rank() < Count().
func (c *Comm) Rank() int { return c.rank }

// Count is the number of ranks.
func (c *Comm) Count() int { return c.n }

// Backend is this rank's backend (placement).
func (c *Comm) Backend() Backend { return c.be }

// IsHomogeneous reports whether all ranks form one cluster. A homogeneous
// device communicator enqueues each collective on the caller's stream and
// returns, as the vendor library does; every other communicator returns
// once the result is in place.
func (c *Comm) IsHomogeneous() bool { return c.layout.IsHomogeneous() }

// Split makes a communicator of the ranks of c that pass the same color
// (>= 0), numbered by key, then by their rank in c. A rank passing
// SplitNoColor takes part but gets nil. It is collective: every rank of c
// calls it. Each rank keeps its backend and c's network settings,
// host-path switch and chunk size; the new communicator's clusters are
// its ranks' vendors, not split further.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.usable("Split"); err != nil {
		return nil, err
	}
	sp, err := c.world.splitID(color, key)
	if err != nil || sp == nil {
		return nil, err
	}
	cfg := c.world.cfg
	return InitRank(sp.id, sp.nranks, sp.rank, WithBackend(c.be), WithNetConfig(cfg), WithEnv(c.lookup),
		WithSplitList(nil), WithHostPath(c.opts.HostPath), WithChunk(c.opts.Chunk))
}

// CanMemAlloc reports whether MemAlloc works on this communicator (every
// rank on one host, with shared memory).
func (c *Comm) CanMemAlloc() bool { return c.world.CanMemAlloc() }

// Destroy releases the communicator once this rank's operations have
// completed (on a device rank: the work it enqueued on the caller's
// streams too). Every rank calls it; later calls on the communicator fail
// with sdk.ErrInvalidUsage, and a second Destroy does nothing.
func (c *Comm) Destroy() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.down.Store(true)
	c.mu.Unlock()
	return c.stop(false)
}

// Abort tears the communicator down at once, also from another goroutine
// than the one using it: operations in flight on this rank fail, peers
// waiting on this rank see an error naming it, and later calls fail with
// sdk.ErrInvalidUsage.
func (c *Comm) Abort() error {
	c.mu.Lock()
	c.closed = true
	c.down.Store(true)
	c.mu.Unlock()
	return c.stop(true)
}

// stop releases everything once (abort: without waiting for peers).
func (c *Comm) stop(abort bool) error {
	var errs []error
	c.stopOnce.Do(func() {
		defer c.wd.close()
		defer c.ctl.close()
		// The one-sided goroutines stop first: they may use the plugin
		// and the windows until then.
		if err := c.stopOneSided(abort); err != nil && !abort {
			errs = append(errs, err)
		}
		if abort {
			if err := c.abortAll(); err != nil && !errors.Is(err, sdk.ErrNotSupported) {
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
		if !stuck {
			// Unregistering and freeing synchronise the thread's current
			// device: this rank's, not another rank's of this process.
			defer c.bindDevice()()
		}
		// The windows go with the host communicators: unregister first.
		if stuck {
			c.shm.abandonRelays()
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
			for _, e := range append(c.events, c.pieceEvents...) {
				errs = append(errs, p.EventDestroy(e))
			}
			c.events, c.pieceEvents = nil, nil
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
func (c *Comm) hostComms() []*hostComm {
	out := []*hostComm{c.world}
	if c.intra != nil && c.intra != c.world {
		out = append(out, c.intra)
	}
	if c.inter != nil {
		out = append(out, c.inter)
	}
	return out
}

// abortAll aborts this rank's part of the communicator, host and vendor,
// in the one order in which no wait blocks the next. Uses of the shared
// windows hold them across device waits (runShm, the relay proxy), and a
// device stuck in a vendor collective ends only at the vendor's abort; so:
//
//  1. shutHost: every wait on the host network fails, here and on the
//     peers, and a relay's wait for the device answers abort
//     (relayProxy.closing). It waits for nothing a device holds.
//  2. abortVendor: kernels stuck in a vendor collective (a peer died or
//     stopped) end, as ncclCommAbort ends NCCL's, and the streams drain;
//     a use of the windows waiting on them then ends.
//  3. abortHost: once those uses ended, the windows unmap.
//
// Aborting the vendor last, as this did before, left step 3 waiting on a
// device that only step 2 frees (issue 48). It returns the vendor's error.
func (c *Comm) abortAll() error {
	c.shutHost()
	err := c.abortVendor()
	c.abortHost()
	return err
}

// shutHost fails every wait on this rank's host communicators at once
// (hostComm.shut), also the waits of peers on this rank; it never blocks.
func (c *Comm) shutHost() {
	for _, cm := range c.hostComms() {
		if cm != nil {
			cm.shut()
		}
	}
}

// abortHost closes the host communicators, after shutHost: it waits for
// this rank's uses of the shared windows to end before they unmap.
func (c *Comm) abortHost() {
	for _, cm := range c.hostComms() {
		if cm != nil {
			_ = cm.Abort()
		}
	}
}

// usable refuses calls on a communicator that failed or was closed.
func (c *Comm) usable(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.revoked != nil && !c.closed:
		e := *c.revoked
		e.Rank, e.Op = c.rank, name
		return &e
	case c.failed != nil:
		// %v: this call is a usage error; the earlier failure (a timeout,
		// a remote error) was that call's and must not match here.
		return fmt.Errorf("%w: %s on rank %d: the communicator failed in an earlier call (%v): destroy it and make a new one", sdk.ErrInvalidUsage, name, c.rank, c.failed)
	case c.closed:
		return fmt.Errorf("%w: %s on rank %d: the communicator was destroyed or aborted", sdk.ErrInvalidUsage, name, c.rank)
	}
	return nil
}

// hostWorkers is how many goroutines this rank's host folds use: the
// cores its host leaves each of its ranks (all of them where its ranks
// share no host's windows), bounded (reduce.Workers).
func hostWorkers(world *hostComm) int {
	if node := world.mesh.Node; node != nil {
		return reduce.Workers(node.Cores())
	}
	return reduce.Workers(runtime.GOMAXPROCS(0))
}
