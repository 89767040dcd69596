package vendorsim

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Result codes, enum values and structs of the emulated NVIDIA APIs, as the
// tests see them through purego. Pointers into emulated device memory are
// kept as unsafe.Pointer (they are C memory, never moved by Go).

const (
	cudaSuccess                    = 0
	cudaErrorInvalidValue          = 1
	cudaErrorInvalidDevice         = 101
	cudaErrorInvalidResourceHandle = 400

	memcpyHostToHost     = 0
	memcpyHostToDevice   = 1
	memcpyDeviceToHost   = 2
	memcpyDeviceToDevice = 3
	memcpyDefault        = 4

	ncclSuccess         = 0
	ncclUnhandledCuda   = 1
	ncclSystemError     = 2
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
	ncclRemoteError     = 6

	nvmlSuccess          = 0
	nvmlUninitialized    = 1
	nvmlInvalidArgument  = 2
	nvmlNotSupported     = 3
	nvmlNotFound         = 6
	nvmlInsufficientSize = 7
)

type pointerAttributes struct {
	Type          int32
	Device        int32
	DevicePointer unsafe.Pointer
	HostPointer   unsafe.Pointer
}

type uniqueID struct {
	Internal [128]byte
}

type nvmlMemory struct {
	Total, Free, Used uint64
}

type nvmlPciInfo struct {
	BusIDLegacy    [16]byte
	Domain         uint32
	Bus            uint32
	Device         uint32
	PciDeviceID    uint32
	PciSubSystemID uint32
	BusID          [32]byte
}

type cudaAPI struct {
	GetDeviceCount        func(*int32) int32
	SetDevice             func(int32) int32
	GetDevice             func(*int32) int32
	DeviceSynchronize     func() int32
	DriverGetVersion      func(*int32) int32
	RuntimeGetVersion     func(*int32) int32
	DeviceGetPCIBusID     func(*byte, int32, int32) int32
	Malloc                func(*unsafe.Pointer, uintptr) int32
	Free                  func(unsafe.Pointer) int32
	HostAlloc             func(*unsafe.Pointer, uintptr, uint32) int32
	MallocHost            func(*unsafe.Pointer, uintptr) int32
	FreeHost              func(unsafe.Pointer) int32
	PointerGetAttributes  func(*pointerAttributes, unsafe.Pointer) int32
	Memcpy                func(dst, src unsafe.Pointer, n uintptr, kind int32) int32
	MemcpyAsync           func(dst, src unsafe.Pointer, n uintptr, kind int32, stream uintptr) int32
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

type ncclAPI struct {
	GetVersion         func(*int32) int32
	GetUniqueID        func(*uniqueID) int32
	CommInitRank       func(*uintptr, int32, uniqueID, int32) int32
	CommInitRankConfig func(*uintptr, int32, uniqueID, int32, unsafe.Pointer) int32
	CommFinalize       func(uintptr) int32
	CommDestroy        func(uintptr) int32
	CommAbort          func(uintptr) int32
	CommGetAsyncError  func(uintptr, *int32) int32
	CommCount          func(uintptr, *int32) int32
	CommCuDevice       func(uintptr, *int32) int32
	CommUserRank       func(uintptr, *int32) int32
	AllReduce          func(send, recv unsafe.Pointer, count uintptr, dt, op int32, comm, stream uintptr) int32
	Reduce             func(send, recv unsafe.Pointer, count uintptr, dt, op, root int32, comm, stream uintptr) int32
	Broadcast          func(send, recv unsafe.Pointer, count uintptr, dt, root int32, comm, stream uintptr) int32
	AllGather          func(send, recv unsafe.Pointer, count uintptr, dt int32, comm, stream uintptr) int32
	ReduceScatter      func(send, recv unsafe.Pointer, count uintptr, dt, op int32, comm, stream uintptr) int32
	AlltoAll           func(send, recv unsafe.Pointer, count uintptr, dt int32, comm, stream uintptr) int32
	Send               func(buf unsafe.Pointer, count uintptr, dt, peer int32, comm, stream uintptr) int32
	Recv               func(buf unsafe.Pointer, count uintptr, dt, peer int32, comm, stream uintptr) int32
	GroupStart         func() int32
	GroupEnd           func() int32
	GetErrorString     func(int32) string
	GetLastError       func(uintptr) string
}

type nvmlAPI struct {
	Init                      func() int32
	Shutdown                  func() int32
	GetCount                  func(*uint32) int32
	GetHandleByIndex          func(uint32, *uintptr) int32
	GetHandleByPciBusID       func(*byte, *uintptr) int32
	GetName                   func(uintptr, *byte, uint32) int32
	GetUUID                   func(uintptr, *byte, uint32) int32
	GetPciInfo                func(uintptr, *nvmlPciInfo) int32
	GetMemoryInfo             func(uintptr, *nvmlMemory) int32
	GetP2PStatus              func(uintptr, uintptr, int32, *int32) int32
	GetTopologyCommonAncestor func(uintptr, uintptr, *int32) int32
	GetNvLinkState            func(uintptr, uint32, *int32) int32
	ErrorString               func(int32) string
}

type emulators struct {
	libs NvidiaLibs
	cuda cudaAPI
	nccl ncclAPI
	nvml nvmlAPI
	// handles, for reading the exported data symbols
	hCuda, hNCCL, hNVML uintptr
}

// bind looks a symbol up first (RegisterLibFunc would panic on a missing
// one) and binds it to the Go function pointed to by fptr.
func bind(h uintptr, name string, fptr any) error {
	sym, err := purego.Dlsym(h, name)
	if err != nil {
		return fmt.Errorf("symbol %s: %w", name, err)
	}
	purego.RegisterFunc(fptr, sym)
	return nil
}

func loadEmulators(l NvidiaLibs) (*emulators, error) {
	e := &emulators{libs: l}
	var err error
	if e.hCuda, err = purego.Dlopen(l.Cudart, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	if e.hNCCL, err = purego.Dlopen(l.NCCL, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	if e.hNVML, err = purego.Dlopen(l.NVML, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	c, n, m := &e.cuda, &e.nccl, &e.nvml
	binds := []struct {
		h    uintptr
		name string
		f    any
	}{
		{e.hCuda, "cudaGetDeviceCount", &c.GetDeviceCount},
		{e.hCuda, "cudaSetDevice", &c.SetDevice},
		{e.hCuda, "cudaGetDevice", &c.GetDevice},
		{e.hCuda, "cudaDeviceSynchronize", &c.DeviceSynchronize},
		{e.hCuda, "cudaDriverGetVersion", &c.DriverGetVersion},
		{e.hCuda, "cudaRuntimeGetVersion", &c.RuntimeGetVersion},
		{e.hCuda, "cudaDeviceGetPCIBusId", &c.DeviceGetPCIBusID},
		{e.hCuda, "cudaMalloc", &c.Malloc},
		{e.hCuda, "cudaFree", &c.Free},
		{e.hCuda, "cudaHostAlloc", &c.HostAlloc},
		{e.hCuda, "cudaMallocHost", &c.MallocHost},
		{e.hCuda, "cudaFreeHost", &c.FreeHost},
		{e.hCuda, "cudaPointerGetAttributes", &c.PointerGetAttributes},
		{e.hCuda, "cudaMemcpy", &c.Memcpy},
		{e.hCuda, "cudaMemcpyAsync", &c.MemcpyAsync},
		{e.hCuda, "cudaMemsetAsync", &c.MemsetAsync},
		{e.hCuda, "cudaStreamCreateWithFlags", &c.StreamCreateWithFlags},
		{e.hCuda, "cudaStreamSynchronize", &c.StreamSynchronize},
		{e.hCuda, "cudaStreamQuery", &c.StreamQuery},
		{e.hCuda, "cudaStreamDestroy", &c.StreamDestroy},
		{e.hCuda, "cudaStreamWaitEvent", &c.StreamWaitEvent},
		{e.hCuda, "cudaEventCreateWithFlags", &c.EventCreateWithFlags},
		{e.hCuda, "cudaEventRecord", &c.EventRecord},
		{e.hCuda, "cudaEventSynchronize", &c.EventSynchronize},
		{e.hCuda, "cudaEventQuery", &c.EventQuery},
		{e.hCuda, "cudaEventDestroy", &c.EventDestroy},
		{e.hCuda, "cudaEventElapsedTime", &c.EventElapsedTime},
		{e.hCuda, "cudaGetLastError", &c.GetLastError},
		{e.hCuda, "cudaGetErrorString", &c.GetErrorString},

		{e.hNCCL, "ncclGetVersion", &n.GetVersion},
		{e.hNCCL, "ncclGetUniqueId", &n.GetUniqueID},
		{e.hNCCL, "ncclCommInitRank", &n.CommInitRank},
		{e.hNCCL, "ncclCommInitRankConfig", &n.CommInitRankConfig},
		{e.hNCCL, "ncclCommFinalize", &n.CommFinalize},
		{e.hNCCL, "ncclCommDestroy", &n.CommDestroy},
		{e.hNCCL, "ncclCommAbort", &n.CommAbort},
		{e.hNCCL, "ncclCommGetAsyncError", &n.CommGetAsyncError},
		{e.hNCCL, "ncclCommCount", &n.CommCount},
		{e.hNCCL, "ncclCommCuDevice", &n.CommCuDevice},
		{e.hNCCL, "ncclCommUserRank", &n.CommUserRank},
		{e.hNCCL, "ncclAllReduce", &n.AllReduce},
		{e.hNCCL, "ncclReduce", &n.Reduce},
		{e.hNCCL, "ncclBroadcast", &n.Broadcast},
		{e.hNCCL, "ncclAllGather", &n.AllGather},
		{e.hNCCL, "ncclReduceScatter", &n.ReduceScatter},
		{e.hNCCL, "ncclAlltoAll", &n.AlltoAll},
		{e.hNCCL, "ncclSend", &n.Send},
		{e.hNCCL, "ncclRecv", &n.Recv},
		{e.hNCCL, "ncclGroupStart", &n.GroupStart},
		{e.hNCCL, "ncclGroupEnd", &n.GroupEnd},
		{e.hNCCL, "ncclGetErrorString", &n.GetErrorString},
		{e.hNCCL, "ncclGetLastError", &n.GetLastError},

		{e.hNVML, "nvmlInit_v2", &m.Init},
		{e.hNVML, "nvmlShutdown", &m.Shutdown},
		{e.hNVML, "nvmlDeviceGetCount_v2", &m.GetCount},
		{e.hNVML, "nvmlDeviceGetHandleByIndex_v2", &m.GetHandleByIndex},
		{e.hNVML, "nvmlDeviceGetHandleByPciBusId_v2", &m.GetHandleByPciBusID},
		{e.hNVML, "nvmlDeviceGetName", &m.GetName},
		{e.hNVML, "nvmlDeviceGetUUID", &m.GetUUID},
		{e.hNVML, "nvmlDeviceGetPciInfo_v3", &m.GetPciInfo},
		{e.hNVML, "nvmlDeviceGetMemoryInfo", &m.GetMemoryInfo},
		{e.hNVML, "nvmlDeviceGetP2PStatus", &m.GetP2PStatus},
		{e.hNVML, "nvmlDeviceGetTopologyCommonAncestor", &m.GetTopologyCommonAncestor},
		{e.hNVML, "nvmlDeviceGetNvLinkState", &m.GetNvLinkState},
		{e.hNVML, "nvmlErrorString", &m.ErrorString},
	}
	for _, b := range binds {
		if err := bind(b.h, b.name, b.f); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// dataSymbol returns the address of an exported data symbol as a pointer.
func dataSymbol(h uintptr, name string) (unsafe.Pointer, error) {
	addr, err := purego.Dlsym(h, name)
	if err != nil {
		return nil, err
	}
	// Reinterpret the uintptr's storage rather than converting it, which
	// is how a C address obtained as an integer becomes a pointer without
	// tripping vet's unsafeptr check.
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr)), nil
}

// cString reads a NUL-terminated string from a Go byte buffer.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// ---- emulated device memory helpers ----

// devBuf is a cudaMalloc'd buffer.
type devBuf struct {
	p unsafe.Pointer
	n int
}

func (b devBuf) bytes() []byte {
	if b.n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.p), b.n)
}

// at returns the address off bytes into the buffer.
func (b devBuf) at(off int) unsafe.Pointer { return unsafe.Add(b.p, off) }

func (e *emulators) malloc(n int) (devBuf, error) {
	var p unsafe.Pointer
	if rc := e.cuda.Malloc(&p, uintptr(n)); rc != cudaSuccess {
		return devBuf{}, fmt.Errorf("cudaMalloc(%d) = %d", n, rc)
	}
	return devBuf{p, n}, nil
}

// upload allocates device memory holding data (through cudaMemcpy, so the
// copy path is exercised too).
func (e *emulators) upload(data []byte) (devBuf, error) {
	b, err := e.malloc(len(data))
	if err != nil || len(data) == 0 {
		return b, err
	}
	if rc := e.cuda.Memcpy(b.p, unsafe.Pointer(&data[0]), uintptr(len(data)), memcpyHostToDevice); rc != cudaSuccess {
		return b, fmt.Errorf("cudaMemcpy H2D = %d", rc)
	}
	return b, nil
}

func (e *emulators) download(b devBuf) ([]byte, error) {
	out := make([]byte, b.n)
	if b.n == 0 {
		return out, nil
	}
	if rc := e.cuda.Memcpy(unsafe.Pointer(&out[0]), b.p, uintptr(b.n), memcpyDeviceToHost); rc != cudaSuccess {
		return nil, fmt.Errorf("cudaMemcpy D2H = %d", rc)
	}
	return out, nil
}
