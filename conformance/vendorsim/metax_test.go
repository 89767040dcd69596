package vendorsim

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// Tests of the emulated MetaX libraries (metax/mcruntime.c, metax/mccl.c)
// through their own API surface: MACA's and MCCL's names, argument orders
// and values as mc_runtime.h / mccl.h have them, without the plugin.

// MACA runtime values the emulator implements (⚠ see metax/mcruntime.c).
const (
	mcSuccess                    = 0
	mcErrorInvalidValue          = 1
	mcErrorInvalidDevice         = 101
	mcErrorInvalidResourceHandle = 400

	mcMemcpyHostToHost     = 0
	mcMemcpyHostToDevice   = 1
	mcMemcpyDeviceToHost   = 2
	mcMemcpyDeviceToDevice = 3
	mcMemcpyDefault        = 4

	mcclSuccess            = 0
	mcclUnhandledMacaError = 1
	mcclSystemError        = 2
	mcclInvalidArgument    = 4
	mcclInvalidUsage       = 5
	mcclRemoteError        = 6
)

type metaxUniqueID struct{ Internal [128]byte }

type metaxRuntime struct {
	GetDeviceCount        func(*int32) int32
	SetDevice             func(int32) int32
	GetDevice             func(*int32) int32
	DeviceGetPCIBusID     func(*byte, int32, int32) int32
	Malloc                func(*unsafe.Pointer, uintptr) int32
	Free                  func(unsafe.Pointer) int32
	MallocHost            func(*unsafe.Pointer, uintptr) int32
	FreeHost              func(unsafe.Pointer) int32
	Memcpy                func(dst, src unsafe.Pointer, n uintptr, kind int32) int32
	MemcpyAsync           func(dst, src unsafe.Pointer, n uintptr, kind int32, stream uintptr) int32
	Memset                func(p unsafe.Pointer, v int32, n uintptr) int32
	MemsetAsync           func(p unsafe.Pointer, v int32, n uintptr, stream uintptr) int32
	StreamCreateWithFlags func(*uintptr, uint32) int32
	StreamSynchronize     func(uintptr) int32
	StreamQuery           func(uintptr) int32
	StreamDestroy         func(uintptr) int32
	StreamWaitEvent       func(stream, event uintptr, flags uint32) int32
	EventCreateWithFlags  func(*uintptr, uint32) int32
	EventRecord           func(event, stream uintptr) int32
	EventSynchronize      func(uintptr) int32
	EventQuery            func(uintptr) int32
	EventDestroy          func(uintptr) int32
	EventElapsedTime      func(*float32, uintptr, uintptr) int32
	GetLastError          func() int32
	GetErrorString        func(int32) string
}

type metaxMCCL struct {
	GetVersion         func(*int32) int32
	GetUniqueID        func(*metaxUniqueID) int32
	CommInitRank       func(*uintptr, int32, metaxUniqueID, int32) int32
	CommInitRankConfig func(*uintptr, int32, metaxUniqueID, int32, unsafe.Pointer) int32
	CommFinalize       func(uintptr) int32
	CommDestroy        func(uintptr) int32
	CommAbort          func(uintptr) int32
	CommGetAsyncError  func(uintptr, *int32) int32
	CommCount          func(uintptr, *int32) int32
	CommMcDevice       func(uintptr, *int32) int32
	CommUserRank       func(uintptr, *int32) int32
	AllReduce          func(send, recv unsafe.Pointer, count uintptr, dt, op int32, comm, stream uintptr) int32
	Reduce             func(send, recv unsafe.Pointer, count uintptr, dt, op, root int32, comm, stream uintptr) int32
	Broadcast          func(send, recv unsafe.Pointer, count uintptr, dt, root int32, comm, stream uintptr) int32
	AllGather          func(send, recv unsafe.Pointer, count uintptr, dt int32, comm, stream uintptr) int32
	ReduceScatter      func(send, recv unsafe.Pointer, count uintptr, dt, op int32, comm, stream uintptr) int32
	AllToAll           func(send, recv unsafe.Pointer, count uintptr, dt int32, comm, stream uintptr) int32
	Gather             func(send, recv unsafe.Pointer, count uintptr, dt, root int32, comm, stream uintptr) int32
	Scatter            func(send, recv unsafe.Pointer, count uintptr, dt, root int32, comm, stream uintptr) int32
	Send               func(buf unsafe.Pointer, count uintptr, dt, peer int32, comm, stream uintptr) int32
	Recv               func(buf unsafe.Pointer, count uintptr, dt, peer int32, comm, stream uintptr) int32
	GroupStart         func() int32
	GroupEnd           func() int32
	GetErrorString     func(int32) string
	GetLastError       func(uintptr) string
}

type metaxEmu struct {
	rtPath, ccPath string
	hRT, hCC       uintptr
	rt             metaxRuntime
	cc             metaxMCCL
}

// metaxLibPaths are the make-built emulators under <repo>/build/vendorsim/metax.
func metaxLibPaths(dir string) (rt, cc string, err error) {
	root, err := RepoRoot(dir)
	if err != nil {
		return "", "", err
	}
	d := filepath.Join(root, "build", "vendorsim", "metax")
	rt, cc = filepath.Join(d, "libmcruntime.so"), filepath.Join(d, "libmccl.so")
	for _, p := range []string{rt, cc} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("%w: %s is missing", ErrNotBuilt, p)
		}
	}
	return rt, cc, nil
}

func metaxLoad(dir string) (*metaxEmu, error) {
	e := &metaxEmu{}
	var err error
	if e.rtPath, e.ccPath, err = metaxLibPaths(dir); err != nil {
		return nil, err
	}
	if e.hRT, err = purego.Dlopen(e.rtPath, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	if e.hCC, err = purego.Dlopen(e.ccPath, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	r, c := &e.rt, &e.cc
	for _, b := range []struct {
		h    uintptr
		name string
		f    any
	}{
		{e.hRT, "mcGetDeviceCount", &r.GetDeviceCount}, {e.hRT, "mcSetDevice", &r.SetDevice},
		{e.hRT, "mcGetDevice", &r.GetDevice}, {e.hRT, "mcDeviceGetPCIBusId", &r.DeviceGetPCIBusID},
		{e.hRT, "mcMalloc", &r.Malloc}, {e.hRT, "mcFree", &r.Free},
		{e.hRT, "mcMallocHost", &r.MallocHost}, {e.hRT, "mcFreeHost", &r.FreeHost},
		{e.hRT, "mcMemcpy", &r.Memcpy}, {e.hRT, "mcMemcpyAsync", &r.MemcpyAsync},
		{e.hRT, "mcMemset", &r.Memset}, {e.hRT, "mcMemsetAsync", &r.MemsetAsync},
		{e.hRT, "mcStreamCreateWithFlags", &r.StreamCreateWithFlags}, {e.hRT, "mcStreamSynchronize", &r.StreamSynchronize},
		{e.hRT, "mcStreamQuery", &r.StreamQuery}, {e.hRT, "mcStreamDestroy", &r.StreamDestroy},
		{e.hRT, "mcStreamWaitEvent", &r.StreamWaitEvent}, {e.hRT, "mcEventCreateWithFlags", &r.EventCreateWithFlags},
		{e.hRT, "mcEventRecord", &r.EventRecord}, {e.hRT, "mcEventSynchronize", &r.EventSynchronize},
		{e.hRT, "mcEventQuery", &r.EventQuery}, {e.hRT, "mcEventDestroy", &r.EventDestroy},
		{e.hRT, "mcEventElapsedTime", &r.EventElapsedTime}, {e.hRT, "mcGetLastError", &r.GetLastError},
		{e.hRT, "mcGetErrorString", &r.GetErrorString},

		{e.hCC, "mcclGetVersion", &c.GetVersion}, {e.hCC, "mcclGetUniqueId", &c.GetUniqueID},
		{e.hCC, "mcclCommInitRank", &c.CommInitRank}, {e.hCC, "mcclCommInitRankConfig", &c.CommInitRankConfig},
		{e.hCC, "mcclCommFinalize", &c.CommFinalize}, {e.hCC, "mcclCommDestroy", &c.CommDestroy},
		{e.hCC, "mcclCommAbort", &c.CommAbort}, {e.hCC, "mcclCommGetAsyncError", &c.CommGetAsyncError},
		{e.hCC, "mcclCommCount", &c.CommCount}, {e.hCC, "mcclCommMcDevice", &c.CommMcDevice},
		{e.hCC, "mcclCommUserRank", &c.CommUserRank}, {e.hCC, "mcclAllReduce", &c.AllReduce},
		{e.hCC, "mcclReduce", &c.Reduce}, {e.hCC, "mcclBroadcast", &c.Broadcast},
		{e.hCC, "mcclAllGather", &c.AllGather}, {e.hCC, "mcclReduceScatter", &c.ReduceScatter},
		{e.hCC, "mcclAllToAll", &c.AllToAll}, {e.hCC, "mcclGather", &c.Gather}, {e.hCC, "mcclScatter", &c.Scatter},
		{e.hCC, "mcclSend", &c.Send}, {e.hCC, "mcclRecv", &c.Recv},
		{e.hCC, "mcclGroupStart", &c.GroupStart}, {e.hCC, "mcclGroupEnd", &c.GroupEnd},
		{e.hCC, "mcclGetErrorString", &c.GetErrorString}, {e.hCC, "mcclGetLastError", &c.GetLastError},
	} {
		if err := bind(b.h, b.name, b.f); err != nil {
			return nil, err
		}
	}
	return e, nil
}

var (
	metaxOnce sync.Once
	metaxE    *metaxEmu
	metaxErr  error
)

// metaxEmulators loads the MetaX emulators into the test process once and
// pins the test to its OS thread (current device and groups are per thread).
func metaxEmulators(t *testing.T) *metaxEmu {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	metaxOnce.Do(func() { metaxE, metaxErr = metaxLoad(".") })
	requireBuilt(t, metaxErr)
	return metaxE
}

func (e *metaxEmu) malloc(t require.TestingT, n int) unsafe.Pointer {
	var p unsafe.Pointer
	require.Equal(t, int32(mcSuccess), e.rt.Malloc(&p, uintptr(n)))
	return p
}

func (e *metaxEmu) upload(t require.TestingT, data []byte) unsafe.Pointer {
	p := e.malloc(t, max(len(data), 1))
	if len(data) > 0 {
		require.Equal(t, int32(mcSuccess), e.rt.Memcpy(p, unsafe.Pointer(&data[0]), uintptr(len(data)), mcMemcpyHostToDevice))
	}
	return p
}

func (e *metaxEmu) download(t require.TestingT, p unsafe.Pointer, n int) []byte {
	out := make([]byte, n)
	if n > 0 {
		require.Equal(t, int32(mcSuccess), e.rt.Memcpy(unsafe.Pointer(&out[0]), p, uintptr(n), mcMemcpyDeviceToHost))
	}
	return out
}

// The libraries' sonames, markers and exact exports are
// TestEmulatorLibraries' (vendors_test.go).

func TestMetaxRuntimeMemoryAndCopyKinds(t *testing.T) {
	e := metaxEmulators(t)
	r := e.rt
	var n, dev int32
	require.Equal(t, int32(mcSuccess), r.GetDeviceCount(&n))
	require.Equal(t, int32(expectedDevices()), n)
	require.Equal(t, int32(mcErrorInvalidDevice), r.SetDevice(n))
	require.Equal(t, int32(mcErrorInvalidDevice), r.GetLastError(), "mcGetLastError returns the last error")
	require.Equal(t, int32(mcSuccess), r.GetLastError(), "and clears it")
	require.Equal(t, int32(mcSuccess), r.SetDevice(1))
	require.Equal(t, int32(mcSuccess), r.GetDevice(&dev))
	require.Equal(t, int32(1), dev)
	bus := make([]byte, 32)
	require.Equal(t, int32(mcSuccess), r.DeviceGetPCIBusID(&bus[0], 32, 1), "(char* buf, int len, int device)")
	require.Equal(t, "0000:11:00.0", cString(bus))
	require.Equal(t, int32(mcSuccess), r.SetDevice(0))
	require.Contains(t, r.GetErrorString(mcErrorInvalidValue), "invalid argument")

	d1, d2 := e.malloc(t, 64), e.malloc(t, 64)
	defer r.Free(d1)
	defer r.Free(d2)
	var pinned unsafe.Pointer
	require.Equal(t, int32(mcSuccess), r.MallocHost(&pinned, 64))
	defer r.FreeHost(pinned)
	host := make([]byte, 64)
	hp := unsafe.Pointer(&host[0])
	// MACA's numbering: H2H 0, H2D 1, D2H 2, D2D 3, Default 4 (not FlagCX's,
	// not XPU's, not CNRT's).
	for _, c := range []struct {
		name     string
		dst, src unsafe.Pointer
		kind     int32
		want     int32
	}{
		{"H2D", d1, hp, mcMemcpyHostToDevice, mcSuccess},
		{"H2D from pinned", d1, pinned, mcMemcpyHostToDevice, mcSuccess},
		{"D2H", hp, d1, mcMemcpyDeviceToHost, mcSuccess},
		{"D2D", d2, d1, mcMemcpyDeviceToDevice, mcSuccess},
		{"H2H", pinned, hp, mcMemcpyHostToHost, mcSuccess},
		{"Default infers", hp, d2, mcMemcpyDefault, mcSuccess},
		{"FlagCX's H2D (0) is MACA's H2H", d1, hp, 0, mcErrorInvalidValue},
		{"FlagCX's D2H (1) is MACA's H2D", hp, d1, 1, mcErrorInvalidValue},
		{"FlagCX's D2D (2) is MACA's D2H", d2, d1, 2, mcErrorInvalidValue},
		{"H2D into host", hp, pinned, mcMemcpyHostToDevice, mcErrorInvalidValue},
		{"D2D from host", d1, hp, mcMemcpyDeviceToDevice, mcErrorInvalidValue},
		{"kind 5", d1, d2, 5, mcErrorInvalidValue},
	} {
		require.Equal(t, c.want, r.Memcpy(c.dst, c.src, 64, c.kind), c.name)
		require.Equal(t, c.want, r.MemcpyAsync(c.dst, c.src, 64, c.kind, 0), c.name+" (async)")
	}
	require.Equal(t, int32(mcErrorInvalidValue), r.Memcpy(d1, hp, 65, mcMemcpyHostToDevice), "past the allocation")
	require.Equal(t, int32(mcErrorInvalidValue), r.Memset(hp, 0, 8), "pageable memory is not memset")
	require.Equal(t, int32(mcErrorInvalidValue), r.Free(pinned), "mcFree of mcMallocHost memory")
	require.Equal(t, int32(mcErrorInvalidValue), r.FreeHost(d1), "mcFreeHost of mcMalloc memory")

	in := []byte("0123456789abcdef")
	require.Equal(t, int32(mcSuccess), r.Memcpy(d1, unsafe.Pointer(&in[0]), 16, mcMemcpyHostToDevice))
	require.Equal(t, int32(mcSuccess), r.MemsetAsync(unsafe.Add(d1, 4), 'x', 4, 0))
	require.Equal(t, []byte("0123xxxx89abcdef"), e.download(t, d1, 16))
}

func TestMetaxRuntimeStreamsAndEvents(t *testing.T) {
	r := metaxEmulators(t).rt
	var s, s2 uintptr
	require.Equal(t, int32(mcErrorInvalidValue), r.StreamCreateWithFlags(&s, 0x2))
	require.Equal(t, int32(mcSuccess), r.StreamCreateWithFlags(&s, 0x1), "mcStreamNonBlocking")
	require.Equal(t, int32(mcSuccess), r.StreamCreateWithFlags(&s2, 0))
	var a, b, untimed uintptr
	require.Equal(t, int32(mcSuccess), r.EventCreateWithFlags(&a, 0))
	require.Equal(t, int32(mcSuccess), r.EventCreateWithFlags(&b, 0))
	require.Equal(t, int32(mcSuccess), r.EventCreateWithFlags(&untimed, 0x2), "mcEventDisableTiming")
	require.Equal(t, int32(mcErrorInvalidValue), r.EventCreateWithFlags(new(uintptr), 0x80))
	var ms float32
	require.Equal(t, int32(mcErrorInvalidResourceHandle), r.EventElapsedTime(&ms, a, b), "never recorded")
	require.Equal(t, int32(mcSuccess), r.EventRecord(a, s))
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, int32(mcSuccess), r.EventRecord(b, s))
	require.Equal(t, int32(mcSuccess), r.EventRecord(untimed, s))
	require.Equal(t, int32(mcSuccess), r.EventElapsedTime(&ms, a, b), "(float* ms, start, end)")
	require.GreaterOrEqual(t, ms, float32(15))
	require.Equal(t, int32(mcSuccess), r.EventElapsedTime(&ms, b, a))
	require.Less(t, ms, float32(0), "start and end swapped")
	require.Equal(t, int32(mcErrorInvalidResourceHandle), r.EventElapsedTime(&ms, a, untimed))
	require.Equal(t, int32(mcSuccess), r.EventQuery(b))
	require.Equal(t, int32(mcSuccess), r.EventSynchronize(b))
	require.Equal(t, int32(mcSuccess), r.StreamQuery(s))
	require.Equal(t, int32(mcSuccess), r.StreamWaitEvent(s2, b, 0), "(stream, event, flags)")
	require.Equal(t, int32(mcErrorInvalidResourceHandle), r.StreamWaitEvent(b, s2, 0), "event and stream swapped")
	require.Equal(t, int32(mcErrorInvalidValue), r.StreamWaitEvent(s2, b, 1), "flags must be 0")
	require.Equal(t, int32(mcSuccess), r.StreamSynchronize(0), "the default stream")
	for _, h := range []uintptr{a, b, untimed} {
		require.Equal(t, int32(mcSuccess), r.EventDestroy(h))
	}
	require.Equal(t, int32(mcErrorInvalidResourceHandle), r.EventDestroy(a))
	require.Equal(t, int32(mcSuccess), r.StreamDestroy(s))
	require.Equal(t, int32(mcSuccess), r.StreamDestroy(s2))
	require.Equal(t, int32(mcErrorInvalidResourceHandle), r.StreamDestroy(s))
	require.Equal(t, int32(mcErrorInvalidResourceHandle), r.StreamSynchronize(s))
}

func TestMetaxMCCLSingleRank(t *testing.T) {
	e := metaxEmulators(t)
	r, c := e.rt, e.cc
	var v int32
	require.Equal(t, int32(mcclSuccess), c.GetVersion(&v))
	require.Equal(t, int32(21605), v)
	require.Contains(t, c.GetErrorString(mcclRemoteError), "remote process exited")
	require.Equal(t, "unknown result code", c.GetErrorString(8), "mcclNumResults is 8: MCCL has no timeout code")

	var id, id2 metaxUniqueID
	require.Equal(t, int32(mcclSuccess), c.GetUniqueID(&id))
	require.Equal(t, int32(mcclSuccess), c.GetUniqueID(&id2))
	require.NotEqual(t, id, id2)
	var comm uintptr
	require.Equal(t, int32(mcclInvalidArgument), c.CommInitRank(&comm, 1, metaxUniqueID{}, 0))
	require.Contains(t, c.GetLastError(0), "bad magic")
	nccl := id
	copy(nccl.Internal[8:], "nccl\x00") // the core's tag field: an NCCL id
	require.Equal(t, int32(mcclInvalidArgument), c.CommInitRank(&comm, 1, nccl, 0))
	require.Contains(t, c.GetLastError(0), "another vendor")

	cfg := struct {
		Size     uintptr
		Magic    uint32
		Version  uint32
		Blocking int32
	}{Size: 24, Magic: 0xdeadbeef, Version: 21605, Blocking: 1}
	require.Equal(t, int32(mcclInvalidArgument), c.CommInitRankConfig(&comm, 1, id, 0, unsafe.Pointer(&cfg)))
	require.Contains(t, c.GetLastError(0), "magic")
	cfg.Magic = 0xcafebeef
	require.Equal(t, int32(mcSuccess), r.SetDevice(2))
	require.Equal(t, int32(mcclSuccess), c.CommInitRankConfig(&comm, 1, id, 0, unsafe.Pointer(&cfg)))
	for _, q := range []struct {
		name string
		f    func(uintptr, *int32) int32
		want int32
	}{{"mcclCommCount", c.CommCount, 1}, {"mcclCommUserRank", c.CommUserRank, 0}, {"mcclCommMcDevice", c.CommMcDevice, 2}} {
		require.Equal(t, int32(mcclSuccess), q.f(comm, &v), q.name+"(comm, &out)")
		require.Equal(t, q.want, v, q.name)
	}

	in := encodeN(dtFloat64, 10, func(i int) float64 { return float64(i) })
	send, recv := e.upload(t, in), e.malloc(t, 80)
	var stream, other uintptr
	require.Equal(t, int32(mcSuccess), r.StreamCreateWithFlags(&stream, 1))
	require.Equal(t, int32(mcSuccess), r.SetDevice(3))
	require.Equal(t, int32(mcSuccess), r.StreamCreateWithFlags(&other, 1))
	require.Equal(t, int32(mcSuccess), r.SetDevice(2))
	defer r.StreamDestroy(stream)
	defer r.StreamDestroy(other)
	require.Equal(t, int32(mcclSuccess), c.AllReduce(send, recv, 10, dtFloat64, opAvg, comm, stream))
	require.Equal(t, in, e.download(t, recv, 80))
	require.Equal(t, int32(mcclSuccess), c.Gather(send, recv, 10, dtFloat64, 0, comm, stream))
	require.Equal(t, int32(mcclSuccess), c.Scatter(send, recv, 10, dtFloat64, 0, comm, stream))
	require.Equal(t, int32(mcclSuccess), c.AllToAll(send, recv, 10, dtFloat64, comm, stream))
	require.Equal(t, in, e.download(t, recv, 80))

	host := make([]byte, 80)
	for _, tc := range []struct {
		name string
		call func() int32
		want int32
		text string
	}{
		{"dtype 10", func() int32 { return c.AllReduce(send, recv, 10, 10, opSum, comm, stream) }, mcclInvalidArgument, "invalid data type"},
		{"op 5", func() int32 { return c.AllReduce(send, recv, 10, dtFloat64, 5, comm, stream) }, mcclInvalidArgument, "invalid reduction op"},
		{"host memory", func() int32 {
			return c.AllReduce(unsafe.Pointer(&host[0]), recv, 10, dtFloat64, opSum, comm, stream)
		}, mcclInvalidArgument, "neither device memory"},
		{"overrun", func() int32 { return c.AllReduce(send, recv, 11, dtFloat64, opSum, comm, stream) }, mcclInvalidArgument, "needs 88 bytes"},
		{"bad stream", func() int32 { return c.AllReduce(send, recv, 10, dtFloat64, opSum, comm, 0xbad) }, mcclUnhandledMacaError, "not a live mcStream_t"},
		{"stream of another device", func() int32 { return c.AllReduce(send, recv, 10, dtFloat64, opSum, comm, other) }, mcclUnhandledMacaError, "belongs to device 3"},
		{"gather root 1 of 1", func() int32 { return c.Gather(send, recv, 10, dtFloat64, 1, comm, stream) }, mcclInvalidArgument, "mcclGather: invalid root 1"},
		{"scatter dtype 12", func() int32 { return c.Scatter(send, recv, 10, 12, 0, comm, stream) }, mcclInvalidArgument, "mcclScatter: invalid data type 12"},
		{"bad comm", func() int32 { return c.AllToAll(send, recv, 10, dtFloat64, 0xbad, stream) }, mcclInvalidArgument, "invalid communicator"},
	} {
		require.Equal(t, tc.want, tc.call(), tc.name)
		require.Contains(t, c.GetLastError(comm), tc.text, tc.name)
	}
	require.Equal(t, int32(mcclSuccess), c.CommGetAsyncError(comm, &v))
	require.Equal(t, int32(mcclSuccess), v, "argument errors do not break the communicator")

	require.Equal(t, int32(mcclSuccess), c.CommFinalize(comm))
	require.Equal(t, int32(mcclInvalidUsage), c.AllReduce(send, recv, 10, dtFloat64, opSum, comm, stream), "after finalize")
	require.Equal(t, int32(mcclSuccess), c.CommDestroy(comm))
	require.Equal(t, int32(mcclInvalidArgument), c.CommCount(comm, &v), "destroyed")
	require.Equal(t, int32(mcclSuccess), c.CommDestroy(0))
	r.Free(send)
	r.Free(recv)
	require.Equal(t, int32(mcSuccess), r.SetDevice(0))
}

// ---------------------------------------------------------------------
// Ranks as processes: testkit.Run re-executes the test binary as the
// "vendorsim-metax" worker, envScenario naming a scenario; the worker
// records what it got in its report.
// ---------------------------------------------------------------------

const metaxWorkerName = "vendorsim-metax"

func init() {
	testkit.Worker(metaxWorkerName, metaxWorkerMain)
}

type metaxOut struct {
	Buffers map[string][]byte `json:"buffers"`
	Codes   map[string]int    `json:"codes"`
	Texts   map[string]string `json:"texts"`
	Fail    string            `json:"fail"`
}

func metaxRunRanks(t *testing.T, scenario string, n int, env ...string) []metaxOut {
	t.Helper()
	e := metaxEmulators(t)
	var id metaxUniqueID
	require.Equal(t, int32(mcclSuccess), e.cc.GetUniqueID(&id))
	res := testkit.Run[metaxOut](t, testkit.Spec{Worker: metaxWorkerName, N: n, ID: id.Internal[:],
		Env: append([]string{envScenario + "=" + scenario, envLibRoot + "=" + testkit.RepoRoot(t)}, env...)})
	outs := make([]metaxOut, n)
	for r := range n {
		outs[r] = res[r].Report
		require.Empty(t, outs[r].Fail, "rank %d:\n%s", r, res[r].Log)
	}
	return outs
}

// metaxWorkerMain is one rank of the tests below.
func metaxWorkerMain(r testkit.Rank) (any, error) {
	w := &metaxWorker{r: r, rank: r.Rank, n: r.N, out: metaxOut{Buffers: map[string][]byte{}, Codes: map[string]int{}, Texts: map[string]string{}}}
	copy(w.id.Internal[:], r.ID)
	var err error
	if w.e, err = metaxLoad(os.Getenv(envLibRoot)); err != nil {
		return nil, err
	}
	fn, ok := metaxScenarios[os.Getenv(envScenario)]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q", os.Getenv(envScenario))
	}
	func() {
		defer func() {
			if x := recover(); x != nil {
				if a, ok := x.(metaxAbort); ok {
					w.out.Fail = string(a)
					return
				}
				panic(x)
			}
		}()
		fn(w)
	}()
	return &w.out, nil
}

type metaxAbort string

type metaxWorker struct {
	e       *metaxEmu
	r       testkit.Rank
	rank, n int
	id      metaxUniqueID
	comm    uintptr
	stream  uintptr
	out     metaxOut
	bufs    []unsafe.Pointer
}

func (w *metaxWorker) ok(what string, rc int32) {
	if rc != 0 {
		panic(metaxAbort(fmt.Sprintf("rank %d: %s returned %d: %s", w.rank, what, rc, w.e.cc.GetLastError(w.comm))))
	}
}

func (w *metaxWorker) malloc(n int) unsafe.Pointer {
	var p unsafe.Pointer
	w.ok("mcMalloc", w.e.rt.Malloc(&p, uintptr(max(n, 1))))
	w.ok("mcMemset", w.e.rt.Memset(p, 0x5A, uintptr(max(n, 1))))
	w.bufs = append(w.bufs, p)
	return p
}

func (w *metaxWorker) upload(data []byte) unsafe.Pointer {
	p := w.malloc(len(data))
	w.ok("mcMemcpy H2D", w.e.rt.Memcpy(p, unsafe.Pointer(&data[0]), uintptr(len(data)), mcMemcpyHostToDevice))
	return p
}

func (w *metaxWorker) keep(name string, p unsafe.Pointer, n int) {
	w.ok("mcStreamSynchronize", w.e.rt.StreamSynchronize(w.stream))
	out := make([]byte, n)
	w.ok("mcMemcpy D2H", w.e.rt.Memcpy(unsafe.Pointer(&out[0]), p, uintptr(n), mcMemcpyDeviceToHost))
	w.out.Buffers[name] = out
}

func (w *metaxWorker) init() {
	var ndev int32
	w.ok("mcGetDeviceCount", w.e.rt.GetDeviceCount(&ndev))
	w.ok("mcSetDevice", w.e.rt.SetDevice(int32(w.rank)%ndev))
	w.ok("mcclCommInitRank", w.e.cc.CommInitRank(&w.comm, int32(w.n), w.id, int32(w.rank)))
	w.ok("mcStreamCreateWithFlags", w.e.rt.StreamCreateWithFlags(&w.stream, 1))
}

func (w *metaxWorker) finish() {
	for _, b := range w.bufs {
		w.e.rt.Free(b)
	}
	w.ok("mcStreamDestroy", w.e.rt.StreamDestroy(w.stream))
	w.ok("mcclCommDestroy", w.e.cc.CommDestroy(w.comm))
}

var metaxScenarios = map[string]func(*metaxWorker){
	"collectives": metaxScenarioCollectives,
	"early-exit":  metaxScenarioEarlyExit,
}

const metaxCount = 23

// Every MCCL collective, out of place and in place with mccl.h's offsets.
func metaxScenarioCollectives(w *metaxWorker) {
	w.init()
	c, n, me, s, C := w.e.cc, w.n, w.rank, w.stream, metaxCount
	for dt := range numDtypes {
		es := dtypeSize[dt]
		for op := range numOps {
			in := encodeN(dt, C, func(i int) float64 { return inputValue(dt, op, me, n, i) })
			send, recv := w.upload(in), w.malloc(len(in))
			w.ok("mcclAllReduce", c.AllReduce(send, recv, uintptr(C), int32(dt), int32(op), w.comm, s))
			w.keep(fmt.Sprintf("ar/%d/%d", dt, op), recv, len(in))
			w.ok("mcclAllReduce in place", c.AllReduce(send, send, uintptr(C), int32(dt), int32(op), w.comm, s))
			w.keep(fmt.Sprintf("ar-ip/%d/%d", dt, op), send, len(in))

			rin := encodeN(dt, n*C, func(i int) float64 { return inputValue(dt, op, me, n, i) })
			send = w.upload(rin)
			recv = w.malloc(C * es)
			w.ok("mcclReduceScatter", c.ReduceScatter(send, recv, uintptr(C), int32(dt), int32(op), w.comm, s))
			w.keep(fmt.Sprintf("rs/%d/%d", dt, op), recv, C*es)
			w.ok("mcclReduceScatter in place", c.ReduceScatter(send, unsafe.Add(send, me*C*es), uintptr(C), int32(dt), int32(op), w.comm, s))
			w.keep(fmt.Sprintf("rs-ip/%d/%d", dt, op), unsafe.Add(send, me*C*es), C*es)
		}
		for root := range n {
			in := encodeN(dt, C, func(i int) float64 { return inputValue(dt, opMax, me, n, i) })
			send, recv := w.upload(in), w.malloc(len(in))
			w.ok("mcclReduce", c.Reduce(send, recv, uintptr(C), int32(dt), opMax, int32(root), w.comm, s))
			w.keep(fmt.Sprintf("red/%d/%d", dt, root), recv, len(in))
			bin := encodeN(dt, C, func(i int) float64 { return a2aValue(root, 0, i) })
			buf := w.upload(bin)
			if me != root {
				w.ok("mcMemset", w.e.rt.Memset(buf, 0, uintptr(len(bin))))
			}
			w.ok("mcclBroadcast in place", c.Broadcast(buf, buf, uintptr(C), int32(dt), int32(root), w.comm, s))
			w.keep(fmt.Sprintf("bc/%d/%d", dt, root), buf, len(bin))

			// gather: in place at the root (sendbuff = recvbuff + rank*count)
			gin := encodeN(dt, C, func(i int) float64 { return a2aValue(me, root, i) })
			big := w.malloc(n * C * es)
			gsend := w.upload(gin)
			if me == root {
				w.ok("mcMemcpy D2D", w.e.rt.Memcpy(unsafe.Add(big, me*C*es), gsend, uintptr(C*es), mcMemcpyDeviceToDevice))
				gsend = unsafe.Add(big, me*C*es)
			}
			w.ok("mcclGather", c.Gather(gsend, big, uintptr(C), int32(dt), int32(root), w.comm, s))
			w.keep(fmt.Sprintf("ga/%d/%d", dt, root), big, n*C*es)
			// scatter: in place at the root (recvbuff = sendbuff + rank*count)
			sin := encodeN(dt, n*C, func(i int) float64 { return a2aValue(root, i/C, i%C) })
			ssend, srecv := w.upload(sin), w.malloc(C*es)
			if me == root {
				srecv = unsafe.Add(ssend, me*C*es)
			}
			w.ok("mcclScatter", c.Scatter(ssend, srecv, uintptr(C), int32(dt), int32(root), w.comm, s))
			w.keep(fmt.Sprintf("sc/%d/%d", dt, root), srecv, C*es)
		}
		// allgather in place, alltoall out of place and in place
		in := encodeN(dt, C, func(i int) float64 { return a2aValue(me, 0, i) })
		big := w.malloc(n * C * es)
		w.ok("mcMemcpy H2D", w.e.rt.Memcpy(unsafe.Add(big, me*C*es), unsafe.Pointer(&in[0]), uintptr(len(in)), mcMemcpyHostToDevice))
		w.ok("mcclAllGather in place", c.AllGather(unsafe.Add(big, me*C*es), big, uintptr(C), int32(dt), w.comm, s))
		w.keep(fmt.Sprintf("ag/%d", dt), big, n*C*es)
		ain := encodeN(dt, n*C, func(i int) float64 { return a2aValue(me, i/C, i%C) })
		send, recv := w.upload(ain), w.malloc(len(ain))
		w.ok("mcclAllToAll", c.AllToAll(send, recv, uintptr(C), int32(dt), w.comm, s))
		w.keep(fmt.Sprintf("a2a/%d", dt), recv, len(ain))
		w.ok("mcclAllToAll in place", c.AllToAll(send, send, uintptr(C), int32(dt), w.comm, s))
		w.keep(fmt.Sprintf("a2a-ip/%d", dt), send, len(ain))
		for _, b := range w.bufs {
			w.e.rt.Free(b)
		}
		w.bufs = nil
	}
	// a gather issued inside the caller's group, next to a ring exchange
	next, prev := (me+1)%n, (me+n-1)%n
	ring := w.upload(encodeN(dtInt32, C, func(i int) float64 { return a2aValue(me, next, i) }))
	got := w.malloc(C * 4)
	gin := w.upload(encodeN(dtInt32, C, func(i int) float64 { return a2aValue(me, 0, i) }))
	gout := w.malloc(n * C * 4)
	w.ok("mcclGroupStart", c.GroupStart())
	w.ok("mcclSend", c.Send(ring, uintptr(C), dtInt32, int32(next), w.comm, s))
	w.ok("mcclGather in a group", c.Gather(gin, gout, uintptr(C), dtInt32, 0, w.comm, s))
	w.ok("mcclRecv", c.Recv(got, uintptr(C), dtInt32, int32(prev), w.comm, s))
	w.ok("mcclGroupEnd", c.GroupEnd())
	w.keep("ring", got, C*4)
	w.keep("group-gather", gout, n*C*4)
	w.finish()
}

// Rank 1 leaves right after init without destroying anything; rank 0's
// next collective must fail, naming rank 1, instead of hanging.
func metaxScenarioEarlyExit(w *metaxWorker) {
	w.init()
	if w.rank == 1 {
		_ = w.r.Save(&w.out)
		os.Exit(0)
	}
	time.Sleep(100 * time.Millisecond)
	buf := w.malloc(64)
	w.out.Codes["rc"] = int(w.e.cc.AllReduce(buf, buf, 16, dtFloat32, opSum, w.comm, w.stream))
	w.out.Texts["err"] = w.e.cc.GetLastError(w.comm)
	var async int32
	w.ok("mcclCommGetAsyncError", w.e.cc.CommGetAsyncError(w.comm, &async))
	w.out.Codes["async"] = int(async)
	w.ok("mcclCommAbort", w.e.cc.CommAbort(w.comm))
}

func TestMetaxMCCLCollectivesInProcesses(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			runs := metaxRunRanks(t, "collectives", n, EnvSlotBytes+"=256", EnvTimeout+"=30")
			C := metaxCount
			fold := func(dt, op, i int) float64 {
				vals := make([]float64, n)
				for r := range vals {
					vals[r] = inputValue(dt, op, r, n, i)
				}
				return reduceExpect(dt, op, vals)
			}
			for me, run := range runs {
				b := run.Buffers
				for dt := range numDtypes {
					es := dtypeSize[dt]
					for op := range numOps {
						want := encodeN(dt, C, func(i int) float64 { return fold(dt, op, i) })
						require.Equal(t, want, b[fmt.Sprintf("ar/%d/%d", dt, op)], "allreduce rank %d %s %s", me, dtypeName[dt], opName[op])
						require.Equal(t, want, b[fmt.Sprintf("ar-ip/%d/%d", dt, op)], "in-place allreduce rank %d %s %s", me, dtypeName[dt], opName[op])
						rs := encodeN(dt, C, func(j int) float64 { return fold(dt, op, me*C+j) })
						require.Equal(t, rs, b[fmt.Sprintf("rs/%d/%d", dt, op)], "reducescatter rank %d %s %s", me, dtypeName[dt], opName[op])
						require.Equal(t, rs, b[fmt.Sprintf("rs-ip/%d/%d", dt, op)], "in-place reducescatter rank %d %s %s", me, dtypeName[dt], opName[op])
					}
					for root := range n {
						red := []byte(strings.Repeat("\x5a", C*es))
						if me == root {
							red = encodeN(dt, C, func(i int) float64 { return fold(dt, opMax, i) })
						}
						require.Equal(t, red, b[fmt.Sprintf("red/%d/%d", dt, root)], "reduce root %d rank %d %s", root, me, dtypeName[dt])
						require.Equal(t, encodeN(dt, C, func(i int) float64 { return a2aValue(root, 0, i) }),
							b[fmt.Sprintf("bc/%d/%d", dt, root)], "broadcast root %d rank %d %s", root, me, dtypeName[dt])
						ga := []byte(strings.Repeat("\x5a", n*C*es))
						if me == root {
							ga = encodeN(dt, n*C, func(i int) float64 { return a2aValue(i/C, root, i%C) })
						}
						require.Equal(t, ga, b[fmt.Sprintf("ga/%d/%d", dt, root)], "gather root %d rank %d %s", root, me, dtypeName[dt])
						require.Equal(t, encodeN(dt, C, func(i int) float64 { return a2aValue(root, me, i) }),
							b[fmt.Sprintf("sc/%d/%d", dt, root)], "scatter root %d rank %d %s", root, me, dtypeName[dt])
					}
					require.Equal(t, encodeN(dt, n*C, func(i int) float64 { return a2aValue(i/C, 0, i%C) }), b[fmt.Sprintf("ag/%d", dt)],
						"in-place allgather rank %d %s", me, dtypeName[dt])
					a2a := encodeN(dt, n*C, func(i int) float64 { return a2aValue(i/C, me, i%C) })
					require.Equal(t, a2a, b[fmt.Sprintf("a2a/%d", dt)], "alltoall rank %d %s", me, dtypeName[dt])
					require.Equal(t, a2a, b[fmt.Sprintf("a2a-ip/%d", dt)], "in-place alltoall rank %d %s", me, dtypeName[dt])
				}
				prev := (me + n - 1) % n
				require.Equal(t, encodeN(dtInt32, C, func(i int) float64 { return a2aValue(prev, me, i) }), b["ring"], "rank %d", me)
				gg := []byte(strings.Repeat("\x5a", n*C*4))
				if me == 0 {
					gg = encodeN(dtInt32, n*C, func(i int) float64 { return a2aValue(i/C, 0, i%C) })
				}
				require.Equal(t, gg, b["group-gather"], "gather inside a group, rank %d", me)
			}
		})
	}
}

func TestMetaxMCCLDepartedRankFailsPeers(t *testing.T) {
	runs := metaxRunRanks(t, "early-exit", 2, EnvTimeout+"=3")
	o := runs[0]
	t.Log(o.Texts["err"])
	require.Contains(t, []int{mcclRemoteError, mcclSystemError}, o.Codes["rc"], o.Texts["err"])
	require.Contains(t, o.Texts["err"], "rank 1")
	require.Contains(t, o.Texts["err"], "mcclAllReduce")
	require.NotEqual(t, mcclSuccess, o.Codes["async"])
}
