package suite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestStartTimeoutFollowsFLAGCXTimeout: the deadline of starting the
// workers and joining (a hung start) is twice FLAGCX_TIMEOUT and a minute,
// 120 s at its default; one the caller sets is kept, and a malformed
// variable stops the run before any worker starts.
func TestStartTimeoutFollowsFLAGCXTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		set   time.Duration // Options.StartTimeout as given
		want  time.Duration
		error string // part of the error, "" for none
	}{
		{"unset", nil, 0, 2*tcp.DefaultTimeout + time.Minute, ""},
		{"the default is 120 s", nil, 0, 120 * time.Second, ""},
		{"5 seconds", map[string]string{"FLAGCX_TIMEOUT": "5"}, 0, 70 * time.Second, ""},
		{"10 minutes", map[string]string{"FLAGCX_TIMEOUT": "10m"}, 0, 21 * time.Minute, ""},
		{"given by the caller", map[string]string{"FLAGCX_TIMEOUT": "5"}, 7 * time.Second, 7 * time.Second, ""},
		{"malformed", map[string]string{"FLAGCX_TIMEOUT": "soon"}, 0, 0, `FLAGCX_TIMEOUT="soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			o, err := Options{Worker: []string{"worker"}, StartTimeout: tc.set}.withDefaults(lookup)
			if tc.error != "" {
				require.ErrorIs(t, err, sdk.ErrInvalidArgument)
				require.ErrorContains(t, err, tc.error)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, o.StartTimeout)
			require.Equal(t, 60*time.Second, o.CaseTimeout, "--timeout's default is its own")
		})
	}
	// Run reads the process's FLAGCX_TIMEOUT before it looks for plugins.
	t.Setenv("FLAGCX_TIMEOUT", "soon")
	_, err := Run(context.Background(), Options{Dir: t.TempDir(), Worker: []string{"worker"}})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorContains(t, err, `FLAGCX_TIMEOUT="soon"`)
}
