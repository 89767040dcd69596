// Command latprobe prints the distribution of a small host AllReduce's
// time per call (mean and percentiles), where bench prints only the mean:
// a mean of a few tens of microseconds can hide a fast median and a slow
// tail, as it did on emulated hosts (docs/performance.md, "Sockets out of
// the netpoller, the every-GPU copy bound, host folds on 16 goroutines").
// Start it as bench's ranks are started by hand or by a launcher
// (FLAGCX_RANK and the rest: launch), e.g. on 2 emulated hosts:
//
//	go build -o bin/latprobe ./tools/latprobe
//	tools/hosts/hosts.sh up 2
//	tools/hosts/hosts.sh run -n 1 --out /tmp/lp -- bin/latprobe -sizes 8,512,4096
//	cat /tmp/lp/rank0.log
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/launch"
	"github.com/flagcx/flagcx-go/sdk"
)

func main() {
	sizes := flag.String("sizes", "8,512,4096", "comma-separated message sizes in bytes (multiples of 4: float32 sums)")
	iters := flag.Int("n", 5000, "timed calls per size")
	warmup := flag.Int("w", 500, "untimed calls per size first")
	flag.Parse()
	if err := run(*sizes, *iters, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "latprobe: error:", err)
		os.Exit(1)
	}
}

func run(sizeList string, iters, warmup int) error {
	if iters < 1 || warmup < 0 {
		return fmt.Errorf("-n must be at least 1 and -w at least 0 (got %d and %d)", iters, warmup)
	}
	var sizes []int
	for _, f := range strings.Split(sizeList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 4 || n%4 != 0 {
			return fmt.Errorf("bad size %q in -sizes: give byte counts that are positive multiples of 4", f)
		}
		sizes = append(sizes, n)
	}
	job, launched, err := launch.FromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	if !launched {
		return fmt.Errorf("no rank in the environment: start latprobe with a launcher (mpirun, torchrun, tools/hosts/hosts.sh run) or set FLAGCX_RANK, FLAGCX_NRANKS and FLAGCX_COMM_ID")
	}
	id, err := job.ID()
	if err != nil {
		return err
	}
	c, err := core.InitRank(id, job.NRanks, job.Rank)
	job.Joined()
	if err != nil {
		return err
	}
	defer c.Destroy()
	if job.Rank == 0 {
		fmt.Printf("# %d ranks, float32 sum, %d+%d calls per size, us per call\n", job.NRanks, warmup, iters)
	}
	times := make([]time.Duration, iters)
	for _, size := range sizes {
		send, recv := make([]byte, size), make([]byte, size)
		for i := -warmup; i < iters; i++ {
			start := time.Now()
			if err := c.AllReduce(core.HostBuffer(send), core.HostBuffer(recv), size/4, sdk.Float32, sdk.Sum, 0); err != nil {
				return err
			}
			if i >= 0 {
				times[i] = time.Since(start)
			}
		}
		if job.Rank == 0 {
			fmt.Println(summary(size, times))
		}
	}
	return nil
}

// summary is one line: the mean and the 10th, 50th, 90th and 99th
// percentiles and the maximum, in microseconds. It sorts times.
func summary(size int, times []time.Duration) string {
	var sum time.Duration
	for _, t := range times {
		sum += t
	}
	sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
	us := func(t time.Duration) float64 { return float64(t.Nanoseconds()) / 1e3 }
	q := func(f float64) float64 { return us(times[int(f*float64(len(times)-1))]) }
	return fmt.Sprintf("size %6d B  mean %7.1f  p10 %7.1f  p50 %7.1f  p90 %7.1f  p99 %7.1f  max %8.1f",
		size, us(sum)/float64(len(times)), q(.1), q(.5), q(.9), q(.99), us(times[len(times)-1]))
}
