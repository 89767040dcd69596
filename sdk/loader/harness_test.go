package loader

// The harness shared by the vendor plugin tests: the repository and its
// make-built outputs, compiling C fakes into t.TempDir(), pointing a
// plugin's library variables at a fake, the emulated-selection and
// loader-skip checks every vendor repeats, and rank workers (this test
// binary re-executed, one process per rank, reporting JSON to a file).

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

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

// builtPlugin is the make-built plugin of that name, copied into a fresh
// directory: a copy is a separate object for dlopen, so each test gets a
// plugin whose init has not run yet.
func builtPlugin(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "build", "plugins", "libflagcx-"+name+".so")
	b, err := os.ReadFile(src)
	require.NoError(t, err, "%s is missing: run make first (make test builds it)", src)
	dst := filepath.Join(t.TempDir(), "libflagcx-"+name+".so")
	require.NoError(t, os.WriteFile(dst, b, 0o755))
	return dst
}

// builtVendorsim is the make-built vendorsim root; each of files (relative
// to its <vendor>/ directory) must be there.
func builtVendorsim(t *testing.T, vendor string, files ...string) string {
	t.Helper()
	sim := filepath.Join(repoRoot(t), "build", "vendorsim")
	for _, f := range files {
		_, err := os.Stat(filepath.Join(sim, vendor, f))
		require.NoError(t, err, "the %s emulators are not built: run make first", vendor)
	}
	return sim
}

// compileC builds a shared object from C source with the SDK header on the
// include path, as a vendor team would out of tree.
func compileC(t *testing.T, out, src string, flags ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	_, err := exec.LookPath(cc)
	require.NoError(t, err, "these tests compile small C plugins: install gcc (make needs it too)")
	srcFile := out + ".c"
	require.NoError(t, os.WriteFile(srcFile, []byte(src), 0o644))
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", filepath.Join(repoRoot(t), "sdk", "include"), "-o", out, srcFile}, flags...)
	cmd := exec.Command(cc, args...)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", cc, strings.Join(args, " "), msg)
	return out
}

// compileFake compiles a fake vendor library as <fresh temp dir>/file.
func compileFake(t *testing.T, file, src string, flags ...string) string {
	t.Helper()
	return compileC(t, filepath.Join(t.TempDir(), file), src, flags...)
}

// openWithFake builds the fake vendor library (with variant flags) as
// file, points each of vars at it and opens a fresh copy of the built
// plugin name.
func openWithFake(t *testing.T, name, file, src string, vars []string, flags ...string) (*Plugin, string) {
	t.Helper()
	plugin := builtPlugin(t, name)
	fake := compileFake(t, file, src, flags...)
	for _, v := range vars {
		t.Setenv(v, fake)
	}
	p, err := Open(plugin)
	require.NoError(t, err)
	return p, fake
}

// requireLoaderSkips: a directory with the built plugin name and the acme
// mock, the plugin's runtime variable at a good fake and its collective
// library variable at a missing file; the loader skips the plugin (naming
// that variable) and loads acme.
func requireLoaderSkips(t *testing.T, name, rtVar, fakeFile, fakeSrc, cclVar, missing string) {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(builtPlugin(t, name))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "libflagcx-"+name+".so"), b, 0o755))
	mockPlugin(t, dir, "acme")
	t.Setenv(rtVar, compileFake(t, fakeFile, fakeSrc))
	t.Setenv(cclVar, missing)
	plugins, skipped := Load(Options{Dir: dir})
	require.Len(t, plugins, 1)
	require.Equal(t, "acme", plugins[0].Name)
	require.Len(t, skipped, 1)
	require.Contains(t, skipped[0].Error(), "libflagcx-"+name+".so: vendor runtime does not load")
	require.Contains(t, skipped[0].Error(), cclVar)
}

// shouldBeOverridden is what the emulated-selection tests set the
// collective library variable to: Init with Emulated must not use it, and
// must restore it afterwards.
const shouldBeOverridden = "/nonexistent/should-be-overridden"

// fakeVendorsim makes a vendorsim root whose <vendor>/ holds the fake built
// with -DEMULATED as rtLib, and cclLib as a symlink to it (one object
// loaded); it sets cclVar to shouldBeOverridden. It returns the root and
// the runtime library's path.
func fakeVendorsim(t *testing.T, vendor, src, rtLib, cclLib, cclVar string) (sim, rt string) {
	t.Helper()
	sim = t.TempDir()
	dir := filepath.Join(sim, vendor)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	rt = compileC(t, filepath.Join(dir, rtLib), src, "-DEMULATED")
	require.NoError(t, os.Symlink(rtLib, filepath.Join(dir, cclLib)))
	t.Setenv(cclVar, shouldBeOverridden)
	return sim, rt
}

// requireEmulatedMissing: Init with Emulated and a vendorsim root that is
// not there fails as invalid usage, naming the vendor. The error is
// returned for further checks.
func requireEmulatedMissing(t *testing.T, plugin, sim, vendor string) error {
	t.Helper()
	p, err := Open(plugin)
	require.NoError(t, err)
	err = p.Init(InitOptions{Emulated: true, VendorsimDir: filepath.Join(sim, "nope")})
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.Contains(t, err.Error(), "emulated vendor runtimes for "+vendor+" not found")
	return err
}

// requireEmulatedInit opens the plugin and inits it with Emulated on sim:
// it reports the emulators, both libraries are marked, the runtime is rt,
// and cclVar is restored after init.
func requireEmulatedInit(t *testing.T, plugin, sim, rt, cclVar string) *Plugin {
	t.Helper()
	p, err := Open(plugin)
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
	require.True(t, p.Emulated())
	libs := p.Info().Libraries
	require.True(t, libs[0].Emulated)
	require.True(t, libs[1].Emulated)
	require.Equal(t, rt, libs[0].Path)
	require.Equal(t, shouldBeOverridden, os.Getenv(cclVar), "variables are restored after init")
	return p
}

// ---- Rank workers ---------------------------------------------------------

// A rank worker is this test binary re-executed with <prefix>_RANK,
// _NRANKS, _ID and _OUT set (plus what the test adds); it runs one rank
// and writes its report, as JSON, to the _OUT file.

// rankEnv is the environment of rank r of n.
func rankEnv(prefix string, r, n int, id []byte, out string) []string {
	return []string{prefix + "_RANK=" + strconv.Itoa(r), prefix + "_NRANKS=" + strconv.Itoa(n),
		prefix + "_ID=" + hex.EncodeToString(id), prefix + "_OUT=" + out}
}

// workerRank reads what rankEnv set; out is "" outside a worker.
func workerRank(prefix string) (rank, n int, id []byte, out string, err error) {
	rank, _ = strconv.Atoi(os.Getenv(prefix + "_RANK"))
	n, _ = strconv.Atoi(os.Getenv(prefix + "_NRANKS"))
	id, err = hex.DecodeString(os.Getenv(prefix + "_ID"))
	return rank, n, id, os.Getenv(prefix + "_OUT"), err
}

// runRankWorkers starts n processes of this test binary with args (which
// select the worker, and only it), each with rankEnv(prefix, ...) and env
// added, waits for them all (90 s at most) and decodes their reports. An
// error is a rank whose process failed or whose report is missing or
// unreadable, with the rank's output.
func runRankWorkers[T any](t *testing.T, prefix string, n int, id []byte, args []string, env ...string) ([]T, []error) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reports := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		out := filepath.Join(dir, fmt.Sprintf("rank%d.json", r))
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(append(os.Environ(), rankEnv(prefix, r, n, id, out)...), env...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := cmd.CombinedOutput()
			if err == nil {
				var data []byte
				if data, err = os.ReadFile(out); err == nil {
					err = json.Unmarshal(data, &reports[r])
				}
			}
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w\n%s", r, err, msg)
			}
		}()
	}
	wg.Wait()
	return reports, errs
}

// requireCCLMissing sets the CCL library's variable to a path that does not
// exist and checks that Init fails cleanly: a system error naming the
// plugin, the library and the variable, the runtime (loaded from fake)
// reported as loaded and the CCL not, and no entry usable afterwards.
func requireCCLMissing(t *testing.T, p *Plugin, fake, envVar, soname string) {
	t.Helper()
	t.Setenv(envVar, "/nonexistent/"+soname)
	err := p.Init(InitOptions{})
	require.ErrorIs(t, err, sdk.ErrSystemError)
	require.Contains(t, err.Error(), "plugin "+p.Name+": init")
	require.Contains(t, err.Error(), "cannot load "+soname+" from "+envVar+"=/nonexistent/"+soname)
	require.Contains(t, err.Error(), "fix or unset "+envVar)
	require.False(t, p.Initialized())
	libs := p.Info().Libraries
	require.True(t, libs[0].Loaded, "the runtime loaded before the CCL failed")
	require.Equal(t, fake, libs[0].Path)
	require.False(t, libs[1].Loaded)
	_, err = p.DeviceCount()
	require.ErrorIs(t, err, sdk.ErrInvalidUsage, "no entry runs before a successful init")
}
