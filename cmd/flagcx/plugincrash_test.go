package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchPluginCrashInACollective: a plugin that loads and inits fine
// but dereferences NULL in allReduce (issue 48) ends a local launch with
// one line naming the signal, the call and the plugin file, as a crash in
// init does; no Go runtime dump reaches stderr, and the line names the
// file that holds it.
func TestBenchPluginCrashInACollective(t *testing.T) {
	dir := t.TempDir()
	tmp := t.TempDir() // where the launcher writes the runtime's reports
	plugin := buildExample(t, dir, "segv", `-DEXAMPLE_NAME="segv"`, "-DEXAMPLE_BREAK_SEGV")
	env := cleanEnv("FLAGCX_EXAMPLE_DEVICES=2", "FLAGCX_TIMEOUT=60", "TMPDIR="+tmp)
	r := runFlagcx(t, 90*time.Second, env, "--plugin-dir", dir, "bench", "allreduce", "-e", "1K", "--ranks", "segv:2")
	t.Logf("took %v\nstderr:\n%s", r.took, r.stderr)
	require.NotZero(t, r.code)
	require.NotContains(t, r.stderr, "goroutine ", "no runtime dump")
	require.NotContains(t, r.stderr, "PC=")
	require.NotContains(t, r.stderr, "exited with status")
	lines := errorLines(r.stderr)
	require.Len(t, lines, 1)
	m := regexp.MustCompile("^" + regexp.QuoteMeta("flagcx: error: rank ") + `[01]` +
		regexp.QuoteMeta(" crashed with SIGSEGV in plugin call allReduce ("+plugin+"); the Go runtime's report is in ") +
		`(\S+)`).FindStringSubmatch(lines[0])
	require.NotNil(t, m, lines[0])
	require.Equal(t, tmp, filepath.Dir(m[1]))
	report, err := os.ReadFile(m[1])
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(report), "SIGSEGV: segmentation violation\nPC="), "%s", report)
	require.Contains(t, string(report), "signal arrived during cgo execution")
	require.Contains(t, string(report), "sdk/loader.(*Comm).AllReduce", "the whole dump is kept")
	require.LessOrEqual(t, strings.Count(r.stderr, "\n"), 3, "a few lines at most")
}
