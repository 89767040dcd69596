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

// The emulated Cambricon libraries (build/vendorsim/cambricon/libcnrt.so
// and libcncl.so) driven directly through their vendor API, as the
// cambricon plugin drives them: CNRT's and CNCL's names, enum values and
// argument orders (docs/vendor-facts.md#cambricon). Multi-rank tests run each
// rank in its own process: this test binary re-executed by testkit.Run as
// the "vendorsim-cambricon" worker, envScenario naming a scenario.

// CNRT (cnrt.h v6.14.1) and CNCL (cncl.h v1.25.0) values.
const (
	cnrtSuccess                    = 0
	cnrtErrorNoDevice              = 100004
	cnrtErrorDeviceInvalid         = 100005
	cnrtErrorArgsInvalid           = 100006
	cnrtErrorInvalidResourceHandle = 100014

	cnrtH2D, cnrtD2D, cnrtD2H, cnrtH2H, cnrtP2P, cnrtNoDirection = 0, 1, 2, 3, 4, 5

	cnclSuccess      = 0x00
	cnclUnsupported  = 0x11
	cnclNullPointer  = 0x21
	cnclSystem       = 0x02
	cnclSysSocket    = 0x22
	cnclMluRuntime   = 0x03
	cnclCnrtDevice   = 0x13
	cnclAsyncError   = 0x16
	cnclArguments    = 0x07
	cnclInt16        = 0x21
	cnclUint16       = 0x31
	cnclInvalidDtype = 0x00
)

// cnclTypeOf maps the core's (NCCL) data type numbers to cnclDataType_t;
// -1: CNCL has no float64.
var cnclTypeOf = [numDtypes]int32{0x20, 0x30, 0x22, 0x32, 0x23, 0x33, 0x10, 0x12, -1, 0x11}

const cnNumOps = 4 // sum, prod, max, min: CNCL has no avg

type cnClique struct {
	Data [128]byte
	Hash uint64
}

type cnrtAPI struct {
	GetDeviceCount      func(*uint32) int32
	SetDevice           func(int32) int32
	GetDevice           func(*int32) int32
	GetLibVersion       func(*int32, *int32, *int32) int32
	DeviceGetPCIBusID   func(*byte, int32, int32) int32
	Malloc              func(*unsafe.Pointer, uintptr) int32
	Free                func(unsafe.Pointer) int32
	HostMalloc          func(*unsafe.Pointer, uintptr) int32
	FreeHost            func(unsafe.Pointer) int32
	Memcpy              func(dst, src unsafe.Pointer, n uintptr, dir int32) int32
	MemcpyAsync         func(dst, src unsafe.Pointer, n uintptr, queue uintptr, dir int32) int32
	MemcpyAsyncV2       func(dst, src unsafe.Pointer, n uintptr, queue uintptr, dir int32) int32
	Memset              func(unsafe.Pointer, int32, uintptr) int32
	MemsetAsync         func(unsafe.Pointer, int32, uintptr, uintptr) int32
	QueueCreate         func(*uintptr) int32
	QueueDestroy        func(uintptr) int32
	QueueSync           func(uintptr) int32
	QueueQuery          func(uintptr) int32
	NotifierCreate      func(*uintptr) int32
	NotifierCreateFlags func(*uintptr, uint32) int32
	NotifierDestroy     func(uintptr) int32
	PlaceNotifier       func(notifier, queue uintptr) int32
	WaitNotifier        func(uintptr) int32
	QueryNotifier       func(uintptr) int32
	QueueWaitNotifier   func(notifier, queue uintptr, flag uint32) int32
	NotifierElapsedTime func(start, end uintptr, ms *float32) int32
	GetErrorStr         func(int32) string
	LastError           func() string
}

type cnclAPI struct {
	GetLibVersion     func(*int32, *int32, *int32) int32
	GetCliqueID       func(*cnClique) int32
	InitComms         func(comms *uintptr, num int32, devs, ranks *int32, nrank int32, id *cnClique) int32
	FreeComm          func(uintptr) int32
	DestroyComms      func(*uintptr, int32) int32
	AbortComm         func(uintptr) int32
	GetCommAsyncError func(uintptr) int32
	GetCommCount      func(*int32, uintptr) int32
	GetCommRank       func(*int32, uintptr) int32
	GetCommDevice     func(*int32, uintptr) int32
	AllReduce         func(send, recv unsafe.Pointer, count uintptr, dt, op int32, comm, queue uintptr) int32
	Reduce            func(send, recv unsafe.Pointer, count uintptr, dt, op, root int32, comm, queue uintptr) int32
	Broadcast         func(send, recv unsafe.Pointer, count uintptr, dt, root int32, comm, queue uintptr) int32
	AllGather         func(send, recv unsafe.Pointer, count uintptr, dt int32, comm, queue uintptr) int32
	ReduceScatter     func(send, recv unsafe.Pointer, count uintptr, dt, op int32, comm, queue uintptr) int32
	AlltoAll          func(send, recv unsafe.Pointer, count uintptr, dt int32, comm, queue uintptr) int32
	Send              func(buf unsafe.Pointer, count uintptr, dt, peer int32, comm, queue uintptr) int32
	Recv              func(buf unsafe.Pointer, count uintptr, dt, peer int32, comm, queue uintptr) int32
	GroupStart        func() int32
	GroupEnd          func() int32
	GetErrorStr       func(int32) string
	LastError         func() string
}

type cnEmulators struct {
	dir       string
	rt        cnrtAPI
	ccl       cnclAPI
	hRT, hCCL uintptr
	rtPath    string
	cclPath   string
}

var (
	cnOnce sync.Once
	cnEmu  *cnEmulators
	cnErr  error
)

func cnLoad(start string) (*cnEmulators, error) {
	root, err := RepoRoot(start)
	if err != nil {
		return nil, err
	}
	e := &cnEmulators{dir: filepath.Join(root, "build", "vendorsim", "cambricon")}
	e.rtPath, e.cclPath = filepath.Join(e.dir, "libcnrt.so"), filepath.Join(e.dir, "libcncl.so")
	for _, p := range []string{e.rtPath, e.cclPath} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: %s is missing", ErrNotBuilt, p)
		}
	}
	if e.hRT, err = purego.Dlopen(e.rtPath, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	if e.hCCL, err = purego.Dlopen(e.cclPath, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	r, c := &e.rt, &e.ccl
	for _, b := range []struct {
		h    uintptr
		name string
		f    any
	}{
		{e.hRT, "cnrtGetDeviceCount", &r.GetDeviceCount}, {e.hRT, "cnrtSetDevice", &r.SetDevice},
		{e.hRT, "cnrtGetDevice", &r.GetDevice}, {e.hRT, "cnrtGetLibVersion", &r.GetLibVersion},
		{e.hRT, "cnrtDeviceGetPCIBusId", &r.DeviceGetPCIBusID}, {e.hRT, "cnrtMalloc", &r.Malloc},
		{e.hRT, "cnrtFree", &r.Free}, {e.hRT, "cnrtHostMalloc", &r.HostMalloc}, {e.hRT, "cnrtFreeHost", &r.FreeHost},
		{e.hRT, "cnrtMemcpy", &r.Memcpy}, {e.hRT, "cnrtMemcpyAsync", &r.MemcpyAsync},
		{e.hRT, "cnrtMemcpyAsync_V2", &r.MemcpyAsyncV2}, {e.hRT, "cnrtMemset", &r.Memset},
		{e.hRT, "cnrtMemsetAsync", &r.MemsetAsync}, {e.hRT, "cnrtQueueCreate", &r.QueueCreate},
		{e.hRT, "cnrtQueueDestroy", &r.QueueDestroy}, {e.hRT, "cnrtQueueSync", &r.QueueSync},
		{e.hRT, "cnrtQueueQuery", &r.QueueQuery}, {e.hRT, "cnrtNotifierCreate", &r.NotifierCreate},
		{e.hRT, "cnrtNotifierCreateWithFlags", &r.NotifierCreateFlags}, {e.hRT, "cnrtNotifierDestroy", &r.NotifierDestroy},
		{e.hRT, "cnrtPlaceNotifier", &r.PlaceNotifier}, {e.hRT, "cnrtWaitNotifier", &r.WaitNotifier},
		{e.hRT, "cnrtQueryNotifier", &r.QueryNotifier}, {e.hRT, "cnrtQueueWaitNotifier", &r.QueueWaitNotifier},
		{e.hRT, "cnrtNotifierElapsedTime", &r.NotifierElapsedTime}, {e.hRT, "cnrtGetErrorStr", &r.GetErrorStr},
		{e.hRT, "flagcxVendorsimLastError", &r.LastError},

		{e.hCCL, "cnclGetLibVersion", &c.GetLibVersion}, {e.hCCL, "cnclGetCliqueId", &c.GetCliqueID},
		{e.hCCL, "cnclInitComms", &c.InitComms}, {e.hCCL, "cnclFreeComm", &c.FreeComm},
		{e.hCCL, "cnclDestroyComms", &c.DestroyComms}, {e.hCCL, "cnclAbortComm", &c.AbortComm},
		{e.hCCL, "cnclGetCommAsyncError", &c.GetCommAsyncError}, {e.hCCL, "cnclGetCommCount", &c.GetCommCount},
		{e.hCCL, "cnclGetCommRank", &c.GetCommRank}, {e.hCCL, "cnclGetCommDevice", &c.GetCommDevice},
		{e.hCCL, "cnclAllReduce", &c.AllReduce}, {e.hCCL, "cnclReduce", &c.Reduce},
		{e.hCCL, "cnclBroadcast", &c.Broadcast}, {e.hCCL, "cnclAllGather", &c.AllGather},
		{e.hCCL, "cnclReduceScatter", &c.ReduceScatter}, {e.hCCL, "cnclAlltoAll", &c.AlltoAll},
		{e.hCCL, "cnclSend", &c.Send}, {e.hCCL, "cnclRecv", &c.Recv},
		{e.hCCL, "cnclGroupStart", &c.GroupStart}, {e.hCCL, "cnclGroupEnd", &c.GroupEnd},
		{e.hCCL, "cnclGetErrorStr", &c.GetErrorStr}, {e.hCCL, "flagcxVendorsimLastError", &c.LastError},
	} {
		if err := bind(b.h, b.name, b.f); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// cnTest loads the emulators once and pins the test to its OS thread (the
// current device and group state are per thread).
func cnTest(t *testing.T) *cnEmulators {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	cnOnce.Do(func() { cnEmu, cnErr = cnLoad(".") })
	requireBuilt(t, cnErr)
	return cnEmu
}

func (e *cnEmulators) malloc(t require.TestingT, n int) devBuf {
	var p unsafe.Pointer
	require.Equal(t, int32(cnrtSuccess), e.rt.Malloc(&p, uintptr(n)))
	return devBuf{p, n}
}

func (e *cnEmulators) upload(t require.TestingT, data []byte) devBuf {
	b := e.malloc(t, len(data))
	require.Equal(t, int32(cnrtSuccess), e.rt.Memcpy(b.p, unsafe.Pointer(&data[0]), uintptr(len(data)), cnrtH2D))
	return b
}

func (e *cnEmulators) download(t require.TestingT, b devBuf) []byte {
	out := make([]byte, b.n)
	require.Equal(t, int32(cnrtSuccess), e.rt.Memcpy(unsafe.Pointer(&out[0]), b.p, uintptr(b.n), cnrtD2H))
	return out
}

// The libraries' sonames, markers and exact exports are
// TestEmulatorLibraries' (vendors_test.go).
func TestCambriconLibVersions(t *testing.T) {
	e := cnTest(t)
	var a, b, c int32
	require.Equal(t, int32(cnrtSuccess), e.rt.GetLibVersion(&a, &b, &c))
	require.Equal(t, []int32{6, 14, 1}, []int32{a, b, c})
	require.Equal(t, int32(cnclSuccess), e.ccl.GetLibVersion(&a, &b, &c))
	require.Equal(t, []int32{1, 25, 0}, []int32{a, b, c})
}

func TestCambriconCNRTDevicesAndDirections(t *testing.T) {
	e := cnTest(t)
	r := e.rt
	var n uint32
	require.Equal(t, int32(cnrtSuccess), r.GetDeviceCount(&n))
	require.Equal(t, uint32(expectedDevices()), n)
	require.Equal(t, int32(cnrtErrorDeviceInvalid), r.SetDevice(int32(n)))
	require.Contains(t, r.LastError(), fmt.Sprintf("device %d of %d", n, n))
	require.Equal(t, "Invalid device", r.GetErrorStr(cnrtErrorDeviceInvalid))
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(1))
	var dev int32
	require.Equal(t, int32(cnrtSuccess), r.GetDevice(&dev))
	require.Equal(t, int32(1), dev)
	bus := make([]byte, 32)
	require.Equal(t, int32(cnrtSuccess), r.DeviceGetPCIBusID(&bus[0], 32, 1))
	require.Equal(t, "0000:11:00.0", cString(bus))

	d1, d2 := e.malloc(t, 64), e.malloc(t, 64)
	defer r.Free(d1.p)
	defer r.Free(d2.p)
	var pinned unsafe.Pointer
	require.Equal(t, int32(cnrtSuccess), r.HostMalloc(&pinned, 64))
	defer r.FreeHost(pinned)
	host := make([]byte, 64)
	hp := unsafe.Pointer(&host[0])
	// cnrtMemTransDir_t: HostToDev 0, DevToDev 1, DevToHost 2, HostToHost 3, PeerToPeer 4, NoDirection 5
	for _, tc := range []struct {
		name     string
		dst, src unsafe.Pointer
		dir      int32
		ok       bool
	}{
		{"H2D", d1.p, hp, cnrtH2D, true}, {"H2D from pinned", d1.p, pinned, cnrtH2D, true},
		{"D2D", d2.p, d1.p, cnrtD2D, true}, {"D2H", hp, d1.p, cnrtD2H, true}, {"D2H into pinned", pinned, d1.p, cnrtD2H, true},
		{"H2H", hp, pinned, cnrtH2H, true}, {"P2P", d2.p, d1.p, cnrtP2P, true}, {"NoDirection infers", hp, d1.p, cnrtNoDirection, true},
		{"CUDA's H2D (1) is DevToDev here", d1.p, hp, 1, false}, {"CUDA's D2H (2) is DevToHost: fine", hp, d1.p, 2, true},
		{"CUDA's D2D (3) is HostToHost here", d2.p, d1.p, 3, false}, {"D2H into device", d2.p, d1.p, cnrtD2H, false},
		{"H2D from device", d2.p, d1.p, cnrtH2D, false}, {"direction 6", d1.p, hp, 6, false},
	} {
		want := int32(cnrtSuccess)
		if !tc.ok {
			want = cnrtErrorArgsInvalid
		}
		require.Equal(t, want, r.Memcpy(tc.dst, tc.src, 64, tc.dir), tc.name)
	}
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.Memcpy(d1.p, hp, 65, cnrtH2D), "past the allocation")
	require.Contains(t, r.LastError(), "runs past its allocation")

	var q, q2, nt uintptr
	require.Equal(t, int32(cnrtSuccess), r.QueueCreate(&q))
	require.Equal(t, int32(cnrtSuccess), r.NotifierCreate(&nt))
	// queue BEFORE direction
	require.Equal(t, int32(cnrtSuccess), r.MemcpyAsync(d2.p, d1.p, 64, q, cnrtD2D))
	require.Equal(t, int32(cnrtSuccess), r.MemcpyAsyncV2(hp, d2.p, 64, q, cnrtD2H))
	require.Equal(t, int32(cnrtErrorInvalidResourceHandle), r.MemcpyAsync(d2.p, d1.p, 64, 0xbad0, cnrtD2D))
	require.Equal(t, int32(cnrtErrorInvalidResourceHandle), r.MemcpyAsync(d2.p, d1.p, 64, nt, cnrtD2D))
	require.Contains(t, r.LastError(), "it is a cnrtNotifier_t")
	require.Equal(t, int32(cnrtSuccess), r.MemcpyAsync(d2.p, d1.p, 64, 0, cnrtD2D), "the NULL queue is the default queue")
	require.Equal(t, int32(cnrtSuccess), r.MemsetAsync(d1.p, 0x42, 64, q))
	require.Equal(t, int32(cnrtSuccess), r.Memset(d2.p, 0x17, 8))
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.Memset(hp, 0, 8), "cnrtMemset is for device memory")
	require.Equal(t, int32(cnrtSuccess), r.QueueSync(q))
	require.Equal(t, int32(cnrtSuccess), r.QueueQuery(q))
	got := e.download(t, d1)
	require.Equal(t, strings.Repeat("\x42", 64), string(got))

	// notifiers: (notifier, queue) in place and wait; ms LAST in elapsed time
	var nt2, untimed uintptr
	require.Equal(t, int32(cnrtSuccess), r.NotifierCreate(&nt2))
	require.Equal(t, int32(cnrtSuccess), r.NotifierCreateFlags(&untimed, 0x2)) // CNRT_NOTIFIER_DISABLE_TIMING_SW
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.NotifierCreateFlags(&q2, 0x1))
	var ms float32 = -1
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.NotifierElapsedTime(nt, nt2, &ms), "never placed")
	require.Equal(t, int32(cnrtSuccess), r.PlaceNotifier(nt, q))
	time.Sleep(2 * time.Millisecond)
	require.Equal(t, int32(cnrtSuccess), r.PlaceNotifier(nt2, q))
	require.Equal(t, int32(cnrtSuccess), r.NotifierElapsedTime(nt, nt2, &ms))
	require.GreaterOrEqual(t, ms, float32(1.5))
	require.Equal(t, int32(cnrtSuccess), r.PlaceNotifier(untimed, q))
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.NotifierElapsedTime(nt, untimed, &ms))
	require.Equal(t, int32(cnrtErrorInvalidResourceHandle), r.PlaceNotifier(q, nt), "queue and notifier swapped")
	require.Equal(t, int32(cnrtSuccess), r.QueueWaitNotifier(nt, q, 0))
	require.Equal(t, int32(cnrtErrorInvalidResourceHandle), r.QueueWaitNotifier(q, nt, 0), "queue and notifier swapped")
	require.Contains(t, r.LastError(), "it is a cnrtQueue_t")
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.QueueWaitNotifier(nt, q, 1), "only CNRT_NOTIFIER_WAIT_DEFAULT")
	require.Equal(t, int32(cnrtSuccess), r.QueryNotifier(nt))
	require.Equal(t, int32(cnrtSuccess), r.WaitNotifier(nt))
	for _, h := range []uintptr{nt, nt2, untimed} {
		require.Equal(t, int32(cnrtSuccess), r.NotifierDestroy(h))
	}
	require.Equal(t, int32(cnrtErrorInvalidResourceHandle), r.NotifierDestroy(nt))
	require.Equal(t, int32(cnrtSuccess), r.QueueDestroy(q))
	require.Equal(t, int32(cnrtErrorInvalidResourceHandle), r.QueueSync(q))
	require.Equal(t, int32(cnrtErrorArgsInvalid), r.Free(pinned), "cnrtFree of pinned memory")
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(0))
}

func TestCambriconCNCLSingleRankAndArgumentChecks(t *testing.T) {
	e := cnTest(t)
	r, c := e.rt, e.ccl
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(2))
	var id cnClique
	require.Equal(t, int32(cnclSuccess), c.GetCliqueID(&id))
	require.Equal(t, 136, int(unsafe.Sizeof(id)))
	require.NotZero(t, id.Hash, "the hash is part of the id")

	var comm uintptr
	devs, ranks := []int32{2}, []int32{0}
	broken := id
	broken.Hash++
	require.Equal(t, int32(cnclArguments), c.InitComms(&comm, 1, &devs[0], &ranks[0], 1, &broken))
	require.Contains(t, c.LastError(), "hash does not match")
	shifted := cnClique{Hash: id.Hash}
	copy(shifted.Data[4:], id.Data[:124])
	require.Equal(t, int32(cnclArguments), c.InitComms(&comm, 1, &devs[0], &ranks[0], 1, &shifted))
	var nccl uniqueID // another vendor's id in a CNCL clique
	require.Equal(t, int32(ncclSuccess), testEmulators(t).nccl.GetUniqueID(&nccl))
	foreign := cnClique{}
	copy(foreign.Data[:], nccl.Internal[:])
	foreign.Hash = cnFNV(foreign.Data[:])
	require.Equal(t, int32(cnclArguments), c.InitComms(&comm, 1, &devs[0], &ranks[0], 1, &foreign))
	require.Contains(t, c.LastError(), "another vendor")
	bad := []int32{99}
	require.Equal(t, int32(cnclCnrtDevice), c.InitComms(&comm, 1, &bad[0], &ranks[0], 1, &id))
	require.Equal(t, int32(cnclArguments), c.InitComms(&comm, 1, &devs[0], &ranks[0], 0, &id), "nrank 0")

	require.Equal(t, int32(cnclSuccess), c.InitComms(&comm, 1, &devs[0], &ranks[0], 1, &id))
	var v int32
	require.Equal(t, int32(cnclSuccess), c.GetCommCount(&v, comm)) // output FIRST
	require.Equal(t, int32(1), v)
	require.Equal(t, int32(cnclSuccess), c.GetCommRank(&v, comm))
	require.Equal(t, int32(0), v)
	require.Equal(t, int32(cnclSuccess), c.GetCommDevice(&v, comm))
	require.Equal(t, int32(2), v, "the device comes from dev_list, not the current device")
	require.Equal(t, int32(cnclSuccess), c.GetCommAsyncError(comm))

	var q, other uintptr
	require.Equal(t, int32(cnrtSuccess), r.QueueCreate(&q))
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(3))
	require.Equal(t, int32(cnrtSuccess), r.QueueCreate(&other))
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(2))
	in := encodeN(dtFloat32, 10, func(i int) float64 { return float64(i) })
	send, recv := e.upload(t, in), e.malloc(t, 40)
	for dt := range numDtypes {
		if cnclTypeOf[dt] < 0 {
			continue
		}
		for op := range cnNumOps {
			require.Equal(t, int32(cnclSuccess), c.AllReduce(send.p, recv.p, uintptr(40/dtypeSize[dt]), cnclTypeOf[dt], int32(op), comm, q), "%s %s", dtypeName[dt], opName[op])
		}
	}
	require.Equal(t, in, e.download(t, recv))
	host := make([]byte, 40)
	for _, tc := range []struct {
		name string
		rc   int32
		want int32
		text string
	}{
		{"cnclInt16", c.AllReduce(send.p, recv.p, 10, cnclInt16, 0, comm, q), cnclUnsupported, "not emulated"},
		{"cnclUint16", c.AllReduce(send.p, recv.p, 10, cnclUint16, 0, comm, q), cnclUnsupported, "not emulated"},
		{"cnclInvalid", c.AllReduce(send.p, recv.p, 10, cnclInvalidDtype, 0, comm, q), cnclArguments, "invalid cnclDataType_t"},
		{"NCCL's float32 number (7)", c.AllReduce(send.p, recv.p, 10, 7, 0, comm, q), cnclArguments, "invalid cnclDataType_t 0x7"},
		{"avg (4)", c.AllReduce(send.p, recv.p, 10, 0x12, 4, comm, q), cnclArguments, "invalid cnclReduceOp_t 4"},
		{"host memory", c.AllReduce(unsafe.Pointer(&host[0]), recv.p, 10, 0x12, 0, comm, q), cnclArguments, "neither device memory"},
		{"overrun", c.AllReduce(send.p, recv.p, 11, 0x12, 0, comm, q), cnclArguments, "needs 44 bytes"},
		{"bad queue", c.AllReduce(send.p, recv.p, 10, 0x12, 0, comm, 0xbad0), cnclMluRuntime, "not a live cnrtQueue_t"},
		{"queue of another device", c.AllReduce(send.p, recv.p, 10, 0x12, 0, comm, other), cnclMluRuntime, "device 3"},
		{"bad comm", c.AllReduce(send.p, recv.p, 10, 0x12, 0, 0xbad0, q), cnclArguments, "invalid communicator"},
		{"root 1 of 1", c.Broadcast(send.p, recv.p, 10, 0x12, 1, comm, q), cnclArguments, "root"},
		{"peer 1 of 1", c.Send(send.p, 10, 0x12, 1, comm, q), cnclArguments, "peer"},
		{"group end without start", c.GroupEnd(), cnclArguments, "without a matching group start"},
	} {
		require.Equal(t, tc.want, tc.rc, tc.name)
	}
	// texts, each re-run to read its own last error
	for _, tc := range []struct {
		text string
		call func() int32
	}{
		{"not emulated", func() int32 { return c.AllReduce(send.p, recv.p, 10, cnclInt16, 0, comm, q) }},
		{"invalid cnclDataType_t 0x7", func() int32 { return c.AllReduce(send.p, recv.p, 10, 7, 0, comm, q) }},
		{"invalid cnclReduceOp_t 4", func() int32 { return c.AllReduce(send.p, recv.p, 10, 0x12, 4, comm, q) }},
		{"device 3", func() int32 { return c.AllReduce(send.p, recv.p, 10, 0x12, 0, comm, other) }},
	} {
		require.NotEqual(t, int32(cnclSuccess), tc.call())
		require.Contains(t, c.LastError(), tc.text)
	}
	require.Equal(t, int32(cnclSuccess), c.AllReduce(nil, nil, 0, 0x12, 0, comm, q), "count 0")
	require.Equal(t, int32(cnclSuccess), c.GetCommAsyncError(comm), "argument errors do not break the communicator")
	require.Equal(t, "CNCL_RET_ERR_ARGUMENTS: invalid arguments", c.GetErrorStr(cnclArguments))
	require.Equal(t, int32(cnclSuccess), c.FreeComm(comm))
	require.Equal(t, int32(cnclArguments), c.FreeComm(comm), "freed")
	r.Free(send.p)
	r.Free(recv.p)
	r.QueueDestroy(q)
	r.QueueDestroy(other)
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(0))
}

func cnFNV(b []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	return h
}

// Two communicators of one process from one cnclInitComms call (dev_list
// and rank_list of two), then one thread driving both through a group.
func TestCambriconInitCommsTwoDevicesOneThread(t *testing.T) {
	e := cnTest(t)
	r, c := e.rt, e.ccl
	var id cnClique
	require.Equal(t, int32(cnclSuccess), c.GetCliqueID(&id))
	comms := make([]uintptr, 2)
	devs, ranks := []int32{4, 5}, []int32{1, 0} // rank order differs from device order
	require.Equal(t, int32(cnclSuccess), c.InitComms(&comms[0], 2, &devs[0], &ranks[0], 2, &id))
	bufs := make([]devBuf, 2)
	for i := range comms {
		var v int32
		require.Equal(t, int32(cnclSuccess), c.GetCommRank(&v, comms[i]))
		require.Equal(t, ranks[i], v)
		require.Equal(t, int32(cnclSuccess), c.GetCommDevice(&v, comms[i]))
		require.Equal(t, devs[i], v)
		require.Equal(t, int32(cnrtSuccess), r.SetDevice(devs[i]))
		bufs[i] = e.upload(t, encodeN(dtInt32, 5, func(j int) float64 { return float64(10*i + j) }))
	}
	require.Equal(t, int32(cnclSuccess), c.GroupStart())
	for i := range comms {
		require.Equal(t, int32(cnclSuccess), c.AllReduce(bufs[i].p, bufs[i].p, 5, 0x22, 2, comms[i], 0)) // int32 max
	}
	require.Equal(t, int32(cnclSuccess), c.GroupEnd())
	want := encodeN(dtInt32, 5, func(j int) float64 { return float64(10 + j) })
	for i := range comms {
		require.Equal(t, want, e.download(t, bufs[i]))
		r.Free(bufs[i].p)
	}
	require.Equal(t, int32(cnclSuccess), c.DestroyComms(&comms[0], 2))
	require.Equal(t, int32(cnrtSuccess), r.SetDevice(0))
}

// ---------------------------------------------------------------------
// Ranks as processes
// ---------------------------------------------------------------------

const cnWorkerName = "vendorsim-cambricon" // envScenario names the scenario

func init() {
	testkit.Worker(cnWorkerName, cnWorkerMain)
}

type cnWorker struct {
	e            *cnEmulators
	r            testkit.Rank
	rank, nranks int
	id           cnClique
	comm, queue  uintptr
	out          workerOut
}

func (w *cnWorker) ok(what string, rc int32) {
	if rc != 0 {
		panic(workerAbort{fmt.Sprintf("rank %d: %s returned 0x%x: %s", w.rank, what, rc, w.e.ccl.LastError())})
	}
}

func (w *cnWorker) upload(data []byte) devBuf {
	var p unsafe.Pointer
	w.ok("cnrtMalloc", w.e.rt.Malloc(&p, uintptr(max(len(data), 1))))
	if len(data) > 0 {
		w.ok("cnrtMemcpy H2D", w.e.rt.Memcpy(p, unsafe.Pointer(&data[0]), uintptr(len(data)), cnrtH2D))
	}
	return devBuf{p, len(data)}
}

func (w *cnWorker) malloc(n int) devBuf {
	var p unsafe.Pointer
	w.ok("cnrtMalloc", w.e.rt.Malloc(&p, uintptr(n)))
	w.ok("cnrtMemset", w.e.rt.Memset(p, 0x5a, uintptr(n)))
	return devBuf{p, n}
}

func (w *cnWorker) keep(name string, b devBuf) {
	out := make([]byte, b.n)
	w.ok("cnrtMemcpy D2H", w.e.rt.Memcpy(unsafe.Pointer(&out[0]), b.p, uintptr(b.n), cnrtD2H))
	w.out.Buffers[name] = out
	w.e.rt.Free(b.p)
}

func (w *cnWorker) join() {
	var n uint32
	w.ok("cnrtGetDeviceCount", w.e.rt.GetDeviceCount(&n))
	dev := int32(w.rank) % int32(n)
	w.ok("cnrtSetDevice", w.e.rt.SetDevice(dev))
	rank := int32(w.rank)
	w.ok("cnclInitComms", w.e.ccl.InitComms(&w.comm, 1, &dev, &rank, int32(w.nranks), &w.id))
	w.ok("cnrtQueueCreate", w.e.rt.QueueCreate(&w.queue))
}

func cnWorkerMain(r testkit.Rank) (any, error) {
	w := &cnWorker{r: r, rank: r.Rank, nranks: r.N, out: newWorkerOut()}
	if len(r.ID) != int(unsafe.Sizeof(w.id)) {
		return nil, fmt.Errorf("bad clique id: %d bytes", len(r.ID))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&w.id)), len(r.ID)), r.ID)
	var err error
	if w.e, err = cnLoad(os.Getenv(envLibRoot)); err != nil {
		return nil, err
	}
	fn, ok := cnScenarios[os.Getenv(envScenario)]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q", os.Getenv(envScenario))
	}
	w.out.Fail = recoverAbort(func() { fn(w) })
	return &w.out, nil
}

var cnScenarios = map[string]func(*cnWorker){
	"colls":    cnScenarioColls,
	"exit":     cnScenarioExit,
	"mismatch": cnScenarioMismatch,
}

const cnCount = 29

func cnScenarioColls(w *cnWorker) {
	w.join()
	c, me, n := w.e.ccl, w.rank, w.nranks
	for dt := range numDtypes {
		ct := cnclTypeOf[dt]
		if ct < 0 {
			continue
		}
		es := dtypeSize[dt]
		for op := range cnNumOps {
			in := encodeN(dt, cnCount, func(i int) float64 { return inputValue(dt, op, me, n, i) })
			send, recv := w.upload(in), w.malloc(len(in))
			w.ok("cnclAllReduce", c.AllReduce(send.p, recv.p, cnCount, ct, int32(op), w.comm, w.queue))
			w.keep(fmt.Sprintf("ar/%d/%d", dt, op), recv)
			w.e.rt.Free(send.p)
			rin := encodeN(dt, n*cnCount, func(i int) float64 { return inputValue(dt, op, me, n, i) })
			buf := w.upload(rin)
			w.ok("cnclReduceScatter in place", c.ReduceScatter(buf.p, buf.at(me*cnCount*es), cnCount, ct, int32(op), w.comm, w.queue))
			w.keep(fmt.Sprintf("rs/%d/%d", dt, op), buf)
		}
		for root := range n {
			in := encodeN(dt, cnCount, func(i int) float64 { return inputValue(dt, opSum, me, n, i) })
			send, recv := w.upload(in), w.malloc(len(in))
			w.ok("cnclReduce", c.Reduce(send.p, recv.p, cnCount, ct, opSum, int32(root), w.comm, w.queue))
			w.keep(fmt.Sprintf("reduce/%d/%d", dt, root), recv)
			w.e.rt.Free(send.p)
			recv = w.malloc(cnCount * es)
			var sp unsafe.Pointer
			if me == root {
				send = w.upload(encodeN(dt, cnCount, func(i int) float64 { return a2aValue(root, 0, i) }))
				sp = send.p
			}
			w.ok("cnclBroadcast", c.Broadcast(sp, recv.p, cnCount, ct, int32(root), w.comm, w.queue))
			w.keep(fmt.Sprintf("bcast/%d/%d", dt, root), recv)
			if me == root {
				w.e.rt.Free(send.p)
			}
		}
		mine := encodeN(dt, cnCount, func(i int) float64 { return a2aValue(me, 0, i) })
		send, recv := w.upload(mine), w.malloc(n*cnCount*es)
		w.ok("cnclAllGather", c.AllGather(send.p, recv.p, cnCount, ct, w.comm, w.queue))
		w.keep(fmt.Sprintf("ag/%d", dt), recv)
		w.e.rt.Free(send.p)
		ain := encodeN(dt, n*cnCount, func(i int) float64 { return a2aValue(me, i/cnCount, i%cnCount) })
		send, recv = w.upload(ain), w.malloc(len(ain))
		w.ok("cnclAlltoAll", c.AlltoAll(send.p, recv.p, cnCount, ct, w.comm, w.queue))
		w.keep(fmt.Sprintf("a2a/%d", dt), recv)
		w.e.rt.Free(send.p)
	}
	// grouped ring, each message many times the 4 KiB mailbox
	next, prev := (me+1)%n, (me+n-1)%n
	send, recv := w.upload(p2pPattern(me, next, 0, 100_000)), w.malloc(100_000)
	w.ok("cnclGroupStart", c.GroupStart())
	w.ok("cnclSend", c.Send(send.p, 25_000, 0x12, int32(next), w.comm, w.queue))
	w.ok("cnclRecv", c.Recv(recv.p, 25_000, 0x12, int32(prev), w.comm, w.queue))
	w.ok("cnclGroupEnd", c.GroupEnd())
	w.keep("ring", recv)
	w.e.rt.Free(send.p)
	w.ok("cnrtQueueDestroy", w.e.rt.QueueDestroy(w.queue))
	w.ok("cnclFreeComm", c.FreeComm(w.comm))
}

// Rank 1 leaves right after init without freeing anything; rank 0's next
// collective must fail soon, with CNCL's socket error.
func cnScenarioExit(w *cnWorker) {
	w.join()
	if w.rank == 1 {
		_ = w.r.Save(&w.out)
		os.Exit(0)
	}
	time.Sleep(100 * time.Millisecond)
	buf := w.malloc(64)
	start := time.Now()
	w.out.Codes["rc"] = int(w.e.ccl.AllReduce(buf.p, buf.p, 16, 0x12, 0, w.comm, w.queue))
	w.out.Numbers["seconds"] = time.Since(start).Seconds()
	w.out.Texts["err"] = w.e.ccl.LastError()
	w.out.Codes["async"] = int(w.e.ccl.GetCommAsyncError(w.comm))
	w.ok("cnclAbortComm", w.e.ccl.AbortComm(w.comm))
}

// Ranks call AllReduce with different counts.
func cnScenarioMismatch(w *cnWorker) {
	w.join()
	count := 10 + 2*w.rank
	buf := w.malloc(count * 4)
	w.out.Codes["rc"] = int(w.e.ccl.AllReduce(buf.p, buf.p, uintptr(count), 0x12, 0, w.comm, w.queue))
	w.out.Texts["err"] = w.e.ccl.LastError()
	w.out.Codes["async"] = int(w.e.ccl.GetCommAsyncError(w.comm))
	w.out.Codes["after"] = int(w.e.ccl.AllReduce(buf.p, buf.p, 1, 0x12, 0, w.comm, w.queue))
	w.ok("cnclAbortComm", w.e.ccl.AbortComm(w.comm))
}

func cnRunRanks(t *testing.T, scenario string, n int, env ...string) []workerOut {
	t.Helper()
	e := cnTest(t)
	var id cnClique
	require.Equal(t, int32(cnclSuccess), e.ccl.GetCliqueID(&id))
	res := testkit.Run[workerOut](t, testkit.Spec{Worker: cnWorkerName, N: n, ID: unsafe.Slice((*byte)(unsafe.Pointer(&id)), unsafe.Sizeof(id)),
		Env: append([]string{envScenario + "=" + scenario, envLibRoot + "=" + testkit.RepoRoot(t)}, env...)})
	outs := make([]workerOut, n)
	for r := range n {
		outs[r] = res[r].Report
		require.Empty(t, outs[r].Fail, "rank %d:\n%s", r, res[r].Log)
	}
	return outs
}

func TestCambriconCollectivesAcrossProcesses(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			outs := cnRunRanks(t, "colls", n, EnvSlotBytes+"=256", EnvMailboxBytes+"=4096", EnvTimeout+"=30")
			for dt := range numDtypes {
				if cnclTypeOf[dt] < 0 {
					continue
				}
				es := dtypeSize[dt]
				for op := range cnNumOps {
					reduced := func(i int) float64 {
						vals := make([]float64, n)
						for r := range vals {
							vals[r] = inputValue(dt, op, r, n, i)
						}
						return reduceExpect(dt, op, vals)
					}
					want := encodeN(dt, cnCount, reduced)
					for me, o := range outs {
						require.Equal(t, want, o.Buffers[fmt.Sprintf("ar/%d/%d", dt, op)], "allreduce rank %d %s %s", me, dtypeName[dt], opName[op])
						rs := encodeN(dt, cnCount, func(j int) float64 { return reduced(me*cnCount + j) })
						require.Equal(t, rs, o.Buffers[fmt.Sprintf("rs/%d/%d", dt, op)][me*cnCount*es:(me+1)*cnCount*es], "reducescatter rank %d %s %s", me, dtypeName[dt], opName[op])
					}
				}
				sum := encodeN(dt, cnCount, func(i int) float64 {
					vals := make([]float64, n)
					for r := range vals {
						vals[r] = inputValue(dt, opSum, r, n, i)
					}
					return reduceExpect(dt, opSum, vals)
				})
				ag := encodeN(dt, n*cnCount, func(i int) float64 { return a2aValue(i/cnCount, 0, i%cnCount) })
				for me, o := range outs {
					for root := range n {
						got := o.Buffers[fmt.Sprintf("reduce/%d/%d", dt, root)]
						if me == root {
							require.Equal(t, sum, got, "reduce root %d %s", root, dtypeName[dt])
						} else {
							require.Equal(t, strings.Repeat("\x5a", cnCount*es), string(got), "non-root %d must not write", me)
						}
						bc := encodeN(dt, cnCount, func(i int) float64 { return a2aValue(root, 0, i) })
						require.Equal(t, bc, o.Buffers[fmt.Sprintf("bcast/%d/%d", dt, root)], "broadcast root %d rank %d %s", root, me, dtypeName[dt])
					}
					require.Equal(t, ag, o.Buffers[fmt.Sprintf("ag/%d", dt)], "allgather rank %d %s", me, dtypeName[dt])
					a2a := encodeN(dt, n*cnCount, func(i int) float64 { return a2aValue(i/cnCount, me, i%cnCount) })
					require.Equal(t, a2a, o.Buffers[fmt.Sprintf("a2a/%d", dt)], "alltoall rank %d %s", me, dtypeName[dt])
				}
			}
			for me, o := range outs {
				require.Equal(t, p2pPattern((me+n-1)%n, me, 0, 100_000), o.Buffers["ring"], "ring rank %d", me)
			}
		})
	}
}

func TestCambriconDepartedRankAndMismatch(t *testing.T) {
	t.Run("departed rank", func(t *testing.T) {
		o := cnRunRanks(t, "exit", 2, EnvTimeout+"=2")[0]
		t.Log(o.Texts["err"])
		require.Contains(t, []int{cnclSysSocket, cnclSystem}, o.Codes["rc"], o.Texts["err"])
		require.Contains(t, o.Texts["err"], "rank 1")
		require.Less(t, o.Numbers["seconds"], 10.0, "the error must come near the 2 s deadline, not hang")
		require.Equal(t, cnclAsyncError, o.Codes["async"])
	})
	t.Run("mismatched collectives", func(t *testing.T) {
		for r, o := range cnRunRanks(t, "mismatch", 2, EnvTimeout+"=10") {
			require.Equal(t, cnclArguments, o.Codes["rc"], "rank %d", r)
			require.Contains(t, o.Texts["err"], "does not match", "rank %d", r)
			require.Equal(t, cnclAsyncError, o.Codes["async"], "rank %d: cnclGetCommAsyncError returns the status", r)
			require.Equal(t, cnclArguments, o.Codes["after"], "rank %d: the communicator is unusable now", r)
		}
	})
}
