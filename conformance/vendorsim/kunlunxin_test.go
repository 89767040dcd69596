package vendorsim

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// Tests of the emulated Kunlunxin libraries (kunlunxin/xpurt.c, bkcl.c)
// through their own API, as the kunlunxin plugin calls it.
//
// The BKCL numbers below are the EMULATOR'S MODEL (❌ unverified,
// docs/vendor-facts.md#kunlunxin-bkcl), the same model as kunlunxin/bkcl.c; the XPU values
// are from xpu/runtime.h (H).
const (
	klxBKCLSuccess       = 0
	klxBKCLInvalidArg    = 1
	klxBKCLRuntimeError  = 2
	klxBKCLSystemError   = 3
	klxBKCLUniqueIDBytes = 512

	klxXPUDeviceToHost   = 0
	klxXPUHostToDevice   = 1
	klxXPUDeviceToDevice = 2
	klxXPUMemMain        = 0
	klxXPUMemL3          = 1

	klxXPUErrInvalidDevice = 701
	klxXPUErrInvalidParam  = 707
	klxXPUErrNoSupport     = 712
)

// klxBKCLTypes: BKCL's (modelled) type values -> the NCCL-numbered types
// of values_test.go. BKCL has no int8, uint32, uint64.
var klxBKCLTypes = []struct{ bkcl, dt int }{
	{0, dtFloat32}, {1, dtFloat16}, {2, dtInt32}, {3, dtInt64}, {4, dtUint8}, {5, dtFloat64}, {6, dtBfloat16},
}

// BKCL ops: add, product, max, min, avg in the model's order, as NCCL's.
var klxBKCLOps = []int{opSum, opProd, opMax, opMin, opAvg}

type klxXPUAPI struct {
	DeviceCount     func(*int32) int32
	SetDevice       func(int32) int32
	CurrentDevice   func(*int32) int32
	DeviceGetAttr   func(*uint64, int32, int32) int32
	Malloc          func(*unsafe.Pointer, uint64, int32) int32
	Free            func(unsafe.Pointer) int32
	HostAlloc       func(*unsafe.Pointer, uint64, uint32) int32
	HostFree        func(unsafe.Pointer) int32
	Memcpy          func(dst, src unsafe.Pointer, n uint64, kind int32) int32
	MemcpyAsync     func(dst, src unsafe.Pointer, n uint64, kind int32, stream uintptr) int32
	StreamCreate    func(*uintptr) int32
	StreamDestroy   func(uintptr) int32
	Wait            func(uintptr) int32
	StreamWaitEvent func(stream, event uintptr) int32
	EventCreate     func(*uintptr) int32
	EventRecord     func(event, stream uintptr) int32
	EventWait       func(uintptr) int32
	EventDestroy    func(uintptr) int32
}

type klxBKCLAPI struct {
	GetUniqueID    func(*byte) int32
	InitRank       func(ctx *uintptr, rank, nranks int32, id *byte) int32
	DestroyContext func(uintptr) int32
	CommAbort      func(uintptr) int32
	CommCount      func(uintptr, *int32) int32
	CommUserRank   func(uintptr, *int32) int32
	AllReduce      func(ctx uintptr, send, recv unsafe.Pointer, count uintptr, dt, op int32, stream uintptr) int32
	Reduce         func(ctx uintptr, send, recv unsafe.Pointer, count uintptr, dt, op, root int32, stream uintptr) int32
	Broadcast      func(ctx uintptr, send, recv unsafe.Pointer, count uintptr, dt, root int32, stream uintptr) int32
	AllGather      func(ctx uintptr, send unsafe.Pointer, count uintptr, recv unsafe.Pointer, dt int32, stream uintptr) int32
	ReduceScatter  func(ctx uintptr, send, recv unsafe.Pointer, count uintptr, dt, op int32, stream uintptr) int32
	AllToAll       func(ctx uintptr, send unsafe.Pointer, count uintptr, recv unsafe.Pointer, dt int32, stream uintptr) int32
	AllToAllV      func(ctx uintptr, send, sc, sd unsafe.Pointer, stype int32, recv, rc, rd unsafe.Pointer, rtype int32, stream uintptr) int32
	Send           func(ctx uintptr, buf unsafe.Pointer, count uintptr, peer, dt int32, stream uintptr) int32
	Recv           func(ctx uintptr, buf unsafe.Pointer, count uintptr, peer, dt int32, stream uintptr) int32
	GroupStart     func() int32
	GroupEnd       func() int32
}

type klxEmu struct {
	dir        string // build/vendorsim/kunlunxin
	hXPU, hBK  uintptr
	xpu        klxXPUAPI
	bkcl       klxBKCLAPI
	xpurt, lib string
}

var (
	klxOnce sync.Once
	klxE    *klxEmu
	klxErr  error
)

func klxLoad(root string) (*klxEmu, error) {
	e := &klxEmu{dir: filepath.Join(root, "build", "vendorsim", "kunlunxin")}
	e.xpurt, e.lib = filepath.Join(e.dir, "libxpurt.so.1"), filepath.Join(e.dir, "libbkcl.so")
	for _, p := range []string{e.xpurt, e.lib, filepath.Join(e.dir, "cxx", "libbkcl.so")} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: %s is missing", ErrNotBuilt, p)
		}
	}
	var err error
	if e.hXPU, err = purego.Dlopen(e.xpurt, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	if e.hBK, err = purego.Dlopen(e.lib, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	x, b := &e.xpu, &e.bkcl
	for _, s := range []struct {
		h    uintptr
		name string
		f    any
	}{
		{e.hXPU, "xpu_device_count", &x.DeviceCount}, {e.hXPU, "xpu_set_device", &x.SetDevice},
		{e.hXPU, "xpu_current_device", &x.CurrentDevice}, {e.hXPU, "xpu_device_get_attr", &x.DeviceGetAttr},
		{e.hXPU, "xpu_malloc", &x.Malloc}, {e.hXPU, "xpu_free", &x.Free}, {e.hXPU, "xpu_host_alloc", &x.HostAlloc},
		{e.hXPU, "xpu_host_free", &x.HostFree}, {e.hXPU, "xpu_memcpy", &x.Memcpy},
		{e.hXPU, "xpu_memcpy_async", &x.MemcpyAsync}, {e.hXPU, "xpu_stream_create", &x.StreamCreate},
		{e.hXPU, "xpu_stream_destroy", &x.StreamDestroy}, {e.hXPU, "xpu_wait", &x.Wait},
		{e.hXPU, "xpu_stream_wait_event", &x.StreamWaitEvent}, {e.hXPU, "xpu_event_create", &x.EventCreate},
		{e.hXPU, "xpu_event_record", &x.EventRecord}, {e.hXPU, "xpu_event_wait", &x.EventWait},
		{e.hXPU, "xpu_event_destroy", &x.EventDestroy},

		{e.hBK, "bkcl_get_unique_id", &b.GetUniqueID}, {e.hBK, "bkcl_init_rank", &b.InitRank},
		{e.hBK, "bkcl_destroy_context", &b.DestroyContext}, {e.hBK, "bkcl_comm_abort", &b.CommAbort},
		{e.hBK, "bkcl_comm_count", &b.CommCount}, {e.hBK, "bkcl_comm_user_rank", &b.CommUserRank},
		{e.hBK, "bkcl_all_reduce", &b.AllReduce}, {e.hBK, "bkcl_reduce", &b.Reduce},
		{e.hBK, "bkcl_broadcast", &b.Broadcast}, {e.hBK, "bkcl_all_gather", &b.AllGather},
		{e.hBK, "bkcl_reduce_scatter", &b.ReduceScatter}, {e.hBK, "bkcl_all_to_all", &b.AllToAll},
		{e.hBK, "bkcl_all_to_all_v", &b.AllToAllV}, {e.hBK, "bkcl_send", &b.Send}, {e.hBK, "bkcl_recv", &b.Recv},
		{e.hBK, "bkcl_group_start", &b.GroupStart}, {e.hBK, "bkcl_group_end", &b.GroupEnd},
	} {
		if err := bind(s.h, s.name, s.f); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// klxEmulators loads the built libraries once per process and pins the
// test to its OS thread (the current XPU and BKCL groups are per thread).
func klxEmulators(t *testing.T) *klxEmu {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	klxOnce.Do(func() {
		root, err := RepoRoot(".")
		if err == nil {
			klxE, err = klxLoad(root)
		}
		klxErr = err
	})
	requireBuilt(t, klxErr)
	return klxE
}

func (e *klxEmu) malloc(t require.TestingT, n int) devBuf {
	var p unsafe.Pointer
	require.Equal(t, int32(0), e.xpu.Malloc(&p, uint64(n), klxXPUMemMain), "xpu_malloc(%d)", n)
	return devBuf{p, n}
}

func (e *klxEmu) upload(t require.TestingT, data []byte) devBuf {
	b := e.malloc(t, len(data))
	if len(data) > 0 {
		require.Equal(t, int32(0), e.xpu.Memcpy(b.p, unsafe.Pointer(&data[0]), uint64(len(data)), klxXPUHostToDevice))
	}
	return b
}

func (e *klxEmu) download(t require.TestingT, b devBuf) []byte {
	out := make([]byte, b.n)
	if b.n > 0 {
		require.Equal(t, int32(0), e.xpu.Memcpy(unsafe.Pointer(&out[0]), b.p, uint64(b.n), klxXPUDeviceToHost))
	}
	return out
}

// TestKunlunxinEmulatorsExportWhatBKCLHas: beyond the exact exports that
// TestEmulatorLibraries (vendors_test.go) compares with the vendor table,
// what the Kunlunxin emulators must never grow: the C++ build has no C
// names, BKCL has no gather or scatter, the XPU runtime no event timing or
// queries (and nothing of CUDA's).
func TestKunlunxinEmulatorsExportWhatBKCLHas(t *testing.T) {
	v := testkit.Lookup(t, "kunlunxin")
	exports := map[string][]string{}
	for _, e := range v.Emulators() {
		exports[e.File] = e.Exports
	}
	require.Contains(t, exports["libbkcl.so"], "bkcl_all_gather")
	require.NotContains(t, exports["cxx/libbkcl.so"], "bkcl_all_gather", "the C++ build has no C names")
	require.Contains(t, exports["cxx/libbkcl.so"], "_Z15bkcl_all_gatherP11BKCLContextPKvmPv12BKCLDataTypeS3_")
	// no gather/scatter: BKCL has none, so the emulator has none
	require.NotContains(t, exports["libbkcl.so"], "bkcl_gather")
	require.NotContains(t, exports["libbkcl.so"], "bkcl_scatter")
	// no event timing or queries in the XPU runtime
	require.Contains(t, exports["libxpurt.so.1"], "xpu_event_wait")
	for _, s := range []string{"xpu_event_elapsed_time", "xpu_event_query", "xpu_stream_query", "cudaMemcpy"} {
		require.NotContains(t, exports["libxpurt.so.1"], s)
	}
}

func TestKunlunxinXPUDevicesAndMemory(t *testing.T) {
	x := klxEmulators(t).xpu
	var n, cur int32
	require.Equal(t, int32(0), x.DeviceCount(&n))
	require.Equal(t, int32(expectedDevices()), n)
	require.Equal(t, int32(-klxXPUErrInvalidDevice), x.SetDevice(n), "errors come back negated")
	require.Equal(t, int32(0), x.SetDevice(3))
	require.Equal(t, int32(0), x.CurrentDevice(&cur))
	require.Equal(t, int32(3), cur)
	var pci uint64
	require.Equal(t, int32(0), x.DeviceGetAttr(&pci, 0, 3))
	require.Equal(t, uint64(0x13<<8), pci, "XPUATTR_PCI_ADDRESS of 0000:13:00.0: bus in bits 15:8")
	require.Equal(t, int32(-klxXPUErrNoSupport), x.DeviceGetAttr(&pci, 9, 3))
	require.Equal(t, int32(-klxXPUErrInvalidDevice), x.DeviceGetAttr(&pci, 0, n))
	_, err := purego.Dlsym(klxE.hXPU, "xpu_strerror")
	require.Error(t, err, "xpu_strerror is a static inline of xpu/defs.h, not an exported symbol")

	var p unsafe.Pointer
	require.Equal(t, int32(-klxXPUErrNoSupport), x.Malloc(&p, 64, klxXPUMemL3), "L3 is not emulated")
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.Malloc(&p, 64, 7), "an unknown XPUMemoryKind")
	dev, dev2 := klxE.malloc(t, 64), klxE.malloc(t, 64)
	defer x.Free(dev.p)
	defer x.Free(dev2.p)
	var pinned unsafe.Pointer
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.HostAlloc(&pinned, 64, 1), "flags must be 0")
	require.Equal(t, int32(0), x.HostAlloc(&pinned, 64, 0))
	defer x.HostFree(pinned)
	host := make([]byte, 64)
	h := unsafe.Pointer(&host[0])

	// XPUMemcpyKind: D2H 0, H2D 1, D2D 2; a kind contradicting the
	// pointers fails (this is how a plugin using CUDA's numbers is caught).
	for _, c := range []struct {
		name      string
		dst, src  unsafe.Pointer
		kind, err int32
	}{
		{"H2D", dev.p, h, klxXPUHostToDevice, 0},
		{"H2D from pinned", dev.p, pinned, klxXPUHostToDevice, 0},
		{"D2H", h, dev.p, klxXPUDeviceToHost, 0},
		{"D2D", dev2.p, dev.p, klxXPUDeviceToDevice, 0},
		{"H2D pointers, kind 0 (D2H)", dev.p, h, klxXPUDeviceToHost, -klxXPUErrInvalidParam},
		{"D2H pointers, kind 1 (H2D)", h, dev.p, klxXPUHostToDevice, -klxXPUErrInvalidParam},
		{"D2D pointers, CUDA's D2D 3", dev2.p, dev.p, 3, -klxXPUErrInvalidParam},
		{"D2D with a host pointer", dev2.p, h, klxXPUDeviceToDevice, -klxXPUErrInvalidParam},
		{"overrun", dev2.at(32), dev.p, klxXPUDeviceToDevice, -klxXPUErrInvalidParam},
	} {
		require.Equal(t, c.err, x.Memcpy(c.dst, c.src, 64, c.kind), c.name)
	}
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.Free(h), "xpu_free of host memory")
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.HostFree(dev.p), "xpu_host_free of device memory")
}

func TestKunlunxinXPUStreamsAndEvents(t *testing.T) {
	x := klxEmulators(t).xpu
	require.Equal(t, int32(0), x.SetDevice(1))
	var s, ev uintptr
	require.Equal(t, int32(0), x.StreamCreate(&s))
	require.Equal(t, int32(0), x.EventCreate(&ev))
	require.Equal(t, int32(0), x.Wait(0), "xpu_wait(NULL): the default stream")
	require.Equal(t, int32(0), x.Wait(s))
	require.Equal(t, int32(0), x.EventRecord(ev, s))
	require.Equal(t, int32(0), x.EventWait(ev))
	require.Equal(t, int32(0), x.StreamWaitEvent(s, ev))
	dev := klxE.malloc(t, 16)
	src := []byte("0123456789abcdef")
	require.Equal(t, int32(0), x.MemcpyAsync(dev.p, unsafe.Pointer(&src[0]), 16, klxXPUHostToDevice, s))
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.MemcpyAsync(dev.p, unsafe.Pointer(&src[0]), 16, klxXPUHostToDevice, 0xbad))
	require.Equal(t, src, klxE.download(t, dev))
	require.Equal(t, int32(0), x.Free(dev.p))
	require.Equal(t, int32(0), x.EventDestroy(ev))
	require.Equal(t, int32(0), x.StreamDestroy(s))
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.Wait(s), "a destroyed stream")
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.EventWait(ev), "a destroyed event")
	require.Equal(t, int32(-klxXPUErrInvalidParam), x.StreamDestroy(0), "the default stream cannot be destroyed")
	require.Equal(t, int32(0), x.SetDevice(0))
}

func TestKunlunxinBKCLSingleRankAndChecks(t *testing.T) {
	e := klxEmulators(t)
	x, b := e.xpu, e.bkcl
	require.Equal(t, int32(0), x.SetDevice(0))
	id := make([]byte, klxBKCLUniqueIDBytes+64)
	for i := range id {
		id[i] = 0xee
	}
	require.Equal(t, int32(klxBKCLSuccess), b.GetUniqueID(&id[0]))
	require.Equal(t, byte(0xee), id[klxBKCLUniqueIDBytes], "bkcl_get_unique_id writes BKCL_UNIQUE_ID_BYTES (model: 512), no more")

	var ctx uintptr
	var nid uniqueID // an NCCL id: another vendor's
	require.Equal(t, int32(ncclSuccess), testEmulators(t).nccl.GetUniqueID(&nid))
	require.Equal(t, int32(klxBKCLInvalidArg), b.InitRank(&ctx, 0, 1, &nid.Internal[0]), "an NCCL id")
	shifted := append([]byte{0, 0, 0, 0}, id...)
	require.Equal(t, int32(klxBKCLInvalidArg), b.InitRank(&ctx, 0, 1, &shifted[0]), "the id at offset 4 (FlagCX's layout)")
	require.Equal(t, int32(klxBKCLInvalidArg), b.InitRank(&ctx, 1, 1, &id[0]), "rank 1 of 1")
	require.Equal(t, int32(klxBKCLSuccess), b.InitRank(&ctx, 0, 1, &id[0]))
	var v int32
	require.Equal(t, int32(0), b.CommCount(ctx, &v))
	require.Equal(t, int32(1), v)
	require.Equal(t, int32(0), b.CommUserRank(ctx, &v))
	require.Equal(t, int32(0), v)

	in := encodeN(dtFloat32, 10, func(i int) float64 { return float64(i) })
	send, recv := e.upload(t, in), e.malloc(t, 40)
	for _, op := range klxBKCLOps {
		require.Equal(t, int32(0), b.AllReduce(ctx, send.p, recv.p, 10, 0, int32(op), 0), "BKCL op %d", op)
		require.Equal(t, in, e.download(t, recv))
	}
	require.Equal(t, int32(0), b.AllGather(ctx, send.p, 10, recv.p, 0, 0), "count before recvbuf")
	require.Equal(t, int32(0), b.AllToAll(ctx, send.p, 10, recv.p, 0, 0))
	require.Equal(t, in, e.download(t, recv))
	zero := make([]byte, 40)
	require.Equal(t, int32(0), x.Memcpy(recv.p, unsafe.Pointer(&zero[0]), 40, klxXPUHostToDevice))

	host := make([]klxSize, 4)
	hostP := unsafe.Pointer(&host[0])
	var pinned unsafe.Pointer
	require.Equal(t, int32(0), x.HostAlloc(&pinned, 8, 0))
	counts := e.upload(t, klxSizeBytes(10))
	displs := e.upload(t, klxSizeBytes(0))
	require.Equal(t, int32(0), x.SetDevice(1))
	otherDev := e.upload(t, klxSizeBytes(10))
	var otherStream uintptr
	require.Equal(t, int32(0), x.StreamCreate(&otherStream))
	require.Equal(t, int32(0), x.SetDevice(0))
	defer x.StreamDestroy(otherStream)

	for _, c := range []struct {
		name string
		rc   int32
		want int32
	}{
		{"alltoallv with device counts", b.AllToAllV(ctx, send.p, counts.p, displs.p, 0, recv.p, counts.p, displs.p, 0, 0), klxBKCLSuccess},
		{"alltoallv with host counts", b.AllToAllV(ctx, send.p, hostP, displs.p, 0, recv.p, counts.p, displs.p, 0, 0), klxBKCLInvalidArg},
		{"alltoallv with pinned host displs", b.AllToAllV(ctx, send.p, counts.p, pinned, 0, recv.p, counts.p, displs.p, 0, 0), klxBKCLInvalidArg},
		{"alltoallv with counts on another XPU", b.AllToAllV(ctx, send.p, counts.p, displs.p, 0, recv.p, otherDev.p, displs.p, 0, 0), klxBKCLInvalidArg},
		{"alltoallv with two types", b.AllToAllV(ctx, send.p, counts.p, displs.p, 0, recv.p, counts.p, displs.p, 2, 0), klxBKCLInvalidArg},
		{"data type 7", b.AllReduce(ctx, send.p, recv.p, 10, 7, 0, 0), klxBKCLInvalidArg},
		{"op 5", b.AllReduce(ctx, send.p, recv.p, 10, 0, 5, 0), klxBKCLInvalidArg},
		{"host buffer", b.AllReduce(ctx, unsafe.Pointer(&in[0]), recv.p, 10, 0, 0, 0), klxBKCLInvalidArg},
		{"overrun", b.AllReduce(ctx, send.p, recv.p, 11, 0, 0, 0), klxBKCLInvalidArg},
		{"bad stream", b.AllReduce(ctx, send.p, recv.p, 10, 0, 0, 0xbad), klxBKCLRuntimeError},
		{"stream of another XPU", b.AllReduce(ctx, send.p, recv.p, 10, 0, 0, otherStream), klxBKCLRuntimeError},
		{"bad context", b.AllReduce(0xbad, send.p, recv.p, 10, 0, 0, 0), klxBKCLInvalidArg},
		{"peer 1 of 1", b.Send(ctx, send.p, 10, 1, 0, 0), klxBKCLInvalidArg},
		{"count 0", b.AllReduce(ctx, nil, nil, 0, 0, 0, 0), klxBKCLSuccess},
	} {
		require.Equal(t, c.want, c.rc, c.name)
	}
	require.Equal(t, in, e.download(t, recv), "alltoallv of one rank: counts 10 at 0")
	require.Equal(t, int32(klxBKCLInvalidArg), b.GroupEnd(), "bkcl_group_end without a start")
	require.Equal(t, int32(klxBKCLSuccess), b.DestroyContext(ctx))
	require.Equal(t, int32(klxBKCLInvalidArg), b.CommCount(ctx, &v), "a destroyed context")
	for _, p := range []unsafe.Pointer{send.p, recv.p, counts.p, displs.p, otherDev.p} {
		x.Free(p)
	}
	x.HostFree(pinned)
}

type klxSize = uint64

func klxSizeBytes(v ...klxSize) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
}

// bkcl_init_rank(ctx*, RANK, NRANKS, id*): three ranks joined from one
// thread inside a group report the ranks they were given.
func TestKunlunxinBKCLInitArgumentOrder(t *testing.T) {
	e := klxEmulators(t)
	x, b := e.xpu, e.bkcl
	id := make([]byte, klxBKCLUniqueIDBytes)
	require.Equal(t, int32(0), b.GetUniqueID(&id[0]))
	ctxs := make([]uintptr, 3)
	require.Equal(t, int32(0), b.GroupStart())
	for r := range ctxs {
		require.Equal(t, int32(0), x.SetDevice(int32(r)))
		require.Equal(t, int32(0), b.InitRank(&ctxs[r], int32(r), 3, &id[0]))
	}
	require.Equal(t, int32(0), b.GroupEnd())
	for r, c := range ctxs {
		var rank, count int32
		require.Equal(t, int32(0), b.CommUserRank(c, &rank))
		require.Equal(t, int32(0), b.CommCount(c, &count))
		require.Equal(t, []int32{int32(r), 3}, []int32{rank, count})
		require.Equal(t, int32(0), b.DestroyContext(c))
	}
	require.Equal(t, int32(0), x.SetDevice(0))
}

// ---------------------------------------------------------------------
// Multi-process: one process per rank, as with real BKCL.
// ---------------------------------------------------------------------

const klxCount = 29

// klxWorker is one rank of TestKunlunxinBKCLRanks, in its own process
// (the "vendorsim-kunlunxin" worker).
func klxWorker(e *klxEmu, rank, n int, id []byte) (out workerOut, err error) {
	out = workerOut{Buffers: map[string][]byte{}, Codes: map[string]int{}}
	x, b := e.xpu, e.bkcl
	check := func(what string, rc int32) {
		if rc != 0 && err == nil {
			err = fmt.Errorf("rank %d: %s returned %d", rank, what, rc)
		}
	}
	var ndev int32
	check("xpu_device_count", x.DeviceCount(&ndev))
	check("xpu_set_device", x.SetDevice(int32(rank)%ndev))
	var ctx, s uintptr
	check("bkcl_init_rank", b.InitRank(&ctx, int32(rank), int32(n), &id[0]))
	check("xpu_stream_create", x.StreamCreate(&s))
	if err != nil {
		return out, err
	}
	var bufs []unsafe.Pointer
	up := func(data []byte) unsafe.Pointer {
		var p unsafe.Pointer
		check("xpu_malloc", x.Malloc(&p, uint64(max(len(data), 1)), klxXPUMemMain))
		if len(data) > 0 {
			check("xpu_memcpy_async H2D", x.MemcpyAsync(p, unsafe.Pointer(&data[0]), uint64(len(data)), klxXPUHostToDevice, s))
		}
		bufs = append(bufs, p)
		return p
	}
	keep := func(key string, p unsafe.Pointer, nbytes int) {
		check("xpu_wait", x.Wait(s))
		buf := make([]byte, nbytes)
		if nbytes > 0 {
			check("xpu_memcpy D2H", x.Memcpy(unsafe.Pointer(&buf[0]), p, uint64(nbytes), klxXPUDeviceToHost))
		}
		out.Buffers[key] = buf
	}
	cnt := klxCount
	for _, ty := range klxBKCLTypes {
		dt, bt, es := ty.dt, int32(ty.bkcl), dtypeSize[ty.dt]
		for _, op := range klxBKCLOps {
			in := encodeN(dt, cnt, func(i int) float64 { return inputValue(dt, op, rank, n, i) })
			sp, rp := up(in), up(make([]byte, len(in)))
			check("bkcl_all_reduce", b.AllReduce(ctx, sp, rp, uintptr(cnt), bt, int32(op), s))
			keep(fmt.Sprintf("ar/%d/%d", dt, op), rp, len(in))
			for root := 0; root < n; root++ {
				rp = up(make([]byte, len(in)))
				check("bkcl_reduce", b.Reduce(ctx, sp, rp, uintptr(cnt), bt, int32(op), int32(root), s))
				keep(fmt.Sprintf("red/%d/%d/%d", dt, op, root), rp, len(in))
			}
			rin := encodeN(dt, n*cnt, func(i int) float64 { return inputValue(dt, op, rank, n, i) })
			sp, rp = up(rin), up(make([]byte, cnt*es))
			check("bkcl_reduce_scatter", b.ReduceScatter(ctx, sp, rp, uintptr(cnt), bt, int32(op), s))
			keep(fmt.Sprintf("rs/%d/%d", dt, op), rp, cnt*es)
		}
		for root := 0; root < n; root++ {
			bin := encodeN(dt, cnt, func(i int) float64 { return a2aValue(rank, 0, i) })
			sp, rp := up(bin), up(make([]byte, len(bin)))
			check("bkcl_broadcast", b.Broadcast(ctx, sp, rp, uintptr(cnt), bt, int32(root), s))
			keep(fmt.Sprintf("bc/%d/%d", dt, root), rp, len(bin))
		}
		sp, rp := up(encodeN(dt, cnt, func(i int) float64 { return a2aValue(rank, 0, i) })), up(make([]byte, n*cnt*es))
		check("bkcl_all_gather", b.AllGather(ctx, sp, uintptr(cnt), rp, bt, s))
		keep(fmt.Sprintf("ag/%d", dt), rp, n*cnt*es)
		sp, rp = up(encodeN(dt, n*cnt, func(i int) float64 { return a2aValue(rank, i/cnt, i%cnt) })), up(make([]byte, n*cnt*es))
		check("bkcl_all_to_all", b.AllToAll(ctx, sp, uintptr(cnt), rp, bt, s))
		keep(fmt.Sprintf("a2a/%d", dt), rp, n*cnt*es)

		// alltoallv: (src+dst)%4 elements (some zero) from src to dst,
		// packed in reverse peer order to exercise the displacements
		vc := func(src, dst int) int { return (src + dst) % 4 }
		sc, sd, rc, rd := make([]klxSize, n), make([]klxSize, n), make([]klxSize, n), make([]klxSize, n)
		stot, rtot := 0, 0
		for q := n - 1; q >= 0; q-- {
			sc[q], sd[q], rc[q], rd[q] = klxSize(vc(rank, q)), klxSize(stot), klxSize(vc(q, rank)), klxSize(rtot)
			stot += vc(rank, q)
			rtot += vc(q, rank)
		}
		sdata := make([]float64, stot)
		for q := 0; q < n; q++ {
			for j := 0; j < int(sc[q]); j++ {
				sdata[int(sd[q])+j] = a2aValue(rank, q, j)
			}
		}
		sp, rp = up(encodeN(dt, stot, func(i int) float64 { return sdata[i] })), up(make([]byte, rtot*es))
		counts := [4]unsafe.Pointer{up(klxSizeBytes(sc...)), up(klxSizeBytes(sd...)), up(klxSizeBytes(rc...)), up(klxSizeBytes(rd...))}
		check("bkcl_all_to_all_v", b.AllToAllV(ctx, sp, counts[0], counts[1], bt, rp, counts[2], counts[3], bt, s))
		keep(fmt.Sprintf("a2av/%d", dt), rp, rtot*es)

		next, prev := (rank+1)%n, (rank+n-1)%n
		sp, rp = up(encodeN(dt, cnt, func(i int) float64 { return a2aValue(rank, next, i) })), up(make([]byte, cnt*es))
		check("bkcl_group_start", b.GroupStart())
		check("bkcl_recv", b.Recv(ctx, rp, uintptr(cnt), int32(prev), bt, s))
		check("bkcl_send", b.Send(ctx, sp, uintptr(cnt), int32(next), bt, s))
		check("bkcl_group_end", b.GroupEnd())
		keep(fmt.Sprintf("ring/%d", dt), rp, cnt*es)
		for _, p := range bufs {
			check("xpu_free", x.Free(p))
		}
		bufs = bufs[:0]
	}
	check("xpu_stream_destroy", x.StreamDestroy(s))
	check("bkcl_destroy_context", b.DestroyContext(ctx))
	return out, err
}

const klxWorkerName = "vendorsim-kunlunxin"

func init() {
	testkit.Worker(klxWorkerName, func(r testkit.Rank) (any, error) {
		e, err := klxLoad(os.Getenv(envLibRoot))
		if err != nil {
			return nil, err
		}
		return klxWorker(e, r.Rank, r.N, r.ID)
	})
}

func TestKunlunxinBKCLRanks(t *testing.T) {
	e := klxEmulators(t)
	root, err := RepoRoot(".")
	require.NoError(t, err)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			id := make([]byte, klxBKCLUniqueIDBytes)
			require.Equal(t, int32(0), e.bkcl.GetUniqueID(&id[0]))
			res := testkit.Run[workerOut](t, testkit.Spec{Worker: klxWorkerName, N: n, ID: id,
				Env: []string{envLibRoot + "=" + root, EnvSlotBytes + "=256", EnvMailboxBytes + "=1024", EnvTimeout + "=30"}})
			runs := make([]workerOut, n)
			for r := range res {
				runs[r] = res[r].Report
			}
			cnt := klxCount
			for _, ty := range klxBKCLTypes {
				dt, es := ty.dt, dtypeSize[ty.dt]
				name := dtypeName[dt]
				for _, op := range klxBKCLOps {
					want := func(off, count int) []byte {
						return encodeN(dt, count, func(i int) float64 {
							vals := make([]float64, n)
							for r := range vals {
								vals[r] = inputValue(dt, op, r, n, off+i)
							}
							return reduceExpect(dt, op, vals)
						})
					}
					for me, run := range runs {
						bf := run.Buffers
						require.Equal(t, want(0, cnt), bf[fmt.Sprintf("ar/%d/%d", dt, op)], "allreduce rank %d %s %s", me, name, opName[op])
						for root := 0; root < n; root++ {
							got := bf[fmt.Sprintf("red/%d/%d/%d", dt, op, root)]
							if me == root {
								require.Equal(t, want(0, cnt), got, "reduce root %d %s %s", root, name, opName[op])
							} else {
								require.Equal(t, make([]byte, cnt*es), got, "reduce: non-root %d untouched", me)
							}
						}
						require.Equal(t, want(me*cnt, cnt), bf[fmt.Sprintf("rs/%d/%d", dt, op)], "reducescatter rank %d %s %s", me, name, opName[op])
					}
				}
				for me, run := range runs {
					bf := run.Buffers
					for root := 0; root < n; root++ {
						require.Equal(t, encodeN(dt, cnt, func(i int) float64 { return a2aValue(root, 0, i) }),
							bf[fmt.Sprintf("bc/%d/%d", dt, root)], "broadcast root %d rank %d %s", root, me, name)
					}
					require.Equal(t, encodeN(dt, n*cnt, func(i int) float64 { return a2aValue(i/cnt, 0, i%cnt) }), bf[fmt.Sprintf("ag/%d", dt)], "allgather rank %d %s", me, name)
					require.Equal(t, encodeN(dt, n*cnt, func(i int) float64 { return a2aValue(i/cnt, me, i%cnt) }), bf[fmt.Sprintf("a2a/%d", dt)], "alltoall rank %d %s", me, name)
					var v []float64 // received from peers in reverse order
					for q := n - 1; q >= 0; q-- {
						for j := 0; j < (q+me)%4; j++ {
							v = append(v, a2aValue(q, me, j))
						}
					}
					require.Equal(t, encodeN(dt, len(v), func(i int) float64 { return v[i] }), bf[fmt.Sprintf("a2av/%d", dt)], "alltoallv rank %d %s", me, name)
					prev := (me + n - 1) % n
					require.Equal(t, encodeN(dt, cnt, func(i int) float64 { return a2aValue(prev, me, i) }), bf[fmt.Sprintf("ring/%d", dt)], "send/recv rank %d %s", me, name)
				}
			}
		})
	}
}
