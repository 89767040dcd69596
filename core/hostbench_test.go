package core_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// BenchmarkHostAllReduce is the latency of a small AllReduce on the host
// placement, ranks as goroutines of one process (over shared memory; one
// rank shows the cost of the call itself): the path host-only users take,
// which must cost what the host engine costs (docs/performance.md has the
// figures before and after core.Comm became the one communicator type).
func BenchmarkHostAllReduce(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		for _, size := range []int{8, 1024} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", n, size), func(b *testing.B) {
				cfg := loopback(20 * time.Second)
				id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
				if err != nil {
					b.Fatal(err)
				}
				comms := make([]*core.Comm, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r := range comms {
					wg.Add(1)
					go func(r int) {
						defer wg.Done()
						comms[r], errs[r] = core.InitRank(id, n, r, core.WithNetConfig(cfg), core.WithEnv(noEnv))
					}(r)
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				defer func() {
					for _, c := range comms {
						c.Destroy()
					}
				}()
				count := size / 4
				iters := b.N
				for r := 1; r < n; r++ {
					wg.Add(1)
					go func(c *core.Comm) {
						defer wg.Done()
						send, recv := core.HostBuffer(make([]byte, size)), core.HostBuffer(make([]byte, size))
						for i := 0; i < iters; i++ {
							if err := c.AllReduce(send, recv, count, sdk.Float32, sdk.Sum, 0); err != nil {
								errs[c.Rank()] = err
								return
							}
						}
					}(comms[r])
				}
				send, recv := core.HostBuffer(make([]byte, size)), core.HostBuffer(make([]byte, size))
				b.ResetTimer()
				for i := 0; i < iters; i++ {
					if err := comms[0].AllReduce(send, recv, count, sdk.Float32, sdk.Sum, 0); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkHostAllReduceTCP is 2 host ranks' AllReduce over TCP sockets
// on loopback (FLAGCX_SHM_DISABLE=1, the default sockets per peer), the
// path ranks on different hosts take; busbw as nccl-tests reports it.
func BenchmarkHostAllReduceTCP(b *testing.B) {
	b.Setenv("FLAGCX_SHM_DISABLE", "1")
	for _, size := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			cfg := loopback(20 * time.Second)
			cfg.Streams = hostnet.DefaultStreams
			comms := startComms(b, 2, cfg)
			defer func() {
				for _, c := range comms {
					c.Destroy()
				}
			}()
			benchAllReduce(b, comms, size)
			b.ReportMetric(float64(size)/b.Elapsed().Seconds()*float64(b.N)/1e9, "busbw-GB/s")
		})
	}
}

func startComms(b *testing.B, n int, cfg hostnet.Config) []*core.Comm {
	id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	comms := make([]*core.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = core.InitRank(id, n, r, core.WithNetConfig(cfg), core.WithEnv(noEnv))
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return comms
}

// benchAllReduce runs b.N float32 sums of size bytes on every rank, timed
// on rank 0.
func benchAllReduce(b *testing.B, comms []*core.Comm, size int) {
	count, iters := size/4, b.N
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for _, c := range comms[1:] {
		wg.Add(1)
		go func(c *core.Comm) {
			defer wg.Done()
			send, recv := core.HostBuffer(make([]byte, size)), core.HostBuffer(make([]byte, size))
			for i := 0; i < iters; i++ {
				if err := c.AllReduce(send, recv, count, sdk.Float32, sdk.Sum, 0); err != nil {
					errs[c.Rank()] = err
					return
				}
			}
		}(c)
	}
	send, recv := core.HostBuffer(make([]byte, size)), core.HostBuffer(make([]byte, size))
	b.ResetTimer()
	for i := 0; i < iters; i++ {
		if err := comms[0].AllReduce(send, recv, count, sdk.Float32, sdk.Sum, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
