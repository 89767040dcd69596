package topo

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An HGX-like host: two root complexes (NUMA 0 and 1), GPUs and NICs in
// pairs under PCIe switches.
const (
	gpu0 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"
	nic0 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
	gpu1 = "/sys/devices/pci0000:00/0000:00:02.0/0000:11:00.0/0000:12:00.0/0000:13:00.0"
	nic1 = "/sys/devices/pci0000:00/0000:00:02.0/0000:11:00.0/0000:12:01.0/0000:14:00.0"
	// a NIC straight on a root port of the first root complex
	nicRP = "/sys/devices/pci0000:00/0000:00:03.0/0000:21:00.0"
	// a second root complex of NUMA node 0, and one of node 1
	nicRC2  = "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0"
	gpuNUMA = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0"
	nicNUMA = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0"
	// a deeper switch below nic0's switch
	nicDeep = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"
)

func TestPCIPathDistance(t *testing.T) {
	cases := []struct {
		name string
		a, b Loc
		want Distance
	}{
		{"one switch", Loc{gpu0, 0}, Loc{nic0, 0}, Distance{pciSwitch, 4}},
		{"one switch, deeper", Loc{gpu0, 0}, Loc{nicDeep, 0}, Distance{pciSwitch, 6}},
		{"root complex", Loc{gpu0, 0}, Loc{nic1, 0}, Distance{pciRoot, 8}},
		{"root complex, root port", Loc{gpu0, 0}, Loc{nicRP, 0}, Distance{pciRoot, 6}},
		{"NUMA node", Loc{gpu0, 0}, Loc{nicRC2, 0}, Distance{Level: pciNUMA}},
		{"other NUMA node", Loc{gpu0, 0}, Loc{nicNUMA, 1}, Distance{Level: pciSystem}},
		{"NUMA unknown", Loc{gpu0, -1}, Loc{nicRC2, -1}, Distance{Level: pciSystem}},
		{"itself", Loc{gpu0, 0}, Loc{gpu0, 0}, Distance{pciSwitch, 0}},
		{"no path", Loc{"", -1}, Loc{nic0, 0}, unknownDistance},
		{"not below /sys/devices", Loc{"/dev/null", -1}, Loc{nic0, 0}, unknownDistance},
		{"trailing slash", Loc{gpu0 + "/", 0}, Loc{nic0, 0}, Distance{pciSwitch, 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pciPathDistance(tc.a, tc.b))
			require.Equal(t, tc.want, pciPathDistance(tc.b, tc.a), "symmetric")
		})
	}
}

func TestPCIDistanceOrder(t *testing.T) {
	ordered := []Distance{{pciSwitch, 2}, {pciSwitch, 6}, {pciRoot, 4}, {pciNUMA, 0}, {pciSystem, 0}, unknownDistance}
	for i := range ordered {
		for j := range ordered {
			require.Equal(t, i < j, ordered[i].less(ordered[j]), "%v < %v", ordered[i], ordered[j])
		}
	}
	require.True(t, Distance{pciSystem, 99}.less(unknownDistance))
	require.False(t, unknownDistance.less(Distance{pciSystem, 99}))
	require.Equal(t, "same PCIe switch, 4 hops", Distance{pciSwitch, 4}.String())
	require.Equal(t, "same NUMA node", Distance{Level: pciNUMA}.String())
	require.Equal(t, "PCI location not known", unknownDistance.String())
}

func TestNearestNet(t *testing.T) {
	mlx := func(name, path string, numa, speed int) Candidate {
		return Candidate{Name: name, SpeedMbps: speed, Loc: Loc{path, numa}}
	}
	host := []Candidate{
		mlx("mlx5_0", nic0, 0, 400000), mlx("mlx5_1", nic1, 0, 400000), mlx("mlx5_2", nicNUMA, 1, 400000),
	}
	cases := []struct {
		name     string
		cands    []Candidate
		near     Loc
		want     int
		wantDist Distance
	}{
		{"GPU 0 takes the NIC of its switch", host, Loc{gpu0, 0}, 0, Distance{pciSwitch, 4}},
		{"GPU 1 takes the NIC of its switch", host, Loc{gpu1, 0}, 1, Distance{pciSwitch, 4}},
		{"a GPU of the other socket takes its NIC", host, Loc{gpuNUMA, 1}, 2, Distance{pciSwitch, 4}},
		{"the order of the list does not matter",
			[]Candidate{host[2], host[1], host[0]}, Loc{gpu0, 0}, 2, Distance{pciSwitch, 4}},
		{"host rank: the first device", host, Loc{"", -1}, 0, unknownDistance},
		{"accelerator sysfs does not know: the first device", []Candidate{host[1], host[0]}, Loc{"", -1}, 0, unknownDistance},
		{"only one device (FLAGCX_IB_HCA named it), however far",
			[]Candidate{host[2]}, Loc{gpu0, 0}, 0, Distance{Level: pciSystem}},
		{"FLAGCX_IB_HCA left the far ones: nearest of those",
			[]Candidate{host[2], host[1]}, Loc{gpu0, 0}, 1, Distance{pciRoot, 8}},
		{"same distance: the faster",
			[]Candidate{mlx("mlx5_0", nic0, 0, 200000), mlx("mlx5_1", nic0, 0, 400000)}, Loc{gpu0, 0}, 1, Distance{pciSwitch, 4}},
		{"same level, fewer hops beats speed",
			[]Candidate{mlx("mlx5_0", nic1, 0, 400000), mlx("mlx5_1", nicRP, 0, 100000)}, Loc{gpu0, 0}, 1, Distance{pciRoot, 6}},
		{"same distance and speed: the first name",
			[]Candidate{mlx("mlx5_3", nic0, 0, 400000), mlx("mlx5_10", nic0, 0, 400000)}, Loc{gpu0, 0}, 1, Distance{pciSwitch, 4}},
		{"a NIC without a path loses to any known one",
			[]Candidate{mlx("mlx5_0", "", -1, 400000), mlx("mlx5_1", nicNUMA, 1, 100000)}, Loc{gpu0, 0}, 1, Distance{Level: pciSystem}},
		{"no NIC has a path: the fastest, then the first name",
			[]Candidate{mlx("b", "", -1, 100000), mlx("c", "", -1, 400000), mlx("a", "", -1, 400000)}, Loc{gpu0, 0}, 2, unknownDistance},
		{"NUMA node beats system",
			[]Candidate{mlx("mlx5_0", nicNUMA, 1, 400000), mlx("mlx5_1", nicRC2, 0, 100000)}, Loc{gpu0, 0}, 1, Distance{Level: pciNUMA}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, d := Nearest(tc.cands, tc.near)
			require.Equal(t, tc.want, got, "chose %s", tc.cands[got].Name)
			require.Equal(t, tc.wantDist, d)
		})
	}
	got, _ := Nearest(nil, Loc{gpu0, 0})
	require.Equal(t, -1, got)
}

// The emulated board (conformance/vendorsim/README.md): pairs of devices
// share a switch with, for devices 0-1 and 2-3, an emulated HCA.
func TestEmulatedPCIPath(t *testing.T) {
	ib0 := emulatedRoot + "/pci0000:00/0000:00:01.0/0000:40:00.0/0000:40:82.0/0000:60:00.0"
	ib1 := emulatedRoot + "/pci0000:00/0000:00:02.0/0000:41:00.0/0000:41:82.0/0000:61:00.0"
	roce := emulatedRoot + "/pci0000:c0/0000:c0:01.0/0000:c1:00.0"
	cands := []Candidate{{"vsim_ib0", 200000, Loc{ib0, -1}}, {"vsim_roce0", 200000, Loc{roce, -1}}, {"vsim_ib1", 200000, Loc{ib1, -1}}}
	cases := []struct {
		bus  string
		path string
		want string
	}{
		{"0000:10:00.0", emulatedRoot + "/pci0000:00/0000:00:01.0/0000:40:00.0/0000:40:80.0/0000:10:00.0", "vsim_ib0"},
		{"0000:11:00.0", emulatedRoot + "/pci0000:00/0000:00:01.0/0000:40:00.0/0000:40:81.0/0000:11:00.0", "vsim_ib0"},
		{"0000:12:00.0", emulatedRoot + "/pci0000:00/0000:00:02.0/0000:41:00.0/0000:41:80.0/0000:12:00.0", "vsim_ib1"},
		{"0000:13:00.0", emulatedRoot + "/pci0000:00/0000:00:02.0/0000:41:00.0/0000:41:81.0/0000:13:00.0", "vsim_ib1"},
		{"0000:14:00.0", emulatedRoot + "/pci0000:80/0000:80:03.0/0000:42:00.0/0000:42:80.0/0000:14:00.0", "vsim_ib0"},
		{"0000:17:00.0", emulatedRoot + "/pci0000:80/0000:80:04.0/0000:43:00.0/0000:43:81.0/0000:17:00.0", "vsim_ib0"},
		{"0000:0f:00.0", "", "vsim_ib0"},
		{"0001:10:00.0", "", "vsim_ib0"},
		{"not a bus id", "", "vsim_ib0"},
	}
	for _, tc := range cases {
		t.Run(tc.bus, func(t *testing.T) {
			loc := LocOfBusID(tc.bus, true)
			require.Equal(t, tc.path, loc.Path)
			i, _ := Nearest(cands, loc)
			require.Equal(t, tc.want, cands[i].Name)
		})
	}
}

func TestCanonicalBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:1b:00.0": "0000:1b:00.0", "00000000:1B:00.0": "0000:1b:00.0", " 0000:3B:1F.7\n": "0000:3b:1f.7",
		"1:2:3.4": "0001:02:03.4", "": "", "0000:1b:00": "", "0000:1b:00.0x": "", "0000:1b:20.0": "", "0000:1b:00.8": "",
		"10000:1b:00.0": "", "0000:100:00.0": "", "mlx5_0": "",
	} {
		require.Equal(t, want, canonicalBusID(in), "%q", in)
	}
}

func TestPCILocOfBusID(t *testing.T) {
	require.Equal(t, Loc{NUMA: -1}, LocOfBusID("", false))
	require.Equal(t, Loc{NUMA: -1}, LocOfBusID("ffff:ff:1f.7", false), "a bus id sysfs does not have")
	require.Equal(t, Loc{NUMA: -1}, LocOfPath(""))
}

// TestPCILocOfBusIDInSysfs resolves every PCI function of this machine
// (when it has a sysfs): each lands below /sys/devices, ends in its own bus
// id, and is at distance "same PCIe switch, 0 hops" from itself.
func TestPCILocOfBusIDInSysfs(t *testing.T) {
	entries, err := os.ReadDir(sysfsRoot + "/bus/pci/devices")
	if err != nil || len(entries) == 0 {
		t.Skip("no PCI functions in sysfs here")
	}
	for _, e := range entries {
		loc := LocOfBusID("0000"+strings.ToUpper(e.Name()), false) // as nvidia-smi writes it
		el := pciElements(loc.Path)
		require.NotEmpty(t, el, "%s resolves to %q", e.Name(), loc.Path)
		require.Equal(t, e.Name(), el[len(el)-1])
		require.True(t, strings.HasPrefix(el[0], "pci"), "%s: %v", e.Name(), el)
		require.GreaterOrEqual(t, loc.NUMA, -1)
		require.Equal(t, Distance{pciSwitch, 0}, pciPathDistance(loc, loc))
		t.Logf("%s: %s (NUMA %d)", e.Name(), loc.Path, loc.NUMA)
	}
}
