package vendorsim

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

var (
	emuOnce sync.Once
	emu     *emulators
	emuErr  error
)

// testEmulators loads the built libraries into the test process once. It
// also pins the test's goroutine to its OS thread until the test ends: the
// current device, CUDA's last error and NCCL's group state are per thread,
// in the emulator as in the real libraries.
func testEmulators(t *testing.T) *emulators {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	emuOnce.Do(func() {
		var libs NvidiaLibs
		libs, emuErr = FindNvidia(".")
		if emuErr == nil {
			emu, emuErr = loadEmulators(libs)
		}
	})
	requireBuilt(t, emuErr)
	return emu
}

// expectedDevices is what this process should see (the test environment
// may set FLAGCX_VENDORSIM_DEVICES).
func expectedDevices() int {
	if v, err := strconv.Atoi(os.Getenv(EnvDevices)); err == nil {
		return v
	}
	return 8
}

// requireBuilt: err from loading the make-built emulators is nil; when
// they are not built the test skips (and fails under CI).
func requireBuilt(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrNotBuilt) {
		testkit.Skip(t, testkit.Built, "%v", err)
	}
	require.NoError(t, err)
}

func TestFindNvidiaNeedsBuild(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o600))
	_, err := FindNvidia(filepath.Join(dir))
	require.ErrorIs(t, err, ErrNotBuilt)
	require.Contains(t, err.Error(), "run make first")

	libs, err := FindNvidia(".")
	requireBuilt(t, err)
	require.Contains(t, strings.Join(libs.Env(), " "), EnvNvidiaNCCL+"="+libs.NCCL)
}

func TestCUDADevicesAndVersions(t *testing.T) {
	c := testEmulators(t).cuda
	var n, dev, v int32
	require.Equal(t, int32(cudaSuccess), c.GetDeviceCount(&n))
	require.Equal(t, int32(expectedDevices()), n)
	require.Equal(t, int32(cudaErrorInvalidDevice), c.SetDevice(n))
	require.Equal(t, int32(cudaErrorInvalidDevice), c.SetDevice(-1))
	require.Equal(t, int32(cudaErrorInvalidDevice), c.GetLastError())
	require.Equal(t, int32(cudaSuccess), c.GetLastError(), "cudaGetLastError resets")
	require.Equal(t, int32(cudaSuccess), c.SetDevice(n-1))
	require.Equal(t, int32(cudaSuccess), c.GetDevice(&dev))
	require.Equal(t, n-1, dev)
	require.Equal(t, int32(cudaSuccess), c.SetDevice(0))
	require.Equal(t, int32(cudaSuccess), c.RuntimeGetVersion(&v))
	require.Equal(t, int32(13000), v)
	require.Equal(t, int32(cudaSuccess), c.DriverGetVersion(&v))
	require.GreaterOrEqual(t, v, int32(13000))
	require.Equal(t, int32(cudaSuccess), c.DeviceSynchronize())

	bus := make([]byte, 16)
	require.Equal(t, int32(cudaSuccess), c.DeviceGetPCIBusID(&bus[0], 16, 1))
	require.Equal(t, "0000:11:00.0", cString(bus))
	require.Equal(t, int32(cudaErrorInvalidDevice), c.DeviceGetPCIBusID(&bus[0], 16, n))
	require.Equal(t, "invalid argument", c.GetErrorString(cudaErrorInvalidValue))
	require.Equal(t, "no error", c.GetErrorString(cudaSuccess))
	c.GetLastError()
}

func TestCUDAPointerAttributes(t *testing.T) {
	c := testEmulators(t).cuda
	require.Equal(t, int32(cudaSuccess), c.SetDevice(1))
	defer c.SetDevice(0)
	var d, h, hp unsafe.Pointer
	require.Equal(t, int32(cudaSuccess), c.Malloc(&d, 1000))
	require.Equal(t, int32(cudaSuccess), c.HostAlloc(&h, 100, 0x2))
	require.Equal(t, int32(cudaSuccess), c.MallocHost(&hp, 100))
	plain := make([]byte, 64)

	var a pointerAttributes
	require.Equal(t, int32(cudaSuccess), c.PointerGetAttributes(&a, d))
	require.Equal(t, pointerAttributes{Type: 2, Device: 1, DevicePointer: d}, a)
	inside := unsafe.Add(d, 999)
	require.Equal(t, int32(cudaSuccess), c.PointerGetAttributes(&a, inside))
	require.Equal(t, int32(2), a.Type, "a pointer inside an allocation resolves to it")
	require.Equal(t, inside, a.DevicePointer)
	require.Equal(t, int32(cudaSuccess), c.PointerGetAttributes(&a, unsafe.Add(d, 1000)))
	require.NotEqual(t, int32(2), a.Type, "one past the end is not the allocation")
	for _, p := range []unsafe.Pointer{h, hp} {
		require.Equal(t, int32(cudaSuccess), c.PointerGetAttributes(&a, p))
		require.Equal(t, pointerAttributes{Type: 1, Device: 1, DevicePointer: p, HostPointer: p}, a)
	}
	require.Equal(t, int32(cudaSuccess), c.PointerGetAttributes(&a, unsafe.Pointer(&plain[0])))
	require.Equal(t, int32(0), a.Type)
	require.Nil(t, a.DevicePointer)
	require.Equal(t, int32(cudaErrorInvalidValue), c.PointerGetAttributes(nil, d))

	require.Equal(t, int32(cudaErrorInvalidValue), c.Free(h), "cudaFree of pinned host memory")
	require.Equal(t, int32(cudaErrorInvalidValue), c.FreeHost(d), "cudaFreeHost of device memory")
	require.Equal(t, int32(cudaErrorInvalidValue), c.Free(inside), "cudaFree inside an allocation")
	require.Equal(t, int32(cudaErrorInvalidValue), c.HostAlloc(&h, 10, 0x100))
	require.Equal(t, int32(cudaSuccess), c.Free(d))
	require.Equal(t, int32(cudaSuccess), c.FreeHost(h))
	require.Equal(t, int32(cudaSuccess), c.FreeHost(hp))
	require.Equal(t, int32(cudaSuccess), c.Free(nil))
	require.Equal(t, int32(cudaSuccess), c.PointerGetAttributes(&a, d))
	require.Equal(t, int32(0), a.Type, "freed memory is unregistered again")
	c.GetLastError()
}

func TestCUDAMemcpyChecksKinds(t *testing.T) {
	c := testEmulators(t).cuda
	var d1, d2, pinned unsafe.Pointer
	require.Equal(t, int32(cudaSuccess), c.Malloc(&d1, 64))
	require.Equal(t, int32(cudaSuccess), c.Malloc(&d2, 64))
	require.Equal(t, int32(cudaSuccess), c.MallocHost(&pinned, 64))
	defer c.Free(d1)
	defer c.Free(d2)
	defer c.FreeHost(pinned)
	h1, h2 := make([]byte, 64), make([]byte, 64)
	for i := range h1 {
		h1[i] = byte(i + 1)
	}
	hp1, hp2 := unsafe.Pointer(&h1[0]), unsafe.Pointer(&h2[0])

	cases := []struct {
		name     string
		dst, src unsafe.Pointer
		n        uintptr
		kind     int32
		want     int32
	}{
		{"H2D", d1, hp1, 64, memcpyHostToDevice, cudaSuccess},
		{"D2D", d2, d1, 64, memcpyDeviceToDevice, cudaSuccess},
		{"D2H", hp2, d2, 64, memcpyDeviceToHost, cudaSuccess},
		{"H2H", hp2, hp1, 64, memcpyHostToHost, cudaSuccess},
		{"pinned H2D", d1, pinned, 64, memcpyHostToDevice, cudaSuccess},
		{"pinned D2H", pinned, d1, 64, memcpyDeviceToHost, cudaSuccess},
		{"Default any way", hp2, d1, 64, memcpyDefault, cudaSuccess},
		{"H2D into host", hp2, hp1, 64, memcpyHostToDevice, cudaErrorInvalidValue},
		{"H2D from device", d1, d2, 64, memcpyHostToDevice, cudaErrorInvalidValue},
		{"D2H from host", hp2, hp1, 64, memcpyDeviceToHost, cudaErrorInvalidValue},
		{"D2H into device", d1, d2, 64, memcpyDeviceToHost, cudaErrorInvalidValue},
		{"D2D from host", d1, hp1, 64, memcpyDeviceToDevice, cudaErrorInvalidValue},
		{"H2H with device", hp2, d1, 64, memcpyHostToHost, cudaErrorInvalidValue},
		{"swapped H2D", hp2, d1, 64, memcpyHostToDevice, cudaErrorInvalidValue},
		{"past the allocation", d1, hp1, 65, memcpyHostToDevice, cudaErrorInvalidValue},
		{"bad kind", d1, hp1, 8, 5, cudaErrorInvalidValue},
		{"zero bytes", nil, nil, 0, memcpyHostToDevice, cudaSuccess},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, c.Memcpy(tc.dst, tc.src, tc.n, tc.kind), tc.name)
		require.Equal(t, tc.want, c.GetLastError(), tc.name)
		require.Equal(t, tc.want, c.MemcpyAsync(tc.dst, tc.src, tc.n, tc.kind, 0), tc.name+" async")
		c.GetLastError()
	}
	// the round trip H2D, D2D, D2H carried the data
	require.Equal(t, int32(cudaSuccess), c.Memcpy(d1, hp1, 64, memcpyHostToDevice))
	require.Equal(t, int32(cudaSuccess), c.Memcpy(d2, d1, 64, memcpyDeviceToDevice))
	clear(h2)
	require.Equal(t, int32(cudaSuccess), c.Memcpy(hp2, d2, 64, memcpyDeviceToHost))
	require.Equal(t, h1, h2)

	// memset needs device or pinned memory, within the allocation
	var s uintptr
	require.Equal(t, int32(cudaSuccess), c.StreamCreateWithFlags(&s, 0))
	defer c.StreamDestroy(s)
	require.Equal(t, int32(cudaSuccess), c.MemsetAsync(d1, 0x42, 64, s))
	require.Equal(t, int32(cudaSuccess), c.Memcpy(hp2, d1, 64, memcpyDeviceToHost))
	require.Equal(t, byte(0x42), h2[63])
	require.Equal(t, int32(cudaErrorInvalidValue), c.MemsetAsync(hp1, 0, 8, s))
	require.Equal(t, int32(cudaErrorInvalidValue), c.MemsetAsync(d1, 0, 65, s))
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.MemsetAsync(d1, 0, 8, 0xdead))
	c.GetLastError()
}

func TestCUDAStreamsAndEvents(t *testing.T) {
	c := testEmulators(t).cuda
	var s, start, end, noTiming uintptr
	require.Equal(t, int32(cudaSuccess), c.StreamCreateWithFlags(&s, 1))
	require.Equal(t, int32(cudaErrorInvalidValue), c.StreamCreateWithFlags(&s, 4))
	require.Equal(t, int32(cudaSuccess), c.EventCreateWithFlags(&start, 0))
	require.Equal(t, int32(cudaSuccess), c.EventCreateWithFlags(&end, 1))
	require.Equal(t, int32(cudaSuccess), c.EventCreateWithFlags(&noTiming, 2))
	require.Equal(t, int32(cudaErrorInvalidValue), c.EventCreateWithFlags(new(uintptr), 4), "interprocess needs disable-timing")
	require.Equal(t, int32(cudaErrorInvalidValue), c.EventCreateWithFlags(new(uintptr), 8))

	var ms float32
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.EventElapsedTime(&ms, start, end), "never recorded")
	require.Equal(t, int32(cudaSuccess), c.EventQuery(start), "an unrecorded event is complete")
	require.Equal(t, int32(cudaSuccess), c.EventRecord(start, s))
	require.Equal(t, int32(cudaSuccess), c.StreamQuery(s))
	require.Equal(t, int32(cudaSuccess), c.EventRecord(end, s))
	require.Equal(t, int32(cudaSuccess), c.EventSynchronize(end))
	require.Equal(t, int32(cudaSuccess), c.EventQuery(end))
	require.Equal(t, int32(cudaSuccess), c.EventElapsedTime(&ms, start, end))
	require.GreaterOrEqual(t, ms, float32(0))
	require.Equal(t, int32(cudaSuccess), c.EventRecord(noTiming, 0))
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.EventElapsedTime(&ms, start, noTiming))
	require.Equal(t, int32(cudaErrorInvalidValue), c.EventElapsedTime(nil, start, end))
	require.Equal(t, int32(cudaSuccess), c.StreamWaitEvent(s, end, 0))
	require.Equal(t, int32(cudaSuccess), c.StreamSynchronize(s))

	// the special handles are streams too, but cannot be destroyed
	for _, special := range []uintptr{0, 1, 2} {
		require.Equal(t, int32(cudaSuccess), c.StreamSynchronize(special))
		require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.StreamDestroy(special))
	}
	require.Equal(t, int32(cudaSuccess), c.EventDestroy(noTiming))
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.EventDestroy(noTiming), "double destroy")
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.EventRecord(noTiming, s))
	require.Equal(t, int32(cudaSuccess), c.StreamDestroy(s))
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.StreamSynchronize(s), "destroyed stream")
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.StreamQuery(0xbad))
	require.Equal(t, int32(cudaErrorInvalidResourceHandle), c.EventRecord(start, s))
	require.Equal(t, int32(cudaSuccess), c.EventDestroy(start))
	require.Equal(t, int32(cudaSuccess), c.EventDestroy(end))
	c.GetLastError()
}

func TestNVMLDevices(t *testing.T) {
	e := testEmulators(t)
	m := e.nvml
	var n uint32
	require.Equal(t, int32(nvmlUninitialized), m.GetCount(&n), "before nvmlInit")
	require.Equal(t, int32(nvmlUninitialized), m.Shutdown())
	require.Equal(t, int32(nvmlSuccess), m.Init())
	defer func() { require.Equal(t, int32(nvmlSuccess), m.Shutdown()) }()
	require.Equal(t, int32(nvmlSuccess), m.GetCount(&n))
	require.Equal(t, uint32(expectedDevices()), n)
	require.GreaterOrEqual(t, n, uint32(2), "this test needs two devices")

	uuids := map[string]bool{}
	for i := uint32(0); i < n; i++ {
		var d uintptr
		require.Equal(t, int32(nvmlSuccess), m.GetHandleByIndex(i, &d))
		name := make([]byte, 96)
		require.Equal(t, int32(nvmlSuccess), m.GetName(d, &name[0], 96))
		require.Equal(t, "vendorsim emulated NVIDIA device "+strconv.Itoa(int(i)), cString(name))
		require.Equal(t, int32(nvmlInsufficientSize), m.GetName(d, &name[0], 5))
		uuid := make([]byte, 96)
		require.Equal(t, int32(nvmlSuccess), m.GetUUID(d, &uuid[0], 96))
		require.True(t, strings.HasPrefix(cString(uuid), "GPU-vendorsim-"), cString(uuid))
		uuids[cString(uuid)] = true

		// the CUDA bus id finds the same device
		bus := make([]byte, 16)
		require.Equal(t, int32(cudaSuccess), e.cuda.DeviceGetPCIBusID(&bus[0], 16, int32(i)))
		var byBus uintptr
		require.Equal(t, int32(nvmlSuccess), m.GetHandleByPciBusID(&bus[0], &byBus))
		require.Equal(t, d, byBus)
		long := []byte("0000" + strings.ToLower(cString(bus)) + "\x00") // NVML's 8-digit domain form
		require.Equal(t, int32(nvmlSuccess), m.GetHandleByPciBusID(&long[0], &byBus))
		require.Equal(t, d, byBus)
		var pci nvmlPciInfo
		require.Equal(t, int32(nvmlSuccess), m.GetPciInfo(d, &pci))
		require.Equal(t, cString(bus), cString(pci.BusIDLegacy[:]))
		require.Equal(t, "0000"+cString(bus), cString(pci.BusID[:]))

		var mem nvmlMemory
		require.Equal(t, int32(nvmlSuccess), m.GetMemoryInfo(d, &mem))
		require.Equal(t, uint64(80<<30), mem.Total)
		require.Equal(t, mem.Total, mem.Free+mem.Used)

		var st int32
		require.Equal(t, int32(nvmlSuccess), m.GetNvLinkState(d, 17, &st))
		require.Equal(t, int32(1), st)
		require.Equal(t, int32(nvmlInvalidArgument), m.GetNvLinkState(d, 18, &st))
	}
	require.Len(t, uuids, int(n))

	var d0, d1, dLast uintptr
	require.Equal(t, int32(nvmlSuccess), m.GetHandleByIndex(0, &d0))
	require.Equal(t, int32(nvmlSuccess), m.GetHandleByIndex(1, &d1))
	require.Equal(t, int32(nvmlSuccess), m.GetHandleByIndex(n-1, &dLast))
	for idx := int32(0); idx < 5; idx++ {
		var st int32 = -1
		require.Equal(t, int32(nvmlSuccess), m.GetP2PStatus(d0, d1, idx, &st))
		require.Equal(t, int32(0), st, "P2P index %d", idx)
	}
	var st int32
	require.Equal(t, int32(nvmlInvalidArgument), m.GetP2PStatus(d0, d1, 5, &st))
	var level int32
	require.Equal(t, int32(nvmlSuccess), m.GetTopologyCommonAncestor(d0, d0, &level))
	require.Equal(t, int32(0), level)
	require.Equal(t, int32(nvmlSuccess), m.GetTopologyCommonAncestor(d0, d1, &level))
	require.Equal(t, int32(10), level, "pairs share a PCIe switch")
	if n >= 4 {
		require.Equal(t, int32(nvmlSuccess), m.GetTopologyCommonAncestor(d0, dLast, &level))
		require.Equal(t, int32(50), level, "the two halves are on different sockets")
	}

	var none uintptr
	require.Equal(t, int32(nvmlInvalidArgument), m.GetHandleByIndex(n, &none))
	bad := []byte("0000:ff:00.0\x00")
	require.Equal(t, int32(nvmlNotFound), m.GetHandleByPciBusID(&bad[0], &none))
	require.Equal(t, int32(nvmlInvalidArgument), m.GetName(0xdead, &bad[0], 10), "garbage handle")
	require.Equal(t, "Insufficient Size", m.ErrorString(nvmlInsufficientSize))
	require.Equal(t, "Uninitialized", m.ErrorString(nvmlUninitialized))
}

func TestNVMLTopologyFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		topo    string
		p2p     []int // READ, WRITE, NVLINK, ATOMICS, PROP
		nvlink  int   // return code of nvmlDeviceGetNvLinkState
		devices int
	}{
		{"nvlink", []int{0, 0, 0, 0, 0}, nvmlSuccess, 3},
		{"pcie", []int{0, 0, 5, 0, 0}, nvmlNotSupported, 3},
		{"none", []int{5, 5, 5, 5, 5}, nvmlNotSupported, 2},
	} {
		t.Run(tc.topo, func(t *testing.T) {
			runs := runRanks(t, "nvml", 1, []string{
				EnvTopology + "=" + tc.topo, EnvDevices + "=" + strconv.Itoa(tc.devices),
			}, nil, nil)
			o := runs[0].out
			require.Equal(t, float64(tc.devices), o.Numbers["cudaCount"])
			require.Equal(t, float64(tc.devices), o.Numbers["nvmlCount"])
			for idx, want := range tc.p2p {
				require.Equal(t, want, o.Codes["p2p/"+strconv.Itoa(idx)], "P2P index %d", idx)
			}
			require.Equal(t, tc.nvlink, o.Codes["nvlink"])
			require.Equal(t, 10, o.Codes["level01"])
		})
	}
	t.Run("no devices", func(t *testing.T) {
		runs := runRanks(t, "nvml", 1, []string{EnvDevices + "=0"}, nil, nil)
		require.Equal(t, 100, runs[0].out.Codes["cudaCount"], "cudaErrorNoDevice")
		require.Equal(t, float64(0), runs[0].out.Numbers["nvmlCount"])
	})
}
