package reference

import (
	"encoding/binary"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

func TestFloat16Conversion(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{3, 0x4200},
		{0.1, 0x2e66},
		{2048, 0x6800},
		{2049, 0x6800}, // halfway: ties to even (2048)
		{2051, 0x6802}, // halfway: ties to even (2052)
		{65504, 0x7bff},
		{65520, 0x7c00}, // rounds up to infinity
		{float32(math.Inf(-1)), 0xfc00},
		{1.0 / (1 << 24), 0x0001},       // smallest subnormal
		{1.0 / (1 << 25), 0x0000},       // halfway to the smallest subnormal: even is 0
		{1.5 / (1 << 25), 0x0001},       // above halfway
		{1.0 / (1 << 14), 0x0400},       // smallest normal
		{1023.0 / (1 << 24), 0x03ff},    // largest subnormal
		{1.0 / (1 << 30), 0x0000},       // underflow
		{-1.0 / (1 << 24), 0x8001},      // negative subnormal
		{float32(1 + 1.0/2048), 0x3c00}, // halfway between 1 and next: even
	}
	for _, c := range cases {
		require.Equalf(t, c.want, Float32ToFloat16(c.in), "Float32ToFloat16(%g)", c.in)
	}
	require.True(t, Float16ToFloat32(Float32ToFloat16(float32(math.NaN()))) != Float16ToFloat32(Float32ToFloat16(float32(math.NaN()))))

	// Every non-NaN half survives the round trip through float32.
	for h := 0; h < 1<<16; h++ {
		f := Float16ToFloat32(uint16(h))
		if f != f {
			continue
		}
		require.Equalf(t, uint16(h), Float32ToFloat16(f), "round trip of 0x%04x (%g)", h, f)
	}
	// Every integer up to 2048 is exact.
	for v := -2048; v <= 2048; v++ {
		require.Equal(t, float32(v), Float16ToFloat32(Float32ToFloat16(float32(v))))
	}
}

func TestBfloat16Conversion(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-1, 0xbf80},
		{256, 0x4380},
		{257, 0x4380}, // halfway: ties to even (256)
		{258, 0x4381},
		{259, 0x4382}, // halfway: ties to even (260)
		{float32(math.Inf(1)), 0x7f80},
	}
	for _, c := range cases {
		require.Equalf(t, c.want, Float32ToBfloat16(c.in), "Float32ToBfloat16(%g)", c.in)
	}
	nan := Bfloat16ToFloat32(Float32ToBfloat16(float32(math.NaN())))
	require.True(t, nan != nan)
	for v := -256; v <= 256; v++ {
		require.Equal(t, float32(v), Bfloat16ToFloat32(Float32ToBfloat16(float32(v))))
	}
	for h := 0; h < 1<<16; h++ {
		f := Bfloat16ToFloat32(uint16(h))
		if f != f {
			continue
		}
		require.Equal(t, uint16(h), Float32ToBfloat16(f))
	}
}

func TestEncodeDecode(t *testing.T) {
	cases := []struct {
		dt   sdk.DataType
		v    int64
		want []byte
	}{
		{sdk.Int8, -2, []byte{0xfe}},
		{sdk.Uint8, 200, []byte{0xc8}},
		{sdk.Int32, -2, []byte{0xfe, 0xff, 0xff, 0xff}},
		{sdk.Uint32, 0x01020304, []byte{4, 3, 2, 1}},
		{sdk.Int64, -1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{sdk.Uint64, 258, []byte{2, 1, 0, 0, 0, 0, 0, 0}},
		{sdk.Float16, 3, []byte{0x00, 0x42}},
		{sdk.Bfloat16, -1, []byte{0x80, 0xbf}},
		{sdk.Float32, 1, []byte{0, 0, 0x80, 0x3f}},
		{sdk.Float64, 2, []byte{0, 0, 0, 0, 0, 0, 0, 0x40}},
	}
	for _, c := range cases {
		got := make([]byte, c.dt.Size())
		Encode(c.dt, c.v, got)
		require.Equalf(t, c.want, got, "Encode(%s, %d)", c.dt, c.v)
		require.Equalf(t, float64(c.v), Decode(c.dt, got), "Decode(%s)", c.dt)
		require.Equalf(t, c.v, DecodeInt(c.dt, got), "DecodeInt(%s)", c.dt)
	}
	require.Equal(t, "3.000000", Format(sdk.Float16, []byte{0x00, 0x42}))
	require.Equal(t, "-2", Format(sdk.Int32, []byte{0xfe, 0xff, 0xff, 0xff}))
	require.Equal(t, "18446744073709551615", Format(sdk.Uint64, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}))
}

func TestCompare(t *testing.T) {
	f32 := func(vs ...float32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	negZero := float32(math.Copysign(0, -1))
	nan := float32(math.NaN())
	cases := []struct {
		name      string
		dt        sdk.DataType
		got, want []byte
		wrong     int
	}{
		{"equal", sdk.Float32, f32(1, 2, 3), f32(1, 2, 3), 0},
		{"one differs", sdk.Float32, f32(1, 5, 3), f32(1, 2, 3), 1},
		{"signed zeros are equal", sdk.Float32, f32(negZero, 0), f32(0, negZero), 0},
		{"NaN is wrong", sdk.Float32, f32(nan, 1), f32(nan, 1), 1},
		{"short result", sdk.Float32, f32(1), f32(1, 2, 3), 2},
		{"int bitwise", sdk.Int32, []byte{1, 0, 0, 0, 2, 0, 0, 0}, []byte{1, 0, 0, 0, 2, 0, 0, 1}, 1},
		{"int8", sdk.Int8, []byte{1, 2, 3}, []byte{1, 9, 9}, 2},
		{"half signed zeros", sdk.Float16, []byte{0, 0x80}, []byte{0, 0}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.wrong, Compare(c.dt, c.got, c.want))
		})
	}
}

func TestAlltoAllvCountsHandComputed(t *testing.T) {
	// count*((src+2*dst+1) mod (n+1))/n with n=3, count=4:
	//   src 0 -> dst 0,1,2: 1, 4, 1
	//   src 1 -> dst 0,1,2: 2, 0, 2
	//   src 2 -> dst 0,1,2: 4, 1, 4
	sc, sd, rc, rd := AlltoAllvCounts(3, 4, 1)
	require.Equal(t, []int{2, 0, 2}, sc)
	require.Equal(t, []int{0, 4, 8}, sd)
	require.Equal(t, []int{4, 0, 1}, rc)
	require.Equal(t, []int{0, 4, 8}, rd)

	// Zero counts occur for every n >= 2, and no count exceeds the slot.
	for n := 2; n <= 16; n++ {
		zeros := 0
		for s := 0; s < n; s++ {
			for d := 0; d < n; d++ {
				c := AlltoAllvCount(n, 10, s, d)
				require.LessOrEqual(t, c, 10)
				require.GreaterOrEqual(t, c, 0)
				if c == 0 {
					zeros++
				}
			}
		}
		require.NotZerof(t, zeros, "n=%d", n)
	}
}

// decodeInts reads a whole buffer as integers.
func decodeInts(dt sdk.DataType, b []byte) []int64 {
	sz := dt.Size()
	out := make([]int64, len(b)/sz)
	for i := range out {
		out[i] = DecodeInt(dt, b[i*sz:])
	}
	return out
}

func TestExpectedHandComputed(t *testing.T) {
	const seed = 7
	in := func(c Case, r, j int) int64 { return c.Input(r, j) }

	t.Run("allreduce sum int8 3 ranks", func(t *testing.T) {
		c := Case{Coll: sdk.AllReduce, Type: sdk.Int8, Op: sdk.Sum, NRanks: 3, Count: 4, Seed: seed}
		want := make([]int64, 4)
		for i := range want {
			want[i] = int64(int8(in(c, 0, i) + in(c, 1, i) + in(c, 2, i))) // int8 wraps
		}
		for r := 0; r < 3; r++ {
			require.Equal(t, want, decodeInts(c.Type, Expected(c, r)))
		}
	})
	t.Run("reduce max float16 root 1", func(t *testing.T) {
		c := Case{Coll: sdk.Reduce, Type: sdk.Float16, Op: sdk.Max, NRanks: 3, Root: 1, Count: 5, Seed: seed}
		want := make([]int64, 5)
		for i := range want {
			want[i] = max(in(c, 0, i), in(c, 1, i), in(c, 2, i))
		}
		require.Equal(t, want, decodeInts(c.Type, Expected(c, 1)))
		require.Equal(t, make([]int64, 5), decodeInts(c.Type, Expected(c, 0)), "a non-root's buffer stays as it was")
	})
	t.Run("reducescatter prod int32", func(t *testing.T) {
		c := Case{Coll: sdk.ReduceScatter, Type: sdk.Int32, Op: sdk.Prod, NRanks: 2, Count: 3, Seed: seed}
		// rank 1 gets elements 3..5 of the reduction.
		want := []int64{in(c, 0, 3) * in(c, 1, 3), in(c, 0, 4) * in(c, 1, 4), in(c, 0, 5) * in(c, 1, 5)}
		require.Equal(t, want, decodeInts(c.Type, Expected(c, 1)))
	})
	t.Run("allgather uint8", func(t *testing.T) {
		c := Case{Coll: sdk.AllGather, Type: sdk.Uint8, NRanks: 2, Count: 2, Seed: seed}
		want := []int64{in(c, 0, 0), in(c, 0, 1), in(c, 1, 0), in(c, 1, 1)}
		require.Equal(t, want, decodeInts(c.Type, Expected(c, 0)))
		require.Equal(t, 2, c.SendCount())
		require.Equal(t, 4, c.RecvCount())
	})
	t.Run("alltoall int64", func(t *testing.T) {
		c := Case{Coll: sdk.AlltoAll, Type: sdk.Int64, NRanks: 2, Count: 2, Seed: seed}
		// rank 1 receives chunk 1 of every rank.
		want := []int64{in(c, 0, 2), in(c, 0, 3), in(c, 1, 2), in(c, 1, 3)}
		require.Equal(t, want, decodeInts(c.Type, Expected(c, 1)))
	})
	t.Run("alltoallv float32 3 ranks", func(t *testing.T) {
		c := Case{Coll: sdk.AlltoAllv, Type: sdk.Float32, NRanks: 3, Count: 4, Seed: seed}
		// rank 1 receives 4 elements from rank 0 (from rank 0's slot 1,
		// elements 4..7), none from itself, 1 from rank 2 (element 4).
		want := []int64{
			in(c, 0, 4), in(c, 0, 5), in(c, 0, 6), in(c, 0, 7),
			0, 0, 0, 0,
			in(c, 2, 4), 0, 0, 0,
		}
		require.Equal(t, want, decodeInts(c.Type, Expected(c, 1)))
	})
	t.Run("broadcast bfloat16 root 2", func(t *testing.T) {
		c := Case{Coll: sdk.Broadcast, Type: sdk.Bfloat16, NRanks: 3, Root: 2, Count: 3, Seed: seed}
		want := []int64{in(c, 2, 0), in(c, 2, 1), in(c, 2, 2)}
		for r := 0; r < 3; r++ {
			require.Equal(t, want, decodeInts(c.Type, Expected(c, r)))
		}
	})
	t.Run("gather uint32 root 0", func(t *testing.T) {
		c := Case{Coll: sdk.Gather, Type: sdk.Uint32, NRanks: 2, Root: 0, Count: 2, Seed: seed}
		require.Equal(t, []int64{in(c, 0, 0), in(c, 0, 1), in(c, 1, 0), in(c, 1, 1)}, decodeInts(c.Type, Expected(c, 0)))
		require.Equal(t, []int64{0, 0, 0, 0}, decodeInts(c.Type, Expected(c, 1)))
	})
	t.Run("scatter float64 root 1", func(t *testing.T) {
		c := Case{Coll: sdk.Scatter, Type: sdk.Float64, NRanks: 2, Root: 1, Count: 2, Seed: seed}
		require.Equal(t, []int64{in(c, 1, 0), in(c, 1, 1)}, decodeInts(c.Type, Expected(c, 0)))
		require.Equal(t, []int64{in(c, 1, 2), in(c, 1, 3)}, decodeInts(c.Type, Expected(c, 1)))
	})
	t.Run("sendrecv ring", func(t *testing.T) {
		c := Case{Coll: sdk.SendRecv, Type: sdk.Int32, NRanks: 3, Count: 2, Seed: seed}
		require.Equal(t, []int64{in(c, 2, 0), in(c, 2, 1)}, decodeInts(c.Type, Expected(c, 0)))
		require.Equal(t, []int64{in(c, 0, 0), in(c, 0, 1)}, decodeInts(c.Type, Expected(c, 1)))
	})
	t.Run("expected into keeps what is not received", func(t *testing.T) {
		c := Case{Coll: sdk.Reduce, Type: sdk.Int8, Op: sdk.Sum, NRanks: 2, Root: 0, Count: 2, Seed: seed}
		buf := []byte{5, 6}
		ExpectedInto(c, 1, buf)
		require.Equal(t, []byte{5, 6}, buf)
	})
}

// TestGoldenValues pins the generator: a change to it changes every expected
// result, which other implementations of this scheme must follow.
func TestGoldenValues(t *testing.T) {
	got := []int64{
		InputValue(sdk.Int8, sdk.Sum, 4, 0, 0, 1),
		InputValue(sdk.Int8, sdk.Sum, 4, 3, 1, 1),
		InputValue(sdk.Float32, NoOp, 2, 1, 5, 42),
		ReducedValue(sdk.Float16, sdk.Avg, 3, 2, 9),
		ReducedValue(sdk.Int32, sdk.Prod, 5, 0, 3),
	}
	require.Equal(t, goldenValues, got)
}

var goldenValues = []int64{11, -27, 13660309, -334, 1}

func allTypes() []sdk.DataType { return sdk.AllDataTypes() }

// TestReductionProperties checks, for every data type, op and rank count up
// to 33, the properties the package promises: exact partial sums (but on
// the sums' edge elements: two contributors, a sum the type must wrap or
// round), at most
// two non-1 factors, distinct max/min values, avg deviations non-zero and
// summing to zero.
func TestReductionProperties(t *testing.T) {
	const elems = 64
	for _, dt := range allTypes() {
		for _, op := range sdk.AllRedOps() {
			for n := 1; n <= 33; n++ {
				g := newGen(dt, op, n, uint64(n)*31+uint64(dt))
				B := sumBudget(dt)
				b := make([]byte, dt.Size())
				for i := 0; i < elems; i++ {
					vals := make([]int64, n)
					var abs, sum int64
					for r := range vals {
						v := g.value(r, i)
						vals[r] = v
						abs += max(v, -v)
						sum += v
						if unsigned(dt) && v < 0 {
							t.Fatalf("%s %s n=%d: negative value %d", dt, op, n, v)
						}
						// Every input is exact in the type.
						Encode(dt, v, b)
						if float64(v) != Decode(dt, b) {
							t.Fatalf("%s %s n=%d: value %d is not exact", dt, op, n, v)
						}
					}
					switch {
					case op == sdk.Sum && n >= 2 && g.elemHash(i)%8 == 7:
						// An edge element: two contributors whose sum
						// overflows the integer types, or rounds (a tie
						// one time in three) in the floating ones.
						nonzero := 0
						for _, v := range vals {
							if v != 0 {
								nonzero++
							}
						}
						require.Equal(t, 2, nonzero, "%s sum n=%d element %d: two contributors", dt, n, i)
						if dt == sdk.Int64 || dt == sdk.Uint64 {
							require.Negative(t, sum, "%s sum n=%d element %d: two positive inputs overflow int64", dt, n, i)
						} else {
							Encode(dt, sum, b)
							require.NotEqual(t, sum, int64(Decode(dt, b)), "%s sum n=%d element %d: the sum %d is at the edge of the type", dt, n, i, sum)
						}
					case op == sdk.Sum:
						require.LessOrEqualf(t, abs, B, "%s sum n=%d: sum of magnitudes", dt, n)
					case op == sdk.Prod:
						special := 0
						for _, v := range vals {
							if v != 1 {
								special++
							}
						}
						require.LessOrEqual(t, special, 2)
					case op == sdk.Max || op == sdk.Min:
						lo, hi := moveRange(dt)
						if hi-lo+1 >= int64(n) {
							seen := map[int64]bool{}
							for _, v := range vals {
								require.Falsef(t, seen[v], "%s %s n=%d: value %d twice", dt, op, n, v)
								seen[v] = true
							}
						}
					case op == sdk.Avg:
						require.LessOrEqualf(t, abs, B, "%s avg n=%d", dt, n)
						require.Zerof(t, sum%int64(n), "%s avg n=%d: sum %d", dt, n, sum)
						base := sum / int64(n)
						if n >= 2 && n*2 <= int(B) {
							for r, v := range vals {
								require.NotEqualf(t, base, v, "%s avg n=%d rank %d: zero deviation", dt, n, r)
								require.NotZerof(t, v, "%s avg n=%d rank %d: zero value", dt, n, r)
							}
						}
					}
					// The expected value encodes exactly (but at the edges).
					if op == sdk.Sum && n >= 2 && g.elemHash(i)%8 == 7 {
						continue
					}
					want := g.reduced(i)
					Encode(dt, want, b)
					require.Equalf(t, float64(want), Decode(dt, b), "%s %s n=%d: result %d", dt, op, n, want)
				}
			}
		}
	}
}

// TestWrongResultsAreSeen simulates the mistakes the inputs are designed to
// expose and checks that Compare counts them.
func TestWrongResultsAreSeen(t *testing.T) {
	const n, count = 4, 256
	for _, dt := range allTypes() {
		for _, op := range sdk.AllRedOps() {
			c := Case{Coll: sdk.AllReduce, Type: dt, Op: op, NRanks: n, Count: count, Seed: 11}
			want := Expected(c, 0)
			sz := dt.Size()

			// A reduction that skipped rank 2.
			skipped := make([]byte, len(want))
			for i := 0; i < count; i++ {
				var acc int64
				first := true
				for r := 0; r < n; r++ {
					if r == 2 {
						continue
					}
					v := c.Input(r, i)
					switch {
					case first:
						acc = v
					case op == sdk.Sum || op == sdk.Avg:
						acc += v
					case op == sdk.Prod:
						acc *= v
					case op == sdk.Max:
						acc = max(acc, v)
					case op == sdk.Min:
						acc = min(acc, v)
					}
					first = false
				}
				if op == sdk.Avg {
					acc /= n
				}
				Encode(dt, acc, skipped[i*sz:])
			}
			wrong := Compare(dt, skipped, want)
			require.Positivef(t, wrong, "%s %s: skipping a rank went unnoticed", dt, op)
			if op == sdk.Avg || op == sdk.Max || op == sdk.Min {
				// Every element depends on every rank (max/min: rank 2
				// wins a quarter of the elements).
				require.Greaterf(t, wrong, count/8, "%s %s: only %d of %d elements differ", dt, op, wrong, count)
			}

			// Rank 0's own input instead of the reduction.
			own := make([]byte, len(want))
			FillInput(c, 0, own)
			require.Positivef(t, Compare(dt, own, want), "%s %s: own input passed as the result", dt, op)
		}
	}

	// Data movement: elements delivered to the wrong slot.
	c := Case{Coll: sdk.AllGather, Type: sdk.Uint8, NRanks: n, Count: 64, Seed: 3}
	want := Expected(c, 0)
	swapped := append([]byte(nil), want...)
	copy(swapped[0:64], want[64:128])
	copy(swapped[64:128], want[0:64])
	require.Greater(t, Compare(c.Type, swapped, want), 100)
}

func TestValidate(t *testing.T) {
	ok := Case{Coll: sdk.Reduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: 2, Root: 1, Count: 1}
	require.NoError(t, ok.Validate())
	bad := []Case{
		{Coll: sdk.NumCollectives, Type: sdk.Float32, NRanks: 1},
		{Coll: sdk.AllReduce, Type: sdk.NumDataTypes, NRanks: 1},
		{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.NumRedOps, NRanks: 1},
		{Coll: sdk.AllReduce, Type: sdk.Float32, NRanks: 0},
		{Coll: sdk.Reduce, Type: sdk.Float32, NRanks: 2, Root: 2},
		{Coll: sdk.AllReduce, Type: sdk.Float32, NRanks: 1, Count: -1},
	}
	for _, c := range bad {
		require.Error(t, c.Validate(), "%+v", c)
	}
	_, err := sdk.ParseCollective("allgatherv")
	require.ErrorContains(t, err, "use one of allreduce")
	got, err := sdk.ParseCollective(" AllToAllV ")
	require.NoError(t, err)
	require.Equal(t, sdk.AlltoAllv, got)
}

// TestExpectedRange: windows of the receive buffer computed apart (with
// GOMAXPROCS 1 and 4, so serially and in parallel) stitch into exactly
// what ExpectedInto writes, for every collective; and the receivers of a
// Shared collective get the same buffer, the others nothing.
func TestExpectedRange(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const n, count = 5, 3*parallelMin + 7 // several goroutines' worth
	for _, coll := range sdk.AllCollectives() {
		c := Case{Coll: coll, Type: sdk.Float32, Op: sdk.Sum, NRanks: n, Root: 2, Count: count, Seed: 7}
		if c.Validate() != nil {
			continue // the barrier
		}
		t.Run(coll.String(), func(t *testing.T) {
			sz := c.Type.Size()
			var first []byte
			for rank := range n {
				want := Expected(c, rank)
				for _, procs := range []int{1, 4} {
					runtime.GOMAXPROCS(procs)
					got := make([]byte, len(want))
					cuts := []int{0, 1, c.RecvCount() / 3, c.RecvCount()/3 + parallelMin + 1, c.RecvCount()}
					for i := 1; i < len(cuts); i++ {
						ExpectedRange(c, rank, got[cuts[i-1]*sz:cuts[i]*sz], cuts[i-1])
					}
					require.Equal(t, want, got, "rank %d, GOMAXPROCS %d", rank, procs)
				}
				if !c.Shared() {
					continue
				}
				if !c.Receives(rank) {
					require.Equal(t, make([]byte, len(want)), want, "rank %d receives nothing", rank)
					continue
				}
				if first == nil {
					first = want
				}
				require.Equal(t, first, want, "rank %d's buffer differs from the other receivers'", rank)
			}
		})
	}
}

// TestReducedClosedForm: the closed forms of reduced equal the rank-by-rank
// fold of the inputs for every type, op and rank count (budgets exceeded
// included), so that the checker's shortcut never changes a result.
func TestReducedClosedForm(t *testing.T) {
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			for _, n := range []int{1, 2, 3, 4, 5, 7, 16, 33, 130, 300} {
				g := newGen(dt, op, n, uint64(n)*31+uint64(op))
				for i := range 600 {
					require.Equal(t, g.reducedFold(i), g.reduced(i), "%v %v n=%d element %d", dt, op, n, i)
				}
			}
		}
	}
}
