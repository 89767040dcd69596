package hostnet

import "github.com/flagcx/flagcx-go/internal/hostnet/tcp"

// TCP between ranks (authenticated sockets, framing, striped links, the
// choice of interface) is its own transport (internal/hostnet/tcp); these
// names keep hostnet's callers unchanged.

// Defaults and bounds of Config.
const (
	DefaultIfName    = tcp.DefaultIfName
	DefaultStreams   = tcp.DefaultStreams
	DefaultStripeMin = tcp.DefaultStripeMin
	DefaultTimeout   = tcp.DefaultTimeout
	DefaultSpin      = tcp.DefaultSpin
	MaxStreams       = tcp.MaxStreams
	MaxHello         = tcp.MaxHello
	BufferedSend     = tcp.BufferedSend
	FirstByteTimeout = tcp.FirstByteTimeout
)

// Environment variables read by ConfigFromEnv.
var (
	EnvSocketIfName    = tcp.EnvSocketIfName
	EnvSocketFamily    = tcp.EnvSocketFamily
	EnvSocketNThreads  = tcp.EnvSocketNThreads
	EnvNSocksPerThread = tcp.EnvNSocksPerThread
	EnvNetStripeMin    = tcp.EnvNetStripeMin
	EnvTimeout         = tcp.EnvTimeout
)

type (
	Conn     = tcp.Conn
	Listener = tcp.Listener
	TCPLink  = tcp.TCPLink
)

// The functions of tcp that hostnet's callers use.
var (
	DefaultConfig    = tcp.DefaultConfig
	ConfigFromEnv    = tcp.ConfigFromEnv
	ConfigFromLookup = tcp.ConfigFromLookup
	Listen           = tcp.Listen
	ListenAddr       = tcp.ListenAddr
	Dial             = tcp.Dial
	NewTCPLink       = tcp.NewTCPLink
	LocalAddr        = tcp.LocalAddr
)
