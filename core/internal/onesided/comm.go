package onesided

import (
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Comm is what the machinery asks of the communicator that uses it
// (core's Comm, through core/onesided_comm.go).
type Comm interface {
	// Rank is this rank, 0 <= Rank() < Size().
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Timeout is the deadline of every wait, counted from the last
	// progress (0: hostnet.DefaultTimeout).
	Timeout() time.Duration
	// AllGather gathers len(send) bytes of every rank into recv, in rank
	// order, over the communicator's host network; with an empty send it
	// is a barrier. It is collective: every rank calls it in the same
	// order relative to the communicator's other collective calls.
	AllGather(send, recv []byte) error
	// Split makes the one-sided links (collective: every rank calls it at
	// the same registration).
	Split() (Links, error)
	// Device is the rank's device, nil on a host rank.
	Device() Device
	// CallError names the failure of the user's call name as the
	// communicator names its calls' failures.
	CallError(name string, err error) error
}

// Links are the one-sided links: links to every rank of their own, made
// like the communicator's (the same transports, picked by the same table),
// on which no collective runs. The host engine's collectives read their
// links one message at a time, as each step expects: a progress goroutine
// reading the same links would take their messages.
type Links interface {
	// Link is the link to peer (nil for this rank).
	Link(peer int) hostnet.Link
	// Node is the shared memory of this host's ranks on these links, or
	// nil when this rank shares none.
	Node() *hostnet.ShmNode
	// HostOf is " (host NAME)" for peer, or "" when unknown.
	HostOf(peer int) string
	// LinkError names a failed send or receive to peer for the user
	// (doing: "sending to rank 3").
	LinkError(err error, doing string, peer int) error
	// Close closes the links, which ends every wait on them (abort:
	// without waiting for the peers).
	Close(abort bool) error
}

// Device is a device rank's plugin: the calls that wait for the device run
// under the communicator's watchdog.
type Device interface {
	// Memcpy copies n bytes between host and device memory, or within the
	// device (kind), on stream s (0: synchronously).
	Memcpy(dst, src uintptr, n int, kind loader.MemcpyKind, s loader.Stream) error
	// StreamSynchronize waits for the work on s.
	StreamSynchronize(s loader.Stream) error
	// Bind makes the rank's device current on the calling OS thread
	// (vendor runtimes keep it per thread).
	Bind() error
	// Alloc is n zeroed bytes of device memory; its error names the
	// device.
	Alloc(n int) (uintptr, error)
	// Free releases Alloc's memory.
	Free(ptr uintptr) error
}
