package testkit

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The process harness. A rank is this test binary re-executed with
// EnvWorker naming a worker registered with Worker, and the rank, the
// number of ranks, the unique id and the report file in the variables
// below. TestMain calls ServeWorker before anything else: in a rank it
// runs the worker, writes its report as JSON and exits; the test that
// started the ranks (Run) decodes the reports.

// Variables of a rank process.
const (
	EnvWorker = "FLAGCX_TESTKIT_WORKER" // the registered worker to run
	EnvRank   = "FLAGCX_TESTKIT_RANK"
	EnvNranks = "FLAGCX_TESTKIT_NRANKS"
	EnvID     = "FLAGCX_TESTKIT_ID"  // the unique id, hex
	EnvOut    = "FLAGCX_TESTKIT_OUT" // the report file
	// EnvFresh names the test a fresh process runs (InFreshProcess).
	EnvFresh = "FLAGCX_TESTKIT_FRESH"
)

// Rank is what a worker gets: its place in the job.
type Rank struct {
	Rank, N int
	ID      []byte
	out     string
}

// Save writes report as the rank's report now, for a worker that leaves
// with os.Exit before returning (a rank that "crashes" on purpose).
func (r Rank) Save(report any) error {
	data, err := json.Marshal(report)
	if err != nil {
		return err
	}
	return os.WriteFile(r.out, data, 0o600)
}

// WorkerFunc runs one rank. Its report goes to the test as JSON; an error
// fails the rank (the test sees it with the rank's output).
type WorkerFunc func(r Rank) (report any, err error)

var (
	workersMu sync.Mutex
	workers   = map[string]WorkerFunc{}
)

// Worker registers fn under name (call it from an init function).
func Worker(name string, fn WorkerFunc) {
	workersMu.Lock()
	defer workersMu.Unlock()
	if _, dup := workers[name]; dup {
		panic("testkit: worker " + name + " registered twice")
	}
	workers[name] = fn
}

// ServeWorker runs the worker this process was started for and exits; in
// any other process it returns at once. Call it first in TestMain.
func ServeWorker() {
	name := os.Getenv(EnvWorker)
	if name == "" {
		return
	}
	os.Exit(serve(name))
}

func serve(name string) int {
	// Per-thread vendor state (the current device, groups) stays on one thread.
	runtime.LockOSThread()
	workersMu.Lock()
	fn, ok := workers[name]
	workersMu.Unlock()
	if !ok {
		fmt.Fprintf(os.Stderr, "testkit: no worker %q in this test binary\n", name)
		return 2
	}
	r := Rank{out: os.Getenv(EnvOut)}
	var err error
	if r.Rank, err = strconv.Atoi(os.Getenv(EnvRank)); err == nil {
		if r.N, err = strconv.Atoi(os.Getenv(EnvNranks)); err == nil {
			r.ID, err = hex.DecodeString(os.Getenv(EnvID))
		}
	}
	if err != nil || r.out == "" {
		fmt.Fprintf(os.Stderr, "testkit: worker %s: bad rank environment: %v\n", name, err)
		return 2
	}
	report, err := fn(r)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testkit: worker %s, rank %d: %v\n", name, r.Rank, err)
		return 1
	}
	if err := r.Save(report); err != nil {
		fmt.Fprintf(os.Stderr, "testkit: worker %s, rank %d: cannot write the report: %v\n", name, r.Rank, err)
		return 3
	}
	return 0
}

// Spec is a job of rank processes.
type Spec struct {
	Worker  string               // the registered worker every rank runs
	N       int                  // ranks
	ID      []byte               // the unique id every rank gets
	Env     []string             // added to every rank's environment
	PerRank func(r int) []string // added to rank r's environment (may be nil)
	Skip    func(r int) bool     // ranks not to start (may be nil)
	Timeout time.Duration        // for the whole job; 0: 90 s
}

// Result is one rank's outcome: its report and its output (stdout and
// stderr together).
type Result[T any] struct {
	Report T
	Log    string
}

// Run starts the ranks of s, waits for all of them and returns their
// reports. A rank whose process fails, or whose report is missing or
// unreadable, fails the test with the rank's output. Ranks s.Skip leaves
// out have zero results.
func Run[T any](t testing.TB, s Spec) []Result[T] {
	t.Helper()
	require.NotEmpty(t, s.Worker, "testkit.Run: no worker")
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res := make([]Result[T], s.N)
	errs := make([]error, s.N)
	var wg sync.WaitGroup
	for r := range s.N {
		if s.Skip != nil && s.Skip(r) {
			continue
		}
		out := filepath.Join(dir, fmt.Sprintf("rank%d.json", r))
		// -test.run=^$: should TestMain not serve the worker, no test runs
		// and the missing report says so.
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), EnvWorker+"="+s.Worker, EnvRank+"="+strconv.Itoa(r), EnvNranks+"="+strconv.Itoa(s.N),
			EnvID+"="+hex.EncodeToString(s.ID), EnvOut+"="+out)
		cmd.Env = append(cmd.Env, s.Env...)
		if s.PerRank != nil {
			cmd.Env = append(cmd.Env, s.PerRank(r)...)
		}
		var log strings.Builder
		cmd.Stdout, cmd.Stderr = &log, &log
		require.NoError(t, cmd.Start())
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			res[r].Log = log.String()
			if err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("%w (the job ran past %v)", err, timeout)
				}
				errs[r] = fmt.Errorf("rank %d of worker %s: %w\n%s", r, s.Worker, err, res[r].Log)
				return
			}
			data, err := os.ReadFile(out)
			if err == nil {
				err = json.Unmarshal(data, &res[r].Report)
			}
			if err != nil {
				errs[r] = fmt.Errorf("rank %d of worker %s: report: %w (does TestMain call testkit.ServeWorker?)\n%s", r, s.Worker, err, res[r].Log)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return res
}

// InFreshProcess runs body for the calling test in a new process of this
// test binary that runs this test alone: nothing an earlier test did (a
// library loaded under a vendor's soname, for one) is in that process.
// There body runs as the test. The test passes, skips or fails as the
// fresh process's run of it did, with that output in the log.
func InFreshProcess(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if os.Getenv(EnvFresh) != "" {
		// This process is the fresh one: it runs this test, or one inside
		// it (whose enclosing tests run again on the way there).
		body(t)
		return
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), EnvFresh+"="+t.Name())
	cmd.Env = withoutEnv(cmd.Env, EnvWorker)
	out, err := cmd.CombinedOutput()
	ran := func(verdict string) bool {
		return regexp.MustCompile(`(?m)^\s*--- ` + verdict + `: ` + regexp.QuoteMeta(t.Name()) + ` `).Match(out)
	}
	switch {
	case err != nil:
		t.Fatalf("in a fresh process: %v\n%s", err, out)
	case ran("SKIP"):
		t.Skipf("skipped in a fresh process:\n%s", out)
	case ran("PASS"):
		t.Logf("passed in a fresh process:\n%s", out)
	default:
		t.Fatalf("the fresh process did not run %s:\n%s", t.Name(), out)
	}
}

// withoutEnv drops every assignment to key from env.
func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}
