package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchIsolatesPluginLoading: bench loads the plugins its ranks use in
// a probe process first, as `flagcx plugins` does. A plugin that crashes
// in init or in an ELF constructor, or hangs in init, ends the run with
// one error line naming the plugin file, the call and the signal (no Go
// runtime dump, no "rank 0 exited"), a hang within FLAGCX_TIMEOUT and a
// little; under the local launcher (--ranks), as a single rank, and as the
// rank of an external launcher alike.
func TestBenchIsolatesPluginLoading(t *testing.T) {
	dir := t.TempDir()
	// The crashes get a deadline a loaded machine cannot miss; the hang's
	// text names the stage the starved child reached (init, normally).
	reasons := map[string]string{
		"segv": `the plugin crashed during init \(SIGSEGV\)`,
		"ctor": `the plugin crashed while being loaded, in dlopen or an ELF constructor \(SIGSEGV\)`,
		"hang": `the plugin did not finish [a-z (),]+ within 3s \(FLAGCX_TIMEOUT sets this deadline\)`,
	}
	timeouts := map[string]string{"segv": "FLAGCX_TIMEOUT=60", "ctor": "FLAGCX_TIMEOUT=60", "hang": "FLAGCX_TIMEOUT=3"}
	buildExample(t, dir, "segv", `-DEXAMPLE_NAME="segv"`, "-DEXAMPLE_BREAK_INIT_SEGV")
	buildExample(t, dir, "ctor", `-DEXAMPLE_NAME="ctor"`, "-DEXAMPLE_BREAK_CONSTRUCTOR_SEGV")
	buildExample(t, dir, "hang", `-DEXAMPLE_NAME="hang"`, "-DEXAMPLE_BREAK_INIT_HANG")
	launchers := map[string]func(name string) ([]string, []string){
		"local launcher": func(name string) ([]string, []string) { return nil, []string{"--ranks", name + ":2"} },
		"single rank":    func(name string) ([]string, []string) { return nil, []string{"--backend", name} },
		"external launcher": func(name string) ([]string, []string) {
			return []string{"FLAGCX_RANK=0", "FLAGCX_NRANKS=1"}, []string{"--backend", name}
		},
	}
	cases := []struct{ plugin, launcher string }{
		{"segv", "local launcher"}, {"ctor", "local launcher"}, {"hang", "local launcher"},
		{"segv", "single rank"}, {"hang", "single rank"},
		{"segv", "external launcher"}, {"hang", "external launcher"},
	}
	for _, c := range cases {
		t.Run(c.plugin+" "+c.launcher, func(t *testing.T) {
			vars, args := launchers[c.launcher](c.plugin)
			env := cleanEnv(append(vars, timeouts[c.plugin], "FLAGCX_EXAMPLE_DEVICES=2")...)
			flagcxBin(t) // built before the clock starts
			r := runFlagcx(t, 90*time.Second, env, append([]string{"--plugin-dir", dir, "bench", "allreduce", "-e", "1K"}, args...)...)
			t.Logf("took %v\nstderr:\n%s", r.took, r.stderr)
			require.Equal(t, 1, r.code)
			file := filepath.Join(dir, "libflagcx-"+c.plugin+".so")
			lines := errorLines(r.stderr)
			require.Len(t, lines, 1)
			require.Regexp(t, "^"+regexp.QuoteMeta(fmt.Sprintf("flagcx: error: backend %s: plugin file %s: ", c.plugin, file))+reasons[c.plugin]+
				regexp.QuoteMeta("; the run did not start; report this to the plugin's vendor (`flagcx plugins` shows which plugins load)")+"$", lines[0])
			require.LessOrEqual(t, strings.Count(r.stderr, "\n"), 3, "a few lines at most")
			require.NotContains(t, r.stderr, "goroutine")
			require.NotContains(t, r.stderr, "exited with status")
			require.Empty(t, r.stdout, "no rank started")
		})
	}
}

// TestBenchLaunchPrechecks: what the local launcher checks once before
// starting any rank, each refused with one error line and no rank started:
// a vendor runtime that does not load, more ranks than devices, and
// settings a local launch does not read itself, malformed.
func TestBenchLaunchPrechecks(t *testing.T) {
	dir := t.TempDir()
	buildExample(t, dir, "good", `-DEXAMPLE_NAME="good"`)
	buildExample(t, dir, "noruntime", `-DEXAMPLE_NAME="noruntime"`, "-DEXAMPLE_BREAK_INIT_FAIL")
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"vendor runtime does not load", nil, []string{"--ranks", "noruntime:2"},
			"flagcx: error: backend noruntime: " + filepath.Join(dir, "libflagcx-noruntime.so") + ": vendor runtime does not load: "},
		{"more ranks than devices", nil, []string{"--ranks", "good:3"},
			"flagcx: error: --ranks puts 3 ranks on good, but the good plugin sees 2 device(s) on this host (one rank per device): start at most 2"},
		{"more ranks than devices, --np", nil, []string{"--np", "3", "--backend", "good"},
			"flagcx: error: --np 3 --backend good starts 3 ranks on it, but the good plugin sees 2 device(s) on this host (one rank per device): start at most 2"},
		{"short secret", []string{"FLAGCX_COMM_SECRET=abc"}, []string{"--np", "2"},
			"flagcx: error: invalid argument: FLAGCX_COMM_SECRET must be 32 hex digits (e.g. from `openssl rand -hex 16`), got 3 characters"},
		{"comm id", []string{"FLAGCX_COMM_ID=notaport"}, []string{"--np", "2"},
			`flagcx: error: invalid argument: FLAGCX_COMM_ID="notaport" is not host:port (e.g. 10.0.0.1:29500, [fd00::1]:29500)`},
		{"debug level", []string{"FLAGCX_DEBUG=LOUD"}, []string{"--np", "2"},
			`FLAGCX_DEBUG="LOUD"`},
		{"IB without an RDMA device", []string{"FLAGCX_NET=IB", "FLAGCX_IB_HCA=flagcx_no_such_hca"}, []string{"--np", "2"},
			"FLAGCX_NET=IB: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := cleanEnv(append(c.env, "FLAGCX_EXAMPLE_DEVICES=2")...)
			r := runFlagcx(t, 60*time.Second, env, append([]string{"--plugin-dir", dir, "bench", "allreduce", "-e", "1K"}, c.args...)...)
			t.Logf("stderr:\n%s", r.stderr)
			require.Equal(t, 1, r.code)
			lines := errorLines(r.stderr)
			require.Len(t, lines, 1, "one error, from the launcher")
			require.Contains(t, lines[0], c.want)
			require.NotContains(t, r.stderr, "rank 0:", "no rank started")
			require.Empty(t, r.stdout, "no rank started")
		})
	}
}
