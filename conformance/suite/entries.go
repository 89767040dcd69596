package suite

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The loader composes alltoAll, alltoAllv, gather and scatter from grouped
// send/recv when a plugin leaves them NULL, so a call through the loader
// cannot tell whether the plugin provides them. The suite reads the
// plugin's table itself (only which entries are NULL) to report such
// operations as "not supported" rather than test the loader's composition.

// Entry names of flagcxVendorPlugin_v1_t's device and ccl groups, in table
// order (sdk/include/flagcx_plugin.h). TestEntryOffsets checks them against
// the C compiler.
var (
	deviceEntryNames = []string{"getDeviceCount", "setDevice", "getDeviceInfo", "getLinkInfo", "deviceMalloc",
		"deviceFree", "hostMalloc", "hostFree", "pointerKind", "memCopy", "memSet", "streamCreate", "streamDestroy",
		"streamSynchronize", "streamQuery", "streamWaitEvent", "eventCreate", "eventDestroy", "eventRecord",
		"eventQuery", "eventSynchronize", "eventElapsedTime"}
	cclEntryNames = []string{"getUniqueIdBytes", "getUniqueId", "commInitRank", "commDestroy", "commAbort",
		"commGetAsyncError", "allReduce", "reduce", "broadcast", "allGather", "reduceScatter", "alltoAll", "alltoAllv",
		"gather", "scatter", "send", "recv", "groupStart", "groupEnd", "getErrorString"}
)

const (
	tableV1Symbol = "flagcxVendorPlugin_v1"
	// offsets of the groups in the v1 table: size, abiVersion (4 bytes
	// each), name, vendor, version, caps, libraries, init, fini,
	// getLastError (8 each), then the device group, then the ccl group.
	deviceGroupOffset = 72
	cclGroupOffset    = deviceGroupOffset + 8*22
	tableV1Size       = cclGroupOffset + 8*20
)

// entryOffsets maps "device.<name>" / "ccl.<name>" to the byte offset in
// the v1 table.
func entryOffsets() map[string]uintptr {
	m := map[string]uintptr{}
	for i, n := range deviceEntryNames {
		m["device."+n] = uintptr(deviceGroupOffset + 8*i)
	}
	for i, n := range cclEntryNames {
		m["ccl."+n] = uintptr(cclGroupOffset + 8*i)
	}
	return m
}

// readEntries reports, for every entry of the plugin's v1 table, whether it
// is set (keys are the entry names without group). The plugin must already
// be loaded (dlopen of the same path returns the same object).
func readEntries(path string) (map[string]bool, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, err
	}
	addr, err := purego.Dlsym(h, tableV1Symbol)
	if err != nil || addr == 0 {
		return nil, fmt.Errorf("no %s in %s", tableV1Symbol, path)
	}
	size := *(*uint32)(cPtr(addr))
	if size != tableV1Size {
		return nil, fmt.Errorf("%s is %d bytes, not %d", tableV1Symbol, size, tableV1Size)
	}
	out := map[string]bool{}
	for key, off := range entryOffsets() {
		name := key[len("device."):]
		if key[:4] == "ccl." {
			name = key[len("ccl."):]
		}
		out[name] = *(*uintptr)(cPtr(addr + off)) != 0
	}
	return out, nil
}

// cPtr turns the address of C memory into an unsafe.Pointer without
// upsetting vet (the memory is not Go's).
func cPtr(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }
