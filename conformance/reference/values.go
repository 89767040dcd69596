package reference

import (
	"math"

	"github.com/flagcx/flagcx-go/sdk"
)

// NoOp stands for "no reduction" in InputValue: the inputs of collectives
// that only move data (broadcast, allgather, alltoall, ...). Their values
// spread over the whole exactly-representable range of the data type, so an
// element delivered to the wrong place almost always differs.
const NoOp sdk.RedOp = -1

// sumBudget bounds the sum of |value| over all ranks of one element of a
// reduction, per data type: every partial sum an implementation may form, in
// any order and in the data type itself, stays an exact integer. int8 keeps
// well inside +-127, bfloat16 (8 significant bits) inside 256, float16 inside
// 2048; the wide types get room for more varied values.
func sumBudget(dt sdk.DataType) int64 {
	switch dt {
	case sdk.Int8:
		return 120
	case sdk.Uint8:
		return 250
	case sdk.Bfloat16:
		return 256
	case sdk.Float16:
		return 2048
	case sdk.Int32, sdk.Uint32, sdk.Float32:
		return 1 << 20
	default:
		return 1 << 40
	}
}

// moveRange is the range of values for data movement: every value in it is
// exact in the data type.
func moveRange(dt sdk.DataType) (lo, hi int64) {
	switch dt {
	case sdk.Int8:
		return math.MinInt8, math.MaxInt8
	case sdk.Uint8:
		return 0, math.MaxUint8
	case sdk.Int32:
		return math.MinInt32, math.MaxInt32
	case sdk.Uint32:
		return 0, math.MaxUint32
	case sdk.Int64:
		return math.MinInt64, math.MaxInt64
	case sdk.Uint64:
		return 0, math.MaxInt64
	case sdk.Float16:
		return -2048, 2048
	case sdk.Bfloat16:
		return -256, 256
	case sdk.Float32:
		return -1 << 24, 1 << 24
	default: // Float64
		return -1 << 53, 1 << 53
	}
}

func unsigned(dt sdk.DataType) bool {
	return dt == sdk.Uint8 || dt == sdk.Uint32 || dt == sdk.Uint64
}

// mix is splitmix64's finalizer: a cheap, well-spread 64-bit hash.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

const golden = 0x9e3779b97f4a7c15

// gen computes the input values of one (data type, op, rank count, seed).
type gen struct {
	dt   sdk.DataType
	op   sdk.RedOp
	n    int
	rk   []uint64 // per-rank keys
	ek   uint64   // per-element key (rank independent)
	ek2  uint64
	uns  bool
	lo   int64 // movement / max-min range
	hi   int64
	sumM int64 // sum: per-rank bound; 0 when n exceeds the budget
	sumB int64 // sum: budget (ranks below it contribute when sumM == 0)
	// avg: values are base(i) + dev(rank, i), devs summing to zero.
	avgLo, avgHi int64
	avgSign      bool // base takes a random sign
	avgDmax      int64
	avgDevs      bool
}

func newGen(dt sdk.DataType, op sdk.RedOp, nranks int, seed uint64) *gen {
	g := &gen{dt: dt, op: op, n: nranks, uns: unsigned(dt)}
	key := mix(seed ^ mix(uint64(uint32(dt))<<40^uint64(uint32(op+1))<<20^uint64(nranks)))
	g.rk = make([]uint64, nranks)
	for r := range g.rk {
		g.rk[r] = mix(key ^ (uint64(r)+1)*golden)
	}
	g.ek = mix(key ^ 0x5ca1ab1e)
	g.ek2 = mix(key ^ 0xdeadbeef)
	n := int64(nranks)
	B := sumBudget(dt)
	switch op {
	case sdk.Sum:
		g.sumM = B / n
		g.sumB = B
	case sdk.Max, sdk.Min:
		g.lo, g.hi = moveRange(dt)
		g.lo = max(g.lo, -1<<30)
		g.hi = min(g.hi, 1<<30)
	case sdk.Avg:
		g.setupAvg(B, n)
	case sdk.Prod:
	default: // NoOp
		g.lo, g.hi = moveRange(dt)
	}
	return g
}

// setupAvg picks the base range and deviation bound so that sum_r |value|
// stays within the budget B while, with at least two ranks, every rank's
// deviation and every rank's value are non-zero: a result that left a rank
// out, whether divided by n or by n-1, then differs from the base.
func (g *gen) setupAvg(B, n int64) {
	m := B / n // per-rank bound on |value|
	if n == 1 {
		g.avgLo, g.avgHi, g.avgSign = 1, max(1, m), !g.uns
		return
	}
	dmax := max(1, m/4)
	if n%2 == 1 {
		dmax = max(2, dmax) // the odd triple (a, b, -(a+b)) needs a, b >= 1
	}
	g.avgDmax = dmax
	g.avgDevs = true
	switch {
	case m >= 2*dmax+1:
		// |base| in [dmax+1, m-dmax]: base+dev never 0, |value| <= m.
		g.avgLo, g.avgHi, g.avgSign = dmax+1, m-dmax, !g.uns
	case !g.uns && n*dmax <= B:
		g.avgLo, g.avgHi = 0, 0 // value = dev, never 0
	case g.uns && n*(2*dmax+1) <= B:
		g.avgLo, g.avgHi = dmax+1, dmax+1
	default:
		// More ranks than the data type can tell apart: every rank sends
		// the same value, which still checks that the average is formed.
		g.avgDevs = false
		g.avgLo, g.avgHi, g.avgSign = 0, m, !g.uns
	}
}

// inRange maps h uniformly (enough) onto [lo, hi].
func inRange(h uint64, lo, hi int64) int64 {
	w := uint64(hi) - uint64(lo) + 1
	if w == 0 {
		return int64(h)
	}
	return lo + int64(h%w)
}

func (g *gen) elemHash(i int) uint64 { return mix(g.ek + uint64(i)*golden) }

// value is rank's input at element index i.
func (g *gen) value(rank, i int) int64 {
	switch g.op {
	case sdk.Sum:
		if g.n >= 2 && g.elemHash(i)%8 == 7 {
			return g.edgeSum(rank, i)
		}
		h := mix(g.rk[rank] + uint64(i)*golden)
		if g.sumM >= 1 {
			if g.uns {
				return int64(h % uint64(g.sumM+1))
			}
			return int64(h%uint64(2*g.sumM+1)) - g.sumM
		}
		// More ranks than the budget: the first B ranks contribute 0 or +-1.
		if int64(rank) >= g.sumB {
			return 0
		}
		if g.uns {
			return int64(h % 2)
		}
		return int64(h%3) - 1
	case sdk.Prod:
		// At most two ranks (a and b) contribute 2 or -1 (2 or 3 for
		// unsigned types); every other rank contributes 1.
		e := g.elemHash(i)
		a := int(e % uint64(g.n))
		b := int((e >> 20) % uint64(g.n))
		pick := func(bit uint64) int64 {
			if g.uns {
				return 2 + int64(bit&1)
			}
			if bit&1 == 0 {
				return 2
			}
			return -1
		}
		switch rank {
		case a:
			return pick(e >> 40)
		case b:
			return pick(e >> 41)
		}
		return 1
	case sdk.Max, sdk.Min:
		// Distinct values per rank (consecutive integers from a random
		// base), rotated per element so that the winning rank varies.
		e := g.elemHash(i)
		p := int64((rank + int(e%uint64(g.n))) % g.n)
		w := g.hi - g.lo + 1
		if w < int64(g.n) {
			return g.lo + p%w
		}
		return inRange(e>>16, g.lo, g.hi-int64(g.n)+1) + p
	case sdk.Avg:
		e := g.elemHash(i)
		base := inRange(e, g.avgLo, g.avgHi)
		if g.avgSign && e>>63 == 1 {
			base = -base
		}
		if !g.avgDevs {
			return base
		}
		return base + g.avgDev(rank, i)
	default:
		return inRange(mix(g.rk[rank]+uint64(i)*golden), g.lo, g.hi)
	}
}

// edgeSum is rank's input at an element (one in eight) whose sum is the
// edge of the data type: exactly two ranks contribute, every other rank
// contributes 0, so the result takes one addition in any order. Integers
// overflow and must wrap (two's complement, as NCCL's do), not saturate;
// floating types get a sum between two representable values, a tie one
// time in three, which must round to nearest even (not toward zero).
// Every input is an integer the type holds exactly.
func (g *gen) edgeSum(rank, i int) int64 {
	e := g.elemHash(i)
	a := int(e % uint64(g.n))
	b := (a + 1 + int((e>>8)%uint64(g.n-1))) % g.n
	h := mix(g.ek2 + uint64(i)*golden)
	var x, y int64
	switch g.dt {
	case sdk.Int8:
		x, y = inRange(h, 64, math.MaxInt8), inRange(h>>20, 64, math.MaxInt8)
	case sdk.Uint8:
		x, y = inRange(h, 128, math.MaxUint8), inRange(h>>20, 128, math.MaxUint8)
	case sdk.Int32:
		x, y = inRange(h, 1<<30, math.MaxInt32), inRange(h>>20, 1<<30, math.MaxInt32)
	case sdk.Uint32:
		x, y = inRange(h, 1<<31, math.MaxUint32), inRange(h>>20, 1<<31, math.MaxUint32)
	case sdk.Int64, sdk.Uint64:
		x, y = inRange(h, 1<<62, math.MaxInt64), inRange(h>>2, 1<<62, math.MaxInt64)
	default:
		// x = 2^(p+1) + 4k is exact (the spacing there is 4); y in 1..3
		// makes x+y a tie (y = 2) or not.
		p := map[sdk.DataType]uint{sdk.Bfloat16: 8, sdk.Float16: 11, sdk.Float32: 24, sdk.Float64: 53}[g.dt]
		x = 1<<(p+1) + 4*inRange(h, 0, 1<<(p-1)-1)
		y = 1 + int64((h>>60)%3)
	}
	switch rank {
	case a:
		return x
	case b:
		return y
	}
	return 0
}

// avgDev is rank's deviation from the base at element i. Ranks pair up
// (2j, 2j+1) with +k, -k; with an odd count the last three ranks take
// a, b, -(a+b). Every deviation is non-zero and they sum to zero.
func (g *gen) avgDev(rank, i int) int64 {
	n := g.n
	pairEnd := n
	if n%2 == 1 {
		pairEnd = n - 3
	}
	if rank < pairEnd {
		j := rank / 2
		h := mix(g.ek2 + uint64(i)*golden + uint64(j)*0x632be59bd9b4e019)
		k := 1 + int64(h%uint64(g.avgDmax))
		if h>>63 == 1 {
			k = -k
		}
		if rank%2 == 1 {
			k = -k
		}
		return k
	}
	h := mix(g.ek2 + uint64(i)*golden + 0x8cb92ba72f3d8dd7)
	half := uint64(g.avgDmax / 2)
	a := 1 + int64(h%half)
	b := 1 + int64((h>>24)%half)
	s := int64(1)
	if h>>63 == 1 {
		s = -1
	}
	switch rank - pairEnd {
	case 0:
		return s * a
	case 1:
		return s * b
	}
	return -s * (a + b)
}

// reduced is the exact result of op over every rank's value at element i:
// in closed form where the inputs' construction gives one (prod: at most
// two ranks differ from 1; max, min: consecutive values from a base; avg:
// the deviations cancel), else summed over the ranks. A checker computes
// it for every element it receives, so this is the reference's hot path;
// TestReducedClosedForm holds it to the rank-by-rank fold (reducedFold).
func (g *gen) reduced(i int) int64 {
	switch g.op {
	case sdk.Sum:
		return g.sum(i)
	case sdk.Prod:
		e := g.elemHash(i)
		a, b := int(e%uint64(g.n)), int((e>>20)%uint64(g.n))
		if a == b {
			return g.value(a, i)
		}
		return g.value(a, i) * g.value(b, i)
	case sdk.Max, sdk.Min:
		// The ranks hold lo+p%w (w < n) or base+p for p = 0..n-1.
		e := g.elemHash(i)
		w := g.hi - g.lo + 1
		base, top := inRange(e>>16, g.lo, g.hi-int64(g.n)+1), int64(g.n-1)
		if w < int64(g.n) {
			base, top = g.lo, w-1
		}
		if g.op == sdk.Max {
			return base + top
		}
		return base
	case sdk.Avg:
		// Every value is base + deviation, the deviations summing to 0
		// (or every value is the base).
		e := g.elemHash(i)
		base := inRange(e, g.avgLo, g.avgHi)
		if g.avgSign && e>>63 == 1 {
			base = -base
		}
		return base
	}
	return g.reducedFold(i)
}

// sum is the sum of every rank's value at element i: value's rule for sums
// with the element's hash computed once, not once per rank.
func (g *gen) sum(i int) int64 {
	if g.n >= 2 && g.elemHash(i)%8 == 7 {
		return g.reducedFold(i) // two ranks contribute
	}
	var acc int64
	for r := range g.n {
		h := mix(g.rk[r] + uint64(i)*golden)
		switch {
		case g.sumM >= 1 && g.uns:
			acc += int64(h % uint64(g.sumM+1))
		case g.sumM >= 1:
			acc += int64(h%uint64(2*g.sumM+1)) - g.sumM
		case int64(r) >= g.sumB:
		case g.uns:
			acc += int64(h % 2)
		default:
			acc += int64(h%3) - 1
		}
	}
	return acc
}

// reducedFold folds op over every rank's value at element i, rank by rank.
func (g *gen) reducedFold(i int) int64 {
	acc := g.value(0, i)
	for r := 1; r < g.n; r++ {
		v := g.value(r, i)
		switch g.op {
		case sdk.Sum, sdk.Avg:
			acc += v
		case sdk.Prod:
			acc *= v
		case sdk.Max:
			acc = max(acc, v)
		case sdk.Min:
			acc = min(acc, v)
		}
	}
	if g.op == sdk.Avg {
		acc /= int64(g.n) // exact by construction
	}
	return acc
}

// InputValue is rank's input at element index i for a collective with
// reduction op (NoOp for data movement) over nranks ranks of data type dt:
// always an integer that dt represents exactly, chosen so that the reduced
// result is exact too (see the package documentation). The same arguments
// always give the same value.
func InputValue(dt sdk.DataType, op sdk.RedOp, nranks, rank, i int, seed uint64) int64 {
	return newGen(dt, op, nranks, seed).value(rank, i)
}

// ReducedValue is the exact result of reducing InputValue over all ranks at
// element index i.
func ReducedValue(dt sdk.DataType, op sdk.RedOp, nranks, i int, seed uint64) int64 {
	return newGen(dt, op, nranks, seed).reduced(i)
}
