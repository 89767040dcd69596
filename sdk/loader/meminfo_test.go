package loader

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestMemInfo: ABI v3's memGetInfo reports device memory in use (total -
// free) that follows deviceMalloc and deviceFree, on the example plugin and
// on the emulators of the vendors whose shims provide it (nvidia:
// cudaMemGetInfo, metax: mcMemGetInfo); the shims without a documented
// call (cambricon, kunlunxin) and older tables (the v1 example) leave it
// NULL, which MemInfo reports as not supported.
func TestMemInfo(t *testing.T) {
	cases := []struct {
		name     string
		open     func(t *testing.T) *Plugin
		provided bool
	}{
		{"example, ABI v3", func(t *testing.T) *Plugin { return builtExample(t, "example-plugin") }, true},
		{"example built against the v1 header", func(t *testing.T) *Plugin { return builtExample(t, "example-plugin-v1") }, false},
		{"nvidia, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "nvidia") }, true},
		{"metax, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "metax") }, true},
		{"cambricon, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "cambricon") }, false},
		{"kunlunxin, emulated", func(t *testing.T) *Plugin { return emulatedPlugin(t, "kunlunxin") }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.open(t)
			provided := map[string]bool{}
			for _, e := range p.Entries() {
				provided[e.Name] = e.Provided
			}
			_, listed := provided["memGetInfo"]
			require.True(t, listed, "Entries lists memGetInfo")
			require.Equal(t, tc.provided, provided["memGetInfo"])
			if !tc.provided {
				_, _, err := p.MemInfo(0)
				require.True(t, errors.Is(err, sdk.ErrNotSupported), "%v", err)
				return
			}
			free0, total, err := p.MemInfo(0)
			require.NoError(t, err)
			require.NotZero(t, total)
			require.LessOrEqual(t, free0, total)
			const n = 4 << 20
			ptr, err := p.DeviceMalloc(0, n)
			require.NoError(t, err)
			free1, total1, err := p.MemInfo(0)
			require.NoError(t, err)
			require.Equal(t, total, total1)
			require.GreaterOrEqual(t, free0-free1, uint64(n), "an allocation of %d bytes shows in free", n)
			require.NoError(t, p.DeviceFree(ptr))
			free2, _, err := p.MemInfo(0)
			require.NoError(t, err)
			require.Equal(t, free0, free2, "freed memory is free again")
			_, _, err = p.MemInfo(1 << 20)
			require.Error(t, err, "no such device")
		})
	}
}

// TestV2TableAdapted: a plugin that exports only the ABI v2 table keeps
// loading; its memGetInfo is NULL (not supported) and its v2 entries stay.
func TestV2TableAdapted(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		var flags []string
		if v2 {
			flags = []string{"-DMOCK_V2"}
		}
		p, err := Open(mockPlugin(t, t.TempDir(), "acme", flags...))
		require.NoError(t, err)
		require.NoError(t, p.Init(InitOptions{}))
		want := sdk.PluginABIVersion
		if v2 {
			want = 2
		}
		require.Equal(t, want, p.ABIVersion)
		provided := map[string]bool{}
		for _, e := range p.Entries() {
			provided[e.Name] = e.Provided
		}
		require.True(t, provided["memCopy"] && provided["eventSynchronize"])
		require.Equal(t, !v2, provided["memGetInfo"])
		free, total, err := p.MemInfo(0)
		if v2 {
			require.True(t, errors.Is(err, sdk.ErrNotSupported), "%v", err)
			require.ErrorContains(t, err, "memGetInfo")
		} else {
			require.NoError(t, err)
			require.Equal(t, uint64(1<<30), total)
			require.Equal(t, uint64(3<<28), free)
		}
	}
}
