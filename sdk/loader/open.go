package loader

import (
	"debug/elf"
	"errors"
	"fmt"
	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"os"
	"reflect"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flagcx/flagcx-go/sdk"
)

// Why a file is not a usable plugin. An *OpenError wraps one of these (and
// sdk.ErrInvalidUsage).
var (
	ErrNotSharedObject = errors.New("not a shared object")
	ErrNoTable         = errors.New("no plugin table")
	ErrUnknownABI      = errors.New("unknown plugin ABI version")
	ErrBadTable        = errors.New("malformed plugin table")
	ErrLoadFailed      = errors.New("dlopen failed")
)

// OpenError says which plugin file is unusable, what is wrong with it and
// what to do about it.
type OpenError struct {
	Path    string
	Problem string
	Hint    string
	Err     error // one of the Err* sentinels above
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("plugin file %s: %s; %s", e.Path, e.Problem, e.Hint)
}

func (e *OpenError) Unwrap() []error { return []error{e.Err, sdk.ErrInvalidUsage} }

const rebuildHint = "rebuild it against this SDK's sdk/include/flagcx_plugin.h"

// probe is one table version this build can load, newest first; adapt
// turns an older table into the newest, its new entries NULL (as NCCL's
// net-plugin shims do).
type probe struct {
	symbol  string
	version uint32
	size    uintptr
	adapt   func(addr uintptr) tableV5
}

var probes = []probe{
	{"flagcxVendorPlugin_v5", 5, unsafe.Sizeof(tableV5{}), func(addr uintptr) tableV5 { return *(*tableV5)(cmem.Ptr(addr)) }},
	{"flagcxVendorPlugin_v4", 4, unsafe.Sizeof(tableV4{}), func(addr uintptr) tableV5 { return fromV4(*(*tableV4)(cmem.Ptr(addr))) }},
	{"flagcxVendorPlugin_v3", 3, unsafe.Sizeof(tableV3{}), func(addr uintptr) tableV5 { return fromV4(fromV3(*(*tableV3)(cmem.Ptr(addr)))) }},
	{"flagcxVendorPlugin_v2", 2, unsafe.Sizeof(tableV2{}), func(addr uintptr) tableV5 { return fromV4(fromV3(fromV2(*(*tableV2)(cmem.Ptr(addr))))) }},
	{"flagcxVendorPlugin_v1", 1, unsafe.Sizeof(tableV1{}), func(addr uintptr) tableV5 { return fromV4(fromV3(fromV1(*(*tableV1)(cmem.Ptr(addr))))) }},
}

// KnownABIVersions lists the table versions this build loads, newest first.
func KnownABIVersions() []int {
	v := make([]int, len(probes))
	for i, p := range probes {
		v[i] = int(p.version)
	}
	return v
}

// Open loads a plugin file and checks its table, without initializing it
// (no vendor library is loaded yet: see Init). Every problem is an
// *OpenError; a file that is not a plugin is never dlopen'ed, so its
// constructors never run. A file libflagcx-<name>.so whose table says
// another name is warned about on stderr, once per process.
func Open(path string) (*Plugin, error) {
	bad := func(sentinel error, problem, hint string) error {
		return &OpenError{Path: path, Problem: problem, Hint: hint, Err: sentinel}
	}
	pr, symSize, err := checkELF(path)
	if err != nil {
		var oe *OpenError
		if errors.As(err, &oe) {
			return nil, err
		}
		return nil, bad(ErrNotSharedObject, err.Error(), "check the path")
	}

	dl := path
	if !strings.Contains(path, "/") { // dlopen would search the library path for a bare name
		dl = "./" + path
	}
	h, err := purego.Dlopen(dl, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, bad(ErrLoadFailed, "dlopen failed: "+err.Error(),
			"install the libraries it links against, or rebuild it (vendor plugins should dlopen their runtime at init, not link it)")
	}
	addr, err := purego.Dlsym(h, pr.symbol)
	if err != nil || addr == 0 {
		_ = purego.Dlclose(h)
		return nil, bad(ErrNoTable, "dlsym("+pr.symbol+") failed", rebuildHint)
	}
	if symSize < uint64(unsafe.Sizeof(tableHeader{})) {
		_ = purego.Dlclose(h)
		return nil, bad(ErrBadTable, fmt.Sprintf("symbol %s is only %d bytes, not a plugin table", pr.symbol, symSize), rebuildHint)
	}
	hdr := *(*tableHeader)(cmem.Ptr(addr))
	if hdr.ABIVersion != pr.version {
		_ = purego.Dlclose(h)
		return nil, abiMismatch(path, pr, hdr.ABIVersion)
	}
	if uintptr(hdr.Size) != pr.size || symSize < uint64(pr.size) {
		_ = purego.Dlclose(h)
		return nil, bad(ErrBadTable, fmt.Sprintf("table %s has size field %d (symbol %d bytes), but an ABI v%d table is %d bytes: the plugin was built against a different flagcx_plugin.h",
			pr.symbol, hdr.Size, symSize, pr.version, pr.size), rebuildHint)
	}
	t := pr.adapt(addr)
	p := &Plugin{
		Path:       path,
		ABIVersion: int(pr.version),
		Name:       cmem.GoString(t.Name),
		Vendor:     cmem.GoString(t.Vendor),
		Version:    cmem.GoString(t.Version),
		Caps:       Caps(t.Caps),
		handle:     h,
		t:          t,
	}
	if problem := validate(p); problem != "" {
		_ = purego.Dlclose(h)
		return nil, bad(ErrBadTable, problem, rebuildHint)
	}
	p.Libraries = readLibraries(t.Libraries)
	p.bind()
	p.recordEntries()
	if w := fileNameWarning(path, p.Name); w != "" {
		warnOnce(w)
	}
	return p, nil
}

// abiMismatch is the error of a table whose abiVersion field differs
// from the version its symbol names. A version this build loads under
// another symbol is a plugin built against mismatched headers, not one
// from the future: saying "does not know" of a version it loads would
// contradict itself.
func abiMismatch(path string, pr probe, v uint32) error {
	known := false
	for _, k := range probes {
		known = known || k.version == v
	}
	if known {
		return &OpenError{Path: path, Err: ErrUnknownABI,
			Problem: fmt.Sprintf("table %s says abiVersion %d, but a table exported as %s must say %d (an ABI v%d table is exported as flagcxVendorPlugin_v%d)",
				pr.symbol, v, pr.symbol, pr.version, v, v),
			Hint: rebuildHint + " (FLAGCX_PLUGIN_ABI_VERSION and the table's symbol come from the same header)"}
	}
	return &OpenError{Path: path, Err: ErrUnknownABI,
		Problem: fmt.Sprintf("table %s says abiVersion %d, which this build of flagcx-go does not know (it loads versions %v)",
			pr.symbol, v, KnownABIVersions()),
		Hint: rebuildHint + ", or use a flagcx-go release that knows version " + fmt.Sprint(v)}
}

// checkELF reads the file's dynamic symbols: it must be an ELF shared
// object for this machine that exports a table symbol we know. It returns
// the newest such probe and the symbol's size.
func checkELF(path string) (probe, uint64, error) {
	bad := func(sentinel error, problem, hint string) (probe, uint64, error) {
		return probe{}, 0, &OpenError{Path: path, Problem: problem, Hint: hint, Err: sentinel}
	}
	st, err := os.Stat(path)
	if err != nil {
		return bad(ErrNotSharedObject, "cannot read it: "+err.Error(), "check the path (plugin dir or FLAGCX_PLUGIN_<NAME>)")
	}
	if st.IsDir() {
		return bad(ErrNotSharedObject, "is a directory", "remove it from the plugin dir")
	}
	f, err := elf.Open(path)
	if err != nil {
		return bad(ErrNotSharedObject, "is not a shared object (no ELF header: "+err.Error()+")",
			"remove it from the plugin dir, or build it with cc -shared -fPIC")
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return bad(ErrNotSharedObject, "is an ELF "+f.Type.String()+", not a shared object", "build it with cc -shared -fPIC")
	}
	if want := elfMachine(); want != elf.EM_NONE && f.Machine != want {
		return bad(ErrNotSharedObject, fmt.Sprintf("is built for %s, this process is %s", f.Machine, want), "build it for this machine")
	}
	syms, _ := f.DynamicSymbols()
	have := make(map[string]uint64, len(syms))
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			have[s.Name] = s.Size
		}
	}
	for _, pr := range probes {
		if size, ok := have[pr.symbol]; ok {
			return pr, size, nil
		}
	}
	names := make([]string, len(probes))
	for i, pr := range probes {
		names[i] = pr.symbol
	}
	var older []string
	for name := range have {
		if strings.HasPrefix(name, "flagcxVendorPlugin_v") {
			older = append(older, name)
		}
	}
	problem := "does not export " + strings.Join(names, " or ")
	if len(older) > 0 {
		problem += " (it exports " + strings.Join(older, ", ") + ", a table version this build does not know)"
	}
	return bad(ErrNoTable, problem, "it is not a flagcx-go vendor plugin: remove it from the plugin dir, or "+rebuildHint)
}

func elfMachine() elf.Machine {
	switch runtime.GOARCH {
	case "amd64":
		return elf.EM_X86_64
	case "arm64":
		return elf.EM_AARCH64
	case "ppc64le":
		return elf.EM_PPC64
	case "riscv64":
		return elf.EM_RISCV
	case "loong64":
		return elf.EM_LOONGARCH
	}
	return elf.EM_NONE
}

// validate checks the names and that every required entry of each group
// the plugin claims is set. It returns "" or what is wrong.
func validate(p *Plugin) string {
	switch {
	case p.Name == "":
		return "table has no name"
	case p.Vendor == "":
		return "table has no vendor string"
	case p.t.Init == 0:
		return "required entry init is NULL"
	case p.t.GetLastError == 0:
		return "required entry getLastError is NULL"
	case p.Caps&(CapDevice|CapCCL) == 0:
		return "caps declares neither FLAGCX_PLUGIN_CAP_DEVICE nor FLAGCX_PLUGIN_CAP_CCL"
	}
	var missing []string
	if p.Caps&CapDevice != 0 {
		missing = append(missing, missingEntries("device", &p.t.Device)...)
	}
	if p.Caps&CapCCL != 0 {
		missing = append(missing, missingEntries("ccl", &p.t.CCL)...)
	}
	if len(missing) > 0 {
		return "required entries are NULL: " + strings.Join(missing, ", ")
	}
	return ""
}

func missingEntries(group string, entries any) []string {
	v := reflect.ValueOf(entries).Elem()
	var out []string
	for i := range v.NumField() {
		name, opt, _ := strings.Cut(v.Type().Field(i).Tag.Get("c"), ",")
		if opt != "optional" && v.Field(i).Uint() == 0 {
			out = append(out, group+"."+name)
		}
	}
	return out
}

func readLibraries(addr uintptr) []LibrarySpec {
	var out []LibrarySpec
	for i := 0; addr != 0 && i < 16; i++ {
		l := *(*libraryV1)(unsafe.Add(cmem.Ptr(addr), uintptr(i)*unsafe.Sizeof(libraryV1{})))
		if l.Role == 0 {
			break
		}
		out = append(out, LibrarySpec{
			Role:     cmem.GoString(l.Role),
			EnvVar:   cmem.GoString(l.EnvVar),
			Sonames:  strings.Split(cmem.GoString(l.Sonames), ":"),
			Optional: l.Optional != 0,
		})
	}
	return out
}
