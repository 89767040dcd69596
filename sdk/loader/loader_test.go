package loader

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestABILayout compiles a C program that prints sizeof/offsetof of every
// field of every mirrored struct and compares with the Go mirrors.
func TestABILayout(t *testing.T) {
	type mirror struct {
		cType string
		goVal any
	}
	mirrors := []mirror{
		{"flagcxVendorPlugin_v1_t", tableV1{}},
		{"flagcxVendorPlugin_v2_t", tableV2{}},
		{"flagcxVendorPlugin_v3_t", tableV3{}},
		{"flagcxVendorPlugin_v4_t", tableV4{}},
		{"flagcxVendorPlugin_v5_t", tableV5{}},
		{"flagcxRelay_v5_t", relayV5{}},
		{"flagcxPluginLibrary_v1_t", libraryV1{}},
		{"flagcxPluginInfo_v1_t", pluginInfoV1{}},
		{"flagcxLibraryStatus_v1_t", libraryStatusV1{}},
		{"flagcxDeviceInfo_v1_t", deviceInfoV1{}},
		{"flagcxLinkInfo_v1_t", linkInfoV1{}},
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"flagcx_plugin.h\"\nint main(void) {\n")
	var want []string
	var walk func(cType, prefix string, ty reflect.Type, base uintptr)
	walk = func(cType, prefix string, ty reflect.Type, base uintptr) {
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("c"), ",")
			require.NotEmpty(t, name, "%s.%s has no c tag", ty.Name(), f.Name)
			member := prefix + name
			fmt.Fprintf(&src, "  printf(\"%s.%s %%zu %%zu\\n\", offsetof(%s, %s), sizeof(((%s*)0)->%s));\n", cType, member, cType, member, cType, member)
			want = append(want, fmt.Sprintf("%s.%s %d %d", cType, member, base+f.Offset, f.Type.Size()))
			if f.Type.Kind() == reflect.Struct {
				walk(cType, member+".", f.Type, base+f.Offset)
			}
		}
	}
	for _, m := range mirrors {
		ty := reflect.TypeOf(m.goVal)
		fmt.Fprintf(&src, "  printf(\"sizeof %s %%zu\\n\", sizeof(%s));\n", m.cType, m.cType)
		want = append(want, fmt.Sprintf("sizeof %s %d", m.cType, ty.Size()))
		walk(m.cType, "", ty, 0)
	}
	// constants and enum values shared by header and Go
	consts := []struct {
		c    string
		want int64
	}{
		{"FLAGCX_PLUGIN_ABI_VERSION", sdk.PluginABIVersion}, {"FLAGCX_UNIQUE_ID_MAX_BYTES", UniqueIDMaxBytes},
		{"FLAGCX_PLUGIN_MAX_LIBRARIES", maxLibraries}, {"FLAGCX_PLUGIN_CAP_DEVICE", int64(CapDevice)}, {"FLAGCX_PLUGIN_CAP_CCL", int64(CapCCL)},
		{"flagcxNotSupported", int64(sdk.NotSupported)}, {"flagcxUnhandledCclError", int64(sdk.UnhandledCCLError)}, {"flagcxNumResults", int64(sdk.NumResults)},
		{"flagcxFloat16", int64(sdk.Float16)}, {"flagcxBfloat16", int64(sdk.Bfloat16)}, {"flagcxNumTypes", int64(sdk.NumDataTypes)},
		{"flagcxAvg", int64(sdk.Avg)}, {"flagcxNumRedOps", int64(sdk.NumRedOps)},
		{"flagcxMemcpyHostToDevice", int64(HostToDevice)}, {"flagcxMemcpyDeviceToHost", int64(DeviceToHost)}, {"flagcxMemcpyDeviceToDevice", int64(DeviceToDevice)},
		{"flagcxMemHost", int64(MemHost)}, {"flagcxMemDevice", int64(MemDevice)}, {"flagcxMemManaged", int64(MemManaged)},
		{"FLAGCX_REDUCE_MAX_SRCS", MaxReduceSrcs}, {"(long long)FLAGCX_RELAY_ABORT", int64(-1 << 63)}, {"FLAGCX_RELAY_DONE", int64(RelayDone)},
		{"flagcxLinkFabric", int64(LinkFabric)}, {"flagcxLinkSystem", int64(LinkSystem)}, {"flagcxLogTrace", int64(LogTrace)},
	}
	for _, c := range consts {
		fmt.Fprintf(&src, "  printf(\"%s %%lld\\n\", (long long)(%s));\n", c.c, c.c)
		want = append(want, fmt.Sprintf("%s %d", c.c, c.want))
	}
	src.WriteString("  return 0;\n}\n")

	dir := t.TempDir()
	srcFile, exe := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	require.NoError(t, os.WriteFile(srcFile, []byte(src.String()), 0o644))
	out, err := exec.Command("gcc", "-Wall", "-Werror", "-I", filepath.Join(repoRoot(t), "sdk", "include"), "-o", exe, srcFile).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(exe).Output()
	require.NoError(t, err)
	require.Equal(t, want, strings.Split(strings.TrimSpace(string(out)), "\n"))
}

// badFiles makes each kind of unusable plugin file in dir and says what
// Open must answer.
type badFile struct {
	name     string
	make     func(t *testing.T, path string)
	sentinel error
	contains []string
}

func badFiles() []badFile {
	write := func(content string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, []byte(content), 0o644)) }
	}
	return []badFile{
		{"text", write("this is not a library\n"), ErrNotSharedObject, []string{"is not a shared object", "libflagcx-text.so"}},
		{"empty", write(""), ErrNotSharedObject, []string{"is not a shared object"}},
		{"exe", func(t *testing.T, path string) {
			src := path + ".c"
			require.NoError(t, os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644))
			out, err := exec.Command("gcc", "-no-pie", "-o", path, src).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}, ErrNotSharedObject, []string{"not a shared object"}},
		{"nosym", func(t *testing.T, path string) {
			compileC(t, path, "int someOtherLibrary = 1;\n")
		}, ErrNoTable, []string{"does not export flagcxVendorPlugin_v5 or flagcxVendorPlugin_v4 or flagcxVendorPlugin_v3 or flagcxVendorPlugin_v2 or flagcxVendorPlugin_v1", "not a flagcx-go vendor plugin"}},
		{"future", func(t *testing.T, path string) {
			compileC(t, path, "#include \"flagcx_plugin.h\"\n__attribute__((visibility(\"default\"))) const int flagcxVendorPlugin_v7 = 7;\n")
		}, ErrNoTable, []string{"flagcxVendorPlugin_v7", "does not know"}},
		{"abi99", func(t *testing.T, path string) {
			compileC(t, path, mockPluginC, "-DMOCK_ABI=99")
		}, ErrUnknownABI, []string{"abiVersion 99", "loads versions [5 4 3 2 1]"}},
		{"v2says5", func(t *testing.T, path string) {
			// A version this build loads, under another version's symbol:
			// the message must not call version 5 unknown.
			compileC(t, path, mockPluginC, "-DMOCK_V2", "-DMOCK_ABI=5")
		}, ErrUnknownABI, []string{"table flagcxVendorPlugin_v2 says abiVersion 5, but a table exported as flagcxVendorPlugin_v2 must say 2 (an ABI v5 table is exported as flagcxVendorPlugin_v5)"}},
		{"size", func(t *testing.T, path string) {
			compileC(t, path, mockPluginC, "-DMOCK_SIZE_DELTA=8")
		}, ErrBadTable, []string{"size field 456", "is 448 bytes", "rebuild"}},
		{"nullentry", func(t *testing.T, path string) {
			compileC(t, path, mockPluginC, "-DMOCK_NULL_MEMCOPY")
		}, ErrBadTable, []string{"required entries are NULL: device.memCopy"}},
	}
}

func TestOpenRejectsBadFiles(t *testing.T) {
	for _, bf := range badFiles() {
		t.Run(bf.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "libflagcx-"+bf.name+".so")
			bf.make(t, path)
			p, err := Open(path)
			require.Nil(t, p)
			require.Error(t, err)
			require.ErrorIs(t, err, bf.sentinel)
			require.ErrorIs(t, err, sdk.ErrInvalidUsage)
			var oe *OpenError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, path, oe.Path)
			for _, s := range bf.contains {
				require.Contains(t, err.Error(), s)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := Open(filepath.Join(t.TempDir(), "libflagcx-gone.so"))
		require.ErrorIs(t, err, ErrNotSharedObject)
		require.Contains(t, err.Error(), "cannot read it")
	})
}

// TestDiscoverySkipsBadPlugins puts every bad file, a plugin whose vendor
// library is missing and a good plugin in one dir: the good one loads, each
// other one is reported with its reason, and nothing stops the scan.
func TestDiscoverySkipsBadPlugins(t *testing.T) {
	dir := t.TempDir()
	for _, bf := range badFiles() {
		bf.make(t, filepath.Join(dir, "libflagcx-"+bf.name+".so"))
	}
	mockPlugin(t, dir, "novendor", "-DMOCK_INIT_FAIL")
	mockPlugin(t, dir, "good")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("not a plugin name"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "libflagcx-adir.so"), 0o755))

	all, err := LoadAll(Options{Dir: dir})
	require.NoError(t, err)
	byName := map[string]Loaded{}
	for _, l := range all {
		byName[l.Name] = l
	}
	require.Len(t, all, len(badFiles())+2, "every libflagcx-*.so file is a candidate, directories are not")
	require.True(t, byName["good"].OK(), "%v", byName["good"].Err)
	require.Equal(t, "ACME", byName["good"].Plugin.Vendor)
	for _, bf := range badFiles() {
		l := byName[bf.name]
		require.Nil(t, l.Plugin, bf.name)
		require.ErrorIs(t, l.Err, bf.sentinel, bf.name)
	}
	nv := byName["novendor"]
	require.NotNil(t, nv.Plugin, "the table is fine; only its vendor runtime is missing")
	require.False(t, nv.OK())
	require.ErrorIs(t, nv.Err, sdk.ErrSystemError)
	require.Contains(t, nv.Err.Error(), "libflagcx-novendor.so: vendor runtime does not load")
	require.Contains(t, nv.Err.Error(), "cannot load libacmert.so.1")
	require.Contains(t, nv.Err.Error(), "FLAGCX_ACME_RT")
	require.Equal(t, "cannot load libacmert.so.1: set FLAGCX_ACME_RT", nv.Plugin.Info().Libraries[0].Error)

	plugins, skipped := Load(Options{Dir: dir})
	require.Len(t, plugins, 1)
	require.Equal(t, "acme", plugins[0].Name)
	require.Len(t, skipped, len(badFiles())+1)
}

func TestDiscoverOverrides(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	mockPlugin(t, dir, "alpha")
	mockPlugin(t, dir, "beta")
	mockPlugin(t, dir, "my-vendor")
	extra := mockPlugin(t, other, "elsewhere")

	tests := []struct {
		name string
		env  map[string]string
		want map[string]string // name -> source
	}{
		{"dir only", nil, map[string]string{"alpha": "plugin dir", "beta": "plugin dir", "my-vendor": "plugin dir"}},
		{"none disables", map[string]string{"FLAGCX_PLUGIN_BETA": "none"}, map[string]string{"alpha": "plugin dir", "my-vendor": "plugin dir"}},
		{"dash name", map[string]string{"FLAGCX_PLUGIN_MY_VENDOR": "NONE"}, map[string]string{"alpha": "plugin dir", "beta": "plugin dir"}},
		{"path replaces", map[string]string{"FLAGCX_PLUGIN_ALPHA": extra}, map[string]string{"alpha": "FLAGCX_PLUGIN_ALPHA", "beta": "plugin dir", "my-vendor": "plugin dir"}},
		{"path adds", map[string]string{"FLAGCX_PLUGIN_GAMMA": extra}, map[string]string{"alpha": "plugin dir", "beta": "plugin dir", "my-vendor": "plugin dir", "gamma": "FLAGCX_PLUGIN_GAMMA"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			t.Setenv(EnvPluginDir, dir) // never a plugin named "dir"
			cands, err := Discover(dir)
			require.NoError(t, err)
			got := map[string]string{}
			for _, c := range cands {
				got[c.Name] = c.Source
			}
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("missing dir and bad override path", func(t *testing.T) {
		t.Setenv("FLAGCX_PLUGIN_GHOST", "/nonexistent/libflagcx-ghost.so")
		all, err := LoadAll(Options{Dir: filepath.Join(dir, "nope")})
		require.ErrorIs(t, err, os.ErrNotExist)
		require.Contains(t, err.Error(), "FLAGCX_PLUGIN_DIR")
		require.Len(t, all, 1)
		require.ErrorIs(t, all[0].Err, ErrNotSharedObject)
		require.Contains(t, all[0].Err.Error(), "named by FLAGCX_PLUGIN_GHOST")
	})
}

// openMock opens and initializes a fresh acme plugin.
func openMock(t *testing.T) (*Plugin, string) {
	t.Helper()
	path := mockPlugin(t, t.TempDir(), "acme")
	p, err := Open(path)
	require.NoError(t, err)
	var lines []string
	require.NoError(t, p.Init(InitOptions{Log: func(plugin string, level LogLevel, msg string) {
		lines = append(lines, fmt.Sprintf("%s %s %s", plugin, level, msg))
	}}))
	require.Equal(t, []string{"acme INFO acme init called"}, lines, "the log callback reaches Go")
	return p, path
}

func TestMockPluginEntries(t *testing.T) {
	p, path := openMock(t)
	require.Equal(t, "acme", p.Name)
	require.Equal(t, CapDevice|CapCCL, p.Caps)
	require.Equal(t, []LibrarySpec{{Role: "runtime", EnvVar: "FLAGCX_ACME_RT", Sonames: []string{"libacmert.so.1"}}}, p.Libraries)
	info := p.Info()
	require.False(t, info.Emulated)
	require.Equal(t, "3.1", info.Libraries[0].Version)
	require.NotContains(t, info.DataTypes, sdk.Float64)
	require.NotContains(t, info.RedOps, sdk.Avg)

	n, err := p.DeviceCount()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	di, err := p.DeviceInfo(0)
	require.NoError(t, err)
	require.Equal(t, DeviceInfo{Index: 0, Name: "Acme X1", PCIBusID: "0000:01:00.0", TotalMemory: 1 << 30}, di)

	t.Run("vendor error string", func(t *testing.T) {
		_, err := p.DeviceInfo(3)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.EqualError(t, err, "plugin acme: getDeviceInfo: invalid argument: ACME_ERR_DEV: no such device")
	})

	t.Run("optional entries report not supported", func(t *testing.T) {
		l, err := p.Link(0, 0)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Equal(t, LinkUnknown, l.Type)
		require.False(t, p.HasEventTiming())
		ev, err := p.EventCreate(0)
		require.NoError(t, err)
		_, err = p.EventElapsed(ev, ev)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Contains(t, err.Error(), "not supported")
		_, err = p.EventQuery(ev)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.NoError(t, p.EventDestroy(ev))
	})

	dev, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	dev2, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	defer p.DeviceFree(dev)
	defer p.DeviceFree(dev2)
	in := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")

	t.Run("copies keep direction", func(t *testing.T) {
		for _, kind := range []MemcpyKind{HostToDevice, DeviceToHost, DeviceToDevice} {
			require.NoError(t, p.Memcpy(dev2, dev, 1, kind, 0))
			require.Equal(t, int(kind), cInt(t, path, "mock_last_kind"))
		}
		require.NoError(t, p.CopyToDevice(dev, in))
		out := make([]byte, len(in))
		require.NoError(t, p.CopyFromDevice(out, dev))
		require.Equal(t, in, out)
		err := p.Memcpy(dev, dev2, 1, MemcpyKind(7), 0)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	})

	t.Run("pinned host memory", func(t *testing.T) {
		h, err := p.HostMalloc(16)
		require.NoError(t, err)
		copy(HostSlice(h, 16), "pinned and ready")
		require.NoError(t, p.Memcpy(dev, h, 16, HostToDevice, 0))
		out := make([]byte, 16)
		require.NoError(t, p.CopyFromDevice(out, dev))
		require.Equal(t, "pinned and ready", string(out))
		require.NoError(t, p.HostFree(h))
	})

	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Len(t, id, 136, "the plugin says how many bytes its id takes")
	comm, err := p.CommInitRank(0, 1, id, 0)
	require.NoError(t, err)
	defer comm.Destroy()
	s, err := p.StreamCreate(0)
	require.NoError(t, err)
	defer p.StreamDestroy(s)

	t.Run("collectives", func(t *testing.T) {
		require.NoError(t, p.CopyToDevice(dev, in))
		require.NoError(t, comm.AllReduce(dev, dev2, 16, sdk.Float32, sdk.Sum, s))
		out := make([]byte, 64)
		require.NoError(t, p.CopyFromDevice(out, dev2))
		require.Equal(t, in, out)

		err := comm.AllReduce(dev, dev2, 13, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "ACME_ERR_13: unlucky count", "the vendor's own string")
	})

	// A collective is the latency path users compare with the vendor's own
	// library: garbage per call would bring GC pauses into it.
	t.Run("collectives allocate nothing", func(t *testing.T) {
		p.SetPointerChecks(false)
		defer p.SetPointerChecks(true)
		allocs := testing.AllocsPerRun(100, func() {
			_ = comm.AllReduce(dev, dev2, 16, sdk.Float32, sdk.Sum, s)
		})
		require.Zero(t, allocs)
	})

	t.Run("masks say not supported, never wrong", func(t *testing.T) {
		err := comm.AllReduce(dev, dev2, 4, sdk.Float64, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Contains(t, err.Error(), "data type float64 is not supported")
		err = comm.AllReduce(dev, dev2, 4, sdk.Float32, sdk.Avg, s)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Contains(t, err.Error(), "reduction op avg is not supported")
	})

	t.Run("host slice refused by a device collective", func(t *testing.T) {
		goMem := make([]byte, 64)
		err := comm.AllReduce(uintptr(unsafe.Pointer(&goMem[0])), dev2, 16, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "send buffer")
		require.Contains(t, err.Error(), "is pageable host memory")
		err = p.CheckHostMemory("host allReduce", []string{"send buffer"}, dev)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "is device memory: the host backend needs host memory")
		require.NoError(t, p.CheckHostMemory("host allReduce", nil, uintptr(unsafe.Pointer(&goMem[0]))))
	})

	t.Run("composed gather and alltoallv", func(t *testing.T) {
		require.NoError(t, p.CopyToDevice(dev, in))
		require.NoError(t, p.Memset(dev2, 0, 64, 0))
		before := len(cText(t, path, "mock_calls"))
		require.NoError(t, comm.Gather(dev, dev2, 8, sdk.Int32, 0, s))
		require.Equal(t, "groupStart;send(0,8);recv(0,8);groupEnd;", cText(t, path, "mock_calls")[before:])
		out := make([]byte, 32)
		require.NoError(t, p.CopyFromDevice(out, dev2))
		require.Equal(t, in[:32], out)

		before = len(cText(t, path, "mock_calls"))
		require.NoError(t, comm.AlltoAllv(dev, []int{3}, []int{1}, dev2, []int{3}, []int{2}, sdk.Float16, s))
		require.Equal(t, "groupStart;send(0,3);recv(0,3);groupEnd;", cText(t, path, "mock_calls")[before:])
		err := comm.AlltoAllv(dev, []int{3, 3}, []int{0}, dev2, []int{3}, []int{0}, sdk.Float16, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	})

	t.Run("argument checks", func(t *testing.T) {
		require.ErrorIs(t, comm.Broadcast(dev, dev2, 4, sdk.Int8, 1, s), sdk.ErrInvalidArgument)
		require.ErrorIs(t, comm.Send(dev, -1, sdk.Int8, 0, s), sdk.ErrInvalidArgument)
		_, err := p.CommInitRank(0, 1, id[:128], 0)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "unique id is 128 bytes, the plugin expects 136")
		_, err = p.CommInitRank(0, 2, id, 1)
		require.ErrorIs(t, err, sdk.ErrInvalidUsage)
		require.Contains(t, err.Error(), "ACME_ERR_SIZE")
		require.ErrorIs(t, comm.AsyncError(), sdk.ErrNotSupported)
	})
}

// TestErrorsArePerThread: getLastError is per OS thread, so concurrent
// failures each carry their own message.
func TestErrorsArePerThread(t *testing.T) {
	p, _ := openMock(t)
	errs := make(chan error, 64)
	for i := range 64 {
		go func() {
			if i%2 == 0 {
				_, err := p.DeviceInfo(1)
				errs <- err
			} else {
				id, _ := p.UniqueID()
				_, err := p.CommInitRank(0, 2, id, 1)
				errs <- err
			}
		}()
	}
	for range 64 {
		err := <-errs
		var ce *CallError
		require.ErrorAs(t, err, &ce)
		switch ce.Entry {
		case "getDeviceInfo":
			require.Equal(t, "ACME_ERR_DEV: no such device", ce.Message)
		case "commInitRank":
			require.Equal(t, "ACME_ERR_SIZE: acme runs one rank", ce.Message)
		default:
			t.Fatalf("unexpected entry %s", ce.Entry)
		}
	}
}

func TestCallErrorWrapsSentinels(t *testing.T) {
	for r := sdk.UnhandledDeviceError; r < sdk.NumResults; r++ {
		err := error(&CallError{Plugin: "x", Entry: "allReduce", Result: r, Message: "vendor says " + strconv.Itoa(int(r))})
		require.True(t, errors.Is(err, r.Err()), r.String())
		require.Equal(t, r, sdk.ResultOf(err))
		require.Contains(t, err.Error(), "vendor says")
	}
	require.Equal(t, "not supported", sdk.NotSupported.String())
	require.Equal(t, []int{sdk.PluginABIVersion, 4, 3, 2, 1}, KnownABIVersions())
}
