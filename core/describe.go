package core

import (
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// Layout is what a communicator's ranks agreed on at init: its clusters
// and how its collectives run. It is the same on every rank: a benchmark
// or a log prints it to say what was measured.
type Layout struct {
	// Clusters in cluster order (by their first rank).
	Clusters []Cluster
	// HostPath: every collective runs on the host (WithHostPath,
	// FLAGCX_USE_HOST_COMM).
	HostPath bool
	// Chunk is the pipeline chunk of heterogeneous schedules in bytes
	// (WithChunk, FLAGCX_NET_CHUNK_SIZE).
	Chunk int
	// ShmWindow is the size in bytes of each rank's shared window when
	// heterogeneous collectives run zero-copy in the host's shared memory
	// (every rank on one host); 0 when they do not.
	ShmWindow int
	// DeviceReduce: those zero-copy allreduces beyond the one-step size
	// reduce on the devices rather than on the host (and reduces and
	// reducescatters of up to sched.MaxDeviceReduceClusters ranks).
	DeviceReduce bool
	// Registered: on those windows, an allreduce beyond the one-step size
	// whose host ranks' buffers are MemAlloc's is read, folded and
	// written by the devices (device clusters beside host ranks).
	Registered bool
	// Relay: on those windows, a device rank's small allreduces and
	// reduces, and the broadcasts it roots, take one launch each (the
	// plugins' relayReduce).
	Relay bool
	// StagedDeviceReduce: on the staged schedules (no shared windows),
	// device leaders fold the reducescatters' and reduces' exchanged
	// partials on their devices (up to three clusters; two leaders'
	// allreduces too, beyond sched.StagedFusedMax a chunk).
	StagedDeviceReduce bool
	text               string
}

// Cluster is one cluster of a Layout: the ranks of one vendor (or the host
// ranks), whose collectives inside the cluster run on that vendor's
// library (or the host engine).
type Cluster struct {
	Index  int
	Vendor string // the plugin's vendor, or "host"
	Plugin string // the plugin's name; "" on the host
	// Emulated: the plugin runs on an emulated vendor runtime.
	Emulated bool
	Ranks    []int // in increasing order, not necessarily contiguous
	Leader   int   // the rank that carries the cluster's data between clusters
}

// OnDevice reports whether the cluster runs on a plugin's devices.
func (c Cluster) OnDevice() bool { return c.Plugin != "" }

// IsHomogeneous reports whether the layout has one cluster
// (Comm.IsHomogeneous).
func (l Layout) IsHomogeneous() bool { return len(l.Clusters) == 1 }

// String is the layout in one line, as FLAGCX_DEBUG=INFO logs it at init
// ("4 ranks, heterogeneous, 2 cluster(s): cluster 0: ...").
func (l Layout) String() string { return l.text }

// Layout is the communicator's layout.
func (c *Comm) Layout() Layout {
	l := c.layout
	out := Layout{HostPath: c.opts.HostPath, Chunk: c.opts.Chunk, ShmWindow: c.opts.ShmWindow, text: l.String()}
	out.DeviceReduce = out.ShmWindow > 0 && sched.DeviceReduces(l, c.opts)
	out.Relay = out.ShmWindow > 0 && c.opts.ShmRelay
	out.Registered = out.ShmWindow > 0 && sched.RegisteredFolds(l, c.opts, sdk.AllReduce)
	out.StagedDeviceReduce = out.ShmWindow == 0 && !l.IsHomogeneous() && !c.opts.HostPath && c.opts.StagedDeviceReduce && len(l.Clusters) <= 3
	for _, cl := range l.Clusters {
		out.Clusters = append(out.Clusters, Cluster{Index: cl.Index, Vendor: cl.Vendor, Plugin: cl.Plugin,
			Emulated: l.Members[cl.Leader].Emulated, Ranks: append([]int(nil), cl.Ranks...), Leader: cl.Leader})
	}
	return out
}

// Plan is how a communicator runs one call on one rank.
type Plan struct {
	// Path is the kind of schedule: "vendor" (the vendor library's own
	// call), "host-comm" (the host engine's), "c2c" (staged between
	// clusters), "c2c-shm" (zero-copy in shared memory), "p2p" (direct
	// transfers) or "host" (the host path).
	Path string
	// DeviceReduce: a c2c-shm plan that reduces on the devices.
	DeviceReduce bool
	// Text is the plan's steps as FLAGCX_DEBUG=COLL logs them (long
	// pipelines shortened), ending in a newline.
	Text string
}

// Plan is rank's plan for call on this communicator (any rank's: every
// rank knows the layout): what a collective of these arguments would do,
// for `flagcx bench --print-plan` and for tests. It runs nothing. Errors
// match sdk.ErrInvalidArgument for a call no rank could make.
func (c *Comm) Plan(rank int, call sdk.Call) (Plan, error) {
	if rank < 0 || rank >= c.n {
		return Plan{}, fmt.Errorf("%w: Plan of rank %d on a communicator of %d ranks: pass a rank in 0..%d", sdk.ErrInvalidArgument, rank, c.n, c.n-1)
	}
	p, err := sched.Build(c.layout, rank, sched.CallOf(call), c.opts)
	if err != nil {
		return Plan{}, err
	}
	var b strings.Builder
	p.Format(&b, 3)
	return Plan{Path: p.Path.String(), DeviceReduce: p.Shm != nil && p.Shm.DeviceReduce, Text: b.String()}, nil
}

// LinkTable is which link (shared memory, TCP, RDMA) each pair of ranks
// uses and why, as lines for a report's header ("Links (pairs of ranks):",
// then "  shm (same host): 0-1 2-3" and so on).
func (c *Comm) LinkTable() []string { return c.world.LinkTable() }

// HostAllGather gathers len(send) bytes of host memory from every rank
// into recv (Count() blocks of len(send) bytes, in rank order), over the
// host network between the ranks, on host and device ranks alike. It is
// for what ranks tell each other beside their collectives (timings,
// per-rank records, a check's digests): a device rank's AllGather takes
// device memory, and this call touches no device and no stream. It is
// collective: every rank calls it with the same length, outside a group.
// With an empty send it is a barrier of the host network.
func (c *Comm) HostAllGather(send, recv []byte) error {
	c.task = task{name: "HostAllGather", kind: kindHostNet, send: HostBuffer(send), recv: HostBuffer(recv)}
	return c.enqueue()
}
