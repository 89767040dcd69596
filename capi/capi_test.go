package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// cProgram builds capi/test/<name>.c with $CC (gcc) against the make-built
// build/include/flagcx.h and build/lib/libflagcx.so, as a FlagCX user
// builds: the library is found through the rpath. dlopen.c alone does not
// link it: it loads it itself.
func cProgram(t *testing.T, name string) string {
	t.Helper()
	lib := testkit.BuiltFile(t, "lib", "libflagcx.so")
	testkit.BuiltFile(t, "include", "flagcx.h")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testkit.Skip(t, testkit.Compiler, "%s not found", cc)
	}
	root := testkit.RepoRoot(t)
	out := filepath.Join(t.TempDir(), name)
	libDir := filepath.Dir(lib)
	args := []string{"-O1", "-Wall", "-Werror", "-std=gnu11",
		"-I" + filepath.Join(root, "build", "include"), "-o", out, filepath.Join(root, "capi", "test", name+".c")}
	if name == "dlopen" {
		args = append(args, "-ldl")
	} else {
		args = append(args, "-L"+libDir, "-lflagcx", "-Wl,-rpath,"+libDir, "-pthread")
	}
	cmd := exec.Command(cc, args...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s.c against build/include and build/lib:\n%s", name, b)
	return out
}

// cleanEnv is the test's environment without FLAGCX_* settings (the
// scenarios set their own) and with a deadline short enough for a test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLAGCX_") && !strings.HasPrefix(kv, "CAPI_TEST_") {
			env = append(env, kv)
		}
	}
	return append(env, "FLAGCX_TIMEOUT=60")
}

// rankOut is one rank's process: its output (stdout and stderr, written
// from two goroutines) and how it ended.
type rankOut struct {
	mu  sync.Mutex
	buf bytes.Buffer
	err error
}

func (o *rankOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *rankOut) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// runRanks runs prog as len(envs) ranks, one process each, rank r with the
// extra environment envs[r]: rank 0 first, which prints the unique id, then
// the others with it. It fails the test, showing every failed rank's
// output, unless every rank exits with status 0.
func runRanks(t *testing.T, prog string, envs [][]string) []*rankOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := len(envs)
	outs := make([]*rankOut, n)
	var wg sync.WaitGroup
	start := func(r int, args ...string) *exec.Cmd {
		o := &rankOut{}
		outs[r] = o
		cmd := exec.CommandContext(ctx, prog, append([]string{fmt.Sprint(r), fmt.Sprint(n)}, args...)...)
		cmd.Env = append(cleanEnv(), envs[r]...)
		cmd.Stderr = o
		return cmd
	}
	// Rank 0's stdout is read for the id line, then copied.
	c0 := start(0)
	pipe, err := c0.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c0.Start())
	rd := bufio.NewReader(pipe)
	line, err := rd.ReadString('\n')
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "ID ")
	if err != nil || !ok {
		_ = c0.Process.Kill()
		_ = c0.Wait()
		t.Fatalf("rank 0 printed %q instead of its unique id (%v):\n%s", line, err, outs[0].String())
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(outs[0], rd)
		outs[0].err = c0.Wait()
	}()
	for r := 1; r < n; r++ {
		c := start(r, id)
		c.Stdout = outs[r]
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[r].err = c.Run()
		}()
	}
	wg.Wait()
	// A rank that fails makes its peers fail too ("rank 2 is gone"), so
	// every rank's output is shown: the first error is often not rank 0's.
	var failed []string
	for r, o := range outs {
		if o.err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: %v:\n%s", r, o.err, o.String()))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d ranks failed:\n%s", len(failed), n, strings.Join(failed, "\n"))
	}
	return outs
}

// TestCAPICollectives runs every collective through libflagcx.so from C
// programs, several processes, on the host backend and on the emulated
// vendor runtimes, alone and in heterogeneous communicators: every element
// exact (collectives.c), the entries flagcx-go does not serve refused with
// flagcxNotSupported and a message, and the emulated runtimes announced.
func TestCAPICollectives(t *testing.T) {
	prog := cProgram(t, "collectives")
	testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	emptyDir := t.TempDir()
	emu := "FLAGCX_EMULATED=1"
	nv := []string{emu, "FLAGCX_BACKEND=nvidia", "CAPI_TEST_VENDOR=NVIDIA"}
	host := []string{"FLAGCX_BACKEND=host", "CAPI_TEST_VENDOR=HOST"}
	split := []string{emu, "FLAGCX_BACKEND=nvidia", "FLAGCX_CLUSTER_SPLIT_LIST=1,1", "CAPI_TEST_HOMO=0"}
	cases := []struct {
		name     string
		ranks    [][]string
		emulated bool
	}{
		{"host backend, 3 ranks", [][]string{host, host, host}, false},
		{"emulated nvidia, 2 ranks", [][]string{append(nv, "CAPI_TEST_HOMO=1"), append(nv, "CAPI_TEST_HOMO=1")}, true},
		{"heterogeneous: emulated nvidia x2 + host", [][]string{append(nv, "CAPI_TEST_HOMO=0"), append(nv, "CAPI_TEST_HOMO=0"), append(host, emu, "CAPI_TEST_HOMO=0")}, true},
		{"emulated nvidia split into clusters 1,1", [][]string{split, split}, true},
		{"two vendors and the host: emulated nvidia x2 + metax + host", [][]string{
			append(nv, "CAPI_TEST_HOMO=0"), append(nv, "CAPI_TEST_HOMO=0"),
			{emu, "FLAGCX_BACKEND=metax", "CAPI_TEST_VENDOR=" + testkit.Lookup(t, "metax").Vendor, "CAPI_TEST_HOMO=0"},
			append(host, emu, "CAPI_TEST_HOMO=0")}, true},
		{"no plugin with a device: the host", [][]string{
			{"FLAGCX_PLUGIN_DIR=" + emptyDir, "CAPI_TEST_VENDOR=HOST"}, {"FLAGCX_PLUGIN_DIR=" + emptyDir, "CAPI_TEST_VENDOR=HOST"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outs := runRanks(t, prog, tc.ranks)
			for r, o := range outs {
				text := o.String()
				require.Contains(t, text, fmt.Sprintf("PASS rank %d:", r))
				require.NotContains(t, text, "goroutine ", "rank %d printed a Go stack", r)
				announced := strings.Contains(text, "EMULATED vendor runtimes")
				onEmulated := tc.emulated && !strings.Contains(strings.Join(tc.ranks[r], " "), "FLAGCX_BACKEND=host")
				require.Equal(t, onEmulated, announced, "rank %d says it runs on emulated runtimes exactly when it does:\n%s", r, text)
			}
		})
	}
}

// TestCAPIBackendChoice: without FLAGCX_BACKEND a process takes the first
// plugin (by name) of the plugin directory next to the library whose
// runtime loads with a device; a FLAGCX_BACKEND naming no plugin fails
// with one message that says what to do, and never with a Go stack.
func TestCAPIBackendChoice(t *testing.T) {
	prog := cProgram(t, "collectives")
	plugins, err := filepath.Glob(filepath.Join(filepath.Dir(testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")), "libflagcx-*.so"))
	require.NoError(t, err)
	first := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(plugins[0]), "libflagcx-"), ".so")
	vendor := testkit.Lookup(t, first).Vendor

	outs := runRanks(t, prog, [][]string{{"FLAGCX_EMULATED=1", "CAPI_TEST_VENDOR=" + vendor}})
	require.Contains(t, outs[0].String(), "backend "+first+" runs on EMULATED vendor runtimes")
	require.Contains(t, outs[0].String(), "PASS rank 0:")

	cmd := exec.Command(prog, "0", "1")
	cmd.Env = append(cleanEnv(), "FLAGCX_BACKEND=nosuch")
	b, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(b), "FLAGCX_BACKEND=nosuch: no plugin file libflagcx-nosuch.so in ")
	require.Contains(t, string(b), "FLAGCX_BACKEND=host for the CPU")
	require.NotContains(t, string(b), "goroutine ")
}

// TestCAPIThreads: ranks as threads of one process, each with its own
// current device (setDevice is per thread), exact AllReduce and send/recv;
// on the host backend an AllReduce blocked on a rank that never comes is
// ended by flagcxCommAbort from another thread; threads that set their
// device with the runtime's own cudaSetDevice, as PyTorch does, get their
// streams, memory and communicator there.
func TestCAPIThreads(t *testing.T) {
	prog := cProgram(t, "threads")
	cudart := filepath.Join(filepath.Dir(testkit.BuiltFile(t, "vendorsim", "nvidia", "libcudart.so.12")), "libcudart.so")
	cases := []struct {
		name  string
		ranks string
		env   []string
		want  []string
	}{
		{"host backend, 3 threads", "3", []string{"FLAGCX_BACKEND=host"},
			[]string{"aborted AllReduce returned 5: flagcxAllReduce: ", "the communicator was aborted", "PASS threads: 3 ranks"}},
		{"emulated nvidia, 2 threads", "2", []string{"FLAGCX_BACKEND=nvidia", "FLAGCX_EMULATED=1"},
			[]string{"backend nvidia runs on EMULATED vendor runtimes", "PASS threads: 2 ranks"}},
		{"emulated nvidia, devices set with cudaSetDevice", "2", []string{"FLAGCX_BACKEND=nvidia", "FLAGCX_EMULATED=1",
			"CAPI_TEST_CUDART=" + cudart + ".13:" + cudart + ".12"},
			[]string{"PASS threads: 2 ranks, devices set with cudaSetDevice"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog, tc.ranks)
			cmd.Env = append(cleanEnv(), tc.env...)
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, string(b))
			for _, w := range tc.want {
				require.Contains(t, string(b), w)
			}
		})
	}
}

// TestCAPIDlopen: the library loads with dlopen (as Python loads FlagCX's
// torch plugin, which needs it: its thread-local storage must fit glibc's
// reserve for dlopen), and FLAGCX_BACKEND set by the program itself after
// it started (Python's os.environ) is what counts, not the environment the
// process started with.
func TestCAPIDlopen(t *testing.T) {
	prog := cProgram(t, "dlopen")
	lib := testkit.BuiltFile(t, "lib", "libflagcx.so")
	cases := []struct {
		name, startEnv, set string
		wantErr             bool
		want                string
	}{
		{"setenv host over nosuch", "FLAGCX_BACKEND=nosuch", "host", false, "vendor HOST\nPASS dlopen\n"},
		{"setenv nosuch over host", "FLAGCX_BACKEND=host", "nosuch", true,
			"ERROR 4: flagcxDeviceHandleInit: invalid argument: FLAGCX_BACKEND=nosuch: no plugin file libflagcx-nosuch.so in "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog, lib, tc.set)
			cmd.Env = append(cleanEnv(), tc.startEnv)
			b, err := cmd.CombinedOutput()
			if tc.wantErr {
				require.Error(t, err, string(b))
			} else {
				require.NoError(t, err, string(b))
			}
			require.Contains(t, string(b), tc.want)
		})
	}
}

// TestCAPIExportsTheHeader: every function build/include/flagcx.h and
// flagcx_kernel.h declare is a symbol of libflagcx.so (a C program using
// any entry links), and the library exports no other flagcx* name.
func TestCAPIExportsTheHeader(t *testing.T) {
	lib := testkit.BuiltFile(t, "lib", "libflagcx.so")
	declared := map[string]bool{}
	for _, h := range []string{"flagcx.h", "flagcx_kernel.h"} {
		header, err := os.ReadFile(testkit.BuiltFile(t, "include", h))
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)^(?:flagcxResult_t|const char \*|size_t)\s*\n?\s*\*?(\w+)\(`).FindAllSubmatch(header, -1) {
			declared[string(m[1])] = true
		}
	}
	require.GreaterOrEqual(t, len(declared), 50, "the header's entries were not found")
	f, err := elf.Open(lib)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			exported[s.Name] = true
		}
	}
	for name := range declared {
		require.True(t, exported[name], "flagcx.h declares %s, libflagcx.so does not export it", name)
	}
	for name := range exported {
		if strings.HasPrefix(name, "flagcx") || strings.HasPrefix(name, "getFlagcx") {
			require.True(t, declared[name], "libflagcx.so exports %s, which flagcx.h does not declare", name)
		}
	}
}

// TestCAPIMisuse: the library used as it must not be ends each time with one
// clear error, never a hang (capi/test/misuse.c): a child forked after the
// library loaded is refused at its first call, at once (the child's alarm
// kills it after 5 s otherwise), and the parent carries on; rank 0 whose
// peers never come fails within its short FLAGCX_TIMEOUT with a remote
// error naming them; a destroyed communicator is refused, not read after
// it was freed; a malformed FLAGCX_TIMEOUT is an invalid argument naming
// the variable and what it takes; a count far beyond host buffers is a
// buffer too small, not buffers that overlap.
func TestCAPIMisuse(t *testing.T) {
	prog := cProgram(t, "misuse")
	nv := []string{"FLAGCX_BACKEND=nvidia", "FLAGCX_EMULATED=1"}
	cases := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"fork on the host backend", []string{"fork"}, []string{"FLAGCX_BACKEND=host"},
			[]string{"child: flagcxGetUniqueId returned 5 in ", "child: every entry refused\n", "PASS fork\n"}},
		{"fork on emulated nvidia", []string{"fork"}, nv,
			[]string{"child: flagcxGetUniqueId returned 5 in ", "child: every entry refused\n", "PASS fork\n"}},
		{"rank 0 of 3 alone", []string{"alone", "3"}, []string{"FLAGCX_BACKEND=host", "FLAGCX_TIMEOUT=2"},
			[]string{"flagcxCommInitRank: rank 0 of 3 on host: remote error: ",
				"ranks 1,2 of 3 did not join the rendezvous", "within 2s", "FLAGCX_TIMEOUT sets the limit", "PASS alone\n"}},
		{"destroyed communicator on the host", []string{"destroyed"}, []string{"FLAGCX_BACKEND=host"}, []string{"PASS destroyed\n"}},
		{"destroyed communicator on emulated nvidia", []string{"destroyed"}, nv, []string{"PASS destroyed\n"}},
		{"FLAGCX_TIMEOUT=soon", []string{"badenv"}, []string{"FLAGCX_BACKEND=host", "FLAGCX_TIMEOUT=soon"}, []string{"PASS badenv\n"}},
		{"2^40 elements on 64-byte host buffers", []string{"hugecount"}, []string{"FLAGCX_BACKEND=host"},
			[]string{"hugecount: flagcxAllReduce: invalid argument: send buffer holds at most ", "PASS hugecount\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog, tc.args...)
			cmd.Env = append(cleanEnv(), tc.env...)
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, string(b))
			for _, w := range tc.want {
				require.Contains(t, string(b), w)
			}
			require.NotContains(t, string(b), "goroutine ")
		})
	}
}

// TestCAPINewcommArguments: flagcxCommShrink and flagcxCommSplit refuse
// bad arguments with an invalid argument whose last error, on the
// communicator itself, says what to pass (misuse.c's newcomm case makes an
// unrelated failure of the communicator before each call: an error kept
// only as the process's would leave flagcxGetLastError(comm) showing that
// one).
func TestCAPINewcommArguments(t *testing.T) {
	prog := cProgram(t, "misuse")
	for _, be := range []struct {
		name string
		env  []string
	}{
		{"host", []string{"FLAGCX_BACKEND=host"}},
		{"emulated nvidia", []string{"FLAGCX_BACKEND=nvidia", "FLAGCX_EMULATED=1"}},
	} {
		t.Run(be.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog, "newcomm")
			cmd.Env = append(cleanEnv(), be.env...)
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, string(b))
			out := string(b)
			for _, want := range []struct{ call, err string }{
				{"flagcxCommShrink(comm, &ex, 0, NULL)", "flagcxCommShrink: invalid argument: newcomm is NULL: pass the address of a flagcxComm_t, which the call sets to the shrunk communicator (NULL on an excluded rank)"},
				{"flagcxCommShrink(comm, NULL, 1, &nc)", "flagcxCommShrink: invalid argument: exclude is NULL but nexclude is not 0: pass the ranks to exclude, or nexclude 0 to exclude none"},
				{"flagcxCommShrink(comm, &ex, -1, &nc)", "flagcxCommShrink: invalid argument: nexclude is negative: pass how many ranks exclude holds"},
				{"flagcxCommSplit(comm, 0, 0, NULL)", "flagcxCommSplit: invalid argument: newcomm is NULL: pass the address of a flagcxComm_t, which the call sets to the new communicator (NULL with FLAGCX_SPLIT_NOCOLOR)"},
				{"flagcxCommShrink(NULL, &ex, 0, NULL)", "flagcxCommShrink: invalid argument: newcomm is NULL: pass the address of a flagcxComm_t, which the call sets to the shrunk communicator (NULL on an excluded rank)"},
			} {
				require.Contains(t, out, fmt.Sprintf("%s: 4: %s\n", want.call, want.err))
			}
			require.Contains(t, out, "PASS newcomm\n")
			require.NotContains(t, out, "goroutine ")
		})
	}
}

// TestCAPIEntriesRefuseForkedChild: every entry of shim.c, shim_comm.c, shim_ext.c and shim_onesided.c
// that returns a flagcxResult_t checks, first thing and in C, that the
// process is not a child forked after the library loaded (USABLE): one
// that entered Go there would block for ever. misuse.c calls a sample of
// them in such a child; this keeps the rest, and entries added later, so.
func TestCAPIEntriesRefuseForkedChild(t *testing.T) {
	helpers := map[string]bool{"shimReady": true, "shimBind": true, "shimLive": true, "shimForkedFail": true,
		"query": true, "coll": true, "freeComm": true, "liveWindow": true, "shimSignalDeregisterCxx": true}
	def := regexp.MustCompile(`(?m)^(?:static )?flagcxResult_t\s+(\w+)\([^)]*\)\s*\{\n(.*)`)
	n := 0
	for _, file := range []string{"shim.c", "shim_comm.c", "shim_ext.c", "shim_onesided.c"} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range def.FindAllStringSubmatch(string(src), -1) {
			if helpers[m[1]] {
				continue
			}
			n++
			entry := m[1]
			if strings.HasPrefix(entry, "h") { // the device handle's hDeviceMalloc is deviceMalloc
				entry = strings.ToLower(entry[1:2]) + entry[2:]
			}
			require.Equal(t, fmt.Sprintf("  USABLE(%q);", entry), m[2], "%s: %s must begin with USABLE(\"%s\")", file, m[1], entry)
		}
	}
	require.GreaterOrEqual(t, n, 84, "the entries were not found")
}
