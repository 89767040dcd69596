package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/stretchr/testify/require"
)

// inspected reads every FLAGCX_INSPECT line in dir: the collectives seen
// per timing source, and the files (a rank of a communicator each).
func inspected(t *testing.T, dir string) (map[string]map[string]int, int) {
	files, err := filepath.Glob(filepath.Join(dir, "flagcx-inspect-*.jsonl"))
	require.NoError(t, err)
	seen := map[string]map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var l struct {
				Perf struct {
					Coll   string `json:"coll"`
					Source string `json:"coll_timing_source"`
					Runner string `json:"runner"`
					Failed bool   `json:"failed"`
				} `json:"coll_perf"`
			}
			require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
			// A call refused by its check (the programs try some) ran on
			// no runner.
			require.True(t, l.Perf.Failed || l.Perf.Runner != "", sc.Text())
			if seen[l.Perf.Source] == nil {
				seen[l.Perf.Source] = map[string]int{}
			}
			seen[l.Perf.Source][l.Perf.Coll]++
		}
		fh.Close()
	}
	return seen, len(files)
}

// TestCAPIInspect: unmodified C programs, FlagCX's API (collectives.c on
// the host backend) and NCCL's (ranks.c through libnccl.so.2 on the
// emulated NVIDIA runtime, homogeneous and split 1,1), write a record of
// their calls with FLAGCX_INSPECT set and nothing else changed: the
// homogeneous device communicator's vendor calls timed as enqueued, every
// other call with its result in place.
func TestCAPIInspect(t *testing.T) {
	testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	for _, tc := range []struct {
		name   string
		prog   func(t *testing.T) string
		env    []string
		source string // the timing source of the AllReduces
	}{
		{"FlagCX's API, host backend", func(t *testing.T) string { return cProgram(t, "collectives") },
			[]string{"FLAGCX_BACKEND=host", "CAPI_TEST_VENDOR=HOST"}, "host_wall"},
		{"NCCL's API, emulated nvidia", func(t *testing.T) string { return ncclProgram(t, "ranks", ncclHeaders) },
			[]string{"FLAGCX_EMULATED=1", "FLAGCX_BACKEND=nvidia"}, "enqueue"},
		{"NCCL's API, emulated nvidia split 1,1", func(t *testing.T) string { return ncclProgram(t, "ranks", ncclHeaders) },
			[]string{"FLAGCX_EMULATED=1", "FLAGCX_BACKEND=nvidia", "FLAGCX_CLUSTER_SPLIT_LIST=1,1"}, "host_wall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := append(tc.env, "FLAGCX_INSPECT="+dir)
			runRanks(t, tc.prog(t), [][]string{env, env})
			seen, files := inspected(t, dir)
			require.GreaterOrEqual(t, files, 2, "a file per rank of each communicator")
			require.Positive(t, seen[tc.source]["AllReduce"], "AllReduces timed as %s: %v", tc.source, seen)
		})
	}
}
