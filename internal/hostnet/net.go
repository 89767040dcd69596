package hostnet

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/flagcx/flagcx-go/internal/hostnet/netplugin"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// The network plugin (InfiniBand / RoCE verbs) is its own transport
// (internal/hostnet/netplugin); here the mesh upgrades its TCP pairs to
// it, and counts what the process's links use.

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

// upgradeNet turns the TCP links that both ends want on the network plugin
// into NetLinks, all pairs at once.
func (m *Mesh) upgradeNet(mc MeshConfig) error {
	self := mc.Peers[mc.Rank]
	var g errgroup.Group
	for p, l := range m.Links {
		tl, ok := l.(*tcp.TCPLink)
		if !ok {
			continue
		}
		same := SameHost(self, mc.Peers[p])
		g.Go(func() error {
			nl, err := netplugin.Negotiate(tl, mc.Net, same, mc.Rank, p)
			if err != nil {
				return fmt.Errorf("rank %d choosing the network to rank %d: %w", mc.Rank, p, err)
			}
			if nl != nil {
				m.Links[p] = nl
			}
			return nil
		})
	}
	return g.Wait()
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
