package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
)

// BenchmarkHostPlacementCall compares, in one process and one run, a small
// AllReduce through Comm on the host placement with the same call on its
// host engine communicator (what core.Comm was before it became the one
// type): the difference is what the unified type costs a host call.
func BenchmarkHostPlacementCall(b *testing.B) {
	for _, n := range []int{1, 2} {
		for _, size := range []int{8, 1024} {
			comms := startComms(b, n, testNet(20*time.Second))
			count := size / 4
			calls := map[string]func(c *Comm, send, recv []byte) error{
				"engine": func(c *Comm, send, recv []byte) error {
					return c.world.AllReduce(send, recv, count, sdk.Float32, sdk.Sum)
				},
				"comm": func(c *Comm, send, recv []byte) error {
					return c.AllReduce(HostBuffer(send), HostBuffer(recv), count, sdk.Float32, sdk.Sum, 0)
				},
			}
			for _, path := range []string{"engine", "comm"} {
				call := calls[path]
				b.Run(fmt.Sprintf("ranks=%d/bytes=%d/%s", n, size, path), func(b *testing.B) {
					iters := b.N
					errs := onAll(comms, func(c *Comm) error {
						send, recv := make([]byte, size), make([]byte, size)
						if c.Rank() == 0 {
							b.ResetTimer()
						}
						for i := 0; i < iters; i++ {
							if err := call(c, send, recv); err != nil {
								return err
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
				})
			}
		}
	}
}
