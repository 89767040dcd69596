package host

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestRandomized runs the reductions and Broadcast with random rank
// counts, counts, types, ops, roots, chunk sizes (down to one byte), small
// limits and worker counts, checking exact results: many chunk and block
// layouts no table lists.
func TestRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	for it := 0; it < 300; it++ {
		n := 2 + rng.IntN(7)
		count := rng.IntN(3000)
		opts := []Option{WithChunk(1 + rng.IntN(600)), WithSmallLimit([]int{0, 100, 1 << 30}[rng.IntN(3)]), WithWorkers(1 + rng.IntN(3))}
		dt := sdk.AllDataTypes()[rng.IntN(10)]
		op := sdk.AllRedOps()[rng.IntN(5)]
		root := rng.IntN(n)
		kind := rng.IntN(4)
		name := fmt.Sprintf("it%d n=%d count=%d dt=%v op=%v kind=%d root=%d", it, n, count, dt, op, kind, root)
		size := dt.Size()
		got := make([][]byte, n)
		errs := runRanks(t, n, opts, func(e *Engine) error {
			r := e.Rank()
			switch kind {
			case 0:
				s := redInput(dt, op, r, 0, count)
				got[r] = s
				return e.AllReduce(s, s, count, dt, op)
			case 1:
				s := redInput(dt, op, r, 0, count)
				var rv []byte
				if r == root {
					rv = make([]byte, len(s))
					got[r] = rv
				}
				return e.Reduce(s, rv, count, dt, op, root)
			case 2:
				s := redInput(dt, op, r, 0, n*count)
				rv := make([]byte, count*size)
				got[r] = rv
				return e.ReduceScatter(s, rv, count, dt, op)
			default:
				s := pattern(root, 5, count*size)
				rv := make([]byte, count*size)
				got[r] = rv
				return e.Broadcast(s, rv, count, dt, root)
			}
		})
		requireNoErrors(t, errs)
		for r := 0; r < n; r++ {
			var want []byte
			switch kind {
			case 0:
				want = redExpect(dt, op, n, 0, count)
			case 1:
				if r != root {
					continue
				}
				want = redExpect(dt, op, n, 0, count)
			case 2:
				want = redExpect(dt, op, n, r*count, count)
			default:
				want = pattern(root, 5, count*size)
			}
			require.True(t, bytes.Equal(want, got[r]), "%s rank %d", name, r)
		}
	}
}
