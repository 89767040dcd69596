package hostnet

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/internal/hostnet/netplugin"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// The network plugin (InfiniBand / RoCE verbs) is its own transport
// (internal/hostnet/netplugin); here it becomes a row of the transport
// table (rows.go), and the mesh counts what the process's links use.

// Values of Config.Net.
const (
	NetAuto   = tcp.NetAuto
	NetIB     = tcp.NetIB
	NetSocket = tcp.NetSocket
)

// ErrNoNetDevice: FLAGCX_NET=IB on a rank without a usable RDMA device.
var ErrNoNetDevice = netplugin.ErrNoNetDevice

// The functions of netplugin that hostnet's callers use.
var (
	CheckNet       = netplugin.CheckNet
	UseEmulatedNet = netplugin.UseEmulatedNet
)

// NetLink is a Link over the network plugin (netplugin.NetLink).
type NetLink = netplugin.NetLink

// netTransport is the network plugin of a row of the transport table.
type netTransport interface {
	// Check fails at once when cfg requires this network and this process
	// cannot have it.
	Check(cfg Config) error
	// Negotiate exchanges offers with rank peer on the pair's sockets tl
	// (of one host or not: sameHost) and returns the pair's link over the
	// plugin, which then owns tl, or nil when either end refused, and tl
	// stays the pair's. Both ends decide alike, or both fail.
	Negotiate(tl *tcp.TCPLink, cfg Config, sameHost bool, rank, peer int) (Link, error)
}

// ibNet is the InfiniBand / RoCE plugin (netplugin/net.go says which pairs
// it takes).
type ibNet struct{}

func (ibNet) Check(cfg Config) error { return netplugin.CheckNet(cfg) }

func (ibNet) Negotiate(tl *tcp.TCPLink, cfg Config, sameHost bool, rank, peer int) (Link, error) {
	nl, err := netplugin.Negotiate(tl, cfg, sameHost, rank, peer)
	if nl == nil {
		return nil, err // not a nil *NetLink in a non-nil Link
	}
	return nl, err
}

// ---- what the process uses, for people ------------------------------------

var netUsage struct {
	sync.Mutex
	links map[string]int
	desc  string
}

func recordLinks(links []Link) {
	netUsage.Lock()
	defer netUsage.Unlock()
	if netUsage.links == nil {
		netUsage.links = map[string]int{}
	}
	for _, l := range links {
		if l == nil {
			continue
		}
		netUsage.links[l.Transport()]++
		if nl, ok := l.(*NetLink); ok {
			netUsage.desc = nl.Device()
		}
	}
}

// NetworkSummary names the transports of the links this process built,
// with the network plugin's device: "Network: 3 links ib (emulated IB:
// net-ib on vsim_ib0 port 1 (InfiniBand, 200 Gb/s, ...))". "" before any
// link was built.
func NetworkSummary() string {
	netUsage.Lock()
	defer netUsage.Unlock()
	names := make([]string, 0, len(netUsage.links))
	for n := range netUsage.links {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		s := fmt.Sprintf("%d link", netUsage.links[n])
		if netUsage.links[n] != 1 {
			s += "s"
		}
		s += " " + n
		switch n {
		case "ib":
			s += " (" + netUsage.desc + ")"
		case "tcp":
			s += " (TCP sockets)"
		case "shm":
			s += " (shared memory)"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "Network: " + strings.Join(parts, ", ")
}
