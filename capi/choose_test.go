package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestChooseBackend: FLAGCX_BACKEND=host and an empty plugin directory give
// the host; a named plugin that is not there is an invalid argument that
// says how to fix it; with the emulated runtimes the first plugin by name
// with a device wins.
func TestChooseBackend(t *testing.T) {
	empty := t.TempDir()
	plugins := testkit.BuiltFile(t, "plugins")
	cases := []struct {
		name    string
		dir     string
		env     map[string]string
		want    string // the backend's name
		wantErr string
	}{
		{"host asked", plugins, map[string]string{"FLAGCX_BACKEND": "HOST"}, hostName, ""},
		{"no plugins: host", empty, nil, hostName, ""},
		{"missing plugin", empty, map[string]string{"FLAGCX_BACKEND": "acme"}, "",
			"FLAGCX_BACKEND=acme: no plugin file libflagcx-acme.so in " + empty + " (set FLAGCX_PLUGIN_DIR, or FLAGCX_BACKEND=host for the CPU)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be, err := chooseBackend(tc.dir, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.True(t, errors.Is(err, sdk.ErrInvalidArgument))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, be.name)
			require.Equal(t, hostVendor, be.vendor())
			require.Equal(t, 1, be.devices)
		})
	}
}

func TestExtent(t *testing.T) {
	require.Equal(t, 9, extent([]int{2, 3, 1}, []int{0, 6, 2}))
	require.Equal(t, 0, extent(nil, nil))
}

func TestLastError(t *testing.T) {
	c := &comm{}
	id := register(c)
	defer unregister(id)
	require.Equal(t, sdk.NotSupported, fail(c, "flagcxPut", notSupported("one-sided operations")))
	require.Equal(t, "flagcxPut: not supported: one-sided operations is not supported by flagcx-go's libflagcx.so (docs/c-api.md lists what is)", lastError(id))
	require.Equal(t, sdk.InvalidArgument, fail(nil, "flagcxGetUniqueId", sdk.ErrInvalidArgument))
	require.Equal(t, "flagcxGetUniqueId: invalid argument", lastError(0))
	require.Contains(t, lastError(id), "flagcxPut", "a communicator keeps its own last error")
	require.Equal(t, sdk.InternalError, fail(nil, "x", errors.New("plain")), "an error without a code is internal")
}
