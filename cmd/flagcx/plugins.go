package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/alecthomas/kong"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/plugincmd"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

func init() {
	addCommand("plugins", "List the vendor plugins found in --plugin-dir and whether their vendor runtimes load.", &pluginsCmd{})
	addCommand("devices", "List the devices each loadable plugin sees, with the links between them.", &devicesCmd{})
}

type pluginsCmd struct {
	Probe bool `name:"probe" hidden:"" help:"Internal: load one plugin for a listing and report on descriptor 3."`
}

func (c pluginsCmd) Run(ctx *kong.Context, g *Globals) error {
	if c.Probe {
		if !loader.IsProbeChild() {
			return errors.New("--probe is internal: flagcx plugins and flagcx devices start their probe processes themselves")
		}
		return loader.ServeProbe()
	}
	o, err := listingOptions(g)
	if err != nil {
		return err
	}
	return plugincmd.Plugins(ctx.Stdout, o)
}

type devicesCmd struct{}

func (devicesCmd) Run(ctx *kong.Context, g *Globals) error {
	o, err := listingOptions(g)
	if err != nil {
		return err
	}
	return plugincmd.Devices(ctx.Stdout, o)
}

// listingOptions probe each plugin in this program, re-executed: a plugin
// that crashes or hangs takes down its probe, not the listing. The probe
// deadline is FLAGCX_TIMEOUT when set.
func listingOptions(g *Globals) (plugincmd.Options, error) {
	probe, err := probeCommand()
	if err != nil {
		return plugincmd.Options{}, err
	}
	o := plugincmd.Options{Dir: g.PluginDir, Emulated: g.Emulated, Probe: probe,
		TimeoutHint: env.Timeout.Name + " sets this deadline", Stderr: os.Stderr}
	// A user who allows waits more time allows a slow driver start-up
	// more time too.
	d, set, err := env.Timeout.Find(nil)
	if err != nil {
		return o, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}
	if set {
		o.Timeout = d
	}
	return o, nil
}

// probeCommand starts a probe process: this program, re-executed, loads
// one plugin (listings and bench load plugins there first).
func probeCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find this program to probe the plugins with: %w", err)
	}
	return []string{exe, "plugins", "--probe"}, nil
}
