package suite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary is also the workers' program: the runner re-executes it
// with go-plugin's handshake cookie set, and TestMain then serves a worker.
func TestMain(m *testing.M) {
	if IsWorker() {
		ServeWorker()
		return
	}
	os.Exit(m.Run())
}

// repoRoot walks up from the test's directory to go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "go.mod not found above the test directory")
		dir = parent
	}
}

// buildExample compiles conformance/example/example.c (with flags, e.g. a
// negative control) as <dir>/libflagcx-example.so, as a vendor team would
// build a plugin out of tree: the header and a C compiler only.
func buildExample(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	_, err := exec.LookPath(cc)
	require.NoError(t, err, "the conformance tests compile the example plugin: install gcc (make needs it too)")
	root := repoRoot(t)
	out := filepath.Join(dir, "libflagcx-example.so")
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden",
		"-I", filepath.Join(root, "sdk", "include"), "-o", out, filepath.Join(root, "conformance", "example", "example.c"),
		"-lrt", "-pthread"}, flags...)
	msg, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", cc, strings.Join(args, " "), msg)
	return out
}

// runSuite runs the suite on the plugins in dir, with this test binary as
// the worker program.
func runSuite(t *testing.T, dir string, o Options) *Report {
	t.Helper()
	return runSuiteWithin(t, dir, o, 5*time.Minute)
}

// runSuiteWithin is runSuite with a deadline for the whole run.
func runSuiteWithin(t *testing.T, dir string, o Options, deadline time.Duration) *Report {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	o.Dir, o.Worker = dir, []string{exe}
	if len(o.NP) == 0 {
		o.NP = []int{2}
	}
	if o.CaseTimeout == 0 {
		o.CaseTimeout = 30 * time.Second
	}
	o.Quick = true
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	rep, err := Run(ctx, o)
	require.NoError(t, err)
	require.Len(t, rep.Plugins, 1)
	return rep
}

func results(rep *Report) map[string]Result {
	m := map[string]Result{}
	for _, p := range rep.Plugins {
		for _, r := range p.Results {
			m[r.ID] = r
		}
	}
	return m
}

// TestExamplePasses: the template plugin passes the quick matrix on two and
// three ranks with no failure at any level; everything it provides runs.
func TestExamplePasses(t *testing.T) {
	dir := t.TempDir()
	buildExample(t, dir)
	rep := runSuite(t, dir, Options{NP: []int{2, 3}})
	p := rep.Plugins[0]
	require.Empty(t, p.Problem)
	require.Equal(t, "example", p.Info.Name)
	require.False(t, p.Info.Emulated, "the host CPU is not an emulator")
	all, byLevel := p.Counts()
	var failures []string
	for _, r := range p.Results {
		if r.Status == Failed {
			failures = append(failures, r.ID+": "+r.Reason)
		}
	}
	require.Empty(t, failures)
	require.True(t, rep.Passed())
	require.Greater(t, byLevel[MUST].Passed, 300)
	// Only pointerKind and relayReduce (conformance/example/example.c says
	// why) are NULL in the example's table.
	require.Equal(t, []string{"pointerKind", "relayReduce"}, p.Info.NullOpt)
	require.Equal(t, 2, all.Skipped, "only device.pointerkind and device.relayreduce are skipped")
	res := results(rep)
	require.Equal(t, Skipped, res["device.pointerkind"].Status)
	require.Contains(t, res["device.pointerkind"].Reason, "OPTIONAL entry pointerKind is NULL")
	require.Equal(t, Skipped, res["device.relayreduce"].Status)
	require.Contains(t, res["device.relayreduce"].Reason, "OPTIONAL entry relayReduce is NULL")
	for _, id := range []string{"comm.init.n3", "coll.alltoallv.int64.n3.count1031.outofplace", "p2p.ring.float32.n2.count1048583",
		"coll.reducescatter.bfloat16.avg.n3.count1031.inplace", "comm.abort.n2", "comm.destroy.n3"} {
		require.Equal(t, Passed, res[id].Status, id)
	}
}

// TestNegativeControls: deliberately broken builds of the example plugin
// must fail with the right reason, and the suite must go on after a crash
// or a hang with fresh workers.
func TestNegativeControls(t *testing.T) {
	cases := []struct {
		name    string
		flags   []string
		filter  string
		timeout time.Duration
		failed  map[string]*regexp.Regexp // case id -> reason
		passed  []string                  // cases that still pass (afterwards)
		np      []int                     // communicator sizes (default 2)
	}{
		{"wrong sums", []string{"-DEXAMPLE_BREAK_SUM"}, `allreduce\.float32\.(sum|max)|reducescatter\.int32\.sum\.n2\.count1031`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n2.count1031.outofplace":   regexp.MustCompile(`^wrong result: rank \d: recv buffer: \d+ of 1031 float32 elements differ; first at element \d+: got \S+, want \S+`),
				"coll.allreduce.float32.sum.n2.count1.inplace":         regexp.MustCompile(`^wrong result: rank \d: in-place buffer: 1 of 1 float32`),
				"coll.reducescatter.int32.sum.n2.count1031.outofplace": regexp.MustCompile(`^wrong result: .*int32 elements differ`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count0.outofplace", "coll.allreduce.float32.max.n2.count1031.outofplace"}, nil},
		{"swapped arguments", []string{"-DEXAMPLE_BREAK_SWAP"}, `broadcast\.float32`, 0,
			map[string]*regexp.Regexp{
				"coll.broadcast.float32.n2.root1.count1031.outofplace": regexp.MustCompile(`^wrong result: rank \d: recv buffer: 1031 of 1031 float32 elements differ`),
			},
			[]string{"coll.broadcast.float32.n2.root1.count1031.inplace"}, nil},
		{"segfault", []string{"-DEXAMPLE_BREAK_SEGV"}, `comm\.init|allreduce\.float32\.sum|broadcast\.float32\.n2\.root1\.count1031`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n2.count1.outofplace":    regexp.MustCompile(`^crash: rank \d: signal SIGSEGV \(segmentation violation\)`),
				"coll.allreduce.float32.sum.n2.count1.inplace":       regexp.MustCompile(`^crash: rank \d: signal SIGSEGV`),
				"coll.allreduce.float32.sum.n2.count1031.outofplace": regexp.MustCompile(`^not run: allreduce crashed or hung twice`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count0.outofplace", "coll.broadcast.float32.n2.root1.count1031.outofplace", "comm.init.n2"}, nil},
		{"hang", []string{"-DEXAMPLE_BREAK_HANG"}, `allreduce\.float32\.sum\.n2\.count1\.outofplace|broadcast\.float32\.n2\.root1\.count1031`, 2 * time.Second,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n2.count1.outofplace": regexp.MustCompile(`^deadline: rank 0, 1 did not finish within 2s .*a hang`),
			},
			[]string{"coll.broadcast.float32.n2.root1.count1031.outofplace", "coll.broadcast.float32.n2.root1.count1031.inplace"}, nil},
		{"wrong ABI version", []string{"-DEXAMPLE_ABI_VERSION=6"}, ``, 0,
			map[string]*regexp.Regexp{
				"plugin.load": regexp.MustCompile(`^unknown ABI version: .*abiVersion 6, which this build of flagcx-go does not know`),
			}, nil, nil},
		// The classic bugs of a vendor team (conformance/example/example.c's
		// EXAMPLE_BREAK_* mutants): each fails the run, for the right reason.
		{"min computed as sum", []string{"-DEXAMPLE_BREAK_MIN_AS_SUM"}, `allreduce\.int32\.(min|sum)\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.int32.min.n2.count1031.outofplace": regexp.MustCompile(`^wrong result: rank \d: recv buffer: \d+ of 1031 int32 elements differ`),
			},
			[]string{"coll.allreduce.int32.sum.n2.count1031.outofplace"}, nil},
		{"wrong when count % 4 == 0", []string{"-DEXAMPLE_BREAK_COUNT4"}, `allreduce\.float32\.sum\.n2\.count(4|1031|4097)\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n2.count4.outofplace": regexp.MustCompile(`^wrong result: rank \d: recv buffer: 1 of 4 float32 elements differ; first at element 3`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count1031.outofplace", "coll.allreduce.float32.sum.n2.count4097.outofplace"}, nil},
		{"a hang at count 4097 only", []string{"-DEXAMPLE_BREAK_HANG_4097"}, `allreduce\.float32\.sum\.n2\.count(1031|4097)\.outofplace`, 2 * time.Second,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n2.count4097.outofplace": regexp.MustCompile(`^deadline: rank 0, 1 did not finish within 2s`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count1031.outofplace"}, nil},
		{"broadcast wrong from a middle root", []string{"-DEXAMPLE_BREAK_MIDDLE_ROOT"}, `broadcast\.float32\.n3\.root[012]\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.broadcast.float32.n3.root1.count1031.outofplace": regexp.MustCompile(`^wrong result: `),
			},
			[]string{"coll.broadcast.float32.n3.root0.count1031.outofplace", "coll.broadcast.float32.n3.root2.count1031.outofplace"}, []int{3}},
		{"allreduce wrong above 4 ranks", []string{"-DEXAMPLE_BREAK_ABOVE_4_RANKS"}, `allreduce\.float32\.sum\.n[45]\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n5.count1031.outofplace": regexp.MustCompile(`^wrong result: `),
			},
			[]string{"coll.allreduce.float32.sum.n4.count1031.outofplace"}, []int{4, 5}},
		{"a declared type whose reductions are refused", []string{"-DEXAMPLE_BREAK_UINT64_REDUCE"}, `allreduce\.uint64\.sum\.n2\.count1031\.outofplace|allgather\.uint64\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.uint64.sum.n2.count1031.outofplace": regexp.MustCompile(`^error: rank \d: .*uint64 is not reducible`),
			},
			[]string{"coll.allgather.uint64.n2.count1031.outofplace"}, nil},
		{"bfloat16 truncated instead of rounded", []string{"-DEXAMPLE_BREAK_BF16_TRUNCATE"}, `allreduce\.bfloat16\.sum\.n2\.count1031\.outofplace|allreduce\.float32\.sum\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.bfloat16.sum.n2.count1031.outofplace": regexp.MustCompile(`^wrong result: rank \d: recv buffer: \d+ of 1031 bfloat16 elements differ`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count1031.outofplace"}, nil},
		{"int8 sums saturate", []string{"-DEXAMPLE_BREAK_INT8_SATURATE"}, `allreduce\.int8\.(sum|max)\.n2\.count1031\.outofplace|allreduce\.int32\.sum\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.int8.sum.n2.count1031.outofplace": regexp.MustCompile(`^wrong result: rank \d: recv buffer: \d+ of 1031 int8 elements differ`),
			},
			[]string{"coll.allreduce.int8.max.n2.count1031.outofplace", "coll.allreduce.int32.sum.n2.count1031.outofplace"}, nil},
		{"a write past the buffer (guard pages)", []string{"-DEXAMPLE_BREAK_OVERRUN"}, `broadcast\.float32\.n2\.root1\.count1031\.outofplace|allreduce\.float32\.sum\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.broadcast.float32.n2.root1.count1031.outofplace": regexp.MustCompile(`^crash: rank \d: signal SIGSEGV`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count1031.outofplace"}, nil},
		{"wrong on buffers off 16-byte alignment", []string{"-DEXAMPLE_BREAK_UNALIGNED"}, `allreduce\.float32\.sum\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"coll.allreduce.float32.sum.n2.count1031.outofplace.unaligned": regexp.MustCompile(`^wrong result: rank \d: recv buffer: 1 of 1031 float32 elements differ; first at element 0`),
			},
			[]string{"coll.allreduce.float32.sum.n2.count1031.outofplace"}, nil},
		{"send and recv to the wrong peer", []string{"-DEXAMPLE_BREAK_MIRROR_PEER"}, `p2p\.(exchange|ring)\.float32\.n3\.count1031$`, 2 * time.Second,
			map[string]*regexp.Regexp{
				"p2p.exchange.float32.n3.count1031": regexp.MustCompile(`^wrong result: `),
			},
			nil, []int{3}},
		{"a buffer leaked per call", []string{"-DEXAMPLE_BREAK_LEAK"}, `comm\.init\.n2|comm\.leak\.n2`, 0,
			map[string]*regexp.Regexp{
				"comm.leak.n2": regexp.MustCompile(`^wrong result: rank \d: resident memory grew in every window: \+\d+, \+\d+, \+\d+, \+\d+ KiB in 4 windows of 50 calls, \d{6} bytes a call after 50 warm-up allReduces of 256 KiB \(a leak`),
			},
			[]string{"comm.init.n2"}, nil},
		{"reduceLocal drops its last source", []string{"-DEXAMPLE_BREAK_DEVICE_REDUCE"}, `device\.reducelocal|allreduce\.float32\.sum\.n2\.count1031\.outofplace`, 0,
			map[string]*regexp.Regexp{
				"device.reducelocal": regexp.MustCompile(`^wrong result: rank \d: reduceLocal of 2 int8 sources, sum, 1 elements, out of place: `),
			},
			[]string{"coll.allreduce.float32.sum.n2.count1031.outofplace"}, nil},
		{"a device allocation leaked per call", []string{"-DEXAMPLE_BREAK_DEVICE_LEAK"}, `comm\.init\.n2|comm\.leak\.n2`, 0,
			map[string]*regexp.Regexp{
				"comm.leak.n2": regexp.MustCompile(`^wrong result: rank \d: device memory in use on device \d grew in every window: \+\d+, \+\d+, \+\d+, \+\d+ KiB in 4 windows of 50 calls, \d{5} bytes a call after 50 warm-up allReduces of 256 KiB \(a leak`),
			},
			[]string{"comm.init.n2"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			buildExample(t, dir, c.flags...)
			o := Options{CaseTimeout: c.timeout, NP: c.np}
			if c.filter != "" {
				o.Filter = regexp.MustCompile(c.filter)
			}
			start := time.Now()
			rep := runSuite(t, dir, o)
			res := results(rep)
			for id, want := range c.failed {
				r, ok := res[id]
				require.True(t, ok, "case %s did not run", id)
				require.Equal(t, Failed, r.Status, "%s: %s", id, r.Reason)
				require.Regexp(t, want, r.Reason, id)
			}
			for _, id := range c.passed {
				require.Equal(t, Passed, res[id].Status, "%s: %s", id, res[id].Reason)
			}
			require.False(t, rep.Passed(), "a broken plugin must fail the run")
			n, per := rep.Failures()
			require.Equal(t, n, per["example"])
			require.Less(t, time.Since(start), time.Minute)
		})
	}
}

// TestLeakCheckPositiveControl: a plugin that mallocs, touches and frees a
// scratch buffer of nranks x the message on every collective
// (FLAGCX_EXAMPLE_SCRATCH=1, conformance/example/example.c) leaks nothing
// and passes comm.leak, whose detail gives each rank's growth and slope.
// The mutants above are its negative controls.
func TestLeakCheckPositiveControl(t *testing.T) {
	dir := t.TempDir()
	buildExample(t, dir)
	t.Setenv("FLAGCX_EXAMPLE_SCRATCH", "1")
	np := []int{2, 3, 5}
	// 750 allReduces of 256 KiB with exact checks: about a minute on two
	// idle cores, five or more on two cores shared with other work.
	rep := runSuiteWithin(t, dir, Options{NP: np, Filter: regexp.MustCompile(`comm\.leak`)}, 9*time.Minute)
	res := results(rep)
	series := regexp.MustCompile(`^resident memory [-+]\d+, [-+]\d+, [-+]\d+, [-+]\d+ KiB in 4 windows of 50 calls, -?\d+ bytes a call: no leak`)
	for _, n := range np {
		id := fmt.Sprintf("comm.leak.n%d", n)
		r, ok := res[id]
		require.True(t, ok, "case %s did not run", id)
		require.Equal(t, Passed, r.Status, "%s: %s", id, r.Reason)
		t.Logf("%s passed in %.1f s: %s", id, r.Seconds, r.Detail)
		ranks := strings.Split(r.Detail, "; rank ")
		require.Len(t, ranks, n, "%s: one note per rank: %s", id, r.Detail)
		for i, note := range ranks {
			_, note, _ = strings.Cut(note, ": ")
			require.Regexp(t, series, note, "%s rank %d", id, i)
			require.Contains(t, note, "device memory in use on device", "%s rank %d: the example has memGetInfo", id, i)
		}
	}
	require.True(t, rep.Passed())
}

// TestUnknownPlugin: asking for a plugin that is not there is an error of
// the run that names the ones found.
func TestUnknownPlugin(t *testing.T) {
	dir := t.TempDir()
	buildExample(t, dir)
	exe, err := os.Executable()
	require.NoError(t, err)
	_, err = Run(context.Background(), Options{Dir: dir, Plugins: []string{"acme"}, Worker: []string{exe}})
	require.ErrorContains(t, err, `no plugin "acme"`)
	require.ErrorContains(t, err, "found: example")
	_, err = Run(context.Background(), Options{Dir: t.TempDir(), Worker: []string{exe}})
	require.ErrorContains(t, err, "no plugins")
	_, err = Run(context.Background(), Options{Dir: dir, NP: []int{1}, Worker: []string{exe}})
	require.ErrorContains(t, err, "--np 1")
}
