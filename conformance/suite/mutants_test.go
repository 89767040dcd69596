package suite

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildNvidia compiles the nvidia plugin (plugins/nvidia) with flags as
// <dir>/libflagcx-nvidia.so, the way plugins/plugins.mk builds it.
func buildNvidia(t *testing.T, dir string, flags ...string) {
	t.Helper()
	root := repoRoot(t)
	srcs, err := filepath.Glob(filepath.Join(root, "plugins", "nvidia", "*.c"))
	require.NoError(t, err)
	common, err := filepath.Glob(filepath.Join(root, "plugins", "common", "*.c"))
	require.NoError(t, err)
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-fvisibility=hidden",
		"-I", filepath.Join(root, "sdk", "include"), "-I", filepath.Join(root, "plugins", "common"),
		"-o", filepath.Join(dir, "libflagcx-nvidia.so")}, flags...)
	args = append(append(append(args, srcs...), common...), "-ldl")
	msg, err := exec.Command("gcc", args...).CombinedOutput()
	require.NoError(t, err, "gcc %s:\n%s", strings.Join(args, " "), msg)
}

// TestStreamMutants: the emulated runtimes run streams asynchronously
// (conformance/vendorsim/core/stream.c), so a plugin that loses the
// caller's stream ordering gives wrong data in conformance, as it would on
// a device. Each NVIDIA_BREAK_* build of the real nvidia plugin (its
// source lists them) must fail the cases named, for that reason, while
// the clean build passes them.
func TestStreamMutants(t *testing.T) {
	vsim := filepath.Join(repoRoot(t), "build", "vendorsim")
	_, err := os.Stat(filepath.Join(vsim, "nvidia", "libcudart.so.13"))
	require.NoError(t, err, "the emulated CUDA runtime is built by `make` (make test builds it first)")
	const filter = `device\.stream\.waitevent|device\.reducelocal\.stream|device\.relayreduce|stream\.allreduce\.n2|coll\.allreduce\.float32\.sum\.n2\.count4097\.outofplace`
	// A relay off its stream fails one of the case's order checks: which
	// one first depends on when the emulator's threads run (the copy in
	// that the relay no longer waits for is held back 5 ms, the copy out
	// runs once a query or a synchronise kicks the stream).
	relayOrder := regexp.MustCompile(`^wrong result: .*relayReduce of .*: (the window once landed|streamQuery says the stream is done before the go|` +
		`the copy after the relay, before the go|dst copied out on the stream after the relay)`)
	cases := []struct {
		name   string
		flag   string
		failed map[string]*regexp.Regexp // case id -> reason
	}{
		{"clean", "", nil},
		{"streamSynchronize returns at once", "-DNVIDIA_BREAK_SYNC", map[string]*regexp.Regexp{
			"coll.allreduce.float32.sum.n2.count4097.outofplace": regexp.MustCompile(`^wrong result: .*recv buffer: \d+ of 4097 float32 elements differ`),
			"stream.allreduce.n2":                                regexp.MustCompile(`^wrong result: .*result copied out on the stream after the allReduce: \d+ of 4097 float32 elements differ`),
			"device.stream.waitevent":                            regexp.MustCompile(`^wrong result: .*copies on a second stream that waited for an event of the first: \d+ of \d+ uint8 elements differ`),
			"device.reducelocal.stream":                          regexp.MustCompile(`^wrong result: .*copies in, reduceLocal and a copy out on one stream: \d+ of 4097 float32 elements differ`),
			// Its reads of dst (before the go on a second stream, after it on
			// the worker's) run before the copies they wait for.
			"device.relayreduce": regexp.MustCompile(`^wrong result: .*relayReduce of `),
		}},
		{"streamWaitEvent does nothing", "-DNVIDIA_BREAK_WAIT_EVENT", map[string]*regexp.Regexp{
			"device.stream.waitevent": regexp.MustCompile(`^wrong result: .*copies on a second stream that waited for an event of the first: \d+ of \d+ uint8 elements differ`),
		}},
		{"allReduce on the NULL stream", "-DNVIDIA_BREAK_NULL_STREAM", map[string]*regexp.Regexp{
			"stream.allreduce.n2": regexp.MustCompile(`^wrong result: .*result copied out on the stream after the allReduce: \d+ of 4097 float32 elements differ`),
		}},
		{"reduceLocal on the NULL stream", "-DNVIDIA_BREAK_REDUCE_STREAM", map[string]*regexp.Regexp{
			"device.reducelocal.stream": regexp.MustCompile(`^wrong result: .*copies in, reduceLocal and a copy out on one stream: \d+ of 4097 float32 elements differ`),
		}},
		{"relayReduce on the NULL stream", "-DNVIDIA_BREAK_RELAY_STREAM", map[string]*regexp.Regexp{"device.relayreduce": relayOrder}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var flags []string
			if c.flag != "" {
				flags = append(flags, c.flag)
			}
			buildNvidia(t, dir, flags...)
			rep := runSuite(t, dir, Options{Emulated: true, VendorsimDir: vsim, Filter: regexp.MustCompile(filter)})
			res := results(rep)
			for _, id := range []string{"device.stream.waitevent", "device.reducelocal.stream", "device.relayreduce", "stream.allreduce.n2", "coll.allreduce.float32.sum.n2.count4097.outofplace"} {
				r, ok := res[id]
				require.True(t, ok, "case %s did not run", id)
				want, broken := c.failed[id]
				if !broken {
					require.Equal(t, Passed, r.Status, "%s: %s", id, r.Reason)
					continue
				}
				require.Equal(t, Failed, r.Status, "%s: %s", id, r.Reason)
				require.Regexp(t, want, r.Reason, id)
			}
			require.Equal(t, c.failed == nil, rep.Passed())
		})
	}
}
