package netplugin

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// The Go mirrors of the C structs have the C sizes (flagcx_net.h, LP64).
func TestStructSizes(t *testing.T) {
	require.Equal(t, uintptr(8+2*8+16*8), unsafe.Sizeof(tableV1{}))
	require.Equal(t, uintptr(8+512+32+512), unsafe.Sizeof(initInfoV1{}))
	require.Equal(t, uintptr(64+256+8+8*4), unsafe.Sizeof(propertiesV1{}))
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "libflagcx-net-text.so")
	require.NoError(t, os.WriteFile(text, []byte("not an ELF file"), 0o644))
	vendor := testkit.BuiltFile(t, "plugins", "libflagcx-nvidia.so")
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a missing file", filepath.Join(dir, "nothing.so"), "no such file"},
		{"a file that is not a shared object", text, "dlopen"},
		{"a vendor plugin, not a network plugin", vendor, "does not export flagcxNetPlugin_v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.path)
			require.ErrorIs(t, err, ErrNotPlugin)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCallsBeforeInit(t *testing.T) {
	p, err := Open(testkit.CopyBuilt(t, "net", "libflagcx-net-ib.so"))
	require.NoError(t, err)
	require.Equal(t, "IB", p.Name)
	_, _, err = p.Listen(0)
	require.ErrorContains(t, err, "call Init first")
}
