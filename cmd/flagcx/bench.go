package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/bench"
	"github.com/flagcx/flagcx-go/internal/base/env"
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
	stop, err := profiles()
	if err != nil {
		return err
	}
	defer stop()
	return bench.Run(&c.Flags, e)
}

// profiles starts the CPU profile (FLAGCX_BENCH_CPUPROFILE) and the
// execution trace (FLAGCX_BENCH_TRACE) asked for, in a rank's process
// (FLAGCX_RANK set: --np's ranks, or a launcher's); the process that only
// starts ranks has nothing to profile. The trace shows each goroutine's
// waits and system calls, and the regions core marks on the staged path
// (core/internal/executor/staged.go): where a call's time goes, not only
// its CPU.
func profiles() (stop func(), err error) {
	rank, set := os.LookupEnv(env.Rank.Name)
	if !set {
		return func() {}, nil
	}
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, p := range []struct {
		v     *env.Setting[string]
		start func(io.Writer) error
		stop  func()
	}{
		{env.BenchCPUProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{env.BenchTrace, trace.Start, trace.Stop},
	} {
		path, _ := p.v.Get(nil)
		if path == "" {
			continue
		}
		f, err := os.Create(fmt.Sprintf("%s.rank%s", path, rank))
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("%s: %w: give a path in a writable directory", p.v.Name, err)
		}
		if err := p.start(f); err != nil {
			f.Close()
			stopAll()
			return nil, fmt.Errorf("%s: %w", p.v.Name, err)
		}
		stops = append(stops, func() { p.stop(); f.Close() })
	}
	return stopAll, nil
}
