package plugincmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// TestMain makes this test binary a probe process when a listing starts it
// as one (opts), as flagcx plugins --probe is.
func TestMain(m *testing.M) {
	if loader.IsProbeChild() {
		if err := loader.ServeProbe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// opts lists dir, probing with this test binary.
func opts(dir string, emulated bool) Options {
	return Options{Dir: dir, Emulated: emulated, Probe: []string{os.Args[0]}}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		require.NotEqual(t, filepath.Dir(dir), dir, "go.mod not found")
		dir = filepath.Dir(dir)
	}
}

// pluginDir is a fresh dir holding a copy of the make-built nvidia plugin
// (a fresh object for dlopen) and a file that is not a plugin.
func pluginDir(t *testing.T) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "build", "plugins", "libflagcx-nvidia.so")
	b, err := os.ReadFile(src)
	require.NoError(t, err, "%s is missing: run make first", src)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "libflagcx-nvidia.so"), b, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "libflagcx-notes.so"), []byte("not a library"), 0o644))
	return dir
}

// vendorsim points FLAGCX_VENDORSIM_DIR at the make-built emulators.
func vendorsim(t *testing.T) {
	t.Helper()
	root := repoRoot(t)
	sim := filepath.Join(root, "build", "vendorsim")
	_, err := os.Stat(filepath.Join(sim, "nvidia", "libnccl.so.2"))
	require.NoError(t, err, "vendorsim is not built: run make first")
	t.Setenv("FLAGCX_VENDORSIM_DIR", sim)
}

func TestListingsEmulated(t *testing.T) {
	vendorsim(t)
	dir := pluginDir(t)

	var out bytes.Buffer
	require.NoError(t, Plugins(&out, opts(dir, true)))
	s := out.String()
	t.Log("\n" + s)
	require.Contains(t, s, "vendor runtimes: emulated (vendorsim)")
	require.Regexp(t, `nvidia\s+NVIDIA\s+v5\s+loads \(emulated\)\s+`+regexpQuote(filepath.Join(dir, "libflagcx-nvidia.so")), s)
	require.Regexp(t, `notes\s+-\s+-\s+invalid plugin file`, s)
	require.Contains(t, s, "notes: skipped: plugin file "+filepath.Join(dir, "libflagcx-notes.so")+": is not a shared object")
	require.Contains(t, s, "EMULATED vendor runtimes")
	require.Regexp(t, `ccl\s+libnccl.so.2\s+emulated\s+\S+\s+\S+libnccl.so.2\s+\[FLAGCX_NVIDIA_NCCL\]`, s)
	require.Contains(t, s, "collectives: data types all")

	out.Reset()
	require.NoError(t, Devices(&out, opts(dir, true)))
	s = out.String()
	t.Log("\n" + s)
	require.Regexp(t, `nvidia \(NVIDIA\): \d+ device\(s\), emulated`, s)
	require.Regexp(t, `(?m)^\s+0\s+\S.*\s+0000:`, s)
	require.Contains(t, s, "links:")
	require.Regexp(t, `(?m)^\s+D0\s+X\s+`, s)
	require.Contains(t, s, "skipped (run `flagcx plugins` to see why): notes")
}

func TestListingsWithoutVendorRuntime(t *testing.T) {
	dir := pluginDir(t)
	t.Setenv("FLAGCX_NVIDIA_NCCL", "/nonexistent/libnccl.so.2")
	t.Setenv("FLAGCX_EMULATED", "")

	var out bytes.Buffer
	require.NoError(t, Plugins(&out, opts(dir, false)), "a plugin that does not load is information, not an error")
	s := out.String()
	t.Log("\n" + s)
	require.Regexp(t, `nvidia\s+NVIDIA\s+v5\s+does not load`, s)
	require.Regexp(t, `does not load: .*(FLAGCX_NVIDIA_CUDART|FLAGCX_NVIDIA_NCCL)`, s)

	out.Reset()
	err := Devices(&out, opts(dir, false))
	require.ErrorIs(t, err, sdk.ErrSystemError)
	require.Contains(t, err.Error(), "no plugin in "+dir+" could list devices")
	require.Contains(t, err.Error(), "--emulated lists emulated devices", "the way to see devices without the vendors' libraries")
	require.Contains(t, out.String(), "skipped (run `flagcx plugins` to see why): notes, nvidia")
}

func TestListingsEmptyDir(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	require.NoError(t, Plugins(&out, opts(dir, false)))
	require.Contains(t, out.String(), "no plugins found")

	out.Reset()
	err := Plugins(&out, opts(filepath.Join(dir, "missing"), false))
	require.ErrorContains(t, err, "does not exist", "a plugin dir the user named must exist")
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorIs(t, err, os.ErrNotExist, "the cause stays visible")
	require.Equal(t, sdk.InvalidArgument, sdk.ResultOf(err))
}

func regexpQuote(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		if bytes.ContainsRune([]byte(`\.+*?()|[]{}^$`), r) {
			b.WriteRune('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestRealGPUListing prints both listings on a machine with NVIDIA GPUs:
// FLAGCX_TEST_REAL_GPU=1 go test -run TestRealGPUListing -v.
func TestRealGPUListing(t *testing.T) {
	if os.Getenv("FLAGCX_TEST_REAL_GPU") != "1" {
		t.Skip("set FLAGCX_TEST_REAL_GPU=1 on a machine with NVIDIA GPUs")
	}
	dir := pluginDir(t)
	var out bytes.Buffer
	require.NoError(t, Plugins(&out, opts(dir, false)))
	t.Log("\n" + out.String())
	require.Regexp(t, `nvidia\s+NVIDIA\s+v5\s+loads\s`, out.String())
	out.Reset()
	require.NoError(t, Devices(&out, opts(dir, false)))
	t.Log("\n" + out.String())
	require.NotContains(t, out.String(), "emulated")
}
