package host

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// Test inputs are small integers chosen so that every result is exactly
// representable in every data type (float16 and bfloat16 included), so the
// expected values are computed analytically, never by a second
// implementation of the collectives.

var rankCounts = []int{1, 2, 3, 4, 5, 7, 8, 9}

// counts: a few tiny ones, one in the hundreds, and one above the small
// limit that no rank count divides evenly (64Ki+13).
var elemCounts = []int{0, 1, 2, 3, 7, 1000, 64<<10 + 13}

// Engine option sets: the defaults, and one that forces the pipelined
// algorithms with tiny chunks so that small counts cross many chunk
// boundaries, uneven and empty blocks included.
type mode struct {
	name string
	opts []Option
}

var modes = []mode{
	{"default", nil},
	{"pipelined", []Option{WithSmallLimit(0), WithChunk(48), WithWorkers(3)}},
	// Shared windows as on one host: a default-sized window, and a tiny
	// one that cuts even small counts into many steps of uneven slices.
	{"shared", []Option{withTestShm(8 << 20)}},
	{"shared-tiny", []Option{withTestShm(256), WithWorkers(3)}},
}

// runRanks runs fn for every rank of n, one goroutine each, over fresh
// LocalPeers, and returns the errors by rank. It fails the test rather than
// hang.
func runRanks(t testing.TB, n int, opts []Option, fn func(e *Engine) error, lopts ...LocalOption) []error {
	t.Helper()
	peers := NewLocalPeers(n, lopts...)
	errs := make([]error, n)
	engines := make([]*Engine, n)
	var shared *localShared
	for r := range engines {
		engines[r] = New(peers[r], opts...)
		bindShared(engines[r], &shared)
	}
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(engines[r])
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("ranks did not finish in 60s")
	}
	return errs
}

func requireNoErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// signedish: data types whose test values may be negative.
func signedish(dt sdk.DataType) bool {
	return dt == sdk.Int8 || dt == sdk.Int32 || dt == sdk.Int64 || dt.IsFloat()
}

// redVal is rank r's element i for a reduction by op: values in -5..5
// (0..10 unsigned) for sum, avg, max and min; +-1 or +-2 for prod, so a
// product over 8 ranks stays within 2^8.
func redVal(dt sdk.DataType, op sdk.RedOp, r, i int) int64 {
	if op == sdk.Prod {
		v := int64(1 + (r+i)%2)
		if signedish(dt) && (r*3+i)%4 == 1 {
			v = -v
		}
		return v
	}
	v := int64((r*7 + i*3) % 11)
	if signedish(dt) {
		v -= 5
	}
	return v
}

// put stores integer v as element i (truncating integers; floats are
// exact for the small values used).
func put(b []byte, dt sdk.DataType, i int, v int64) {
	if dt.IsFloat() {
		putF(b, dt, i, float64(v))
		return
	}
	o := i * dt.Size()
	switch dt.Size() {
	case 1:
		b[o] = byte(v)
	case 4:
		binary.NativeEndian.PutUint32(b[o:], uint32(v))
	case 8:
		binary.NativeEndian.PutUint64(b[o:], uint64(v))
	}
}

// putF rounds f to dt (float64 -> float32 -> narrow: correct rounding for
// the quotients of small integers used here) and stores it as element i.
func putF(b []byte, dt sdk.DataType, i int, f float64) {
	o := i * dt.Size()
	switch dt {
	case sdk.Float16:
		binary.NativeEndian.PutUint16(b[o:], reduce.F32ToF16(float32(f)))
	case sdk.Bfloat16:
		binary.NativeEndian.PutUint16(b[o:], reduce.F32ToBF16(float32(f)))
	case sdk.Float32:
		binary.NativeEndian.PutUint32(b[o:], math.Float32bits(float32(f)))
	case sdk.Float64:
		binary.NativeEndian.PutUint64(b[o:], math.Float64bits(f))
	}
}

// wrap reduces v to dt's width and reads it back (sign- or zero-extended).
func wrap(dt sdk.DataType, v int64) int64 {
	switch dt {
	case sdk.Int8:
		return int64(int8(v))
	case sdk.Uint8:
		return int64(uint8(v))
	case sdk.Int32:
		return int64(int32(v))
	case sdk.Uint32:
		return int64(uint32(v))
	}
	return v
}

// redInput is rank r's buffer of count elements (element i has global
// index first+i).
func redInput(dt sdk.DataType, op sdk.RedOp, r, first, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		put(b, dt, i, redVal(dt, op, r, first+i))
	}
	return b
}

// redExpect is the reduction over n ranks of elements first..first+count.
func redExpect(dt sdk.DataType, op sdk.RedOp, n, first, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		g := first + i
		if dt.IsFloat() {
			acc := float64(redVal(dt, op, 0, g))
			for r := 1; r < n; r++ {
				v := float64(redVal(dt, op, r, g))
				switch op {
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
			if op == sdk.Avg {
				acc /= float64(n)
			}
			putF(b, dt, i, acc)
			continue
		}
		acc := redVal(dt, op, 0, g)
		for r := 1; r < n; r++ {
			v := redVal(dt, op, r, g)
			switch op {
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
		if op == sdk.Avg {
			acc = wrap(dt, acc) / int64(n) // Go's truncating division of the wrapped sum
		}
		put(b, dt, i, acc)
	}
	return b
}

// pattern is rank r's data for the data-movement collectives: bytes that
// differ by rank, position and tag.
func pattern(r, tag, bytes int) []byte {
	b := make([]byte, bytes)
	for i := range b {
		b[i] = byte(r*131 + tag*71 + i*7 + 1)
	}
	return b
}

// requireElems compares buffers element by element and names the first
// difference.
func requireElems(t testing.TB, dt sdk.DataType, want, got []byte, format string, args ...any) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s: length", fmt.Sprintf(format, args...))
	size := dt.Size()
	for i := 0; i < len(want); i += size {
		if string(want[i:i+size]) != string(got[i:i+size]) {
			require.Failf(t, "wrong element", "%s: element %d of %d (%v): want % x, got % x",
				fmt.Sprintf(format, args...), i/size, len(want)/size, dt, want[i:i+size], got[i:i+size])
		}
	}
}

// garbage fills a receive buffer so that untouched parts show.
func garbage(bytes int) []byte {
	b := make([]byte, bytes)
	for i := range b {
		b[i] = 0xa5
	}
	return b
}
