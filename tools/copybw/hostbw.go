package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hostCopyBound prints the host memory's copy bandwidth with each goroutine
// count of workerList: what bounds the layouts with host ranks on the
// shared windows, whose host ranks copy their inputs in and the results
// out and fold pieces on their cores (internal/sched/shm.go), while the
// devices' copies use the same memory.
func hostCopyBound(n int, workerList string, iters int) error {
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	fmt.Printf("# host memory: %d MiB copied %d times by W goroutines (each byte copied is read once and written once)\n", n>>20, iters)
	fmt.Println("| goroutines | copy GB/s | memory traffic GB/s |")
	fmt.Println("|---|---|---|")
	for _, f := range strings.Split(workerList, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return fmt.Errorf("bad goroutine count %q in -host-workers: give positive integers, as 8,16,32", f)
		}
		start := time.Now()
		for range iters {
			parallelCopy(dst, src, w)
		}
		gbs := float64(n) * float64(iters) / time.Since(start).Seconds() / 1e9
		fmt.Printf("| %d | %.1f | %.1f |\n", w, gbs, 2*gbs)
	}
	return nil
}

// parallelCopy copies src to dst in w pieces at once, each a multiple of a
// cache line.
func parallelCopy(dst, src []byte, w int) {
	var wg sync.WaitGroup
	step := (len(src)/w + 63) &^ 63
	for lo := 0; lo < len(src); lo += step {
		hi := min(lo+step, len(src))
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}
