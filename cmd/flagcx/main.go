// Command flagcx is flagcx-go's command line. Its subcommands:
//
//   - bench: nccl-tests' benchmark of one collective or all of them (or of
//     one-sided put and get), every result checked against exact
//     references; it starts its ranks itself (--np, or --ranks to place
//     them on the host and on plugins' devices), joins an external
//     launcher's job, or runs one rank, and prints nccl-tests' table,
//     FlagCX's lines (--format flagcx) or JSON (--json); --print-plan
//     prints the ranks' schedules and --on-failure shrink goes on without
//     a lost rank (cmd/flagcx/internal/bench; bench.go adds per-rank CPU
//     profiles and execution traces from FLAGCX_BENCH_CPUPROFILE and
//     FLAGCX_BENCH_TRACE);
//   - plot: the JSON files of bench --json as one SVG, bus bandwidth and
//     time against size (cmd/flagcx/internal/plot);
//   - conformance: the conformance suite of vendor plugins, with JUnit and
//     JSON reports (conformance/suite);
//   - plugins and devices: the plugins of --plugin-dir, whether their vendor
//     runtimes load, and the devices and links each one sees, every plugin
//     loaded in a probe process of its own (cmd/flagcx/internal/plugincmd);
//   - version: flagcx's, Go's and the plugin ABI's versions.
//
// Every subcommand takes the global flags --plugin-dir, --emulated (the
// emulated vendor runtimes of conformance/vendorsim) and --debug.
// `flagcx --version` is `flagcx version` and `flagcx help [command]` is
// `flagcx [command] --help`. Two hidden flags serve the processes flagcx
// starts of itself: `plugins --probe` (a plugin probe, sdk/loader) and
// `conformance --worker` (a rank worker of a conformance run).
//
// Each subcommand lives in a file of its own that registers it from an init
// function with addCommand; main only wires kong and reports errors, one
// line on stderr each: "flagcx: error: ...", exit status 1 (128 + the
// signal's number when a signal stopped a local launch: 130 for SIGINT).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/flagcx/flagcx-go/internal/base/env"
)

// Globals are the flags every subcommand accepts, before or after its name.
// Run methods receive them as a *Globals argument.
type Globals struct {
	PluginDir string `name:"plugin-dir" env:"${env_plugin_dir}" placeholder:"DIR" help:"Directory to load vendor plugins from."`
	Emulated  bool   `name:"emulated" env:"${env_emulated}" help:"Load the emulated vendor runtimes (conformance/vendorsim) instead of the real ones; every output then says emulated."`
	Debug     bool   `name:"debug" help:"Log what flagcx does to stderr (sets ${env_debug}=INFO unless ${env_debug} is set)."`
}

// cli is the root of the command line; subcommands are added dynamically.
type cli struct {
	Globals
}

// command is one registered subcommand.
type command struct {
	name, help string
	cmd        any
}

var commands []command

// addCommand registers a subcommand: cmd is a kong command struct with a
// Run(*Globals) error method. Call it from an init function.
func addCommand(name, help string, cmd any) {
	commands = append(commands, command{name, help, cmd})
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the chosen subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	args = negativeValues(aliases(args))
	var root cli
	opts := []kong.Option{
		kong.Name("flagcx"),
		kong.Description("Heterogeneous collective communication: benchmarks and tools."),
		kong.Writers(stdout, stderr),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.ValueFormatter(helpWithDefault),
		// The flags' variables, by the registry's names.
		kong.Vars{"env_plugin_dir": env.PluginDir.Name, "env_emulated": env.Emulated.Name, "env_debug": env.Debug.Name},
	}
	for _, c := range commands {
		opts = append(opts, kong.DynamicCommand(c.name, c.help, "", c.cmd))
	}
	parser, err := kong.New(&root, opts...)
	if err != nil {
		return fail(stderr, err)
	}
	ctx, err := parser.Parse(args)
	if err != nil {
		return fail(stderr, err)
	}
	if root.Debug && !env.Debug.IsSet(nil) {
		// Set in the environment, not only here: the ranks and probes
		// this process starts inherit it. The logger reads it at its
		// first line, which comes after this.
		_ = os.Setenv(env.Debug.Name, "INFO")
	}
	if err := ctx.Run(&root.Globals); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// aliases turns what users type out of habit into the commands that do it:
// `flagcx --version` (-V) is `flagcx version`, `flagcx help [command]` is
// `flagcx [command] --help`.
func aliases(args []string) []string {
	if len(args) == 0 {
		return args
	}
	switch args[0] {
	case "--version", "-V":
		if len(args) == 1 {
			return []string{"version"}
		}
	case "help":
		return append(append([]string(nil), args[1:]...), "--help")
	}
	return args
}

// negativeValues joins a flag and a negative number after it ("-w -1",
// "--root -1") into one argument ("-w-1", "--root=-1"). Kong reads a
// separate "-1" as a short flag and answers "perhaps try --warmup_iters=-1";
// joined, the value reaches the command's own check, which names the flag
// and the values it takes.
func negativeValues(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if i+1 < len(args) && isNegativeNumber(args[i+1]) && !strings.Contains(a, "=") {
			switch {
			case len(a) > 2 && strings.HasPrefix(a, "--"):
				a += "=" + args[i+1]
				i++
			case len(a) == 2 && a[0] == '-' && a[1] != '-':
				a += args[i+1]
				i++
			}
		}
		out = append(out, a)
	}
	return out
}

// isNegativeNumber matches what no flag name looks like: -1, -2.5, -.5, -4K.
func isNegativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.' && len(s) > 2 && s[2] >= '0' && s[2] <= '9')
}

// helpWithDefault adds a flag's default to its help, so that --help shows
// what an omitted flag means, unless the help already says it.
func helpWithDefault(v *kong.Value) string {
	h := kong.DefaultHelpValueFormatter(v)
	if !v.HasDefault || v.Default == "" || v.IsBool() && v.Default == "false" || strings.Contains(v.Help, "default") {
		return h
	}
	if strings.HasSuffix(h, ".") {
		return h[:len(h)-1] + " (default: " + v.Default + ")."
	}
	return h + " (default: " + v.Default + ")"
}

// exitStatuser is an error that asks for an exit status of its own: a local
// launch stopped by SIGINT exits 130, as the shell reports an interrupted
// program.
type exitStatuser interface{ ExitStatus() int }

// fail reports err as one line and returns the exit status.
func fail(stderr io.Writer, err error) int {
	var pe *kong.ParseError
	msg := err.Error()
	if errors.As(err, &pe) {
		path := "flagcx"
		if pe.Context != nil {
			if n := pe.Context.Selected(); n != nil {
				path = n.FullPath()
			}
		}
		msg += " (see " + path + " --help)"
	}
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ")), " ")
	fmt.Fprintf(stderr, "flagcx: error: %s\n", msg)
	var es exitStatuser
	if errors.As(err, &es) && es.ExitStatus() > 1 {
		return es.ExitStatus()
	}
	return 1
}
