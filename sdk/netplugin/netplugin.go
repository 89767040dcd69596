// Package netplugin loads and drives network plugins: shared objects that
// export the C table of sdk/include/flagcx_net.h (plugins/net-ib is one).
// It uses purego, never cgo, in the style of sdk/loader.
//
//	p, _ := netplugin.Open("build/net/libflagcx-net-ib.so")
//	info, _ := p.Init(netplugin.InitOptions{Emulated: true})
//	lc, handle, _ := p.Listen(0)                  // receiver
//	sc, reply, _ := p.Connect(0, handle)          // sender (handle came over bootstrap)
//	rc, _ := lc.Accept(reply)                     // receiver (reply came back)
//
// Buffers handed to RegMr, Isend and Irecv are addresses of memory that Go
// does not move or free behind the plugin's back (mmap'ed staging, C
// memory): never Go heap memory.
package netplugin

import (
	"context"
	"errors"
	"fmt"
	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/sdk"
)

// Symbol is the table symbol of ABI v1.
const Symbol = "flagcxNetPlugin_v1"

// HandleMaxBytes is FLAGCX_NET_HANDLE_MAXSIZE.
const HandleMaxBytes = 256

// Memory types of RegMr (FLAGCX_NET_PTR_*).
const (
	PtrHost   = 0x1
	PtrDevice = 0x2
	PtrDMABuf = 0x4
)

// tableV1 mirrors flagcxNetPlugin_v1_t.
type tableV1 struct {
	Size, ABIVersion uint32
	Name, Version    uintptr
	Init             uintptr
	Devices          uintptr
	GetProperties    uintptr
	Listen           uintptr
	Connect          uintptr
	Accept           uintptr
	RegMr            uintptr
	RegMrDmaBuf      uintptr // optional
	DeregMr          uintptr
	Isend            uintptr
	Irecv            uintptr
	Test             uintptr
	CloseSend        uintptr
	CloseRecv        uintptr
	CloseListen      uintptr
	GetLastError     uintptr
}

// initInfoV1 mirrors flagcxNetInitInfo_v1_t.
type initInfoV1 struct {
	Emulated  int32
	Reserved  int32
	Library   [512]byte
	Transport [32]byte
	Error     [512]byte
}

// propertiesV1 mirrors flagcxNetProperties_v1_t.
type propertiesV1 struct {
	Name       [64]byte
	PCIPath    [256]byte
	GUID       uint64
	PtrSupport int32
	Speed      int32
	Port       int32
	Latency    int32
	MaxComms   int32
	MaxRecvs   int32
	LinkLayer  int32
	GIDIndex   int32
}

// Info is what init reported.
type Info struct {
	Emulated  bool   // the fabric library is a flagcx emulator
	Library   string // the fabric library loaded
	Transport string // "IB", or "emulated IB"
	// NoDevice says why there is no device ("" when there is one).
	NoDevice string
}

// Properties describe one device (flagcxNetProperties_v1_t).
type Properties struct {
	Name       string
	PCIPath    string
	GUID       uint64
	PtrSupport int
	SpeedMbps  int
	Port       int
	LatencyUS  int
	MaxComms   int
	MaxRecvs   int
	LinkLayer  int // 1 InfiniBand, 2 Ethernet (RoCE)
	GIDIndex   int // -1: LID addressing
}

// LinkLayerName is "InfiniBand" or "RoCE".
func (p Properties) LinkLayerName() string {
	if p.LinkLayer == 2 {
		return "RoCE"
	}
	return "InfiniBand"
}

// Plugin is one opened network plugin.
type Plugin struct {
	Path    string
	Name    string // from the table: "IB"
	Version string

	t    tableV1
	info Info
	ndev int
	mu   sync.Mutex
	init bool
}

// Errors of Open.
var (
	ErrNotPlugin = errors.New("not a flagcx network plugin")
	ErrABI       = errors.New("unknown network plugin ABI")
)

// CallError is a failing entry: the result code (errors.Is works with the
// sdk sentinels) and the plugin's message, which quotes the fabric's error.
type CallError struct {
	Plugin, Entry string
	Result        sdk.Result
	Message       string
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("net plugin %s: %s: %s", e.Plugin, e.Entry, e.Result)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Result.Err() }

// Open loads a plugin file and checks its table.
func Open(path string) (*Plugin, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %s: %w (make builds build/net; %s names another file)", ErrNotPlugin, path, err, env.NetPlugin.Name)
	}
	dl := path
	if !strings.Contains(path, "/") {
		dl = "./" + path
	}
	h, err := purego.Dlopen(dl, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: dlopen: %w", ErrNotPlugin, path, err)
	}
	addr, err := purego.Dlsym(h, Symbol)
	if err != nil || addr == 0 {
		_ = purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %s does not export %s", ErrNotPlugin, path, Symbol)
	}
	t := *(*tableV1)(cmem.Ptr(addr))
	if t.ABIVersion != 1 || uintptr(t.Size) != unsafe.Sizeof(tableV1{}) {
		_ = purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %s: table says abiVersion %d, size %d; this build loads version 1 of %d bytes: rebuild it against sdk/include/flagcx_net.h",
			ErrABI, path, t.ABIVersion, t.Size, unsafe.Sizeof(tableV1{}))
	}
	for name, fn := range map[string]uintptr{"init": t.Init, "devices": t.Devices, "getProperties": t.GetProperties, "listen": t.Listen,
		"connect": t.Connect, "accept": t.Accept, "regMr": t.RegMr, "deregMr": t.DeregMr, "isend": t.Isend, "irecv": t.Irecv,
		"test": t.Test, "closeSend": t.CloseSend, "closeRecv": t.CloseRecv, "closeListen": t.CloseListen, "getLastError": t.GetLastError} {
		if fn == 0 {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("%w: %s: required entry %s is NULL", ErrNotPlugin, path, name)
		}
	}
	return &Plugin{Path: path, Name: cmem.GoString(t.Name), Version: cmem.GoString(t.Version), t: t}, nil
}

// InitOptions configure Init.
type InitOptions struct {
	// Emulated points the plugin at the emulated fabric library
	// (VendorsimDir/ibverbs/libibverbs.so.1) and fails unless it loaded.
	Emulated bool
	// VendorsimDir is the emulators' root; "" means FLAGCX_VENDORSIM_DIR,
	// else <plugin dir>/../vendorsim.
	VendorsimDir string
}

// emulatedLibrary is the emulator of the plugin's fabric library, and the
// variable through which the plugin takes its path.
var emulatedLibrary = map[string]struct{ file, envVar string }{
	"IB": {filepath.Join("ibverbs", "libibverbs.so.1"), env.IBVerbs.Name},
}

// Init loads the fabric library. A machine without a device is not an
// error: Info.NoDevice says why, and Devices is 0.
func (p *Plugin) Init(o InitOptions) (Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.init {
		if o.Emulated && !p.info.Emulated {
			return p.info, p.errorf("init", sdk.InvalidUsage, "the emulated fabric was requested, but the plugin was initialized with the real one in this process")
		}
		return p.info, nil
	}
	if o.Emulated {
		lib, ok := emulatedLibrary[p.Name]
		if !ok {
			return Info{}, p.errorf("init", sdk.NotSupported, "there is no emulator for network %s", p.Name)
		}
		root := o.VendorsimDir
		if root == "" {
			root, _ = env.VendorsimDir.Raw(nil)
		}
		if root == "" {
			root = filepath.Join(filepath.Dir(p.Path), "..", "vendorsim")
		}
		path := filepath.Join(root, lib.file)
		if _, err := os.Stat(path); err != nil {
			return Info{}, p.errorf("init", sdk.InvalidUsage, "the emulated fabric library %s is missing: run make (it builds build/vendorsim) or set %s", path, env.VendorsimDir.Name)
		}
		old, had := os.LookupEnv(lib.envVar)
		os.Setenv(lib.envVar, path)
		defer func() {
			if had {
				os.Setenv(lib.envVar, old)
			} else {
				os.Unsetenv(lib.envVar)
			}
		}()
	}
	var ci initInfoV1
	runtime.LockOSThread()
	r1, _, _ := purego.SyscallN(p.t.Init, logCallback(), registerLog(p.Name), uintptr(unsafe.Pointer(&ci)))
	err := p.result("init", r1)
	runtime.UnlockOSThread()
	runtime.KeepAlive(&ci)
	if err != nil {
		return Info{}, err
	}
	p.info = Info{Emulated: ci.Emulated != 0, Library: cmem.String(ci.Library[:]), Transport: cmem.String(ci.Transport[:]), NoDevice: cmem.String(ci.Error[:])}
	if o.Emulated && !p.info.Emulated {
		return p.info, p.errorf("init", sdk.InvalidUsage, "emulation was requested, but %s is not the emulator (it lacks flagcxVendorsimEmulated)", p.info.Library)
	}
	var n int32
	if err := p.call("devices", p.t.Devices, uintptr(unsafe.Pointer(&n))); err != nil {
		return p.info, err
	}
	p.ndev = int(n)
	if p.ndev == 0 && p.info.NoDevice == "" {
		p.info.NoDevice = "no RDMA device: the plugin found none"
	}
	p.init = true
	return p.info, nil
}

// Info is what Init reported.
func (p *Plugin) Info() Info { return p.info }

// Devices is the number of usable devices (ports).
func (p *Plugin) Devices() int { return p.ndev }

// Properties describes device dev.
func (p *Plugin) Properties(dev int) (Properties, error) {
	var c propertiesV1
	if err := p.call("getProperties", p.t.GetProperties, uintptr(dev), uintptr(unsafe.Pointer(&c))); err != nil {
		return Properties{}, err
	}
	return Properties{Name: cmem.String(c.Name[:]), PCIPath: cmem.String(c.PCIPath[:]), GUID: c.GUID, PtrSupport: int(c.PtrSupport),
		SpeedMbps: int(c.Speed), Port: int(c.Port), LatencyUS: int(c.Latency), MaxComms: int(c.MaxComms), MaxRecvs: int(c.MaxRecvs),
		LinkLayer: int(c.LinkLayer), GIDIndex: int(c.GIDIndex)}, nil
}

// ---- calls ---------------------------------------------------------------

//go:uintptrescapes
func (p *Plugin) call(entry string, fn uintptr, args ...uintptr) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r1, _, _ := purego.SyscallN(fn, args...)
	return p.result(entry, r1)
}

// result must run on the calling OS thread: getLastError is per thread.
func (p *Plugin) result(entry string, r1 uintptr) error {
	r := sdk.Result(int32(r1))
	if r == 0 {
		return nil
	}
	msg, _, _ := purego.SyscallN(p.t.GetLastError)
	return &CallError{Plugin: p.Name, Entry: entry, Result: r, Message: cmem.GoString(msg)}
}

func (p *Plugin) errorf(entry string, r sdk.Result, format string, args ...any) error {
	return &CallError{Plugin: p.Name, Entry: entry, Result: r, Message: fmt.Sprintf(format, args...)}
}

// ---- logging -------------------------------------------------------------

var (
	logOnce  sync.Once
	logCB    uintptr
	logMu    sync.Mutex
	logNames []string
)

func logCallback() uintptr {
	logOnce.Do(func() {
		logCB = purego.NewCallback(func(ctx uintptr, level uintptr, msg *byte) {
			logMu.Lock()
			name := ""
			if ctx > 0 && int(ctx) <= len(logNames) {
				name = logNames[ctx-1]
			}
			logMu.Unlock()
			if msg == nil {
				return
			}
			if l, ok := flog.FlagCXLevel(int(int32(level))); ok {
				flog.Default().With(flog.KeyPlugin, "net-"+strings.ToLower(name)).Log(context.Background(), l, cmem.GoString(uintptr(unsafe.Pointer(msg))))
			}
		})
	})
	return logCB
}

func registerLog(name string) uintptr {
	logMu.Lock()
	defer logMu.Unlock()
	logNames = append(logNames, name)
	return uintptr(len(logNames))
}

// ---- C strings -----------------------------------------------------------
