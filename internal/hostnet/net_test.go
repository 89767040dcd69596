package hostnet

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/netplugin"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/testkit"
)

// useEmulatedIB points this process at the make-built net-ib plugin on the
// emulated verbs (build/vendorsim/ibverbs). The plugin loads once per
// process: tests that need it run in a fresh process (InFreshProcess).
func useEmulatedIB(t *testing.T) {
	t.Helper()
	t.Setenv("FLAGCX_NET_PLUGIN", testkit.BuiltFile(t, "net", "libflagcx-net-ib.so"))
	t.Setenv("FLAGCX_VENDORSIM_DIR", testkit.BuiltFile(t, "vendorsim"))
	testkit.BuiltFile(t, "vendorsim", "ibverbs", "libibverbs.so.1")
	t.Setenv("FLAGCX_EMULATED", "1")
}

// netMesh connects n in-process ranks without shared memory; hosts[r] is
// the host rank r announces ("" keeps this one).
func netMesh(t *testing.T, n int, cfg Config, hosts []string) ([]*Mesh, []error) {
	t.Helper()
	mcs := prepareMesh(t, n, cfg, func(int) shm.ShmConfig { return shm.ShmConfig{Disable: true, Dir: shmTestDir(t)} }, func(r int, p *Peer) {
		p.Shm = ""
		p.NoShm = "disabled"
		if hosts != nil && hosts[r] != "" {
			p.Host = hosts[r]
		}
	})
	for r := range mcs {
		mcs[r].Shm.Disable = true
	}
	return connectAll(t, mcs)
}

func linkTransports(m *Mesh) []string {
	var out []string
	for _, l := range m.Links {
		if l == nil {
			out = append(out, "self")
		} else {
			out = append(out, l.Transport())
		}
	}
	return out
}

func TestNetLinkChoice(t *testing.T) {
	testkit.InFreshProcess(t, func(t *testing.T) {
		useEmulatedIB(t)
		two := []string{"hostA", "hostB"}
		for _, tc := range []struct {
			name  string
			net   string
			hosts []string
			want  []string // rank 0's links
		}{
			{"FLAGCX_NET=IB on one host", NetIB, nil, []string{"self", "ib"}},
			{"automatic on one host keeps TCP", NetAuto, nil, []string{"self", "tcp"}},
			{"automatic between hosts picks IB", NetAuto, two, []string{"self", "ib"}},
			{"Socket between hosts keeps TCP", NetSocket, two, []string{"self", "tcp"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := meshCfg(10 * time.Second)
				cfg.Net = tc.net
				ms, errs := netMesh(t, 2, cfg, tc.hosts)
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
				require.Equal(t, tc.want, linkTransports(ms[0]))
				exchange(t, ms[0].Links[1], ms[1].Links[0], 0, 1, []int{0, 1, 4096})
			})
		}
		require.Contains(t, NetworkSummary(), "emulated IB: net-ib on vsim_ib0 port 1 (InfiniBand, 200 Gb/s")
	})
}

// netSizes cross the chunk boundaries of the staging (netplugin.SlotBytes, with
// the first chunk's 8-byte header) and the pipeline's depth (netplugin.Slots).
var netSizes = []int{0, 1, 7, netplugin.SlotBytes - netplugin.ChunkHeader - 1, netplugin.SlotBytes - netplugin.ChunkHeader, netplugin.SlotBytes - netplugin.ChunkHeader + 1,
	netplugin.SlotBytes, 2*netplugin.SlotBytes - netplugin.ChunkHeader, netplugin.Slots*netplugin.SlotBytes + 3, 3*netplugin.Slots*netplugin.SlotBytes + 12345, 0, 5}

func TestNetLinkMessages(t *testing.T) {
	testkit.InFreshProcess(t, func(t *testing.T) {
		useEmulatedIB(t)
		cfg := meshCfg(20 * time.Second)
		cfg.Net = NetIB
		ms, errs := netMesh(t, 3, cfg, nil)
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
		for a := range 3 {
			for b := a + 1; b < 3; b++ {
				_, ok := ms[a].Links[b].(*NetLink)
				require.True(t, ok, "rank %d -> %d is %T", a, b, ms[a].Links[b])
				exchange(t, ms[a].Links[b], ms[b].Links[a], a, b, netSizes)
			}
		}
	})
}

func TestNetLinkLengthMismatch(t *testing.T) {
	testkit.InFreshProcess(t, func(t *testing.T) {
		useEmulatedIB(t)
		cfg := meshCfg(10 * time.Second)
		cfg.Net = NetIB
		ms, errs := netMesh(t, 2, cfg, nil)
		require.NoError(t, errors.Join(errs...))
		go ms[0].Links[1].Send(make([]byte, 100))
		err := ms[1].Links[0].Recv(make([]byte, 64))
		var le *LengthError
		require.ErrorAs(t, err, &le)
		require.Equal(t, LengthError{Got: 100, Want: 64}, *le)
		require.ErrorIs(t, ms[1].Links[0].Recv(make([]byte, 64)), ErrClosed, "the link is out of step after a length error")
	})
}

func TestNetLinkPeerClosed(t *testing.T) {
	testkit.InFreshProcess(t, func(t *testing.T) {
		useEmulatedIB(t)
		cfg := meshCfg(30 * time.Second)
		cfg.Net = NetIB
		ms, errs := netMesh(t, 2, cfg, nil)
		require.NoError(t, errors.Join(errs...))
		done := make(chan error, 1)
		go func() { done <- ms[0].Links[1].Recv(make([]byte, 10)) }()
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		require.NoError(t, ms[1].Close())
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrClosed)
			require.Less(t, time.Since(start), 5*time.Second)
		case <-time.After(10 * time.Second):
			t.Fatal("a receive from a peer that closed its link did not end")
		}
	})
}

func TestNetRealVerbsWithoutDevice(t *testing.T) {
	testkit.InFreshProcess(t, func(t *testing.T) {
		plugin := testkit.BuiltFile(t, "net", "libflagcx-net-ib.so")
		t.Setenv("FLAGCX_IBVERBS", "")
		t.Setenv("FLAGCX_NET_PLUGIN", plugin)
		cfg := meshCfg(10 * time.Second)
		cfg.Net = NetIB
		err := CheckNet(cfg)
		if err == nil {
			t.Skip("this machine has an RDMA device")
		}
		require.ErrorIs(t, err, ErrNoNetDevice)
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, "FLAGCX_NET=IB: no RDMA device")

		// Automatic: TCP between hosts when there is no device.
		cfg.Net = NetAuto
		ms, errs := netMesh(t, 2, cfg, []string{"hostA", "hostB"})
		require.NoError(t, errors.Join(errs...))
		require.Equal(t, []string{"self", "tcp"}, linkTransports(ms[0]))
		exchange(t, ms[0].Links[1], ms[1].Links[0], 0, 1, []int{0, 3, 70000})
	})
}

func TestNetConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
		err  string
	}{
		{map[string]string{}, NetAuto, ""},
		{map[string]string{"FLAGCX_NET": "ib"}, NetIB, ""},
		{map[string]string{"FLAGCX_NET": "Socket"}, NetSocket, ""},
		{map[string]string{"FLAGCX_NET": "IB", "FLAGCX_FORCE_NET_SOCKET": "1"}, NetSocket, ""},
		{map[string]string{"FLAGCX_NET": "verbs"}, "", "FLAGCX_NET"},
	} {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			cfg, err := tcp.ConfigFromLookup(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.err != "" {
				require.ErrorIs(t, err, ErrConfig)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Net)
		})
	}
}

// TestNetNearDevice: ranks near different emulated accelerators take the
// emulated HCA nearest to theirs (vsim_ib0 shares the switch of the
// accelerators at buses 0x10-0x11, vsim_ib1 that of 0x12-0x13), host ranks
// the first device, and FLAGCX_IB_HCA narrows the choice first. Every pair
// then moves exact data between its two HCAs. Each case loads the plugin,
// which reads FLAGCX_IB_HCA once, in a fresh process.
func TestNetNearDevice(t *testing.T) {
	for _, tc := range []struct {
		name string
		hca  string
		near []string // each rank's accelerator bus id ("" for a host rank)
		want []string // each rank's device
	}{
		{"by accelerator", "", []string{"0000:10:00.0", "0000:12:00.0", "", "0000:13:00.0", "0000:11:00.0"},
			[]string{"vsim_ib0", "vsim_ib1", "vsim_ib0", "vsim_ib1", "vsim_ib0"}},
		{"another socket: the first by name", "", []string{"0000:16:00.0", "0000:12:00.0"}, []string{"vsim_ib0", "vsim_ib1"}},
		{"FLAGCX_IB_HCA names one device", "vsim_ib1", []string{"0000:10:00.0", "0000:12:00.0", ""},
			[]string{"vsim_ib1", "vsim_ib1", "vsim_ib1"}},
		{"FLAGCX_IB_HCA excludes the nearest", "^vsim_ib1", []string{"0000:10:00.0", "0000:12:00.0"},
			[]string{"vsim_ib0", "vsim_ib0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.InFreshProcess(t, func(t *testing.T) {
				useEmulatedIB(t)
				t.Setenv("FLAGCX_IB_HCA", tc.hca)
				cfg := meshCfg(20 * time.Second)
				cfg.Net = NetIB
				n := len(tc.near)
				mcs := prepareMesh(t, n, cfg, func(int) shm.ShmConfig { return shm.ShmConfig{Disable: true, Dir: shmTestDir(t)} }, func(r int, p *Peer) {
					p.Shm, p.NoShm = "", "disabled"
				})
				for r := range mcs {
					mcs[r].Shm.Disable = true
					mcs[r].Net.NearPCI = tc.near[r]
				}
				ms, errs := connectAll(t, mcs)
				require.NoError(t, errors.Join(errs...))
				for r := range n {
					for p := range n {
						if p == r {
							continue
						}
						nl, ok := ms[r].Links[p].(*NetLink)
						require.True(t, ok, "rank %d -> %d is %T", r, p, ms[r].Links[p])
						require.Equal(t, tc.want[r], nl.DeviceName(), "rank %d near %q", r, tc.near[r])
						if p > r {
							exchange(t, ms[r].Links[p], ms[p].Links[r], r, p, []int{0, 1, netplugin.SlotBytes + 5})
						}
					}
				}
			})
		})
	}
}
