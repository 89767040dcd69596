package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/flagcx/flagcx-go/conformance/suite"
)

func init() {
	addCommand("conformance", "Validate vendor plugins against exact reference results (every plugin in --plugin-dir unless --plugin).", &conformanceCmd{})
}

type conformanceCmd struct {
	Plugin  []string      `name:"plugin" sep:"," placeholder:"NAME" help:"Plugins to test (repeat or separate with commas); default: every plugin in --plugin-dir."`
	NP      []int         `name:"np" sep:"," default:"2,3,4,5,8" placeholder:"N,N" help:"Communicator sizes (default 2,3,4,5,8: powers of two and not, up to 8); one worker process (and device) per rank; sizes above the plugin's device count are skipped."`
	Quick   bool          `name:"quick" help:"The smaller matrix (fewer sizes, types and roots) that CI runs."`
	JUnit   string        `name:"junit" placeholder:"FILE" help:"Write JUnit XML (one testsuite per plugin) to FILE."`
	JSON    string        `name:"json" placeholder:"FILE" help:"Write every case as JSON to FILE."`
	Timeout time.Duration `name:"timeout" default:"60s" help:"Deadline of one case on all ranks; a rank past it is reported as a hang."`
	Filter  string        `name:"run" placeholder:"REGEXP" help:"Only the cases whose id matches REGEXP (e.g. 'allreduce.*float16')."`
	Seed    uint64        `name:"seed" default:"1" help:"Base seed of the input values."`
	List    bool          `name:"list" help:"List the cases (id, level, description) and exit."`
	Verbose bool          `name:"verbose" short:"v" help:"Print every case as it finishes."`
	Worker  bool          `name:"worker" hidden:"" help:"Internal: serve as a rank worker of a conformance run."`
}

func (c *conformanceCmd) Run(kctx *kong.Context, g *Globals) error {
	if c.Worker {
		if !suite.IsWorker() {
			return errors.New("--worker is internal: flagcx conformance starts its workers itself")
		}
		suite.ServeWorker()
		return nil
	}
	// Checked before --list too: the case matrix is built from these.
	for _, n := range c.NP {
		if n < 2 || n > 64 {
			return fmt.Errorf("--np %d: give communicator sizes from 2 to 64 (e.g. --np 2,4)", n)
		}
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: give a positive deadline per case (e.g. 60s)", c.Timeout)
	}
	out := kctx.Stdout
	var filter *regexp.Regexp
	if c.Filter != "" {
		re, err := regexp.Compile(c.Filter)
		if err != nil {
			return fmt.Errorf("--run %q: %w", c.Filter, err)
		}
		filter = re
	}
	if c.List {
		return listCases(out, c, filter)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program to start the workers: %w", err)
	}
	o := suite.Options{
		Dir:         g.PluginDir,
		Plugins:     c.Plugin,
		NP:          c.NP,
		Emulated:    g.Emulated,
		Quick:       c.Quick,
		Seed:        c.Seed,
		CaseTimeout: c.Timeout,
		Filter:      filter,
		Worker:      []string{exe, "conformance", "--worker"},
		Progress:    out,
		Verbose:     c.Verbose,
	}
	if g.Debug {
		o.WorkerStderr = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	mode := "real vendor runtimes"
	if g.Emulated {
		mode = "EMULATED vendor runtimes (conformance/vendorsim)"
	}
	np := make([]string, len(c.NP))
	for i, n := range c.NP {
		np[i] = fmt.Sprint(n)
	}
	quick := ""
	if c.Quick {
		quick = ", quick matrix"
	}
	fmt.Fprintf(out, "flagcx conformance: %s, ranks %s%s, seed %d\n", mode, strings.Join(np, ","), quick, c.Seed)
	rep, err := suite.Run(ctx, o)
	if rep == nil {
		return err
	}
	rep.WriteText(out)
	if werr := writeReports(rep, c.JUnit, c.JSON); werr != nil {
		return werr
	}
	if rep.Interrupted {
		return errors.New("conformance interrupted: the results above are partial")
	}
	if err != nil {
		return err
	}
	if n, per := rep.Failures(); n > 0 {
		var parts []string
		for name, k := range per {
			parts = append(parts, fmt.Sprintf("%s: %d", name, k))
		}
		sort.Strings(parts)
		where := ""
		if rep.Emulated {
			where = " on emulated vendor runtimes"
		}
		return fmt.Errorf("conformance failed%s: %d cases failed (%s); the failures are listed above, --json FILE has every case",
			where, n, strings.Join(parts, ", "))
	}
	return nil
}

func writeReports(rep *suite.Report, junit, jsonFile string) error {
	write := func(path string, fn func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return f.Close()
	}
	if err := write(junit, rep.WriteJUnit); err != nil {
		return err
	}
	return write(jsonFile, rep.WriteJSON)
}

func listCases(out io.Writer, c *conformanceCmd, filter *regexp.Regexp) error {
	n := 0
	for _, k := range suite.Matrix(suite.MatrixOptions{NP: c.NP, Quick: c.Quick, Seed: c.Seed}) {
		if filter != nil && !filter.MatchString(k.ID) {
			continue
		}
		fmt.Fprintf(out, "%-6s %s: %s\n", k.Level, k.ID, k.Description)
		n++
	}
	fmt.Fprintf(out, "%d cases per plugin (before skips for what a plugin does not support)\n", n)
	return nil
}
