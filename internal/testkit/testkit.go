// Package testkit is what the module's tests share: first the vendor tests
// of sdk/loader and conformance/vendorsim, so that the four vendors are
// tested one way, and with them the tests of capi, cmd/flagcx, core,
// internal/hostnet, sdk/netplugin and the conformance suites (ranks as
// processes, emulated hosts, built files, CI's needs):
//
//   - Vendors: one table per vendor (its plugin's name and vendor string, the
//     FLAGCX_* variable, candidate sonames and emulator build of each of its
//     libraries, what the emulators export, and what differs: data types,
//     reduction ops, unique-id size, search roots, the error on a machine
//     without its software). The common tests iterate over it.
//   - Run: the one process harness. Ranks are this test binary re-executed,
//     one process each, running a worker registered with Worker; TestMain
//     calls ServeWorker first. InFreshProcess re-runs one test alone in a
//     new process.
//   - Skip: a test that cannot run here skips with its reason, except under
//     CI (CI=true) when the missing thing is one CI must have (a build, a C
//     compiler, a machine without vendor software): then it fails, so
//     nothing is silently skipped in CI.
//   - BuiltFile, CopyBuilt, Plugin, Vendorsim: the make-built outputs, or
//     Skip(Built) when they are missing.
//   - Input, Reduced, Move, Encode: exact expected values for collectives.
//   - Hosts: emulated hosts (network, pid, mount and UTS namespaces, own
//     /dev/shm) on this machine, through tools/hosts/hosts.sh, with a rank
//     launcher (HostSet.Ranks, RankResult) and faults (Kill, Stop, Link).
//
// It is imported by tests only.
package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// EnvCI is the variable CI services set to "true".
const EnvCI = "CI"

// CI reports whether the tests run under CI (CI=true, or 1, yes).
func CI() bool {
	v := strings.TrimSpace(strings.ToLower(os.Getenv(EnvCI)))
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return v == "yes"
}

// Need is something a test needs from the machine it runs on.
type Need struct {
	What string // what the test needs, as in "needs <What>"
	InCI bool   // CI provides it: missing there is a failure, not a skip
	Fix  string // how to get it; "" when there is nothing to do
}

// The needs tests skip for.
var (
	// Built: make's outputs (build/plugins, build/vendorsim, build/example-plugin*).
	Built = Need{What: "the make-built plugins and emulators under build/", InCI: true, Fix: "run make first; make test builds them"}
	// Compiler: a C compiler for the small plugins and fakes tests build.
	Compiler = Need{What: "a C compiler (gcc, or $CC)", InCI: true, Fix: "install gcc (make needs it too)"}
	// NoVendorSoftware: a machine without the vendor's own libraries, as
	// CI machines are, for the tests of what a user without them sees.
	NoVendorSoftware = Need{What: "a machine without the vendor's own software", InCI: true}
	// RealGPU: NVIDIA GPUs with CUDA and NCCL, which CI never has.
	RealGPU = Need{What: "NVIDIA GPUs with CUDA and NCCL", InCI: false, Fix: "set FLAGCX_TEST_REAL_GPU=1 on such a machine"}
)

// Skip ends the test because the machine lacks need; format and args say
// what exactly is missing. Outside CI the test is skipped with that
// reason. Under CI a need CI must provide fails the test instead.
func Skip(t testing.TB, need Need, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf("needs %s: %s", need.What, fmt.Sprintf(format, args...))
	if need.Fix != "" {
		msg += " (" + need.Fix + ")"
	}
	if need.InCI && CI() {
		t.Fatalf("%s; CI must provide this, so the test fails instead of skipping (%s=%s)", msg, EnvCI, os.Getenv(EnvCI))
		return
	}
	t.Skip(msg)
}

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// RepoRoot is the repository root: the directory of go.mod above the
// test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		var dir string
		if dir, rootErr = os.Getwd(); rootErr != nil {
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = fmt.Errorf("no go.mod above the test's directory")
				return
			}
			dir = parent
		}
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return root
}

// BuiltFile is the path of a make-built file, relative to the repository's
// build/ directory; the test skips (fails under CI) when it is missing.
func BuiltFile(t testing.TB, rel ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{RepoRoot(t), "build"}, rel...)...)
	if _, err := os.Stat(p); err != nil {
		Skip(t, Built, "%s is missing", p)
	}
	return p
}

// Plugin is a copy of the make-built plugin libflagcx-<name>.so in a fresh
// directory: a copy is a separate object for dlopen, so each test gets a
// plugin whose init has not run yet.
func Plugin(t testing.TB, name string) string {
	t.Helper()
	return copyFile(t, BuiltFile(t, "plugins", "libflagcx-"+name+".so"))
}

// copyFile copies src into a fresh temporary directory under its name.
func copyFile(t testing.TB, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// CopyBuilt is a copy of a make-built file (see BuiltFile) in a fresh
// directory, under its own name.
func CopyBuilt(t testing.TB, rel ...string) string {
	t.Helper()
	return copyFile(t, BuiltFile(t, rel...))
}

// Vendorsim is the root of the make-built emulators (build/vendorsim),
// checking that every emulator file of v is there.
func Vendorsim(t testing.TB, v Vendor) string {
	t.Helper()
	for _, e := range v.Emulators() {
		BuiltFile(t, "vendorsim", v.Name, e.File)
	}
	return filepath.Join(RepoRoot(t), "build", "vendorsim")
}
