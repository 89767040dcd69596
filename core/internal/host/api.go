// Package host is the host backend: the CPU as a device. Its collectives run
// over any Peers (hostnet's TCP links in a communicator, in-memory pipes in
// tests) on host memory, and they are also the inter-cluster engine of
// heterogeneous schedules.
package host

import "github.com/flagcx/flagcx-go/sdk"

// Peers is what the host collectives need from the network: reliable,
// ordered, length-checked messages between this rank and every other.
//
// Messages between one pair of ranks arrive in the order they were sent.
// Send to a peer and Recv from a peer may run at the same time from different
// goroutines (and for different peers); two concurrent Sends to the same peer,
// or two concurrent Recvs from the same peer, are not allowed: callers order
// them. Every call gives up with an error naming the peer when the transport's
// deadline passes without progress.
type Peers interface {
	Rank() int
	Size() int
	// Send returns once buf may be reused.
	Send(peer int, buf []byte) error
	// Recv fills buf entirely; a message of another length from the peer is
	// an error (sdk.ErrInvalidUsage: the ranks disagree on a count), never a
	// partial write.
	Recv(peer int, buf []byte) error
}

// Buffered is implemented by Peers whose Send of a small message returns
// without waiting for the peer's Recv (a socket's kernel buffer takes it).
// The engine then sends such a message of an exchange on the calling
// goroutine before it receives, instead of from a second goroutine whose
// wake-up on another thread costs more than the message (sendrecv).
type Buffered interface {
	// SendBuffered says whether a Send of n bytes to peer returns without
	// the peer's Recv, whatever the peer is doing.
	SendBuffered(peer, n int) bool
}

// Run runs call (any collective but SendRecv, whose transfers Group runs)
// on send and recv, checking it first with sdk's one checker as every
// collective of the engine does.
func (e *Engine) Run(call *sdk.Call, send, recv []byte) error {
	if call.Coll == sdk.Barrier {
		return e.Barrier()
	}
	return sdk.Dispatch(calls{e}, *call, send, recv, struct{}{})
}

// calls is the engine as sdk.Dispatch takes it (sdk.Dispatch is the one
// place that turns a collective into its method). It has no groups, so
// Dispatch refuses SendRecv.
type calls struct{ e *Engine }

func (c calls) AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, _ struct{}) error {
	return c.e.AllReduce(send, recv, count, dt, op)
}

func (c calls) Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int, _ struct{}) error {
	return c.e.Reduce(send, recv, count, dt, op, root)
}

func (c calls) Broadcast(send, recv []byte, count int, dt sdk.DataType, root int, _ struct{}) error {
	return c.e.Broadcast(send, recv, count, dt, root)
}

func (c calls) AllGather(send, recv []byte, sendcount int, dt sdk.DataType, _ struct{}) error {
	return c.e.AllGather(send, recv, sendcount, dt)
}

func (c calls) ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp, _ struct{}) error {
	return c.e.ReduceScatter(send, recv, recvcount, dt, op)
}

func (c calls) AlltoAll(send, recv []byte, count int, dt sdk.DataType, _ struct{}) error {
	return c.e.AlltoAll(send, recv, count, dt)
}

func (c calls) AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType, _ struct{}) error {
	return c.e.AlltoAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, dt)
}

func (c calls) Gather(send, recv []byte, count int, dt sdk.DataType, root int, _ struct{}) error {
	return c.e.Gather(send, recv, count, dt, root)
}

func (c calls) Scatter(send, recv []byte, count int, dt sdk.DataType, root int, _ struct{}) error {
	return c.e.Scatter(send, recv, count, dt, root)
}

func (c calls) Send(buf []byte, count int, dt sdk.DataType, peer int, _ struct{}) error {
	return c.e.Group([]P2P{{Peer: peer, Buf: buf[:count*dt.Size()]}})
}

func (c calls) Recv(buf []byte, count int, dt sdk.DataType, peer int, _ struct{}) error {
	return c.e.Group([]P2P{{Peer: peer, Buf: buf[:count*dt.Size()], Recv: true}})
}
