// Package plugincmd prints the `flagcx plugins` and `flagcx devices`
// listings: which vendor plugins are found and whether their vendor
// runtimes load, and which devices (and links between them) each loadable
// plugin sees. Anything running on emulated vendor runtimes says so. Each
// plugin is loaded in a probe process of its own, so a plugin that crashes
// or hangs is one line of the listing, naming its file.
package plugincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Options configure the listings.
type Options struct {
	Dir      string // "" means the default (FLAGCX_PLUGIN_DIR, ...)
	Emulated bool
	// Probe is the command that starts a probe process: a program that
	// calls loader.ServeProbe when loader.IsProbeChild (flagcx: plugins
	// --probe). Each plugin is loaded there, not in this process, so one
	// that crashes or hangs is reported instead of ending the listing.
	Probe []string
	// Timeout bounds each plugin's probe; 0 means loader.DefaultProbeTimeout.
	// TimeoutHint says how users change it.
	Timeout     time.Duration
	TimeoutHint string
	// Stderr receives what the plugins print themselves (and their log
	// lines at the FLAGCX_DEBUG level); nil discards it.
	Stderr io.Writer
}

// load probes every plugin. A dir the user named that does not exist is
// an error; a missing default is only noted.
func load(w io.Writer, o Options, devices bool) (string, []loader.Probed, error) {
	dir := o.Dir
	named := dir != ""
	if dir == "" {
		dir = loader.DefaultDir()
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	emulated := o.Emulated || loader.EmulatedFromEnv()
	if len(o.Probe) == 0 {
		return dir, nil, errors.New("plugincmd.Options.Probe is empty: the command that starts a probe process is needed")
	}
	mode := "the vendors' own"
	if emulated {
		mode = "emulated (vendorsim), as requested"
	}
	// Before the probes, which may take up to their deadline.
	if _, werr := fmt.Fprintf(w, "plugin dir %s; vendor runtimes: %s\n", dir, mode); werr != nil {
		return dir, nil, werr
	}
	all, err := loader.ProbeAll(context.Background(), loader.ProbeOptions{
		Options: loader.Options{Dir: dir, Emulated: emulated},
		Command: o.Probe, Devices: devices, Timeout: o.Timeout, TimeoutHint: o.TimeoutHint, Output: o.Stderr,
	})
	if err != nil && (named || !errors.Is(err, fs.ErrNotExist)) {
		if named && errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		return dir, all, err
	}
	if err != nil {
		fmt.Fprintf(w, "note: %v\n", err)
	}
	return dir, all, nil
}

// probeFailures is the error of a listing in which plugins crashed, hung
// or answered garbage while being probed: the listing itself went on, and
// says how each failed.
func probeFailures(all []loader.Probed) error {
	var bad []string
	for _, l := range all {
		if l.Failure != "" {
			bad = append(bad, fmt.Sprintf("%s (%s)", l.Name, status(l)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s failed while being probed (the listing above says how; it would fail whatever loads it): %s<NAME>=none skips a plugin",
		sdk.ErrSystemError, strings.Join(bad, ", "), loader.EnvPluginPrefix)
}

// status is a plugin's VENDOR RUNTIME column.
func status(l loader.Probed) string {
	switch {
	case l.Failure == loader.ProbeCrashed:
		return "crashed"
	case l.Failure == loader.ProbeHung:
		return "hung"
	case l.Failure == loader.ProbeExited:
		return "exited"
	case l.Failure != "":
		return "probe failed"
	case l.Plugin == nil:
		return "invalid plugin file"
	case !l.OK():
		return "does not load"
	case l.Plugin.Emulated():
		return "loads (emulated)"
	}
	return "loads"
}

// Plugins writes one row per plugin found (name, vendor, ABI version,
// whether its vendor runtime loads, file), then each plugin's vendor
// libraries, or why the file is not a usable plugin. A plugin that is not
// usable (a bad file, a missing vendor library) is part of the listing, not
// an error; one that crashed, hung or answered garbage while being probed
// is listed too, and then makes the error: it would take down whatever
// loads it.
func Plugins(w io.Writer, o Options) error {
	dir, all, err := load(w, o, false)
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
		vendor, abi := "-", "-"
		if p := l.Plugin; p != nil {
			vendor, abi = p.Vendor, fmt.Sprintf("v%d", p.ABIVersion)
		}
		file := l.Path
		if l.Source != "plugin dir" {
			file += " (from " + l.Source + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Name, vendor, abi, status(l), file)
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
	return probeFailures(all)
}

func writeLibraries(w io.Writer, l loader.Probed) {
	p := l.Plugin
	info := p.Info
	head := fmt.Sprintf("%s: %s plugin %s, ABI v%d, %s", l.Name, p.Vendor, p.Version, p.ABIVersion, p.Caps)
	if info.Emulated {
		head += ", EMULATED vendor runtimes (vendorsim, not the vendor's libraries)"
	}
	fmt.Fprintln(w, head)
	for _, warn := range l.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	if l.Err != nil {
		fmt.Fprintf(w, "  does not load: %v\n", l.Err)
	}
	if l.Failure != "" {
		return // init never reported on its libraries
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
// them. It fails when no plugin could list devices, and, after the
// listing, when a plugin crashed, hung or answered garbage while being
// probed.
func Devices(w io.Writer, o Options) error {
	dir, all, err := load(w, o, true)
	if err != nil {
		return err
	}
	listed := 0
	var skipped []string
	for _, l := range all {
		if l.Failure != "" {
			fmt.Fprintf(w, "\n%s: %v\n", l.Name, l.Err)
			continue
		}
		if !l.OK() {
			skipped = append(skipped, l.Name)
			continue
		}
		p := l.Plugin
		if p.Caps&loader.CapDevice == 0 || l.Devices == nil {
			continue
		}
		fmt.Fprintln(w)
		if writeDevices(w, l) {
			listed++
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nskipped (run `flagcx plugins` to see why): %s\n", strings.Join(skipped, ", "))
	}
	if err := probeFailures(all); err != nil {
		return err
	}
	if listed == 0 {
		next := "run `flagcx plugins` to see why; build them with make"
		if !o.Emulated && !loader.EmulatedFromEnv() {
			next += "; without the vendors' libraries, --emulated lists emulated devices"
		}
		return fmt.Errorf("%w: no plugin in %s could list devices (%s)", sdk.ErrSystemError, dir, next)
	}
	return nil
}

// writeDevices prints one plugin's devices; false when it could not count
// them.
func writeDevices(w io.Writer, l loader.Probed) bool {
	p, r := l.Plugin, l.Devices
	if r.Err != "" {
		fmt.Fprintf(w, "%s (%s)\n  error: %s\n", l.Name, p.Vendor, r.Err)
		return false
	}
	head := fmt.Sprintf("%s (%s): %d device(s)", l.Name, p.Vendor, r.Count)
	if p.Emulated() {
		head += ", emulated (vendorsim), not hardware"
	}
	fmt.Fprintln(w, head)
	for _, warn := range l.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	if r.Count == 0 {
		return true
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  DEV\tNAME\tPCI BUS ID\tMEMORY\tNUMA\tUUID")
	for d, di := range r.Devices {
		if di.Err != "" {
			fmt.Fprintf(tw, "  %d\terror: %s\n", d, di.Err)
			continue
		}
		numa := "-"
		if di.NUMANode >= 0 {
			numa = fmt.Sprint(di.NUMANode)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", d, di.Name, di.PCIBusID, bytesText(di.TotalMemory), numa, dash(di.UUID))
	}
	tw.Flush()
	writeLinks(w, r)
	return true
}

// writeLinks prints the matrix as nvidia-smi topo -m does.
func writeLinks(w io.Writer, r *loader.DeviceReport) {
	if r.Count < 2 {
		return
	}
	if r.LinksNotSupported {
		fmt.Fprintln(w, "  links: not reported by this plugin")
		return
	}
	fmt.Fprintln(w, "  links:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  ")
	for b := range r.Links {
		fmt.Fprintf(tw, "\tD%d", b)
	}
	fmt.Fprintln(tw)
	seen := map[loader.LinkType]bool{}
	for a, row := range r.Links {
		fmt.Fprintf(tw, "  D%d", a)
		for _, l := range row {
			label := l.Name
			if l.Err != "" || label == "" {
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
	return bytesize.Human(int64(b))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
