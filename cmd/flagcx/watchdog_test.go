package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchPluginStuckInAllReduce: with a plugin whose allReduce never
// returns, a local launch ends soon after FLAGCX_TIMEOUT with exit status
// 1 and one error naming the rank, the plugin and the call, never a hang,
// and leaves no rank behind.
func TestBenchPluginStuckInAllReduce(t *testing.T) {
	dir := examplePlugin(t, "-DEXAMPLE_BREAK_HANG")
	tag := fmt.Sprintf("FLAGCX_WATCHDOG_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	r := runFlagcx(t, 60*time.Second, cleanEnv("FLAGCX_TIMEOUT=2", tag),
		"--plugin-dir", dir, "bench", "allreduce", "--ranks", "example:2", "-b", "8", "-e", "8")
	require.Equal(t, 1, r.code, "stderr:\n%s", r.stderr)
	require.Less(t, r.took, 30*time.Second)
	lines := errorLines(r.stderr)
	require.Len(t, lines, 1, r.stderr)
	// The rank whose deadline passed says so; a rank that heard of it
	// first (the revoke, core/revoke.go) quotes it.
	require.Regexp(t, `^flagcx: error: (.* the communicator was revoked: .*found by rank [01]: )?rank [01]: example plugin: allReduce did not return within 2s; the communicator was aborted \(`, lines[0])
	require.NotContains(t, r.stderr, "flagcx: fatal:", "the ranks' reports are the launcher's, not the user's")
	require.NotContains(t, r.stderr, "goroutine ")
	require.Eventually(t, func() bool { return len(processesWith(tag)) == 0 }, 5*time.Second, 100*time.Millisecond,
		"ranks left behind: %v", processesWith(tag))
}

// processesWith lists the processes whose environment holds kv.
func processesWith(kv string) []string {
	var pids []string
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range envs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile, or not ours
		}
		for _, v := range bytes.Split(b, []byte{0}) {
			if string(v) == kv {
				pids = append(pids, filepath.Base(filepath.Dir(f)))
			}
		}
	}
	return pids
}
