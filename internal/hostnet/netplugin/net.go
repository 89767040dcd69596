// Package netplugin is the host transport over a network plugin
// (InfiniBand / RoCE verbs, plugins/net-ib, loaded through sdk/netplugin):
// the device nearest to a rank's accelerator, the offers two ranks
// exchange on their TCP link to choose it, and NetLink, whose messages
// travel through registered staging slots. It knows nothing of the mesh
// (internal/hostnet), whose transport table offers it the pairs that may
// take it (Negotiate).
package netplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet/topo"
	sdknet "github.com/flagcx/flagcx-go/sdk/netplugin"

	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// The network plugin transport. A pair of ranks that would talk TCP
// (different hosts, or one host without shared memory) first exchanges
// offers on its TCP link; when both want and have the net-ib plugin's
// RDMA device, they exchange the plugin's handles on that link (listen ->
// connect -> accept, in both directions), and the pair's Link becomes a
// NetLink. Its TCP connection stays open to tell when the peer process is
// gone (an idle RC receiver is never told by the fabric).
//
// Which pairs use it (Config.Net, from FLAGCX_NET and
// FLAGCX_FORCE_NET_SOCKET):
//
//	"IB"      every pair that would talk TCP; a rank without an RDMA
//	          device fails at once, naming why
//	"Socket"  none
//	""        pairs on different hosts when both ranks have an RDMA device

// Values of Config.Net.
const (
	NetAuto   = tcp.NetAuto
	NetIB     = tcp.NetIB
	NetSocket = tcp.NetSocket
)

// ErrNoNetDevice: FLAGCX_NET=IB on a rank without a usable RDMA device.
var ErrNoNetDevice = errors.New("no RDMA device")

// netDevice is this process's network plugin and the device its links use.
type netDevice struct {
	plugin *sdknet.Plugin
	info   sdknet.Info
	dev    int
	props  sdknet.Properties
	why    string // why this device: "nearest to 0000:1b:00.0 (same PCIe switch, 4 hops)"
}

// netOnce caches the plugin per emulation setting: the fabric library
// loads once per process, so asking for the other one later gets the
// plugin's clear error instead of a silent switch. The device is chosen
// once per accelerator (Config.NearPCI) the process's ranks drive.
var netOnce struct {
	sync.Mutex
	loaded map[bool]bool
	plugin map[bool]*netPlugin
	err    map[bool]error
	chosen map[netChoiceKey]*netDevice
}

type netChoiceKey struct {
	emulated bool
	near     string
}

// netPlugin is the loaded plugin with its devices' properties.
type netPlugin struct {
	plugin *sdknet.Plugin
	info   sdknet.Info
	props  []sdknet.Properties
}

var netEmulated atomic.Bool

// UseEmulatedNet makes the network plugin load the emulated fabric library
// (conformance/vendorsim/ibverbs) as --emulated asks; FLAGCX_EMULATED=1
// does the same.
func UseEmulatedNet(on bool) { netEmulated.Store(on) }

// netPluginPath is FLAGCX_NET_PLUGIN, else build/net next to the vendor
// plugins (FLAGCX_PLUGIN_DIR/../net, <flagcx>/../build/net, ./build/net).
func netPluginPath() string {
	if p, ok := env.NetPlugin.Raw(nil); ok && p != "" {
		return p
	}
	const file = "libflagcx-net-ib.so"
	if d, ok := env.PluginDir.Raw(nil); ok && d != "" {
		return filepath.Join(d, "..", "net", file)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "..", "build", "net", file)
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p)
		}
	}
	return filepath.Join("build", "net", file)
}

// openNet loads the network plugin once per process (emulated when
// FLAGCX_EMULATED or UseEmulatedNet says so) and picks the device nearest
// to the accelerator of PCI bus id near ("" for a host rank: the first
// device). Without a device the error wraps ErrNoNetDevice and says why.
func openNet(near string) (*netDevice, error) {
	emulated, _ := env.Emulated.Get(nil)
	emulated = emulated || netEmulated.Load()
	netOnce.Lock()
	defer netOnce.Unlock()
	if netOnce.loaded == nil {
		netOnce.loaded, netOnce.plugin, netOnce.err = map[bool]bool{}, map[bool]*netPlugin{}, map[bool]error{}
		netOnce.chosen = map[netChoiceKey]*netDevice{}
	}
	if !netOnce.loaded[emulated] {
		netOnce.loaded[emulated] = true
		netOnce.plugin[emulated], netOnce.err[emulated] = loadNet(netPluginPath(), emulated)
	}
	np, err := netOnce.plugin[emulated], netOnce.err[emulated]
	if err != nil {
		return nil, err
	}
	key := netChoiceKey{emulated, near}
	if d := netOnce.chosen[key]; d != nil {
		return d, nil
	}
	d := np.choose(near)
	netOnce.chosen[key] = d
	flog.Default().Log(context.Background(), flog.LevelInfo, fmt.Sprintf("NET/IB: using %s port %d: %s", d.props.Name, d.props.Port, d.why),
		flog.KeySubsys, flog.Net)
	return d, nil
}

func loadNet(path string, emulated bool) (*netPlugin, error) {
	p, err := sdknet.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: the network plugin does not load: %w", ErrNoNetDevice, err)
	}
	info, err := p.Init(sdknet.InitOptions{Emulated: emulated})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoNetDevice, err)
	}
	if p.Devices() == 0 {
		return nil, fmt.Errorf("%w: %s (network plugin %s, fabric library %s)", ErrNoNetDevice, strings.TrimPrefix(info.NoDevice, "no RDMA device: "), path, info.Library)
	}
	np := &netPlugin{plugin: p, info: info}
	for dev := range p.Devices() {
		props, err := p.Properties(dev)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoNetDevice, err)
		}
		np.props = append(np.props, props)
	}
	return np, nil
}

// choose picks the device nearest to the accelerator of bus id near
// (topo.Nearest); FLAGCX_IB_HCA has already narrowed the plugin's devices.
func (np *netPlugin) choose(near string) *netDevice {
	cands := make([]topo.Candidate, len(np.props))
	for i, p := range np.props {
		loc := topo.Loc{Path: p.PCIPath, NUMA: -1}
		if !np.info.Emulated {
			loc = topo.LocOfPath(p.PCIPath)
		}
		cands[i] = topo.Candidate{Name: p.Name, SpeedMbps: p.SpeedMbps, Loc: loc}
	}
	nearLoc := topo.LocOfBusID(near, np.info.Emulated)
	i, dist := topo.Nearest(cands, nearLoc)
	d := &netDevice{plugin: np.plugin, info: np.info, dev: i, props: np.props[i]}
	switch {
	case len(cands) == 1:
		d.why = "the only device"
	case near == "":
		d.why = "the first device (no accelerator)"
	case nearLoc.Path == "":
		d.why = "the first device (" + near + " has no PCI path)"
	default:
		d.why = fmt.Sprintf("nearest to %s (%s)", near, dist)
	}
	return d
}

// describe names the network for people: "emulated IB: net-ib on vsim_ib0
// port 1 (InfiniBand, 200 Gb/s, libibverbs ..., nearest to ...)".
func (d *netDevice) describe() string {
	return fmt.Sprintf("%s: net-ib on %s port %d (%s, %d Gb/s, %s, %s)", d.info.Transport, d.props.Name, d.props.Port,
		d.props.LinkLayerName(), d.props.SpeedMbps/1000, d.info.Library, d.why)
}

// CheckNet fails at once when cfg asks for IB (FLAGCX_NET=IB) and this
// process has no usable RDMA device; the error wraps ErrNoNetDevice and
// ErrConfig and says why and what to do.
func CheckNet(cfg tcp.Config) error {
	if cfg.Net != NetIB {
		return nil
	}
	if _, err := openNet(cfg.NearPCI); err != nil {
		// ErrConfig: the setting asks for what this machine does not have.
		return fmt.Errorf("%w: %s=IB: %w (unset it, or set %s=Socket, to use TCP sockets)", wire.ErrConfig, env.Net.Name, err, env.Net.Name)
	}
	return nil
}

// netOffer is what each rank of a TCP pair says before they choose.
type netOffer struct {
	Want     string `json:"want"` // "IB": required, "auto", "no"
	Have     bool   `json:"have"` // a usable device
	Emulated bool   `json:"emulated,omitempty"`
	Why      string `json:"why,omitempty"` // why not, when !Have
	// The device this rank chose and its link layer ("InfiniBand",
	// "RoCE"): ranks near different NICs must still share a fabric.
	Device string `json:"device,omitempty"`
	Fabric string `json:"fabric,omitempty"`
}

func makeOffer(mode string, sameHost bool, near string) netOffer {
	o := netOffer{Want: "auto"}
	switch {
	case mode == NetIB:
		o.Want = "IB"
	case mode == NetSocket:
		return netOffer{Want: "no", Why: "it uses TCP sockets (" + env.Net.Name + "=Socket or " + env.ForceNetSocket.Name + "=1)"}
	case sameHost:
		return netOffer{Want: "no", Why: "the ranks share a host (" + env.Net.Name + "=IB makes them use IB)"}
	}
	d, err := openNet(near)
	if err != nil {
		o.Why = err.Error()
		return o
	}
	o.Have, o.Emulated, o.Device, o.Fabric = true, d.info.Emulated, d.props.Name, d.props.LinkLayerName()
	return o
}

// chooseNet decides for the pair, the same way on both sides: IB, TCP, or
// an error when a rank required IB and the pair cannot have it.
func chooseNet(self, peer netOffer, selfRank, peerRank int) (bool, error) {
	if self.Want != "no" && peer.Want != "no" && self.Have && peer.Have && self.Emulated == peer.Emulated && self.Fabric == peer.Fabric {
		return true, nil
	}
	if self.Want != "IB" && peer.Want != "IB" {
		return false, nil
	}
	why := ""
	switch {
	case peer.Want == "no" || !peer.Have:
		why = fmt.Sprintf("rank %d cannot: %s", peerRank, peer.Why)
	case self.Want == "no" || !self.Have:
		why = fmt.Sprintf("rank %d cannot: %s", selfRank, self.Why)
	case self.Emulated != peer.Emulated:
		why = "one of them runs the emulated fabric (--emulated), the other the real one"
	default:
		why = fmt.Sprintf("rank %d's device %s is %s and rank %d's %s is %s, which cannot reach each other (set %s to devices of one fabric)",
			selfRank, self.Device, self.Fabric, peerRank, peer.Device, peer.Fabric, env.IBHCA.Name)
	}
	return false, fmt.Errorf("%s=IB between ranks %d and %d, but %s: %w", env.Net.Name, selfRank, peerRank, why, ErrNoNetDevice)
}

// negotiationMax is the longest message of the negotiation (an offer, or
// a handle of at most sdknet.HandleMaxBytes); each travels as a 4-byte
// length and negotiationMax bytes.
const negotiationMax = 1024

func sendSmall(tl *tcp.TCPLink, b []byte) error {
	if len(b) > negotiationMax {
		return fmt.Errorf("hostnet: a %d-byte negotiation message (at most %d): %w", len(b), negotiationMax, wire.ErrProtocol)
	}
	msg := make([]byte, 4+negotiationMax)
	putU32(msg, uint32(len(b)))
	copy(msg[4:], b)
	return tl.Conns()[0].Send(msg)
}

func recvSmall(tl *tcp.TCPLink) ([]byte, error) {
	msg := make([]byte, 4+negotiationMax)
	if err := tl.Conns()[0].Recv(msg); err != nil {
		return nil, err
	}
	return decodeNegotiation(msg)
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func getU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Negotiate offers the network of cfg (cfg.Net, the device near
// cfg.NearPCI) to rank peer over tl, between ranks of one host or not
// (sameHost): the pair's NetLink when both ends go over the plugin, or
// nil to keep tl.
func Negotiate(tl *tcp.TCPLink, cfg tcp.Config, sameHost bool, rank, peer int) (*NetLink, error) {
	return negotiateNet(tl, makeOffer(cfg.Net, sameHost, cfg.NearPCI), cfg, rank, peer)
}

// negotiateNet exchanges offers on tl and, when the pair goes over the
// plugin, the handles; it returns the NetLink (tl's first connection
// becomes its liveness watch, the others close) or nil to keep tl.
func negotiateNet(tl *tcp.TCPLink, offer netOffer, cfg tcp.Config, rank, peer int) (*NetLink, error) {
	if len(offer.Why) > negotiationMax/2 {
		offer.Why = offer.Why[:negotiationMax/2] + "..."
	}
	b, _ := json.Marshal(offer)
	if err := sendSmall(tl, b); err != nil {
		return nil, err
	}
	pb, err := recvSmall(tl)
	if err != nil {
		return nil, err
	}
	po, err := decodeNetOffer(pb, peer, tl.Conns()[0].RemoteAddr())
	if err != nil {
		return nil, err
	}
	use, err := chooseNet(offer, po, rank, peer)
	if err != nil || !use {
		return nil, err
	}
	d, err := openNet(cfg.NearPCI)
	if err != nil {
		return nil, err
	}
	nl, err := connectNet(tl, d, cfg)
	if err != nil {
		return nil, err
	}
	for _, c := range tl.Conns()[1:] {
		c.Close()
	}
	return nl, nil
}

// connectNet makes both directions of the pair: this side listens (its
// receiving end) and connects to the peer's listener (its sending end).
func connectNet(tl *tcp.TCPLink, d *netDevice, cfg tcp.Config) (*NetLink, error) {
	p := d.plugin
	lc, handle, err := p.Listen(d.dev)
	if err != nil {
		return nil, err
	}
	fail := func(err error, closers ...func() error) (*NetLink, error) {
		for _, c := range closers {
			c()
		}
		return nil, err
	}
	if err := sendSmall(tl, handle); err != nil {
		return fail(err, lc.Close)
	}
	peerHandle, err := recvSmall(tl)
	if err != nil {
		return fail(err, lc.Close)
	}
	sc, reply, err := p.Connect(d.dev, peerHandle)
	if err != nil {
		return fail(err, lc.Close)
	}
	if err := sendSmall(tl, reply); err != nil {
		return fail(err, lc.Close, sc.Close)
	}
	peerReply, err := recvSmall(tl)
	if err != nil {
		return fail(err, lc.Close, sc.Close)
	}
	rc, err := lc.Accept(peerReply)
	if err != nil {
		return fail(err, lc.Close, sc.Close)
	}
	nl, err := newNetLink(tl.Conns()[0], sc, rc, d, cfg)
	if err != nil {
		return fail(err, sc.Close, rc.Close)
	}
	return nl, nil
}
