package suite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEntryOffsets compares the entry offsets the suite reads NULL entries
// at with the C compiler's offsetof over sdk/include/flagcx_plugin.h.
func TestEntryOffsets(t *testing.T) {
	offs := entryOffsets()
	keys := make([]string, 0, len(offs))
	for k := range offs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"flagcx_plugin.h\"\nint main(void) {\n")
	fmt.Fprintf(&src, "  printf(\"size %%zu\\n\", sizeof(flagcxVendorPlugin_v1_t));\n")
	want := []string{fmt.Sprintf("size %d", tableV1Size)}
	for _, k := range keys {
		fmt.Fprintf(&src, "  printf(\"%s %%zu\\n\", offsetof(flagcxVendorPlugin_v1_t, %s));\n", k, k)
		want = append(want, fmt.Sprintf("%s %d", k, offs[k]))
	}
	src.WriteString("  return 0;\n}\n")
	dir := t.TempDir()
	cfile, exe := filepath.Join(dir, "offsets.c"), filepath.Join(dir, "offsets")
	require.NoError(t, os.WriteFile(cfile, []byte(src.String()), 0o644))
	out, err := exec.Command("gcc", "-Wall", "-Werror", "-I", filepath.Join(repoRoot(t), "sdk", "include"), "-o", exe, cfile).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(exe).Output()
	require.NoError(t, err)
	require.Equal(t, want, strings.Split(strings.TrimSpace(string(out)), "\n"))
	require.Len(t, offs, 42, "22 device and 20 ccl entries")
}

// TestReadEntries reads the example's table: only pointerKind is NULL.
func TestReadEntries(t *testing.T) {
	dir := t.TempDir()
	path := buildExample(t, dir)
	e, err := readEntries(path)
	require.NoError(t, err)
	require.Len(t, e, 42)
	for name, set := range e {
		require.Equal(t, name != "pointerKind", set, name)
	}
	_, err = readEntries(filepath.Join(dir, "missing.so"))
	require.Error(t, err)
}
