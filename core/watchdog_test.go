package core_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// examplePlugin compiles the conformance example plugin (the host CPU as a
// vendor) with flags, e.g. a negative control, and initializes it.
func examplePlugin(t *testing.T, flags ...string) *loader.Plugin {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "libflagcx-example.so")
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden",
		"-I", filepath.Join(root, "sdk", "include"), "-o", out, filepath.Join(root, "conformance", "example", "example.c"),
		"-lrt", "-pthread"}, flags...)
	msg, err := exec.Command("gcc", args...).CombinedOutput()
	require.NoError(t, err, "gcc %s:\n%s", strings.Join(args, " "), msg)
	p, err := loader.Open(out)
	require.NoError(t, err)
	require.NoError(t, p.Init(loader.InitOptions{Log: func(string, loader.LogLevel, string) {}}))
	return p
}

// startDevices brings up n ranks as goroutines, rank r on device r of p,
// with the deadline timeout (core.WithTimeout's, as FLAGCX_TIMEOUT).
func startDevices(t *testing.T, p *loader.Plugin, n int, timeout time.Duration) []*core.Comm {
	t.Helper()
	// The deadline under test bounds the rendezvous too, and each rank
	// makes and fills its shared-memory segment before it: 0.45-2.5 s a
	// rank on the 2 cores under load, which failed init within 2 s. The
	// ranks of these tests run the vendor's calls directly and use no
	// shared window: TCP links, no segment.
	t.Setenv("FLAGCX_SHM_DISABLE", "1")
	cfg := loopback(timeout)
	id, err := core.GetUniqueID(core.WithIDNetConfig(cfg))
	require.NoError(t, err)
	comms := make([]*core.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = core.InitRank(id, n, r, core.WithBackend(core.DeviceBackend(p, r)), core.WithEnv(noEnv),
				core.WithNetConfig(cfg), core.WithTimeout(timeout))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return comms
}

// TestWatchdogPluginStuckInAllReduce: a plugin whose allReduce never
// returns (EXAMPLE_BREAK_HANG, stuck in C for good) costs each rank its
// deadline, not forever: Guard returns the watchdog's error naming the
// rank, the plugin and the call, and the communicator refuses further
// calls and is destroyed without waiting for the stuck one.
func TestWatchdogPluginStuckInAllReduce(t *testing.T) {
	p := examplePlugin(t, "-DEXAMPLE_BREAK_HANG")
	const n, timeout = 2, 2 * time.Second
	comms := startDevices(t, p, n, timeout)
	errs := make(chan error, n)
	start := time.Now()
	for r, c := range comms {
		require.Equal(t, timeout, c.Watchdog().Timeout())
		go func() {
			buf, err := p.DeviceMalloc(r, 64)
			if err != nil {
				errs <- err
				return
			}
			b := core.DeviceBuffer(buf, 64)
			errs <- c.Guard(func() error { return c.AllReduce(b, b, 16, sdk.Float32, sdk.Sum, 0) })
		}()
	}
	// The rank whose watchdog fires first finds every rank there and
	// revokes the communicator: a rank whose own deadline had not passed
	// yet gets that verdict instead of waiting it out.
	timedOut := 0
	for range comms {
		select {
		case err := <-errs:
			require.Less(t, time.Since(start), 15*time.Second)
			var re *core.RevokedError
			require.ErrorAs(t, err, &re)
			require.Empty(t, re.Failed, "every rank answered")
			require.Regexp(t, `^rank [01]: example plugin: allReduce did not return within 2s; the communicator was aborted`, re.Cause)
			var te *core.TimeoutError
			if errors.As(err, &te) {
				timedOut++
				require.ErrorIs(t, err, core.ErrTimeout)
				require.Equal(t, "example", te.Plugin)
				require.Equal(t, "allReduce", te.Call)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a rank is still waiting for the stuck allReduce after 60s")
		}
	}
	require.NotZero(t, timedOut, "the detecting rank keeps its own *TimeoutError")

	for r, c := range comms {
		err := c.AllReduce(core.DeviceBuffer(1, 4), core.DeviceBuffer(1, 4), 1, sdk.Float32, sdk.Sum, 0)
		var re *core.RevokedError
		require.ErrorAs(t, err, &re)
		done := make(chan error, 1)
		go func() { done <- c.Destroy() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("rank %d: Destroy waits for the stuck call", r)
		}
	}
}

// TestWatchdogQuietOnAHealthyPlugin: collectives that return keep the
// watchdog quiet however long the communicator is used.
func TestWatchdogQuietOnAHealthyPlugin(t *testing.T) {
	p := examplePlugin(t)
	const n, timeout = 2, time.Second
	comms := startDevices(t, p, n, timeout)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := p.DeviceMalloc(r, 64)
			if err != nil {
				errs[r] = err
				return
			}
			b := core.DeviceBuffer(buf, 64)
			errs[r] = c.Guard(func() error {
				for i := 0; i < 25; i++ {
					if err := c.AllReduce(b, b, 16, sdk.Float32, sdk.Sum, 0); err != nil {
						return err
					}
					if err := c.Barrier(); err != nil {
						return err
					}
					time.Sleep(100 * time.Millisecond) // 2.5s in all: past the deadline
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.NoError(t, c.Watchdog().Err())
		require.NoError(t, c.Destroy())
	}
}

// TestSplitOfDevices: device ranks split into communicators on the same
// devices, whose collectives (the vendor library's) are exact.
func TestSplitOfDevices(t *testing.T) {
	p := examplePlugin(t)
	const n = 2
	comms := startDevices(t, p, n, 20*time.Second)
	subs := make([]*core.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subs[r], errs[r] = c.Split(0, -r)
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, n-1-r, subs[r].Rank())
		require.Equal(t, core.DeviceBackend(p, r), subs[r].Backend())
	}
	for _, c := range heterotest.Matrix(n, []int{37}, []sdk.DataType{sdk.Float32}, 5) {
		wrong := make([]int, n)
		for r, sub := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wrong[r], errs[r] = heterotest.Run(sub, heterotest.MemFor(sub), c, false, 0)
			}()
		}
		wg.Wait()
		for r := range subs {
			require.NoError(t, errs[r], "%s, rank %d", heterotest.Name(c, false), r)
			require.Zero(t, wrong[r], "%s: rank %d has wrong elements", heterotest.Name(c, false), r)
		}
	}
	for r := range comms {
		require.NoError(t, subs[r].Destroy())
		require.NoError(t, comms[r].Destroy())
	}
}
