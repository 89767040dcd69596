package vendorsim

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// coreOrder reads the order of the core's C files from the comment at the
// top of core/vsim_internal.h, lowest first: the one place it is written.
func coreOrder(t *testing.T, dir string) []string {
	head, err := os.ReadFile(filepath.Join(dir, "vsim_internal.h"))
	require.NoError(t, err)
	var order []string
	for _, m := range regexp.MustCompile(`(?m)^ \*   (\w+\.c) `).FindAllStringSubmatch(string(head), -1) {
		order = append(order, m[1])
	}
	return order
}

// TestCoreCallsOneWay: each C file of the emulator core calls functions
// of only the files before it in vsim_internal.h's order, so the core has
// no call cycle (issue 22). Each file is compiled on its own and its
// undefined symbols are matched with the symbols the other files define.
func TestCoreCallsOneWay(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testkit.Skip(t, testkit.Compiler, "%s: %v", cc, err)
	}
	dir := filepath.Join(testkit.RepoRoot(t), "conformance", "vendorsim", "core")
	order := coreOrder(t, dir)
	srcs, err := filepath.Glob(filepath.Join(dir, "*.c"))
	require.NoError(t, err)
	var files []string
	for _, s := range srcs {
		files = append(files, filepath.Base(s))
	}
	slices.Sort(files)
	require.ElementsMatch(t, files, order, "vsim_internal.h's order lists every core/*.c once")

	defines := map[string]string{} // function -> file
	needs := map[string][]string{} // file -> undefined symbols
	out := t.TempDir()
	for _, f := range files {
		obj := filepath.Join(out, strings.TrimSuffix(f, ".c")+".o")
		msg, err := exec.Command(cc, "-c", "-fPIC", "-std=gnu11", "-pthread", "-o", obj, filepath.Join(dir, f)).CombinedOutput()
		require.NoError(t, err, "%s:\n%s", f, msg)
		e, err := elf.Open(obj)
		require.NoError(t, err)
		syms, err := e.Symbols()
		require.NoError(t, err)
		require.NoError(t, e.Close())
		for _, s := range syms {
			switch {
			case s.Section == elf.SHN_UNDEF && s.Name != "":
				needs[f] = append(needs[f], s.Name)
			case elf.ST_BIND(s.Info) == elf.STB_GLOBAL && elf.ST_TYPE(s.Info) == elf.STT_FUNC:
				defines[s.Name] = f
			}
		}
	}
	rank := map[string]int{}
	for i, f := range order {
		rank[f] = i
	}
	var upward []string
	for _, f := range files {
		for _, sym := range needs[f] {
			if g, ok := defines[sym]; ok && rank[g] >= rank[f] {
				upward = append(upward, f+" calls "+sym+" of "+g)
			}
		}
	}
	require.Empty(t, upward, "a core file calls only files before it in vsim_internal.h's order: %v", order)
	require.Contains(t, needs["engine.c"], "vsim_comm_new", "the check sees calls between files")
}
