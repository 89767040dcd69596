// Package hostnet is the host network between ranks: TCP, shared memory
// between ranks of one host, and a network plugin (InfiniBand / RoCE verbs,
// plugins/net-ib; net.go says which pairs use it). It knows
// nothing of vendors or collectives: it moves framed, length-checked
// messages between authenticated peers, and gives the ranks of one host
// the shared windows their collectives read directly. A caller may label
// messages and shared-memory steps with an opaque tag that the receiver
// checks, and send failure notices (tag.go).
//
// hostnet owns the transports. Each rank announces a Peer at bootstrap;
// a table of transports (shm when two ranks share a host, boot id and pid
// namespace and both have a segment; TCP otherwise) picks the transport of
// every pair, and Connect builds a rank's links to all peers at once.
//
//	cfg, err := hostnet.ConfigFromEnv()                // FLAGCX_SOCKET_* and friends
//	sc, err := hostnet.ShmConfigFromEnv()              // FLAGCX_SHM_*
//	l, err := hostnet.Listen(cfg, secret)              // on the interface FLAGCX_SOCKET_IFNAME picks
//	seg, err := hostnet.CreateShmSegment(sc.ForRanks(n)) // before the rendezvous; its Name goes in the Peer
//	// ... exchange Peers (core's rendezvous) ...
//	m, err := hostnet.Connect(hostnet.MeshConfig{...}) // m.Links[peer], m.Node (same-host windows)
//	err = m.Links[p].Send(buf); err = m.Links[p].Recv(buf)
//	defer m.Close()
//
// Lower level: Dial/Accept give authenticated Conns, NewTCPLink stripes one
// peer's sockets. Every blocking call gives up after Config.Timeout without
// progress, and a shared-memory wait notices within a fraction of a second
// that the peer process died.
package hostnet

import (
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Secret is the shared key of one communicator (wire.Secret).
type Secret = wire.Secret

// Config tunes the transport. The zero value is not useful: start from
// DefaultConfig or ConfigFromEnv.
type Config struct {
	// IfName selects interfaces as FLAGCX_SOCKET_IFNAME does: a
	// comma-separated list of name prefixes ("eth,ib"), "^" before the list
	// to exclude ("^lo,docker", the default), "=" before it for exact names.
	IfName string
	// Rendezvous is the address ("host:port") every rank dials first (the
	// unique id's): the interface the kernel routes to it is preferred
	// among those IfName allows ("" keeps the first by index).
	Rendezvous string
	// Family restricts addresses: 0 for either, 4 for IPv4, 6 for IPv6
	// (FLAGCX_SOCKET_FAMILY=AF_INET / AF_INET6).
	Family int
	// Streams is the number of sockets per peer link
	// (FLAGCX_SOCKET_NTHREADS x FLAGCX_NSOCKS_PERTHREAD).
	Streams int
	// AutoStreams: neither variable was set, so a mesh may use fewer
	// sockets where the hosts have few cores per rank (pairStreams).
	AutoStreams bool
	// StripeMin is the smallest message striped over a link's sockets
	// (over 2 at StripeMin, one more per StripeMin/2 bytes, up to all of
	// them: TCPLink); smaller messages travel on one socket.
	StripeMin int
	// Timeout bounds every wait without progress (FLAGCX_TIMEOUT).
	Timeout time.Duration
	// Spin is how long a socket read (of up to 64 KiB) polls the socket
	// before it sleeps in the kernel (FLAGCX_SOCKET_SPIN_US). A mesh polls
	// only where its host's ranks leave a core free (Connect).
	Spin time.Duration
	// Net chooses the network of the pairs that do not share memory:
	// NetIB, NetSocket or NetAuto (FLAGCX_NET, FLAGCX_FORCE_NET_SOCKET;
	// see net.go).
	Net string
	// NearPCI is the PCI bus id of the accelerator this rank drives
	// ("0000:1b:00.0"; "" for a host rank): the network plugin's device
	// nearest to it carries the rank's links (topo/topo.go).
	NearPCI string
}

// Errors a caller may test for with errors.Is / errors.As; they live in
// wire so that every transport returns the same values.
var (
	ErrTimeout  = wire.ErrTimeout
	ErrClosed   = wire.ErrClosed
	ErrAuth     = wire.ErrAuth
	ErrMismatch = wire.ErrMismatch
	ErrProtocol = wire.ErrProtocol
	ErrConfig   = wire.ErrConfig
)

// LengthError reports a frame whose length differs from what the receiver
// expected (wire.LengthError).
type LengthError = wire.LengthError

// MismatchError is a peer's label that differs from this side's
// (wire.MismatchError).
type MismatchError = wire.MismatchError
