package vendorsim

// The harness shared by the emulator tests: ranks as processes. A rank is
// this test binary re-executed with the variables the test gives it (which
// select its worker, and only it); the worker writes what it got, as JSON,
// to the file the test named.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startRanks starts n processes of this test binary with args, each with
// the environment plus rankEnv(r, out) (out: the file its report goes to)
// and perRank(r) (may be nil); skip (may be nil) says which ranks not to
// start. It waits for them all (90 s at most) and returns each rank's
// decoded report, its output (stdout and stderr), and an error when its
// process failed or its report is missing or unreadable.
func startRanks[T any](t *testing.T, n int, args []string, rankEnv func(r int, out string) []string,
	perRank func(r int) []string, skip func(r int) bool) ([]T, []string, []error) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	outs := make([]T, n)
	logs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		if skip != nil && skip(r) {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("rank%d.json", r))
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), rankEnv(r, path)...)
		if perRank != nil {
			cmd.Env = append(cmd.Env, perRank(r)...)
		}
		var log strings.Builder
		cmd.Stdout, cmd.Stderr = &log, &log
		require.NoError(t, cmd.Start())
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			logs[r] = log.String()
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w\n%s", r, err, logs[r])
				return
			}
			data, err := os.ReadFile(path)
			if err == nil {
				err = json.Unmarshal(data, &outs[r])
			}
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: results: %w\n%s", r, err, logs[r])
			}
		}()
	}
	wg.Wait()
	return outs, logs, errs
}
