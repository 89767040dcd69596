package loader

import (
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/cmem"
)

// Go mirrors of the C structs of sdk/include/flagcx_plugin.h, ABI v1 to v5. Every
// field is declared at its C offset (no implicit padding: each struct is
// ordered so that Go and C agree, and TestABILayout checks every offset
// against the C compiler). The c tag names the C field; ",optional" marks
// entries a plugin may leave NULL.

type libraryV1 struct {
	Role     uintptr `c:"role"`
	EnvVar   uintptr `c:"envVar"`
	Sonames  uintptr `c:"sonames"`
	Optional int32   `c:"optional"`
	Reserved int32   `c:"reserved"`
}

type libraryStatusV1 struct {
	Loaded   int32     `c:"loaded"`
	Emulated int32     `c:"emulated"`
	Path     [512]byte `c:"path"`
	Version  [64]byte  `c:"version"`
	Error    [512]byte `c:"error"`
}

const maxLibraries = 4 // FLAGCX_PLUGIN_MAX_LIBRARIES

type pluginInfoV1 struct {
	Emulated     int32                         `c:"emulated"`
	DataTypeMask uint32                        `c:"dataTypeMask"`
	RedOpMask    uint32                        `c:"redOpMask"`
	NumLibraries int32                         `c:"numLibraries"`
	Libraries    [maxLibraries]libraryStatusV1 `c:"libraries"`
}

type deviceInfoV1 struct {
	TotalMemory uint64    `c:"totalMemory"`
	NumaNode    int32     `c:"numaNode"`
	Reserved    int32     `c:"reserved"`
	Name        [128]byte `c:"name"`
	UUID        [96]byte  `c:"uuid"`
	PCIBusID    [32]byte  `c:"pciBusId"`
}

type linkInfoV1 struct {
	Type        int32    `c:"type"`
	FabricLinks int32    `c:"fabricLinks"`
	Name        [32]byte `c:"name"`
}

type deviceV1 struct {
	GetDeviceCount    uintptr `c:"getDeviceCount"`
	SetDevice         uintptr `c:"setDevice"`
	GetDeviceInfo     uintptr `c:"getDeviceInfo"`
	GetLinkInfo       uintptr `c:"getLinkInfo,optional"`
	DeviceMalloc      uintptr `c:"deviceMalloc"`
	DeviceFree        uintptr `c:"deviceFree"`
	HostMalloc        uintptr `c:"hostMalloc"`
	HostFree          uintptr `c:"hostFree"`
	PointerKind       uintptr `c:"pointerKind,optional"`
	MemCopy           uintptr `c:"memCopy"`
	MemSet            uintptr `c:"memSet"`
	StreamCreate      uintptr `c:"streamCreate"`
	StreamDestroy     uintptr `c:"streamDestroy"`
	StreamSynchronize uintptr `c:"streamSynchronize"`
	StreamQuery       uintptr `c:"streamQuery,optional"`
	StreamWaitEvent   uintptr `c:"streamWaitEvent"`
	EventCreate       uintptr `c:"eventCreate"`
	EventDestroy      uintptr `c:"eventDestroy"`
	EventRecord       uintptr `c:"eventRecord"`
	EventQuery        uintptr `c:"eventQuery,optional"`
	EventSynchronize  uintptr `c:"eventSynchronize"`
	EventElapsedTime  uintptr `c:"eventElapsedTime,optional"`
}

// deviceV2 is deviceV1 followed by v2's entries (C has no embedding: the
// fields repeat, and TestABILayout checks them all).
type deviceV2 struct {
	GetDeviceCount    uintptr `c:"getDeviceCount"`
	SetDevice         uintptr `c:"setDevice"`
	GetDeviceInfo     uintptr `c:"getDeviceInfo"`
	GetLinkInfo       uintptr `c:"getLinkInfo,optional"`
	DeviceMalloc      uintptr `c:"deviceMalloc"`
	DeviceFree        uintptr `c:"deviceFree"`
	HostMalloc        uintptr `c:"hostMalloc"`
	HostFree          uintptr `c:"hostFree"`
	PointerKind       uintptr `c:"pointerKind,optional"`
	MemCopy           uintptr `c:"memCopy"`
	MemSet            uintptr `c:"memSet"`
	StreamCreate      uintptr `c:"streamCreate"`
	StreamDestroy     uintptr `c:"streamDestroy"`
	StreamSynchronize uintptr `c:"streamSynchronize"`
	StreamQuery       uintptr `c:"streamQuery,optional"`
	StreamWaitEvent   uintptr `c:"streamWaitEvent"`
	EventCreate       uintptr `c:"eventCreate"`
	EventDestroy      uintptr `c:"eventDestroy"`
	EventRecord       uintptr `c:"eventRecord"`
	EventQuery        uintptr `c:"eventQuery,optional"`
	EventSynchronize  uintptr `c:"eventSynchronize"`
	EventElapsedTime  uintptr `c:"eventElapsedTime,optional"`
	HostRegister      uintptr `c:"hostRegister,optional"`
	HostUnregister    uintptr `c:"hostUnregister,optional"`
}

// deviceV3 is deviceV2 followed by v3's entry.
type deviceV3 struct {
	GetDeviceCount    uintptr `c:"getDeviceCount"`
	SetDevice         uintptr `c:"setDevice"`
	GetDeviceInfo     uintptr `c:"getDeviceInfo"`
	GetLinkInfo       uintptr `c:"getLinkInfo,optional"`
	DeviceMalloc      uintptr `c:"deviceMalloc"`
	DeviceFree        uintptr `c:"deviceFree"`
	HostMalloc        uintptr `c:"hostMalloc"`
	HostFree          uintptr `c:"hostFree"`
	PointerKind       uintptr `c:"pointerKind,optional"`
	MemCopy           uintptr `c:"memCopy"`
	MemSet            uintptr `c:"memSet"`
	StreamCreate      uintptr `c:"streamCreate"`
	StreamDestroy     uintptr `c:"streamDestroy"`
	StreamSynchronize uintptr `c:"streamSynchronize"`
	StreamQuery       uintptr `c:"streamQuery,optional"`
	StreamWaitEvent   uintptr `c:"streamWaitEvent"`
	EventCreate       uintptr `c:"eventCreate"`
	EventDestroy      uintptr `c:"eventDestroy"`
	EventRecord       uintptr `c:"eventRecord"`
	EventQuery        uintptr `c:"eventQuery,optional"`
	EventSynchronize  uintptr `c:"eventSynchronize"`
	EventElapsedTime  uintptr `c:"eventElapsedTime,optional"`
	HostRegister      uintptr `c:"hostRegister,optional"`
	HostUnregister    uintptr `c:"hostUnregister,optional"`
	MemGetInfo        uintptr `c:"memGetInfo,optional"`
}

// deviceV4 is deviceV3 followed by v4's entry.
type deviceV4 struct {
	GetDeviceCount    uintptr `c:"getDeviceCount"`
	SetDevice         uintptr `c:"setDevice"`
	GetDeviceInfo     uintptr `c:"getDeviceInfo"`
	GetLinkInfo       uintptr `c:"getLinkInfo,optional"`
	DeviceMalloc      uintptr `c:"deviceMalloc"`
	DeviceFree        uintptr `c:"deviceFree"`
	HostMalloc        uintptr `c:"hostMalloc"`
	HostFree          uintptr `c:"hostFree"`
	PointerKind       uintptr `c:"pointerKind,optional"`
	MemCopy           uintptr `c:"memCopy"`
	MemSet            uintptr `c:"memSet"`
	StreamCreate      uintptr `c:"streamCreate"`
	StreamDestroy     uintptr `c:"streamDestroy"`
	StreamSynchronize uintptr `c:"streamSynchronize"`
	StreamQuery       uintptr `c:"streamQuery,optional"`
	StreamWaitEvent   uintptr `c:"streamWaitEvent"`
	EventCreate       uintptr `c:"eventCreate"`
	EventDestroy      uintptr `c:"eventDestroy"`
	EventRecord       uintptr `c:"eventRecord"`
	EventQuery        uintptr `c:"eventQuery,optional"`
	EventSynchronize  uintptr `c:"eventSynchronize"`
	EventElapsedTime  uintptr `c:"eventElapsedTime,optional"`
	HostRegister      uintptr `c:"hostRegister,optional"`
	HostUnregister    uintptr `c:"hostUnregister,optional"`
	MemGetInfo        uintptr `c:"memGetInfo,optional"`
	ReduceLocal       uintptr `c:"reduceLocal,optional"`
}

// deviceV5 is deviceV4 followed by v5's entry.
type deviceV5 struct {
	GetDeviceCount    uintptr `c:"getDeviceCount"`
	SetDevice         uintptr `c:"setDevice"`
	GetDeviceInfo     uintptr `c:"getDeviceInfo"`
	GetLinkInfo       uintptr `c:"getLinkInfo,optional"`
	DeviceMalloc      uintptr `c:"deviceMalloc"`
	DeviceFree        uintptr `c:"deviceFree"`
	HostMalloc        uintptr `c:"hostMalloc"`
	HostFree          uintptr `c:"hostFree"`
	PointerKind       uintptr `c:"pointerKind,optional"`
	MemCopy           uintptr `c:"memCopy"`
	MemSet            uintptr `c:"memSet"`
	StreamCreate      uintptr `c:"streamCreate"`
	StreamDestroy     uintptr `c:"streamDestroy"`
	StreamSynchronize uintptr `c:"streamSynchronize"`
	StreamQuery       uintptr `c:"streamQuery,optional"`
	StreamWaitEvent   uintptr `c:"streamWaitEvent"`
	EventCreate       uintptr `c:"eventCreate"`
	EventDestroy      uintptr `c:"eventDestroy"`
	EventRecord       uintptr `c:"eventRecord"`
	EventQuery        uintptr `c:"eventQuery,optional"`
	EventSynchronize  uintptr `c:"eventSynchronize"`
	EventElapsedTime  uintptr `c:"eventElapsedTime,optional"`
	HostRegister      uintptr `c:"hostRegister,optional"`
	HostUnregister    uintptr `c:"hostUnregister,optional"`
	MemGetInfo        uintptr `c:"memGetInfo,optional"`
	ReduceLocal       uintptr `c:"reduceLocal,optional"`
	RelayReduce       uintptr `c:"relayReduce,optional"`
}

// relayV5 is flagcxRelay_v5_t, what one relayReduce does.
type relayV5 struct {
	Src        uintptr                `c:"src"`
	Window     uintptr                `c:"window"`
	Bytes      uint64                 `c:"bytes"`
	Landed     uintptr                `c:"landed"`
	Go         uintptr                `c:"go"`
	Value      uint64                 `c:"value"`
	Srcs       [MaxReduceSrcs]uintptr `c:"srcs"`
	NSrcs      int32                  `c:"nsrcs"`
	DType      int32                  `c:"dtype"`
	Op         int32                  `c:"op"`
	AvgDivisor int32                  `c:"avgDivisor"`
	Count      uint64                 `c:"count"`
	Dst        uintptr                `c:"dst"`
}

type cclV1 struct {
	GetUniqueIDBytes  uintptr `c:"getUniqueIdBytes"`
	GetUniqueID       uintptr `c:"getUniqueId"`
	CommInitRank      uintptr `c:"commInitRank"`
	CommDestroy       uintptr `c:"commDestroy"`
	CommAbort         uintptr `c:"commAbort,optional"`
	CommGetAsyncError uintptr `c:"commGetAsyncError,optional"`
	AllReduce         uintptr `c:"allReduce"`
	Reduce            uintptr `c:"reduce"`
	Broadcast         uintptr `c:"broadcast"`
	AllGather         uintptr `c:"allGather"`
	ReduceScatter     uintptr `c:"reduceScatter"`
	AlltoAll          uintptr `c:"alltoAll,optional"`
	AlltoAllv         uintptr `c:"alltoAllv,optional"`
	Gather            uintptr `c:"gather,optional"`
	Scatter           uintptr `c:"scatter,optional"`
	Send              uintptr `c:"send"`
	Recv              uintptr `c:"recv"`
	GroupStart        uintptr `c:"groupStart"`
	GroupEnd          uintptr `c:"groupEnd"`
	GetErrorString    uintptr `c:"getErrorString,optional"`
}

type tableV1 struct {
	Size         uint32   `c:"size"`
	ABIVersion   uint32   `c:"abiVersion"`
	Name         uintptr  `c:"name"`
	Vendor       uintptr  `c:"vendor"`
	Version      uintptr  `c:"version"`
	Caps         uint64   `c:"caps"`
	Libraries    uintptr  `c:"libraries"`
	Init         uintptr  `c:"init"`
	Fini         uintptr  `c:"fini,optional"`
	GetLastError uintptr  `c:"getLastError"`
	Device       deviceV1 `c:"device"`
	CCL          cclV1    `c:"ccl"`
}

// tableV2 is ABI v2's table.
type tableV2 struct {
	Size         uint32   `c:"size"`
	ABIVersion   uint32   `c:"abiVersion"`
	Name         uintptr  `c:"name"`
	Vendor       uintptr  `c:"vendor"`
	Version      uintptr  `c:"version"`
	Caps         uint64   `c:"caps"`
	Libraries    uintptr  `c:"libraries"`
	Init         uintptr  `c:"init"`
	Fini         uintptr  `c:"fini,optional"`
	GetLastError uintptr  `c:"getLastError"`
	Device       deviceV2 `c:"device"`
	CCL          cclV1    `c:"ccl"`
}

// tableV3 is ABI v3's table.
type tableV3 struct {
	Size         uint32   `c:"size"`
	ABIVersion   uint32   `c:"abiVersion"`
	Name         uintptr  `c:"name"`
	Vendor       uintptr  `c:"vendor"`
	Version      uintptr  `c:"version"`
	Caps         uint64   `c:"caps"`
	Libraries    uintptr  `c:"libraries"`
	Init         uintptr  `c:"init"`
	Fini         uintptr  `c:"fini,optional"`
	GetLastError uintptr  `c:"getLastError"`
	Device       deviceV3 `c:"device"`
	CCL          cclV1    `c:"ccl"`
}

// tableV4 is ABI v4's table.
type tableV4 struct {
	Size         uint32   `c:"size"`
	ABIVersion   uint32   `c:"abiVersion"`
	Name         uintptr  `c:"name"`
	Vendor       uintptr  `c:"vendor"`
	Version      uintptr  `c:"version"`
	Caps         uint64   `c:"caps"`
	Libraries    uintptr  `c:"libraries"`
	Init         uintptr  `c:"init"`
	Fini         uintptr  `c:"fini,optional"`
	GetLastError uintptr  `c:"getLastError"`
	Device       deviceV4 `c:"device"`
	CCL          cclV1    `c:"ccl"`
}

// tableV5 is the newest table: the loader keeps every plugin's table in
// this form (older tables adapted: their newer entries NULL).
type tableV5 struct {
	Size         uint32   `c:"size"`
	ABIVersion   uint32   `c:"abiVersion"`
	Name         uintptr  `c:"name"`
	Vendor       uintptr  `c:"vendor"`
	Version      uintptr  `c:"version"`
	Caps         uint64   `c:"caps"`
	Libraries    uintptr  `c:"libraries"`
	Init         uintptr  `c:"init"`
	Fini         uintptr  `c:"fini,optional"`
	GetLastError uintptr  `c:"getLastError"`
	Device       deviceV5 `c:"device"`
	CCL          cclV1    `c:"ccl"`
}

// fromV4 adapts a v4 table: the same fields, v5's entry NULL.
func fromV4(t tableV4) tableV5 {
	out := tableV5{Size: t.Size, ABIVersion: t.ABIVersion, Name: t.Name, Vendor: t.Vendor, Version: t.Version,
		Caps: t.Caps, Libraries: t.Libraries, Init: t.Init, Fini: t.Fini, GetLastError: t.GetLastError, CCL: t.CCL}
	// deviceV5 starts with deviceV4's fields, in order (TestABILayout).
	*(*deviceV4)(unsafe.Pointer(&out.Device)) = t.Device
	return out
}

// fromV3 adapts a v3 table: the same fields, v4's entry NULL.
func fromV3(t tableV3) tableV4 {
	out := tableV4{Size: t.Size, ABIVersion: t.ABIVersion, Name: t.Name, Vendor: t.Vendor, Version: t.Version,
		Caps: t.Caps, Libraries: t.Libraries, Init: t.Init, Fini: t.Fini, GetLastError: t.GetLastError, CCL: t.CCL}
	// deviceV4 starts with deviceV3's fields, in order (TestABILayout).
	*(*deviceV3)(unsafe.Pointer(&out.Device)) = t.Device
	return out
}

// fromV2 adapts a v2 table to v3: the same fields, v3's entry NULL.
func fromV2(t tableV2) tableV3 {
	out := tableV3{Size: t.Size, ABIVersion: t.ABIVersion, Name: t.Name, Vendor: t.Vendor, Version: t.Version,
		Caps: t.Caps, Libraries: t.Libraries, Init: t.Init, Fini: t.Fini, GetLastError: t.GetLastError, CCL: t.CCL}
	// deviceV3 starts with deviceV2's fields, in order (TestABILayout).
	*(*deviceV2)(unsafe.Pointer(&out.Device)) = t.Device
	return out
}

// fromV1 adapts a v1 table to v3: the same fields, v2's and v3's entries NULL.
func fromV1(t tableV1) tableV3 { return fromV2(fromV1toV2(t)) }

// fromV1toV2 adapts a v1 table to v2: the same fields, v2's entries NULL.
func fromV1toV2(t tableV1) tableV2 {
	out := tableV2{Size: t.Size, ABIVersion: t.ABIVersion, Name: t.Name, Vendor: t.Vendor, Version: t.Version,
		Caps: t.Caps, Libraries: t.Libraries, Init: t.Init, Fini: t.Fini, GetLastError: t.GetLastError, CCL: t.CCL}
	// deviceV2 starts with deviceV1's fields, in order (TestABILayout).
	*(*deviceV1)(unsafe.Pointer(&out.Device)) = t.Device
	return out
}

// tableHeader is the start shared by every table version: enough to learn
// which version and size a symbol claims before reading further.
type tableHeader struct {
	Size       uint32
	ABIVersion uint32
}

// HostSlice views n bytes of C memory at ptr (pinned memory from
// HostMalloc) as a Go slice without copying. The slice is valid until the
// memory is freed; the garbage collector never owns it.
func HostSlice(ptr uintptr, n int) []byte {
	if ptr == 0 || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cmem.Ptr(ptr)), n)
}
