// Package loader finds, checks and drives vendor plugins: shared objects
// that export the C table of sdk/include/flagcx_plugin.h. It uses purego,
// never cgo.
//
//	loaded, _ := loader.LoadAll(loader.Options{Dir: "build/plugins", Emulated: true})
//	for _, l := range loaded {
//		if l.Err != nil { fmt.Println("skipped:", l.Err); continue }
//		n, _ := l.Plugin.DeviceCount()
//	}
//
// Device memory, streams, events and communicators are C handles (uintptr
// or types over uintptr); Go memory is only passed to an entry for the
// duration of the call, never kept by C.
//
// Besides loading (discover.go, open.go: a file that is not a usable
// plugin is an *OpenError saying why) and the typed entries (plugin.go,
// device.go, ccl.go, over the ABI structs of abi.go, v1 to v5), it probes
// plugins in child processes under a deadline, so that a plugin that
// crashes or hangs while loading costs one line of a listing (probe.go),
// keeps the call record that tells a local launcher which plugin call a
// crashed rank was in (callrecord.go), and passes the plugins' log lines
// to internal/base/flog (log.go).
package loader

import (
	"fmt"
	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ebitengine/purego"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk"
)

// Caps are the static capability bits of a plugin table.
type Caps uint64

const (
	CapDevice Caps = 1 << 0 // FLAGCX_PLUGIN_CAP_DEVICE: device runtime entries
	CapCCL    Caps = 1 << 1 // FLAGCX_PLUGIN_CAP_CCL: collective library entries
)

func (c Caps) String() string {
	var s []string
	if c&CapDevice != 0 {
		s = append(s, "device")
	}
	if c&CapCCL != 0 {
		s = append(s, "ccl")
	}
	return strings.Join(s, "+")
}

// LibrarySpec is a vendor library a plugin loads at init, as its table
// declares it.
type LibrarySpec struct {
	Role     string   // "runtime", "ccl", "management"
	EnvVar   string   // a path in it overrides the plugin's search
	Sonames  []string // candidates, in the order the plugin tries them
	Optional bool     // the plugin works, reduced, without it
}

// LibraryStatus is what init found for one library.
type LibraryStatus struct {
	LibrarySpec
	Loaded   bool
	Emulated bool   // a flagcx vendorsim build, not the vendor's library
	Path     string // where it was loaded from (or what was tried)
	Version  string // the vendor's version, "" when unknown
	Error    string // why it did not load
}

// Info is what the plugin reported at init.
type Info struct {
	Emulated  bool // at least one loaded vendor library is an emulator
	DataTypes []sdk.DataType
	RedOps    []sdk.RedOp
	Libraries []LibraryStatus
}

// Plugin is one opened plugin file.
type Plugin struct {
	Name       string // from the table: "nvidia"
	Vendor     string // "NVIDIA": the cluster key
	Version    string // the plugin's own version text
	Path       string // the file
	ABIVersion int    // table version it was loaded through
	Caps       Caps
	Libraries  []LibrarySpec

	handle uintptr
	t      tableV5
	fn     boundFuncs

	mu          sync.Mutex  // serializes Init and Fini
	initialized atomic.Bool // read on every device call
	info        Info
	typeMask    uint32
	opMask      uint32
	checkPtrs   bool
}

// boundFuncs are the cold-path entries bound with purego.RegisterFunc
// (typed, but slower a call); hot-path entries are called through
// purego.SyscallN on the raw pointers in p.t, the cheaper call
// (docs/performance.md, "Figures that were in comments (issue 41)"). A nil
// func is a NULL entry.
type boundFuncs struct {
	init             func(logFn, logCtx uintptr, info *pluginInfoV1) int32
	fini             func() int32
	getLastError     func() uintptr
	getDeviceCount   func(count *int32) int32
	setDevice        func(dev int32) int32
	getDeviceInfo    func(dev int32, info *deviceInfoV1) int32
	getLinkInfo      func(a, b int32, link *linkInfoV1) int32
	memGetInfo       func(dev int32, free, total *uintptr) int32
	deviceMalloc     func(dev int32, ptr *uintptr, bytes uintptr) int32
	deviceFree       func(ptr uintptr) int32
	hostMalloc       func(ptr *uintptr, bytes uintptr) int32
	hostFree         func(ptr uintptr) int32
	streamCreate     func(dev int32, s *uintptr) int32
	eventCreate      func(dev int32, e *uintptr) int32
	eventElapsedTime func(ms *float32, start, end uintptr) int32
	getUniqueIDBytes func(bytes *uintptr) int32
	getUniqueID      func(id *byte) int32
	commInitRank     func(comm *uintptr, nranks int32, id *byte, rank, dev int32) int32
	commDestroy      func(comm uintptr) int32
	commAbort        func(comm uintptr) int32
	commGetAsyncErr  func(comm uintptr, asyncErr *int32) int32
	getErrorString   func(r int32) uintptr
}

// bind registers every non-NULL cold entry (bindN: a NULL entry's func
// stays nil).
func (p *Plugin) bind() {
	t, f := &p.t, &p.fn
	bind3(&f.init, t.Init)
	bind0(&f.fini, t.Fini)
	bind0(&f.getLastError, t.GetLastError)
	if p.Caps&CapDevice != 0 {
		d := &t.Device
		bind1(&f.getDeviceCount, d.GetDeviceCount)
		bind1(&f.setDevice, d.SetDevice)
		bind2(&f.getDeviceInfo, d.GetDeviceInfo)
		bind3(&f.getLinkInfo, d.GetLinkInfo)
		bind3(&f.memGetInfo, d.MemGetInfo)
		bind3(&f.deviceMalloc, d.DeviceMalloc)
		bind1(&f.deviceFree, d.DeviceFree)
		bind2(&f.hostMalloc, d.HostMalloc)
		bind1(&f.hostFree, d.HostFree)
		bind2(&f.streamCreate, d.StreamCreate)
		bind2(&f.eventCreate, d.EventCreate)
		bind3(&f.eventElapsedTime, d.EventElapsedTime)
	} else {
		t.Device = deviceV5{} // entries of an undeclared group are never called
	}
	if p.Caps&CapCCL != 0 {
		c := &t.CCL
		bind1(&f.getUniqueIDBytes, c.GetUniqueIDBytes)
		bind1(&f.getUniqueID, c.GetUniqueID)
		bind5(&f.commInitRank, c.CommInitRank)
		bind1(&f.commDestroy, c.CommDestroy)
		bind1(&f.commAbort, c.CommAbort)
		bind2(&f.commGetAsyncErr, c.CommGetAsyncError)
		bind1(&f.getErrorString, c.GetErrorString)
	} else {
		t.CCL = cclV1{}
	}
}

// Entry is one entry of a plugin's table.
type Entry struct {
	Group    string // "device" or "ccl"
	Name     string // the C field: "pointerKind", "hostRegister"
	Optional bool   // the plugin may leave it NULL
	Provided bool   // the plugin's table sets it
}

// Entries lists the entries of the groups the plugin declares (caps), in
// table order of the newest ABI: an older table does not provide the newer
// versions' entries (v1: hostRegister, hostUnregister, memGetInfo,
// reduceLocal; v2: memGetInfo, reduceLocal; v3: reduceLocal).
func (p *Plugin) Entries() []Entry {
	var out []Entry
	for _, g := range []struct {
		name  string
		cap   Caps
		table any
	}{{"device", CapDevice, &p.t.Device}, {"ccl", CapCCL, &p.t.CCL}} {
		if p.Caps&g.cap == 0 {
			continue
		}
		v := reflect.ValueOf(g.table).Elem()
		for i := range v.NumField() {
			name, opt, _ := strings.Cut(v.Type().Field(i).Tag.Get("c"), ",")
			out = append(out, Entry{Group: g.name, Name: name, Optional: opt == "optional", Provided: v.Field(i).Uint() != 0})
		}
	}
	return out
}

// ---- Errors -------------------------------------------------------------

// CallError is a failing plugin entry: which plugin, which entry, the
// result code (errors.Is works with the sdk sentinels) and the message the
// plugin recorded, which quotes the vendor's own error string.
type CallError struct {
	Plugin  string
	Entry   string
	Result  sdk.Result
	Message string
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("plugin %s: %s: %s", e.Plugin, e.Entry, e.Result)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Result.Err() }

// errorf makes a CallError that the loader itself raises (bad argument,
// entry not provided, dtype outside the plugin's mask).
func (p *Plugin) errorf(entry string, r sdk.Result, format string, args ...any) error {
	return &CallError{Plugin: p.Name, Entry: entry, Result: r, Message: fmt.Sprintf(format, args...)}
}

func (p *Plugin) unsupported(entry string) error {
	return p.errorf(entry, sdk.NotSupported, "the plugin does not provide this entry (NULL in its table)")
}

// result turns an entry's return value into an error. It must run on the
// OS thread that made the call: getLastError is per thread. Callers hold
// runtime.LockOSThread across the call and this.
func (p *Plugin) result(entry string, r int32) error {
	if r == 0 {
		return nil
	}
	msg := ""
	if p.fn.getLastError != nil {
		msg = cmem.GoString(p.fn.getLastError())
	}
	return &CallError{Plugin: p.Name, Entry: entry, Result: sdk.Result(r), Message: msg}
}

// sys calls an entry through purego.SyscallN, pinned to the OS thread until
// its error message is read. Its arguments may be Go pointers converted in
// the call (uintptr(unsafe.Pointer(&x))): uintptrescapes keeps them alive and
// in place, at the price of one allocation per call.
//
//go:uintptrescapes
func (p *Plugin) sys(entry string, fn uintptr, args ...uintptr) error {
	return p.syscall(entry, fn, args)
}

// sysHandles is sys for entries whose arguments are only handles, device or
// pinned addresses and numbers, never Go memory: the collectives, stream and
// event calls. It allocates nothing, so the latency path brings no garbage
// and no GC pauses.
func (p *Plugin) sysHandles(entry string, fn uintptr, args ...uintptr) error {
	return p.syscall(entry, fn, args)
}

// argBufs recycles the argument arrays handed to purego.SyscallN: its
// argument slice escapes (for the sake of other platforms), so passing the
// caller's variadic slice would allocate on every call.
var argBufs = sync.Pool{New: func() any { return new([16]uintptr) }}

func (p *Plugin) syscall(entry string, fn uintptr, args []uintptr) error {
	if fn == 0 {
		return p.unsupported(entry)
	}
	buf := argBufs.Get().(*[16]uintptr)
	if len(args) > len(buf) {
		return p.errorf(entry, sdk.InternalError, "%d arguments, more than the %d a call can take", len(args), len(buf))
	}
	n := copy(buf[:], args)
	runtime.LockOSThread()
	slot := enterCall(fn) // the launcher names the call if the rank dies in it
	r1, _, _ := purego.SyscallN(fn, buf[:n]...)
	leaveCall(slot)
	err := p.result(entry, int32(r1))
	runtime.UnlockOSThread()
	argBufs.Put(buf)
	return err
}

// ---- Init and emulation -----------------------------------------------

// Environment variables the loader reads (declared in internal/base/env).
var (
	EnvPluginDir    = env.PluginDir.Name    // where libflagcx-<name>.so files live
	EnvPluginPrefix = env.PluginFile.Prefix // FLAGCX_PLUGIN_<NAME>=path|none
	EnvVendorsimDir = env.VendorsimDir.Name // root of emulated runtimes: <dir>/<name>/
	EnvEmulated     = env.Emulated.Name     // 1/true/yes: as --emulated
	EnvDebug        = env.Debug.Name        // WARN, INFO, TRACE: plugin log lines (internal/base/flog)
)

// EmulatedFromEnv reports whether FLAGCX_EMULATED asks for emulated vendor
// runtimes.
func EmulatedFromEnv() bool {
	// Anything but a yes is no, as before the registry: --emulated (kong
	// reads the same variable) reports a malformed value.
	on, err := env.Emulated.Get(nil)
	return on && err == nil
}

// InitOptions configure Plugin.Init.
type InitOptions struct {
	// Emulated loads the vendorsim builds of the plugin's libraries (from
	// VendorsimDir/<name>/) instead of the vendor's.
	Emulated bool
	// VendorsimDir is the root of the emulated runtimes; "" means
	// FLAGCX_VENDORSIM_DIR, else <plugin file's dir>/../vendorsim.
	VendorsimDir string
	// Log receives the plugin's log lines; nil logs them through the
	// process's logger (internal/base/flog): shown at the level FLAGCX_DEBUG
	// asks for (nothing when unset), on stderr or in FLAGCX_DEBUG_FILE.
	Log LogFunc
}

// VendorsimDir is where emulated runtimes for p are looked up.
func (p *Plugin) VendorsimDir(root string) string {
	if root == "" {
		root, _ = env.VendorsimDir.Raw(nil)
	}
	if root == "" {
		root = filepath.Join(filepath.Dir(p.Path), "..", "vendorsim")
	}
	return filepath.Join(root, p.Name)
}

// Init loads the plugin's vendor libraries. With Emulated it first points
// each library's environment variable at the vendorsim build, and fails
// unless every library loaded is an emulator. Calling Init again after a
// success returns the same result.
func (p *Plugin) Init(o InitOptions) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized.Load() {
		if err := p.initLocked(o); err != nil {
			return err
		}
		p.initialized.Store(true)
	}
	if o.Emulated && !p.info.Emulated {
		return p.errorf("init", sdk.InvalidUsage,
			"emulated vendor runtimes were requested, but the plugin was already initialized with the real ones in this process")
	}
	return nil
}

func (p *Plugin) initLocked(o InitOptions) error {
	if o.Emulated {
		restore, err := p.pointAtVendorsim(o.VendorsimDir)
		if err != nil {
			return err
		}
		defer restore()
	}
	var ci pluginInfoV1
	logCtx := registerLog(p.Name, o.Log)
	runtime.LockOSThread()
	err := p.result("init", p.fn.init(logCallback(), logCtx, &ci))
	runtime.UnlockOSThread()
	p.info = p.readInfo(&ci)
	if err != nil {
		return err
	}
	p.typeMask, p.opMask = ci.DataTypeMask, ci.RedOpMask
	p.checkPtrs = p.t.Device.PointerKind != 0
	if o.Emulated {
		for _, l := range p.info.Libraries {
			if l.Loaded && !l.Emulated {
				return p.errorf("init", sdk.InvalidUsage,
					"emulation was requested, but %s library %s is not a vendorsim build (it lacks flagcxVendorsimEmulated): rebuild build/vendorsim (make) or fix %s",
					l.Role, l.Path, EnvVendorsimDir)
			}
		}
	}
	return nil
}

// pointAtVendorsim sets each library's environment variable to its
// vendorsim build for the duration of init and returns what restores them.
func (p *Plugin) pointAtVendorsim(root string) (func(), error) {
	dir := p.VendorsimDir(root)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, p.errorf("init", sdk.InvalidUsage,
			"emulated vendor runtimes for %s not found in %s: run make (it builds build/vendorsim/%s) or set %s", p.Name, dir, p.Name, EnvVendorsimDir)
	}
	if len(p.Libraries) == 0 {
		return nil, p.errorf("init", sdk.NotSupported, "the plugin declares no vendor libraries, so it cannot be emulated")
	}
	type saved struct {
		key, val string
		had      bool
	}
	var olds []saved
	restore := func() {
		for _, s := range olds {
			if s.had {
				os.Setenv(s.key, s.val)
			} else {
				os.Unsetenv(s.key)
			}
		}
	}
	for _, l := range p.Libraries {
		path := ""
		for _, name := range l.Sonames {
			if c := filepath.Join(dir, filepath.Base(name)); fileExists(c) {
				path = c
				break
			}
		}
		if path == "" && !l.Optional {
			restore()
			return nil, p.errorf("init", sdk.InvalidUsage, "no vendorsim build of %s library %s in %s: run make or set %s",
				l.Role, strings.Join(l.Sonames, " / "), dir, EnvVendorsimDir)
		}
		if path == "" { // optional and not emulated: make sure the real one is not picked up instead
			path = filepath.Join(dir, filepath.Base(l.Sonames[0]))
		}
		old, had := os.LookupEnv(l.EnvVar)
		olds = append(olds, saved{l.EnvVar, old, had})
		os.Setenv(l.EnvVar, path)
	}
	return restore, nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

func (p *Plugin) readInfo(ci *pluginInfoV1) Info {
	info := Info{Emulated: ci.Emulated != 0}
	for _, t := range sdk.AllDataTypes() {
		if ci.DataTypeMask&(1<<uint(t)) != 0 {
			info.DataTypes = append(info.DataTypes, t)
		}
	}
	for _, o := range sdk.AllRedOps() {
		if ci.RedOpMask&(1<<uint(o)) != 0 {
			info.RedOps = append(info.RedOps, o)
		}
	}
	n := int(ci.NumLibraries)
	n = max(0, min(n, maxLibraries))
	for i := range n {
		s := &ci.Libraries[i]
		st := LibraryStatus{Loaded: s.Loaded != 0, Emulated: s.Emulated != 0,
			Path: cmem.String(s.Path[:]), Version: cmem.String(s.Version[:]), Error: cmem.String(s.Error[:])}
		if i < len(p.Libraries) {
			st.LibrarySpec = p.Libraries[i]
		}
		info.Libraries = append(info.Libraries, st)
	}
	return info
}

// Initialized reports whether Init succeeded.
func (p *Plugin) Initialized() bool { return p.initialized.Load() }

// Info is what the last Init reported (also after a failed Init: which
// libraries loaded and why the others did not).
func (p *Plugin) Info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info
}

// Emulated reports whether the plugin runs on emulated vendor libraries.
// Everything that prints results of such a plugin must say "emulated".
func (p *Plugin) Emulated() bool { return p.Info().Emulated }

// Fini releases what init acquired (a plugin without fini: nothing to do).
// No other entry may be called afterwards.
func (p *Plugin) Fini() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized.Swap(false) || p.fn.fini == nil {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return p.result("fini", p.fn.fini())
}

// SupportsDataType reports whether the plugin's CCL accepts t.
func (p *Plugin) SupportsDataType(t sdk.DataType) bool {
	return t.Valid() && p.typeMask&(1<<uint(t)) != 0
}

// SupportsRedOp reports whether the plugin's CCL accepts o.
func (p *Plugin) SupportsRedOp(o sdk.RedOp) bool { return o.Valid() && p.opMask&(1<<uint(o)) != 0 }

// SetPointerChecks turns the pointer-kind checks of the collectives on or
// off (on by default when the plugin has pointerKind). Each check is one
// plugin call per buffer.
func (p *Plugin) SetPointerChecks(on bool) { p.checkPtrs = on && p.t.Device.PointerKind != 0 }

func (p *Plugin) String() string {
	return fmt.Sprintf("%s (%s, ABI v%d, %s)", p.Name, p.Vendor, p.ABIVersion, p.Path)
}
