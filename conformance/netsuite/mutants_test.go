package netsuite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// TestNetMutants are the suite's negative controls: one-bug builds of the
// plugin or of the emulated verbs that a case of the suite must fail, by
// name. (The unchanged builds pass those cases: the rest of this package.)
func TestNetMutants(t *testing.T) {
	if realFabric {
		t.Skip("the mutants run on the emulated verbs")
	}
	root := testkit.RepoRoot(t)
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testkit.Skip(t, testkit.Compiler, "%s: %v", cc, err)
	}
	builtPlugin := testkit.BuiltFile(t, "net", "libflagcx-net-ib.so")
	builtSim := testkit.BuiltFile(t, "vendorsim")
	for _, tc := range []struct {
		define, fails string
		emulator      bool // the define breaks the emulated verbs, not the plugin
	}{
		{"NIB_BREAK_TAGS", "TestTags", false},
		{"NIB_BREAK_SPLIT", "TestLargeAndZeroByteMessages", false},
		{"VSIM_BREAK_RKEY", "TestRegistrationErrors", true},
	} {
		t.Run(tc.define, func(t *testing.T) {
			dir := t.TempDir()
			plugin, sim := builtPlugin, builtSim
			args := []string{"-shared", "-fPIC", "-O1", "-std=gnu11", "-pthread", "-D" + tc.define}
			if tc.emulator {
				sim = filepath.Join(dir, "vendorsim")
				require.NoError(t, os.MkdirAll(filepath.Join(sim, "ibverbs"), 0o755))
				args = append(args, "-o", filepath.Join(sim, "ibverbs", "libibverbs.so.1"),
					filepath.Join(root, "conformance/vendorsim/ibverbs/ibverbs.c"), "-lrt")
			} else {
				plugin = filepath.Join(dir, "libflagcx-net-ib.so")
				args = append(args, "-I"+filepath.Join(root, "sdk/include"), "-o", plugin,
					filepath.Join(root, "plugins/net-ib/net_ib.c"), "-ldl")
			}
			out, err := exec.Command(cc, args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			cmd := exec.Command(os.Args[0], "-test.run=^"+tc.fails+"$", "-test.count=1", "-test.v")
			// Several queue pairs, so that a message has parts to misplace.
			cmd.Env = append(os.Environ(), "FLAGCX_NET_PLUGIN="+plugin, "FLAGCX_VENDORSIM_DIR="+sim, "FLAGCX_IB_QPS_PER_CONNECTION=2")
			out, err = cmd.CombinedOutput()
			require.Error(t, err, "the suite passed against the mutant:\n%s", out)
			require.True(t, strings.Contains(string(out), "--- FAIL: "+tc.fails), "the suite failed, but not in %s:\n%s", tc.fails, out)
		})
	}
}
