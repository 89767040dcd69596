package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

func ips(ss ...string) []net.IP {
	out := make([]net.IP, len(ss))
	for i, s := range ss {
		out[i] = net.ParseIP(s)
	}
	return out
}

func TestParseIfSpec(t *testing.T) {
	tests := []struct {
		spec    string
		match   []string
		nomatch []string
	}{
		{"eth,ib", []string{"eth0", "eth10", "ib0", "ibp1s0"}, []string{"lo", "enp1s0", "docker0"}},
		{"^lo,docker", []string{"eth0", "enp1s0", "ib0"}, []string{"lo", "docker0", "docker_gwbridge"}},
		{"=eth0", []string{"eth0"}, []string{"eth01", "eth1", "eth"}},
		{"^=eth0", []string{"eth01", "eth1", "lo"}, []string{"eth0"}},
		{" eth0 , ib0 ", []string{"eth0", "ib0"}, []string{"eth1"}},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			sp, err := parseIfSpec(tc.spec)
			require.NoError(t, err)
			for _, n := range tc.match {
				require.True(t, sp.match(n), "%q should match %q", tc.spec, n)
			}
			for _, n := range tc.nomatch {
				require.False(t, sp.match(n), "%q should not match %q", tc.spec, n)
			}
		})
	}
	for _, bad := range []string{"", "^", "=", "^=", ",", " , "} {
		_, err := parseIfSpec(bad)
		require.Error(t, err, "spec %q", bad)
	}
}

func TestSelectInterface(t *testing.T) {
	lo := ifaceInfo{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1", "::1")}
	eth0 := ifaceInfo{Name: "eth0", Up: true, Addrs: ips("fe80::1", "fd00::2", "10.0.0.2")}
	eth1 := ifaceInfo{Name: "eth1", Up: true, Addrs: ips("10.1.0.2")}
	eth6 := ifaceInfo{Name: "eth6", Up: true, Addrs: ips("fe80::6", "2001:db8::6")}
	ll := ifaceInfo{Name: "eth9", Up: true, Addrs: ips("fe80::9")}
	ib := ifaceInfo{Name: "ib0", Up: true, Addrs: ips("192.168.0.7")}
	down := ifaceInfo{Name: "eth2", Up: false, Addrs: ips("10.2.0.2")}
	docker := ifaceInfo{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")}
	bare := ifaceInfo{Name: "ifb0", Up: true}

	tests := []struct {
		name    string
		spec    string
		family  int
		ifs     []ifaceInfo
		wantIP  string
		wantIf  string
		wantErr []string
	}{
		{"default skips lo and docker", "", 0, []ifaceInfo{lo, docker, eth1}, "10.1.0.2", "eth1", nil},
		{"default spec written out", DefaultIfName, 0, []ifaceInfo{lo, eth1, ib}, "10.1.0.2", "eth1", nil},
		{"down interface skipped", "", 0, []ifaceInfo{lo, down, ib}, "192.168.0.7", "ib0", nil},
		{"interface without address skipped", "", 0, []ifaceInfo{bare, eth1}, "10.1.0.2", "eth1", nil},
		{"IPv4 preferred within an interface", "", 0, []ifaceInfo{eth0}, "10.0.0.2", "eth0", nil},
		{"IPv4 preferred over an earlier IPv6-only interface", "", 0, []ifaceInfo{eth6, eth1}, "10.1.0.2", "eth1", nil},
		{"global IPv6 when no IPv4", "", 0, []ifaceInfo{lo, eth6}, "2001:db8::6", "eth6", nil},
		{"family 6 skips link-local", "", 6, []ifaceInfo{eth0}, "fd00::2", "eth0", nil},
		{"family 6 prefers global over earlier link-local", "", 6, []ifaceInfo{ll, eth6}, "2001:db8::6", "eth6", nil},
		{"link-local only as last resort", "", 6, []ifaceInfo{lo, ll}, "fe80::9", "eth9", nil},
		{"family 4 ignores IPv6-only", "", 4, []ifaceInfo{eth6, ib}, "192.168.0.7", "ib0", nil},
		{"prefix list keeps system order", "ib,eth", 0, []ifaceInfo{eth1, ib}, "10.1.0.2", "eth1", nil},
		{"prefix list selects", "ib", 0, []ifaceInfo{eth1, ib}, "192.168.0.7", "ib0", nil},
		{"exact match", "=eth1", 0, []ifaceInfo{eth0, eth1}, "10.1.0.2", "eth1", nil},
		{"exclude exact", "^=eth0", 0, []ifaceInfo{eth0, eth1}, "10.1.0.2", "eth1", nil},
		{"explicit lo", "lo", 0, []ifaceInfo{lo, eth1}, "127.0.0.1", "lo", nil},
		{"default falls back to docker", "", 0, []ifaceInfo{lo, docker}, "172.17.0.1", "docker0", nil},
		{"default falls back to loopback", "", 0, []ifaceInfo{lo, bare, down}, "127.0.0.1", "lo", nil},
		{"default falls back to IPv6 loopback", "", 6, []ifaceInfo{lo}, "::1", "lo", nil},
		{"explicit spec matching nothing lists interfaces", "=ib0", 0, []ifaceInfo{lo, eth1, down},
			"", "", []string{`FLAGCX_SOCKET_IFNAME="=ib0"`, "lo (up: 127.0.0.1, ::1)", "eth1 (up: 10.1.0.2)", "eth2 (down: 10.2.0.2)", `"=eth1"`}},
		{"explicit spec with wrong family", "eth1", 6, []ifaceInfo{lo, eth1},
			"", "", []string{"eth1", "IPv6", "AF_INET6"}},
		{"nothing at all", "", 0, nil, "", "", []string{"interfaces here: none"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := selectInterface(tc.spec, tc.family, tc.ifs, "", nil)
			ip, name := c.IP, c.Name
			if tc.wantErr != nil {
				require.Error(t, err)
				require.ErrorIs(t, err, wire.ErrConfig)
				for _, s := range tc.wantErr {
					require.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantIP, ip.String())
			require.Equal(t, tc.wantIf, name)
		})
	}
}

// TestSelectInterfaceByRoute: the interface holding the kernel's source
// address toward the rendezvous wins over one ahead of it by index, when
// FLAGCX_SOCKET_IFNAME allows it.
func TestSelectInterfaceByRoute(t *testing.T) {
	lo := ifaceInfo{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1", "::1")}
	decoy := ifaceInfo{Name: "dcy0", Up: true, Addrs: ips("10.198.0.1")}
	eth0 := ifaceInfo{Name: "eth0", Up: true, Addrs: ips("fe80::1", "10.199.0.2")}
	eth6 := ifaceInfo{Name: "eth6", Up: true, Addrs: ips("2001:db8::6")}
	ifs := []ifaceInfo{lo, decoy, eth0, eth6}
	const rdv = "10.199.0.1:29317"
	tests := []struct {
		name, spec     string
		family         int
		src            string
		wantIP, wantIf string
		wantWhy        string
	}{
		{"route beats index", "", 0, "10.199.0.2", "10.199.0.2", "eth0", "the route to the rendezvous " + rdv},
		{"no route: first by index", "", 0, "", "10.198.0.1", "dcy0", `the first up interface FLAGCX_SOCKET_IFNAME="^lo,docker" allows`},
		{"route over loopback: first by index", "", 0, "127.0.0.1", "10.198.0.1", "dcy0", "the first up interface"},
		{"explicit lo follows the route", "lo", 0, "127.0.0.1", "127.0.0.1", "lo", "the route to the rendezvous"},
		{"FLAGCX_SOCKET_IFNAME overrides the route", "=dcy0", 0, "10.199.0.2", "10.198.0.1", "dcy0", "the first up interface"},
		{"excluded by FLAGCX_SOCKET_IFNAME", "^lo,dcy,eth0", 0, "10.199.0.2", "2001:db8::6", "eth6", "the first up interface"},
		{"source on no interface", "", 0, "10.5.5.5", "10.198.0.1", "dcy0", "the first up interface"},
		{"source of the wrong family", "", 4, "2001:db8::6", "10.198.0.1", "dcy0", "the first up interface"},
		{"IPv6 route", "", 0, "2001:db8::6", "2001:db8::6", "eth6", "the route to the rendezvous"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var src net.IP
			if tc.src != "" {
				src = net.ParseIP(tc.src)
			}
			c, err := selectInterface(tc.spec, tc.family, ifs, rdv, src)
			require.NoError(t, err)
			require.Equal(t, tc.wantIP, c.IP.String())
			require.Equal(t, tc.wantIf, c.Name)
			require.Contains(t, c.Why, tc.wantWhy)
		})
	}
}

// TestRouteSource: the kernel's route to a loopback address leaves from
// loopback; what does not resolve or parse has no source.
func TestRouteSource(t *testing.T) {
	require.Equal(t, "127.0.0.1", routeSource("127.0.0.1:29317", 0).String())
	require.Equal(t, "127.0.0.1", routeSource("127.0.0.1:0", 4).String())
	require.Nil(t, routeSource("", 0))
	require.Nil(t, routeSource("no-port", 0))
	require.Nil(t, routeSource("127.0.0.1:1", 6))

	cfg := DefaultConfig()
	cfg.IfName, cfg.Rendezvous = "lo", "127.0.0.1:29317"
	ip, name, err := LocalAddr(cfg)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", ip.String())
	require.Equal(t, "lo", name)
	require.Contains(t, ifaceNote(cfg), `this rank uses interface lo (127.0.0.1, the route to the rendezvous 127.0.0.1:29317); set FLAGCX_SOCKET_IFNAME to choose another (now "lo")`)
}

func TestLocalAddrOnThisMachine(t *testing.T) {
	ip, name, err := LocalAddr(DefaultConfig())
	require.NoError(t, err)
	require.NotEmpty(t, name)
	require.False(t, ip.IsUnspecified())
	t.Logf("LocalAddr picked %s on %s", ip, name)

	cfg := DefaultConfig()
	cfg.IfName = "=no-such-interface-here"
	_, _, err = LocalAddr(cfg)
	require.ErrorIs(t, err, wire.ErrConfig)
	require.Contains(t, err.Error(), "interfaces here:")
}
