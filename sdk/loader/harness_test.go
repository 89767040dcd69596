package loader

// Helpers of the loader's tests: the repository and its make-built outputs
// (through internal/testkit, which skips, or fails under CI, when they are
// missing), and compiling C plugins and fake vendor libraries into
// t.TempDir(). The common vendor tests and their rank workers are in
// vendors_test.go; processes are started by testkit.Run.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// repoRoot is the repository root (go.mod's directory).
func repoRoot(t *testing.T) string {
	t.Helper()
	return testkit.RepoRoot(t)
}

// builtPlugin is the make-built plugin of that name, copied into a fresh
// directory: a copy is a separate object for dlopen, so each test gets a
// plugin whose init has not run yet.
func builtPlugin(t *testing.T, name string) string {
	t.Helper()
	return testkit.Plugin(t, name)
}

// builtVendorsim is the make-built vendorsim root, with every emulator of
// the vendor in it.
func builtVendorsim(t *testing.T, vendor string) string {
	t.Helper()
	return testkit.Vendorsim(t, testkit.Lookup(t, vendor))
}

// compileC builds a shared object from C source with the SDK header on the
// include path, as a vendor team would out of tree.
func compileC(t *testing.T, out, src string, flags ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testkit.Skip(t, testkit.Compiler, "these tests compile small C plugins: %v", err)
	}
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
