package netplugin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNetNoDevice(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		want       string
	}{
		{"no plugin file", "/nonexistent/libflagcx-net-ib.so", "the network plugin does not load"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadNet(tc.path, false)
			require.ErrorIs(t, err, ErrNoNetDevice)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
