package shm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

func TestSegNameRoundTripAndStrictness(t *testing.T) {
	name := SegName(BootID(), PidNamespace(), os.Getpid(), 0x0123456789abcdef)
	boot, ns, pid, token, ok := ParseSegName(name)
	require.True(t, ok, name)
	require.Equal(t, []any{bootTag(BootID()), nsID(PidNamespace()), os.Getpid(), uint64(0x0123456789abcdef)}, []any{boot, ns, pid, token})
	for _, bad := range []string{"", "flagcx-", "flagcx-a-1-1-0123456789abcdeF", "flagcx-a-1-01-0123456789abcdef", "flagcx-a-1-1-0123456789abcde",
		"flagcx-a/b-1-1-0123456789abcdef", "flagcx-..-1-1-0123456789abcdef", "flagcx-a-1-9999999-0123456789abcdef", "fxvs-a-1-1-0123456789abcdef"} {
		_, _, _, _, ok := ParseSegName(bad)
		require.False(t, ok, bad)
	}
}

// The shm directory's files are only reached through an os.Root: a name
// that leaves it is refused even where the check of the name is skipped.
func TestShmFilesStayInTheirDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	victim := filepath.Join(base, "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o600))
	require.ErrorIs(t, RemoveShmFile(dir, "../../victim.txt"), wire.ErrProtocol)
	_, err := openShmFile(dir, "../../victim.txt")
	require.ErrorIs(t, err, wire.ErrProtocol)
	// A segment name that is a symbolic link out of the directory.
	name := SegName("b", "pid:[1]", 4242, 1)
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, name)))
	_, err = openShmFile(dir, name)
	require.Error(t, err)
	require.FileExists(t, victim)
}

// FuzzSegName: what ParseSegName accepts is exactly what SegName makes.
func FuzzSegName(f *testing.F) {
	f.Add(SegName("3f2a77b1-0000", "pid:[4026531836]", 4242, 0xabcdef))
	f.Add("flagcx-noboot-0-1-0000000000000000")
	f.Add("../../tmp/victim.txt")
	f.Fuzz(func(t *testing.T, name string) {
		boot, ns, pid, token, ok := ParseSegName(name)
		if !ok {
			return
		}
		if again := SegName(boot, "pid:["+ns+"]", pid, token); again != name {
			t.Fatalf("parseSegName accepted %q, which segName writes %q", name, again)
		}
		if strings.ContainsAny(name, `/\.`) {
			t.Fatalf("parseSegName accepted %q", name)
		}
	})
}
