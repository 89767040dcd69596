package vendorsim

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// TestEmulatorLibraries: every emulator library of every vendor
// (testkit.Vendors) carries the vendor's soname, says that it is one
// (flagcxVendorsimEmulated = 1 and a flagcxVendorsimDescription naming
// what it emulates) and exports exactly the subset of the vendor's API
// that the vendor's plugin calls (testkit's lists), nothing more.
func TestEmulatorLibraries(t *testing.T) {
	for _, v := range testkit.Vendors {
		t.Run(v.Name, func(t *testing.T) {
			testkit.Vendorsim(t, v)
			dir := v.EmulatorDir(testkit.RepoRoot(t))
			for _, e := range v.Emulators() {
				t.Run(e.File, func(t *testing.T) {
					path := filepath.Join(dir, e.File)
					f, err := elf.Open(path)
					require.NoError(t, err)
					defer f.Close()
					names, err := f.DynString(elf.DT_SONAME)
					require.NoError(t, err)
					require.Equal(t, []string{e.Soname}, names, path)

					syms, err := f.DynamicSymbols()
					require.NoError(t, err)
					var exported []string
					marks := map[string]elf.Symbol{}
					for _, s := range syms {
						if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) != elf.STB_GLOBAL {
							continue
						}
						if strings.HasPrefix(s.Name, "flagcxVendorsim") {
							marks[s.Name] = s
						} else {
							exported = append(exported, s.Name)
						}
					}
					sort.Strings(exported)
					require.Equal(t, e.Exports, exported, "%s exports exactly the plugin's subset", path)

					emulated := symbolBytes(t, f, marks, "flagcxVendorsimEmulated", 4)
					require.Equal(t, int32(1), int32(binary.LittleEndian.Uint32(emulated)), "%s: flagcxVendorsimEmulated", path)
					desc := symbolBytes(t, f, marks, "flagcxVendorsimDescription", 0)
					if i := bytes.IndexByte(desc, 0); i >= 0 {
						desc = desc[:i]
					}
					require.Contains(t, string(desc), "flagcx vendorsim: "+e.Description, path)
				})
			}
		})
	}
}

// symbolBytes is the initial value of a data symbol of f: n bytes, or the
// symbol's size when n is 0.
func symbolBytes(t *testing.T, f *elf.File, syms map[string]elf.Symbol, name string, n int) []byte {
	t.Helper()
	s, ok := syms[name]
	require.True(t, ok, "the library does not export %s", name)
	require.Less(t, int(s.Section), len(f.Sections), name)
	sec := f.Sections[s.Section]
	data, err := sec.Data()
	require.NoError(t, err)
	if n == 0 {
		n = int(s.Size)
	}
	off := int(s.Value - sec.Addr)
	require.LessOrEqual(t, off+n, len(data), name)
	return data[off : off+n]
}
