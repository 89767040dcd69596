/*
 * cudart.c: emulated CUDA runtime (libcudart.so.13, and libcudart.so.12
 * built from the same file with VSIM_CUDART_MAJOR=12).
 *
 * The CUDA runtime entry points that the nvidia plugin calls (and the plain
 * cudaStreamCreate and cudaEventCreate NCCL programs call), with
 * CUDA's names, argument orders and enum values
 * (docs/vendor-facts.md#nvidia-cuda-runtime); "device" memory is host
 * memory recorded in the core's registry.
 * Copies, memsets, event records and waits run on the streams' workers
 * (core/stream.c): asynchronously, in order per stream, with the legacy
 * default stream's implicit ordering; queries answer cudaErrorNotReady
 * (600) while work is pending.
 *
 * Only this file's CUDA names are exported; everything else is hidden.
 */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stdlib.h>

#include "../core/vsim_core.h"
#include "vsim_cubin.h"

#ifndef VSIM_CUDART_MAJOR
#define VSIM_CUDART_MAJOR 13
#endif

#define EXPORT __attribute__((visibility("default")))

/* ---- CUDA types and values (driver_types.h) ---- */
typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorSymbolNotFound = 500,
  cudaErrorInvalidKernelImage = 200,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorNotSupported = 801
} cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
};

/* The CUDA >= 11 layout. CUDA 12/13 headers append reserved words; only the
 * four documented fields are written, so both layouts work. */
struct cudaPointerAttributes {
  enum cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamNonBlocking 0x01u
#define cudaEventBlockingSync 0x01u
#define cudaEventDisableTiming 0x02u
#define cudaEventInterprocess 0x04u
#define cudaHostAllocFlagsMask 0x07u /* Portable 1 | Mapped 2 | WriteCombined 4 */
#define cudaEventWaitExternal 0x01u

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
#define STR2(x) #x
#define STR(x) STR2(x)
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated CUDA runtime " STR(VSIM_CUDART_MAJOR) " (host memory, no GPU)";

/* ---- last error: per thread, cleared by cudaGetLastError ---- */
static __thread cudaError_t last_error = cudaSuccess;

static cudaError_t fail(cudaError_t e, const char* api, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cudaError_t fail(cudaError_t e, const char* api, const char* fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  last_error = e;
  /* CUDA has no "why" text; FLAGCX_VENDORSIM_DEBUG=1 prints it. */
  vsim_debug("%s -> %d: %s", api, (int)e, why);
  return e;
}

static int is_builtin_stream(cudaStream_t s) {
  return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

static int stream_ok(cudaStream_t s) { return is_builtin_stream(s) || vsim_stream_lookup(s) != NULL; }

/* The core stream behind a handle: the built-in handles are the current
 * device's default stream (legacy semantics; core/stream.c). */
static vsim_stream* stream_of(cudaStream_t s) {
  return is_builtin_stream(s) ? vsim_stream_default(vsim_current_device()) : vsim_stream_lookup(s);
}

/* A stream whose operation failed (a collective whose peer failed, say)
 * reports it at its synchronise: the emulator's stand-in for the hang or
 * the launch failure a device would show. */
static cudaError_t waited(int rc, const char* api) {
  if (rc == 0) return cudaSuccess;
  return fail(cudaErrorLaunchFailure, api, "an operation on the stream failed (see the communicator's async error)");
}

/* ---- devices ---- */

EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (count == NULL) return fail(cudaErrorInvalidValue, __func__, "count is NULL");
  *count = vsim_device_count();
  if (*count == 0) return fail(cudaErrorNoDevice, __func__, "FLAGCX_VENDORSIM_DEVICES=0");
  return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device) {
  if (vsim_device_count() == 0) return fail(cudaErrorNoDevice, __func__, "no devices");
  if (vsim_set_current_device(device) != 0) {
    return fail(cudaErrorInvalidDevice, __func__, "device %d of %d", device, vsim_device_count());
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int* device) {
  if (device == NULL) return fail(cudaErrorInvalidValue, __func__, "device is NULL");
  *device = vsim_current_device();
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceSynchronize(void) { return waited(vsim_device_sync(vsim_current_device()), __func__); }

EXPORT cudaError_t cudaDriverGetVersion(int* v) {
  if (v == NULL) return fail(cudaErrorInvalidValue, __func__, "NULL");
  *v = 13000; /* a CUDA 13.0 driver runs both runtimes */
  return cudaSuccess;
}

EXPORT cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == NULL) return fail(cudaErrorInvalidValue, __func__, "NULL");
  *v = VSIM_CUDART_MAJOR == 12 ? 12090 : VSIM_CUDART_MAJOR * 1000;
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (device < 0 || device >= vsim_device_count()) {
    return fail(cudaErrorInvalidDevice, __func__, "device %d", device);
  }
  if (pciBusId == NULL || len <= 0) return fail(cudaErrorInvalidValue, __func__, "buffer");
  unsigned dom, bus, slot, fn;
  vsim_device_pci(device, &dom, &bus, &slot, &fn);
  snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.%X", dom, bus, slot, fn);
  return cudaSuccess;
}

/* ---- memory ---- */

EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == NULL) return fail(cudaErrorInvalidValue, __func__, "devPtr is NULL");
  if (vsim_device_count() == 0) return fail(cudaErrorNoDevice, __func__, "no devices");
  if (vsim_mem_alloc(devPtr, size, VSIM_MEM_DEVICE, vsim_current_device(), 0) != 0) {
    return fail(cudaErrorMemoryAllocation, __func__, "%zu bytes", size);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void* devPtr) {
  if (devPtr == NULL) return cudaSuccess;
  if (vsim_mem_free(devPtr, VSIM_MEM_DEVICE) != 0) {
    return fail(cudaErrorInvalidValue, __func__, "%p is not the start of a cudaMalloc allocation", devPtr);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (pHost == NULL) return fail(cudaErrorInvalidValue, __func__, "pHost is NULL");
  if (flags & ~cudaHostAllocFlagsMask) return fail(cudaErrorInvalidValue, __func__, "flags 0x%x", flags);
  if (vsim_mem_alloc(pHost, size, VSIM_MEM_HOST, vsim_current_device(), flags) != 0) {
    return fail(cudaErrorMemoryAllocation, __func__, "%zu bytes", size);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (ptr == NULL) return fail(cudaErrorInvalidValue, __func__, "ptr is NULL");
  if (vsim_mem_alloc(ptr, size, VSIM_MEM_HOST, vsim_current_device(), 0) != 0) {
    return fail(cudaErrorMemoryAllocation, __func__, "%zu bytes", size);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == NULL) return cudaSuccess;
  if (vsim_mem_free(ptr, VSIM_MEM_HOST) != 0) {
    return fail(cudaErrorInvalidValue, __func__, "%p is not the start of a pinned host allocation", ptr);
  }
  return cudaSuccess;
}

/* Registered memory is pinned from then on (the registry records it). */
#define cudaHostRegisterFlagsMask 0x0Fu /* Portable 1 | Mapped 2 | IoMemory 4 | ReadOnly 8 */
EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (ptr == NULL || size == 0) return fail(cudaErrorInvalidValue, __func__, "empty range %p+%zu", ptr, size);
  if (flags & ~cudaHostRegisterFlagsMask) return fail(cudaErrorInvalidValue, __func__, "flags 0x%x", flags);
  if (vsim_mem_register(ptr, size, flags) != 0)
    return fail(cudaErrorHostMemoryAlreadyRegistered, __func__, "%p+%zu overlaps registered or allocated memory", ptr, size);
  return cudaSuccess;
}

/* On the current device; the emulator sees only this process's
 * allocations (vsim_mem_used), a real device every process's. */
EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == NULL || total == NULL) return fail(cudaErrorInvalidValue, __func__, "NULL pointer");
  uint64_t t = vsim_device_memory_total(), u = vsim_mem_used(vsim_current_device());
  *total = (size_t)t;
  *free = (size_t)(u < t ? t - u : 0);
  return cudaSuccess;
}

EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  if (vsim_mem_unregister(ptr) != 0)
    return fail(cudaErrorHostMemoryNotRegistered, __func__, "%p is not the start of a registered range", ptr);
  return cudaSuccess;
}

/* Pinned and registered memory is reachable from the device at the host's
 * own address (the emulated device's memory is host memory, and the
 * device answers 1 to cudaDevAttrCanUseHostPointerForRegisteredMem). */
EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  vsim_mem_info info;
  if (pDevice == NULL) return fail(cudaErrorInvalidValue, __func__, "pDevice is NULL");
  if (flags != 0) return fail(cudaErrorInvalidValue, __func__, "flags 0x%x (must be 0)", flags);
  if (vsim_mem_query(pHost, &info) != VSIM_MEM_HOST)
    return fail(cudaErrorInvalidValue, __func__, "%p is not pinned or registered host memory", pHost);
  *pDevice = pHost;
  return cudaSuccess;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == NULL) return fail(cudaErrorInvalidValue, __func__, "attributes is NULL");
  vsim_mem_info info;
  switch (vsim_mem_query(ptr, &info)) {
    case VSIM_MEM_DEVICE:
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = info.device;
      attributes->devicePointer = (void*)ptr;
      attributes->hostPointer = NULL;
      break;
    case VSIM_MEM_HOST:
      /* Pinned memory is mapped at the same address on the device (UVA). */
      attributes->type = cudaMemoryTypeHost;
      attributes->device = info.device;
      attributes->devicePointer = (void*)ptr;
      attributes->hostPointer = (void*)ptr;
      break;
    default:
      /* CUDA >= 11 answers success for unregistered memory. device -2 is
       * what real runtimes report there (observed, not from a header). */
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = -2;
      attributes->devicePointer = NULL;
      attributes->hostPointer = (void*)ptr;
      break;
  }
  return cudaSuccess;
}

static const char* kind_name(int kind) {
  static const char* const names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                                      "Default"};
  return kind >= 0 && kind <= 4 ? names[kind] : "invalid";
}

/* The kind must agree with what the registry knows about both pointers,
 * which is how a plugin that maps copy directions wrongly is caught. The
 * copy runs on s (NULL: the default stream, and the caller waits). */
static cudaError_t copy(void* dst, const void* src, size_t count, int kind, vsim_stream* s, const char* api) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return fail(cudaErrorInvalidValue, api, "invalid cudaMemcpyKind %d", kind);
  }
  if (count == 0) return cudaSuccess;
  if (dst == NULL || src == NULL) return fail(cudaErrorInvalidValue, api, "NULL pointer");
  vsim_mem_info di, si;
  int dk = vsim_mem_check_range(dst, count, &di);
  int sk = vsim_mem_check_range(src, count, &si);
  if (dk < 0) return fail(cudaErrorInvalidValue, api, "dst %p + %zu runs past its allocation", dst, count);
  if (sk < 0) return fail(cudaErrorInvalidValue, api, "src %p + %zu runs past its allocation", src, count);
  int ddev = dk == VSIM_MEM_DEVICE, sdev = sk == VSIM_MEM_DEVICE;
  int ok = 1;
  switch (kind) {
    case cudaMemcpyHostToHost: ok = !ddev && !sdev; break;
    case cudaMemcpyHostToDevice: ok = ddev && !sdev; break;
    case cudaMemcpyDeviceToHost: ok = !ddev && sdev; break;
    case cudaMemcpyDeviceToDevice: ok = ddev && sdev; break;
    default: break; /* cudaMemcpyDefault infers the direction */
  }
  if (!ok) {
    return fail(cudaErrorInvalidValue, api, "kind %s but dst %p is %s memory and src %p is %s memory",
                kind_name(kind), dst, ddev ? "device" : "host", src, sdev ? "device" : "host");
  }
  vsim_stream* on = s != NULL ? s : vsim_stream_default(vsim_current_device());
  if (on == NULL || vsim_stream_copy(on, dst, src, count) != 0) return fail(cudaErrorMemoryAllocation, api, "no memory");
  return s != NULL ? cudaSuccess : waited(vsim_stream_sync(on), api);
}

EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return copy(dst, src, count, (int)kind, NULL, __func__);
}

EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return copy(dst, src, count, (int)kind, stream_of(stream), __func__);
}

EXPORT cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  if (count == 0) return cudaSuccess;
  vsim_mem_info info;
  int k = vsim_mem_check_range(devPtr, count, &info);
  if (k == VSIM_MEM_UNREGISTERED) {
    return fail(cudaErrorInvalidValue, __func__, "%p is not device or pinned memory", devPtr);
  }
  if (k < 0) return fail(cudaErrorInvalidValue, __func__, "%p + %zu runs past its allocation", devPtr, count);
  /* Observed on H200s (CUDA 13): a memset on the legacy stream of a thread
   * whose current device is not the memory's device fails with
   * cudaErrorInvalidValue. Callers that hop threads must set the device. */
  if (k == VSIM_MEM_DEVICE && is_builtin_stream(stream) && info.device != vsim_current_device()) {
    return fail(cudaErrorInvalidValue, __func__, "%p is memory of device %d, but this thread's current device is %d",
                devPtr, info.device, vsim_current_device());
  }
  if (vsim_stream_memset(stream_of(stream), devPtr, value, count) != 0) return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  return cudaSuccess;
}

/* ---- streams ---- */

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  if (pStream == NULL) return fail(cudaErrorInvalidValue, __func__, "pStream is NULL");
  if (flags & ~cudaStreamNonBlocking) return fail(cudaErrorInvalidValue, __func__, "flags 0x%x", flags);
  vsim_stream* s = vsim_stream_create(vsim_current_device(), flags);
  if (s == NULL) return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  *pStream = (cudaStream_t)s;
  return cudaSuccess;
}

/* NCCL applications (nccl-tests, capi/nccl/test) make their streams and
 * events with the plain forms: flags 0. */
EXPORT cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithFlags(pStream, 0); }

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return waited(vsim_stream_sync(stream_of(stream)), __func__);
}

EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  return vsim_stream_idle(stream_of(stream)) ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (is_builtin_stream(stream) || vsim_stream_destroy(stream) != 0) {
    return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  if (vsim_event_lookup(event) == NULL) {
    return fail(cudaErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  }
  if (flags & ~cudaEventWaitExternal) return fail(cudaErrorInvalidValue, __func__, "flags 0x%x", flags);
  if (vsim_stream_wait_event(stream_of(stream), vsim_event_lookup(event)) != 0) return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  return cudaSuccess;
}

/* ---- events ---- */

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == NULL) return fail(cudaErrorInvalidValue, __func__, "event is NULL");
  unsigned all = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (flags & ~all) return fail(cudaErrorInvalidValue, __func__, "flags 0x%x", flags);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) {
    return fail(cudaErrorInvalidValue, __func__, "cudaEventInterprocess needs cudaEventDisableTiming");
  }
  vsim_event* e = vsim_event_create(vsim_current_device(),
                                    (flags & cudaEventDisableTiming) ? VSIM_EVENT_NO_TIMING : 0);
  if (e == NULL) return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  *event = (cudaEvent_t)e;
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(cudaErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  if (vsim_event_record(e, stream_of(stream)) != 0) return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(cudaErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  vsim_event_sync(e);
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(cudaErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  return vsim_event_query(e) ? cudaSuccess : cudaErrorNotReady; /* never recorded: complete, as in CUDA */
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (vsim_event_destroy(event) != 0) {
    return fail(cudaErrorInvalidResourceHandle, __func__, "event %p", (void*)event);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == NULL) return fail(cudaErrorInvalidValue, __func__, "ms is NULL");
  vsim_event* a = vsim_event_lookup(start);
  vsim_event* b = vsim_event_lookup(end);
  if (a == NULL || b == NULL) {
    return fail(cudaErrorInvalidResourceHandle, __func__, "events %p %p", (void*)start, (void*)end);
  }
  int rc = vsim_event_elapsed_ms(a, b, ms);
  if (rc == -1) return fail(cudaErrorInvalidResourceHandle, __func__, "an event was never recorded");
  if (rc == -2) return fail(cudaErrorInvalidResourceHandle, __func__, "an event has cudaEventDisableTiming");
  if (rc == -3) return fail(cudaErrorNotReady, __func__, "an event has not completed yet");
  return cudaSuccess;
}

/* ---- compute capability, libraries and kernels (CUDA 12+) ---- */

/* cudaDeviceAttr: ComputeCapabilityMajor 75, Minor 76: the emulated
 * device says 9.0 (a Hopper); CanUseHostPointerForRegisteredMem 91: yes
 * (cudaHostGetDevicePointer says why). The only attributes the plugins ask
 * for. */
EXPORT cudaError_t cudaDeviceGetAttribute(int* value, int attr, int device) {
  if (value == NULL) return fail(cudaErrorInvalidValue, __func__, "value is NULL");
  if (device < 0 || device >= vsim_device_count()) return fail(cudaErrorInvalidDevice, __func__, "device %d", device);
  switch (attr) {
    case 75: *value = 9; return cudaSuccess;
    case 76: *value = 0; return cudaSuccess;
    case 91: *value = 1; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, __func__, "attribute %d is not emulated", attr);
  }
}

/* The kernels the emulated device runs, by name: the nvidia plugin's
 * reduceLocal and relayReduce kernels (vsim_cubin.h), one of each per data
 * type. A library lists the names its image declares; a kernel handle
 * points into this table. */
typedef struct {
  char name[32];
  int dtype;
  int relay; /* flagcx_relay_<type>, else flagcx_reduce_<type> */
} kernel;
#define NUM_KERNELS (2 * VSIM_NUM_DTYPES)
static kernel kernels[NUM_KERNELS];
static pthread_once_t kernelsOnce = PTHREAD_ONCE_INIT;
static void initKernels(void) {
  static const char* const suffix[VSIM_NUM_DTYPES] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"};
  for (int i = 0; i < NUM_KERNELS; i++) {
    int t = i % VSIM_NUM_DTYPES, relay = i >= VSIM_NUM_DTYPES;
    snprintf(kernels[i].name, sizeof kernels[i].name, "%s%s", relay ? VSIM_RELAY_PREFIX : VSIM_REDUCE_PREFIX, suffix[t]);
    kernels[i].dtype = t;
    kernels[i].relay = relay;
  }
}
static kernel* kernelNamed(const char* name) {
  pthread_once(&kernelsOnce, initKernels);
  for (int i = 0; i < NUM_KERNELS; i++)
    if (strcmp(kernels[i].name, name) == 0) return &kernels[i];
  return NULL;
}
static kernel* kernelOf(const void* handle) {
  pthread_once(&kernelsOnce, initKernels);
  for (int i = 0; i < NUM_KERNELS; i++)
    if (handle == &kernels[i]) return &kernels[i];
  return NULL;
}

#define LIBRARY_MAGIC 0x6c69626bu
typedef struct {
  unsigned magic;
  char* names; /* the image's lines after the magic one */
} library;

EXPORT cudaError_t cudaLibraryLoadData(void** lib, const void* code, void* jitOptions, void** jitValues, unsigned numJit,
                                       void* libOptions, void** libValues, unsigned numLib) {
  (void)jitOptions, (void)jitValues, (void)numJit, (void)libOptions, (void)libValues, (void)numLib;
  if (lib == NULL || code == NULL) return fail(cudaErrorInvalidValue, __func__, "NULL library or code");
  size_t m = strlen(VSIM_CUBIN_MAGIC);
  if (strncmp(code, VSIM_CUBIN_MAGIC, m) != 0 || ((const char*)code)[m] != '\n') {
    return fail(cudaErrorInvalidKernelImage, __func__, "not an image of the emulated NVRTC (a real cubin cannot run here)");
  }
  library* l = calloc(1, sizeof *l);
  if (l == NULL || (l->names = strdup((const char*)code + m + 1)) == NULL) {
    free(l);
    return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  }
  l->magic = LIBRARY_MAGIC;
  *lib = l;
  return cudaSuccess;
}

EXPORT cudaError_t cudaLibraryUnload(void* lib) {
  library* l = lib;
  if (l == NULL || l->magic != LIBRARY_MAGIC) return fail(cudaErrorInvalidResourceHandle, __func__, "library %p", lib);
  l->magic = 0;
  free(l->names);
  free(l);
  return cudaSuccess;
}

EXPORT cudaError_t cudaLibraryGetKernel(void** k, void* lib, const char* name) {
  library* l = lib;
  if (k == NULL || name == NULL) return fail(cudaErrorInvalidValue, __func__, "NULL kernel or name");
  if (l == NULL || l->magic != LIBRARY_MAGIC) return fail(cudaErrorInvalidResourceHandle, __func__, "library %p", lib);
  size_t n = strlen(name);
  for (const char* at = l->names; *at; at += strcspn(at, "\n") + (at[strcspn(at, "\n")] != 0)) {
    if (strncmp(at, name, n) == 0 && (at[n] == '\n' || at[n] == 0)) {
      kernel* kn = kernelNamed(name);
      if (kn == NULL) return fail(cudaErrorSymbolNotFound, __func__, "%s is in the image, but the emulated device cannot run it", name);
      *k = kn;
      return cudaSuccess;
    }
  }
  return fail(cudaErrorSymbolNotFound, __func__, "no kernel %s in the library", name);
}

typedef struct {
  const kernel* k;
  vsim_reduce_args a;
} launch;

/* fold: dst = srcs[0] op ... op srcs[nsrcs-1] over count elements, with
 * the core's reductions, block by block through a private buffer, so dst
 * may be one of the sources. */
static void fold(void* dst, const void* const* srcs, int nsrcs, size_t count, int dtype, int op, int div) {
  size_t size = vsim_dtype_size(dtype), bytes = count * size;
  enum { block = 16384 };
  char tmp[block] __attribute__((aligned(16)));
  for (size_t at = 0; at < bytes; at += block / size * size) {
    size_t n = bytes - at < block / size * size ? bytes - at : block / size * size;
    memcpy(tmp, (const char*)srcs[0] + at, n);
    for (int i = 1; i < nsrcs; i++) vsim_reduce(tmp, (const char*)srcs[i] + at, n / size, dtype, op);
    if (op == VSIM_AVG) vsim_avg_finish(tmp, n / size, dtype, div);
    memcpy((char*)dst + at, tmp, n);
  }
}

/* A reduceLocal kernel on the stream's worker; a pointer that is not
 * device memory long enough fails the stream, as an illegal address would
 * on a device. */
static int runReduce(void* arg) {
  launch* l = arg;
  vsim_reduce_args* a = &l->a;
  size_t bytes = (size_t)a->count * vsim_dtype_size(l->k->dtype);
  int rc = 0;
  vsim_mem_info info;
  if (vsim_mem_check_range(a->dst, bytes, &info) != VSIM_MEM_DEVICE) rc = -1;
  for (int i = 0; i < a->nsrcs && rc == 0; i++)
    if (vsim_mem_check_range(a->src[i], bytes, &info) != VSIM_MEM_DEVICE) rc = -1;
  if (rc != 0) vsim_debug("flagcx_reduce: a pointer of the launch is not device memory of %zu bytes", bytes);
  else fold(a->dst, a->src, a->nsrcs, a->count, l->k->dtype, a->op, a->div);
  free(l);
  return rc;
}

/* ---- relayReduce's kernels (ABI v5) ---- */

/* A relay kernel's launch: the arguments as captured, and the core stream
 * it runs on (never freed: core/stream.c), whose destroy it watches. */
typedef struct {
  const kernel* k;
  vsim_stream* s;
  vsim_relay_args a;
} relayLaunch;

/* relayPointers writes into why what is wrong with a relay's pointers and
 * returns why ("" when nothing): src and dst must be device memory, window,
 * landed and go pinned or registered host memory, every source either, each
 * long enough, and the two words 8-byte aligned (the device stores and
 * loads them whole). */
static const char* relayPointers(const vsim_relay_args* a, size_t size, char* why, size_t n) {
  size_t bytes = (size_t)a->count * size;
  vsim_mem_info info;
  why[0] = '\0';
  if (a->bytes > 0 && vsim_mem_check_range(a->src, a->bytes, &info) != VSIM_MEM_DEVICE)
    snprintf(why, n, "src %p is not device memory of %llu bytes", a->src, (unsigned long long)a->bytes);
  else if (a->bytes > 0 && vsim_mem_check_range(a->window, a->bytes, &info) != VSIM_MEM_HOST)
    snprintf(why, n, "window %p is not registered host memory of %llu bytes", a->window, (unsigned long long)a->bytes);
  else if (vsim_mem_check_range(a->landed, 8, &info) != VSIM_MEM_HOST || ((uintptr_t)a->landed & 7))
    snprintf(why, n, "landed %p is not an aligned word of registered host memory", (void*)a->landed);
  else if (vsim_mem_check_range(a->go, 8, &info) != VSIM_MEM_HOST || ((uintptr_t)a->go & 7))
    snprintf(why, n, "go %p is not an aligned word of registered host memory", (const void*)a->go);
  else if (bytes > 0 && vsim_mem_check_range(a->dst, bytes, &info) != VSIM_MEM_DEVICE)
    snprintf(why, n, "dst %p is not device memory of %zu bytes", a->dst, bytes);
  for (int i = 0; why[0] == '\0' && bytes > 0 && i < a->nsrcs; i++) {
    int kind = vsim_mem_check_range(a->srcs[i], bytes, &info);
    if (kind != VSIM_MEM_DEVICE && kind != VSIM_MEM_HOST)
      snprintf(why, n, "source %d (%p) is neither device memory nor registered host memory of %zu bytes", i, a->srcs[i], bytes);
  }
  return why;
}

/* relayWait waits for the go: 1 go, 0 abort (of this relay or of a later
 * one on the same words), -1 given up. It spins a
 * little (a host that answers at once is answered at once), then yields,
 * then sleeps 20 us between polls, so that a relay waiting for a slow host
 * costs no core. It gives up when its stream is being destroyed
 * (vsim_stream_destroy would otherwise wait for it forever) and after
 * FLAGCX_VENDORSIM_TIMEOUT seconds, the emulator's bound on every wait: a
 * device would wait on, but an emulated run must end. */
static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static int relayWait(const relayLaunch* l) {
  const vsim_relay_args* a = &l->a;
  double deadline = seconds() + vsim_env_timeout();
  for (unsigned polls = 0;; polls++) {
    uint64_t g = __atomic_load_n(a->go, __ATOMIC_ACQUIRE);
    if (g == a->value) return 1;
    /* An abort stops this relay and every earlier one (sdk's ABI v5). */
    if ((g & VSIM_RELAY_ABORT) && (g & ~VSIM_RELAY_ABORT) >= a->value) return 0;
    if (polls < 256) continue;
    if (polls < 512) {
      sched_yield();
      continue;
    }
    if (vsim_stream_destroying(l->s)) {
      vsim_debug("%s: its stream is being destroyed while it waits for go = %llu: it gives up, dst untouched", l->k->name,
                 (unsigned long long)a->value);
      return -1;
    }
    if (seconds() > deadline) {
      vsim_debug("%s: no go = %llu (or its abort) within FLAGCX_VENDORSIM_TIMEOUT = %g s (go holds %llu): it gives up, dst untouched",
                 l->k->name, (unsigned long long)a->value, vsim_env_timeout(), (unsigned long long)g);
      return -1;
    }
    nanosleep(&(struct timespec){0, 20000}, NULL);
  }
}

/* A relayReduce kernel on the stream's worker: src to window, value to
 * landed (a release store: the window's bytes are visible before it), the
 * wait, then the fold (the acquire load of the go makes what the host
 * wrote before it visible), then value | done to landed. A failed check or a wait given up fails the
 * stream, as an illegal address or a hang would on a device. */
static int runRelay(void* arg) {
  relayLaunch* l = arg;
  vsim_relay_args* a = &l->a;
  char why[256];
  int rc = 0;
  if (*relayPointers(a, vsim_dtype_size(l->k->dtype), why, sizeof why)) {
    vsim_debug("%s: %s (when it ran)", l->k->name, why);
    rc = -1;
  } else {
    if (a->bytes > 0) memcpy(a->window, a->src, (size_t)a->bytes);
    __atomic_store_n(a->landed, a->value, __ATOMIC_RELEASE);
    int go = relayWait(l);
    if (go < 0) rc = -1;
    if (go > 0) fold(a->dst, a->srcs, a->nsrcs, (size_t)a->count, l->k->dtype, a->op, a->div);
    /* Done with host memory (folded or stopped): the host may let the
     * windows be written again. A wait given up says nothing: the stream
     * failed, and its host learns that from the stream. */
    if (go >= 0) __atomic_store_n(a->landed, a->value | VSIM_RELAY_DONE, __ATOMIC_RELEASE);
  }
  free(l);
  return rc;
}

/* launchRelay checks a relay launch and enqueues it like communication
 * (vsim_stream_enqueue_joined): its host waits on *landed, which kicks no
 * stream, so FLAGCX_VENDORSIM_STREAM_DELAY_US must not hold it back (the
 * join also pulls the stream's earlier work, which the relay waits for). */
static cudaError_t launchRelay(const kernel* k, const void* arg, vsim_stream* s) {
  const char* api = "cudaLaunchKernel";
  vsim_relay_args a;
  char why[256];
  memcpy(&a, arg, sizeof a); /* arguments are captured at launch */
  if (vsim_env_sync()) {
    return fail(cudaErrorNotSupported, api,
                "%s: with FLAGCX_VENDORSIM_SYNC=1 work runs inside its enqueue, where a relay would wait for a go that "
                "its caller can only give once the launch returned: it would never finish", k->name);
  }
  if (a.nsrcs < 1 || a.nsrcs > VSIM_REDUCE_MAX_SRCS || a.op < 0 || a.op > VSIM_AVG || a.div < 1 || a.dtype != k->dtype ||
      a.value == 0 || a.value >= VSIM_RELAY_DONE) {
    return fail(cudaErrorInvalidValue, api, "%s: %d sources, op %d, divisor %d, data type %d, value %#llx", k->name, a.nsrcs,
                a.op, a.div, a.dtype, (unsigned long long)a.value);
  }
  if (*relayPointers(&a, vsim_dtype_size(k->dtype), why, sizeof why)) return fail(cudaErrorInvalidValue, api, "%s: %s", k->name, why);
  relayLaunch* l = malloc(sizeof *l);
  if (l == NULL || s == NULL) {
    free(l);
    return fail(cudaErrorMemoryAllocation, api, "no memory");
  }
  *l = (relayLaunch){k, s, a};
  if (vsim_stream_enqueue_joined(&s, 1, runRelay, l) != 0) {
    free(l);
    return fail(cudaErrorMemoryAllocation, api, "no memory");
  }
  return cudaSuccess;
}

typedef struct { unsigned x, y, z; } dim3;

EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t sharedMem,
                                    cudaStream_t stream) {
  (void)sharedMem;
  const kernel* k = kernelOf(func);
  if (k == NULL) return fail(cudaErrorInvalidDeviceFunction, __func__, "%p is not a kernel of a loaded library", func);
  if (grid.x == 0 || block.x == 0 || block.x * block.y * block.z > 1024 || args == NULL || args[0] == NULL) {
    return fail(cudaErrorInvalidValue, __func__, "grid %u, block %ux%ux%u, args %p", grid.x, block.x, block.y, block.z, (void*)args);
  }
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle, __func__, "stream %p", (void*)stream);
  if (k->relay) return launchRelay(k, args[0], stream_of(stream));
  vsim_reduce_args a;
  memcpy(&a, args[0], sizeof a); /* arguments are captured at launch */
  if (a.nsrcs < 1 || a.nsrcs > VSIM_REDUCE_MAX_SRCS || a.op < 0 || a.op > VSIM_AVG || a.div < 1) {
    return fail(cudaErrorInvalidValue, __func__, "%s: %d sources, op %d, divisor %d", k->name, a.nsrcs, a.op, a.div);
  }
  launch* l = malloc(sizeof *l);
  if (l == NULL) return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  l->k = k;
  l->a = a;
  if (vsim_stream_enqueue(stream_of(stream), runReduce, l) != 0) {
    free(l);
    return fail(cudaErrorMemoryAllocation, __func__, "no memory");
  }
  return cudaSuccess;
}

/* ---- errors ---- */

EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

EXPORT const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unrecognized error code";
  }
}
