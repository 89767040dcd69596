package metrics

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func TestSizeBucket(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "<=1K"}, {1024, "<=1K"}, {1025, "<=4K"}, {700, "<=1K"}, {1 << 20, "<=1M"}, {(1 << 20) + 1, "<=4M"},
		{256 << 20, "<=256M"}, {1 << 30, "<=1G"}, {(1 << 30) + 1, ">1G"},
	} {
		require.Equal(t, tc.want, SizeBucket(tc.n), "%d", tc.n)
	}
}

// TestTextfile: a sink writing a node exporter textfile leaves a file the
// Prometheus parser reads, with every call counted.
func TestTextfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flagcx.prom")
	s, err := Start(path)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		s.Observe(&Call{Comm: "0x1", Rank: 0, Coll: "AllReduce", Path: "c2c-shm", Bytes: 4096, Seconds: 2e-5})
	}
	s.Observe(&Call{Comm: "0x1", Rank: 0, Coll: "Broadcast", Path: "host engine", Bytes: 10, Seconds: 1e-5, Failed: true})
	s.Revoked("0x1", 0)
	require.NoError(t, s.Close())
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(f)
	require.NoError(t, err)
	calls := fams["flagcx_calls_total"].GetMetric()
	require.Len(t, calls, 2)
	byColl := map[string]float64{}
	for _, m := range calls {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		byColl[labels["coll"]+" "+labels["path"]+" "+labels["size"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{"AllReduce c2c-shm <=4K": 3, "Broadcast host engine <=1K": 1}, byColl)
	require.Equal(t, 1.0, fams["flagcx_call_failures_total"].GetMetric()[0].GetCounter().GetValue())
	require.Equal(t, 1.0, fams["flagcx_revocations_total"].GetMetric()[0].GetCounter().GetValue())
	h := fams["flagcx_call_seconds"].GetMetric()
	require.Len(t, h, 2)
	var n uint64
	for _, m := range h {
		n += m.GetHistogram().GetSampleCount()
	}
	require.Equal(t, uint64(4), n)
}
