package heterotest

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// TestDirectPathAllocatesNothing: on a homogeneous device communicator a
// collective goes straight to the vendor library. That is the path whose
// latency users compare with the vendor's own (NCCL's), so it must make no
// garbage: garbage brings GC pauses into the timings.
func TestDirectPathAllocatesNothing(t *testing.T) {
	requirePlugins(t, []string{"nvidia"})
	root := repoRoot(t)
	p, err := loader.Open(filepath.Join(root, "build", "plugins", "libflagcx-nvidia.so"))
	require.NoError(t, err)
	require.NoError(t, p.Init(loader.InitOptions{Emulated: true, VendorsimDir: filepath.Join(root, "build", "vendorsim"),
		Log: func(string, loader.LogLevel, string) {}}))
	id, err := core.GetUniqueID()
	require.NoError(t, err)
	comm, err := core.InitRank(id, 1, 0, core.WithBackend(core.DeviceBackend(p, 0)))
	require.NoError(t, err)
	defer comm.Destroy()
	send, err := p.DeviceMalloc(0, 1024)
	require.NoError(t, err)
	recv, err := p.DeviceMalloc(0, 1024)
	require.NoError(t, err)
	s, err := p.StreamCreate(0)
	require.NoError(t, err)
	p.SetPointerChecks(false)
	sb, rb := core.DeviceBuffer(send, 1024), core.DeviceBuffer(recv, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		require.NoError(t, comm.AllReduce(sb, rb, 256, sdk.Float32, sdk.Sum, s))
	})
	require.Zero(t, allocs)
}
