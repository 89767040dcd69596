// Package plugincmd prints the `flagcx plugins` and `flagcx devices`
// listings: which vendor plugins are found and whether their vendor
// runtimes load, and which devices (and links between them) each loadable
// plugin sees. Anything running on emulated vendor runtimes says so.
package plugincmd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// load runs discovery; dir "" means the default (FLAGCX_PLUGIN_DIR, ...).
// A dir the user named that does not exist is an error; a missing default
// is only noted.
func load(w io.Writer, dir string, emulated bool) (string, []loader.Loaded, error) {
	named := dir != ""
	if dir == "" {
		dir = loader.DefaultDir()
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	emulated = emulated || loader.EmulatedFromEnv()
	all, err := loader.LoadAll(loader.Options{Dir: dir, Emulated: emulated})
	mode := "the vendors' own"
	if emulated {
		mode = "emulated (vendorsim), as requested"
	}
	if _, werr := fmt.Fprintf(w, "plugin dir %s; vendor runtimes: %s\n", dir, mode); werr != nil {
		return dir, nil, werr
	}
	if err != nil && (named || !errors.Is(err, fs.ErrNotExist)) {
		if named && errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %v", sdk.ErrInvalidArgument, err)
		}
		return dir, all, err
	}
	if err != nil {
		fmt.Fprintf(w, "note: %v\n", err)
	}
	return dir, all, nil
}

// Plugins writes one row per plugin found (name, vendor, ABI version,
// whether its vendor runtime loads, file), then each plugin's vendor
// libraries, or why the file is not a usable plugin. Problems with single
// plugins are part of the listing, not errors.
func Plugins(w io.Writer, dir string, emulated bool) error {
	dir, all, err := load(w, dir, emulated)
	if err != nil {
		return err
	}
	if len(all) == 0 {
		_, err := fmt.Fprintf(w, "no plugins found (files libflagcx-<name>.so in %s, or %s<NAME>=path; `make` builds build/plugins)\n",
			dir, loader.EnvPluginPrefix)
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVENDOR\tABI\tVENDOR RUNTIME\tFILE")
	for _, l := range all {
		vendor, abi, status := "-", "-", "invalid plugin file"
		if p := l.Plugin; p != nil {
			vendor, abi = p.Vendor, fmt.Sprintf("v%d", p.ABIVersion)
			switch {
			case !l.OK():
				status = "does not load"
			case p.Emulated():
				status = "loads (emulated)"
			default:
				status = "loads"
			}
		}
		file := l.Path
		if l.Source != "plugin dir" {
			file += " (from " + l.Source + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Name, vendor, abi, status, file)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range all {
		fmt.Fprintln(w)
		if l.Plugin == nil {
			fmt.Fprintf(w, "%s: skipped: %v\n", l.Name, l.Err)
			continue
		}
		writeLibraries(w, l)
	}
	return nil
}

func writeLibraries(w io.Writer, l loader.Loaded) {
	p := l.Plugin
	info := p.Info()
	head := fmt.Sprintf("%s: %s plugin %s, ABI v%d, %s", l.Name, p.Vendor, p.Version, p.ABIVersion, p.Caps)
	if info.Emulated {
		head += ", EMULATED vendor runtimes (vendorsim, not the vendor's libraries)"
	}
	fmt.Fprintln(w, head)
	if l.Err != nil {
		fmt.Fprintf(w, "  does not load: %v\n", l.Err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var reasons []string
	for i, spec := range p.Libraries {
		st := loader.LibraryStatus{LibrarySpec: spec}
		if i < len(info.Libraries) {
			st = info.Libraries[i]
		}
		state, where := "missing", "-"
		switch {
		case st.Loaded && st.Emulated:
			state, where = "emulated", st.Path
		case st.Loaded:
			state, where = "loaded", st.Path
		case st.Optional:
			state = "missing (optional)"
		}
		if why := st.Error; !st.Loaded && (l.Err == nil || !strings.Contains(l.Err.Error(), why)) {
			if why == "" {
				why = "not tried (an earlier library failed)"
			}
			reasons = append(reasons, fmt.Sprintf("  %s: %s", spec.Role, why))
		}
		version := st.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t[%s]\n", spec.Role, spec.Sonames[0], state, version, where, spec.EnvVar)
	}
	tw.Flush()
	for _, r := range reasons {
		fmt.Fprintln(w, r)
	}
	if l.OK() && p.Caps&loader.CapCCL != 0 {
		fmt.Fprintf(w, "  collectives: data types %s; ops %s\n", names(info.DataTypes, len(sdk.AllDataTypes())), names(info.RedOps, len(sdk.AllRedOps())))
	}
}

func names[T fmt.Stringer](v []T, all int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = x.String()
	}
	if len(v) == all {
		return "all (" + strings.Join(s, " ") + ")"
	}
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// Devices writes, for each plugin whose vendor runtime loads, its devices
// (name, PCI bus id, memory, NUMA node, UUID) and the link matrix between
// them. It fails when no plugin could list devices.
func Devices(w io.Writer, dir string, emulated bool) error {
	dir, all, err := load(w, dir, emulated)
	if err != nil {
		return err
	}
	listed := 0
	var skipped []string
	for _, l := range all {
		if !l.OK() {
			skipped = append(skipped, l.Name)
			continue
		}
		p := l.Plugin
		if p.Caps&loader.CapDevice == 0 {
			continue
		}
		fmt.Fprintln(w)
		if err := writeDevices(w, p); err != nil {
			fmt.Fprintf(w, "  error: %v\n", err)
			continue
		}
		listed++
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nskipped (run `flagcx plugins` to see why): %s\n", strings.Join(skipped, ", "))
	}
	if listed == 0 {
		return fmt.Errorf("%w: no plugin in %s could list devices (run `flagcx plugins` to see why; build them with make)", sdk.ErrSystemError, dir)
	}
	return nil
}

func writeDevices(w io.Writer, p *loader.Plugin) error {
	n, err := p.DeviceCount()
	if err != nil {
		fmt.Fprintf(w, "%s (%s)\n", p.Name, p.Vendor)
		return err
	}
	head := fmt.Sprintf("%s (%s): %d device(s)", p.Name, p.Vendor, n)
	if p.Emulated() {
		head += ", emulated (vendorsim), not hardware"
	}
	fmt.Fprintln(w, head)
	if n == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  DEV\tNAME\tPCI BUS ID\tMEMORY\tNUMA\tUUID")
	for d := range n {
		di, err := p.DeviceInfo(d)
		if err != nil {
			fmt.Fprintf(tw, "  %d\terror: %v\n", d, err)
			continue
		}
		numa := "-"
		if di.NUMANode >= 0 {
			numa = fmt.Sprint(di.NUMANode)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", d, di.Name, di.PCIBusID, bytesText(di.TotalMemory), numa, dash(di.UUID))
	}
	tw.Flush()
	return writeLinks(w, p, n)
}

// writeLinks prints the matrix as nvidia-smi topo -m does.
func writeLinks(w io.Writer, p *loader.Plugin, n int) error {
	if n < 2 {
		return nil
	}
	if _, err := p.Link(0, 0); errors.Is(err, sdk.ErrNotSupported) {
		fmt.Fprintln(w, "  links: not reported by this plugin")
		return nil
	}
	fmt.Fprintln(w, "  links:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  ")
	for b := range n {
		fmt.Fprintf(tw, "\tD%d", b)
	}
	fmt.Fprintln(tw)
	seen := map[loader.LinkType]bool{}
	for a := range n {
		fmt.Fprintf(tw, "  D%d", a)
		for b := range n {
			l, err := p.Link(a, b)
			label := l.Name
			if err != nil || label == "" {
				label = "?"
			}
			seen[l.Type] = true
			fmt.Fprintf(tw, "\t%s", label)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	var legend []string
	for _, t := range []loader.LinkType{loader.LinkFabric, loader.LinkSameSwitch, loader.LinkHostBridge, loader.LinkNumaNode, loader.LinkSystem, loader.LinkUnknown} {
		if seen[t] {
			legend = append(legend, linkLegend[t])
		}
	}
	if len(legend) > 0 {
		fmt.Fprintf(w, "  legend: X self; %s\n", strings.Join(legend, "; "))
	}
	return nil
}

var linkLegend = map[loader.LinkType]string{
	loader.LinkFabric:     "NV<n>/fabric: vendor fabric with n links",
	loader.LinkSameSwitch: "PIX/PXB: PCIe switch(es)",
	loader.LinkHostBridge: "PHB: through a host bridge",
	loader.LinkNumaNode:   "NODE: across host bridges of one NUMA node",
	loader.LinkSystem:     "SYS: across NUMA nodes",
	loader.LinkUnknown:    "unknown: the runtime cannot tell (e.g. no NVML)",
}

func bytesText(b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
