package heterotest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// TestOneSidedPlacements runs the exact one-sided check (OneSided) with
// ranks as processes: on emulated vendors' devices (their windows staged
// through host memory), on heterogeneous layouts of devices and host
// ranks, over shared memory, TCP and the net plugin on emulated verbs.
func TestOneSidedPlacements(t *testing.T) {
	cases := []struct {
		name      string
		placement string
		env       []string
		link      string // what carries every pair ("shm", "tcp", "ib")
	}{
		{"host ranks, shared memory", "host:3", nil, "shm"},
		{"emulated nvidia devices", "nvidia:2", nil, "shm"},
		{"devices and host ranks", "nvidia:2,host:1", nil, "shm"},
		{"three vendors and host ranks", "kunlunxin:1,metax:1,host:1", nil, "shm"},
		{"devices and host ranks over TCP", "nvidia:1,host:2", []string{"FLAGCX_SHM_DISABLE=1"}, "tcp"},
		{"host ranks over the net plugin (emulated IB)", "host:2", []string{"FLAGCX_SHM_DISABLE=1", "FLAGCX_NET=IB"}, "ib"},
		{"devices and host ranks over the net plugin (emulated IB)", "nvidia:1,host:1,cambricon:1", []string{"FLAGCX_SHM_DISABLE=1", "FLAGCX_NET=IB"}, "ib"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			placement := expand(tc.placement)
			requirePlugins(t, placement)
			env := tc.env
			if tc.link == "ib" {
				env = append(env, "FLAGCX_EMULATED=1", "FLAGCX_NET_PLUGIN="+testkit.BuiltFile(t, "net", "libflagcx-net-ib.so"),
					"FLAGCX_VENDORSIM_DIR="+testkit.BuiltFile(t, "vendorsim"))
				testkit.BuiltFile(t, "vendorsim", "ibverbs", "libibverbs.so.1")
			}
			start := time.Now()
			outs := runRanks(t, placement, workerJob{Scenario: "onesided"}, env, 3*time.Minute)
			for r, o := range outs {
				require.Empty(t, o.Error, "rank %d", r)
				require.Empty(t, o.Failures, "rank %d", r)
				require.NotZero(t, o.Cases, "rank %d", r)
				require.Len(t, o.Paths, 2, "one kind of link: %q", o.Paths)
				require.Contains(t, o.Paths[1], "  "+tc.link+" (", "rank %d", r)
			}
			t.Logf("%s: %d ranks, %d checks each, %v: %s", tc.placement, len(placement), outs[0].Cases, time.Since(start).Round(time.Millisecond), outs[0].Layout)
		})
	}
}
