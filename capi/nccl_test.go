package main

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// ncclHeaders is NCCL's own nccl.h (v2.28.9) with stub CUDA headers
// (capi/nccl/test/nccl-2.28.9/README.md).
const ncclHeaders = "capi/nccl/test/nccl-2.28.9"

// ncclProgram builds capi/nccl/test/<name>.c with $CC against the headers
// of include (a directory of the repository), linked against the
// make-built build/lib/libnccl.so.2 and the emulated CUDA runtime
// (cudaMalloc, streams, events), both found through rpaths.
func ncclProgram(t *testing.T, name, include string) string {
	t.Helper()
	lib := testkit.BuiltFile(t, "lib", "libnccl.so.2")
	cudart := testkit.BuiltFile(t, "vendorsim", "nvidia", "libcudart.so.13")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testkit.Skip(t, testkit.Compiler, "%s not found", cc)
	}
	root := testkit.RepoRoot(t)
	out := filepath.Join(t.TempDir(), name)
	libDir, rtDir := filepath.Dir(lib), filepath.Dir(cudart)
	cmd := exec.Command(cc, "-O1", "-Wall", "-Werror", "-std=gnu11", "-I"+filepath.Join(root, include),
		"-o", out, filepath.Join(root, "capi", "nccl", "test", name+".c"),
		"-L"+libDir, "-l:libnccl.so.2", "-Wl,-rpath,"+libDir,
		"-L"+rtDir, "-l:libcudart.so.13", "-Wl,-rpath,"+rtDir, "-pthread")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s.c against %s and build/lib/libnccl.so.2:\n%s", name, include, b)
	return out
}

// TestNCCLDropIn runs capi/nccl/test/ranks.c, written against NCCL's own
// nccl.h, as 2, 3 and 5 processes through build/lib/libnccl.so.2 on the
// emulated NVIDIA runtime, homogeneous and split into clusters
// (FLAGCX_CLUSTER_SPLIT_LIST), and on the emulated MetaX runtime (whose
// plugin cannot reduce on the device): every collective bit for bit, in
// place and out of place, pre-multiplied sums, send/recv in groups, the three inits, split (with
// NCCL_SPLIT_NOCOLOR), NCCL's memory and registration calls, and bad or
// unserved calls refused with their code and ncclGetLastError's text.
func TestNCCLDropIn(t *testing.T) {
	prog := ncclProgram(t, "ranks", ncclHeaders)
	testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	testkit.BuiltFile(t, "plugins", "libflagcx-metax.so")
	nv := []string{"FLAGCX_EMULATED=1", "FLAGCX_BACKEND=nvidia", "FLAGCX_DEBUG=INFO"}
	const onDevice = "on the device (nvidia's reduceLocal)"
	ranks := func(n int, extra ...string) [][]string {
		envs := make([][]string, n)
		for r := range envs {
			envs[r] = append(append([]string{}, nv...), extra...)
		}
		return envs
	}
	cases := []struct {
		name   string
		ranks  [][]string
		layout string // core's INIT line of the communicators of n ranks
		first  string // what the first collective's INIT line says runs it
		scales string // where pre-multiplied sums scale their inputs
	}{
		{"1 rank", ranks(1), "1 ranks, homogeneous, 1 cluster(s)", `runner "vendor direct"`, onDevice},
		{"2 ranks", ranks(2), "2 ranks, homogeneous, 1 cluster(s)", `runner "vendor direct"`, onDevice},
		{"3 ranks", ranks(3), "3 ranks, homogeneous, 1 cluster(s)", `runner "vendor direct"`, onDevice},
		{"5 ranks", ranks(5), "5 ranks, homogeneous, 1 cluster(s)", `runner "vendor direct"`, onDevice},
		{"2 ranks split 1,1", ranks(2, "FLAGCX_CLUSTER_SPLIT_LIST=1,1"), "2 ranks, heterogeneous, 2 cluster(s)", `runner "shared-memory plane", path c2c-shm`, onDevice},
		{"3 ranks split 1,2", ranks(3, "FLAGCX_CLUSTER_SPLIT_LIST=1,2"), "3 ranks, heterogeneous, 2 cluster(s)", `runner "shared-memory plane", path c2c-shm`, onDevice},
		{"5 ranks split 2,3", ranks(5, "FLAGCX_CLUSTER_SPLIT_LIST=2,3"), "5 ranks, heterogeneous, 2 cluster(s)", `runner "shared-memory plane", path c2c-shm`, onDevice},
		// MetaX's plugin has no reduceLocal: pre-multiplied sums scale on
		// the host (the ranks' buffers are the emulated CUDA runtime's,
		// which every emulated runtime shares).
		{"2 ranks metax", ranks(2, "FLAGCX_BACKEND=metax"), "2 ranks, homogeneous, 1 cluster(s)", `runner "vendor direct"`, "on the host (metax cannot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outs := runRanks(t, prog, tc.ranks)
			requireRanksPass(t, outs)
			for r, o := range outs {
				require.Contains(t, o.String(), tc.layout, "rank %d", r)
				require.Regexp(t, "INIT first collective [A-Za-z]+: "+regexp.QuoteMeta(tc.first), o.String(), "rank %d", r)
			}
			require.Contains(t, outs[0].String(), "scales the inputs of pre-multiplied sums "+tc.scales)
			if tc.scales != onDevice {
				return // not the nvidia plugin
			}
			// The plugin's NCCL is the emulated one, never this library.
			require.Contains(t, outs[0].String(), "loaded ccl 2.28.9 from "+filepath.Join(filepath.Dir(
				testkit.BuiltFile(t, "vendorsim", "nvidia", "libnccl.so.2")), "libnccl.so.2")+" (EMULATED)")
		})
	}
}

func requireRanksPass(t *testing.T, outs []*rankOut) {
	t.Helper()
	for r, o := range outs {
		text := o.String()
		require.Contains(t, text, fmt.Sprintf("PASS rank %d:", r))
		require.Contains(t, text, "EMULATED vendor runtimes", "rank %d does not say it runs on emulated runtimes", r)
		require.NotContains(t, text, "goroutine ", "rank %d printed a Go stack", r)
	}
}

// TestNCCLInitAll: ncclCommInitAll makes 3 ranks in one process on devices
// 2, 1, 0 (a thread per device, each setting its device), each rank then
// runs an exact AllReduce on a thread of its own; a device named twice is
// refused.
func TestNCCLInitAll(t *testing.T) {
	prog := ncclProgram(t, "ranks", ncclHeaders)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, "initall", "3")
	cmd.Env = append(cleanEnv(), "FLAGCX_EMULATED=1", "FLAGCX_BACKEND=nvidia")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	require.Contains(t, string(b), "PASS initall: 3 ranks")
}

// TestNCCLOneThreadRanks: one thread drives 2 and 3 ranks (nccl-tests
// -g n): their ncclCommInitRank calls in one group (run at its end, side by
// side), then groups of collectives on every communicator (AllReduce; a
// send/recv ring beside a pre-multiplied AllReduce; AllGather), exact, on
// the emulated NVIDIA runtime, homogeneous and split into clusters, on the
// emulated MetaX runtime (whose plugin has no reduceLocal: the inputs are
// scaled on the host) and on the host backend.
func TestNCCLOneThreadRanks(t *testing.T) {
	prog := ncclProgram(t, "ranks", ncclHeaders)
	testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	testkit.BuiltFile(t, "plugins", "libflagcx-metax.so")
	const onDevice, onHost = "on the device (nvidia's reduceLocal)", "on the host (metax cannot reduce on the device"
	cases := []struct {
		name    string
		n       string
		backend string
		split   string
		layout  string
		scales  string // where the pre-multiplied sums scale ("": host backend, not logged)
	}{
		{"2 ranks", "2", "nvidia", "", "2 ranks, homogeneous, 1 cluster(s)", onDevice},
		{"3 ranks", "3", "nvidia", "", "3 ranks, homogeneous, 1 cluster(s)", onDevice},
		{"2 ranks split 1,1", "2", "nvidia", "1,1", "2 ranks, heterogeneous, 2 cluster(s)", onDevice},
		{"3 ranks split 1,2", "3", "nvidia", "1,2", "3 ranks, heterogeneous, 2 cluster(s)", onDevice},
		{"2 ranks metax", "2", "metax", "", "2 ranks, homogeneous, 1 cluster(s)", onHost},
		{"3 ranks host backend", "3", "host", "", "3 ranks, homogeneous, 1 cluster(s): cluster 0: host", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"multi", tc.n}
			if tc.backend == "host" {
				args = append(args, "host")
			}
			cmd := exec.CommandContext(ctx, prog, args...)
			cmd.Env = append(cleanEnv(), "FLAGCX_EMULATED=1", "FLAGCX_BACKEND="+tc.backend, "FLAGCX_DEBUG=INFO")
			if tc.split != "" {
				cmd.Env = append(cmd.Env, "FLAGCX_CLUSTER_SPLIT_LIST="+tc.split)
			}
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, string(b))
			require.Contains(t, string(b), "PASS multi: "+tc.n+" ranks")
			require.Contains(t, string(b), tc.layout)
			if tc.scales != "" {
				require.Contains(t, string(b), "EMULATED vendor runtimes")
				require.Contains(t, string(b), "scales the inputs of pre-multiplied sums "+tc.scales)
			}
		})
	}
}

// TestNCCLHeaderABI: abi.c prints the same sizes, offsets, values and
// initializers built against NCCL's own nccl.h and against flagcx-go's
// build/include/nccl.h (there without CUDA's headers, as the library
// itself builds).
func TestNCCLHeaderABI(t *testing.T) {
	testkit.BuiltFile(t, "include", "nccl.h")
	var outs []string
	for _, include := range []string{ncclHeaders, "build/include"} {
		prog := ncclProgram(t, "abi", include)
		b, err := exec.Command(prog).CombinedOutput()
		require.NoError(t, err, string(b))
		outs = append(outs, string(b))
	}
	require.Contains(t, outs[0], "NCCL_VERSION_CODE 22809\n")
	require.Contains(t, outs[0], "sizeof(ncclConfig_t) ")
	require.Equal(t, outs[0], outs[1], "abi.c against NCCL's nccl.h (first) and flagcx-go's (second)")
}

// TestNCCLExportsTheHeader: every function NCCL 2.28.9's nccl.h declares,
// and its pnccl profiling name, is a symbol of libnccl.so.2, which exports
// no other nccl name but the two entries of NCCL's device API it refuses.
func TestNCCLExportsTheHeader(t *testing.T) {
	lib := testkit.BuiltFile(t, "lib", "libnccl.so.2")
	header, err := os.ReadFile(filepath.Join(testkit.RepoRoot(t), ncclHeaders, "nccl.h"))
	require.NoError(t, err)
	declared := map[string]bool{"ncclDevCommCreate": true, "ncclDevCommDestroy": true}
	for _, m := range regexp.MustCompile(`(?m)^(?:ncclResult_t|const char\*|void)\s+(p?nccl\w+)\(`).FindAllSubmatch(header, -1) {
		declared[string(m[1])] = true
	}
	require.GreaterOrEqual(t, len(declared), 80, "the header's entries were not found")
	f, err := elf.Open(lib)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC && strings.Contains(s.Name, "nccl") {
			exported[s.Name] = true
		}
	}
	for name := range declared {
		require.True(t, exported[name], "nccl.h declares %s, libnccl.so.2 does not export it", name)
	}
	for name := range exported {
		require.True(t, declared[name], "libnccl.so.2 exports %s, which NCCL's nccl.h does not declare", name)
	}
	soname, err := f.DynString(elf.DT_SONAME)
	require.NoError(t, err)
	require.Equal(t, []string{"libnccl.so.2"}, soname)
	needed, err := f.DynString(elf.DT_NEEDED)
	require.NoError(t, err)
	require.Contains(t, needed, "libflagcx.so", "libnccl.so.2 runs on libflagcx.so (one Go runtime per process)")
	require.False(t, strings.Contains(strings.Join(needed, " "), "libcudart"), "libnccl.so.2 links no CUDA runtime")
}

// TestAsyncVendorError: a vendor collective that fails on the device
// after its call returned (rank 1 never joins rank 0's AllReduce, and the
// emulated NCCL gives up after FLAGCX_VENDORSIM_TIMEOUT=1) is reported by
// ncclCommGetAsyncError and flagcxCommGetAsyncError before any other
// call, with its text as the last error, as torch's watchdog reads it.
func TestAsyncVendorError(t *testing.T) {
	env := []string{"FLAGCX_EMULATED=1", "FLAGCX_BACKEND=nvidia", "FLAGCX_VENDORSIM_TIMEOUT=1", "CAPI_TEST_ASYNC=1"}
	for _, tc := range []struct {
		name string
		prog func(t *testing.T) string
	}{
		{"libnccl.so.2", func(t *testing.T) string { return ncclProgram(t, "ranks", ncclHeaders) }},
		{"libflagcx.so", func(t *testing.T) string { return cProgram(t, "collectives") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
			outs := runRanks(t, tc.prog(t), [][]string{env, env})
			for r, o := range outs {
				require.Contains(t, o.String(), fmt.Sprintf("PASS rank %d:", r))
			}
			require.Regexp(t, `ASYNC rank 0: [1-9][0-9]* after .*reports an asynchronous error \(a collective failed on the device after its call returned\)`, outs[0].String())
		})
	}
}
