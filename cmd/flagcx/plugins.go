package main

import (
	"github.com/alecthomas/kong"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/plugincmd"
)

func init() {
	addCommand("plugins", "List the vendor plugins found in --plugin-dir and whether their vendor runtimes load.", &pluginsCmd{})
	addCommand("devices", "List the devices each loadable plugin sees, with the links between them.", &devicesCmd{})
}

type pluginsCmd struct{}

func (pluginsCmd) Run(ctx *kong.Context, g *Globals) error {
	return plugincmd.Plugins(ctx.Stdout, g.PluginDir, g.Emulated)
}

type devicesCmd struct{}

func (devicesCmd) Run(ctx *kong.Context, g *Globals) error {
	return plugincmd.Devices(ctx.Stdout, g.PluginDir, g.Emulated)
}
