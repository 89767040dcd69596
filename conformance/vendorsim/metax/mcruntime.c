/*
 * mcruntime.c: emulated MetaX MACA runtime (libmcruntime.so).
 *
 * The MACA entry points the metax plugin calls
 * (docs/vendor-facts.md#metax-maca-runtime), with MACA's names and argument
 * orders, plus mcGetDevice, mcDeviceSynchronize and mcMemset for tests.
 * "Device" memory is host memory recorded in the core's registry, so a copy
 * whose mcMemcpyKind contradicts its pointers fails: that is how a plugin
 * that maps copy directions wrongly is caught. Work on a stream runs
 * asynchronously on the stream's worker (core/stream.c); mcMemcpy and
 * mcMemset wait for it, and the queries answer mcErrorNotReady while it is
 * pending.
 *
 * This is the emulator's own model of MACA, declared here and NOT shared
 * with plugins/metax/metax.c on purpose: the plugin's values are its belief,
 * these are the emulator's, and a test (sdk/loader/metax_test.go,
 * TestMetaxEmulatorDisagreementFails) builds this file with other values to
 * prove that a disagreement makes the tests fail.
 *
 * Evidence (marks and tags as in docs/vendor-facts.md): mcSuccess = 0 and
 * mcMemcpyDefault = 4 are C [VLM]. Everything else marked ⚠ is inferred
 * from the CUDA/HIP mirror (MACA's mccl.h says ENABLE_HIP_TO_MACA_ADAPTOR)
 * and third-party declarations; ❌ = no evidence at all. Check them on a
 * MetaX machine with the probe in plugins/metax/README.md.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- MACA types and values ---- */
typedef enum mcError {
  mcSuccess = 0,                        /* C [VLM], [FCX] */
  mcErrorInvalidValue = 1,              /* ⚠ CUDA/HIP mirror */
  mcErrorMemoryAllocation = 2,          /* ⚠ */
  mcErrorNoDevice = 100,                /* ⚠ */
  mcErrorInvalidDevice = 101,           /* ⚠ */
  mcErrorInvalidResourceHandle = 400,   /* ⚠ name seen at a call site, value CUDA's */
  mcErrorNotReady = 600                 /* ❌ value (the name is C [FCX]); returned by the queries while work is pending */
} mcError_t;

/* mcMemcpyKind: H2H 0, H2D 1, D2H 2, D2D 3 ⚠ (third-party ctypes
 * declarations), Default 4 C [VLM]. The three directions can be overridden
 * at build time (-DVSIM_MC_H2D=..) to model a MACA that numbers them
 * differently; only the disagreement test does that. */
#ifndef VSIM_MC_H2D
#define VSIM_MC_H2D 1
#endif
#ifndef VSIM_MC_D2H
#define VSIM_MC_D2H 2
#endif
#ifndef VSIM_MC_D2D
#define VSIM_MC_D2D 3
#endif
enum mcMemcpyKind {
  mcMemcpyHostToHost = 0,
  mcMemcpyHostToDevice = VSIM_MC_H2D,
  mcMemcpyDeviceToHost = VSIM_MC_D2H,
  mcMemcpyDeviceToDevice = VSIM_MC_D2D,
  mcMemcpyDefault = 4
};

typedef struct mcStream_st* mcStream_t;
typedef struct mcEvent_st* mcEvent_t;

#define mcStreamNonBlocking 0x01u  /* ⚠ UCC MACA header */
#define mcEventBlockingSync 0x01u  /* ⚠ CUDA mirror */
#define mcEventDisableTiming 0x02u /* ⚠ third-party probe comment */
#define mcEventInterprocess 0x04u  /* ⚠ CUDA mirror */

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated MetaX MACA runtime (libmcruntime.so; host memory, no GPU)";

/* ---- last error: per thread, cleared by mcGetLastError ---- */
static __thread mcError_t last_error = mcSuccess;

static mcError_t fail(mcError_t e, const char* api, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static mcError_t fail(mcError_t e, const char* api, const char* fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  last_error = e;
  /* MACA, like CUDA, has no "why" text; FLAGCX_VENDORSIM_DEBUG=1 prints it. */
  vsim_debug("%s -> %d: %s", api, (int)e, why);
  return e;
}

/* NULL is the default stream; anything else must be a live mcStream_t. */
static int stream_ok(mcStream_t s) { return s == NULL || vsim_stream_lookup(s) != NULL; }

/* The core stream behind a handle (NULL: the current device's default
 * stream, with legacy ordering; core/stream.c). */
static vsim_stream* stream_of(mcStream_t s) {
  return s == NULL ? vsim_stream_default(vsim_current_device()) : vsim_stream_lookup(s);
}

/* An operation on the stream failed (a collective whose peer died, say):
 * reported at the next synchronise, standing in for the hang a device
 * shows. mcErrorInvalidValue: no launch-failure code of MACA is known. */
static mcError_t waited(int rc, const char* api) {
  return rc == 0 ? mcSuccess : fail(mcErrorInvalidValue, api, "an operation on the stream failed (see the communicator's async error)");
}

/* ---- devices ---- */

EXPORT mcError_t mcGetDeviceCount(int* count) {
  if (count == NULL) return fail(mcErrorInvalidValue, __func__, "count is NULL");
  *count = vsim_device_count();
  if (*count == 0) return fail(mcErrorNoDevice, __func__, "FLAGCX_VENDORSIM_DEVICES=0");
  return mcSuccess;
}

EXPORT mcError_t mcSetDevice(int device) {
  if (vsim_device_count() == 0) return fail(mcErrorNoDevice, __func__, "no devices");
  if (vsim_set_current_device(device) != 0) {
    return fail(mcErrorInvalidDevice, __func__, "device %d of %d", device, vsim_device_count());
  }
  return mcSuccess;
}

EXPORT mcError_t mcGetDevice(int* device) {
  if (device == NULL) return fail(mcErrorInvalidValue, __func__, "device is NULL");
  *device = vsim_current_device();
  return mcSuccess;
}

EXPORT mcError_t mcDeviceSynchronize(void) { return waited(vsim_device_sync(vsim_current_device()), __func__); }

EXPORT mcError_t mcDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (device < 0 || device >= vsim_device_count()) return fail(mcErrorInvalidDevice, __func__, "device %d", device);
  if (pciBusId == NULL || len <= 0) return fail(mcErrorInvalidValue, __func__, "buffer");
  unsigned dom, bus, slot, fn;
  vsim_device_pci(device, &dom, &bus, &slot, &fn);
  snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.%X", dom, bus, slot, fn);
  return mcSuccess;
}

/* ---- memory ---- */

EXPORT mcError_t mcMalloc(void** ptr, size_t size) {
  if (ptr == NULL) return fail(mcErrorInvalidValue, __func__, "ptr is NULL");
  if (vsim_device_count() == 0) return fail(mcErrorNoDevice, __func__, "no devices");
  if (vsim_mem_alloc(ptr, size, VSIM_MEM_DEVICE, vsim_current_device(), 0) != 0) {
    return fail(mcErrorMemoryAllocation, __func__, "%zu bytes", size);
  }
  return mcSuccess;
}

EXPORT mcError_t mcFree(void* ptr) {
  if (ptr == NULL) return mcSuccess;
  if (vsim_mem_free(ptr, VSIM_MEM_DEVICE) != 0) {
    return fail(mcErrorInvalidValue, __func__, "%p is not the start of an mcMalloc allocation", ptr);
  }
  return mcSuccess;
}

/* Three arguments, as a public C caller passes them; the flags are taken
 * as CUDA's cudaHostAlloc flags (Default 0, Portable 1, Mapped 2,
 * WriteCombined 4). */
EXPORT mcError_t mcMallocHost(void** ptr, size_t size, unsigned int flags) {
  if (ptr == NULL) return fail(mcErrorInvalidValue, __func__, "ptr is NULL");
  if (flags & ~0x07u) return fail(mcErrorInvalidValue, __func__, "flags 0x%x", flags);
  if (vsim_mem_alloc(ptr, size, VSIM_MEM_HOST, vsim_current_device(), flags) != 0) {
    return fail(mcErrorMemoryAllocation, __func__, "%zu bytes", size);
  }
  return mcSuccess;
}

EXPORT mcError_t mcFreeHost(void* ptr) {
  if (ptr == NULL) return mcSuccess;
  if (vsim_mem_free(ptr, VSIM_MEM_HOST) != 0) {
    return fail(mcErrorInvalidValue, __func__, "%p is not the start of an mcMallocHost allocation", ptr);
  }
  return mcSuccess;
}

EXPORT mcError_t mcHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (ptr == NULL || size == 0) return fail(mcErrorInvalidValue, __func__, "empty range %p+%zu", ptr, size);
  if (vsim_mem_register(ptr, size, flags) != 0)
    return fail(mcErrorInvalidValue, __func__, "%p+%zu overlaps registered or allocated memory", ptr, size);
  return mcSuccess;
}

EXPORT mcError_t mcHostUnregister(void* ptr) {
  if (vsim_mem_unregister(ptr) != 0) return fail(mcErrorInvalidValue, __func__, "%p is not the start of a registered range", ptr);
  return mcSuccess;
}

/* cudaMemGetInfo's mirror on the current device: the emulator sees only
 * this process's allocations (vsim_mem_used). */
EXPORT mcError_t mcMemGetInfo(size_t* free, size_t* total) {
  if (free == NULL || total == NULL) return fail(mcErrorInvalidValue, __func__, "NULL pointer");
  uint64_t t = vsim_device_memory_total(), u = vsim_mem_used(vsim_current_device());
  *total = (size_t)t;
  *free = (size_t)(u < t ? t - u : 0);
  return mcSuccess;
}

static const char* kind_name(int kind) {
  if (kind == mcMemcpyHostToHost) return "mcMemcpyHostToHost";
  if (kind == mcMemcpyHostToDevice) return "mcMemcpyHostToDevice";
  if (kind == mcMemcpyDeviceToHost) return "mcMemcpyDeviceToHost";
  if (kind == mcMemcpyDeviceToDevice) return "mcMemcpyDeviceToDevice";
  if (kind == mcMemcpyDefault) return "mcMemcpyDefault";
  return "invalid";
}

/* The kind must agree with what the registry knows about both pointers. */
static mcError_t copy(void* dst, const void* src, size_t count, int kind, vsim_stream* s, const char* api) {
  if (kind < 0 || kind > mcMemcpyDefault) return fail(mcErrorInvalidValue, api, "invalid mcMemcpyKind %d", kind);
  if (count == 0) return mcSuccess;
  if (dst == NULL || src == NULL) return fail(mcErrorInvalidValue, api, "NULL pointer");
  vsim_mem_info di, si;
  int dk = vsim_mem_check_range(dst, count, &di);
  int sk = vsim_mem_check_range(src, count, &si);
  if (dk < 0) return fail(mcErrorInvalidValue, api, "dst %p + %zu runs past its allocation", dst, count);
  if (sk < 0) return fail(mcErrorInvalidValue, api, "src %p + %zu runs past its allocation", src, count);
  int ddev = dk == VSIM_MEM_DEVICE, sdev = sk == VSIM_MEM_DEVICE;
  int ok = 1;
  if (kind == mcMemcpyHostToHost) ok = !ddev && !sdev;
  else if (kind == mcMemcpyHostToDevice) ok = ddev && !sdev;
  else if (kind == mcMemcpyDeviceToHost) ok = !ddev && sdev;
  else if (kind == mcMemcpyDeviceToDevice) ok = ddev && sdev;
  /* mcMemcpyDefault infers the direction */
  if (!ok) {
    return fail(mcErrorInvalidValue, api, "kind %d (%s) but dst %p is %s memory and src %p is %s memory", kind,
                kind_name(kind), dst, ddev ? "device" : "host", src, sdev ? "device" : "host");
  }
  vsim_stream* on = s != NULL ? s : vsim_stream_default(vsim_current_device());
  if (on == NULL || vsim_stream_copy(on, dst, src, count) != 0) return fail(mcErrorMemoryAllocation, api, "no memory");
  return s != NULL ? mcSuccess : waited(vsim_stream_sync(on), api);
}

EXPORT mcError_t mcMemcpy(void* dst, const void* src, size_t count, enum mcMemcpyKind kind) {
  return copy(dst, src, count, (int)kind, NULL, __func__);
}

EXPORT mcError_t mcMemcpyAsync(void* dst, const void* src, size_t count, enum mcMemcpyKind kind, mcStream_t stream) {
  if (!stream_ok(stream)) return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return copy(dst, src, count, (int)kind, stream_of(stream), __func__);
}

/* s NULL: mcMemset, which the caller waits for. */
static mcError_t set(void* ptr, int value, size_t count, vsim_stream* s, const char* api) {
  if (count == 0) return mcSuccess;
  int k = vsim_mem_check_range(ptr, count, NULL);
  if (k == VSIM_MEM_UNREGISTERED) return fail(mcErrorInvalidValue, api, "%p is not device or pinned memory", ptr);
  if (k < 0) return fail(mcErrorInvalidValue, api, "%p + %zu runs past its allocation", ptr, count);
  vsim_stream* on = s != NULL ? s : vsim_stream_default(vsim_current_device());
  if (on == NULL || vsim_stream_memset(on, ptr, value, count) != 0) return fail(mcErrorMemoryAllocation, api, "no memory");
  return s != NULL ? mcSuccess : waited(vsim_stream_sync(on), api);
}

EXPORT mcError_t mcMemset(void* ptr, int value, size_t count) { return set(ptr, value, count, NULL, __func__); }

EXPORT mcError_t mcMemsetAsync(void* ptr, int value, size_t count, mcStream_t stream) {
  if (!stream_ok(stream)) return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return set(ptr, value, count, stream_of(stream), __func__);
}

/* ---- streams ---- */

EXPORT mcError_t mcStreamCreateWithFlags(mcStream_t* stream, unsigned int flags) {
  if (stream == NULL) return fail(mcErrorInvalidValue, __func__, "stream is NULL");
  if (flags & ~mcStreamNonBlocking) return fail(mcErrorInvalidValue, __func__, "flags 0x%x", flags);
  vsim_stream* s = vsim_stream_create(vsim_current_device(), flags);
  if (s == NULL) return fail(mcErrorMemoryAllocation, __func__, "no memory");
  *stream = (mcStream_t)s;
  return mcSuccess;
}

EXPORT mcError_t mcStreamSynchronize(mcStream_t stream) {
  if (!stream_ok(stream)) return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return waited(vsim_stream_sync(stream_of(stream)), __func__);
}

EXPORT mcError_t mcStreamQuery(mcStream_t stream) {
  if (!stream_ok(stream)) return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return vsim_stream_idle(stream_of(stream)) ? mcSuccess : mcErrorNotReady;
}

EXPORT mcError_t mcStreamDestroy(mcStream_t stream) {
  if (stream == NULL || vsim_stream_destroy(stream) != 0) {
    return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  }
  return mcSuccess;
}

/* flags: mcEventWaitDefault, 0 ⚠ (C [FCX] passes the name); nothing else
 * is accepted, so a plugin passing garbage there is caught. */
EXPORT mcError_t mcStreamWaitEvent(mcStream_t stream, mcEvent_t event, unsigned int flags) {
  if (!stream_ok(stream)) return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  if (vsim_event_lookup(event) == NULL) return fail(mcErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  if (flags != 0) return fail(mcErrorInvalidValue, __func__, "flags 0x%x", flags);
  if (vsim_stream_wait_event(stream_of(stream), vsim_event_lookup(event)) != 0) return fail(mcErrorMemoryAllocation, __func__, "no memory");
  return mcSuccess;
}

/* ---- events ---- */

EXPORT mcError_t mcEventCreateWithFlags(mcEvent_t* event, unsigned int flags) {
  if (event == NULL) return fail(mcErrorInvalidValue, __func__, "event is NULL");
  unsigned all = mcEventBlockingSync | mcEventDisableTiming | mcEventInterprocess;
  if (flags & ~all) return fail(mcErrorInvalidValue, __func__, "flags 0x%x", flags);
  vsim_event* e = vsim_event_create(vsim_current_device(), (flags & mcEventDisableTiming) ? VSIM_EVENT_NO_TIMING : 0);
  if (e == NULL) return fail(mcErrorMemoryAllocation, __func__, "no memory");
  *event = (mcEvent_t)e;
  return mcSuccess;
}

EXPORT mcError_t mcEventRecord(mcEvent_t event, mcStream_t stream) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(mcErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  if (!stream_ok(stream)) return fail(mcErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  if (vsim_event_record(e, stream_of(stream)) != 0) return fail(mcErrorMemoryAllocation, __func__, "no memory");
  return mcSuccess;
}

EXPORT mcError_t mcEventSynchronize(mcEvent_t event) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(mcErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  vsim_event_sync(e);
  return mcSuccess;
}

EXPORT mcError_t mcEventQuery(mcEvent_t event) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(mcErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  return vsim_event_query(e) ? mcSuccess : mcErrorNotReady;
}

EXPORT mcError_t mcEventDestroy(mcEvent_t event) {
  if (vsim_event_destroy(event) != 0) return fail(mcErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  return mcSuccess;
}

/* (float* ms, start, end): the CUDA order, C [FCX]. */
EXPORT mcError_t mcEventElapsedTime(float* ms, mcEvent_t start, mcEvent_t end) {
  if (ms == NULL) return fail(mcErrorInvalidValue, __func__, "ms is NULL");
  vsim_event* a = vsim_event_lookup(start);
  vsim_event* b = vsim_event_lookup(end);
  if (a == NULL || b == NULL) {
    return fail(mcErrorInvalidResourceHandle, __func__, "events %p %p", (void*)start, (void*)end);
  }
  int rc = vsim_event_elapsed_ms(a, b, ms);
  if (rc == -1) return fail(mcErrorInvalidResourceHandle, __func__, "an event was never recorded");
  if (rc == -2) return fail(mcErrorInvalidResourceHandle, __func__, "an event has mcEventDisableTiming");
  if (rc == -3) return fail(mcErrorNotReady, __func__, "an event has not completed yet");
  return mcSuccess;
}

/* ---- errors ---- */

EXPORT mcError_t mcGetLastError(void) {
  mcError_t e = last_error;
  last_error = mcSuccess;
  return e;
}

/* The texts are the emulator's (MACA's own wording is ❌). */
EXPORT const char* mcGetErrorString(mcError_t error) {
  switch (error) {
    case mcSuccess: return "no error";
    case mcErrorInvalidValue: return "invalid argument (emulated mcErrorInvalidValue)";
    case mcErrorMemoryAllocation: return "out of memory (emulated mcErrorMemoryAllocation)";
    case mcErrorNoDevice: return "no MACA-capable device is detected (emulated mcErrorNoDevice)";
    case mcErrorInvalidDevice: return "invalid device ordinal (emulated mcErrorInvalidDevice)";
    case mcErrorInvalidResourceHandle: return "invalid resource handle (emulated mcErrorInvalidResourceHandle)";
    case mcErrorNotReady: return "device not ready (emulated mcErrorNotReady)";
    default: return "unrecognized error code";
  }
}
