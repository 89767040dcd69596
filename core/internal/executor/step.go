package executor

import (
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// step runs step i.
func (e *Executor) step(p *sched.Plan, i int, b *Bufs, s loader.Stream) error {
	if stepRan != nil {
		stepRan(p, e.owner.Calls(), i)
	}
	st := &p.Steps[i]
	defer region(st.Kind.String())()
	strm := e.laneStream(st.Lane, s)
	switch st.Kind {
	case sched.KindCopy:
		return e.copies(st, b, strm)
	case sched.KindScale, sched.KindReduce:
		dst, err := e.resolve(b, st.Dst)
		if err != nil {
			return err
		}
		if dst.dev {
			return fmt.Errorf("%w: host reduction on device memory", sdk.ErrInternalError)
		}
		if st.Kind == sched.KindScale {
			reduce.ScaleParallel(dst.host, st.DType, st.N, e.workers)
			return nil
		}
		src, err := e.resolve(b, st.Src)
		if err != nil {
			return err
		}
		if src.dev || len(src.host) != len(dst.host) {
			return fmt.Errorf("%w: host reduction of %s into %s", sdk.ErrInternalError, st.Src, st.Dst)
		}
		reduce.ReduceParallel(dst.host, src.host, st.DType, st.Op, e.workers)
		return nil
	case sched.KindIntra:
		if e.plugin != nil {
			return e.vendorStep(st, b, s)
		}
		cl := e.layout.ClusterOf(e.rank)
		return e.hostStep(e.intra, fmt.Sprintf("cluster %d's host communicator (its ranks 0.. are ranks %s)", cl.Index, sched.FormatRanks(cl.Ranks)), st, b)
	case sched.KindInter:
		if e.inter == nil {
			return fmt.Errorf("%w: inter-cluster step on rank %d, which leads no cluster", sdk.ErrInternalError, e.rank)
		}
		return e.hostStep(e.inter, e.interWhat(), st, b)
	case sched.KindWorld:
		return e.hostStep(e.world, "", st, b)
	case sched.KindDevFold:
		if e.dev == nil {
			return fmt.Errorf("%w: device fold on host rank %d", sdk.ErrInternalError, e.rank)
		}
		return e.devFold(st, func(r sched.Ref) (mem, error) { return e.resolve(b, r) }, strm)
	}
	return fmt.Errorf("%w: step kind %v", sdk.ErrInternalError, st.Kind)
}

// copies enqueues a copy step's device copies on strm (the chain waits
// for them); host-to-host pairs are copied at once, after the work
// already on strm (a device rank's lanes order everything on its stream).
func (e *Executor) copies(st *sched.Step, b *Bufs, strm loader.Stream) error {
	synced := false
	for _, cp := range st.Copies {
		src, err := e.resolve(b, cp.Src)
		if err != nil {
			return err
		}
		dst, err := e.resolve(b, cp.Dst)
		if err != nil {
			return err
		}
		n := cp.Src.Len
		if n == 0 || src.same(dst) {
			continue
		}
		pl := e.dev
		switch {
		case src.dev && dst.dev:
			err = pl.Memcpy(dst.ptr, src.ptr, n, loader.DeviceToDevice, strm)
		case src.dev:
			err = pl.Memcpy(hostAddr(dst.host), src.ptr, n, loader.DeviceToHost, strm)
		case dst.dev:
			err = pl.Memcpy(dst.ptr, hostAddr(src.host), n, loader.HostToDevice, strm)
		default:
			if pl != nil && !synced {
				if err := pl.StreamSynchronize(strm); err != nil {
					return err
				}
				synced = true
			}
			copy(dst.host, src.host)
			continue
		}
		if err != nil {
			return fmt.Errorf("copying %s to %s: %w", cp.Src, cp.Dst, err)
		}
	}
	return nil
}

// vendorStep enqueues an intra-cluster step on the vendor library, on the
// caller's stream (the chain waits for it).
func (e *Executor) vendorStep(st *sched.Step, b *Bufs, s loader.Stream) error {
	if e.vendor == nil {
		return fmt.Errorf("%w: vendor step on rank %d without a vendor communicator", sdk.ErrInternalError, e.rank)
	}
	cc := e.vendor
	src, err := e.resolve(b, st.Src)
	if err != nil {
		return err
	}
	dst, err := e.resolve(b, st.Dst)
	if err != nil {
		return err
	}
	pl := e.dev
	switch st.Coll {
	case sdk.SendRecv:
		// A step's transfers, each to its own peer and buffer, in one
		// group of the library (groups are the plugin's, not the
		// communicator's).
		if err = e.plugin.GroupStart(); err != nil {
			break
		}
		for _, x := range st.Xfers {
			m, rerr := e.resolve(b, x.Ref)
			if rerr != nil {
				err = rerr
				break
			}
			if x.Recv {
				err = cc.Recv(m.ptr, x.Ref.Len, sdk.Uint8, x.Peer, s)
			} else {
				err = cc.Send(m.ptr, x.Ref.Len, sdk.Uint8, x.Peer, s)
			}
			if err != nil {
				break
			}
		}
		if gerr := pl.GroupEnd(); err == nil {
			err = gerr
		}
	case sdk.Barrier:
		// No vendor library has one: the schedules put barriers on the host.
		err = fmt.Errorf("%w: vendor step %s", sdk.ErrInternalError, st.Coll.Title())
	default:
		err = sdk.Dispatch(cc, st.Args(), src.ptr, dst.ptr, s)
	}
	if err != nil {
		return fmt.Errorf("%s's %s in cluster %d: %w", e.plugin.Name, st.Coll.Title(), e.layout.ClusterOf(e.rank).Index, err)
	}
	return nil
}

// hostXfers runs a SendRecv step's transfers, each to its own peer and
// buffer, as bytes, in one group of cm.
func (e *Executor) hostXfers(cm *hostcomm.Comm, st *sched.Step, b *Bufs) error {
	ops := make([]host.P2P, len(st.Xfers))
	for i, x := range st.Xfers {
		m, err := e.resolve(b, x.Ref)
		if err == nil && m.dev {
			err = fmt.Errorf("%w: host transfer of device memory %s", sdk.ErrInternalError, x.Ref)
		}
		if err != nil {
			return err
		}
		ops[i] = host.P2P{Peer: x.Peer, Buf: m.host, Recv: x.Recv}
	}
	return cm.SendRecv("GroupEnd", ops)
}

// hostStep runs a step's collective on a host communicator.
func (e *Executor) hostStep(cm *hostcomm.Comm, what string, st *sched.Step, b *Bufs) error {
	src, err := e.resolve(b, st.Src)
	if err != nil {
		return err
	}
	dst, err := e.resolve(b, st.Dst)
	if err != nil {
		return err
	}
	if src.dev || dst.dev {
		return fmt.Errorf("%w: host step %s on device memory", sdk.ErrInternalError, st.Coll.Title())
	}
	if st.Coll == sdk.SendRecv {
		err = e.hostXfers(cm, st, b)
	} else {
		args := st.Args()
		err = cm.Run(&args, src.host, dst.host)
	}
	if err != nil && what != "" && !e.layout.IsHomogeneous() {
		return fmt.Errorf("in %s: %w", what, err)
	}
	return err
}

// interWhat names the cluster leaders' communicator in errors.
func (e *Executor) interWhat() string {
	return "the cluster leaders' communicator (its rank c is cluster c's leader: ranks " + e.leaders() + ")"
}

// leaders lists the cluster leaders in inter-rank order.
func (e *Executor) leaders() string {
	ls := make([]int, len(e.layout.Clusters))
	for i, cl := range e.layout.Clusters {
		ls[i] = cl.Leader
	}
	return sched.FormatRanks(ls)
}
