/*
 * cnrt.c: emulated Cambricon CNRT 6.x (libcnrt.so), reporting 6.14.1.
 *
 * Exactly the CNRT entry points that the cambricon plugin calls, with CNRT's
 * names, argument orders and enum values (docs/vendor-facts.md#cambricon-cnrt,
 * evidence [CNRTH] unless marked). Things a plugin gets wrong against CNRT
 * and that this file therefore checks:
 *   - cnrtMemTransDir_t is H2D 0, D2D 1, D2H 2, H2H 3, P2P 4, NoDirection 5
 *     (NOT CUDA's order); a direction that contradicts the pointers (as the
 *     core's registry knows them) is cnrtErrorArgsInvalid;
 *   - cnrtMemcpyAsync takes the queue BEFORE the direction;
 *   - cnrtQueueWaitNotifier takes (notifier, queue, flag), notifier first;
 *   - cnrtNotifierElapsedTime takes (start, end, float* ms), ms last;
 *   - cnrtGetDeviceCount takes an unsigned int*.
 * Queues and notifiers are the core's streams and events, so a handle of the
 * wrong kind (a queue where a notifier belongs) is rejected.
 *
 * Unverified (⚠) and chosen here, the plugin's README lists them too:
 *   - the NULL queue is accepted as the default queue, cnrtQueuePerThread
 *     ((cnrtQueue_t)1) as the per-thread queue;
 *   - CNRT_NOTIFIER_WAIT_DEFAULT is 0: cnrtQueueWaitNotifier refuses any
 *     other flag value;
 *   - cnrtDeviceGetPCIBusId (C [FCX]) writes "dddd:bb:dd.f" in lower case;
 *   - cnrtGetLibVersion(int* major, int* minor, int* patch) is not surveyed
 *     (standard CNRT API; the plugin treats it as optional);
 *   - no devices: cnrtGetDeviceCount returns cnrtErrorNoDevice;
 *   - cnrtMemcpyNoDirection infers the direction, cnrtMemcpyPeerToPeer
 *     needs two device pointers.
 * Queues run their work asynchronously (core/stream.c): cnrtQueueQuery and
 * cnrtQueryNotifier answer cnrtErrorNotReady (1) while work is pending;
 * cnrtErrorBusy (632014) is never returned.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- CNRT types and values (cnrt.h v6.14.1) ---- */
typedef enum {
  cnrtSuccess = 0,
  cnrtErrorNotReady = 1,
  cnrtErrorInit = 100002,
  cnrtErrorNoDevice = 100004,
  cnrtErrorDeviceInvalid = 100005,
  cnrtErrorArgsInvalid = 100006,
  cnrtErrorSys = 100007,
  cnrtErrorSysNoMem = 100010,
  cnrtErrorInvalidResourceHandle = 100014,
  cnrtErrorNotSupport = 100050,
  cnrtErrorNoMem = 100100,
  cnrtErrorBusy = 632014,
  cnrtErrorUnknown = 999991
} cnrtRet_t;

typedef enum {
  cnrtMemcpyHostToDev = 0,
  cnrtMemcpyDevToDev = 1,
  cnrtMemcpyDevToHost = 2,
  cnrtMemcpyHostToHost = 3,
  cnrtMemcpyPeerToPeer = 4,
  cnrtMemcpyNoDirection = 5
} cnrtMemTransDir_t;

#define CNRT_NOTIFIER_DEFAULT 0x0u
#define CNRT_NOTIFIER_DISABLE_TIMING_SW 0x2u
#define CNRT_NOTIFIER_DISABLE_TIMING_ALL 0x4u
#define CNRT_NOTIFIER_INTERPROCESS 0x8u
#define CNRT_NOTIFIER_WAIT_DEFAULT 0x0u /* ⚠ value presumed */

typedef struct cnrtQueue* cnrtQueue_t;
typedef struct cnrtNotifier* cnrtNotifier_t;
#define cnrtQueuePerThread ((cnrtQueue_t)1)

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated Cambricon CNRT 6.14.1 (host memory, no MLU)";
/* Not a CNRT API: the reason of this thread's last failure (CNRT has only
 * static error strings). The plugin appends it to its messages when the
 * library is an emulator. */
EXPORT const char* flagcxVendorsimLastError(void) { return vsim_last_error(); }

static cnrtRet_t fail(cnrtRet_t e, const char* api, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static cnrtRet_t fail(cnrtRet_t e, const char* api, const char* fmt, ...) {
  char why[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s: %s", api, why);
  vsim_debug("%s -> %d: %s", api, (int)e, why);
  return e;
}

static int queue_ok(cnrtQueue_t q) { return q == NULL || q == cnrtQueuePerThread || vsim_stream_lookup(q) != NULL; }

/* The core stream behind a queue (NULL, per-thread: the current device's
 * default queue, with legacy ordering; core/stream.c). */
static vsim_stream* queue_of(cnrtQueue_t q) {
  return q == NULL || q == cnrtQueuePerThread ? vsim_stream_default(vsim_current_device()) : vsim_stream_lookup(q);
}

/* An operation on the queue failed (e.g. a collective whose peer died):
 * reported at the next wait, standing in for the hang a device shows. */
static cnrtRet_t waited(int rc, const char* api) {
  return rc == 0 ? cnrtSuccess : fail(cnrtErrorSys, api, "an operation on the queue failed (see the communicator's async error)");
}

#define CHECK_QUEUE(q)                                                                                  \
  do {                                                                                                  \
    if (!queue_ok(q))                                                                                   \
      return fail(cnrtErrorInvalidResourceHandle, __func__, "queue %p is not a live cnrtQueue_t%s",     \
                  (void*)(q), vsim_event_lookup(q) ? " (it is a cnrtNotifier_t)" : "");                  \
  } while (0)

/* ---- devices and versions ---- */

EXPORT cnrtRet_t cnrtGetDeviceCount(unsigned int* count) {
  if (count == NULL) return fail(cnrtErrorArgsInvalid, __func__, "count is NULL");
  *count = (unsigned)vsim_device_count();
  if (*count == 0) return fail(cnrtErrorNoDevice, __func__, "FLAGCX_VENDORSIM_DEVICES=0");
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtSetDevice(int dev) {
  if (vsim_device_count() == 0) return fail(cnrtErrorNoDevice, __func__, "no devices");
  if (vsim_set_current_device(dev) != 0)
    return fail(cnrtErrorDeviceInvalid, __func__, "device %d of %d", dev, vsim_device_count());
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtGetDevice(int* dev) {
  if (dev == NULL) return fail(cnrtErrorArgsInvalid, __func__, "dev is NULL");
  *dev = vsim_current_device();
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtGetLibVersion(int* major, int* minor, int* patch) {
  if (major == NULL || minor == NULL || patch == NULL) return fail(cnrtErrorArgsInvalid, __func__, "NULL");
  *major = 6, *minor = 14, *patch = 1;
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtDeviceGetPCIBusId(char* pciBusId, int len, int dev) {
  if (dev < 0 || dev >= vsim_device_count()) return fail(cnrtErrorDeviceInvalid, __func__, "device %d", dev);
  if (pciBusId == NULL || len <= 0) return fail(cnrtErrorArgsInvalid, __func__, "buffer %p, len %d", pciBusId, len);
  unsigned dom, bus, slot, fn;
  vsim_device_pci(dev, &dom, &bus, &slot, &fn);
  snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.%x", dom, bus, slot, fn);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtSyncDevice(void) { return waited(vsim_device_sync(vsim_current_device()), __func__); }

/* ---- memory ---- */

EXPORT cnrtRet_t cnrtMalloc(void** pPtr, size_t bytes) {
  if (pPtr == NULL) return fail(cnrtErrorArgsInvalid, __func__, "pPtr is NULL");
  if (vsim_device_count() == 0) return fail(cnrtErrorNoDevice, __func__, "no devices");
  if (vsim_mem_alloc(pPtr, bytes, VSIM_MEM_DEVICE, vsim_current_device(), 0) != 0)
    return fail(cnrtErrorNoMem, __func__, "%zu bytes", bytes);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtFree(void* ptr) {
  if (ptr == NULL) return cnrtSuccess;
  if (vsim_mem_free(ptr, VSIM_MEM_DEVICE) != 0)
    return fail(cnrtErrorArgsInvalid, __func__, "%p is not the start of a cnrtMalloc allocation", ptr);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtHostMalloc(void** pPtr, size_t bytes) {
  if (pPtr == NULL) return fail(cnrtErrorArgsInvalid, __func__, "pPtr is NULL");
  if (vsim_mem_alloc(pPtr, bytes, VSIM_MEM_HOST, vsim_current_device(), 0) != 0)
    return fail(cnrtErrorSysNoMem, __func__, "%zu bytes", bytes);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtFreeHost(void* ptr) {
  if (ptr == NULL) return cnrtSuccess;
  if (vsim_mem_free(ptr, VSIM_MEM_HOST) != 0)
    return fail(cnrtErrorArgsInvalid, __func__, "%p is not the start of a cnrtHostMalloc allocation", ptr);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtHostRegister(void* ptr, size_t bytes, unsigned int flags) {
  if (ptr == NULL || bytes == 0) return fail(cnrtErrorArgsInvalid, __func__, "empty range %p+%zu", ptr, bytes);
  if (vsim_mem_register(ptr, bytes, flags) != 0)
    return fail(cnrtErrorArgsInvalid, __func__, "%p+%zu overlaps registered or allocated memory", ptr, bytes);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtHostUnregister(void* ptr) {
  if (vsim_mem_unregister(ptr) != 0) return fail(cnrtErrorArgsInvalid, __func__, "%p is not the start of a registered range", ptr);
  return cnrtSuccess;
}

static const char* dir_name(int dir) {
  static const char* const names[] = {"cnrtMemcpyHostToDev", "cnrtMemcpyDevToDev", "cnrtMemcpyDevToHost",
                                      "cnrtMemcpyHostToHost", "cnrtMemcpyPeerToPeer", "cnrtMemcpyNoDirection"};
  return dir >= 0 && dir <= 5 ? names[dir] : "an invalid cnrtMemTransDir_t";
}

/* The direction must agree with what the registry knows about both
 * pointers: this is what catches a plugin using CUDA's numbering. */
static cnrtRet_t copy(void* dst, const void* src, size_t bytes, int dir, vsim_stream* q, const char* api) {
  if (dir < cnrtMemcpyHostToDev || dir > cnrtMemcpyNoDirection)
    return fail(cnrtErrorArgsInvalid, api, "invalid cnrtMemTransDir_t %d", dir);
  if (bytes == 0) return cnrtSuccess;
  if (dst == NULL || src == NULL) return fail(cnrtErrorArgsInvalid, api, "NULL pointer");
  vsim_mem_info di, si;
  int dk = vsim_mem_check_range(dst, bytes, &di);
  int sk = vsim_mem_check_range(src, bytes, &si);
  if (dk < 0) return fail(cnrtErrorArgsInvalid, api, "dst %p + %zu runs past its allocation", dst, bytes);
  if (sk < 0) return fail(cnrtErrorArgsInvalid, api, "src %p + %zu runs past its allocation", src, bytes);
  int ddev = dk == VSIM_MEM_DEVICE, sdev = sk == VSIM_MEM_DEVICE;
  int ok = 1;
  switch (dir) {
    case cnrtMemcpyHostToDev: ok = ddev && !sdev; break;
    case cnrtMemcpyDevToDev: ok = ddev && sdev; break;
    case cnrtMemcpyDevToHost: ok = !ddev && sdev; break;
    case cnrtMemcpyHostToHost: ok = !ddev && !sdev; break;
    case cnrtMemcpyPeerToPeer: ok = ddev && sdev; break;
    default: break; /* cnrtMemcpyNoDirection: inferred */
  }
  if (!ok)
    return fail(cnrtErrorArgsInvalid, api, "direction %d (%s) but dst %p is %s memory and src %p is %s memory", dir,
                dir_name(dir), dst, ddev ? "device" : "host", src, sdev ? "device" : "host");
  vsim_stream* on = q != NULL ? q : vsim_stream_default(vsim_current_device());
  if (on == NULL || vsim_stream_copy(on, dst, src, bytes) != 0) return fail(cnrtErrorSysNoMem, api, "no memory");
  return q != NULL ? cnrtSuccess : waited(vsim_stream_sync(on), api);
}

EXPORT cnrtRet_t cnrtMemcpy(void* dst, void* src, size_t bytes, cnrtMemTransDir_t dir) {
  return copy(dst, src, bytes, (int)dir, NULL, __func__);
}

EXPORT cnrtRet_t cnrtMemcpyAsync(void* dst, void* src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir) {
  CHECK_QUEUE(queue);
  return copy(dst, src, bytes, (int)dir, queue_of(queue), __func__);
}

EXPORT cnrtRet_t cnrtMemcpyAsync_V2(void* dst, void* src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir) {
  CHECK_QUEUE(queue);
  return copy(dst, src, bytes, (int)dir, queue_of(queue), __func__);
}

/* q NULL: cnrtMemset, which the caller waits for. */
static cnrtRet_t set(void* ptr, int value, size_t bytes, vsim_stream* q, const char* api) {
  if (bytes == 0) return cnrtSuccess;
  vsim_mem_info info;
  int k = vsim_mem_check_range(ptr, bytes, &info);
  if (k < 0) return fail(cnrtErrorArgsInvalid, api, "%p + %zu runs past its allocation", ptr, bytes);
  if (k != VSIM_MEM_DEVICE) return fail(cnrtErrorArgsInvalid, api, "%p is not device memory", ptr);
  vsim_stream* on = q != NULL ? q : vsim_stream_default(vsim_current_device());
  if (on == NULL || vsim_stream_memset(on, ptr, value, bytes) != 0) return fail(cnrtErrorSysNoMem, api, "no memory");
  return q != NULL ? cnrtSuccess : waited(vsim_stream_sync(on), api);
}

EXPORT cnrtRet_t cnrtMemset(void* ptr, int value, size_t bytes) { return set(ptr, value, bytes, NULL, __func__); }

EXPORT cnrtRet_t cnrtMemsetAsync(void* ptr, int value, size_t bytes, cnrtQueue_t queue) {
  CHECK_QUEUE(queue);
  return set(ptr, value, bytes, queue_of(queue), __func__);
}

/* ---- queues ---- */

EXPORT cnrtRet_t cnrtQueueCreate(cnrtQueue_t* pQueue) {
  if (pQueue == NULL) return fail(cnrtErrorArgsInvalid, __func__, "pQueue is NULL");
  vsim_stream* s = vsim_stream_create(vsim_current_device(), 0);
  if (s == NULL) return fail(cnrtErrorSysNoMem, __func__, "no memory");
  *pQueue = (cnrtQueue_t)s;
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue) {
  if (queue == NULL || queue == cnrtQueuePerThread || vsim_stream_destroy(queue) != 0)
    return fail(cnrtErrorInvalidResourceHandle, __func__, "queue %p", (void*)queue);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueueSync(cnrtQueue_t queue) {
  CHECK_QUEUE(queue);
  return waited(vsim_stream_sync(queue_of(queue)), __func__);
}

EXPORT cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue) {
  CHECK_QUEUE(queue);
  return vsim_stream_idle(queue_of(queue)) ? cnrtSuccess : cnrtErrorNotReady;
}

/* ---- notifiers ---- */

static cnrtRet_t notifier_create(cnrtNotifier_t* n, unsigned flags, const char* api) {
  const unsigned all = CNRT_NOTIFIER_DISABLE_TIMING_SW | CNRT_NOTIFIER_DISABLE_TIMING_ALL | CNRT_NOTIFIER_INTERPROCESS;
  if (n == NULL) return fail(cnrtErrorArgsInvalid, api, "notifier is NULL");
  if (flags & ~all) return fail(cnrtErrorArgsInvalid, api, "flags 0x%x", flags);
  unsigned noTiming = flags & (CNRT_NOTIFIER_DISABLE_TIMING_SW | CNRT_NOTIFIER_DISABLE_TIMING_ALL);
  vsim_event* e = vsim_event_create(vsim_current_device(), noTiming ? VSIM_EVENT_NO_TIMING : 0);
  if (e == NULL) return fail(cnrtErrorSysNoMem, api, "no memory");
  *n = (cnrtNotifier_t)e;
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t* notifier) {
  return notifier_create(notifier, CNRT_NOTIFIER_DEFAULT, __func__);
}

EXPORT cnrtRet_t cnrtNotifierCreateWithFlags(cnrtNotifier_t* notifier, unsigned int flags) {
  return notifier_create(notifier, flags, __func__);
}

EXPORT cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t notifier) {
  if (vsim_event_destroy(notifier) != 0)
    return fail(cnrtErrorInvalidResourceHandle, __func__, "notifier %p", (void*)notifier);
  return cnrtSuccess;
}

#define GET_NOTIFIER(var, n)                                                                             \
  vsim_event* var = vsim_event_lookup(n);                                                                \
  if (var == NULL)                                                                                       \
    return fail(cnrtErrorInvalidResourceHandle, __func__, "notifier %p is not a live cnrtNotifier_t%s", \
                (void*)(n), vsim_stream_lookup(n) ? " (it is a cnrtQueue_t)" : "");

EXPORT cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue) {
  GET_NOTIFIER(e, notifier);
  CHECK_QUEUE(queue);
  if (vsim_event_record(e, queue_of(queue)) != 0) return fail(cnrtErrorSysNoMem, __func__, "no memory");
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t notifier) {
  GET_NOTIFIER(e, notifier);
  vsim_event_sync(e);
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t notifier) {
  GET_NOTIFIER(e, notifier);
  return vsim_event_query(e) ? cnrtSuccess : cnrtErrorNotReady; /* never placed counts as reached */
}

EXPORT cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue, unsigned int flag) {
  GET_NOTIFIER(e, notifier);
  (void)e;
  CHECK_QUEUE(queue);
  if (flag != CNRT_NOTIFIER_WAIT_DEFAULT)
    return fail(cnrtErrorArgsInvalid, __func__, "flag 0x%x (only CNRT_NOTIFIER_WAIT_DEFAULT = 0 is emulated)", flag);
  if (vsim_stream_wait_event(queue_of(queue), e) != 0) return fail(cnrtErrorSysNoMem, __func__, "no memory");
  return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start, cnrtNotifier_t end, float* ms) {
  if (ms == NULL) return fail(cnrtErrorArgsInvalid, __func__, "ms is NULL");
  GET_NOTIFIER(a, start);
  GET_NOTIFIER(b, end);
  int rc = vsim_event_elapsed_ms(a, b, ms);
  if (rc == -1) return fail(cnrtErrorArgsInvalid, __func__, "a notifier was never placed");
  if (rc == -2) return fail(cnrtErrorArgsInvalid, __func__, "a notifier was created with timing disabled");
  if (rc == -3) return fail(cnrtErrorNotReady, __func__, "a notifier has not been reached yet");
  return cnrtSuccess;
}

/* ---- errors ---- */

EXPORT const char* cnrtGetErrorStr(cnrtRet_t ret) {
  switch (ret) {
    case cnrtSuccess: return "Success";
    case cnrtErrorNotReady: return "Not ready";
    case cnrtErrorInit: return "Initialization error";
    case cnrtErrorNoDevice: return "No MLU device";
    case cnrtErrorDeviceInvalid: return "Invalid device";
    case cnrtErrorArgsInvalid: return "Invalid argument";
    case cnrtErrorSys: return "System error";
    case cnrtErrorSysNoMem: return "Out of host memory";
    case cnrtErrorInvalidResourceHandle: return "Invalid resource handle";
    case cnrtErrorNotSupport: return "Not supported";
    case cnrtErrorNoMem: return "Out of device memory";
    case cnrtErrorBusy: return "Device busy";
    default: return "Unknown error";
  }
}
