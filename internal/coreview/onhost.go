package coreview

import "github.com/flagcx/flagcx-go/sdk"

// OnHost is a host communicator as sdk.Dispatch takes it (sdk.Collectives
// and sdk.Grouper over []byte): the host engine's one adapter, so that
// core's executor and the benchmark issue host collectives without a
// switch of their own. Its stream is struct{}: there is none to pass.
type OnHost struct {
	C HostCalls // the host communicator
}

var (
	_ sdk.Collectives[[]byte, struct{}] = OnHost{}
	_ sdk.Grouper                       = OnHost{}
)

// AllReduce is h.C's AllReduce.
func (h OnHost) AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, _ struct{}) error {
	return h.C.AllReduce(send, recv, count, dt, op)
}

// Reduce is h.C's Reduce.
func (h OnHost) Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int, _ struct{}) error {
	return h.C.Reduce(send, recv, count, dt, op, root)
}

// Broadcast is h.C's Broadcast.
func (h OnHost) Broadcast(send, recv []byte, count int, dt sdk.DataType, root int, _ struct{}) error {
	return h.C.Broadcast(send, recv, count, dt, root)
}

// AllGather is h.C's AllGather.
func (h OnHost) AllGather(send, recv []byte, sendcount int, dt sdk.DataType, _ struct{}) error {
	return h.C.AllGather(send, recv, sendcount, dt)
}

// ReduceScatter is h.C's ReduceScatter.
func (h OnHost) ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp, _ struct{}) error {
	return h.C.ReduceScatter(send, recv, recvcount, dt, op)
}

// AlltoAll is h.C's AlltoAll.
func (h OnHost) AlltoAll(send, recv []byte, count int, dt sdk.DataType, _ struct{}) error {
	return h.C.AlltoAll(send, recv, count, dt)
}

// AlltoAllv is h.C's AlltoAllv.
func (h OnHost) AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType, _ struct{}) error {
	return h.C.AlltoAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, dt)
}

// Gather is h.C's Gather.
func (h OnHost) Gather(send, recv []byte, count int, dt sdk.DataType, root int, _ struct{}) error {
	return h.C.Gather(send, recv, count, dt, root)
}

// Scatter is h.C's Scatter.
func (h OnHost) Scatter(send, recv []byte, count int, dt sdk.DataType, root int, _ struct{}) error {
	return h.C.Scatter(send, recv, count, dt, root)
}

// Send is h.C's Send.
func (h OnHost) Send(buf []byte, count int, dt sdk.DataType, peer int, _ struct{}) error {
	return h.C.Send(buf, count, dt, peer)
}

// Recv is h.C's Recv.
func (h OnHost) Recv(buf []byte, count int, dt sdk.DataType, peer int, _ struct{}) error {
	return h.C.Recv(buf, count, dt, peer)
}

// GroupStart is h.C's GroupStart.
func (h OnHost) GroupStart() { h.C.GroupStart() }

// GroupEnd is h.C's GroupEnd.
func (h OnHost) GroupEnd() error { return h.C.GroupEnd() }
