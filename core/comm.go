package core

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/flagcx/flagcx-go/core/internal/executor"
	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/core/internal/watchdog"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

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

	world *hostcomm.Comm // every rank, over hostnet
	intra *hostcomm.Comm // this rank's cluster (== world when homogeneous)
	inter *hostcomm.Comm // the cluster leaders (leaders only; heterogeneous only)
	ccl   *loader.Comm   // the cluster's vendor communicator (device ranks)
	// host is world on the host placement (every rank on the host, one
	// cluster), where calls go straight to the host engine; else nil.
	host *hostcomm.Comm

	// exec runs the plans (core/internal/executor; made by start, nil
	// before), on the call's buffers in xbufs (execBufs).
	exec  *executor.Executor
	xbufs executor.Bufs

	lookup  func(string) (string, bool) // WithEnv's, for Split
	debug   collDebug
	printed map[string]bool
	// pathLogged: the first collective has said which path runs it
	// (logFirstPath).
	pathLogged bool

	task task // the call in the funnel (enqueue)
	// The runner that ran the last call, for its record, and the records
	// and metrics of FLAGCX_INSPECT and FLAGCX_METRICS (inspect.go; nil:
	// off).
	ranBy *runner
	insp  *inspection
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

	// os is the one-sided machinery (core/internal/onesided), started by the
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
	sp, err := c.world.SplitID(color, key)
	if err != nil || sp == nil {
		return nil, err
	}
	cfg := c.world.Config()
	return InitRank(UniqueID(sp.ID), sp.NRanks, sp.Rank, WithBackend(c.be), WithNetConfig(cfg), WithEnv(c.lookup),
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
		defer watchdog.Close(c.wd)
		defer c.ctl.close()
		if err := c.closeInspect(); err != nil && !abort {
			errs = append(errs, err)
		}
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
			c.exec.AbandonShm()
		} else if err := c.exec.ReleaseShm(); err != nil && !abort {
			errs = append(errs, err)
		}
		for _, cm := range c.hostComms() {
			if abort {
				errs = append(errs, cm.Abort())
			} else {
				errs = append(errs, cm.Destroy())
			}
		}
		if !stuck {
			errs = append(errs, c.exec.Free()) // streams, events, staging, scratch
		}
	})
	return errors.Join(errs...)
}

// hostComms are the distinct host communicators this rank holds.
func (c *Comm) hostComms() []*hostcomm.Comm {
	out := []*hostcomm.Comm{c.world}
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
// windows hold them across device waits (the executor's RunShm and relay
// proxy, core/internal/executor), and a device stuck in a vendor
// collective ends only at the vendor's abort; so:
//
//  1. shutHost: every wait on the host network fails, here and on the
//     peers, and a relay's wait for the device answers abort
//     (core/internal/executor/relay_proxy.go's closing). It waits for
//     nothing a device holds.
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
			cm.Shut()
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
