package loader

import (
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestRealNvidia drives the nvidia plugin on real GPUs, one rank per GPU
// (goroutines): FLAGCX_TEST_REAL_GPU=1 go test -run TestRealNvidia -v.
func TestRealNvidia(t *testing.T) {
	if os.Getenv("FLAGCX_TEST_REAL_GPU") != "1" {
		testkit.Skip(t, testkit.RealGPU, "FLAGCX_TEST_REAL_GPU is not 1")
	}
	p, err := Open(builtPlugin(t, "nvidia"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Log: func(_ string, l LogLevel, m string) { t.Log(l, m) }}))
	require.False(t, p.Emulated())
	for _, l := range p.Info().Libraries {
		t.Logf("%-10s loaded=%v %s %s %s", l.Role, l.Loaded, l.Version, l.Path, l.Error)
	}
	n, err := p.DeviceCount()
	require.NoError(t, err)
	require.Positive(t, n)
	for d := range n {
		di, err := p.DeviceInfo(d)
		require.NoError(t, err)
		t.Logf("device %+v", di)
		for e := range n {
			l, err := p.Link(d, e)
			require.NoError(t, err)
			t.Logf("  link %d-%d %s (%s)", d, e, l.Name, l.Type)
		}
	}

	id, err := p.UniqueID()
	require.NoError(t, err)
	const count = 1 << 20
	errs := make(chan error, n)
	for r := range n {
		go func() { errs <- realRank(t, p, id, r, n, count) }()
	}
	for range n {
		require.NoError(t, <-errs)
	}
}

func realRank(t *testing.T, p *Plugin, id []byte, r, n, count int) (err error) {
	fail := func(what string, e error) error { return fmt.Errorf("rank %d: %s: %w", r, what, e) }
	c, err := p.CommInitRank(r, n, id, r)
	if err != nil {
		return fail("init", err)
	}
	defer c.Destroy()
	s, err := p.StreamCreate(r)
	if err != nil {
		return fail("stream", err)
	}
	defer p.StreamDestroy(s)
	bytes := count * 4 * n
	a, err := p.DeviceMalloc(r, bytes)
	if err != nil {
		return fail("malloc", err)
	}
	defer p.DeviceFree(a)
	b, err := p.DeviceMalloc(r, bytes)
	if err != nil {
		return fail("malloc", err)
	}
	defer p.DeviceFree(b)

	if k, err := p.PointerKind(a); err != nil || k != MemDevice {
		return fail("pointerKind(device)", fmt.Errorf("%v %v", k, err))
	}
	host := make([]float32, count*n)
	if k, err := p.PointerKind(uintptr(unsafe.Pointer(&host[0]))); err != nil || k != MemHost {
		return fail("pointerKind(go memory)", fmt.Errorf("%v %v", k, err))
	}
	if err := c.AllReduce(uintptr(unsafe.Pointer(&host[0])), b, count, sdk.Float32, sdk.Sum, s); err == nil {
		return fail("host buffer", fmt.Errorf("was not refused"))
	}

	for i := range host {
		host[i] = float32(r*1000 + i%1000) // rank r, element i
	}
	check := func(what string, want func(i int) float32, elems int) error {
		if err := p.StreamSynchronize(s); err != nil {
			return fail(what+" sync", err)
		}
		out := make([]float32, elems)
		if err := p.CopyFromDevice(f32bytes(out), b); err != nil {
			return fail(what+" copy", err)
		}
		for i, v := range out {
			if v != want(i) {
				return fail(what, fmt.Errorf("element %d is %v, want %v", i, v, want(i)))
			}
		}
		return nil
	}
	if err := p.CopyToDevice(a, f32bytes(host)); err != nil {
		return fail("copy in", err)
	}
	sumRanks := float32(n * (n - 1) / 2 * 1000)
	if err := c.AllReduce(a, b, count, sdk.Float32, sdk.Sum, s); err != nil {
		return fail("allreduce", err)
	}
	if err := check("allreduce sum", func(i int) float32 { return sumRanks + float32(n*(i%1000)) }, count); err != nil {
		return err
	}
	if err := c.AllReduce(a, b, count, sdk.Float32, sdk.Avg, s); err != nil {
		return fail("allreduce avg", err)
	}
	if err := check("allreduce avg", func(i int) float32 { return (sumRanks + float32(n*(i%1000))) / float32(n) }, count); err != nil {
		return err
	}
	if err := c.AllGather(a, b, count, sdk.Float32, s); err != nil {
		return fail("allgather", err)
	}
	if err := check("allgather", func(i int) float32 { return float32((i/count)*1000 + (i%count)%1000) }, count*n); err != nil {
		return err
	}
	// alltoall: rank r receives block r of each peer q at q*count
	if err := c.AlltoAll(a, b, count, sdk.Float32, s); err != nil {
		return fail("alltoall", err)
	}
	if err := check("alltoall", func(i int) float32 { return float32((i/count)*1000 + (r*count+i%count)%1000) }, count*n); err != nil {
		return err
	}
	// gather at the last rank (grouped send/recv in the shim)
	root := n - 1
	if err := p.Memset(b, 0, bytes, s); err != nil {
		return fail("memset", err)
	}
	if err := c.Gather(a, b, count, sdk.Float32, root, s); err != nil {
		return fail("gather", err)
	}
	if r == root {
		if err := check("gather", func(i int) float32 { return float32((i/count)*1000 + (i%count)%1000) }, count*n); err != nil {
			return err
		}
	}
	// device timing of one allreduce
	e0, _ := p.EventCreate(r)
	e1, _ := p.EventCreate(r)
	defer p.EventDestroy(e0)
	defer p.EventDestroy(e1)
	_ = p.EventRecord(e0, s)
	_ = c.AllReduce(a, b, count, sdk.Float32, sdk.Sum, s)
	_ = p.EventRecord(e1, s)
	if err := p.EventSynchronize(e1); err != nil {
		return fail("event sync", err)
	}
	d, err := p.EventElapsed(e0, e1)
	if err != nil {
		return fail("elapsed", err)
	}
	t.Logf("rank %d: allreduce of %d floats took %v on the device", r, count, d.Round(time.Microsecond))
	return nil
}
