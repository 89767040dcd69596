package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseDevices: -devices takes indices (all is the plugin's count)
// and refuses anything else with the form it wants.
func TestParseDevices(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []int
		err  string
	}{
		{"0", []int{0}, ""},
		{"0,1", []int{0, 1}, ""},
		{" 2 , 3", []int{2, 3}, ""},
		{"0,x", nil, `bad device "x" in -devices: give all, or indices as 0,1`},
		{"-1", nil, `bad device "-1"`},
		{"", nil, `bad device ""`},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := parseDevices(nil, tc.list)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
