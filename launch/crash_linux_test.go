package launch

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"
)

// A rank of mode "faultinc" (rank 1) faults in C code, as a plugin would:
// strlen(NULL) through purego. It runs from init, before TestMain's modes.
func init() {
	if os.Getenv(envChild) != "faultinc" {
		return
	}
	if os.Getenv(EnvRank) != "1" {
		os.Exit(0)
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		os.Exit(98) // no glibc: the test skips
	}
	strlen, err := purego.Dlsym(libc, "strlen")
	if err != nil {
		os.Exit(98)
	}
	os.Stderr.WriteString("before the fault\n")
	purego.SyscallN(strlen, 0)
	os.Exit(0)
}

// TestLocalCrashInC: a rank that a fault in C code kills is one line: its
// signal and where the runtime's report went, which holds the goroutine
// dump that stderr does not.
func TestLocalCrashInC(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	_, stderr, err, _ := runTestRanks(t, "faultinc", 2)
	var re *RankError
	require.True(t, errors.As(err, &re), "%v", err)
	if re.ExitCode == 98 {
		t.Skip("no libc.so.6 to fault in")
	}
	require.Equal(t, 1, re.Rank)
	require.Equal(t, 2, re.ExitCode, "the runtime's exit after its report")
	require.NotNil(t, re.Crash)
	require.Equal(t, "rank 1 crashed with SIGSEGV (no vendor plugin call was running); the Go runtime's report is in "+re.Crash.Report, err.Error())
	require.Equal(t, "rank 1: before the fault\n", stderr)
	report, rerr := os.ReadFile(re.Crash.Report)
	require.NoError(t, rerr)
	require.True(t, strings.HasPrefix(string(report), "SIGSEGV: segmentation violation\nPC="), "%s", report)
	require.Contains(t, string(report), "signal arrived during cgo execution")
	require.Contains(t, string(report), "\ngoroutine ")
}
