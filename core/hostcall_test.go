package core

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// BenchmarkHostPlacementCall compares, in one process and one run, a small
// AllReduce through Comm on the host placement with the same call on its
// host engine communicator (what core.Comm was before it became the one
// type). The two alternate in blocks of calls on every rank, so that a
// busy machine slows both alike; the metrics are each one's median block,
// per call, and their ratio.
func BenchmarkHostPlacementCall(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		for _, size := range []int{8, 1024} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", n, size), func(b *testing.B) {
				comms := startComms(b, n, testNet(20*time.Second))
				count := size / 4
				const block = 200
				blocks := max(2, b.N/block)
				var took [2][]time.Duration // [0] the host engine's communicator, [1] Comm
				b.ResetTimer()
				errs := onAll(comms, func(c *Comm) error {
					send, recv := make([]byte, size), make([]byte, size)
					sb, rb := HostBuffer(send), HostBuffer(recv)
					call := sdk.Call{Coll: sdk.AllReduce, Count: count, DType: sdk.Float32, Op: sdk.Sum}
					for k := 0; k < blocks; k++ {
						t0 := time.Now()
						for i := 0; i < block; i++ {
							var err error
							if k%2 == 0 {
								err = c.world.Run(&call, send, recv)
							} else {
								err = c.AllReduce(sb, rb, count, sdk.Float32, sdk.Sum, 0)
							}
							if err != nil {
								return err
							}
						}
						if c.Rank() == 0 {
							took[k%2] = append(took[k%2], time.Since(t0))
						}
					}
					return nil
				})
				b.StopTimer()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				median := func(d []time.Duration) float64 {
					slices.Sort(d)
					return float64(d[len(d)/2]) / block
				}
				engine, comm := median(took[0]), median(took[1])
				b.ReportMetric(engine, "engine-ns/call")
				b.ReportMetric(comm, "comm-ns/call")
				b.ReportMetric(comm/engine, "comm/engine")
			})
		}
	}
}

// TestHostSendRecvAllocatesNothing: a Send and its Recv on the host
// placement go through the funnel (enqueue.go) as a batch of one, in the
// communicator's reused lists: the host latency path allocates nothing.
func TestHostSendRecvAllocatesNothing(t *testing.T) {
	comms := startComms(t, 2, testNet(20*time.Second))
	const runs = 200
	buf0, buf1 := HostBuffer(make([]byte, 1024)), HostBuffer(make([]byte, 1024))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"send and recv", func() error {
			errc := make(chan error, 1)
			go func() { errc <- comms[1].Recv(buf1, 256, sdk.Float32, 0, 0) }()
			if err := comms[0].Send(buf0, 256, sdk.Float32, 1, 0); err != nil {
				return err
			}
			return <-errc
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.call()) // the first call sizes the lists
			// The goroutine and channel of the test itself allocate:
			// measured apart and taken off.
			base := testing.AllocsPerRun(runs, func() {
				errc := make(chan error, 1)
				go func() { errc <- nil }()
				<-errc
			})
			var err error
			got := testing.AllocsPerRun(runs, func() {
				if e := tc.call(); e != nil && err == nil {
					err = e
				}
			})
			require.NoError(t, err)
			require.LessOrEqual(t, got-base, 0.0, "allocations per Send and Recv on the host placement")
		})
	}
}

// BenchmarkHostPlacementSendRecv: a 1 KiB Send and its Recv between two
// host ranks, through Comm.
func BenchmarkHostPlacementSendRecv(b *testing.B) {
	comms := startComms(b, 2, testNet(20*time.Second))
	buf0, buf1 := HostBuffer(make([]byte, 1024)), HostBuffer(make([]byte, 1024))
	b.ResetTimer()
	errs := onAll(comms, func(c *Comm) error {
		for i := 0; i < b.N; i++ {
			var err error
			if c.Rank() == 0 {
				err = c.Send(buf0, 256, sdk.Float32, 1, 0)
			} else {
				err = c.Recv(buf1, 256, sdk.Float32, 0, 0)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
