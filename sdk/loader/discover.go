package loader

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
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
	if d, ok := env.PluginDir.Raw(nil); ok {
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
	for _, kv := range env.PluginFile.Set(nil) {
		key, val := kv[0], kv[1]
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

// Open opens the candidate's file as Open does. An error says which
// variable named the file when it was not the plugin dir, and a table whose
// name is not the candidate's is warned about on stderr, once per process.
func (c Candidate) Open() (*Plugin, error) {
	p, err := Open(c.Path)
	if err != nil {
		if c.Source != "plugin dir" {
			err = fmt.Errorf("%w (named by %s)", err, c.Source)
		}
		return nil, err
	}
	if w := c.NameWarning(p); w != "" {
		warnOnce(w)
	}
	return p, nil
}

// NameWarning is "" when p's table calls the plugin what the candidate
// does, else a warning naming the file and both names. Users select a
// plugin by the candidate's name (--ranks, --plugin, FLAGCX_PLUGIN_<NAME>)
// while errors and reports quote the table's, so a mismatch makes one
// plugin look like two.
func (c Candidate) NameWarning(p *Plugin) string {
	if p == nil || p.Name == c.Name {
		return ""
	}
	if c.Source == "plugin dir" {
		return fileNameWarning(c.Path, p.Name)
	}
	return fmt.Sprintf("plugin file %s is plugin %q by its variable %s, but its table says name %q (errors and reports will say %q): set %s instead, or fix the name in its table",
		c.Path, c.Name, c.Source, p.Name, p.Name, OverrideVar(p.Name))
}

// fileNameWarning is "" unless path is named libflagcx-<name>.so for
// another name than table's.
func fileNameWarning(path, table string) string {
	base := filepath.Base(path)
	if !strings.HasPrefix(base, "libflagcx-") || !strings.HasSuffix(base, ".so") {
		return ""
	}
	name := strings.TrimSuffix(strings.TrimPrefix(base, "libflagcx-"), ".so")
	if name == "" || name == table {
		return ""
	}
	return fmt.Sprintf("plugin file %s is plugin %q by its file name, but its table says name %q (errors and reports will say %q): rename the file libflagcx-%s.so, or fix the name in its table",
		path, name, table, table, table)
}

// warnOutput receives warnOnce's lines instead of the process's logger
// (nil); tests capture it, probe children discard it.
var warnOutput io.Writer

var (
	warnedMu sync.Mutex
	warned   = map[string]bool{}
)

// warnOnce writes a warning unless this process already wrote it: loading
// the same plugin again (LoadAll, then a backend's Open) must not repeat it.
func warnOnce(msg string) {
	warnedMu.Lock()
	defer warnedMu.Unlock()
	if warned[msg] {
		return
	}
	warned[msg] = true
	log := flog.Default()
	if warnOutput != nil {
		log = flog.To(warnOutput)
	}
	log.Warn(msg)
}

// Options configure LoadAll and Load.
type Options struct {
	Dir          string  // "" means DefaultDir()
	Emulated     bool    // load vendorsim runtimes (also when FLAGCX_EMULATED is set)
	VendorsimDir string  // "" means FLAGCX_VENDORSIM_DIR, else <Dir>/../vendorsim
	Log          LogFunc // nil: the process's logger, at the FLAGCX_DEBUG level
}

// vendorsimDir is the emulators' root for plugins of o.Dir: "" lets
// FLAGCX_VENDORSIM_DIR decide.
func (o Options) vendorsimDir() string {
	if o.VendorsimDir == "" && !env.VendorsimDir.IsSet(nil) {
		return filepath.Join(o.Dir, "..", "vendorsim")
	}
	return o.VendorsimDir
}

// Loaded is the outcome for one candidate.
type Loaded struct {
	Candidate
	// Plugin is nil when the file is not a usable plugin table; set (but
	// not initialized) when only its vendor runtime failed to load.
	Plugin *Plugin
	// Err says why it cannot be used (nil: opened and initialized).
	Err error
	// Warnings are about a usable table: its name differs from the file's.
	Warnings []string
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
		p, err := c.Open()
		if err != nil {
			l.Err = err
			out = append(out, l)
			continue
		}
		l.Plugin = p
		if w := c.NameWarning(p); w != "" {
			l.Warnings = append(l.Warnings, w)
		}
		if err := p.Init(InitOptions{Emulated: o.Emulated, VendorsimDir: o.vendorsimDir(), Log: o.Log}); err != nil {
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
