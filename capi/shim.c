// shim.c: FlagCX's C entries with their exact prototypes (include/flagcx.h),
// over the Go functions of exports.go. C keeps what must live in C memory:
// the communicator, stream and event structs the caller holds, the device
// handle's function table, and the current device of each calling thread.
// On the host backend, memory, copies, streams and events are plain C here.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

// Per-thread state lives behind a pthread key, not in __thread variables:
// a library with TLS of its own must fit glibc's small static TLS reserve
// when it is dlopen'ed (as Python loads the torch plugin, and this library
// with it), and Go's runtime already takes its share of it.
static pthread_key_t threadKey;
static pthread_once_t threadOnce = PTHREAD_ONCE_INIT;
static void threadKeyInit(void) { pthread_key_create(&threadKey, free); }

struct shimThreadState *shimThread(void) {
  pthread_once(&threadOnce, threadKeyInit);
  struct shimThreadState *t = pthread_getspecific(threadKey);
  if (t == NULL && (t = calloc(1, sizeof *t)) != NULL) {
    t->curDev = -1;
    if (pthread_setspecific(threadKey, t) != 0) {
      free(t);
      t = NULL;
    }
  }
  return t;
}

/* ---- fork() without exec ---------------------------------------------- */

int shimForked;
// The entry last refused in the forked child (a string literal).
static const char *forkedEntry = "";

// forkChild runs in the child of every fork() of the process: only the
// forking thread lives on there, and the Go runtime's threads (scheduler,
// garbage collector) are gone, so entering Go would wait for them for ever.
static void forkChild(void) {
  __atomic_store_n(&shimForked, 1, __ATOMIC_RELAXED);
}

// Registered when the library loads (before any fork that matters); a
// library that dlclose unloads is unregistered by glibc.
__attribute__((constructor)) static void shimAtFork(void) {
  pthread_atfork(NULL, NULL, forkChild);
}

flagcxResult_t shimForkedFail(const char *entry) {
  __atomic_store_n(&forkedEntry, entry, __ATOMIC_RELAXED);
  return flagcxInvalidUsage;
}

const char *shimForkedError(void) {
  static const char why[] =
      "invalid usage: this process is a child made by fork() after "
      "libflagcx.so was loaded, and the Go runtime the library carries does "
      "not survive a fork (its threads stay in the parent), so no call can "
      "run here: exec a new program in the child (Python: multiprocessing's "
      "\"spawn\" start method), or load the library only after the fork";
  struct shimThreadState *t = shimThread();
  if (t == NULL)
    return why;
  snprintf(t->lastError, sizeof t->lastError, "%s: %s",
           __atomic_load_n(&forkedEntry, __ATOMIC_RELAXED), why);
  return t->lastError;
}

/* ---- Destroyed communicators ------------------------------------------ */

// The structs of destroyed communicators, kept (a few bytes each) so that a
// stale handle is refused, not freed memory read; the list keeps them
// reachable for leak checkers.
static struct flagcxComm *deadComms;
static pthread_mutex_t deadMu = PTHREAD_MUTEX_INITIALIZER;

void shimBury(flagcxComm_t comm) {
  pthread_mutex_lock(&deadMu);
  comm->destroyed = 1;
  comm->nextDead = deadComms;
  deadComms = comm;
  pthread_mutex_unlock(&deadMu);
}

flagcxResult_t shimLive(flagcxComm_t comm, const char *entry) {
  if (!__atomic_load_n(&comm->destroyed, __ATOMIC_RELAXED))
    return flagcxSuccess;
  return FAIL((flagcxComm_t)NULL, entry, flagcxInvalidUsage,
              "the communicator was already destroyed or aborted "
              "(flagcxCommDestroy, flagcxCommAbort): make a new one with "
              "flagcxCommInitRank");
}

uintptr_t shimGroupKey(void) {
  struct shimThreadState *t = shimThread();
  return t != NULL && t->nullGroups > 0 ? (uintptr_t)t : 0;
}

// curDev is the device last set through this library on the calling
// thread (-1: never; device 0 is then assumed, as vendor runtimes do).
static int curDev(void) {
  struct shimThreadState *t = shimThread();
  return t ? t->curDev : -1;
}

static void setCurDev(int d) {
  struct shimThreadState *t = shimThread();
  if (t != NULL)
    t->curDev = d;
}
// 1 on the host backend, 0 on a plugin's, -1 until chosen.
static int onHost = -1;

const char *capiLibDir(void) {
  Dl_info info;
  if (dladdr((void *)&capiLibDir, &info) && info.dli_fname != NULL)
    return info.dli_fname;
  return "";
}

// rtGetDevice is the vendor runtime's own "current device of the calling
// thread" (cudaGetDevice), so that a device a framework set through the
// runtime directly counts; NULL where the backend has none.
static int (*rtGetDevice)(int *);

// findGetDevice looks entry up in the runtime library the plugin loaded.
static void findGetDevice(const char *lib, const char *entry) {
  if (lib[0] == 0 || entry[0] == 0)
    return;
  void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  void *f = h ? dlsym(h, entry) : NULL;
  if (f == NULL) // the process's copy (e.g. a framework's cudart)
    f = dlsym(RTLD_DEFAULT, entry);
  rtGetDevice = (int (*)(int *))f;
}

extern char **environ;

// Go read the environment of the process's start; what the program set
// since (os.environ in Python, setenv) counts from here on, as in FlagCX.
void shimSyncEnv(void) { capiSyncEnv(environ); }

flagcxResult_t shimReady(const char *entry) {
  if (__atomic_load_n(&onHost, __ATOMIC_ACQUIRE) >= 0)
    return flagcxSuccess;
  shimSyncEnv();
  int host = 0;
  char lib[4096], sym[256];
  CHECK(capiBackend((char *)entry, &host, lib, sizeof lib, sym, sizeof sym));
  findGetDevice(lib, sym);
  __atomic_store_n(&onHost, host, __ATOMIC_RELEASE);
  return flagcxSuccess;
}

int shimDevice(void) {
  int d;
  if (rtGetDevice != NULL && rtGetDevice(&d) == 0)
    return d;
  d = curDev();
  return d < 0 ? 0 : d;
}
uintptr_t shimStream(flagcxStream_t s) { return s ? s->base : 0; }

flagcxResult_t shimBind(flagcxComm_t comm) {
  if (comm->onDevice && shimDevice() != comm->dev) {
    CHECK(capiSetDevice(comm->dev));
    setCurDev(comm->dev);
  }
  return flagcxSuccess;
}

/* ---- The device handle ------------------------------------------------ */

static flagcxResult_t hDeviceSynchronize() {
  USABLE("deviceSynchronize");
  CHECK(shimReady("deviceSynchronize"));
  return onHost ? flagcxSuccess : (flagcxResult_t)capiDeviceSync();
}

static flagcxResult_t hDeviceMemcpy(void *dst, void *src, size_t size,
                                    flagcxMemcpyType_t type,
                                    flagcxStream_t stream) {
  USABLE("deviceMemcpy");
  CHECK(shimReady("deviceMemcpy"));
  if (size == 0)
    return flagcxSuccess;
  NEED(dst, "deviceMemcpy", "dst");
  NEED(src, "deviceMemcpy", "src");
  if (onHost) {
    memmove(dst, src, size);
    return flagcxSuccess;
  }
  return capiMemcpy(dst, src, size, type, shimStream(stream));
}

static flagcxResult_t hDeviceMemset(void *ptr, int value, size_t size,
                                    flagcxMemType_t type,
                                    flagcxStream_t stream) {
  USABLE("deviceMemset");
  CHECK(shimReady("deviceMemset"));
  if (size == 0)
    return flagcxSuccess;
  NEED(ptr, "deviceMemset", "ptr");
  if (onHost || type == flagcxMemHost) {
    memset(ptr, value, size);
    return flagcxSuccess;
  }
  return capiMemset(ptr, value, size, shimStream(stream));
}

static flagcxResult_t hDeviceMalloc(void **ptr, size_t size,
                                    flagcxMemType_t type,
                                    flagcxStream_t stream) {
  USABLE("deviceMalloc");
  (void)stream; // allocations are synchronous
  CHECK(shimReady("deviceMalloc"));
  NEED(ptr, "deviceMalloc", "ptr");
  *ptr = NULL;
  if (onHost) {
    if (posix_memalign(ptr, 64, size ? size : 1) != 0)
      return FAIL((flagcxComm_t)NULL, "deviceMalloc", flagcxSystemError,
                  "out of host memory");
    return flagcxSuccess;
  }
  uintptr_t p = 0;
  CHECK(capiMalloc(&p, size, type, shimDevice()));
  *ptr = (void *)p;
  return flagcxSuccess;
}

static flagcxResult_t hDeviceFree(void *ptr, flagcxMemType_t type,
                                  flagcxStream_t stream) {
  USABLE("deviceFree");
  (void)stream;
  CHECK(shimReady("deviceFree"));
  if (ptr == NULL)
    return flagcxSuccess;
  if (onHost) {
    free(ptr);
    return flagcxSuccess;
  }
  return capiFree(ptr, type);
}

static flagcxResult_t hSetDevice(int d) {
  USABLE("setDevice");
  CHECK(shimReady("setDevice"));
  if (!onHost)
    CHECK(capiSetDevice(d));
  setCurDev(d); // the CPU has no devices to choose: any index is the host
  return flagcxSuccess;
}

static flagcxResult_t hGetDevice(int *d) {
  USABLE("getDevice");
  NEED(d, "getDevice", "dev");
  *d = shimDevice();
  return flagcxSuccess;
}

static flagcxResult_t hGetDeviceCount(int *count) {
  USABLE("getDeviceCount");
  NEED(count, "getDeviceCount", "count");
  return capiDeviceCount(count);
}

// FlagCX's callers pass a buffer of at least 64 bytes (the torch plugin's).
static flagcxResult_t hGetVendor(char *vendor) {
  USABLE("getVendor");
  NEED(vendor, "getVendor", "vendor");
  return capiVendor(vendor, 64);
}

static flagcxResult_t hHostGetDevicePointer(void **pDevice, void *pHost) {
  USABLE("hostGetDevicePointer");
  CHECK(shimReady("hostGetDevicePointer"));
  NEED(pDevice, "hostGetDevicePointer", "pDevice");
  NEED(pHost, "hostGetDevicePointer", "pHost");
  if (onHost) { // host memory is the host backend's device memory
    *pDevice = pHost;
    return flagcxSuccess;
  }
  return UNSUPPORTED((flagcxComm_t)NULL, "hostGetDevicePointer",
                     "mapping host memory into a device's address space");
}

static flagcxResult_t hStreamCreate(flagcxStream_t *stream) {
  USABLE("streamCreate");
  CHECK(shimReady("streamCreate"));
  NEED(stream, "streamCreate", "stream");
  *stream = NULL;
  flagcxStream_t s = calloc(1, sizeof *s);
  if (s == NULL)
    return FAIL((flagcxComm_t)NULL, "streamCreate", flagcxSystemError,
                "out of host memory");
  if (!onHost) {
    flagcxResult_t r = capiStreamCreate(shimDevice(), &s->base);
    if (r != flagcxSuccess) {
      free(s);
      return r;
    }
  }
  *stream = s;
  return flagcxSuccess;
}

static flagcxResult_t hStreamDestroy(flagcxStream_t stream) {
  USABLE("streamDestroy");
  if (stream == NULL)
    return flagcxSuccess;
  flagcxResult_t r = flagcxSuccess;
  if (!onHost && stream->base != 0)
    r = capiStreamDestroy(stream->base);
  free(stream);
  return r;
}

// streamCopy wraps a framework's native stream (a cudaStream_t passed by
// value) without owning it: streamFree releases the wrapper alone.
static flagcxResult_t hStreamCopy(flagcxStream_t *newStream, void *oldStream) {
  USABLE("streamCopy");
  NEED(newStream, "streamCopy", "newStream");
  flagcxStream_t s = calloc(1, sizeof *s);
  if (s == NULL)
    return FAIL((flagcxComm_t)NULL, "streamCopy", flagcxSystemError,
                "out of host memory");
  s->base = (uintptr_t)oldStream;
  *newStream = s;
  return flagcxSuccess;
}

static flagcxResult_t hStreamFree(flagcxStream_t stream) {
  USABLE("streamFree");
  free(stream);
  return flagcxSuccess;
}

static flagcxResult_t hStreamSynchronize(flagcxStream_t stream) {
  USABLE("streamSynchronize");
  if (stream == NULL || onHost)
    return flagcxSuccess;
  return capiStreamSync(stream->base);
}

static flagcxResult_t hStreamQuery(flagcxStream_t stream) {
  USABLE("streamQuery");
  if (stream == NULL || onHost)
    return flagcxSuccess;
  return capiStreamQuery(stream->base);
}

static flagcxResult_t hStreamWaitEvent(flagcxStream_t stream,
                                       flagcxEvent_t event) {
  USABLE("streamWaitEvent");
  NEED(event, "streamWaitEvent", "event");
  if (onHost)
    return flagcxSuccess;
  return capiStreamWaitEvent(shimStream(stream), event->base);
}

static flagcxResult_t hEventCreate(flagcxEvent_t *event,
                                   flagcxEventType_t eventType) {
  USABLE("eventCreate");
  (void)eventType; // events always time where the runtime can
  CHECK(shimReady("eventCreate"));
  NEED(event, "eventCreate", "event");
  *event = NULL;
  flagcxEvent_t e = calloc(1, sizeof *e);
  if (e == NULL)
    return FAIL((flagcxComm_t)NULL, "eventCreate", flagcxSystemError,
                "out of host memory");
  if (!onHost) {
    flagcxResult_t r = capiEventCreate(shimDevice(), &e->base);
    if (r != flagcxSuccess) {
      free(e);
      return r;
    }
  }
  *event = e;
  return flagcxSuccess;
}

static flagcxResult_t hEventDestroy(flagcxEvent_t event) {
  USABLE("eventDestroy");
  if (event == NULL)
    return flagcxSuccess;
  flagcxResult_t r = flagcxSuccess;
  if (!onHost)
    r = capiEventDestroy(event->base);
  free(event);
  return r;
}

static flagcxResult_t hEventRecord(flagcxEvent_t event, flagcxStream_t stream) {
  USABLE("eventRecord");
  NEED(event, "eventRecord", "event");
  if (onHost) { // host work is done when its call returns
    clock_gettime(CLOCK_MONOTONIC, &event->at);
    return flagcxSuccess;
  }
  return capiEventRecord(event->base, shimStream(stream));
}

static flagcxResult_t hEventSynchronize(flagcxEvent_t event) {
  USABLE("eventSynchronize");
  NEED(event, "eventSynchronize", "event");
  return onHost ? flagcxSuccess : (flagcxResult_t)capiEventSync(event->base);
}

static flagcxResult_t hEventQuery(flagcxEvent_t event) {
  USABLE("eventQuery");
  NEED(event, "eventQuery", "event");
  return onHost ? flagcxSuccess : (flagcxResult_t)capiEventQuery(event->base);
}

static flagcxResult_t hEventElapsedTime(float *ms, flagcxEvent_t start,
                                        flagcxEvent_t end) {
  USABLE("eventElapsedTime");
  NEED(ms, "eventElapsedTime", "ms");
  NEED(start, "eventElapsedTime", "start");
  NEED(end, "eventElapsedTime", "end");
  if (onHost) {
    *ms = (float)((end->at.tv_sec - start->at.tv_sec) * 1e3 +
                  (end->at.tv_nsec - start->at.tv_nsec) / 1e6);
    return flagcxSuccess;
  }
  return capiEventElapsed(start->base, end->base, ms);
}

#define IPC_UNSUPPORTED(entry)                                                 \
  UNSUPPORTED((flagcxComm_t)NULL, entry, "IPC memory handles")

static flagcxResult_t hIpcMemHandleCreate(flagcxIpcMemHandle_t *handle,
                                          size_t *size) {
  USABLE("ipcMemHandleCreate");
  (void)handle, (void)size;
  return IPC_UNSUPPORTED("ipcMemHandleCreate");
}
static flagcxResult_t hIpcMemHandleGet(flagcxIpcMemHandle_t handle,
                                       void *devPtr) {
  USABLE("ipcMemHandleGet");
  (void)handle, (void)devPtr;
  return IPC_UNSUPPORTED("ipcMemHandleGet");
}
static flagcxResult_t hIpcMemHandleOpen(flagcxIpcMemHandle_t handle,
                                        void **devPtr) {
  USABLE("ipcMemHandleOpen");
  (void)handle, (void)devPtr;
  return IPC_UNSUPPORTED("ipcMemHandleOpen");
}
static flagcxResult_t hIpcMemHandleClose(void *devPtr) {
  USABLE("ipcMemHandleClose");
  (void)devPtr;
  return IPC_UNSUPPORTED("ipcMemHandleClose");
}
static flagcxResult_t hIpcMemHandleFree(flagcxIpcMemHandle_t handle) {
  USABLE("ipcMemHandleFree");
  (void)handle;
  return IPC_UNSUPPORTED("ipcMemHandleFree");
}

// FlagCX's order (include/flagcx.h).
const struct flagcxDeviceHandle shimHandle = {
    hDeviceSynchronize, hDeviceMemcpy,       hDeviceMemset,
    hDeviceMalloc,      hDeviceFree,         hSetDevice,
    hGetDevice,         hGetDeviceCount,     hGetVendor,
    hHostGetDevicePointer,
    hStreamCreate,      hStreamDestroy,      hStreamCopy,
    hStreamFree,        hStreamSynchronize,  hStreamQuery,
    hStreamWaitEvent,
    hEventCreate,       hEventDestroy,       hEventRecord,
    hEventSynchronize,  hEventQuery,         hEventElapsedTime,
    hIpcMemHandleCreate, hIpcMemHandleGet,   hIpcMemHandleOpen,
    hIpcMemHandleClose, hIpcMemHandleFree,
};

flagcxResult_t flagcxDeviceHandleInit(flagcxDeviceHandle_t *devHandle) {
  USABLE("flagcxDeviceHandleInit");
  NEED(devHandle, "flagcxDeviceHandleInit", "devHandle");
  *devHandle = NULL;
  CHECK(shimReady("flagcxDeviceHandleInit"));
  flagcxDeviceHandle_t h = malloc(sizeof *h);
  if (h == NULL)
    return FAIL((flagcxComm_t)NULL, "flagcxDeviceHandleInit",
                flagcxSystemError, "out of host memory");
  *h = shimHandle;
  *devHandle = h;
  return flagcxSuccess;
}

flagcxResult_t flagcxDeviceHandleFree(flagcxDeviceHandle_t devHandle) {
  USABLE("flagcxDeviceHandleFree");
  free(devHandle);
  return flagcxSuccess;
}

flagcxResult_t flagcxHandleInit(flagcxHandlerGroup_t *handler) {
  USABLE("flagcxHandleInit");
  NEED(handler, "flagcxHandleInit", "handler");
  *handler = calloc(1, sizeof **handler);
  if (*handler == NULL)
    return FAIL((flagcxComm_t)NULL, "flagcxHandleInit", flagcxSystemError,
                "out of host memory");
  flagcxResult_t r = flagcxDeviceHandleInit(&(*handler)->devHandle);
  if (r != flagcxSuccess) {
    free(*handler);
    *handler = NULL;
  }
  return r;
}

flagcxResult_t flagcxHandleFree(flagcxHandlerGroup_t handler) {
  USABLE("flagcxHandleFree");
  if (handler != NULL) {
    flagcxDeviceHandleFree(handler->devHandle);
    free(handler);
  }
  return flagcxSuccess;
}

size_t getFlagcxDataTypeSize(flagcxDataType_t dtype) {
  switch (dtype) {
  case flagcxInt8:
  case flagcxUint8:
    return 1;
  case flagcxFloat16:
  case flagcxBfloat16:
    return 2;
  case flagcxInt32:
  case flagcxUint32:
  case flagcxFloat32:
    return 4;
  case flagcxInt64:
  case flagcxUint64:
  case flagcxFloat64:
    return 8;
  default:
    return 0;
  }
}
