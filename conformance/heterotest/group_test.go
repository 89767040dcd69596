package heterotest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
)

// groups is the "group" scenario of a rank: every GroupSet, each as one
// group, exact.
func groups(comm *core.Comm, m Mem, out *workerOut) error {
	for _, set := range GroupSets(comm.Count()) {
		out.Cases++
		wrong, err := RunGroup(comm, m, set.Cases, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", set.Name, err)
		}
		for i, w := range wrong {
			if w != 0 {
				out.Failures = append(out.Failures, fmt.Sprintf("%s: call %d (%s): %d wrong elements", set.Name, i, Name(set.Cases[i], false), w))
			}
		}
	}
	return comm.Barrier()
}

// TestGroupedCollectivesOnVendors: groups of 2 to 8 collectives of mixed
// kinds, with sends and receives among them, exact on emulated vendors:
// homogeneous (the vendor library's own group around the direct calls;
// on cambricon some types and ops leave it for the host path) and
// heterogeneous (the shared-memory plane, the staged plan executor).
func TestGroupedCollectivesOnVendors(t *testing.T) {
	cases := []struct {
		name      string
		placement string
		env       []string
		homo      bool
	}{
		{"homogeneous nvidia, 2 ranks", "nvidia:2", nil, true},
		{"homogeneous nvidia, 3 ranks", "nvidia:3", nil, true},
		{"homogeneous cambricon (no float64, no avg)", "cambricon:2", nil, true},
		{"nvidia and host", "nvidia:2,host:1", nil, false},
		{"nvidia split 2,2, staged (no shared memory)", "nvidia:4", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,2", "FLAGCX_SHM_DISABLE=1"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			placement := expand(tc.placement)
			requirePlugins(t, placement)
			outs := runRanks(t, placement, workerJob{Scenario: "group"}, tc.env, 2*time.Minute)
			for r, o := range outs {
				require.Empty(t, o.Error, "rank %d", r)
				require.Empty(t, o.Failures, "rank %d", r)
				require.Equal(t, len(GroupSets(len(placement))), o.Cases, "rank %d ran every group", r)
				require.Equal(t, tc.homo, o.Homogeneous, "rank %d: %s", r, o.Layout)
			}
		})
	}
}
