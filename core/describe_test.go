package core_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestDescribeLayoutPlanAndHostAllGather: what tools read of a
// communicator beside its collectives: the layout every rank agreed on,
// any rank's plan, and the exchange of host bytes (and the barrier it is
// when empty).
func TestDescribeLayoutPlanAndHostAllGather(t *testing.T) {
	for _, tc := range []struct {
		name     string
		split    []int
		hostPath bool
		clusters [][]int
		path     string // AllReduce's path on rank 0
	}{
		{"host placement", nil, false, [][]int{{0, 1, 2}}, "host-comm"},
		{"two host clusters 2+1", []int{2, 1}, false, [][]int{{0, 1}, {2}}, "c2c-shm"},
		{"host path", []int{1, 2}, true, [][]int{{0}, {1, 2}}, "host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := startHetero(t, 3, core.WithSplitList(tc.split), core.WithHostPath(tc.hostPath), core.WithChunk(4096))
			for _, c := range comms {
				l := c.Layout()
				require.Equal(t, len(tc.clusters) == 1, l.IsHomogeneous())
				require.Equal(t, tc.hostPath, l.HostPath)
				require.Equal(t, 4096, l.Chunk)
				require.Len(t, l.Clusters, len(tc.clusters))
				for i, cl := range l.Clusters {
					require.Equal(t, core.Cluster{Index: i, Vendor: "host", Ranks: tc.clusters[i], Leader: tc.clusters[i][0]}, cl)
				}
				require.Contains(t, l.String(), fmt.Sprintf("3 ranks, %s", map[bool]string{true: "homogeneous", false: "heterogeneous"}[l.IsHomogeneous()]))
			}
			p, err := comms[1].Plan(0, sdk.Call{Coll: sdk.AllReduce, Count: 1000, DType: sdk.Float32, Op: sdk.Sum})
			require.NoError(t, err)
			require.Equal(t, tc.path, p.Path)
			require.Contains(t, p.Text, "plan rank 0: AllReduce float32 sum")
			_, err = comms[0].Plan(3, sdk.Call{Coll: sdk.AllReduce, Count: 1, DType: sdk.Float32, Op: sdk.Sum})
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)

			got := make([][]byte, len(comms))
			errs := make([]error, len(comms))
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[r] = make([]byte, 2*len(comms))
					if errs[r] = c.HostAllGather(nil, nil); errs[r] == nil {
						errs[r] = c.HostAllGather([]byte{byte(r), byte(10 + r)}, got[r])
					}
				}()
			}
			wg.Wait()
			for r := range comms {
				require.NoError(t, errs[r], "rank %d", r)
				require.Equal(t, []byte{0, 10, 1, 11, 2, 12}, got[r], "rank %d", r)
			}
			require.ErrorIs(t, comms[0].HostAllGather([]byte{1}, make([]byte, 2)), sdk.ErrInvalidArgument)
		})
	}
}
