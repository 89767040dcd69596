package core

import (
	"github.com/flagcx/flagcx-go/internal/coreview"
	"github.com/flagcx/flagcx-go/sdk"
)

// hostView is a host communicator as internal/coreview shows it to the
// benchmark and the conformance tools, every call through hostComm.run.
// It goes with coreview (issue 22: those tools are to drive core.Comm).
type hostView struct{ c *hostComm }

var _ coreview.HostComm = hostView{}

func (h hostView) run(call sdk.Call, send, recv []byte) error { return h.c.run(&call, send, recv) }

func (h hostView) AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	return h.run(sdk.Call{Coll: sdk.AllReduce, Count: count, DType: dt, Op: op}, send, recv)
}

func (h hostView) Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	return h.run(sdk.Call{Coll: sdk.Reduce, Count: count, DType: dt, Op: op, Root: root}, send, recv)
}

func (h hostView) Broadcast(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return h.run(sdk.Call{Coll: sdk.Broadcast, Count: count, DType: dt, Root: root}, send, recv)
}

func (h hostView) AllGather(send, recv []byte, sendcount int, dt sdk.DataType) error {
	return h.run(sdk.Call{Coll: sdk.AllGather, Count: sendcount, DType: dt}, send, recv)
}

func (h hostView) ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error {
	return h.run(sdk.Call{Coll: sdk.ReduceScatter, Count: recvcount, DType: dt, Op: op}, send, recv)
}

func (h hostView) AlltoAll(send, recv []byte, count int, dt sdk.DataType) error {
	return h.run(sdk.Call{Coll: sdk.AlltoAll, Count: count, DType: dt}, send, recv)
}

func (h hostView) AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType) error {
	return h.run(sdk.Call{Coll: sdk.AlltoAllv, DType: dt, SendCounts: sendcounts, SDispls: sdispls, RecvCounts: recvcounts, RDispls: rdispls}, send, recv)
}

func (h hostView) Gather(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return h.run(sdk.Call{Coll: sdk.Gather, Count: count, DType: dt, Root: root}, send, recv)
}

func (h hostView) Scatter(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return h.run(sdk.Call{Coll: sdk.Scatter, Count: count, DType: dt, Root: root}, send, recv)
}

func (h hostView) Barrier() error { return h.run(sdk.Call{Coll: sdk.Barrier}, nil, nil) }

func (h hostView) Send(buf []byte, count int, dt sdk.DataType, peer int) error {
	return h.c.p2p("Send", buf, count, dt, peer, false)
}

func (h hostView) Recv(buf []byte, count int, dt sdk.DataType, peer int) error {
	return h.c.p2p("Recv", buf, count, dt, peer, true)
}

func (h hostView) GroupStart()                    { h.c.groupStart() }
func (h hostView) GroupEnd() error                { return h.c.groupEnd() }
func (h hostView) Rank() int                      { return h.c.rank }
func (h hostView) Count() int                     { return h.c.nranks }
func (h hostView) CanMemAlloc() bool              { return h.c.CanMemAlloc() }
func (h hostView) MemAlloc(n int) ([]byte, error) { return h.c.MemAlloc(n) }
func (h hostView) MemFree(b []byte) error         { return h.c.MemFree(b) }
