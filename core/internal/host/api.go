// Package host is the host backend: the CPU as a device. Its collectives run
// over any Peers (hostnet's TCP links in a communicator, in-memory pipes in
// tests) on host memory, and they are also the inter-cluster engine of
// heterogeneous schedules.
package host

import (
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
)

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

// Streams is implemented by Peers whose link to a peer is several
// independent streams (a TCP link's sockets). The two-rank AllReduce then
// cuts its exchange into one piece per stream and moves and reduces each
// piece on its own, all at once (allReduceStriped).
type Streams interface {
	// Streams is the number of streams to peer (1: no striping).
	Streams(peer int) int
	// SendStream and RecvStream are Send and Recv on stream i of the link
	// to peer alone: messages of one stream keep their order, streams do
	// not wait for each other.
	SendStream(peer, i int, buf []byte) error
	RecvStream(peer, i int, buf []byte) error
}

// Duplex is implemented by Peers that can move one message each way with a
// peer on the calling goroutine (a TCP link of one polled socket). The
// two-rank AllReduce then exchanges on one thread instead of a pipe's
// sending and receiving goroutines (allReduceDuplex).
type Duplex interface {
	// Exchange sends out to peer while it receives exactly len(in) bytes
	// from it into in, calling progress (unless nil) with how many bytes
	// of each have moved whenever some did. ok is false, with nothing moved, where the
	// link to peer cannot.
	Exchange(peer int, out, in []byte, progress func(got, sent int)) (ok bool, err error)
	// Lean reports whether the link to peer joins hosts of few cores per
	// rank, where reducing on the exchanging thread beats a thread per
	// direction beyond whole-buffer exchanges (allReduceHalves); both
	// ends of a link answer alike.
	Lean(peer int) bool
}

// Run runs call (any collective but SendRecv, whose transfers Group runs)
// on send and recv, checking it first with sdk's one checker as every
// collective of the engine does. The table below, not sdk.Dispatch, turns
// the collective into its method: this is the host placement's latency
// path, and Dispatch's interface call and copy of the Call were a fair
// part of a one-rank call (BenchmarkHostPlacementCall; docs/performance.md,
// "Figures that were in comments (issue 41)").
func (e *Engine) Run(call *sdk.Call, send, recv []byte) error {
	if call.Coll >= 0 && call.Coll < sdk.NumCollectives {
		if run := byCollective[call.Coll]; run != nil {
			return run(e, call, send, recv)
		}
	}
	return fmt.Errorf("%w: the host engine runs no %v call: sends and receives go through Group", sdk.ErrInvalidArgument, call.Coll)
}

// byCollective is each collective's method of the engine, by sdk.Collective.
var byCollective = [sdk.NumCollectives]func(e *Engine, c *sdk.Call, send, recv []byte) error{
	sdk.AllReduce: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.AllReduce(send, recv, c.Count, c.DType, c.Op)
	},
	sdk.Reduce: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.Reduce(send, recv, c.Count, c.DType, c.Op, c.Root)
	},
	sdk.Broadcast: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.Broadcast(send, recv, c.Count, c.DType, c.Root)
	},
	sdk.AllGather: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.AllGather(send, recv, c.Count, c.DType)
	},
	sdk.ReduceScatter: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.ReduceScatter(send, recv, c.Count, c.DType, c.Op)
	},
	sdk.AlltoAll: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.AlltoAll(send, recv, c.Count, c.DType)
	},
	sdk.AlltoAllv: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.AlltoAllv(send, c.SendCounts, c.SDispls, recv, c.RecvCounts, c.RDispls, c.DType)
	},
	sdk.Gather: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.Gather(send, recv, c.Count, c.DType, c.Root)
	},
	sdk.Scatter: func(e *Engine, c *sdk.Call, send, recv []byte) error {
		return e.Scatter(send, recv, c.Count, c.DType, c.Root)
	},
	sdk.Barrier: func(e *Engine, _ *sdk.Call, _, _ []byte) error { return e.Barrier() },
}
