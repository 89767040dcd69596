package main

import "github.com/flagcx/flagcx-go/cmd/flagcx/internal/bench"

func init() {
	addCommand("bench", "Benchmark a collective (or all) and check its results, as nccl-tests does.", &benchCmd{})
}

type benchCmd struct {
	bench.Flags
}

func (c *benchCmd) Run(g *Globals) error {
	c.PluginDir, c.Emulated = g.PluginDir, g.Emulated
	e := bench.ProcessEnv()
	probe, err := probeCommand()
	if err != nil {
		return err
	}
	e.Probe = probe
	return bench.Run(&c.Flags, e)
}
