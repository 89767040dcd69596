package launch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary doubles as a rank: with envChild set, TestMain runs the
// behaviour it names instead of the tests.
const envChild = "FLAGCX_LAUNCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(envChild); ok {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

func child(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv(EnvRank))
	switch mode {
	case "ok":
		fmt.Printf("out from rank %d of %s id=%s\n", rank, os.Getenv(EnvNRanks), os.Getenv(EnvUniqueID))
		fmt.Fprintf(os.Stderr, "line one\nline two")
		if os.Getenv("OMPI_COMM_WORLD_RANK") != "" || os.Getenv("RANK") != "" {
			fmt.Fprintln(os.Stderr, "outer launcher variable leaked")
			return 3
		}
		return 0
	case "rank1fails":
		if rank == 1 {
			fmt.Fprintln(os.Stderr, "giving up")
			return 7
		}
		time.Sleep(200 * time.Millisecond)
		return 0
	case "survivors":
		if rank == 1 {
			return 7
		}
		time.Sleep(time.Second) // past the grace period of TestLocalKeepGoing
		fmt.Printf("survivor %d\n", rank)
		return 0
	case "rank2crashes":
		if rank == 2 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Second)
		}
		return 0
	case "othershang":
		if rank == 0 {
			return 1
		}
		time.Sleep(time.Minute)
		return 0
	case "reportsandhangs":
		// A rank whose plugin call never returned: it reports, then cannot
		// exit; its peer waits, silent.
		if rank == 1 {
			fmt.Fprintln(os.Stderr, "about to give up")
			ReportFatal(os.LookupEnv, os.Stderr, errors.New("rank 1: acme plugin: allReduce did not return\nwithin 2s"))
		}
		time.Sleep(time.Minute)
		return 0
	}
	return 99
}

func runTestRanks(t *testing.T, mode string, np int) (stdout, stderr string, err error, took time.Duration) {
	t.Helper()
	return runTestRanksKeepGoing(t, mode, np, false)
}

func runTestRanksKeepGoing(t *testing.T, mode string, np int, keepGoing bool) (stdout, stderr string, err error, took time.Duration) {
	t.Helper()
	exe, e := os.Executable()
	require.NoError(t, e)
	env := append(os.Environ(), envChild+"="+mode, "OMPI_COMM_WORLD_RANK=5", "RANK=5")
	var out, errb bytes.Buffer
	start := time.Now()
	err = runLocal(exe, np, []string{"-test.run=^$"}, env, "127.0.0.1:1#id", &out, &errb, keepGoing)
	return out.String(), errb.String(), err, time.Since(start)
}

func TestLocalSuccess(t *testing.T) {
	stdout, stderr, err, _ := runTestRanks(t, "ok", 3)
	require.NoError(t, err, stderr)
	require.Equal(t, "out from rank 0 of 3 id=127.0.0.1:1#id\n", stdout, "only rank 0's stdout passes")
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	require.Len(t, lines, 6, stderr)
	for r := 0; r < 3; r++ {
		require.Contains(t, lines, fmt.Sprintf("rank %d: line one", r))
		require.Contains(t, lines, fmt.Sprintf("rank %d: line two", r)) // flushed without a newline
	}
}

func TestLocalFailure(t *testing.T) {
	_, stderr, err, _ := runTestRanks(t, "rank1fails", 3)
	require.Error(t, err)
	var re *RankError
	require.True(t, errors.As(err, &re))
	require.Equal(t, 1, re.Rank)
	require.Equal(t, 7, re.ExitCode)
	require.Equal(t, "rank 1 exited with status 7", err.Error())
	require.Contains(t, stderr, "rank 1: giving up\n")
}

// TestLocalKeepGoing: with KeepGoing a failed rank leaves the others
// running past the grace period, every rank's stdout passes (a survivor
// may be the new rank 0), and the failure is still reported at the end.
func TestLocalKeepGoing(t *testing.T) {
	old := GracePeriod
	GracePeriod = 100 * time.Millisecond
	defer func() { GracePeriod = old }()
	stdout, _, err, _ := runTestRanksKeepGoing(t, "survivors", 3, true)
	require.EqualError(t, err, "rank 1 exited with status 7")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.ElementsMatch(t, []string{"survivor 0", "survivor 2"}, lines)
}

func TestLocalSignal(t *testing.T) {
	_, _, err, _ := runTestRanks(t, "rank2crashes", 3)
	require.Error(t, err)
	var re *RankError
	require.True(t, errors.As(err, &re))
	require.Equal(t, 2, re.Rank)
	require.Equal(t, syscall.SIGKILL, re.Signal)
	require.Contains(t, err.Error(), "rank 2 was killed by signal 9 (killed)")
}

func TestLocalKillsHangingRanks(t *testing.T) {
	old := GracePeriod
	GracePeriod = 300 * time.Millisecond
	defer func() { GracePeriod = old }()
	_, _, err, took := runTestRanks(t, "othershang", 3)
	require.Error(t, err)
	require.Less(t, took, 10*time.Second)
	require.Contains(t, err.Error(), "rank 0 exited with status 1")
	require.Contains(t, err.Error(), "killed after")
}

// TestLocalEndsOnAFatalReport: a rank that reports a fatal error (a plugin
// call that never returned) ends the launch after GracePeriod although no
// rank exits: every rank is killed, and the error is the report, which
// names the rank and the call; the report line itself is not passed on.
func TestLocalEndsOnAFatalReport(t *testing.T) {
	old := GracePeriod
	GracePeriod = 300 * time.Millisecond
	defer func() { GracePeriod = old }()
	_, stderr, err, took := runTestRanks(t, "reportsandhangs", 3)
	require.Error(t, err)
	require.Less(t, took, 10*time.Second)
	require.Regexp(t, `^rank 1: acme plugin: allReduce did not return within 2s \(killed after 300ms: ranks (0, 2|2, 0)\)$`, err.Error())
	var re *RankError
	require.True(t, errors.As(err, &re))
	require.Equal(t, 1, re.Rank)
	require.Equal(t, syscall.SIGKILL, re.Signal)
	require.Contains(t, stderr, "rank 1: about to give up\n")
	require.NotContains(t, stderr, fatalPrefix)
}

// TestReportFatalOnlyUnderTheLocalLauncher: outside a local launch the
// report line would only be noise.
func TestReportFatalOnlyUnderTheLocalLauncher(t *testing.T) {
	var out bytes.Buffer
	ReportFatal(func(string) (string, bool) { return "", false }, &out, errors.New("stuck"))
	require.Empty(t, out.String())
	ReportFatal(func(k string) (string, bool) { return "1", k == EnvFatalReport }, &out, errors.New("rank 2: stuck\nfor good"))
	require.Equal(t, "flagcx: fatal: rank 2: stuck for good\n", out.String())
	require.NotContains(t, stripLauncherEnv([]string{EnvFatalReport + "=1", "A=b"}), EnvFatalReport+"=1")
}

func TestLocalBadArgs(t *testing.T) {
	err := Local(0, nil, nil, nil, nil)
	require.ErrorContains(t, err, "--np 0")
	err = runLocal("/nonexistent/flagcx", 2, nil, nil, "id", &bytes.Buffer{}, &bytes.Buffer{}, false)
	require.ErrorContains(t, err, "rank 0: could not start /nonexistent/flagcx")
}

func TestPrefixWriter(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	p := &prefixWriter{w: &out, mu: &mu, prefix: []byte("rank 3: ")}
	for _, chunk := range []string{"hel", "lo\nwor", "ld\n", "50%\r", "60%\r", "\ntail"} {
		_, err := p.Write([]byte(chunk))
		require.NoError(t, err)
	}
	p.Flush()
	require.Equal(t, "rank 3: hello\nrank 3: world\n50%\r60%\rrank 3: \nrank 3: tail\n", out.String())
	require.False(t, strings.Contains(out.String(), "rank 3: 50%"))
}
