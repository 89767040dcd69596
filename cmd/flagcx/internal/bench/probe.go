package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/launch"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Loading a plugin runs its code (ELF constructors, then init), which may
// crash the process or never return. A rank loads its plugin in-process
// (the data path), so before that the plugins are loaded once in a probe
// process each, as `flagcx plugins` does (loader.ProbeAll): a crash is one
// error naming the plugin file, the call and the signal, a hang ends at
// the probe's deadline. The local launcher probes before starting any rank
// (and learns the device counts there); a rank that an external launcher
// started, or a single rank, probes for itself.

// probeHint replaces the listing's advice (skip the plugin with
// FLAGCX_PLUGIN_<NAME>=none), which a run that asked for the plugin cannot
// take.
const probeHint = "the run did not start; report this to the plugin's vendor (`flagcx plugins` shows which plugins load)"

// probeBackends probes every plugin that cfg's ranks load. need, when
// set, is how many ranks of each backend this host runs: a plugin that
// sees fewer devices is refused. It returns nil without probing when no
// rank loads a plugin or e has no probe command.
func probeBackends(cfg *Config, e Env, need map[string]int) error {
	var names []string
	for _, b := range cfg.backends() {
		if b != HostBackendName {
			names = append(names, b)
		}
	}
	if len(names) == 0 || len(e.Probe) == 0 {
		return nil
	}
	timeout, set, err := env.Timeout.Find(e.Lookup)
	if err != nil {
		return err
	}
	if !set {
		timeout = loader.DefaultProbeTimeout
	}
	all, err := loader.ProbeAll(context.Background(), loader.ProbeOptions{
		Options: loader.Options{Dir: cfg.PluginDir, Emulated: cfg.Emulated || loader.EmulatedFromEnv()},
		Command: e.Probe, Devices: need != nil, Timeout: timeout, Only: names,
		TimeoutHint: env.Timeout.Name + " sets this deadline", Output: e.Stderr,
	})
	if err != nil && len(all) == 0 {
		return err
	}
	for _, p := range all {
		if err := probeVerdict(cfg, p, need[p.Name]); err != nil {
			return err
		}
	}
	return nil
}

// probeVerdict is the error of one probed plugin that n ranks of this
// host would load, or nil.
func probeVerdict(cfg *Config, p loader.Probed, n int) error {
	var pe *loader.ProbeError
	switch {
	case errors.As(p.Err, &pe):
		e := *pe
		e.Hint = probeHint
		return fmt.Errorf("backend %s: %w", p.Name, &e)
	case p.Err != nil:
		return fmt.Errorf("backend %s: %w", p.Name, p.Err)
	case p.Plugin == nil:
		return fmt.Errorf("backend %s: plugin file %s is not a usable plugin", p.Name, p.Path)
	}
	d := p.Devices
	if n == 0 || d == nil {
		return nil
	}
	if d.Err != "" {
		return fmt.Errorf("backend %s: %s: cannot count its devices: %s", p.Name, p.Path, d.Err)
	}
	if n > d.Count {
		what := fmt.Sprintf("--ranks puts %d ranks on %s", n, p.Name)
		if cfg.Placement == nil {
			what = fmt.Sprintf("--np %d --backend %s starts %d ranks on it", cfg.NP, p.Name, n)
		}
		return fmt.Errorf("%s, but the %s plugin sees %d device(s) on this host (one rank per device): start at most %d", what, p.Name, d.Count, d.Count)
	}
	return nil
}

// backends lists the backends of cfg's ranks, each once.
func (c *Config) backends() []string {
	if c.Placement != nil {
		return c.Placement.backends()
	}
	return []string{c.Backend}
}

// ranksPerBackend counts the ranks this host starts on each backend.
func (c *Config) ranksPerBackend() map[string]int {
	m := map[string]int{}
	if c.Placement == nil {
		m[c.Backend] = c.NP
		return m
	}
	for _, b := range c.Placement {
		m[b]++
	}
	return m
}

// launchChecks is what the local launcher checks once, before starting
// any rank, beyond preflight: the settings it does not read itself but its
// ranks (or the user) count on, an IB network this host cannot give, and
// the plugins the ranks will load.
func launchChecks(cfg *Config, e Env) error {
	if err := launch.CheckSettings(e.Lookup); err != nil {
		return err
	}
	if err := flog.ConfigFrom(e.Lookup).Err; err != nil {
		return err
	}
	net, err := tcp.ConfigFromLookup(e.Lookup)
	if err != nil {
		return err
	}
	hostnet.UseEmulatedNet(cfg.Emulated)
	if err := hostnet.CheckNet(net); err != nil {
		return err
	}
	return probeBackends(cfg, e, cfg.ranksPerBackend())
}

// probeOwnBackend probes, in a rank about to load a plugin, that plugin,
// unless the local launcher started the rank (it probed before starting
// any: see launchChecks).
func probeOwnBackend(cfg *Config, e Env) error {
	if on, _ := env.FatalReport.Get(e.Lookup); on {
		return nil // only the local launcher sets it (launch.Local)
	}
	return probeBackends(cfg, e, nil)
}
