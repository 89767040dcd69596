// Package topo is the PCI topology of a host as the host network sees it:
// how far an accelerator is from each RDMA device, so that every rank
// takes the device nearest to its accelerator. It reads sysfs and nothing
// else of this module.
package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Choosing the RDMA device nearest to a rank's accelerator. Data between an
// accelerator and a NIC crosses the PCIe tree; the fewer bridges and host
// bridges on the way, the less it competes with other traffic, so each rank
// takes the NIC closest to its device (ranks on different GPUs of one host
// spread over their nearest NICs), as NCCL's topology search does.
//
// Both ends are sysfs paths of PCI functions, e.g.
//
//	/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0
//
// where pci0000:00 is a root complex (host bridge) and every further
// element a bridge or the function itself. The selection below works on
// these strings only, so it is tested without a sysfs.

// pciLevel is how far apart two PCI functions are, closest first.
type pciLevel int

const (
	pciSwitch  pciLevel = iota // below one bridge under a root complex: a PCIe switch (NCCL's PIX/PXB)
	pciRoot                    // the same root complex, different root ports (PHB)
	pciNUMA                    // different root complexes of one NUMA node (NODE)
	pciSystem                  // across NUMA nodes, or NUMA nodes not known (SYS)
	pciUnknown                 // a function without a sysfs path
)

func (l pciLevel) String() string {
	switch l {
	case pciSwitch:
		return "same PCIe switch"
	case pciRoot:
		return "same root complex"
	case pciNUMA:
		return "same NUMA node"
	case pciSystem:
		return "across the system"
	}
	return "PCI location not known"
}

// Loc is one PCI function: its sysfs path ("" when unknown) and NUMA
// node (-1 when unknown).
type Loc struct {
	Path string
	NUMA int
}

// Distance orders pairs of functions: by level, then by the bridges
// between them. Bridges count only within one root complex: across root
// complexes the way goes through the CPUs, whatever the depth (Hops 0).
type Distance struct {
	Level pciLevel
	Hops  int
}

func (d Distance) less(o Distance) bool {
	if d.Level != o.Level {
		return d.Level < o.Level
	}
	return d.Hops < o.Hops
}

func (d Distance) String() string {
	if d.Level >= pciNUMA {
		return d.Level.String()
	}
	return fmt.Sprintf("%s, %d hops", d.Level, d.Hops)
}

// unknownDistance is the distance to or from a function without a path.
var unknownDistance = Distance{Level: pciUnknown}

// pciElements are the elements of a sysfs path below its "devices"
// directory ("pci0000:00", "0000:00:01.0", ...); nil when it has none.
func pciElements(path string) []string {
	parts := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	for i, p := range parts {
		if p == "devices" && i+1 < len(parts) && strings.HasPrefix(parts[i+1], "pci") {
			return parts[i+1:]
		}
	}
	return nil
}

// pciPathDistance is how far apart a and b are. Functions in different
// root complexes are one NUMA node's when both nodes are known and equal.
func pciPathDistance(a, b Loc) Distance {
	ea, eb := pciElements(a.Path), pciElements(b.Path)
	if len(ea) == 0 || len(eb) == 0 {
		return unknownDistance
	}
	common := 0
	for common < len(ea) && common < len(eb) && ea[common] == eb[common] {
		common++
	}
	hops := len(ea) - common + len(eb) - common
	switch {
	case common >= 2:
		return Distance{pciSwitch, hops}
	case common == 1:
		return Distance{pciRoot, hops}
	case a.NUMA >= 0 && a.NUMA == b.NUMA:
		return Distance{Level: pciNUMA}
	}
	return Distance{Level: pciSystem}
}

// Candidate is one device of the network plugin, as the choice sees it.
type Candidate struct {
	Name      string
	SpeedMbps int
	Loc       Loc
}

// Nearest is the index of the candidate closest to near; ties go to
// the faster device, then to the first name in byte order. Without a
// location for near (a host rank, or an accelerator sysfs does not know)
// it is the first candidate. It also returns that candidate's distance.
func Nearest(cands []Candidate, near Loc) (int, Distance) {
	if len(cands) == 0 {
		return -1, unknownDistance
	}
	if near.Path == "" {
		return 0, unknownDistance
	}
	best, bestD := 0, pciPathDistance(near, cands[0].Loc)
	for i := 1; i < len(cands); i++ {
		d := pciPathDistance(near, cands[i].Loc)
		c, b := cands[i], cands[best]
		switch {
		case d.less(bestD):
		case bestD.less(d):
			continue
		case c.SpeedMbps > b.SpeedMbps:
		case c.SpeedMbps < b.SpeedMbps:
			continue
		case c.Name < b.Name:
		default:
			continue
		}
		best, bestD = i, d
	}
	return best, bestD
}

// ---- from bus ids and sysfs to locations ---------------------------------

// sysfsRoot is where the kernel's sysfs is mounted.
const sysfsRoot = "/sys"

// LocOfPath is the location of a NIC's sysfs path as the plugin gives
// it; the NUMA node comes from the function's numa_node file.
func LocOfPath(path string) Loc {
	return Loc{Path: path, NUMA: readNUMA(path)}
}

// LocOfBusID is the location of an accelerator from its PCI bus id
// ("0000:1b:00.0"): the real path of /sys/bus/pci/devices/<id>. With the
// emulated fabric the emulated board's tree is used instead (the emulated
// accelerators are not in sysfs).
func LocOfBusID(busID string, emulated bool) Loc {
	busID = canonicalBusID(busID)
	if busID == "" {
		return Loc{NUMA: -1}
	}
	if emulated {
		return Loc{Path: emulatedPCIPath(busID), NUMA: -1}
	}
	p, err := filepath.EvalSymlinks(filepath.Join(sysfsRoot, "bus", "pci", "devices", busID))
	if err != nil {
		return Loc{NUMA: -1}
	}
	return LocOfPath(p)
}

// canonicalBusID writes a PCI bus id as sysfs names it, "0000:1b:00.0",
// whatever the source wrote ("00000000:1B:00.0" as nvidia-smi does); ""
// when it is not one.
func canonicalBusID(id string) string {
	var domain, bus, slot, fn uint32
	var rest string
	n, _ := fmt.Sscanf(strings.TrimSpace(id), "%x:%x:%x.%x%s", &domain, &bus, &slot, &fn, &rest)
	if n != 4 || bus > 0xff || slot > 0x1f || fn > 7 || domain > 0xffff {
		return ""
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, slot, fn)
}

func readNUMA(path string) int {
	if path == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(path, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// emulatedRoot is the prefix of the emulated board's PCI paths: not a
// sysfs, so nothing reads files below it.
const emulatedRoot = "/vsim/sys/devices"

// emulatedPCIPath places an emulated accelerator in the emulated board's
// PCIe tree (conformance/vendorsim/README.md, "Devices"): device i sits at
// bus 0x10+i, devices 2k and 2k+1 share the switch of bus 0x40+k, the
// switches of devices 0-3 hang off root complex pci0000:00 and the others
// off pci0000:80. The emulated HCAs are placed in the same tree
// (conformance/vendorsim/ibverbs/ibverbs.c). "" for a bus id outside it.
func emulatedPCIPath(busID string) string {
	var domain, bus, slot, fn int
	if n, err := fmt.Sscanf(busID, "%x:%x:%x.%x", &domain, &bus, &slot, &fn); n != 4 || err != nil || domain != 0 || bus < 0x10 || bus >= 0x40 {
		return ""
	}
	dev := bus - 0x10
	root := "pci0000:00"
	if dev >= 4 {
		root = "pci0000:80"
	}
	rb := root[len("pci0000:"):]
	sw := 0x40 + dev/2
	return fmt.Sprintf("%s/%s/0000:%s:%02x.0/0000:%02x:00.0/0000:%02x:%02x.0/%s", emulatedRoot, root, rb, 1+dev/2, sw, sw, 0x80+dev%2, busID)
}
