package reduce

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// narrowFormat describes float16 or bfloat16 for the reference
// implementations below, which work from the definition of the format
// (sign, biased exponent, mantissa) in float64 and round by searching the
// sorted table of all values: nothing shared with the code under test.
type narrowFormat struct {
	name     string
	mantBits int
	expBits  int
	inf      uint16 // bits of +Inf
	// values[i] is the value of bits i for i in [0, inf); values[inf] is
	// the value the next finite number would have, 2^(emax+1), which
	// decides rounding to Inf.
	values []float64
}

func newNarrow(name string, expBits, mantBits int) *narrowFormat {
	f := &narrowFormat{name: name, mantBits: mantBits, expBits: expBits}
	f.inf = uint16(((1 << expBits) - 1) << mantBits)
	f.values = make([]float64, int(f.inf)+1)
	for i := 0; i < int(f.inf); i++ {
		f.values[i] = f.value(uint16(i))
	}
	bias := (1 << (expBits - 1)) - 1
	f.values[f.inf] = math.Ldexp(1, bias+1)
	return f
}

var (
	refF16  = newNarrow("float16", 5, 10)
	refBF16 = newNarrow("bfloat16", 8, 7)
)

// value decodes bits h from the format's definition.
func (f *narrowFormat) value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h&0x7fff) >> f.mantBits
	m := int(h) & (1<<f.mantBits - 1)
	bias := (1 << (f.expBits - 1)) - 1
	switch e {
	case 0:
		return sign * math.Ldexp(float64(m), 1-bias-f.mantBits)
	case 1<<f.expBits - 1:
		if m == 0 {
			return math.Copysign(math.Inf(1), sign)
		}
		return math.NaN()
	}
	return sign * math.Ldexp(float64(1<<f.mantBits+m), e-bias-f.mantBits)
}

// round gives the format's bits nearest to x, ties to even, by search.
func (f *narrowFormat) round(x float64) uint16 {
	if math.IsNaN(x) {
		panic("round NaN")
	}
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
		x = -x
	}
	if x >= f.values[f.inf] {
		return sign | f.inf
	}
	// i: the largest index with values[i] <= x.
	i := sort.Search(len(f.values), func(i int) bool { return f.values[i] > x }) - 1
	lo, hi := f.values[i], f.values[i+1]
	mid := lo + (hi-lo)/2 // exact: both are on a grid far coarser than float64's
	switch {
	case x == lo || x < mid:
		return sign | uint16(i)
	case x > mid:
		return sign | uint16(i+1)
	case i%2 == 0:
		return sign | uint16(i)
	default:
		return sign | uint16(i+1)
	}
}

func isNaN16(h uint16, inf uint16) bool { return h&0x7fff > inf }

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		want := refF16.value(h)
		got := F16ToF32(h)
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "%#04x", h)
			require.Equal(t, h&0x8000 != 0, math.Signbit(float64(got)), "NaN sign %#04x", h)
			// Round trip: NaN stays NaN with its sign and payload, quieted.
			back := F32ToF16(got)
			require.True(t, isNaN16(back, 0x7c00), "%#04x -> %#04x", h, back)
			require.Equal(t, h|0x0200, back, "NaN payload %#04x", h)
			continue
		}
		require.Equal(t, want, float64(got), "%#04x", h)
		require.Equal(t, math.Signbit(want), math.Signbit(float64(got)), "sign of %#04x", h)
		require.Equal(t, h, F32ToF16(got), "round trip of %#04x", h)
	}
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		want := refBF16.value(h)
		got := BF16ToF32(h)
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "%#04x", h)
			back := F32ToBF16(got)
			require.True(t, isNaN16(back, 0x7f80), "%#04x -> %#04x", h, back)
			require.Equal(t, h|0x0040, back, "NaN payload %#04x", h)
			continue
		}
		require.Equal(t, want, float64(got), "%#04x", h)
		require.Equal(t, math.Signbit(want), math.Signbit(float64(got)), "sign of %#04x", h)
		require.Equal(t, h, F32ToBF16(got), "round trip of %#04x", h)
	}
}

// roundingCases: for every pair of neighbouring non-negative values of the
// format (including the largest finite and Inf), the exact midpoint (a tie)
// and the float32 values just below and above it, a quarter and three
// quarters of the way, with both signs.
func roundingCases(t *testing.T, f *narrowFormat) []float32 {
	var xs []float32
	for i := 0; i < int(f.inf); i++ {
		lo, hi := f.values[i], f.values[i+1]
		mid := float32(lo + (hi-lo)/2)
		require.Equal(t, lo+(hi-lo)/2, float64(mid), "midpoint not exact in float32")
		for _, x := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))),
			float32(lo + (hi-lo)/4), float32(lo + 3*(hi-lo)/4)} {
			xs = append(xs, x, -x)
		}
	}
	// Far outside the range, and the extremes of float32.
	for _, x := range []float32{0, math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-30, 1e30, float32(math.Inf(1))} {
		xs = append(xs, x, -x)
	}
	return xs
}

func TestF32ToF16Rounding(t *testing.T) {
	for _, x := range roundingCases(t, refF16) {
		require.Equal(t, refF16.round(float64(x)), F32ToF16(x), "F32ToF16(%g) bits %#08x", x, math.Float32bits(x))
	}
	// Named cases.
	for _, c := range []struct {
		x    float32
		want uint16
	}{
		{65504, 0x7bff},
		{65519.996, 0x7bff},
		{65520, 0x7c00}, // tie between 65504 (odd) and 65536: Inf
		{1e6, 0x7c00},
		{-65520, 0xfc00},
		{1, 0x3c00},
		{1 + 1.0/2048, 0x3c00},                // tie, even is 1.0
		{1 + 3.0/2048, 0x3c02},                // tie, even is up
		{float32(math.Ldexp(1, -24)), 0x0001}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0x0000}, // tie with zero: even
		{float32(math.Ldexp(1.5, -25)), 0x0001},
		{float32(math.Ldexp(3, -25)), 0x0002},      // tie between 1 and 2 ulps: even
		{float32(math.Ldexp(1, -14)), 0x0400},      // smallest normal
		{float32(math.Ldexp(1023.5, -24)), 0x0400}, // subnormal tie rounds up into the normals
	} {
		require.Equal(t, c.want, F32ToF16(c.x), "F32ToF16(%g)", c.x)
	}
	// Random float32 bit patterns against the reference.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300000; i++ {
		x := math.Float32frombits(rng.Uint32())
		if x != x {
			require.True(t, isNaN16(F32ToF16(x), 0x7c00))
			continue
		}
		require.Equal(t, refF16.round(float64(x)), F32ToF16(x), "F32ToF16(%g) bits %#08x", x, math.Float32bits(x))
	}
}

func TestF32ToBF16Rounding(t *testing.T) {
	for _, x := range roundingCases(t, refBF16) {
		require.Equal(t, refBF16.round(float64(x)), F32ToBF16(x), "F32ToBF16(%g) bits %#08x", x, math.Float32bits(x))
	}
	for _, c := range []struct {
		x    float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even down
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, even up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{math.MaxFloat32, 0x7f80}, // rounds past the largest bfloat16
		{math.Float32frombits(0x7f7f7fff), 0x7f7f},
		{math.Float32frombits(0x00008000), 0x0000}, // subnormal tie to even zero
		{math.Float32frombits(0x00018000), 0x0002},
		{float32(math.NaN()), 0x7fc0},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // NaN with low payload stays NaN
		{math.Float32frombits(0xff800001), 0xffc0},
	} {
		require.Equal(t, c.want, F32ToBF16(c.x), "F32ToBF16(%#08x)", math.Float32bits(c.x))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300000; i++ {
		x := math.Float32frombits(rng.Uint32())
		if x != x {
			require.True(t, isNaN16(F32ToBF16(x), 0x7f80))
			continue
		}
		require.Equal(t, refBF16.round(float64(x)), F32ToBF16(x), "F32ToBF16(%g) bits %#08x", x, math.Float32bits(x))
	}
}
