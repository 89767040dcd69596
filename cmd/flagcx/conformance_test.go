package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// examplePlugin compiles the conformance example plugin (with flags, e.g. a
// negative control) into a fresh plugin dir.
func examplePlugin(t *testing.T, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden",
		"-I", filepath.Join(root, "sdk", "include"), "-o", filepath.Join(dir, "libflagcx-example.so"),
		filepath.Join(root, "conformance", "example", "example.c"), "-lrt", "-pthread"}, flags...)
	out, err := exec.Command("gcc", args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return dir
}

type junitDoc struct {
	Name     string `xml:"name,attr"`
	Tests    int    `xml:"tests,attr"`
	Failures int    `xml:"failures,attr"`
	Suites   []struct {
		Name       string `xml:"name,attr"`
		Properties []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"properties>property"`
	} `xml:"testsuite"`
}

type jsonDoc struct {
	Emulated bool `json:"emulated"`
	Passed   bool `json:"passed"`
	Cases    []struct {
		ID     string `json:"id"`
		Level  string `json:"level"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"cases"`
}

func readReports(t *testing.T, junit, js string) (junitDoc, jsonDoc) {
	t.Helper()
	var j junitDoc
	b, err := os.ReadFile(junit)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, &j))
	return j, readJSON(t, js)
}

func readJSON(t *testing.T, js string) jsonDoc {
	t.Helper()
	var d jsonDoc
	b, err := os.ReadFile(js)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// TestConformanceExample: the example plugin (the host CPU as a vendor)
// passes; the reports are written and say it was not emulated.
func TestConformanceExample(t *testing.T) {
	dir := examplePlugin(t)
	out := t.TempDir()
	junit, js := filepath.Join(out, "c.xml"), filepath.Join(out, "c.json")
	r := runFlagcx(t, 3*time.Minute, cleanEnv(), "--plugin-dir", dir, "conformance", "--np", "2,3", "--quick",
		"--junit", junit, "--json", js)
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "flagcx conformance: real vendor runtimes, ranks 2,3, quick matrix")
	require.Regexp(t, `(?m)^example, 3 ranks: \d+ passed, 0 failed, 0 skipped`, r.stdout)
	require.Regexp(t, `(?m)^   allreduce +\d+ +0 +0$`, r.stdout)
	require.Contains(t, r.stdout, "   result: PASS (")
	require.NotContains(t, strings.ToLower(r.stdout), "emulated")
	j, d := readReports(t, junit, js)
	require.Equal(t, "flagcx conformance", j.Name)
	require.Zero(t, j.Failures)
	require.Equal(t, len(d.Cases), j.Tests)
	require.Equal(t, "example", j.Suites[0].Name)
	require.True(t, d.Passed)
	require.False(t, d.Emulated)
	require.Greater(t, len(d.Cases), 1000)
}

// TestConformanceNvidiaEmulated: the make-built nvidia plugin on the
// emulated CUDA/NCCL passes a slice of the matrix, and every report says
// emulated.
func TestConformanceNvidiaEmulated(t *testing.T) {
	out := t.TempDir()
	junit, js := filepath.Join(out, "c.xml"), filepath.Join(out, "c.json")
	r := runFlagcx(t, 3*time.Minute, cleanEnv(), "--plugin-dir", pluginDir(t), "conformance", "--emulated", "--plugin", "nvidia",
		"--np", "2", "--quick", "--run", `^(device|comm|plugin)\.|allreduce\.float(16|32)\.|p2p\.ring`, "--junit", junit, "--json", js)
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, want := range []string{
		"flagcx conformance: EMULATED vendor runtimes (conformance/vendorsim)",
		"nvidia (emulated), 2 ranks:",
		": EMULATED vendor runtimes\n",
		"emulated\n", // the library lines
		"result: PASS (emulated vendor runtimes)",
		"conformance (emulated vendor runtimes): 1 plugins,",
	} {
		require.Contains(t, r.stdout, want)
	}
	j, d := readReports(t, junit, js)
	require.Equal(t, "flagcx conformance (emulated vendor runtimes)", j.Name)
	require.Equal(t, "nvidia (emulated)", j.Suites[0].Name)
	found := false
	for _, p := range j.Suites[0].Properties {
		found = found || (p.Name == "emulated" && p.Value == "true")
	}
	require.True(t, found, "the JUnit suite has the property emulated=true")
	require.True(t, d.Emulated)
	require.True(t, d.Passed)
}

// TestConformanceFailure: a plugin with wrong sums fails with exit status 1
// and one error line; the failures are listed with their reason.
func TestConformanceFailure(t *testing.T) {
	dir := examplePlugin(t, "-DEXAMPLE_BREAK_SUM")
	js := filepath.Join(t.TempDir(), "c.json")
	r := runFlagcx(t, time.Minute, cleanEnv(), "--plugin-dir", dir, "conformance", "--np", "2", "--quick",
		"--run", `allreduce\.float32`, "--json", js)
	require.Equal(t, 1, r.code, r.stdout)
	lines := errorLines(r.stderr)
	require.Len(t, lines, 1, r.stderr)
	require.Regexp(t, `^flagcx: error: conformance failed: \d+ cases failed \(example: \d+\)`, lines[0])
	require.Regexp(t, `(?m)^     \[MUST\] coll\.allreduce\.float32\.sum\.n2\.count1031\.outofplace: wrong result: rank \d: recv buffer: `, r.stdout)
	d := readJSON(t, js)
	require.False(t, d.Passed)
	statuses := map[string]string{}
	for _, c := range d.Cases {
		statuses[c.ID] = c.Status
	}
	require.Equal(t, "failed", statuses["coll.allreduce.float32.sum.n2.count1031.inplace"])
	require.Equal(t, "passed", statuses["coll.allreduce.float32.max.n2.count1031.inplace"], "only sums are broken")
}

// TestConformanceBadInputs: mistakes end with one error line.
func TestConformanceBadInputs(t *testing.T) {
	dir := examplePlugin(t)
	cases := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"unknown plugin", nil, []string{"--plugin-dir", dir, "conformance", "--plugin", "acme"}, []string{`no plugin "acme"`, "found: example"}},
		{"one rank", nil, []string{"--plugin-dir", dir, "conformance", "--np", "1"}, []string{"--np 1"}},
		{"negative size, listing", nil, []string{"conformance", "--list", "--np", "-1"}, []string{"--np -1", "from 2 to 64"}},
		{"size too large, listing", nil, []string{"conformance", "--list", "--np", "2,65"}, []string{"--np 65", "from 2 to 64"}},
		{"negative timeout", nil, []string{"--plugin-dir", dir, "conformance", "--timeout", "-1s"}, []string{"--timeout -1s", "positive"}},
		{"bad regexp", nil, []string{"--plugin-dir", dir, "conformance", "--run", "("}, []string{"--run"}},
		{"empty dir", nil, []string{"--plugin-dir", t.TempDir(), "conformance"}, []string{"no plugins"}},
		{"worker by hand", nil, []string{"conformance", "--worker"}, []string{"--worker is internal"}},
		{"example emulated", nil, []string{"--plugin-dir", dir, "conformance", "--emulated", "--np", "2"}, []string{"conformance failed on emulated vendor runtimes: 1 cases failed (example: 1)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runFlagcx(t, 30*time.Second, cleanEnv(c.env...), c.args...)
			require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			lines := errorLines(r.stderr)
			require.Len(t, lines, 1, r.stderr)
			for _, w := range c.want {
				require.Contains(t, lines[0], w)
			}
			require.NotContains(t, r.stderr, "panic")
		})
	}
}

// TestConformanceList prints the matrix without running it.
func TestConformanceList(t *testing.T) {
	r := runFlagcx(t, 30*time.Second, cleanEnv(), "conformance", "--list", "--np", "3", "--run", `^coll\.allreduce\.float16\.sum\.n3\.count1031\.inplace$|^device\.count$`)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "MUST   device.count: getDeviceCount reports at least one device\n"+
		"MUST   coll.allreduce.float16.sum.n3.count1031.inplace: allreduce sum of 1031 float16 elements, 3 ranks, in place\n"+
		"2 cases per plugin (before skips for what a plugin does not support)\n", r.stdout)
	all := runFlagcx(t, 30*time.Second, cleanEnv(), "conformance", "--list", "--quick")
	require.Zero(t, all.code)
	n := regexp.MustCompile(`(?m)^(\d+) cases per plugin`).FindStringSubmatch(all.stdout)
	require.NotNil(t, n)
	total, err := strconv.Atoi(n[1])
	require.NoError(t, err)
	require.Equal(t, strings.Count(all.stdout, "\n")-1, total)
	require.Greater(t, total, 500)
}
