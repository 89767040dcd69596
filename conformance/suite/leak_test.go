package suite

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeakVerdict: growth.verdict calls a leak only growth that goes on in
// every window by more than the floor, alike; caches that fill up (one
// jump, growth slowing down, noise) are not leaks, and a jump does not hide
// a leak that goes on.
func TestLeakVerdict(t *testing.T) {
	const mib = 1 << 20
	// cum turns window growths (MiB, from a start of 100 MiB) into samples.
	cum := func(ws ...float64) []int64 {
		s := []int64{100 * mib}
		for _, w := range ws {
			s = append(s, s[len(s)-1]+int64(w*mib))
		}
		return s
	}
	// 50 calls a window, floor 64 KiB a call: 3.125 MiB a window.
	cases := []struct {
		name    string
		samples []int64
		leak    bool
		slope   int64
		why     string
		floor   int64 // bytes a call; 0: 64 KiB, the resident-memory floor of 256 KiB messages
	}{
		{"flat", cum(0, 0, 0, 0), false, 0, "no leak: a window grew by 0 KiB, not more than the floor of 3200 KiB", 0},
		{"allocator cache filled in one window (the issue's 26-35 MiB)", cum(30, 0.1, 0, 0), false, 157810, "not more than the floor", 0},
		{"cache filled in the first three windows", cum(12, 12, 12, 0.2), false, 189792, "no leak: a window grew by 204 KiB", 0},
		{"noise, up and down", cum(2, -1.5, 3, -0.5), false, 15728, "no leak: a window grew by -1536 KiB", 0},
		{"arenas filling, above the floor but slowing", cum(20, 12, 6, 3.5), false, 217579, "under half the median window (12288 KiB)", 0},
		{"a message (256 KiB) kept per call", cum(12.5, 12.5, 12.5, 12.5), true, 262144, "a leak: every window grew by more than the floor of 65536 bytes a call, alike", 0},
		{"512 KiB a call with noise", cum(25, 24.6, 25.3, 25), true, 523763, "a leak", 0},
		{"a leak and a one-off jump", cum(12.5, 60, 12.5, 12.5), true, 511180, "a leak", 0},
		{"a 64 KiB device leak in 2 MiB pages", cum(4, 2, 4, 4), true, 73400, "a leak", 16 << 10},
		{"a 2 MiB device cache page once", cum(2, 0, 0, 0), false, 10485, "no leak", 16 << 10},
		{"too few windows", cum(20, 20), false, 419430, "not measured (2 windows)", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			floor := c.floor
			if floor == 0 {
				floor = 64 << 10
			}
			g := growth{what: "resident memory", samples: c.samples, rounds: 50, floor: floor}
			leak, why := g.verdict()
			require.Equal(t, c.leak, leak, why)
			require.Contains(t, why, c.why)
			require.Equal(t, c.slope, g.slope())
		})
	}
}

// TestLeakSeries: the measurement names every window's growth and the slope.
func TestLeakSeries(t *testing.T) {
	g := growth{samples: []int64{1 << 30, 1<<30 + 3<<20, 1<<30 + 3<<20 - 4096, 1<<30 + 6<<20, 1<<30 + 9<<20}, rounds: 50}
	require.Equal(t, "+3072, -4, +3076, +3072 KiB in 4 windows of 50 calls, 47185 bytes a call", g.series())
}
