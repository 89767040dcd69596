package tcp

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

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
	// sockets where the hosts have few cores per rank (pairStreams, internal/hostnet/mesh.go).
	AutoStreams bool
	// StripeMin is the smallest message striped over a link's sockets
	// (over 2 at StripeMin, one more per StripeMin/2 bytes, up to all of
	// them: TCPLink); smaller messages travel on one socket.
	StripeMin int
	// Timeout bounds every wait without progress (FLAGCX_TIMEOUT).
	Timeout time.Duration
	// Spin is how long a socket read (of up to 64 KiB) polls the socket
	// before it sleeps in the kernel (FLAGCX_SOCKET_SPIN_US). A mesh polls
	// only where its host's ranks leave a core free (hostnet.Connect).
	Spin time.Duration
	// Net chooses the network of the pairs that do not share memory:
	// NetIB, NetSocket or NetAuto (FLAGCX_NET, FLAGCX_FORCE_NET_SOCKET;
	// see internal/hostnet/netplugin/net.go).
	Net string
	// NearPCI is the PCI bus id of the accelerator this rank drives
	// ("0000:1b:00.0"; "" for a host rank): the network plugin's device
	// nearest to it carries the rank's links (internal/hostnet/topo/topo.go).
	NearPCI string
}

// Values of Config.Net (the network plugin's choice, internal/hostnet/netplugin/net.go).
const (
	NetAuto   = ""
	NetIB     = "IB"
	NetSocket = "Socket"
)

// Defaults of Config, also used where a variable is unset.
const (
	DefaultIfName    = "^lo,docker"
	DefaultStreams   = 4 // FLAGCX_SOCKET_NTHREADS=2 x FLAGCX_NSOCKS_PERTHREAD=2
	DefaultStripeMin = 256 << 10
	DefaultTimeout   = 30 * time.Second
	// DefaultSpin: on 2 emulated hosts of 2 cores, with polled sockets
	// out of the netpoller (sock.go), an 8-byte AllReduce took less time
	// on average polling 200 us than 50 us or 1 ms (latprobe), and at
	// 200 us it was above OpenMPI's time at fewer sizes than at 50
	// (multihost.sh); on the 32-core H200 host 200 us was within the
	// spread of 50 from 64 KiB (nccl-socket.sh). The runs are in
	// docs/performance.md, "Sockets out of the netpoller, the every-GPU
	// copy bound, host folds on 16 goroutines".
	DefaultSpin = 200 * time.Microsecond

	// MaxStreams caps FLAGCX_SOCKET_NTHREADS x FLAGCX_NSOCKS_PERTHREAD.
	MaxStreams = 64
	// MaxHello is the largest hello a dialer may send during the handshake.
	MaxHello = 64 << 10
)

// Environment variables read by ConfigFromEnv (declared in internal/base/env).
var (
	EnvSocketIfName    = env.SocketIfName.Name
	EnvSocketFamily    = env.SocketFamily.Name
	EnvSocketNThreads  = env.SocketNThreads.Name
	EnvNSocksPerThread = env.NSocksPerThread.Name
	EnvNetStripeMin    = env.NetStripeMin.Name
	EnvTimeout         = wire.EnvTimeout
)

// DefaultConfig is the configuration used when no variable is set:
// every interface but loopback and docker, either address family, 4 sockets
// per peer, striping from 256 KiB, 30 s timeout, reads polling 200 us.
func DefaultConfig() Config {
	return Config{
		IfName:      DefaultIfName,
		Family:      0,
		Streams:     DefaultStreams,
		AutoStreams: true,
		StripeMin:   DefaultStripeMin,
		Timeout:     DefaultTimeout,
		Spin:        DefaultSpin,
	}
}

// ConfigFromEnv reads FLAGCX_SOCKET_IFNAME, FLAGCX_SOCKET_FAMILY,
// FLAGCX_SOCKET_NTHREADS, FLAGCX_NSOCKS_PERTHREAD, FLAGCX_NET_STRIPE_MIN,
// FLAGCX_TIMEOUT and FLAGCX_SOCKET_SPIN_US from the process environment on
// top of DefaultConfig.
func ConfigFromEnv() (Config, error) {
	return ConfigFromLookup(os.LookupEnv)
}

// ConfigFromLookup is ConfigFromEnv with the variables read through lookup
// (os.LookupEnv, or a map in tests). Unset or empty variables keep their
// defaults. Malformed values give one error (wrapping ErrConfig) that lists
// every bad variable with its value and what is allowed.
//
//	FLAGCX_SOCKET_IFNAME     "eth,ib" prefixes, "^lo,docker" excludes, "=eth0" exact names
//	FLAGCX_SOCKET_FAMILY     AF_INET or 4, AF_INET6 or 6
//	FLAGCX_SOCKET_NTHREADS   1..16 (default 2)
//	FLAGCX_NSOCKS_PERTHREAD  1..16 (default 2); Streams = NTHREADS x NSOCKS, at most 64
//	FLAGCX_NET_STRIPE_MIN    bytes, with optional K/M/G suffix (1024-based; 1.5M allowed)
//	FLAGCX_TIMEOUT           seconds ("30", "2.5") or a Go duration ("45s", "2m")
//	FLAGCX_SOCKET_SPIN_US    0..100000 microseconds (default 200)
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	l := env.Lookup(lookup)
	var errs []error
	bad := func(err error) { errs = append(errs, fmt.Errorf("%w: %w", wire.ErrConfig, err)) }

	if v, ok := env.SocketIfName.Raw(l); ok {
		if _, err := parseIfSpec(v); err != nil {
			bad(&env.Error{Name: EnvSocketIfName, Value: v, Form: err.Error()})
		} else {
			cfg.IfName = v
		}
	}
	if f, err := env.SocketFamily.Get(l); err != nil {
		bad(err)
	} else {
		cfg.Family = f
	}
	nthreads, setThreads, err := env.SocketNThreads.Find(l)
	if err != nil {
		bad(err)
	}
	nsocks, setSocks, err := env.NSocksPerThread.Find(l)
	if err != nil {
		bad(err)
	}
	cfg.AutoStreams = !setThreads && !setSocks
	cfg.Streams = min(nthreads*nsocks, MaxStreams)
	if n, err := env.NetStripeMin.Get(l); err != nil {
		bad(err)
	} else {
		cfg.StripeMin = n
	}
	if d, err := env.Timeout.Get(l); err != nil {
		bad(err)
	} else {
		cfg.Timeout = d
	}
	if us, err := env.SocketSpinUS.Get(l); err != nil {
		bad(err)
	} else {
		cfg.Spin = time.Duration(us) * time.Microsecond
	}
	if n, err := env.Net.Get(l); err != nil {
		bad(err)
	} else {
		cfg.Net = n
	}
	if force, err := env.ForceNetSocket.Get(l); err != nil {
		bad(err)
	} else if force {
		cfg.Net = NetSocket
	}
	if len(errs) > 0 {
		return DefaultConfig(), errors.Join(errs...)
	}
	return cfg, nil
}
