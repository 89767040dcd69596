package loader

import (
	"fmt"
	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// MemcpyKind is a copy direction, numbered as FlagCX's (not CUDA's).
type MemcpyKind int32

const (
	HostToDevice   MemcpyKind = 0
	DeviceToHost   MemcpyKind = 1
	DeviceToDevice MemcpyKind = 2
)

func (k MemcpyKind) String() string {
	switch k {
	case HostToDevice:
		return "host-to-device"
	case DeviceToHost:
		return "device-to-host"
	case DeviceToDevice:
		return "device-to-device"
	}
	return fmt.Sprintf("memcpykind(%d)", int32(k))
}

// MemoryKind is what the plugin's runtime knows about an address.
type MemoryKind int32

const (
	MemUnknown    MemoryKind = iota // the runtime cannot tell
	MemHost                         // ordinary (pageable) host memory
	MemHostPinned                   // page-locked host memory
	MemDevice                       // device memory
	MemManaged                      // unified/managed memory
)

var memoryKindNames = []string{"unknown memory", "pageable host memory", "pinned host memory", "device memory", "managed memory"}

func (k MemoryKind) String() string {
	if k < 0 || int(k) >= len(memoryKindNames) {
		return fmt.Sprintf("memorykind(%d)", int32(k))
	}
	return memoryKindNames[k]
}

// LinkType is how two local devices reach each other, best first.
type LinkType int32

const (
	LinkUnknown LinkType = iota
	LinkSelf
	LinkFabric // vendor fabric: NVLink, XPU Link, MLU-Link...
	LinkSameSwitch
	LinkHostBridge
	LinkNumaNode
	LinkSystem
)

var linkTypeNames = []string{"unknown", "self", "fabric", "same PCIe switch", "host bridge", "same NUMA node", "system"}

func (t LinkType) String() string {
	if t < 0 || int(t) >= len(linkTypeNames) {
		return fmt.Sprintf("link(%d)", int32(t))
	}
	return linkTypeNames[t]
}

// Stream and Event are the vendor's handles (0 is the NULL stream:
// synchronous copies).
type (
	Stream uintptr
	Event  uintptr
)

// DeviceInfo describes one device.
type DeviceInfo struct {
	Index       int
	Name        string
	UUID        string // "" when unknown
	PCIBusID    string // "0000:3b:00.0"
	TotalMemory uint64 // bytes; 0 when unknown
	NUMANode    int    // -1 when unknown
}

// LinkInfo is how one device reaches another.
type LinkInfo struct {
	Type        LinkType
	FabricLinks int    // number of fabric links (NVLinks) when Type is LinkFabric
	Name        string // vendor's short label: "NV18", "PIX", "PHB", "SYS", "X"
}

func (p *Plugin) needDevice(entry string) error {
	if p.Caps&CapDevice == 0 {
		return p.errorf(entry, sdk.NotSupported, "the plugin has no device runtime")
	}
	if !p.Initialized() {
		return p.errorf(entry, sdk.InvalidUsage, "call Init first")
	}
	return nil
}

// DeviceCount is the number of devices the vendor runtime sees.
func (p *Plugin) DeviceCount() (int, error) {
	if err := p.needDevice("getDeviceCount"); err != nil {
		return 0, err
	}
	var n int32
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return int(n), p.result("getDeviceCount", p.fn.getDeviceCount(&n))
}

// SetDevice sets the calling OS thread's current device. Goroutines move
// between threads: lock the goroutine (runtime.LockOSThread) first if the
// setting must last. The other entries take the device explicitly.
func (p *Plugin) SetDevice(dev int) error {
	if err := p.needDevice("setDevice"); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return p.result("setDevice", p.fn.setDevice(int32(dev)))
}

// DeviceInfo describes device dev.
func (p *Plugin) DeviceInfo(dev int) (DeviceInfo, error) {
	if err := p.needDevice("getDeviceInfo"); err != nil {
		return DeviceInfo{}, err
	}
	var ci deviceInfoV1
	runtime.LockOSThread()
	err := p.result("getDeviceInfo", p.fn.getDeviceInfo(int32(dev), &ci))
	runtime.UnlockOSThread()
	if err != nil {
		return DeviceInfo{}, err
	}
	return DeviceInfo{Index: dev, Name: cmem.String(ci.Name[:]), UUID: cmem.String(ci.UUID[:]), PCIBusID: cmem.String(ci.PCIBusID[:]),
		TotalMemory: ci.TotalMemory, NUMANode: int(ci.NumaNode)}, nil
}

// MemInfo is device dev's free and total memory in bytes (cudaMemGetInfo's
// semantics: free counts every process's allocations; the plugin sets dev
// current itself). A plugin without memGetInfo (ABI v1/v2 tables, or a
// vendor runtime without the call) answers an error wrapping
// sdk.ErrNotSupported.
func (p *Plugin) MemInfo(dev int) (free, total uint64, err error) {
	if err := p.needDevice("memGetInfo"); err != nil {
		return 0, 0, err
	}
	if p.fn.memGetInfo == nil {
		return 0, 0, p.unsupported("memGetInfo")
	}
	var f, t uintptr
	runtime.LockOSThread()
	err = p.result("memGetInfo", p.fn.memGetInfo(int32(dev), &f, &t))
	runtime.UnlockOSThread()
	if err != nil {
		return 0, 0, err
	}
	return uint64(f), uint64(t), nil
}

// Link says how device a reaches device b. A plugin without getLinkInfo
// answers LinkUnknown with an error wrapping sdk.ErrNotSupported.
func (p *Plugin) Link(a, b int) (LinkInfo, error) {
	unknown := LinkInfo{Type: LinkUnknown, Name: "unknown"}
	if err := p.needDevice("getLinkInfo"); err != nil {
		return unknown, err
	}
	if p.fn.getLinkInfo == nil {
		return unknown, p.unsupported("getLinkInfo")
	}
	var cl linkInfoV1
	runtime.LockOSThread()
	err := p.result("getLinkInfo", p.fn.getLinkInfo(int32(a), int32(b), &cl))
	runtime.UnlockOSThread()
	if err != nil {
		return unknown, err
	}
	return LinkInfo{Type: LinkType(cl.Type), FabricLinks: int(cl.FabricLinks), Name: cmem.String(cl.Name[:])}, nil
}

// DeviceMalloc allocates bytes of device memory on dev.
func (p *Plugin) DeviceMalloc(dev, bytes int) (uintptr, error) {
	if err := p.needDevice("deviceMalloc"); err != nil {
		return 0, err
	}
	if bytes < 0 {
		return 0, p.errorf("deviceMalloc", sdk.InvalidArgument, "negative size %d", bytes)
	}
	var ptr uintptr
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return ptr, p.result("deviceMalloc", p.fn.deviceMalloc(int32(dev), &ptr, uintptr(bytes)))
}

// DeviceFree frees memory from DeviceMalloc.
func (p *Plugin) DeviceFree(ptr uintptr) error {
	if err := p.needDevice("deviceFree"); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return p.result("deviceFree", p.fn.deviceFree(ptr))
}

// HostMalloc allocates pinned host memory (view it with HostSlice).
func (p *Plugin) HostMalloc(bytes int) (uintptr, error) {
	if err := p.needDevice("hostMalloc"); err != nil {
		return 0, err
	}
	if bytes < 0 {
		return 0, p.errorf("hostMalloc", sdk.InvalidArgument, "negative size %d", bytes)
	}
	var ptr uintptr
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return ptr, p.result("hostMalloc", p.fn.hostMalloc(&ptr, uintptr(bytes)))
}

// CanRegisterHost reports whether the plugin registers existing host
// memory with its runtime (ABI v2's hostRegister and hostUnregister).
func (p *Plugin) CanRegisterHost() bool {
	return p.Caps&CapDevice != 0 && p.t.Device.HostRegister != 0 && p.t.Device.HostUnregister != 0
}

// HostRegister page-locks n bytes of host memory at ptr (page-aligned; any
// mapping, shared memory included) and makes it usable for async copies
// on every device, as HostMalloc's memory is. A v1 plugin, or one without
// the entry, returns an error wrapping sdk.ErrNotSupported.
func (p *Plugin) HostRegister(ptr uintptr, n int) error {
	if err := p.needDevice("hostRegister"); err != nil {
		return err
	}
	if p.t.Device.HostRegister == 0 {
		return p.errorf("hostRegister", sdk.NotSupported, "plugin ABI v%d without hostRegister: it cannot register host memory (ABI v2 can: sdk/README.md)", p.ABIVersion)
	}
	if n <= 0 || ptr == 0 {
		return p.errorf("hostRegister", sdk.InvalidArgument, "range %#x+%d is empty", ptr, n)
	}
	return p.sysHandles("hostRegister", p.t.Device.HostRegister, ptr, uintptr(n))
}

// MaxReduceSrcs is the most sources one ReduceLocal folds
// (FLAGCX_REDUCE_MAX_SRCS).
const MaxReduceSrcs = 8

// CanReduceLocal reports whether the plugin reduces device buffers itself
// (ABI v4's reduceLocal).
func (p *Plugin) CanReduceLocal() bool { return p.Caps&CapDevice != 0 && p.t.Device.ReduceLocal != 0 }

// reduceSrcs holds the source array a ReduceLocal hands to C: heap memory,
// which the garbage collector never moves, reused across calls.
var reduceSrcs = sync.Pool{New: func() any { return new([MaxReduceSrcs]uintptr) }}

// ReduceLocal enqueues on s, on device dev, dst = srcs[0] op srcs[1] op ...
// element by element for count elements of dt, folded left to right in
// the data type (Avg: the sum divided by avgDivisor), by the rules of the
// reduceLocal entry in sdk/include/flagcx_plugin.h, which are the host
// engine's. A plugin without the entry (ABI v3 or older, or NULL) returns
// an error wrapping sdk.ErrNotSupported.
func (p *Plugin) ReduceLocal(dev int, dst uintptr, srcs []uintptr, count int, dt sdk.DataType, op sdk.RedOp, avgDivisor int, s Stream) error {
	if err := p.needDevice("reduceLocal"); err != nil {
		return err
	}
	if p.t.Device.ReduceLocal == 0 {
		return p.errorf("reduceLocal", sdk.NotSupported, "plugin ABI v%d without reduceLocal: its clusters reduce on the host (ABI v4 can: sdk/README.md)", p.ABIVersion)
	}
	switch {
	case len(srcs) < 1 || len(srcs) > MaxReduceSrcs:
		return p.errorf("reduceLocal", sdk.InvalidArgument, "%d sources; one call folds 1 to %d", len(srcs), MaxReduceSrcs)
	case count < 0 || !dt.Valid() || !op.Valid() || avgDivisor < 1:
		return p.errorf("reduceLocal", sdk.InvalidArgument, "count %d, data type %d, op %d, avg divisor %d", count, dt, op, avgDivisor)
	}
	arr := reduceSrcs.Get().(*[MaxReduceSrcs]uintptr)
	n := copy(arr[:], srcs)
	err := p.sys("reduceLocal", p.t.Device.ReduceLocal, uintptr(dev), dst, uintptr(unsafe.Pointer(arr)), uintptr(n), uintptr(count),
		uintptr(dt), uintptr(op), uintptr(avgDivisor), uintptr(s))
	runtime.KeepAlive(arr)
	reduceSrcs.Put(arr)
	return err
}

// RelayAbort is the bit the host sets in a relay's go word, beside a
// call's value, when it gives up (FLAGCX_RELAY_ABORT): the device stops
// without writing the call's output, in that call and in every earlier
// one on the same words still waiting. RelayDone is the bit the device sets
// in the landed word, beside the value, once it is done with host memory
// (FLAGCX_RELAY_DONE).
const (
	RelayAbort = uint64(1) << 63
	RelayDone  = uint64(1) << 62
)

// Relay is what one RelayReduce does (flagcxRelay_v5_t): put Bytes of
// device memory Src in host memory Window, store Value to *Landed, wait
// until *Go holds Value (or RelayAbort beside Value or more), fold Srcs into Dst by
// ReduceLocal's rules, and store Value|RelayDone to *Landed. Window,
// Landed, Go and the host sources are memory registered with HostRegister.
type Relay struct {
	Src, Window uintptr
	Bytes       int
	Landed, Go  uintptr
	Value       uint64
	Srcs        []uintptr
	Dst         uintptr
	Count       int
	DType       sdk.DataType
	Op          sdk.RedOp
	AvgDivisor  int
}

// CanRelay reports whether the plugin has ABI v5's relayReduce entry
// (whether it relays is RelayReduce's answer to an empty relay).
func (p *Plugin) CanRelay() bool { return p.Caps&CapDevice != 0 && p.t.Device.RelayReduce != 0 }

// relayArgs holds the flagcxRelay_v5_t a RelayReduce hands to C: heap
// memory, which the garbage collector never moves, reused across calls.
var relayArgs = sync.Pool{New: func() any { return new(relayV5) }}

// RelayReduce enqueues r on s, on device dev, by the rules of the
// relayReduce entry in sdk/include/flagcx_plugin.h. An empty relay (no
// Bytes, no Count) enqueues nothing and answers whether the plugin
// relays. A plugin without the entry (ABI v4 or older, or NULL) returns
// an error wrapping sdk.ErrNotSupported.
func (p *Plugin) RelayReduce(dev int, r *Relay, s Stream) error {
	if err := p.needDevice("relayReduce"); err != nil {
		return err
	}
	if p.t.Device.RelayReduce == 0 {
		return p.errorf("relayReduce", sdk.NotSupported, "plugin ABI v%d without relayReduce: its small calls copy through the host (ABI v5 can: sdk/README.md)", p.ABIVersion)
	}
	switch {
	case len(r.Srcs) < 1 || len(r.Srcs) > MaxReduceSrcs:
		return p.errorf("relayReduce", sdk.InvalidArgument, "%d sources; one call folds 1 to %d", len(r.Srcs), MaxReduceSrcs)
	case r.Count < 0 || r.Bytes < 0 || !r.DType.Valid() || !r.Op.Valid() || r.AvgDivisor < 1:
		return p.errorf("relayReduce", sdk.InvalidArgument, "count %d, bytes %d, data type %d, op %d, avg divisor %d", r.Count, r.Bytes, r.DType, r.Op, r.AvgDivisor)
	case (r.Count > 0 || r.Bytes > 0) && (r.Landed == 0 || r.Go == 0 || r.Value == 0 || r.Value >= RelayDone):
		return p.errorf("relayReduce", sdk.InvalidArgument, "landed %#x, go %#x, value %#x: both words and a value in 1..2^62-1 are needed", r.Landed, r.Go, r.Value)
	}
	a := relayArgs.Get().(*relayV5)
	*a = relayV5{Src: r.Src, Window: r.Window, Bytes: uint64(r.Bytes), Landed: r.Landed, Go: r.Go, Value: r.Value,
		NSrcs: int32(len(r.Srcs)), DType: int32(r.DType), Op: int32(r.Op), AvgDivisor: int32(r.AvgDivisor), Count: uint64(r.Count), Dst: r.Dst}
	copy(a.Srcs[:], r.Srcs)
	err := p.sys("relayReduce", p.t.Device.RelayReduce, uintptr(dev), uintptr(unsafe.Pointer(a)), uintptr(s))
	runtime.KeepAlive(a)
	relayArgs.Put(a)
	return err
}

// HostUnregister undoes HostRegister of the range that starts at ptr.
func (p *Plugin) HostUnregister(ptr uintptr) error {
	if err := p.needDevice("hostUnregister"); err != nil {
		return err
	}
	if p.t.Device.HostUnregister == 0 {
		return p.errorf("hostUnregister", sdk.NotSupported, "plugin ABI v%d without hostUnregister", p.ABIVersion)
	}
	return p.sysHandles("hostUnregister", p.t.Device.HostUnregister, ptr)
}

// HostFree frees memory from HostMalloc.
func (p *Plugin) HostFree(ptr uintptr) error {
	if err := p.needDevice("hostFree"); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return p.result("hostFree", p.fn.hostFree(ptr))
}

// PointerKind asks the runtime what ptr is (never dereferences it).
func (p *Plugin) PointerKind(ptr uintptr) (MemoryKind, error) {
	if err := p.needDevice("pointerKind"); err != nil {
		return MemUnknown, err
	}
	var k int32
	err := p.sys("pointerKind", p.t.Device.PointerKind, ptr, uintptr(unsafe.Pointer(&k)))
	return MemoryKind(k), err
}

// CheckDeviceMemory refuses buffers the runtime knows to be pageable host
// memory (a host slice handed to a device operation). Pinned and managed
// memory pass; so does everything when the plugin cannot tell.
func (p *Plugin) CheckDeviceMemory(entry string, names []string, ptrs ...uintptr) error {
	return p.checkKinds(entry, names, ptrs, MemHost,
		"a device operation needs device memory (DeviceMalloc) or pinned host memory (HostMalloc)")
}

// CheckHostMemory refuses buffers the runtime knows to be device memory
// (a device pointer handed to the host backend).
func (p *Plugin) CheckHostMemory(entry string, names []string, ptrs ...uintptr) error {
	return p.checkKinds(entry, names, ptrs, MemDevice,
		"the host backend needs host memory: copy device data to host first (Memcpy DeviceToHost)")
}

func (p *Plugin) checkKinds(entry string, names []string, ptrs []uintptr, refuse MemoryKind, why string) error {
	if p.t.Device.PointerKind == 0 {
		return nil
	}
	for i, ptr := range ptrs {
		if ptr == 0 {
			continue
		}
		k, err := p.PointerKind(ptr)
		if err != nil || k != refuse {
			continue // a runtime that cannot tell must not block the operation
		}
		name := "buffer"
		if i < len(names) {
			name = names[i]
		}
		return p.errorf(entry, sdk.InvalidArgument, "%s %#x is %s: %s", name, ptr, k, why)
	}
	return nil
}

// Memcpy copies bytes. With a stream it is enqueued (host memory must be
// pinned and outlive the copy); with stream 0 it returns when done.
func (p *Plugin) Memcpy(dst, src uintptr, bytes int, kind MemcpyKind, s Stream) error {
	if err := p.needDevice("memCopy"); err != nil {
		return err
	}
	if bytes < 0 || kind < HostToDevice || kind > DeviceToDevice {
		return p.errorf("memCopy", sdk.InvalidArgument, "bad size %d or direction %s", bytes, kind)
	}
	return p.sys("memCopy", p.t.Device.MemCopy, dst, src, uintptr(bytes), uintptr(kind), uintptr(s))
}

// CopyToDevice copies a Go slice to device memory and waits for the copy.
func (p *Plugin) CopyToDevice(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := p.needDevice("memCopy"); err != nil {
		return err
	}
	return p.sys("memCopy", p.t.Device.MemCopy, dst, uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), uintptr(HostToDevice), 0)
}

// CopyFromDevice copies device memory into a Go slice and waits for it.
func (p *Plugin) CopyFromDevice(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := p.needDevice("memCopy"); err != nil {
		return err
	}
	return p.sys("memCopy", p.t.Device.MemCopy, uintptr(unsafe.Pointer(&dst[0])), src, uintptr(len(dst)), uintptr(DeviceToHost), 0)
}

// Memset sets bytes of device memory to value; stream as Memcpy.
func (p *Plugin) Memset(dst uintptr, value byte, bytes int, s Stream) error {
	if err := p.needDevice("memSet"); err != nil {
		return err
	}
	if bytes < 0 {
		return p.errorf("memSet", sdk.InvalidArgument, "negative size %d", bytes)
	}
	return p.sys("memSet", p.t.Device.MemSet, dst, uintptr(value), uintptr(bytes), uintptr(s))
}

// StreamCreate makes a stream on dev.
func (p *Plugin) StreamCreate(dev int) (Stream, error) {
	if err := p.needDevice("streamCreate"); err != nil {
		return 0, err
	}
	var s uintptr
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return Stream(s), p.result("streamCreate", p.fn.streamCreate(int32(dev), &s))
}

func (p *Plugin) StreamDestroy(s Stream) error {
	return p.sysHandles("streamDestroy", p.t.Device.StreamDestroy, uintptr(s))
}

// StreamSynchronize blocks until the stream's work is done.
func (p *Plugin) StreamSynchronize(s Stream) error {
	return p.sysHandles("streamSynchronize", p.t.Device.StreamSynchronize, uintptr(s))
}

// StreamQuery reports whether the stream's work is done.
func (p *Plugin) StreamQuery(s Stream) (done bool, err error) {
	return p.query("streamQuery", p.t.Device.StreamQuery, uintptr(s))
}

// StreamWaitEvent makes later work on s wait for e's last record.
func (p *Plugin) StreamWaitEvent(s Stream, e Event) error {
	return p.sysHandles("streamWaitEvent", p.t.Device.StreamWaitEvent, uintptr(s), uintptr(e))
}

// EventCreate makes an event on dev (timing enabled where the runtime can).
func (p *Plugin) EventCreate(dev int) (Event, error) {
	if err := p.needDevice("eventCreate"); err != nil {
		return 0, err
	}
	var e uintptr
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return Event(e), p.result("eventCreate", p.fn.eventCreate(int32(dev), &e))
}

func (p *Plugin) EventDestroy(e Event) error {
	return p.sysHandles("eventDestroy", p.t.Device.EventDestroy, uintptr(e))
}

func (p *Plugin) EventRecord(e Event, s Stream) error {
	return p.sysHandles("eventRecord", p.t.Device.EventRecord, uintptr(e), uintptr(s))
}

// EventQuery reports whether the event was reached.
func (p *Plugin) EventQuery(e Event) (done bool, err error) {
	return p.query("eventQuery", p.t.Device.EventQuery, uintptr(e))
}

// EventSynchronize blocks until the event was reached.
func (p *Plugin) EventSynchronize(e Event) error {
	return p.sysHandles("eventSynchronize", p.t.Device.EventSynchronize, uintptr(e))
}

// HasEventTiming reports whether EventElapsed can work; without it, time
// with host timers around StreamSynchronize.
func (p *Plugin) HasEventTiming() bool { return p.fn.eventElapsedTime != nil }

// EventElapsed is the device time from start to end (both reached).
func (p *Plugin) EventElapsed(start, end Event) (time.Duration, error) {
	if p.fn.eventElapsedTime == nil {
		return 0, p.unsupported("eventElapsedTime")
	}
	var ms float32
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := p.result("eventElapsedTime", p.fn.eventElapsedTime(&ms, uintptr(start), uintptr(end)))
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

// query maps Success to done, InProgress to not done, anything else to err.
func (p *Plugin) query(entry string, fn uintptr, h uintptr) (bool, error) {
	err := p.sysHandles(entry, fn, h)
	if err == nil {
		return true, nil
	}
	if sdk.ResultOf(err) == sdk.InProgress {
		return false, nil
	}
	return false, err
}
