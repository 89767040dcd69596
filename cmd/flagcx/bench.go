package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/bench"
	"github.com/flagcx/flagcx-go/internal/env"
)

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
	stop, err := cpuProfile()
	if err != nil {
		return err
	}
	defer stop()
	return bench.Run(&c.Flags, e)
}

// cpuProfile starts the CPU profile FLAGCX_BENCH_CPUPROFILE asks for, in a
// rank's process (FLAGCX_RANK set: --np's ranks, or a launcher's); the
// process that only starts ranks has nothing to profile.
func cpuProfile() (stop func(), err error) {
	path, _ := env.BenchCPUProfile.Get(nil)
	rank, set := os.LookupEnv(env.Rank.Name)
	if path == "" || !set {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.rank%s", path, rank))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: give a path in a writable directory", env.BenchCPUProfile.Name, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", env.BenchCPUProfile.Name, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
