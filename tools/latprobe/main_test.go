package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSummary(t *testing.T) {
	tests := []struct {
		name  string
		times []time.Duration
		want  string
	}{
		{"one call", []time.Duration{12 * time.Microsecond},
			"size      8 B  mean    12.0  p10    12.0  p50    12.0  p90    12.0  p99    12.0  max     12.0"},
		{"a slow tail moves the mean, not the median", []time.Duration{
			10 * time.Microsecond, 11 * time.Microsecond, 12 * time.Microsecond, 13 * time.Microsecond, 14 * time.Microsecond,
			15 * time.Microsecond, 16 * time.Microsecond, 17 * time.Microsecond, 18 * time.Microsecond, 1000 * time.Microsecond},
			"size      8 B  mean   112.6  p10    10.0  p50    14.0  p90    18.0  p99    18.0  max   1000.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, summary(8, tc.times))
		})
	}
}
