package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/core/internal/watchdog"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

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
	world, err := hostcomm.Init(hostcomm.ID(id), nranks, rank, cfg)
	if err != nil {
		return nil, err
	}
	c := &Comm{rank: rank, n: nranks, be: be, world: world, lookup: o.lookup, debug: collDebugFromEnv(o.lookup), printed: map[string]bool{}}
	if nranks > 1 {
		if c.ctl, err = c.listenCtl(); err != nil {
			_ = world.Abort()
			return nil, fmt.Errorf("rank %d: %w", rank, err)
		}
		rec.Ctl = c.ctl.Addr()
		go c.serveCtl()
	}
	if err := c.agree(rec); err != nil {
		_ = world.Abort()
		c.ctl.close()
		return nil, err
	}
	if be.OnDevice() {
		c.wd = watchdog.New(rank, be.Plugin.Name, world.Config().Timeout, c.onTimeout,
			func() string { return hostcomm.StalledPeers(world.Peers(), rank) })
		c.dev = &watchedPlugin{be.Plugin, c.wd}
	}
	if err := c.start(); err != nil {
		c.stop(true)
		return nil, err
	}
	if c.debug.init {
		c.logf("INIT", "%s", c.layout)
	}
	if err := c.startInspect(id, o.lookup); err != nil {
		c.stop(true)
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	if c.layout.IsHomogeneous() && !be.OnDevice() && !c.opts.HostPath && !c.debug.coll {
		// The host placement: its plan would be the host engine's call
		// of the same name, so calls go there straight.
		c.host = world
	}
	return c, nil
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
	if err := c.world.Run(&sdk.Call{Coll: sdk.AllGather, Count: initRecordBytes, DType: sdk.Uint8}, buf, all); err != nil {
		return fmt.Errorf("rank %d: exchanging backends: %w", c.rank, err)
	}
	members := make([]sched.Member, c.n)
	recs := make([]initRecord, c.n)
	for r := range recs {
		recs[r], err = decodeInitRecord(all[r*initRecordBytes:(r+1)*initRecordBytes], r, c.world.PeerName(r))
		if err != nil {
			return fmt.Errorf("rank %d: %w", c.rank, err)
		}
		members[r] = recs[r].Member
	}
	if c.ctl != nil {
		addrs := make([]string, c.n)
		for r := range recs {
			addrs[r] = recs[r].Ctl
		}
		c.ctl.SetAddrs(addrs)
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
	// (a free synchronises the thread's current device: executor.Execute
	// says why).
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
		sub.SetInner(fmt.Sprintf("rank %d", c.rank))
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
			inter.SetInner(fmt.Sprintf("rank %d", c.rank))
		}
	}
	if c.be.OnDevice() {
		startErr = c.startDevice(cl)
	}
	c.exec = c.newExecutor()
	if startErr == nil {
		startErr = c.exec.Start() // a device rank's copy streams
	}
	shmOK := startErr == nil && c.exec.SetupShm()
	// Share the outcome: a rank whose vendor library failed must not
	// leave the others waiting in their first collective; the zero-copy
	// plane runs only if every rank can take part, and reduces on the
	// devices only if every rank wants it and every device rank can.
	// Each rank's links (their transports, for the link table) travel in
	// the same exchange.
	const failed, noShm, noDeviceReduce, noStagedFold, noRelay = 1, 2, 4, 8, 16
	rec := 1 + c.n
	flag := append([]byte{0}, c.world.LinkCodes()...)
	if startErr != nil {
		flag[0] |= failed
	}
	if !shmOK {
		flag[0] |= noShm
	}
	devFolds := startErr == nil && c.exec.ReducesOnDevice()
	if !shmOK || !devFolds {
		flag[0] |= noDeviceReduce
	}
	if !devFolds {
		flag[0] |= noStagedFold
	}
	if !shmOK || (c.be.OnDevice() && !c.exec.RelaysOn()) {
		flag[0] |= noRelay
	}
	flags := make([]byte, c.n*rec)
	if err := c.world.Run(&sdk.Call{Coll: sdk.AllGather, Count: rec, DType: sdk.Uint8}, flag, flags); err != nil {
		return errors.Join(startErr, fmt.Errorf("rank %d: agreeing on the start: %w", c.rank, err))
	}
	if startErr != nil {
		return startErr
	}
	c.world.SetLinks(flags)
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
		c.opts.ShmWindow = c.exec.ShmWindow()
		c.opts.ShmDeviceReduce = deviceReduce
		c.opts.ShmRelay = relay
	} else if err := c.exec.ReleaseShm(); err != nil {
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
	return nil
}
