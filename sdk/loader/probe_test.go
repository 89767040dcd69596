package loader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestMain makes this test binary a probe process when ProbeAll starts it
// as one (probeOptions), as flagcx plugins --probe is, and a rank process
// when testkit.Run starts it as one (vendors_test.go).
func TestMain(m *testing.M) {
	testkit.ServeWorker()
	if IsProbeChild() {
		if err := ServeProbe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probeOptions probes dir with this test binary.
func probeOptions(dir string, timeout time.Duration) ProbeOptions {
	return ProbeOptions{Options: Options{Dir: dir}, Command: []string{os.Args[0]}, Timeout: timeout}
}

// examplePlugin compiles the conformance example plugin with flags as
// dir/libflagcx-<name>.so, its table named name as well.
func examplePlugin(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, "libflagcx-"+name+".so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden",
		"-I", filepath.Join(repoRoot(t), "sdk", "include"), "-o", out, filepath.Join(repoRoot(t), "conformance", "example", "example.c"),
		"-lrt", "-pthread", fmt.Sprintf(`-DEXAMPLE_NAME="%s"`, name)}, flags...)
	msg, err := exec.Command("gcc", args...).CombinedOutput()
	require.NoError(t, err, "gcc %s:\n%s", strings.Join(args, " "), msg)
	return out
}

func probedByName(all []Probed) map[string]Probed {
	m := map[string]Probed{}
	for _, p := range all {
		m[p.Name] = p
	}
	return m
}

// TestProbeIsolatesBadPlugins: plugins that crash in an ELF constructor or
// in init, hang in init, or exit from it, beside good ones. Each bad one is
// reported against its file with what happened and how to skip it, the good
// ones (one printing to stdout) load and list their devices, and the hangs,
// probed side by side, cost one deadline, not one each.
func TestProbeIsolatesBadPlugins(t *testing.T) {
	dir := t.TempDir()
	examplePlugin(t, dir, "good")
	examplePlugin(t, dir, "noisy", "-DEXAMPLE_INIT_STDOUT")
	mockPlugin(t, dir, "acme")
	cases := []struct {
		name, flag string
		failure    ProbeFailure
		problem    string
	}{
		{"segv", "-DEXAMPLE_BREAK_INIT_SEGV", ProbeCrashed, "the plugin crashed during init (SIGSEGV)"},
		{"ctor", "-DEXAMPLE_BREAK_CONSTRUCTOR_SEGV", ProbeCrashed, "the plugin crashed while being loaded, in dlopen or an ELF constructor (SIGSEGV)"},
		{"hang", "-DEXAMPLE_BREAK_INIT_HANG", ProbeHung, "the plugin did not finish init within 3s"},
		{"hang-too", "-DEXAMPLE_BREAK_INIT_HANG", ProbeHung, "the plugin did not finish init within 3s"},
		{"quits", "-DEXAMPLE_BREAK_INIT_EXIT", ProbeExited, "the probe process exited with status 3 during init, without an answer"},
	}
	for _, c := range cases {
		examplePlugin(t, dir, c.name, c.flag)
	}
	t.Setenv("FLAGCX_EXAMPLE_DEVICES", "3")

	const timeout = 3 * time.Second
	o := probeOptions(dir, timeout)
	o.Devices = true
	var output bytes.Buffer
	o.Output = &output
	start := time.Now()
	all, err := ProbeAll(context.Background(), o)
	took := time.Since(start)
	require.NoError(t, err)
	require.Less(t, took, 2*timeout, "the probes run side by side: two hangs cost one deadline")
	byName := probedByName(all)
	require.Len(t, all, len(cases)+3)

	for _, name := range []string{"good", "noisy"} {
		g := byName[name]
		require.True(t, g.OK(), "%s: %v", name, g.Err)
		require.Empty(t, g.Failure)
		require.Equal(t, "EXAMPLE", g.Plugin.Vendor)
		require.Equal(t, sdk.PluginABIVersion, g.Plugin.ABIVersion)
		require.Len(t, g.Plugin.Info.DataTypes, 10)
		require.NotNil(t, g.Devices, name)
		require.Equal(t, 3, g.Devices.Count)
		require.Equal(t, "example host CPU device 2", g.Devices.Devices[2].Name)
		require.Equal(t, "SYS", g.Devices.Links[0][1].Name)
		require.Equal(t, LinkSelf, g.Devices.Links[1][1].Type)
	}
	require.Contains(t, output.String(), "example plugin: hello on stdout", "what a plugin prints reaches Output, and cannot pass for an answer")
	require.True(t, byName["acme"].OK(), "%v", byName["acme"].Err)
	require.Equal(t, "Acme X1", byName["acme"].Devices.Devices[0].Name)

	for _, c := range cases {
		b := byName[c.name]
		require.Equal(t, c.failure, b.Failure, c.name)
		require.False(t, b.OK(), c.name)
		var pe *ProbeError
		require.ErrorAs(t, b.Err, &pe, c.name)
		require.ErrorIs(t, b.Err, sdk.ErrSystemError)
		require.Equal(t, filepath.Join(dir, "libflagcx-"+c.name+".so"), pe.Path)
		require.Equal(t, c.problem, pe.Problem, c.name)
		require.Contains(t, b.Err.Error(), "plugin file "+pe.Path+": ")
		require.Contains(t, b.Err.Error(), "run with "+OverrideVar(c.name)+"=none to skip it")
		if c.name == "ctor" {
			require.Nil(t, b.Plugin, "it crashed before its table was read")
		} else {
			require.NotNil(t, b.Plugin, "%s: the table was read before init", c.name)
			require.Equal(t, c.name, b.Plugin.Name)
		}
	}
	require.NotContains(t, output.String(), "goroutine ", "a crashed probe's runtime dump is not passed on")
	require.NotContains(t, output.String(), "SIGSEGV")
}

// TestProbeReportsBadAnswers: probe processes that answer garbage, answer
// nothing, or die of a signal before answering, whatever the plugin.
func TestProbeReportsBadAnswers(t *testing.T) {
	dir := t.TempDir()
	mockPlugin(t, dir, "acme")
	for _, tc := range []struct {
		name, script string
		failure      ProbeFailure
		problem      string
	}{
		{"garbage", `echo 'this is not json' >&3`, ProbeGarbled, "the probe process answered garbage before loading the plugin (invalid character 'h' in literal true (expecting 'r'))"},
		{"silent", `exit 0`, ProbeGarbled, "the probe process ended without an answer before loading the plugin"},
		{"half", `printf '{"stage":"init","plugin":{"Name":"acme"}}\n{"stage":' >&3`, ProbeGarbled, "the probe process answered garbage during init (unexpected EOF)"},
		{"killed", `printf '{"stage":"init"}\n' >&3; kill -SEGV $$`, ProbeCrashed, "the plugin crashed during init (SIGSEGV)"},
		{"status", `echo 'something broke' >&2; exit 7`, ProbeExited, "the probe process exited with status 7 before loading the plugin, without an answer; its last output: something broke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := probeOptions(dir, 10*time.Second)
			o.Command = []string{"/bin/sh", "-c", tc.script}
			all, err := ProbeAll(context.Background(), o)
			require.NoError(t, err)
			require.Len(t, all, 1)
			require.Equal(t, tc.failure, all[0].Failure)
			var pe *ProbeError
			require.ErrorAs(t, all[0].Err, &pe)
			require.Equal(t, tc.problem, pe.Problem)
		})
	}
	_, err := ProbeAll(context.Background(), ProbeOptions{Options: Options{Dir: dir}})
	require.ErrorContains(t, err, "Command is empty")
	all, err := ProbeAll(context.Background(), ProbeOptions{Options: Options{Dir: dir}, Command: []string{filepath.Join(dir, "no-such-program")}})
	require.NoError(t, err)
	require.ErrorContains(t, all[0].Err, "cannot start a probe process")
	require.ErrorContains(t, all[0].Err, "the plugin was not tried")
}

// TestProbeMatchesLoadAll: what a probe reports about bad files and a
// missing vendor library is what LoadAll reports in-process, errors.Is
// included.
func TestProbeMatchesLoadAll(t *testing.T) {
	dir := t.TempDir()
	for _, bf := range badFiles() {
		bf.make(t, filepath.Join(dir, "libflagcx-"+bf.name+".so"))
	}
	mockPlugin(t, dir, "acme", "-DMOCK_INIT_FAIL")
	t.Setenv(OverrideVar("extra"), filepath.Join(dir, "libflagcx-text.so"))

	probed, err := ProbeAll(context.Background(), probeOptions(dir, 10*time.Second))
	require.NoError(t, err)
	loaded, err := LoadAll(Options{Dir: dir})
	require.NoError(t, err)
	require.Len(t, probed, len(loaded))
	for i, l := range loaded {
		p := probed[i]
		require.Equal(t, l.Candidate, p.Candidate)
		require.Empty(t, p.Failure, p.Name)
		require.Error(t, p.Err, p.Name)
		require.Equal(t, l.Err.Error(), p.Err.Error(), p.Name)
		require.Equal(t, l.Plugin == nil, p.Plugin == nil, p.Name)
		for _, s := range []error{ErrNotSharedObject, ErrNoTable, ErrUnknownABI, ErrBadTable, sdk.ErrInvalidUsage, sdk.ErrSystemError} {
			require.Equal(t, errors.Is(l.Err, s), errors.Is(p.Err, s), "%s: errors.Is(%v)", p.Name, s)
		}
	}
	acme := probedByName(probed)["acme"]
	require.ErrorIs(t, acme.Err, sdk.ErrSystemError)
	require.Equal(t, "cannot load libacmert.so.1: set FLAGCX_ACME_RT", acme.Plugin.Info.Libraries[0].Error, "init's report on its libraries survives a failed init")
	require.Contains(t, probedByName(probed)["extra"].Err.Error(), "(named by "+OverrideVar("extra")+")")
}

// TestNameMismatchWarning: a file libflagcx-foo.so whose table says "acme"
// is warned about, naming the file and both names: once on stderr however
// often it is loaded, in Loaded.Warnings, and in a probe's Warnings (not
// on the probe's stderr, where a listing would show it twice).
func TestNameMismatchWarning(t *testing.T) {
	dir := t.TempDir()
	path := mockPlugin(t, dir, "foo")
	mockPlugin(t, dir, "acme")
	var warnings bytes.Buffer
	old := warnOutput
	warnOutput = &warnings
	t.Cleanup(func() { warnOutput = old })

	for range 2 {
		all, err := LoadAll(Options{Dir: dir})
		require.NoError(t, err)
		byName := map[string]Loaded{}
		for _, l := range all {
			byName[l.Name] = l
		}
		require.Empty(t, byName["acme"].Warnings, "file and table agree")
		require.Len(t, byName["foo"].Warnings, 1)
		w := byName["foo"].Warnings[0]
		require.Contains(t, w, path)
		require.Contains(t, w, `plugin "foo" by its file name, but its table says name "acme"`)
		require.Contains(t, w, "rename the file libflagcx-acme.so")
	}
	_, err := Candidate{Name: "foo", Path: path, Source: "plugin dir"}.Open()
	require.NoError(t, err)
	_, err = Open(path) // as a benchmark rank or a conformance worker opens it
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(warnings.String(), "flagcx: warning: "), "once per process:\n%s", warnings.String())
	require.Contains(t, warnings.String(), "flagcx: warning: plugin file "+path+" is plugin \"foo\"")

	other := filepath.Join(t.TempDir(), "vendor.so")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, b, 0o755))
	t.Setenv(OverrideVar("bar"), other)
	var output bytes.Buffer
	o := probeOptions(dir, 10*time.Second)
	o.Output = &output
	probed, err := ProbeAll(context.Background(), o)
	require.NoError(t, err)
	byName := probedByName(probed)
	require.Empty(t, byName["acme"].Warnings)
	require.Len(t, byName["foo"].Warnings, 1)
	require.Contains(t, byName["foo"].Warnings[0], path)
	require.Contains(t, byName["foo"].Warnings[0], `says name "acme"`)
	require.Len(t, byName["bar"].Warnings, 1)
	require.Contains(t, byName["bar"].Warnings[0], `plugin file `+other+` is plugin "bar" by its variable FLAGCX_PLUGIN_BAR, but its table says name "acme"`)
	require.Contains(t, byName["bar"].Warnings[0], "set FLAGCX_PLUGIN_ACME instead")
	require.NotContains(t, output.String(), "warning")

	warnings.Reset()
	_, err = Candidate{Name: "bar", Path: other, Source: OverrideVar("bar")}.Open()
	require.NoError(t, err)
	require.Equal(t, "flagcx: warning: "+byName["bar"].Warnings[0]+"\n", warnings.String(), "loading warns as the listing does")
}

// TestOpenRelativePath: a plugin dir given as "." makes paths without a
// slash, which dlopen would look up on the library path instead.
func TestOpenRelativePath(t *testing.T) {
	dir := t.TempDir()
	mockPlugin(t, dir, "acme")
	t.Chdir(dir)
	all, err := LoadAll(Options{Dir: "."})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "libflagcx-acme.so", all[0].Path)
	require.True(t, all[0].OK(), "%v", all[0].Err)
}

func TestServeProbeOutsideAProbe(t *testing.T) {
	t.Setenv(EnvProbeRequest, "{}")
	require.True(t, IsProbeChild())
	err := ServeProbe()
	require.ErrorContains(t, err, "does not hold a probe request")
	_, set := os.LookupEnv(EnvProbeRequest)
	require.False(t, set, "what a probe starts is not a probe")
}
