// Package host is the host backend: the CPU as a device. Its collectives run
// over any Peers (hostnet's TCP links in a communicator, in-memory pipes in
// tests) on host memory, and they are also the inter-cluster engine of
// heterogeneous schedules.
package host

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
