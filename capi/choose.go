package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// hostName is the built-in backend's name in FLAGCX_BACKEND.
const hostName = "host"

// hostVendor is what getVendor answers on the host backend.
const hostVendor = "HOST"

// backend is the process's backend: one plugin's runtime and collective
// library, or the host (plugin nil). A process has one, chosen at its first
// call that needs it.
type backend struct {
	plugin  *loader.Plugin
	name    string // the plugin's name or "host"
	devices int    // devices the runtime sees (1 on the host)
}

// currentDeviceEntries are the vendor runtimes' "device current on the
// calling thread" entries, by plugin. The plugin ABI has none, and a
// framework sets the device through its own runtime calls (torch's
// cudaSetDevice), so the C side reads it there: every stream, event and
// allocation must go to the device the caller has current.
var currentDeviceEntries = map[string]string{
	"nvidia":    "cudaGetDevice",
	"metax":     "mcGetDevice",
	"cambricon": "cnrtGetDevice",
	"kunlunxin": "xpu_current_device",
}

// currentDevice is the runtime library and its entry that tell the device
// current on the calling thread; "" when the backend has none (the host,
// a plugin not in currentDeviceEntries): the C side then remembers what
// setDevice set.
func (b *backend) currentDevice() (lib, entry string) {
	if b.plugin == nil || currentDeviceEntries[b.plugin.Name] == "" {
		return "", ""
	}
	for _, l := range b.plugin.Info().Libraries {
		if l.Role == "runtime" && l.Loaded {
			return l.Path, currentDeviceEntries[b.plugin.Name]
		}
	}
	return "", ""
}

// vendor is getVendor's answer: the plugin's vendor ("NVIDIA") or "HOST".
func (b *backend) vendor() string {
	if b.plugin == nil {
		return hostVendor
	}
	return b.plugin.Vendor
}

func (b *backend) describe() string {
	if b.plugin == nil {
		return "host (CPU memory, flagcx-go's own collectives)"
	}
	s := fmt.Sprintf("plugin %s (%s, %d devices, %s)", b.plugin.Name, b.plugin.Vendor, b.devices, b.plugin.Path)
	if b.plugin.Emulated() {
		s += " on EMULATED vendor runtimes (vendorsim)"
	}
	return s
}

// chosen is the process's backend once chooseOnce has run.
var chosen struct {
	once sync.Once
	be   *backend
	err  error
}

// processBackend chooses the backend on the first call and returns the
// same answer afterwards; libDir is the directory of libflagcx.so.
func processBackend(libDir func() string) (*backend, error) {
	chosen.once.Do(func() {
		chosen.be, chosen.err = chooseBackend(pluginDir(libDir), env.Lookup(nil))
		if chosen.err != nil {
			return
		}
		log := flog.Default()
		log.Log(context.Background(), flog.LevelInfo, "libflagcx: backend "+chosen.be.describe(), flog.KeySubsys, flog.Init)
		if chosen.be.plugin != nil && chosen.be.plugin.Emulated() {
			log.Warn("backend "+chosen.be.name+" runs on EMULATED vendor runtimes (vendorsim), not the vendor's", flog.KeyComponent, "libflagcx")
		}
	})
	return chosen.be, chosen.err
}

// pluginDir is FLAGCX_PLUGIN_DIR, else the plugins directory beside the
// library's (build/lib -> build/plugins), else the loader's default.
func pluginDir(libDir func() string) string {
	if d, ok := env.PluginDir.Raw(nil); ok {
		return d
	}
	if d := libDir(); d != "" {
		return filepath.Join(d, "..", "plugins")
	}
	return loader.DefaultDir()
}

// chooseBackend applies FLAGCX_BACKEND, else takes the first plugin of dir
// whose runtime loads with at least one device, else the host.
func chooseBackend(dir string, lookup env.Lookup) (*backend, error) {
	want, err := env.Backend.Get(lookup)
	if err != nil {
		return nil, err
	}
	want = strings.ToLower(strings.TrimSpace(want))
	if want == hostName {
		return &backend{name: hostName, devices: 1}, nil
	}
	cands, dirErr := loader.Discover(dir)
	if want != "" {
		for _, c := range cands {
			if c.Name == want {
				be, err := openBackend(c, dir)
				if err != nil {
					return nil, fmt.Errorf("%s=%s: %w (%s=host runs on the CPU)", env.Backend.Name, want, err, env.Backend.Name)
				}
				return be, nil
			}
		}
		why := fmt.Sprintf("no plugin file libflagcx-%s.so in %s", want, dir)
		if dirErr != nil {
			why = dirErr.Error()
		}
		return nil, fmt.Errorf("%w: %s=%s: %s (set %s, or %s=host for the CPU)", sdk.ErrInvalidArgument,
			env.Backend.Name, want, why, env.PluginDir.Name, env.Backend.Name)
	}
	var skipped []error
	for _, c := range cands {
		be, err := openBackend(c, dir)
		if err == nil {
			return be, nil
		}
		skipped = append(skipped, err)
	}
	if len(skipped) > 0 || dirErr != nil {
		flog.Default().Log(context.Background(), flog.LevelInfo,
			"libflagcx: no plugin with a device, using the host backend: "+errors.Join(append(skipped, dirErr)...).Error(), flog.KeySubsys, flog.Init)
	}
	return &backend{name: hostName, devices: 1}, nil
}

// openBackend opens and initializes the plugin of c (found in dir) and
// checks that its runtime sees a device. Emulated runtimes are looked up as
// the CLI looks them up: FLAGCX_VENDORSIM_DIR, else <dir>/../vendorsim.
func openBackend(c loader.Candidate, dir string) (*backend, error) {
	p, err := c.Open()
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", c.Name, err)
	}
	simDir := ""
	if !env.VendorsimDir.IsSet(nil) {
		simDir = filepath.Join(dir, "..", "vendorsim")
	}
	if err := p.Init(loader.InitOptions{Emulated: loader.EmulatedFromEnv(), VendorsimDir: simDir}); err != nil {
		return nil, fmt.Errorf("backend %s: %s: vendor runtime does not load: %w", c.Name, c.Path, err)
	}
	n, err := p.DeviceCount()
	if err == nil && n < 1 {
		err = fmt.Errorf("%w: the runtime sees no device", sdk.ErrUnhandledDeviceError)
	}
	if err != nil {
		_ = p.Fini()
		return nil, fmt.Errorf("backend %s: %w", c.Name, err)
	}
	if p.Caps&loader.CapCCL == 0 {
		_ = p.Fini()
		return nil, fmt.Errorf("%w: backend %s: the plugin has no collective library", sdk.ErrNotSupported, c.Name)
	}
	return &backend{plugin: p, name: p.Name, devices: n}, nil
}
