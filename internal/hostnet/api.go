// Package hostnet is the host network between ranks: TCP, shared memory
// between ranks of one host, and a network plugin (InfiniBand / RoCE verbs,
// plugins/net-ib; netplugin/net.go says which pairs use it). It knows
// nothing of vendors or collectives: it moves framed, length-checked
// messages between authenticated peers, and gives the ranks of one host
// the shared windows their collectives read directly. A caller may label
// messages and shared-memory steps with an opaque tag that the receiver
// checks, and send failure notices (tag.go).
//
// hostnet is the mesh; the transports are subpackages that import none of
// it nor each other: shm (same host), tcp (sockets), and the network
// plugin (netplugin); wire holds what they share. hostnet re-exports the
// names of wire and netplugin that its callers use, and tcp.Config as
// Config; callers name shm and tcp themselves (shm.ShmConfig, tcp.Listen).
//
// hostnet owns the transports. Each rank announces a Peer at bootstrap;
// a table of transports (shm when two ranks share a host, boot id and pid
// namespace and both have a segment; TCP otherwise) picks the transport of
// every pair, and Connect builds a rank's links to all peers at once.
//
//	cfg, err := tcp.ConfigFromEnv()                    // FLAGCX_SOCKET_* and friends
//	sc, err := shm.ShmConfigFromEnv()                  // FLAGCX_SHM_*
//	l, err := tcp.Listen(cfg, secret)                  // on the interface FLAGCX_SOCKET_IFNAME picks
//	seg, err := shm.CreateShmSegment(sc.ForRanks(n))   // before the rendezvous; its Name goes in the Peer
//	// ... exchange Peers (core's rendezvous) ...
//	m, err := hostnet.Connect(hostnet.MeshConfig{...}) // m.Links[peer], m.Node (same-host windows)
//	err = m.Links[p].Send(buf); err = m.Links[p].Recv(buf)
//	defer m.Close()
//
// Lower level: tcp.Dial/Accept give authenticated tcp.Conns, tcp.NewTCPLink
// stripes one peer's sockets. Every blocking call gives up after
// Config.Timeout without progress, and a shared-memory wait notices within
// a fraction of a second that the peer process died.
package hostnet

import (
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Secret is the shared key of one communicator (wire.Secret).
type Secret = wire.Secret

// Config tunes the TCP transport and the network (tcp.Config).
type Config = tcp.Config

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
