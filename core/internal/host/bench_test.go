package host

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
)

// benchRanks runs op b.N times on each of n ranks over LocalPeers, all
// ranks in step, and reports nccl-tests' bus bandwidth (busFactor x algbw)
// next to the algorithm bandwidth that SetBytes gives.
func benchRanks(b *testing.B, n, bytes int, busFactor float64, opts []Option, op func(e *Engine, send, recv []byte) error, sendLen, recvLen int) {
	peers := NewLocalPeers(n, WithLocalTimeout(time.Minute))
	engines := make([]*Engine, n)
	sends, recvs := make([][]byte, n), make([][]byte, n)
	for r := range engines {
		engines[r] = New(peers[r], opts...)
		sends[r], recvs[r] = make([]byte, sendLen), make([]byte, recvLen)
	}
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < b.N && errs[r] == nil; i++ {
				errs[r] = op(engines[r], sends[r], recvs[r])
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(bytes)/sec/1e9*busFactor, "busbw-GB/s")
}

var benchSizes = []int{1 << 10, 1 << 20, 64 << 20}

func sizeName(bytes int) string {
	switch {
	case bytes >= 1<<20:
		return fmt.Sprintf("%dMiB", bytes>>20)
	case bytes >= 1<<10:
		return fmt.Sprintf("%dKiB", bytes>>10)
	}
	return fmt.Sprintf("%dB", bytes)
}

// BenchmarkAllReduce: 4 ranks, float32 sum.
func BenchmarkAllReduce(b *testing.B) {
	const n = 4
	for _, bytes := range benchSizes {
		b.Run(sizeName(bytes), func(b *testing.B) {
			benchRanks(b, n, bytes, 2*float64(n-1)/n, nil, func(e *Engine, send, recv []byte) error {
				return e.AllReduce(send, recv, bytes/4, sdk.Float32, sdk.Sum)
			}, bytes, bytes)
		})
	}
}

// BenchmarkAllReduceAlgo compares the two AllReduce algorithms around the
// switch point.
func BenchmarkAllReduceAlgo(b *testing.B) {
	const n = 4
	for _, bytes := range []int{4 << 10, 64 << 10, 256 << 10} {
		for _, algo := range []struct {
			name  string
			limit int
		}{{"doubling", 1 << 30}, {"ring", 0}} {
			b.Run(sizeName(bytes)+"/"+algo.name, func(b *testing.B) {
				benchRanks(b, n, bytes, 2*float64(n-1)/n, []Option{WithSmallLimit(algo.limit)}, func(e *Engine, send, recv []byte) error {
					return e.AllReduce(send, recv, bytes/4, sdk.Float32, sdk.Sum)
				}, bytes, bytes)
			})
		}
	}
}

func BenchmarkCollectives(b *testing.B) {
	const n, bytes = 4, 16 << 20
	for _, c := range []struct {
		name             string
		bus              float64
		sendLen, recvLen int
		op               func(e *Engine, send, recv []byte) error
	}{
		{"Broadcast", 1, bytes, bytes, func(e *Engine, s, r []byte) error { return e.Broadcast(s, r, bytes/4, sdk.Float32, 0) }},
		{"Reduce", 1, bytes, bytes, func(e *Engine, s, r []byte) error { return e.Reduce(s, r, bytes/4, sdk.Float32, sdk.Sum, 0) }},
		{"AllGather", float64(n-1) / n, bytes / n, bytes, func(e *Engine, s, r []byte) error { return e.AllGather(s, r, bytes/4/n, sdk.Float32) }},
		{"ReduceScatter", float64(n-1) / n, bytes, bytes / n, func(e *Engine, s, r []byte) error {
			return e.ReduceScatter(s, r, bytes/4/n, sdk.Float32, sdk.Sum)
		}},
		{"AlltoAll", float64(n-1) / n, bytes, bytes, func(e *Engine, s, r []byte) error { return e.AlltoAll(s, r, bytes/4/n, sdk.Float32) }},
	} {
		b.Run(c.name+"/"+sizeName(bytes), func(b *testing.B) {
			benchRanks(b, n, bytes, c.bus, nil, c.op, c.sendLen, c.recvLen)
		})
	}
	b.Run("Barrier", func(b *testing.B) {
		benchRanks(b, n, 0, 0, nil, func(e *Engine, _, _ []byte) error { return e.Barrier() }, 0, 0)
	})
}
