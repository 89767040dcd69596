/*
 * xpurt.c: emulated Kunlunxin XPU runtime (libxpurt.so.1).
 *
 * Exactly the XPU runtime entry points (docs/vendor-facts.md#kunlunxin-xpu-runtime)
 * that the kunlunxin plugin calls, with the runtime's names, argument orders and
 * values from xpu/runtime.h and xpu/defs.h ([KLRT]):
 *   - XPUMemcpyKind: XPU_DEVICE_TO_HOST 0, XPU_HOST_TO_DEVICE 1,
 *     XPU_DEVICE_TO_DEVICE 2 (not CUDA's order), checked against the core's
 *     registry, so a plugin that maps directions wrongly fails here;
 *   - XPUMemoryKind: XPU_MEM_MAIN 0 (HBM), XPU_MEM_L3 1 (not emulated);
 *   - XPUError_t: 0 success, errors 700+n; returned NEGATED, as the XRE
 *     documentation describes (⚠ the header lists positive values; callers
 *     must treat any non-zero as failure);
 *   - streams (XPUStream) and events (XPUEvent) are core handles; NULL is
 *     the default stream; events carry no timing: the runtime has no
 *     elapsed-time and no query call, so neither exists here.
 * xpu_memcpy_async is declared in newer runtime_ex.h only (⚠); it is
 * emulated because real XRE4/5 runtimes export it (FlagCX and InfiniCore
 * call it).
 *
 * Work on a stream runs asynchronously on the stream's worker
 * (core/stream.c); xpu_memcpy and xpu_wait wait for it.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- XPU types and values (xpu/runtime.h, xpu/defs.h) ---- */
enum {
  XPU_SUCCESS = 0,
  XPUERR_INVALID_DEVICE = 701,
  XPUERR_UNINIT = 702,
  XPUERR_NODEV = 703,
  XPUERR_NOMEM = 705,
  XPUERR_INVALID_PARAM = 707,
  XPUERR_NOSUPPORT = 712,
  XPUERR_TIMEOUT = 715,
  XPUERR_BUSY = 716
};
typedef enum { XPU_DEVICE_TO_HOST = 0, XPU_HOST_TO_DEVICE = 1, XPU_DEVICE_TO_DEVICE = 2 } XPUMemcpyKind;
typedef enum { XPU_MEM_MAIN = 0, XPU_MEM_L3 = 1 } XPUMemoryKind;
typedef enum { XPUATTR_PCI_ADDRESS = 0 } XPUDeviceAttr;
typedef void* XPUStream;
typedef void* XPUEvent;

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated Kunlunxin XPU runtime (libxpurt.so.1; host memory, no XPU)";

/* Failures return the negated XPUError_t; the reason goes to
 * FLAGCX_VENDORSIM_DEBUG=1 output (the runtime has no error-text query:
 * xpu_strerror is a static inline of xpu/defs.h, so it is not exported
 * here either). */
static int fail(int code, const char* api, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(int code, const char* api, const char* fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s: %s", api, why);
  vsim_debug("%s -> %d: %s", api, -code, why);
  return -code;
}

static int stream_ok(XPUStream s) { return s == NULL || vsim_stream_lookup(s) != NULL; }

/* The core stream behind a handle (NULL: the current device's default
 * stream, with legacy ordering; core/stream.c). */
static vsim_stream* stream_of(XPUStream s) { return s == NULL ? vsim_stream_default(vsim_current_device()) : vsim_stream_lookup(s); }

/* An operation on the stream failed (a collective whose peer died, say):
 * reported at the next wait, standing in for the hang a device shows. */
static int waited(int rc, const char* api) {
  return rc == 0 ? XPU_SUCCESS : fail(XPUERR_TIMEOUT, api, "an operation on the stream failed (see the context's async error)");
}

/* ---- devices ---- */

EXPORT int xpu_device_count(int* count) {
  if (count == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "count is NULL");
  *count = vsim_device_count();
  if (*count == 0) return fail(XPUERR_NODEV, __func__, "FLAGCX_VENDORSIM_DEVICES=0");
  return XPU_SUCCESS;
}

EXPORT int xpu_set_device(int devid) {
  if (vsim_device_count() == 0) return fail(XPUERR_NODEV, __func__, "no devices");
  if (vsim_set_current_device(devid) != 0)
    return fail(XPUERR_INVALID_DEVICE, __func__, "device %d of %d", devid, vsim_device_count());
  return XPU_SUCCESS;
}

EXPORT int xpu_current_device(int* devid) {
  if (devid == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "devid is NULL");
  *devid = vsim_current_device();
  return XPU_SUCCESS;
}

/* XPUATTR_PCI_ADDRESS packs domain[31:16], bus[15:8], device[7:3], function[2:0]. */
EXPORT int xpu_device_get_attr(uint64_t* value, XPUDeviceAttr attr, int devid) {
  if (value == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "value is NULL");
  if (devid < 0 || devid >= vsim_device_count()) return fail(XPUERR_INVALID_DEVICE, __func__, "device %d", devid);
  if (attr != XPUATTR_PCI_ADDRESS) return fail(XPUERR_NOSUPPORT, __func__, "attribute %d is not emulated", (int)attr);
  unsigned dom, bus, slot, fn;
  vsim_device_pci(devid, &dom, &bus, &slot, &fn);
  *value = (uint64_t)(dom & 0xffff) << 16 | (bus & 0xff) << 8 | (slot & 0x1f) << 3 | (fn & 0x7);
  return XPU_SUCCESS;
}

/* ---- memory ---- */

EXPORT int xpu_malloc(void** pdevbuf, uint64_t sz, XPUMemoryKind kind) {
  if (pdevbuf == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "pdevbuf is NULL");
  if (kind == XPU_MEM_L3) return fail(XPUERR_NOSUPPORT, __func__, "XPU_MEM_L3 is not emulated");
  if (kind != XPU_MEM_MAIN) return fail(XPUERR_INVALID_PARAM, __func__, "XPUMemoryKind %d", (int)kind);
  if (vsim_device_count() == 0) return fail(XPUERR_NODEV, __func__, "no devices");
  if (vsim_mem_alloc(pdevbuf, (size_t)sz, VSIM_MEM_DEVICE, vsim_current_device(), 0) != 0)
    return fail(XPUERR_NOMEM, __func__, "%llu bytes", (unsigned long long)sz);
  return XPU_SUCCESS;
}

EXPORT int xpu_free(void* devptr) {
  if (devptr == NULL) return XPU_SUCCESS;
  if (vsim_mem_free(devptr, VSIM_MEM_DEVICE) != 0)
    return fail(XPUERR_INVALID_PARAM, __func__, "%p is not the start of an xpu_malloc allocation", devptr);
  return XPU_SUCCESS;
}

EXPORT int xpu_host_alloc(void** pbuf, uint64_t sz, unsigned int flags) {
  if (pbuf == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "pbuf is NULL");
  if (flags != 0) return fail(XPUERR_INVALID_PARAM, __func__, "flags 0x%x (only 0 is known)", flags);
  if (vsim_mem_alloc(pbuf, (size_t)sz, VSIM_MEM_HOST, vsim_current_device(), 0) != 0)
    return fail(XPUERR_NOMEM, __func__, "%llu bytes", (unsigned long long)sz);
  return XPU_SUCCESS;
}

EXPORT int xpu_host_free(void* p) {
  if (p == NULL) return XPU_SUCCESS;
  if (vsim_mem_free(p, VSIM_MEM_HOST) != 0)
    return fail(XPUERR_INVALID_PARAM, __func__, "%p is not the start of an xpu_host_alloc allocation", p);
  return XPU_SUCCESS;
}

/* Not in the public XPU headers seen: the signature follows xpu_host_alloc
 * (plugins/kunlunxin/README.md lists it as unverified). */
EXPORT int xpu_host_register(void* p, uint64_t sz, unsigned int flags) {
  if (p == NULL || sz == 0) return fail(XPUERR_INVALID_PARAM, __func__, "empty range %p+%llu", p, (unsigned long long)sz);
  if (flags != 0) return fail(XPUERR_INVALID_PARAM, __func__, "flags 0x%x (only 0 is known)", flags);
  if (vsim_mem_register(p, (size_t)sz, 0) != 0)
    return fail(XPUERR_INVALID_PARAM, __func__, "%p+%llu overlaps registered or allocated memory", p, (unsigned long long)sz);
  return XPU_SUCCESS;
}

EXPORT int xpu_host_unregister(void* p) {
  if (vsim_mem_unregister(p) != 0) return fail(XPUERR_INVALID_PARAM, __func__, "%p is not the start of a registered range", p);
  return XPU_SUCCESS;
}

static const char* kind_name(int kind) {
  static const char* const names[] = {"XPU_DEVICE_TO_HOST", "XPU_HOST_TO_DEVICE", "XPU_DEVICE_TO_DEVICE"};
  return kind >= 0 && kind <= 2 ? names[kind] : "invalid";
}

/* The kind must agree with what the registry knows about both pointers. */
static int copy(void* dst, const void* src, uint64_t sz, int kind, vsim_stream* s, const char* api) {
  if (kind < XPU_DEVICE_TO_HOST || kind > XPU_DEVICE_TO_DEVICE)
    return fail(XPUERR_INVALID_PARAM, api, "invalid XPUMemcpyKind %d", kind);
  if (sz == 0) return XPU_SUCCESS;
  if (dst == NULL || src == NULL) return fail(XPUERR_INVALID_PARAM, api, "NULL pointer");
  vsim_mem_info di, si;
  int dk = vsim_mem_check_range(dst, (size_t)sz, &di);
  int sk = vsim_mem_check_range(src, (size_t)sz, &si);
  if (dk < 0) return fail(XPUERR_INVALID_PARAM, api, "dst %p + %llu runs past its allocation", dst, (unsigned long long)sz);
  if (sk < 0) return fail(XPUERR_INVALID_PARAM, api, "src %p + %llu runs past its allocation", src, (unsigned long long)sz);
  int ddev = dk == VSIM_MEM_DEVICE, sdev = sk == VSIM_MEM_DEVICE, ok = 0;
  switch (kind) {
    case XPU_DEVICE_TO_HOST: ok = !ddev && sdev; break;
    case XPU_HOST_TO_DEVICE: ok = ddev && !sdev; break;
    case XPU_DEVICE_TO_DEVICE: ok = ddev && sdev; break;
  }
  if (!ok)
    return fail(XPUERR_INVALID_PARAM, api, "kind %s (%d) but dst %p is %s memory and src %p is %s memory",
                kind_name(kind), kind, dst, ddev ? "device" : "host", src, sdev ? "device" : "host");
  vsim_stream* on = s != NULL ? s : vsim_stream_default(vsim_current_device());
  if (on == NULL || vsim_stream_copy(on, dst, src, (size_t)sz) != 0) return fail(XPUERR_NOMEM, api, "no memory");
  return s != NULL ? XPU_SUCCESS : waited(vsim_stream_sync(on), api);
}

EXPORT int xpu_memcpy(void* dst, const void* src, uint64_t sz, XPUMemcpyKind kind) {
  return copy(dst, src, sz, (int)kind, NULL, __func__);
}

EXPORT int xpu_memcpy_async(void* dst, const void* src, uint64_t sz, XPUMemcpyKind kind, XPUStream stream) {
  if (!stream_ok(stream)) return fail(XPUERR_INVALID_PARAM, __func__, "stream %p is not a live XPUStream", stream);
  return copy(dst, src, sz, (int)kind, stream_of(stream), __func__);
}

/* ---- streams ---- */

EXPORT int xpu_stream_create(XPUStream* pstream) {
  if (pstream == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "pstream is NULL");
  vsim_stream* s = vsim_stream_create(vsim_current_device(), 0);
  if (s == NULL) return fail(XPUERR_NOMEM, __func__, "no memory");
  *pstream = s;
  return XPU_SUCCESS;
}

EXPORT int xpu_stream_destroy(XPUStream stream) {
  if (stream == NULL || vsim_stream_destroy(stream) != 0)
    return fail(XPUERR_INVALID_PARAM, __func__, "stream %p is not a live XPUStream", stream);
  return XPU_SUCCESS;
}

/* The stream synchronize of the XPU runtime; NULL is the default stream. */
EXPORT int xpu_wait(XPUStream stream) {
  if (!stream_ok(stream)) return fail(XPUERR_INVALID_PARAM, __func__, "stream %p is not a live XPUStream", stream);
  return waited(vsim_stream_sync(stream_of(stream)), __func__);
}

EXPORT int xpu_stream_wait_event(XPUStream stream, XPUEvent event) {
  if (!stream_ok(stream)) return fail(XPUERR_INVALID_PARAM, __func__, "stream %p is not a live XPUStream", stream);
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "event %p is not a live XPUEvent", event);
  if (vsim_stream_wait_event(stream_of(stream), e) != 0) return fail(XPUERR_NOMEM, __func__, "no memory");
  return XPU_SUCCESS;
}

/* ---- events (no timing: the runtime has no elapsed-time call) ---- */

EXPORT int xpu_event_create(XPUEvent* pevent) {
  if (pevent == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "pevent is NULL");
  vsim_event* e = vsim_event_create(vsim_current_device(), VSIM_EVENT_NO_TIMING);
  if (e == NULL) return fail(XPUERR_NOMEM, __func__, "no memory");
  *pevent = e;
  return XPU_SUCCESS;
}

EXPORT int xpu_event_record(XPUEvent event, XPUStream stream) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "event %p is not a live XPUEvent", event);
  if (!stream_ok(stream)) return fail(XPUERR_INVALID_PARAM, __func__, "stream %p is not a live XPUStream", stream);
  if (vsim_event_record(e, stream_of(stream)) != 0) return fail(XPUERR_NOMEM, __func__, "no memory");
  return XPU_SUCCESS;
}

/* Blocks the host until the event is reached. */
EXPORT int xpu_event_wait(XPUEvent event) {
  vsim_event* e = vsim_event_lookup(event);
  if (e == NULL) return fail(XPUERR_INVALID_PARAM, __func__, "event %p is not a live XPUEvent", event);
  vsim_event_sync(e);
  return XPU_SUCCESS;
}

EXPORT int xpu_event_destroy(XPUEvent event) {
  if (vsim_event_destroy(event) != 0)
    return fail(XPUERR_INVALID_PARAM, __func__, "event %p is not a live XPUEvent", event);
  return XPU_SUCCESS;
}

