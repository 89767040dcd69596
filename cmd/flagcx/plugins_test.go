package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildExample compiles the conformance example plugin with flags as
// dir/libflagcx-<file>.so.
func buildExample(t *testing.T, dir, file string, flags ...string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	out := filepath.Join(dir, "libflagcx-"+file+".so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden",
		"-I", filepath.Join(root, "sdk", "include"), "-o", out, filepath.Join(root, "conformance", "example", "example.c"),
		"-lrt", "-pthread"}, flags...)
	msg, err := exec.Command("gcc", args...).CombinedOutput()
	require.NoError(t, err, "%s", msg)
	return out
}

// TestPluginsIsolatesBadPlugins: a plugin dir with plugins that crash in
// init and in an ELF constructor and one that hangs in init, beside a good
// one and one whose table names it otherwise. `plugins` and `devices` list
// the good ones, name each bad file with what happened, finish within the
// probe deadline and exit 1 with one error line; skipping the bad ones
// with FLAGCX_PLUGIN_<NAME>=none, as the listing says, makes them pass.
func TestPluginsIsolatesBadPlugins(t *testing.T) {
	dir := t.TempDir()
	buildExample(t, dir, "good", `-DEXAMPLE_NAME="good"`)
	foo := buildExample(t, dir, "foo") // its table says "example"
	bad := []struct{ name, flag, status, reason string }{
		{"segv", "-DEXAMPLE_BREAK_INIT_SEGV", "crashed", "the plugin crashed during init (SIGSEGV)"},
		{"ctor", "-DEXAMPLE_BREAK_CONSTRUCTOR_SEGV", "crashed", "the plugin crashed while being loaded, in dlopen or an ELF constructor (SIGSEGV)"},
		{"hang", "-DEXAMPLE_BREAK_INIT_HANG", "hung", "the plugin did not finish init within 3s (FLAGCX_TIMEOUT sets this deadline)"},
	}
	for _, b := range bad {
		buildExample(t, dir, b.name, fmt.Sprintf(`-DEXAMPLE_NAME="%s"`, b.name), b.flag)
	}
	env := cleanEnv("FLAGCX_TIMEOUT=3", "FLAGCX_EXAMPLE_DEVICES=2")
	warning := fmt.Sprintf(`warning: plugin file %s is plugin "foo" by its file name, but its table says name "example"`, foo)

	for _, cmd := range []string{"plugins", "devices"} {
		t.Run(cmd, func(t *testing.T) {
			r := runFlagcx(t, 30*time.Second, env, "--plugin-dir", dir, cmd)
			t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Less(t, r.took, 10*time.Second, "the hang costs one probe deadline (3 s)")
			require.Equal(t, 1, r.code)
			require.NotContains(t, r.stdout+r.stderr, "goroutine", "no Go crash dump")
			require.Len(t, errorLines(r.stderr), 1)
			require.Equal(t, "flagcx: error: system error: ctor (crashed), hang (hung), segv (crashed) failed while being probed (the listing above says how; it would fail whatever loads it): FLAGCX_PLUGIN_<NAME>=none skips a plugin",
				errorLines(r.stderr)[0])
			for _, b := range bad {
				file := filepath.Join(dir, "libflagcx-"+b.name+".so")
				require.Contains(t, r.stdout, fmt.Sprintf("plugin file %s: %s; run with FLAGCX_PLUGIN_%s=none to skip it", file, b.reason, strings.ToUpper(b.name)))
			}
			require.Equal(t, 1, strings.Count(r.stdout+r.stderr, "warning:"), "the name mismatch is warned about once")
			require.Contains(t, r.stdout, warning)
			if cmd == "plugins" {
				require.Regexp(t, `(?m)^good\s+EXAMPLE\s+v5\s+loads\s+`+regexp.QuoteMeta(filepath.Join(dir, "libflagcx-good.so"))+`$`, r.stdout)
				require.Regexp(t, `(?m)^foo\s+EXAMPLE\s+v5\s+loads\s`, r.stdout)
				require.Regexp(t, `(?m)^segv\s+EXAMPLE\s+v5\s+crashed\s`, r.stdout)
				require.Regexp(t, `(?m)^hang\s+EXAMPLE\s+v5\s+hung\s`, r.stdout)
				require.Regexp(t, `(?m)^ctor\s+-\s+-\s+crashed\s`, r.stdout, "it crashed before its table was read")
			} else {
				require.Contains(t, r.stdout, "good (EXAMPLE): 2 device(s)")
				require.Contains(t, r.stdout, "foo (EXAMPLE): 2 device(s)")
				require.Regexp(t, `(?m)^\s+1\s+example host CPU device 1\s`, r.stdout)
				require.Regexp(t, `(?m)^\s+D0\s+X\s+SYS$`, r.stdout)
			}
		})
	}

	t.Run("skipped", func(t *testing.T) {
		skip := append(env, "FLAGCX_PLUGIN_SEGV=none", "FLAGCX_PLUGIN_CTOR=none", "FLAGCX_PLUGIN_HANG=none")
		for _, cmd := range []string{"plugins", "devices"} {
			r := runFlagcx(t, 30*time.Second, skip, "--plugin-dir", dir, cmd)
			require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Empty(t, errorLines(r.stderr))
			require.NotContains(t, r.stdout, "segv")
			require.Contains(t, r.stdout, "good")
		}
	})

	t.Run("probe is internal", func(t *testing.T) {
		r := runFlagcx(t, 30*time.Second, cleanEnv(), "plugins", "--probe")
		require.Equal(t, 1, r.code)
		require.Equal(t, []string{"flagcx: error: --probe is internal: flagcx plugins and flagcx devices start their probe processes themselves"}, errorLines(r.stderr))
	})
}
