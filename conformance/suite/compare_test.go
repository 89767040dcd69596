package suite

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
)

func encode(dt sdk.DataType, vals ...float64) []byte {
	b := make([]byte, len(vals)*dt.Size())
	for i, v := range vals {
		reference.EncodeFloat(dt, v, b[i*dt.Size():])
	}
	return b
}

func TestCompareElems(t *testing.T) {
	cases := []struct {
		name      string
		dt        sdk.DataType
		got, want []float64
		tol       func(int) float64
		err       string
	}{
		{"equal", sdk.Float32, []float64{1, 2, 3}, []float64{1, 2, 3}, nil, ""},
		{"signed zero", sdk.Float32, []float64{0}, []float64{math.Copysign(0, -1)}, nil, ""},
		{"one off", sdk.Int32, []float64{1, 5, 3, 4}, []float64{1, 2, 3, 9}, nil, "x: 2 of 4 int32 elements differ; first at element 1: got 5, want 2"},
		{"bfloat16", sdk.Bfloat16, []float64{1, 2}, []float64{1, 3}, nil, "x: 1 of 2 bfloat16 elements differ; first at element 1: got 2.000000, want 3.000000"},
		{"within tolerance", sdk.Float16, []float64{10.0078125}, []float64{10}, func(int) float64 { return 0.01 }, ""},
		{"beyond tolerance", sdk.Float16, []float64{10.5}, []float64{10}, func(int) float64 { return 0.01 }, "x: 1 of 1 float16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := compareElems("x", c.dt, encode(c.dt, c.got...), encode(c.dt, c.want...), c.tol)
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			var wr *wrongResult
			require.ErrorAs(t, err, &wr)
			require.Contains(t, err.Error(), c.err)
		})
	}
}

// TestAvgTolerance: only a floating average over a rank count that is not
// a power of two is inexact, by at most 2*n*u*max|input|.
func TestAvgTolerance(t *testing.T) {
	id := func(i int) int { return i }
	c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float16, Op: sdk.Avg, NRanks: 3, Count: 16, Seed: 9}
	tol := avgTolerance(c, id)
	require.NotNil(t, tol)
	for i := 0; i < c.Count; i++ {
		m := 0.0
		for r := 0; r < 3; r++ {
			v := float64(c.Input(r, i))
			m = max(m, v, -v)
		}
		require.InDelta(t, 6*0x1p-11*m, tol(i), 1e-12)
		require.Greater(t, tol(i), 0.0)
	}
	none := func(i int) int { return -1 }
	require.Zero(t, avgTolerance(c, none)(0), "elements outside the reduced block are exact")
	for _, exact := range []reference.Case{
		{Coll: sdk.AllReduce, Type: sdk.Float16, Op: sdk.Avg, NRanks: 4},
		{Coll: sdk.AllReduce, Type: sdk.Int32, Op: sdk.Avg, NRanks: 3},
		{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: 3},
	} {
		require.Nil(t, avgTolerance(exact, id), "%+v", exact)
	}
}
