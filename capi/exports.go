package main

// exports.go is the cgo side of the C API: the functions capi/shim.c calls.
// shim.c defines FlagCX's entries with their exact prototypes (checked
// against include/flagcx.h by the compiler), keeps what C must keep (stream
// and event wrappers, the calling thread's current device) and calls these
// for everything else. They return flagcxResult_t values and record the
// message of a failure for flagcxGetLastError.
//
// A C thread calling in runs the Go code on itself (cgo callbacks stay on
// the calling OS thread), so a plugin's setDevice here sets that thread's
// current device, as FlagCX's adaptors do.

/*
#cgo CFLAGS: -Wall -Werror -std=gnu11
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern const char *capiLibDir(void);
*/
import "C"

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

func res(r sdk.Result) C.int { return C.int(r) }

// libDir is the directory of libflagcx.so (dladdr in shim.c).
func libDir() string {
	p := C.GoString(C.capiLibDir())
	if p == "" {
		return ""
	}
	return filepath.Dir(p)
}

// protect turns a panic of the Go side into flagcxInternalError with a
// message, instead of ending the process that called in; deferred by the
// exports that run Go code of any size (r is their result).
func protect(entry string, c *comm, r *C.int) {
	if p := recover(); p != nil {
		*r = res(fail(c, entry, fmt.Errorf("%w: a bug of flagcx-go's libflagcx.so (please report it): %v", sdk.ErrInternalError, p)))
	}
}

func theBackend(entry string) (*backend, C.int) {
	be, err := processBackend(libDir)
	if err != nil {
		return nil, res(fail(nil, entry, err))
	}
	return be, 0
}

// capiSyncEnv makes the Go side see the process's FLAGCX_* variables as C
// sees them now (envp is environ). Go's runtime copies the environment
// once, from the process's start, when the library loads; a program that
// sets variables itself (Python's os.environ, C's setenv) before its calls
// must still be heard, as FlagCX, which reads getenv, hears it.
//
//export capiSyncEnv
func capiSyncEnv(envp **C.char) {
	want := map[string]string{}
	for p := envp; p != nil && *p != nil; p = (**C.char)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(*p))) {
		if k, v, ok := strings.Cut(C.GoString(*p), "="); ok && strings.HasPrefix(k, "FLAGCX_") {
			want[k] = v
		}
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FLAGCX_") {
			if _, ok := want[k]; !ok {
				_ = os.Unsetenv(k)
			}
		}
	}
	for k, v := range want {
		if cur, ok := os.LookupEnv(k); !ok || cur != v {
			_ = os.Setenv(k, v)
		}
	}
}

// capiBackend chooses the process's backend (once); *onHost says whether
// it is the host, lib and sym (buffers of libN and symN bytes) name the runtime
// library and its entry that tell the calling thread's current device (""
// when there is none).
//
//export capiBackend
func capiBackend(entry *C.char, onHost *C.int, lib *C.char, libN C.int, sym *C.char, symN C.int) C.int {
	be, r := theBackend(C.GoString(entry))
	if r != 0 {
		return r
	}
	*onHost = 0
	if be.plugin == nil {
		*onHost = 1
	}
	l, e := be.currentDevice()
	copyString(lib, libN, l)
	copyString(sym, symN, e)
	return 0
}

//export capiVendor
func capiVendor(buf *C.char, n C.int) C.int {
	be, r := theBackend("getVendor")
	if r != 0 {
		return r
	}
	copyString(buf, n, be.vendor())
	return 0
}

//export capiDeviceCount
func capiDeviceCount(out *C.int) C.int {
	be, r := theBackend("getDeviceCount")
	if r != 0 {
		return r
	}
	*out = C.int(be.devices)
	return 0
}

// device runs fn with the process's plugin; entry names the C function.
func device(entry string, fn func(p *loader.Plugin) error) (r C.int) {
	defer protect(entry, nil, &r)
	be, r := theBackend(entry)
	if r != 0 {
		return r
	}
	if be.plugin == nil {
		return res(fail(nil, entry, fmt.Errorf("%w: internal: host backend in a device entry", sdk.ErrInternalError)))
	}
	return res(fail(nil, entry, fn(be.plugin)))
}

//export capiSetDevice
func capiSetDevice(dev C.int) C.int {
	return device("setDevice", func(p *loader.Plugin) error {
		n, err := p.DeviceCount()
		if err == nil && (dev < 0 || int(dev) >= n) {
			err = fmt.Errorf("%w: device %d does not exist (%s sees %d): use 0..%d", sdk.ErrInvalidArgument, dev, p.Name, n, n-1)
		}
		if err != nil {
			return err
		}
		return p.SetDevice(int(dev))
	})
}

// Memory kinds, flagcxMemType_t's values.
const (
	memHost    = 0
	memDevice  = 1
	memManaged = 2
)

//export capiMalloc
func capiMalloc(out *C.uintptr_t, size C.size_t, kind, dev C.int) C.int {
	return device("deviceMalloc", func(p *loader.Plugin) error {
		n, err := sizeOf(size)
		if err != nil {
			return err
		}
		var ptr uintptr
		switch kind {
		case memHost:
			ptr, err = p.HostMalloc(max(n, 1))
		case memDevice:
			ptr, err = p.DeviceMalloc(int(dev), max(n, 1))
		default:
			return notSupported("managed memory (flagcxMemManaged)")
		}
		*out = C.uintptr_t(ptr)
		return err
	})
}

//export capiFree
func capiFree(ptr unsafe.Pointer, kind C.int) C.int {
	return device("deviceFree", func(p *loader.Plugin) error {
		switch kind {
		case memHost:
			return p.HostFree(uintptr(ptr))
		case memDevice:
			return p.DeviceFree(uintptr(ptr))
		}
		return notSupported("managed memory (flagcxMemManaged)")
	})
}

//export capiMemcpy
func capiMemcpy(dst, src unsafe.Pointer, size C.size_t, kind C.int, stream C.uintptr_t) C.int {
	return device("deviceMemcpy", func(p *loader.Plugin) error {
		n, err := sizeOf(size)
		if err != nil || n == 0 {
			return err
		}
		if kind < 0 || kind > 2 {
			return fmt.Errorf("%w: copy kind %d: use flagcxMemcpyHostToDevice, DeviceToHost or DeviceToDevice", sdk.ErrInvalidArgument, kind)
		}
		return p.Memcpy(uintptr(dst), uintptr(src), n, loader.MemcpyKind(kind), loader.Stream(stream))
	})
}

//export capiMemset
func capiMemset(ptr unsafe.Pointer, value C.int, size C.size_t, stream C.uintptr_t) C.int {
	return device("deviceMemset", func(p *loader.Plugin) error {
		n, err := sizeOf(size)
		if err != nil || n == 0 {
			return err
		}
		return p.Memset(uintptr(ptr), byte(value), n, loader.Stream(stream))
	})
}

//export capiStreamCreate
func capiStreamCreate(dev C.int, out *C.uintptr_t) C.int {
	return device("streamCreate", func(p *loader.Plugin) error {
		s, err := p.StreamCreate(int(dev))
		*out = C.uintptr_t(s)
		if err == nil {
			streams.add(s)
		}
		return err
	})
}

//export capiStreamDestroy
func capiStreamDestroy(s C.uintptr_t) C.int {
	return device("streamDestroy", func(p *loader.Plugin) error {
		streams.remove(loader.Stream(s))
		return p.StreamDestroy(loader.Stream(s))
	})
}

//export capiStreamSync
func capiStreamSync(s C.uintptr_t) C.int {
	return device("streamSynchronize", func(p *loader.Plugin) error { return p.StreamSynchronize(loader.Stream(s)) })
}

//export capiStreamQuery
func capiStreamQuery(s C.uintptr_t) C.int {
	return device("streamQuery", func(p *loader.Plugin) error { return pending(p.StreamQuery(loader.Stream(s))) })
}

//export capiStreamWaitEvent
func capiStreamWaitEvent(s, e C.uintptr_t) C.int {
	return device("streamWaitEvent", func(p *loader.Plugin) error {
		return p.StreamWaitEvent(loader.Stream(s), loader.Event(e))
	})
}

//export capiEventCreate
func capiEventCreate(dev C.int, out *C.uintptr_t) C.int {
	return device("eventCreate", func(p *loader.Plugin) error {
		e, err := p.EventCreate(int(dev))
		*out = C.uintptr_t(e)
		return err
	})
}

//export capiEventDestroy
func capiEventDestroy(e C.uintptr_t) C.int {
	return device("eventDestroy", func(p *loader.Plugin) error { return p.EventDestroy(loader.Event(e)) })
}

//export capiEventRecord
func capiEventRecord(e, s C.uintptr_t) C.int {
	return device("eventRecord", func(p *loader.Plugin) error { return p.EventRecord(loader.Event(e), loader.Stream(s)) })
}

//export capiEventSync
func capiEventSync(e C.uintptr_t) C.int {
	return device("eventSynchronize", func(p *loader.Plugin) error { return p.EventSynchronize(loader.Event(e)) })
}

//export capiEventQuery
func capiEventQuery(e C.uintptr_t) C.int {
	return device("eventQuery", func(p *loader.Plugin) error { return pending(p.EventQuery(loader.Event(e))) })
}

//export capiEventElapsed
func capiEventElapsed(start, end C.uintptr_t, ms *C.float) C.int {
	return device("eventElapsedTime", func(p *loader.Plugin) error {
		d, err := p.EventElapsed(loader.Event(start), loader.Event(end))
		*ms = C.float(float64(d.Nanoseconds()) / 1e6)
		return err
	})
}

// capiDeviceSync waits for every stream streamCreate made (the plugin ABI
// has no device-wide synchronize).
//
//export capiDeviceSync
func capiDeviceSync() C.int {
	return device("deviceSynchronize", func(p *loader.Plugin) error {
		for _, s := range streams.all() {
			if err := p.StreamSynchronize(s); err != nil {
				return err
			}
		}
		return nil
	})
}

// pending turns a query's answer into FlagCX's: flagcxInProgress while
// the work is not done.
func pending(done bool, err error) error {
	if err == nil && !done {
		return sdk.ErrInProgress
	}
	return err
}

func sizeOf(size C.size_t) (int, error) {
	if uint64(size) > math.MaxInt64/2 {
		return 0, fmt.Errorf("%w: size %d is out of range", sdk.ErrInvalidArgument, uint64(size))
	}
	return int(size), nil
}

// copyString writes s into the C buffer of n bytes, NUL-terminated.
func copyString(buf *C.char, n C.int, s string) {
	if buf == nil || n <= 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:n-1], s)
	dst[k] = 0
}

// capiFail records a failure found in shim.c (a NULL argument, say).
//
//export capiFail
func capiFail(id C.uint64_t, entry *C.char, code C.int, msg *C.char) C.int {
	c, _ := lookupComm(uint64(id))
	return res(fail(c, C.GoString(entry), fmt.Errorf("%w: %s", sdk.Result(code).Err(), C.GoString(msg))))
}

// capiNotSupported records and returns flagcxNotSupported for entry.
//
//export capiNotSupported
func capiNotSupported(id C.uint64_t, entry, what *C.char) C.int {
	c, _ := lookupComm(uint64(id))
	return res(fail(c, C.GoString(entry), notSupported(C.GoString(what))))
}

//export capiLastError
func capiLastError(id C.uint64_t, buf *C.char, n C.int) {
	copyString(buf, n, lastError(uint64(id)))
}
