package core_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestEnsureBindsTheDevice: ranks of one process share OS threads, and
// the current device is a thread's. A leader whose staging grows frees
// the old one, which synchronises the thread's current device. Called on
// a thread left on its cluster peer's device, it waited for the peer's
// collective, which waited for the leader: both hung until the deadline
// (a rare flake of TestPlansThatRunArePlansThatPrint). Every device call
// of a heterogeneous call now runs on this rank's device.
func TestEnsureBindsTheDevice(t *testing.T) {
	t.Setenv("FLAGCX_SHM_DISABLE", "1") // the staged schedules: the leader stages
	comms, mems, streams := startMixedNet(t, "ddh", loopback(10*time.Second))
	dev1 := mems[1].(heterotest.DeviceMem)
	for _, count := range []int{16, 1 << 20} { // the second grows the staging
		bufs := make([][2]core.Buffer, len(comms))
		for r := range comms {
			for i := range bufs[r] {
				b, err := mems[r].Alloc(4 * count)
				require.NoError(t, err)
				t.Cleanup(func() { _ = mems[r].Free(b) })
				bufs[r][i] = b
			}
		}
		errs := make([]error, len(comms))
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r == 0 {
					// The leader comes last, on a thread whose current
					// device is its peer's, which by then waits for it.
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					time.Sleep(300 * time.Millisecond)
					if errs[r] = dev1.P.SetDevice(dev1.Dev); errs[r] != nil {
						return
					}
				}
				errs[r] = comms[r].AllReduce(bufs[r][0], bufs[r][1], count, sdk.Float32, sdk.Sum, streams[r])
				if s := streams[r]; errs[r] == nil && s != 0 {
					errs[r] = dev1.P.StreamSynchronize(s)
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "count %d, rank %d", count, r)
		}
	}
}
