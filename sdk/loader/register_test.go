package loader

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// builtExample is a copy of the make-built example plugin of build/<dir>
// (example-plugin: ABI v2; example-plugin-v1: the same source built
// against the v1 header), initialized.
func builtExample(t *testing.T, dir string) *Plugin {
	t.Helper()
	p, err := Open(testkit.CopyBuilt(t, dir, "libflagcx-example.so"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{}))
	return p
}

// emulatedPlugin is a built vendor plugin initialized on its emulator.
func emulatedPlugin(t *testing.T, name string) *Plugin {
	t.Helper()
	p, err := Open(builtPlugin(t, name))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: builtVendorsim(t, name)}))
	return p
}

// TestHostRegistration: ABI v2 registers existing host memory (here a
// shared mapping, as the windows of a host are) for async copies, refuses
// overlapping and unknown ranges, and a v1 plugin says plainly that it
// cannot, while its copies still work.
func TestHostRegistration(t *testing.T) {
	cases := []struct {
		name string
		open func(t *testing.T) *Plugin
		v1   bool
	}{
		{"example, ABI v2", func(t *testing.T) *Plugin { return builtExample(t, "example-plugin") }, false},
		{"example built against the v1 header", func(t *testing.T) *Plugin { return builtExample(t, "example-plugin-v1") }, true},
		{"nvidia, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "nvidia") }, false},
		{"kunlunxin, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "kunlunxin") }, false},
		{"cambricon, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "cambricon") }, false},
		{"metax, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "metax") }, false},
	}
	const n = 2 << 12
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.open(t)
			mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
			require.NoError(t, err)
			t.Cleanup(func() { _ = syscall.Munmap(mem) })
			addr := uintptr(unsafe.Pointer(&mem[0]))
			provided := map[string]bool{}
			for _, e := range p.Entries() {
				provided[e.Name] = e.Provided
			}
			if tc.v1 {
				require.Equal(t, 1, p.ABIVersion)
				require.False(t, p.CanRegisterHost())
				require.False(t, provided["hostRegister"])
				err := p.HostRegister(addr, n)
				require.True(t, errors.Is(err, sdk.ErrNotSupported), "%v", err)
				require.ErrorContains(t, err, "ABI v1")
			} else {
				require.Equal(t, sdk.PluginABIVersion, p.ABIVersion)
				require.True(t, p.CanRegisterHost())
				require.True(t, provided["hostRegister"] && provided["hostUnregister"])
				require.NoError(t, p.HostRegister(addr, n))
				require.Error(t, p.HostRegister(addr+n/2, n/2), "a range inside a registered one")
				if k, err := p.PointerKind(addr + 100); err == nil {
					require.Equal(t, MemHostPinned, k)
				}
			}

			// An async round trip through the device from the mapping
			// (a v1 plugin copies synchronously from any host memory).
			dev, err := p.DeviceMalloc(0, n)
			require.NoError(t, err)
			defer p.DeviceFree(dev)
			s, err := p.StreamCreate(0)
			require.NoError(t, err)
			defer p.StreamDestroy(s)
			strm := s
			if tc.v1 {
				strm = 0
			}
			for i := range mem {
				mem[i] = byte(i*7 + 3)
			}
			want := bytes.Clone(mem)
			require.NoError(t, p.Memcpy(dev, addr, n, HostToDevice, strm))
			require.NoError(t, p.StreamSynchronize(s))
			clear(mem)
			require.NoError(t, p.Memcpy(addr, dev, n, DeviceToHost, strm))
			require.NoError(t, p.StreamSynchronize(s))
			require.Equal(t, want, mem)

			if !tc.v1 {
				require.NoError(t, p.HostUnregister(addr))
				require.Error(t, p.HostUnregister(addr), "unregistering twice")
				require.NoError(t, p.HostRegister(addr, n), "registering again after unregistering")
				require.NoError(t, p.HostUnregister(addr))
			}
		})
	}
}
