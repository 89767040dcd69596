package tcp

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// ifSpec is a parsed FLAGCX_SOCKET_IFNAME: "eth,ib" (name prefixes),
// "^lo,docker" (anything but these prefixes), "=eth0" (exact names),
// "^=docker0" (anything but these exact names).
type ifSpec struct {
	exclude bool
	exact   bool
	names   []string
}

func parseIfSpec(s string) (ifSpec, error) {
	var sp ifSpec
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "^") {
		sp.exclude = true
		s = s[1:]
	}
	if strings.HasPrefix(s, "=") {
		sp.exact = true
		s = s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			sp.names = append(sp.names, n)
		}
	}
	if len(sp.names) == 0 {
		return sp, fmt.Errorf(`allowed is a comma-separated list of interface names: prefixes ("eth,ib"), "^" before the list to exclude ("^lo,docker"), "=" for exact names ("=eth0")`)
	}
	return sp, nil
}

func (sp ifSpec) match(name string) bool {
	hit := false
	for _, n := range sp.names {
		if (sp.exact && name == n) || (!sp.exact && strings.HasPrefix(name, n)) {
			hit = true
			break
		}
	}
	return hit != sp.exclude
}

// ifaceInfo is what interface selection needs to know of one interface;
// tests build lists of them by hand.
type ifaceInfo struct {
	Name     string
	Up       bool
	Loopback bool
	Addrs    []net.IP
}

func systemInterfaces() ([]ifaceInfo, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("hostnet: listing network interfaces: %w", err)
	}
	out := make([]ifaceInfo, 0, len(ifs))
	for _, ifc := range ifs {
		info := ifaceInfo{
			Name:     ifc.Name,
			Up:       ifc.Flags&net.FlagUp != 0,
			Loopback: ifc.Flags&net.FlagLoopback != 0,
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			switch a := a.(type) {
			case *net.IPNet:
				info.Addrs = append(info.Addrs, a.IP)
			case *net.IPAddr:
				info.Addrs = append(info.Addrs, a.IP)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// LocalAddr picks the address this process listens on, as NCCL and FlagCX
// choose their socket interface, and by reachability:
//
//   - cfg.IfName (FLAGCX_SOCKET_IFNAME) selects interface names: prefixes,
//     "^" to exclude, "=" for exact names; empty means "^lo,docker".
//   - With cfg.Rendezvous set (the address every rank dials first), the
//     interface holding the source address of the kernel's route to it
//     wins, when the selection allows it: on a multi-NIC host that is the
//     network the other ranks are reachable on, whatever its index.
//   - Otherwise, among up interfaces that match, in system order, the first
//     one with an address of the allowed family (cfg.Family 4, 6 or 0 for
//     either) wins. With Family 0 an IPv4 address beats an IPv6 one; an
//     IPv6 link-local address (fe80::/10) is used only if nothing else
//     exists.
//   - With the default selection and no match, docker interfaces and then
//     loopback are tried, so a laptop or a bare container still works.
//   - An explicit selection that matches nothing is an error (wrapping
//     ErrConfig) that lists the interfaces that do exist.
func LocalAddr(cfg Config) (ip net.IP, ifname string, err error) {
	c, err := chooseInterface(cfg)
	if err == nil {
		flog.Default().Log(context.Background(), flog.LevelInfo,
			fmt.Sprintf("NET/Socket: using interface %s %s (%s)", c.Name, c.IP, c.Why), flog.KeySubsys, flog.Net)
	}
	return c.IP, c.Name, err
}

// ifaceChoice is the interface LocalAddr picks, and why (for errors).
type ifaceChoice struct {
	IP   net.IP
	Name string
	Why  string
}

func chooseInterface(cfg Config) (ifaceChoice, error) {
	ifs, err := systemInterfaces()
	if err != nil {
		return ifaceChoice{}, err
	}
	return selectInterface(cfg.IfName, cfg.Family, ifs, cfg.Rendezvous, routeSource(cfg.Rendezvous, cfg.Family))
}

// routeSource is the local address the kernel sends from toward addr
// ("host:port"): a UDP socket's connect picks the route without sending
// anything. nil when addr is empty, does not resolve or has no route.
func routeSource(addr string, family int) net.IP {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if port == "0" || port == "" {
		port = "9"
	}
	network := map[int]string{4: "udp4", 6: "udp6"}[family]
	if network == "" {
		network = "udp"
	}
	ua, err := net.ResolveUDPAddr(network, net.JoinHostPort(host, port))
	if err != nil {
		return nil
	}
	c, err := net.DialUDP(network, nil, ua)
	if err != nil {
		return nil
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP
}

// ifaceNote names the interface this rank's sockets use and how to choose
// another, for the errors of a network that does not connect.
func ifaceNote(cfg Config) string {
	spec := cfg.IfName
	if spec == "" {
		spec = DefaultIfName
	}
	c, err := chooseInterface(cfg)
	if err != nil {
		return fmt.Sprintf("this rank has no usable interface (%v)", err)
	}
	return fmt.Sprintf("this rank uses interface %s (%s, %s); set %s to choose another (now %q)",
		c.Name, c.IP, c.Why, EnvSocketIfName, spec)
}

// addrTier ranks an address for the family; lower is better, -1 unusable.
func addrTier(ip net.IP, family int) int {
	if ip == nil || ip.IsUnspecified() || ip.IsMulticast() {
		return -1
	}
	if ip.To4() != nil {
		if family == 6 {
			return -1
		}
		return 0
	}
	if family == 4 || len(ip) != net.IPv6len {
		return -1
	}
	if ip.IsLinkLocalUnicast() {
		return 2
	}
	return 1
}

// pickAddr returns the best address of the interfaces that keep accepts.
func pickAddr(ifs []ifaceInfo, family int, keep func(ifaceInfo) bool) (net.IP, string, bool) {
	bestTier := 1 << 30
	var best net.IP
	var bestName string
	for _, ifc := range ifs {
		if !ifc.Up || !keep(ifc) {
			continue
		}
		for _, ip := range ifc.Addrs {
			if t := addrTier(ip, family); t >= 0 && t < bestTier {
				bestTier, best, bestName = t, ip, ifc.Name
			}
		}
	}
	if best == nil {
		return nil, "", false
	}
	if v4 := best.To4(); v4 != nil {
		best = v4
	}
	return best, bestName, true
}

// selectInterface is LocalAddr over a given interface list (pure,
// testable): toward is the rendezvous address, src the kernel's source
// address toward it (nil: unknown).
func selectInterface(ifName string, family int, ifs []ifaceInfo, toward string, src net.IP) (ifaceChoice, error) {
	spec := strings.TrimSpace(ifName)
	if spec == "" {
		spec = DefaultIfName
	}
	sp, err := parseIfSpec(spec)
	if err != nil {
		return ifaceChoice{}, fmt.Errorf("%w: %s=%q: %w", wire.ErrConfig, EnvSocketIfName, ifName, err)
	}
	allowed := func(i ifaceInfo) bool { return sp.match(i.Name) }
	if src != nil && addrTier(src, family) >= 0 {
		holds := func(i ifaceInfo) bool {
			return allowed(i) && slices.ContainsFunc(i.Addrs, func(a net.IP) bool { return a.Equal(src) })
		}
		if _, name, ok := pickAddr(ifs, family, holds); ok {
			ip := src
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			return ifaceChoice{ip, name, "the route to the rendezvous " + toward}, nil
		}
	}
	if ip, name, ok := pickAddr(ifs, family, allowed); ok {
		return ifaceChoice{ip, name, fmt.Sprintf("the first up interface %s=%q allows", EnvSocketIfName, spec)}, nil
	}
	if spec == DefaultIfName {
		// NCCL's order after the default: docker interfaces, then loopback.
		if ip, name, ok := pickAddr(ifs, family, func(i ifaceInfo) bool { return strings.HasPrefix(i.Name, "docker") }); ok {
			return ifaceChoice{ip, name, "no other interface is up"}, nil
		}
		if ip, name, ok := pickAddr(ifs, family, func(i ifaceInfo) bool { return i.Loopback || strings.HasPrefix(i.Name, "lo") }); ok {
			return ifaceChoice{ip, name, "no other interface is up"}, nil
		}
	}
	return ifaceChoice{}, fmt.Errorf("%w: %s=%q matches no up interface with %s; interfaces here: %s; set %s to one of them (e.g. %q)",
		wire.ErrConfig, EnvSocketIfName, spec, familyWords(family), describeIfs(ifs), EnvSocketIfName, suggestIf(ifs, family))
}

func familyWords(family int) string {
	switch family {
	case 4:
		return "an IPv4 address (FLAGCX_SOCKET_FAMILY=AF_INET)"
	case 6:
		return "an IPv6 address (FLAGCX_SOCKET_FAMILY=AF_INET6)"
	}
	return "an IPv4 or IPv6 address"
}

func describeIfs(ifs []ifaceInfo) string {
	if len(ifs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ifs))
	for _, ifc := range ifs {
		state := "up"
		if !ifc.Up {
			state = "down"
		}
		addrs := make([]string, 0, len(ifc.Addrs))
		for _, a := range ifc.Addrs {
			addrs = append(addrs, a.String())
		}
		if len(addrs) == 0 {
			addrs = append(addrs, "no address")
		}
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", ifc.Name, state, strings.Join(addrs, ", ")))
	}
	return strings.Join(parts, ", ")
}

func suggestIf(ifs []ifaceInfo, family int) string {
	if _, name, ok := pickAddr(ifs, family, func(i ifaceInfo) bool { return !i.Loopback }); ok {
		return "=" + name
	}
	if _, name, ok := pickAddr(ifs, family, func(ifaceInfo) bool { return true }); ok {
		return "=" + name
	}
	return DefaultIfName
}

// IfaceOf names the interface that holds the IP of addr ("?" when none
// does, e.g. in another network namespace's view).
func IfaceOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		return "?"
	}
	ifs, err := systemInterfaces()
	if err != nil {
		return "?"
	}
	for _, ifc := range ifs {
		for _, a := range ifc.Addrs {
			if a.Equal(ip) {
				return ifc.Name
			}
		}
	}
	return "?"
}
