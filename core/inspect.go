package core

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"time"

	"github.com/flagcx/flagcx-go/core/internal/inspect"
	"github.com/flagcx/flagcx-go/core/internal/metrics"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk"
)

// Records of every call (FLAGCX_INSPECT, core/internal/inspect) and the
// process's metrics (FLAGCX_METRICS, core/internal/metrics): the funnel
// (enqueue.go) times each call it runs and hands the record to both; off,
// a call pays one branch.

// inspection is a communicator's records (w, FLAGCX_INSPECT) and metrics
// (m, FLAGCX_METRICS), either of them nil, and the clock that times the
// calls (one monotonic read a timestamp, turned into wall time).
type inspection struct {
	w      *inspect.Writer
	m      *metrics.Sink
	commID string
	base   time.Time
	baseNS int64
	seq    uint64
	cur    inspect.Call // the record of the call running now
}

// startInspect opens this rank's records when FLAGCX_INSPECT names a
// directory, and joins the process's metrics when FLAGCX_METRICS says
// where to serve them.
func (c *Comm) startInspect(id UniqueID, lookup func(string) (string, bool)) error {
	get := env.Lookup(lookup)
	dir, _ := env.Inspect.Get(get)
	at, _ := env.Metrics.Get(get)
	if dir == "" && at == "" {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte(id.String()))
	commID := h.Sum64() >> 8
	now := time.Now()
	in := &inspection{commID: "0x" + strconv.FormatUint(commID, 16), base: now, baseNS: now.UnixNano()}
	if at != "" {
		m, err := metrics.Shared(at)
		if err != nil {
			return fmt.Errorf("%w: %s=%s: %w: name a free host:port or a writable path ending in .prom, or unset it", sdk.ErrInvalidArgument, env.Metrics.Name, at, err)
		}
		in.m = m
	}
	if dir != "" {
		max, err := env.InspectMax.Get(get)
		if err != nil {
			return fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		host, _ := os.Hostname()
		hdr := inspect.Header{CommID: commID, Rank: c.rank, NRanks: c.n, NNodes: c.nodes(), Host: host, Pid: os.Getpid()}
		if in.w, err = inspect.Open(dir, int64(max), hdr); err != nil {
			return fmt.Errorf("%w: %s=%s: %w: name a directory this process can write, or unset it", sdk.ErrInvalidArgument, env.Inspect.Name, dir, err)
		}
	}
	c.insp = in
	return nil
}

// nodes is how many hosts the ranks run on.
func (c *Comm) nodes() int {
	hosts := map[string]bool{}
	for _, p := range c.world.Peers() {
		hosts[p.Host] = true
	}
	return len(hosts)
}

// now is the wall clock in ns, from one monotonic read.
func (in *inspection) now() int64 { return in.baseNS + int64(time.Since(in.base)) }

// startRecord starts the record of the call in c.task: what it is
// before it runs (a Send's task becomes its batch). The record is the
// communicator's own, reused: a call allocates nothing for it.
func (c *Comm) startRecord() *inspect.Call {
	t := &c.task
	rec := &c.insp.cur
	*rec = inspect.Call{Coll: t.name, Count: t.args.Count, Root: -1, Peer: -1}
	switch t.kind {
	case kindP2P:
		rec.DType, rec.Peer = t.args.DType.String(), t.peer
		rec.Bytes, rec.BusFactor = int64(t.args.Count)*int64(t.args.DType.Size()), 1
	case kindHostNet:
		rec.Bytes = int64(t.send.n)
	default:
		a := &t.args
		rec.Coll, rec.DType, rec.Bytes, rec.BusFactor = a.Coll.Title(), a.DType.String(), a.MsgBytes(c.n), a.Coll.BusFactor(c.n)
		if a.Coll.Reduces() {
			rec.Op = a.Op.String()
		}
		if a.Coll.Rooted() {
			rec.Root = a.Root
		}
	}
	c.ranBy = nil
	rec.Start = c.insp.now()
	return rec
}

// finishRecord finishes rec with the runner and plan that ran the call
// (c.task, before enqueue lets go of it) and hands it on.
func (c *Comm) finishRecord(rec *inspect.Call, err error) {
	in := c.insp
	rec.End = in.now()
	in.seq++
	rec.Seq, rec.Failed = in.seq, err != nil
	if c.ranBy != nil {
		rec.Runner, rec.Enqueued = c.ranBy.name, c.ranBy.enqueues
	}
	if p := c.task.plan; p != nil {
		rec.Path = p.Path.String()
	}
	if in.w != nil {
		in.w.Record(rec)
	}
	if in.m != nil {
		path := rec.Path
		if path == "" {
			path = rec.Runner
		}
		in.m.Observe(&metrics.Call{Comm: in.commID, Rank: c.rank, Coll: rec.Coll, Path: path, Bytes: rec.Bytes,
			Seconds: float64(rec.End-rec.Start) / 1e9, Failed: rec.Failed})
	}
}

// groupInspected is GroupEnd with the group's record at the outermost
// one: its tasks, its bytes (the collectives' and the sends'), its time.
func (c *Comm) groupInspected() error {
	if c.group != 1 {
		return c.settle("GroupEnd", c.groupEnd())
	}
	rec := inspect.Call{Coll: "Group", Root: -1, Peer: -1, BusFactor: 1, Count: len(c.groupTasks) + len(c.groupOps)}
	for i := range c.groupTasks {
		rec.Bytes += c.groupTasks[i].args.MsgBytes(c.n)
	}
	for _, x := range c.groupOps {
		if !x.Recv {
			rec.Bytes += int64(x.Bytes)
		}
	}
	c.ranBy = nil
	rec.Start = c.insp.now()
	err := c.settle("GroupEnd", c.groupEnd())
	c.finishRecord(&rec, err)
	return err
}

// closeInspect writes what is left of the records, and the metrics'
// textfile (the process's sink stays up for its other communicators).
func (c *Comm) closeInspect() error {
	in := c.insp
	if in == nil {
		return nil
	}
	var errs []error
	if in.w != nil {
		errs = append(errs, in.w.Close())
	}
	if in.m != nil {
		errs = append(errs, in.m.Flush())
	}
	return errors.Join(errs...)
}
