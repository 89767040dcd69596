package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// TestCAPIOneSided runs capi/test/onesided.c, which calls every one-sided
// entry, as 2 and 3 processes on the host backend, split into clusters,
// on the emulated NVIDIA runtime (device memory) and across both: each
// byte put or got, each signal word (in FlagCX's layout) and the counter
// exact, bad arguments refused with their codes and messages, a put into
// a window its peer freed failing at WaitCounter with an error naming the
// peer and the window, and a wait for a peer that never signals failing
// within a 2-second FLAGCX_TIMEOUT with an error naming it.
func TestCAPIOneSided(t *testing.T) {
	prog := cProgram(t, "onesided")
	testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	host := []string{"FLAGCX_BACKEND=host"}
	nv := []string{"FLAGCX_EMULATED=1", "FLAGCX_BACKEND=nvidia"}
	cases := []struct {
		name  string
		ranks [][]string
	}{
		{"host backend, 2 ranks", [][]string{host, host}},
		{"host backend, 3 ranks", [][]string{host, host, host}},
		{"host backend split into clusters 1,2", [][]string{
			append(host, "FLAGCX_CLUSTER_SPLIT_LIST=1,2"), append(host, "FLAGCX_CLUSTER_SPLIT_LIST=1,2"), append(host, "FLAGCX_CLUSTER_SPLIT_LIST=1,2")}},
		{"emulated nvidia, 2 ranks", [][]string{nv, nv}},
		{"heterogeneous: emulated nvidia + host", [][]string{nv, append(host, "FLAGCX_EMULATED=1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outs := runRanks(t, prog, tc.ranks)
			for r, o := range outs {
				text := o.String()
				require.Contains(t, text, fmt.Sprintf("PASS rank %d:", r))
				require.NotContains(t, text, "goroutine ", "rank %d printed a Go stack", r)
			}
			out0 := outs[0].String()
			require.Regexp(t, `rank 0: flagcxWaitSignal for silent rank 1 failed after [0-9.]+ s \(FLAGCX_TIMEOUT=2\): flagcxWaitSignal: remote error: .*rank 1 .*signalled 0 times, 1 awaited`, out0)
			require.Regexp(t, `rank 0: a put into the window rank 1 freed: flagcxWaitCounter: invalid usage: .*rank 1 .*refused operation [0-9]+ of this rank, on its window 3 bytes \[0, 64\): it freed its memory of the window`, out0)
		})
	}
}

// flagcxPerfFiles are FlagCX's files vendored in capi/test/flagcx-perf,
// with their git blob ids at the commit its README names.
var flagcxPerfFiles = map[string]string{
	"test/perf/host_api/test_put.cpp":               "0d7cdc23f12e67aab520a40a63aa7a4943529fa6",
	"test/perf/host_api/test_get.cpp":               "f4fdec5ce42f15b107db9d38146ee2af5c033244",
	"test/perf/host_api/test_one_side_register.cpp": "b3cf0d7b67bae348fc8fd01d63d71eedde3d6316",
	"test/tools.cc":                                 "10821ba3de6e0bfe33706d45ee0c8820bfbbafa1",
	"test/include/tools.h":                          "4a56ed58a6c02b4c8ff60d41cd685563a3ad22b4",
	"LICENSE":                                       "e4c00f2edcc8518e474ca352b9d32b948ef97ede",
}

// gitBlobID is the id git gives a file of content b (git hash-object).
func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// mpi: OpenMPI's compiler wrapper and launcher, which FlagCX's perf tests
// are built and run with.
var mpi = testkit.Need{
	What: "OpenMPI's mpicxx and mpirun (with g++)",
	InCI: true,
	Fix:  "apt-get install openmpi-bin libopenmpi-dev g++ (.ci/run installs them)",
}

// TestFlagCXOneSidedPerfTests runs FlagCX's own test_put, test_get and
// test_one_side_register, unchanged (their git blob ids are checked), built
// with mpicxx against build/include and run under mpirun on libflagcx.so on
// the host backend and on the emulated NVIDIA runtime
// (tools/onesided-cpu/run.sh): every byte they print of what the receiver
// got is what the sender wrote, for every size and iteration, and each
// phase of test_one_side_register passes.
func TestFlagCXOneSidedPerfTests(t *testing.T) {
	root := testkit.RepoRoot(t)
	for f, want := range flagcxPerfFiles {
		b, err := os.ReadFile(filepath.Join(root, "capi", "test", "flagcx-perf", f))
		require.NoError(t, err)
		require.Equal(t, want, gitBlobID(b), "capi/test/flagcx-perf/%s is not FlagCX's file at the vendored commit", f)
	}
	testkit.BuiltFile(t, "lib", "libflagcx.so")
	testkit.BuiltFile(t, "include", "flagcx_kernel.h")
	for _, tool := range []string{"mpicxx", "mpirun", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Skip(t, mpi, "%s not found", tool)
		}
	}
	testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	cases := []struct {
		name string
		env  []string
		on   string
	}{
		{"host backend", nil, "the host backend"},
		{"emulated nvidia", []string{"BACKEND=nvidia", "EMULATED=1"}, "the nvidia backend (EMULATED vendor runtimes)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(root, "tools", "onesided-cpu", "run.sh"))
			cmd.Env = append(append(cleanEnv(), "OUT="+t.TempDir()), tc.env...)
			b, err := cmd.CombinedOutput()
			out := string(b)
			require.NoError(t, err, "tools/onesided-cpu/run.sh:\n%s", out)
			for _, want := range []string{
				"put: 130 chunks checked", "get: 130 chunks checked",
				"onesided-cpu: PASS (test_put, test_get, test_one_side_register on " + tc.on + ")",
			} {
				require.Contains(t, out, want)
			}
			require.Equal(t, 2, strings.Count(out, "[test_multi_comm_put] ALL PHASES PASSED"), "test_one_side_register passes split and homogeneous")
			require.NotContains(t, out, "FAILED")
		})
	}
}
