package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Candidate is a plugin file discovery found (not yet opened).
type Candidate struct {
	Name   string // from the file name libflagcx-<name>.so, or the override's <NAME>
	Path   string
	Source string // "plugin dir" or the environment variable that named it
}

// OverrideVar is the environment variable that overrides or disables
// plugin name: FLAGCX_PLUGIN_<NAME> (upper case, '-' as '_').
func OverrideVar(name string) string {
	return EnvPluginPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// DefaultDir is where plugins are looked for when no dir is given:
// FLAGCX_PLUGIN_DIR, else build/plugins beside the executable's bin/, else
// ./build/plugins.
func DefaultDir() string {
	if d := os.Getenv(EnvPluginDir); d != "" {
		return d
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Join(filepath.Dir(exe), "..", "build", "plugins")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return filepath.Clean(d)
		}
	}
	return filepath.Join("build", "plugins")
}

// Discover lists the plugins in dir (files libflagcx-<name>.so), then
// applies the overrides: FLAGCX_PLUGIN_<NAME>=path replaces or adds plugin
// <name>, FLAGCX_PLUGIN_<NAME>=none removes it. A dir that does not exist
// is reported as an error wrapping fs.ErrNotExist, with the overrides still
// returned. Candidates come sorted by name.
func Discover(dir string) ([]Candidate, error) {
	byName := map[string]Candidate{}
	var dirErr error
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dirErr = fmt.Errorf("plugin dir %s does not exist (set --plugin-dir or %s; make builds build/plugins): %w", dir, EnvPluginDir, err)
	case err != nil:
		dirErr = fmt.Errorf("cannot read plugin dir %s: %w", dir, err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, "libflagcx-") || !strings.HasSuffix(n, ".so") {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(n, "libflagcx-"), ".so")
		if name == "" {
			continue
		}
		byName[name] = Candidate{Name: name, Path: filepath.Join(dir, n), Source: "plugin dir"}
	}
	for _, kv := range os.Environ() {
		key, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, EnvPluginPrefix) || key == EnvPluginDir || val == "" {
			continue
		}
		name := strings.ToLower(strings.TrimPrefix(key, EnvPluginPrefix))
		for existing := range byName { // a dir plugin "my-vendor" is FLAGCX_PLUGIN_MY_VENDOR
			if OverrideVar(existing) == key {
				name = existing
			}
		}
		if strings.EqualFold(val, "none") {
			delete(byName, name)
			continue
		}
		byName[name] = Candidate{Name: name, Path: val, Source: key}
	}
	out := make([]Candidate, 0, len(byName))
	for _, c := range byName {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, dirErr
}

// Options configure LoadAll and Load.
type Options struct {
	Dir          string  // "" means DefaultDir()
	Emulated     bool    // load vendorsim runtimes (also when FLAGCX_EMULATED is set)
	VendorsimDir string  // "" means FLAGCX_VENDORSIM_DIR, else <Dir>/../vendorsim
	Log          LogFunc // nil: stderr at the FLAGCX_DEBUG level
}

// Loaded is the outcome for one candidate.
type Loaded struct {
	Candidate
	// Plugin is nil when the file is not a usable plugin table; set (but
	// not initialized) when only its vendor runtime failed to load.
	Plugin *Plugin
	// Err says why it cannot be used (nil: opened and initialized).
	Err error
}

// OK reports whether the plugin opened and initialized.
func (l Loaded) OK() bool { return l.Err == nil && l.Plugin != nil }

// LoadAll discovers, opens and initializes every plugin. A bad file or a
// missing vendor library is recorded in its Loaded and never stops the
// others; the error is only about the plugin dir itself.
func LoadAll(o Options) ([]Loaded, error) {
	if o.Dir == "" {
		o.Dir = DefaultDir()
	}
	o.Emulated = o.Emulated || EmulatedFromEnv()
	cands, dirErr := Discover(o.Dir)
	out := make([]Loaded, 0, len(cands))
	for _, c := range cands {
		l := Loaded{Candidate: c}
		p, err := Open(c.Path)
		if err != nil {
			if c.Source != "plugin dir" {
				err = fmt.Errorf("%w (named by %s)", err, c.Source)
			}
			l.Err = err
			out = append(out, l)
			continue
		}
		l.Plugin = p
		simDir := o.VendorsimDir
		if simDir == "" && os.Getenv(EnvVendorsimDir) == "" {
			simDir = filepath.Join(o.Dir, "..", "vendorsim")
		}
		if err := p.Init(InitOptions{Emulated: o.Emulated, VendorsimDir: simDir, Log: o.Log}); err != nil {
			l.Err = fmt.Errorf("%s: vendor runtime does not load: %w", c.Path, err)
		}
		out = append(out, l)
	}
	return out, dirErr
}

// Load returns the usable plugins and, as warnings, why the others were
// skipped (a missing plugin dir included).
func Load(o Options) (plugins []*Plugin, skipped []error) {
	all, err := LoadAll(o)
	if err != nil {
		skipped = append(skipped, err)
	}
	for _, l := range all {
		if l.OK() {
			plugins = append(plugins, l.Plugin)
		} else {
			skipped = append(skipped, l.Err)
		}
	}
	return plugins, skipped
}
