//go:build linux

package main

import (
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// TestFaultEndsInTime: the faults whose survivors used to wait on a lock
// behind the device (issue 48), with the emulated library's own deadline
// far above FLAGCX_TIMEOUT, so that a survivor waiting on the library
// would hang: a device rank's cluster peer killed, the same peer stopped,
// and the host rank killed beside the device cluster. Every survivor ends
// on its own within FLAGCX_TIMEOUT + 2 s of the fault, naming the lost
// rank (runFaultCase's checks). One case runs a collective that relays
// (small, on the shared windows), one a large one.
func TestFaultEndsInTime(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		testkit.Skip(t, testkit.Need{What: "/dev/shm", InCI: true}, "%v", err)
	}
	bin, plugins := flagcxBin(t), pluginDir(t)
	const libraryDeadline = 100 * faultTimeout
	for _, c := range []faultCase{
		{coll: "allreduce", root: 1, sig: syscall.SIGKILL, victim: 0, delay: 300 * time.Millisecond},
		{coll: "allreduce", root: 1, sig: syscall.SIGSTOP, victim: 0, afterRow: true, delay: 100 * time.Millisecond},
		{coll: "broadcast", root: 0, sig: syscall.SIGKILL, victim: 2, afterRow: true, delay: 100 * time.Millisecond},
		{coll: "reduce", root: 2, sig: syscall.SIGSTOP, victim: 1, delay: 200 * time.Millisecond},
	} {
		c.emulated, c.vsimTimeout, c.endWithin = true, libraryDeadline, faultTimeout+2*time.Second
		t.Run(c.String(), func(t *testing.T) { runFaultCase(t, bin, plugins, 0, c) })
	}
}

// watchEnds polls the survivors' processes (every rank but victim) from
// now on; the function it returns stops the polling and says when each
// was first seen gone (or a zombie: it exited, its launcher has yet to
// reap it).
func watchEnds(pids map[int]int, victim int) func() map[int]time.Time {
	var mu sync.Mutex
	ends := map[int]time.Time{}
	look := func() {
		mu.Lock()
		defer mu.Unlock()
		for r, pid := range pids {
			if _, seen := ends[r]; !seen && r != victim {
				if st := procState(pid); st == "gone" || st == "zombie" {
					ends[r] = time.Now()
				}
			}
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			look()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() map[int]time.Time {
		close(stop)
		<-done
		// A rank that ended after the last tick (and the launcher, which
		// reaped it, right after) ends now, a little late at most.
		look()
		mu.Lock()
		defer mu.Unlock()
		return ends
	}
}

// requireEndsWithin checks c.endWithin (when set): every survivor ended
// that soon after the fault.
func requireEndsWithin(t *testing.T, c faultCase, faulted time.Time, ends map[int]time.Time, what func() string) {
	t.Helper()
	if c.endWithin == 0 {
		return
	}
	for r := 0; r < 3; r++ {
		if r == c.victim {
			continue
		}
		end, ok := ends[r]
		require.True(t, ok, "rank %d never ended\n%s", r, what())
		took := end.Sub(faulted)
		t.Logf("rank %d ended %v after the fault", r, took.Round(time.Millisecond))
		require.LessOrEqual(t, took, c.endWithin, "rank %d took %v to end after the fault, more than FLAGCX_TIMEOUT + 2 s\n%s", r, took, what())
	}
}
