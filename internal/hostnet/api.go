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
// plugin (netplugin); wire holds what they share. What a caller needs of
// them, hostnet offers under the same names (this file, net.go, tag.go):
// Link and ShmNode are what a rank moves data with, and the rest sets
// them up, so that callers import hostnet alone.
//
// hostnet owns the transports. Each rank announces a Peer at bootstrap;
// Connect builds a rank's links to all peers at once, each pair through
// the first row of the transport table that can connect it (rows.go): shm
// when two ranks share a host, boot id and pid namespace and both have a
// segment; the network plugin where both ends offer it; TCP otherwise.
//
//	cfg, err := hostnet.ConfigFromEnv()                    // FLAGCX_SOCKET_* and friends
//	sc, err := hostnet.ShmConfigFromEnv()                  // FLAGCX_SHM_*
//	l, err := hostnet.Listen(cfg, secret)                  // on the interface FLAGCX_SOCKET_IFNAME picks
//	seg, err := hostnet.CreateShmSegment(sc.ForRanks(n))   // before the rendezvous; its Name goes in the Peer
//	// ... exchange Peers (core's rendezvous) ...
//	m, err := hostnet.Connect(hostnet.MeshConfig{...})     // m.Links[peer], m.Node (same-host windows)
//	err = m.Links[p].Send(buf); err = m.Links[p].Recv(buf)
//	defer m.Close()
//
// Lower level: Dial and Listener.Accept give authenticated Conns (a
// rendezvous or a control channel; tcp.NewTCPLink stripes one peer's
// sockets). Every blocking call gives up after Config.Timeout without
// progress, and a shared-memory wait notices within a fraction of a second
// that the peer process died.
package hostnet

import (
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Link is how a rank reaches one peer: whole, ordered, length-checked
// messages, full duplex (one Send and one Recv may run at once). Errors
// wrap ErrTimeout, ErrClosed or *LengthError where those apply.
type Link interface {
	Send(p []byte) error
	Recv(p []byte) error
	Close() error
	// Transport names what carries the link: "shm", "tcp" or "ib" (a
	// network plugin, netplugin/net.go), for people and link tables; the
	// mesh chooses rows, never names (rows.go).
	Transport() string
}

// ShmNode is the shared memory of one host's ranks (Mesh.Node): their
// windows and the steps with which they agree that data is in place
// (shm/shm_node_linux.go). An alias, not an interface: the host engine's
// steps call it on their latency path.
type ShmNode = shm.ShmNode

// ShmSegment is one rank's shared-memory segment (CreateShmSegment), made
// before the rendezvous; Connect takes it over (MeshConfig.Segment).
type ShmSegment = shm.ShmSegment

// ShmConfig tunes shared memory (FLAGCX_SHM_*, ShmConfigFromEnv).
type ShmConfig = shm.ShmConfig

// Secret is the shared key of one communicator (wire.Secret).
type Secret = wire.Secret

// Config tunes the TCP transport and the network (tcp.Config).
type Config = tcp.Config

// Conn is one authenticated, framed socket (Dial, Listener.Accept): what
// a rendezvous or a control channel talks over, outside the mesh.
type Conn = tcp.Conn

// Listener accepts authenticated Conns (Listen); a rank announces its
// address in its Peer, and Connect accepts its TCP peers on it.
type Listener = tcp.Listener

// Errors a caller may test for with errors.Is / errors.As; they live in
// wire so that every transport returns the same values.
var (
	ErrTimeout  = wire.ErrTimeout
	ErrClosed   = wire.ErrClosed
	ErrAuth     = wire.ErrAuth
	ErrMismatch = wire.ErrMismatch
	ErrProtocol = wire.ErrProtocol
	ErrConfig   = wire.ErrConfig
	// ErrShmCapacity: the ranks of this host would need more shared
	// memory than the host has (shm/shm.go).
	ErrShmCapacity = shm.ErrShmCapacity
	// ErrShmUnavailable: a rank cannot share memory with a peer (one of
	// them disabled it, or no segment could be made or mapped).
	ErrShmUnavailable = shm.ErrShmUnavailable
)

// LengthError reports a frame whose length differs from what the receiver
// expected (wire.LengthError).
type LengthError = wire.LengthError

// MismatchError is a peer's label that differs from this side's
// (wire.MismatchError).
type MismatchError = wire.MismatchError

// Defaults and bounds of Config (tcp/config.go, tcp/conn.go,
// tcp/handshake.go).
const (
	DefaultStreams   = tcp.DefaultStreams
	DefaultTimeout   = tcp.DefaultTimeout
	MaxHello         = tcp.MaxHello
	BufferedSend     = tcp.BufferedSend
	FirstByteTimeout = tcp.FirstByteTimeout
)

// DefaultShmDir is where segments are created.
const DefaultShmDir = shm.DefaultShmDir

// Names of the variables that tune the host network, for messages.
var (
	EnvTimeout    = wire.EnvTimeout
	EnvShmDisable = shm.EnvShmDisable
	EnvShmP2PSize = shm.EnvShmP2PSize
)

// DefaultConfig is Config when no variable is set (tcp.DefaultConfig).
func DefaultConfig() Config { return tcp.DefaultConfig() }

// ConfigFromEnv reads Config from FLAGCX_SOCKET_*, FLAGCX_NET and their
// friends (tcp.ConfigFromEnv).
func ConfigFromEnv() (Config, error) { return tcp.ConfigFromEnv() }

// Listen listens on the interface cfg picks (tcp.Listen).
func Listen(cfg Config, secret Secret) (*Listener, error) { return tcp.Listen(cfg, secret) }

// ListenAddr listens on addr (tcp.ListenAddr).
func ListenAddr(addr string, cfg Config, secret Secret) (*Listener, error) {
	return tcp.ListenAddr(addr, cfg, secret)
}

// Dial connects to the Listener at addr, proving secret and sending hello
// (tcp.Dial).
func Dial(addr string, cfg Config, secret Secret, hello []byte) (*Conn, error) {
	return tcp.Dial(addr, cfg, secret, hello)
}

// ShmConfigFromEnv reads ShmConfig from FLAGCX_SHM_* (shm.ShmConfigFromEnv).
func ShmConfigFromEnv() (ShmConfig, error) { return shm.ShmConfigFromEnv() }

// CreateShmSegment makes this rank's segment (shm.CreateShmSegment).
func CreateShmSegment(sc ShmConfig) (*ShmSegment, error) { return shm.CreateShmSegment(sc) }

// CleanStaleShm removes the segments of this host's ranks whose process
// died, and says how many (shm.CleanStaleShm).
func CleanStaleShm(sc ShmConfig) int { return shm.CleanStaleShm(sc) }

// BootID is this kernel's boot id (Peer.BootID).
func BootID() string { return shm.BootID() }

// PidNamespace names this process's pid namespace (Peer.PidNS).
func PidNamespace() string { return shm.PidNamespace() }

// ProcessStalled says why process pid of this host cannot take part in a
// collective ("is gone", "is stopped"), or "" while it runs
// (shm.ProcessStalled).
func ProcessStalled(pid int) string { return shm.ProcessStalled(pid) }
