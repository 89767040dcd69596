// Package bench is `flagcx bench`: nccl-tests' performance and correctness
// benchmark of one collective (or all of them, or one-sided put and get)
// over a communicator, with results checked against conformance/reference.
//
// Run is one process's part of the job: with --np or --ranks it checks what
// every rank would refuse and starts the ranks on this machine (the local
// launcher, launch.Local); otherwise it joins an external launcher's job as
// one rank, or runs a single rank. A rank runs on the host backend or on a
// plugin's device (probed first in a process of its own), times each size
// out of place and in place, agrees with the other ranks on the slowest
// time, checks every result exactly (-c 1, the default), and on rank 0
// prints nccl-tests' table or FlagCX's lines, the progress line,
// --print-plan's schedules and --json's file. With --on-failure shrink the
// survivors of a lost rank go on on a smaller communicator.
//
// The files, by concern: run.go (the process's part: Run, starting and
// ending ranks), preflight.go and probe.go (what is checked before ranks
// start), join.go (joining the communicator on a backend), shrink.go,
// rankrun.go (one rank's loop over collectives, types and sizes),
// timing.go, inputs.go and check.go (timing, inputs and the exact check),
// onesided.go (put and get), backend.go, hetero.go, device.go and mem.go
// (where the measured calls run and their buffers live), devicelist.go,
// report.go (output), flags.go, size.go and ops.go.
package bench

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/launch"
)

// Env is what a benchmark takes from its process.
type Env struct {
	// Args are the program's arguments after its name: the local launcher
	// starts its ranks with them.
	Args    []string
	Lookup  func(string) (string, bool)
	Environ []string
	Stdout  io.Writer
	Stderr  io.Writer
	// StderrTTY enables the progress line.
	StderrTTY bool
	// Probe starts a probe process (flagcx: plugins --probe), in which the
	// plugins a run will load are loaded first (probe.go); nil loads them
	// in-process only.
	Probe []string
}

// ProcessEnv is this process's Env.
func ProcessEnv() Env {
	return Env{
		Args: os.Args[1:], Lookup: os.LookupEnv, Environ: os.Environ(),
		Stdout: os.Stdout, Stderr: os.Stderr, StderrTTY: isTerminal(os.Stderr),
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Run runs the benchmark as this process's part of the job: it starts the
// ranks itself for --np, joins the job of an external launcher, or runs a
// single rank. Only rank 0 writes results; only rank 0 reports wrong
// results as an error (a *WrongError).
func Run(f *Flags, e Env) error {
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	job, launched, err := launch.FromEnv(e.Lookup)
	if err != nil {
		return err
	}
	if cfg.NP > 0 {
		switch {
		case !launched:
			return startRanks(cfg, e)
		case job.Launcher != "flagcx" || job.NRanks != cfg.NP:
			return fmt.Errorf("--np %d starts ranks itself, but %s already started this process as rank %d of %d: drop --np", cfg.NP, job.Launcher, job.Rank, job.NRanks)
		}
	}
	rank, nranks, local := 0, 1, 1
	if launched {
		rank, nranks = job.Rank, job.NRanks
		if job.LocalSize > 0 {
			local = job.LocalSize
		}
	}
	if err := cfg.CheckRanks(nranks); err != nil {
		return err
	}
	if err := checkMemory(cfg.MaxBytes, cfg.Check, local); err != nil {
		return err
	}
	if err := probeOwnBackend(cfg, e); err != nil {
		return err
	}
	comm, be, err := join(cfg, e, job, launched, nranks, rank)
	if err != nil {
		return err
	}
	launcher := "none"
	if launched {
		launcher = job.Launcher
	}
	for {
		r := newRankRun(cfg, comm, be, io.Discard)
		r.launcher = launcher
		if r.rank == 0 {
			r.showOn(e)
		}
		err := runRank(e, comm, be, r)
		if !revokedToShrink(cfg, err) {
			return err
		}
		var re *core.RevokedError
		errors.As(err, &re)
		if comm, be, err = shrink(cfg, e, comm, be, re); err != nil {
			return err
		}
	}
}

// startRanks is --np without a launcher: it checks what every rank would
// refuse (once, before any starts), then starts the ranks on this machine.
func startRanks(cfg *Config, e Env) error {
	if err := cfg.CheckRanks(cfg.NP); err != nil {
		return err
	}
	if err := checkSplitList(e.Lookup, cfg.Placement, cfg.NP); err != nil {
		return err
	}
	if err := preflight(cfg, e.Lookup); err != nil {
		return err
	}
	if err := launchChecks(cfg, e); err != nil {
		return err
	}
	if err := checkMemory(cfg.MaxBytes, cfg.Check, cfg.NP); err != nil {
		return err
	}
	if cfg.JSON != "" {
		if err := touch(cfg.JSON); err != nil {
			return err
		}
	}
	opts := []launch.LocalOption{launch.RankBytes(hostBytesPerRank(cfg.MaxBytes, cfg.Check))}
	if cfg.Shrink {
		opts = append(opts, launch.KeepGoing())
	}
	return launch.Local(cfg.NP, e.Args, e.Environ, e.Stdout, e.Stderr, opts...)
}

// touch makes sure the JSON file can be written before the run starts.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return f.Close()
}

// runRank runs the benchmark r on comm and be, then tears them down.
func runRank(e Env, comm communicator, be backend, r *rankRun) error {
	runErr := comm.run(r.run)
	if revokedToShrink(r.cfg, runErr) {
		return runErr // the caller shrinks before the old communicator goes
	}
	if reportStuck(e, runErr) {
		// The watchdog aborted the communicator, and a plugin call may
		// still be inside the plugin, holding what the cleanup would call
		// into: leave the rest to this process's exit.
		return runErr
	}
	defer be.close()
	if runErr != nil {
		_ = comm.abort()
		return runErr
	}
	if err := comm.destroy(); err != nil {
		err = fmt.Errorf("destroying the communicator: %w", err)
		reportStuck(e, err)
		return err
	}
	return r.verdict()
}

// reportStuck reports err to the local launcher when a plugin call timed
// out in it (this process may then be unable to exit: see
// core.Watchdog), and says whether it did.
func reportStuck(e Env, err error) bool {
	var te *core.TimeoutError
	if !errors.As(err, &te) {
		return false
	}
	launch.ReportFatal(e.Lookup, e.Stderr, err)
	return true
}
