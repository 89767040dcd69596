/*
 * libflagcx-example.so: the host CPU as a flagcx-go "vendor".
 *
 * This is the template for vendor teams. It implements every entry of the
 * plugin ABI (sdk/include/flagcx_plugin.h) with plain C: "device" memory is
 * host memory, streams and events are synchronous, and the collective library
 * runs between processes (one per rank, as real CCLs do) over POSIX shared
 * memory. It passes `flagcx conformance` (conformance/README.md). A real
 * plugin keeps the same shape and replaces each body with calls into the
 * vendor's runtime and CCL, dlopen'ed at init.
 *
 * Build it alone, out of tree, against the header only:
 *   cc -shared -fPIC -O2 -Wall -fvisibility=hidden -I<flagcx-go>/sdk/include \
 *      -o libflagcx-example.so example.c -lrt -pthread
 *
 * How the collectives work: every rank pair (src, dst) has a byte ring in a
 * shared-memory segment that the unique id names. send/recv stream through
 * the rings; a group queues its operations and groupEnd progresses them all
 * together, so any order of sends and receives completes. Each collective is
 * an exchange of the blocks each peer needs (grouped send/recv), then local
 * arithmetic, combining ranks in order 0..n-1 so every rank gets the same
 * bits. Waits check that the peers' processes are alive and give up after
 * FLAGCX_EXAMPLE_TIMEOUT seconds (default 60): a dead peer is an error, never
 * a hang.
 *
 * Negative controls: the conformance tests compile this file with one of
 * these macros to get a deliberately broken plugin, which the suite must
 * catch (TestNegativeControls in conformance/suite/suite_test.go):
 *   EXAMPLE_BREAK_SUM    allReduce/reduce/reduceScatter sums leave out the last rank
 *   EXAMPLE_BREAK_SWAP   broadcast swaps sendbuff and recvbuff
 *   EXAMPLE_BREAK_SEGV   allReduce dereferences NULL (SIGSEGV)
 *   EXAMPLE_BREAK_HANG   allReduce never returns
 *   EXAMPLE_BREAK_MIN_AS_SUM     min is computed as sum
 *   EXAMPLE_BREAK_COUNT4         allReduce drops the last element when count % 4 == 0
 *   EXAMPLE_BREAK_HANG_4097      allReduce never returns at count 4097 only
 *   EXAMPLE_BREAK_MIDDLE_ROOT    broadcast from a root other than the first and last rank sends zeros
 *   EXAMPLE_BREAK_ABOVE_4_RANKS  allReduce leaves out rank 4 on more than 4 ranks
 *   EXAMPLE_BREAK_UINT64_REDUCE  uint64 is declared, but its reductions answer invalid argument
 *   EXAMPLE_BREAK_BF16_TRUNCATE  bfloat16 results are truncated instead of rounded to nearest even
 *   EXAMPLE_BREAK_INT8_SATURATE  int8 sums saturate instead of wrapping
 *   EXAMPLE_BREAK_OVERRUN        broadcast writes 600 bytes past the end of recvbuff
 *   EXAMPLE_BREAK_LEAK           allReduce and reduce never free their staging buffer
 *   EXAMPLE_BREAK_DEVICE_LEAK    allReduce leaks a 64 KiB device allocation per call
 *   EXAMPLE_BREAK_DEVICE_REDUCE  reduceLocal (ABI v4) leaves out its last source
 *   EXAMPLE_BREAK_UNALIGNED      allReduce drops the first element when recvbuff is not 16-byte aligned
 *   EXAMPLE_BREAK_MIRROR_PEER    send and recv talk to rank n-1-peer instead of peer
 *   EXAMPLE_ABI_VERSION  the table claims another ABI version
 *
 * Positive control (TestLeakCheckPositiveControl in the same file): with
 * FLAGCX_EXAMPLE_SCRATCH=1 in its environment every collective takes a
 * scratch buffer of nranks x its message from glibc's malloc, touches it and
 * frees it, as many real plugins stage their data. Nothing leaks, yet the
 * resident memory moves (see perCallScratch); comm.leak must pass it.
 *
 * Plugins that must not take a listing down with them (TestProbe* in
 * sdk/loader, TestPluginsIsolatesBadPlugins in cmd/flagcx):
 *   EXAMPLE_BREAK_INIT_SEGV         init dereferences NULL (SIGSEGV)
 *   EXAMPLE_BREAK_INIT_HANG         init never returns
 *   EXAMPLE_BREAK_INIT_EXIT         init calls exit(3)
 *   EXAMPLE_BREAK_INIT_FAIL         init fails (flagcxSystemError), as when a vendor runtime is missing
 *   EXAMPLE_BREAK_CONSTRUCTOR_SEGV  an ELF constructor dereferences NULL: dlopen crashes
 *   EXAMPLE_INIT_STDOUT             init prints to stdout (and works)
 *   EXAMPLE_NAME                    the table's name (default "example")
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flagcx_plugin.h"

#ifndef EXAMPLE_ABI_VERSION
#define EXAMPLE_ABI_VERSION FLAGCX_PLUGIN_ABI_VERSION
#endif
#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME "example"
#endif

#define EXPORT __attribute__((visibility("default")))
#define MAX_RANKS 64
#define MAX_DEVICES 1024

/* ---- Errors and logging ------------------------------------------------- */
/* getLastError is per calling thread; a real plugin quotes the vendor's text. */
static __thread char lastError[512];
static flagcxLogFn_t logFn;
static void* logCtx;

static flagcxResult_t fail(flagcxResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static flagcxResult_t fail(flagcxResult_t r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastError, sizeof lastError, fmt, ap);
  va_end(ap);
  return r;
}
static const char* exGetLastError(void) { return lastError; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int envInt(const char* name, int def, int lo, int hi) {
  const char* s = getenv(name);
  char* end;
  long v;
  if (!s || !*s) return def;
  v = strtol(s, &end, 10);
  return *end || v < lo || v > hi ? def : (int)v;
}

/* ---- init --------------------------------------------------------------- */
static int numDevices = 8;
static double timeoutSec = 60;
static int scratchPerCall; /* FLAGCX_EXAMPLE_SCRATCH=1: the leak check's positive control */

#if defined(EXAMPLE_BREAK_INIT_SEGV) || defined(EXAMPLE_BREAK_CONSTRUCTOR_SEGV)
/* NULL the compiler cannot see, so that it emits the store and it faults. */
static int* volatile exNowhere;
#endif
#ifdef EXAMPLE_BREAK_CONSTRUCTOR_SEGV
__attribute__((constructor)) static void exConstructorCrash(void) { *exNowhere = 1; }
#endif

static flagcxResult_t exInit(flagcxLogFn_t log, void* ctx, flagcxPluginInfo_v1_t* info) {
  char msg[128];
#ifdef EXAMPLE_BREAK_INIT_SEGV
  *exNowhere = 1;
#endif
#ifdef EXAMPLE_BREAK_INIT_HANG
  for (;;) pause();
#endif
#ifdef EXAMPLE_BREAK_INIT_EXIT
  exit(3);
#endif
#ifdef EXAMPLE_BREAK_INIT_FAIL
  info->numLibraries = 0;
  return flagcxSystemError;
#endif
#ifdef EXAMPLE_INIT_STDOUT
  printf("{\"done\":true}\nexample plugin: hello on stdout\n");
  fflush(stdout);
#endif
  logFn = log;
  logCtx = ctx;
  numDevices = envInt("FLAGCX_EXAMPLE_DEVICES", 8, 0, MAX_DEVICES);
  timeoutSec = envInt("FLAGCX_EXAMPLE_TIMEOUT", 60, 1, 86400);
  scratchPerCall = envInt("FLAGCX_EXAMPLE_SCRATCH", 0, 0, 1);
  /* No vendor library to load: the CPU is always there. A real plugin
   * dlopens its runtime and CCL here and fills info->libraries[]. */
  info->numLibraries = 0;
  info->emulated = 0;
  info->dataTypeMask = (1u << flagcxNumTypes) - 1; /* all ten */
  info->redOpMask = (1u << flagcxNumRedOps) - 1;   /* sum prod max min avg */
  snprintf(msg, sizeof msg, "example plugin: %d host devices", numDevices);
  if (logFn) logFn(logCtx, flagcxLogInfo, msg);
  return flagcxSuccess;
}

/* ---- Device runtime ------------------------------------------------------ */
#define CHECK_DEV(dev)                                                                      \
  do {                                                                                      \
    if ((dev) < 0 || (dev) >= numDevices)                                                   \
      return fail(flagcxInvalidArgument, "device %d does not exist (%d devices)", (dev), numDevices); \
  } while (0)

static flagcxResult_t exGetDeviceCount(int* count) { *count = numDevices; return flagcxSuccess; }

static __thread int currentDevice;
static flagcxResult_t exSetDevice(int dev) { CHECK_DEV(dev); currentDevice = dev; return flagcxSuccess; }

static flagcxResult_t exGetDeviceInfo(int dev, flagcxDeviceInfo_v1_t* info) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  CHECK_DEV(dev);
  memset(info, 0, sizeof *info);
  info->totalMemory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  info->numaNode = -1;
  snprintf(info->name, sizeof info->name, "example host CPU device %d", dev);
  snprintf(info->uuid, sizeof info->uuid, "EXAMPLE-%04d", dev);
  snprintf(info->pciBusId, sizeof info->pciBusId, "0000:%02x:%02x.0", 0x80 + dev / 32, dev % 32);
  return flagcxSuccess;
}

static flagcxResult_t exGetLinkInfo(int a, int b, flagcxLinkInfo_v1_t* link) {
  CHECK_DEV(a);
  CHECK_DEV(b);
  memset(link, 0, sizeof *link);
  link->type = a == b ? flagcxLinkSelf : flagcxLinkSystem; /* all "devices" share host memory */
  snprintf(link->name, sizeof link->name, "%s", a == b ? "X" : "SYS");
  return flagcxSuccess;
}

/* Device memory: host memory, 256-byte aligned like cudaMalloc, that ends
 * where an inaccessible page begins, so that a collective writing or
 * reading past a buffer faults at once rather than corrupting the heap. A
 * header before the buffer remembers the mapping. */
typedef struct { uint64_t magic; void* map; size_t len; int64_t dev; } exAlloc;
#define ALLOC_MAGIC 0x416c6c6f63ull

/* Device memory in use per device (the mapped bytes of deviceMalloc's
 * allocations), which memGetInfo reports against a fixed total. */
#define EXAMPLE_DEVICE_TOTAL ((size_t)16 << 30)
static size_t devUsed[MAX_DEVICES];

static flagcxResult_t exAllocate(int dev, void** ptr, size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t usable = (bytes + 255) / 256 * 256, body;
  char* m;
  body = (usable + sizeof(exAlloc) + page - 1) / page * page;
  m = mmap(NULL, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || mprotect(m + body, page, PROT_NONE) != 0) {
    if (m != MAP_FAILED) munmap(m, body + page);
    return fail(flagcxSystemError, "deviceMalloc: out of memory for %zu bytes", bytes);
  }
  *ptr = m + body - usable;
  ((exAlloc*)*ptr)[-1] = (exAlloc){ALLOC_MAGIC, m, body + page, dev};
  if (dev >= 0) __atomic_add_fetch(&devUsed[dev], body + page, __ATOMIC_RELAXED);
  return flagcxSuccess;
}
static flagcxResult_t exDeviceFree(void* ptr) {
  exAlloc a;
  if (ptr == NULL) return flagcxSuccess;
  a = ((exAlloc*)ptr)[-1];
  if (a.magic != ALLOC_MAGIC) return fail(flagcxInvalidArgument, "free: %p is not memory of this plugin", ptr);
  ((exAlloc*)ptr)[-1].magic = 0;
  if (a.dev >= 0 && a.dev < MAX_DEVICES) __atomic_sub_fetch(&devUsed[a.dev], a.len, __ATOMIC_RELAXED);
  munmap(a.map, a.len);
  return flagcxSuccess;
}
static flagcxResult_t exDeviceMalloc(int dev, void** ptr, size_t bytes) {
  CHECK_DEV(dev);
  return exAllocate(dev, ptr, bytes);
}
static flagcxResult_t exHostMalloc(void** ptr, size_t bytes) { return exAllocate(-1, ptr, bytes); }
static flagcxResult_t exHostFree(void* ptr) { return exDeviceFree(ptr); }

#if FLAGCX_PLUGIN_ABI_VERSION >= 3
/* Memory info (ABI v3): this plugin's device allocations on dev against a
 * fixed 16 GiB, so the conformance leak check sees device-memory leaks. */
static flagcxResult_t exMemGetInfo(int dev, size_t* freeBytes, size_t* totalBytes) {
  size_t used;
  CHECK_DEV(dev);
  if (freeBytes == NULL || totalBytes == NULL) return fail(flagcxInvalidArgument, "memGetInfo: NULL pointer");
  used = __atomic_load_n(&devUsed[dev], __ATOMIC_RELAXED);
  *totalBytes = EXAMPLE_DEVICE_TOTAL;
  *freeBytes = used < EXAMPLE_DEVICE_TOTAL ? EXAMPLE_DEVICE_TOTAL - used : 0;
  return flagcxSuccess;
}
#endif

#if FLAGCX_PLUGIN_ABI_VERSION >= 2
/* Host registration (ABI v2). All memory here is host memory that copies
 * reach at once, so registering only records the range: overlapping
 * registrations and unknown pointers are refused as a real runtime
 * refuses them. */
#define MAX_REGISTERED 256
static struct { uintptr_t base; size_t bytes; } registered[MAX_REGISTERED];
static int numRegistered;
static pthread_mutex_t registeredLock = PTHREAD_MUTEX_INITIALIZER;

static flagcxResult_t exHostRegister(void* ptr, size_t bytes) {
  uintptr_t b = (uintptr_t)ptr;
  if (ptr == NULL || bytes == 0) return fail(flagcxInvalidArgument, "hostRegister: empty range %p+%zu", ptr, bytes);
  pthread_mutex_lock(&registeredLock);
  for (int i = 0; i < numRegistered; i++) {
    if (b < registered[i].base + registered[i].bytes && registered[i].base < b + bytes) {
      pthread_mutex_unlock(&registeredLock);
      return fail(flagcxInvalidUsage, "hostRegister: %p+%zu overlaps the registered range %p+%zu", ptr, bytes,
                  (void*)registered[i].base, registered[i].bytes);
    }
  }
  if (numRegistered == MAX_REGISTERED) {
    pthread_mutex_unlock(&registeredLock);
    return fail(flagcxSystemError, "hostRegister: more than %d ranges registered", MAX_REGISTERED);
  }
  registered[numRegistered].base = b;
  registered[numRegistered].bytes = bytes;
  numRegistered++;
  pthread_mutex_unlock(&registeredLock);
  return flagcxSuccess;
}

static flagcxResult_t exHostUnregister(void* ptr) {
  pthread_mutex_lock(&registeredLock);
  for (int i = 0; i < numRegistered; i++) {
    if (registered[i].base == (uintptr_t)ptr) {
      registered[i] = registered[--numRegistered];
      pthread_mutex_unlock(&registeredLock);
      return flagcxSuccess;
    }
  }
  pthread_mutex_unlock(&registeredLock);
  return fail(flagcxInvalidUsage, "hostUnregister: %p does not start a registered range", ptr);
}
#endif

/* Streams and events: handles that remember their device. Work runs at
 * once, so a stream is always idle and an event is reached when recorded. */
#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu
typedef struct { uint32_t magic; int dev; } exStream;
typedef struct { uint32_t magic; int dev; int recorded; double at; } exEvent;

static flagcxResult_t checkStream(flagcxStream_t s) {
  if (s && ((exStream*)s)->magic != STREAM_MAGIC) return fail(flagcxInvalidArgument, "invalid stream handle %p", (void*)s);
  return flagcxSuccess;
}
static flagcxResult_t checkEvent(flagcxEvent_t e) {
  if (!e || ((exEvent*)e)->magic != EVENT_MAGIC) return fail(flagcxInvalidArgument, "invalid event handle %p", (void*)e);
  return flagcxSuccess;
}
#define TRY(x) do { flagcxResult_t r_ = (x); if (r_ != flagcxSuccess) return r_; } while (0)

static flagcxResult_t exMemCopy(void* dst, const void* src, size_t bytes, flagcxMemcpyKind_t kind, flagcxStream_t s) {
  TRY(checkStream(s));
  if ((unsigned)kind > flagcxMemcpyDeviceToDevice)
    return fail(flagcxInvalidArgument, "memCopy: direction %d is not 0 (H2D), 1 (D2H) or 2 (D2D)", (int)kind);
  if (bytes) memmove(dst, src, bytes);
  return flagcxSuccess;
}
static flagcxResult_t exMemSet(void* dst, int value, size_t bytes, flagcxStream_t s) {
  TRY(checkStream(s));
  if (bytes) memset(dst, value, bytes);
  return flagcxSuccess;
}

static flagcxResult_t exStreamCreate(int dev, flagcxStream_t* s) {
  exStream* h;
  CHECK_DEV(dev);
  if (!(h = malloc(sizeof *h))) return fail(flagcxSystemError, "streamCreate: out of memory");
  h->magic = STREAM_MAGIC;
  h->dev = dev;
  *s = (flagcxStream_t)h;
  return flagcxSuccess;
}
static flagcxResult_t exStreamDestroy(flagcxStream_t s) {
  if (!s) return fail(flagcxInvalidArgument, "streamDestroy: NULL stream");
  TRY(checkStream(s));
  ((exStream*)s)->magic = 0;
  free(s);
  return flagcxSuccess;
}
static flagcxResult_t exStreamSynchronize(flagcxStream_t s) { return checkStream(s); }
static flagcxResult_t exStreamQuery(flagcxStream_t s) { return checkStream(s); } /* always done */
static flagcxResult_t exStreamWaitEvent(flagcxStream_t s, flagcxEvent_t e) { TRY(checkStream(s)); return checkEvent(e); }

static flagcxResult_t exEventCreate(int dev, flagcxEvent_t* e) {
  exEvent* h;
  CHECK_DEV(dev);
  if (!(h = calloc(1, sizeof *h))) return fail(flagcxSystemError, "eventCreate: out of memory");
  h->magic = EVENT_MAGIC;
  h->dev = dev;
  *e = (flagcxEvent_t)h;
  return flagcxSuccess;
}
static flagcxResult_t exEventDestroy(flagcxEvent_t e) {
  TRY(checkEvent(e));
  ((exEvent*)e)->magic = 0;
  free(e);
  return flagcxSuccess;
}
static flagcxResult_t exEventRecord(flagcxEvent_t e, flagcxStream_t s) {
  TRY(checkEvent(e));
  TRY(checkStream(s));
  ((exEvent*)e)->recorded = 1;
  ((exEvent*)e)->at = now();
  return flagcxSuccess;
}
static flagcxResult_t exEventQuery(flagcxEvent_t e) { return checkEvent(e); }
static flagcxResult_t exEventSynchronize(flagcxEvent_t e) { return checkEvent(e); }
static flagcxResult_t exEventElapsedTime(float* ms, flagcxEvent_t start, flagcxEvent_t end) {
  TRY(checkEvent(start));
  TRY(checkEvent(end));
  if (!((exEvent*)start)->recorded || !((exEvent*)end)->recorded)
    return fail(flagcxInvalidUsage, "eventElapsedTime: both events must be recorded first");
  *ms = (float)((((exEvent*)end)->at - ((exEvent*)start)->at) * 1e3);
  return flagcxSuccess;
}

/* ---- Shared memory between the ranks ------------------------------------- */
/* The unique id: a magic and the name of the shared-memory segment. */
#define ID_MAGIC 0x46584558u /* "XEXF" */
typedef struct { uint32_t magic; uint32_t reserved; char shmName[56]; } exUniqueId;

/* A single-producer single-consumer byte ring per ordered rank pair. */
typedef struct {
  uint64_t head; /* bytes ever written (producer), atomic */
  char pad1[56];
  uint64_t tail; /* bytes ever read (consumer), atomic */
  char pad2[56];
} exRing; /* followed by cap data bytes */

typedef struct {
  uint32_t nranks;   /* set by the first rank to arrive */
  uint32_t joined;   /* ranks that claimed their slot */
  uint32_t attached; /* ranks that are done with the name (the last unlinks it) */
  int32_t poisoned;  /* a rank failed or aborted: peers stop waiting */
  int32_t pids[MAX_RANKS];
  uint64_t ringCap;
  char pad[64];
} exHeader;

typedef struct {
  int rank, nranks, dev;
  char* base;
  size_t size;
  uint64_t cap;
} exComm;

static size_t ringStride(uint64_t cap) { return sizeof(exRing) + cap; }
static exRing* ring(exComm* c, int src, int dst) {
  return (exRing*)(c->base + sizeof(exHeader) + ((size_t)src * c->nranks + dst) * ringStride(c->cap));
}
static exHeader* header(exComm* c) { return (exHeader*)c->base; }
static uint64_t ringCapFor(int nranks) {
  uint64_t cap = (16u << 20) / ((uint64_t)nranks * nranks);
  cap = cap > (256u << 10) ? (256u << 10) : cap;
  cap &= ~(uint64_t)4095;
  return cap < 4096 ? 4096 : cap;
}

static flagcxResult_t exGetUniqueIdBytes(size_t* bytes) { *bytes = sizeof(exUniqueId); return flagcxSuccess; }

static flagcxResult_t exGetUniqueId(void* out) {
  static uint32_t counter;
  exUniqueId id;
  uint32_t rnd = (uint32_t)(now() * 1e9) ^ (uint32_t)getpid() * 2654435761u;
  memset(&id, 0, sizeof id);
  id.magic = ID_MAGIC;
  snprintf(id.shmName, sizeof id.shmName, "/flagcx-example-%d-%08x-%u", (int)getpid(), rnd,
           __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
  memcpy(out, &id, sizeof id);
  return flagcxSuccess;
}

static int alive(int pid) { return pid <= 0 || kill(pid, 0) == 0 || errno == EPERM; }

/* waitCheck is called while waiting: peers alive, not poisoned, in time. */
static flagcxResult_t waitCheck(exComm* c, double start, const char* what) {
  exHeader* h = header(c);
  int p;
  if (__atomic_load_n(&h->poisoned, __ATOMIC_ACQUIRE))
    return fail(flagcxRemoteError, "%s: a peer failed or aborted the communicator", what);
  for (p = 0; p < c->nranks; p++) {
    int pid = __atomic_load_n(&h->pids[p], __ATOMIC_ACQUIRE);
    if (p != c->rank && pid > 0 && !alive(pid)) {
      __atomic_store_n(&h->poisoned, 1, __ATOMIC_RELEASE);
      return fail(flagcxRemoteError, "%s: rank %d (pid %d) is gone", what, p, pid);
    }
  }
  if (now() - start > timeoutSec) {
    __atomic_store_n(&h->poisoned, 1, __ATOMIC_RELEASE);
    return fail(flagcxSystemError, "%s: no progress for %.0f s (FLAGCX_EXAMPLE_TIMEOUT)", what, timeoutSec);
  }
  return flagcxSuccess;
}

/* idle backs off while waiting: yield first, then short sleeps. */
static void idle(unsigned* spins) {
  struct timespec ts = {0, 20000};
  if (++*spins < 64) sched_yield();
  else nanosleep(&ts, NULL);
}

static flagcxResult_t exCommInitRank(flagcxVendorComm_t* comm, int nranks, const void* idBytes, int rank, int dev) {
  exUniqueId id;
  exComm* c;
  exHeader* h;
  int fd;
  uint32_t expect = 0;
  int32_t noPid = 0;
  unsigned spins = 0;
  double start = now();
  flagcxResult_t r;
  memcpy(&id, idBytes, sizeof id); /* never keep the caller's pointer */
  CHECK_DEV(dev);
  if (id.magic != ID_MAGIC || id.shmName[0] != '/' || !memchr(id.shmName, 0, sizeof id.shmName))
    return fail(flagcxInvalidArgument, "commInitRank: not an example unique id (was it made by getUniqueId?)");
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return fail(flagcxInvalidArgument, "commInitRank: rank %d of %d (at most %d ranks)", rank, nranks, MAX_RANKS);
  if (!(c = calloc(1, sizeof *c))) return fail(flagcxSystemError, "commInitRank: out of memory");
  c->rank = rank;
  c->nranks = nranks;
  c->dev = dev;
  c->cap = ringCapFor(nranks);
  c->size = sizeof(exHeader) + (size_t)nranks * nranks * ringStride(c->cap);
  /* Every rank creates-or-opens and sizes the segment: no creation race. */
  if ((fd = shm_open(id.shmName, O_CREAT | O_RDWR, 0600)) < 0 || ftruncate(fd, (off_t)c->size) != 0) {
    r = fail(flagcxSystemError, "commInitRank: shared memory %s: %s", id.shmName, strerror(errno));
    if (fd >= 0) close(fd);
    free(c);
    return r;
  }
  c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->base == MAP_FAILED) {
    r = fail(flagcxSystemError, "commInitRank: mmap %s: %s", id.shmName, strerror(errno));
    free(c);
    return r;
  }
  h = header(c);
  if (!__atomic_compare_exchange_n(&h->nranks, &expect, (uint32_t)nranks, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      expect != (uint32_t)nranks) {
    r = fail(flagcxInvalidUsage, "commInitRank: rank %d says %d ranks, another rank said %u", rank, nranks, expect);
    goto out;
  }
  if (!__atomic_compare_exchange_n(&h->pids[rank], &noPid, (int32_t)getpid(), 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    r = fail(flagcxInvalidUsage, "commInitRank: rank %d joined twice", rank);
    goto out;
  }
  __atomic_add_fetch(&h->joined, 1, __ATOMIC_ACQ_REL);
  while (__atomic_load_n(&h->joined, __ATOMIC_ACQUIRE) < (uint32_t)nranks) {
    if ((r = waitCheck(c, start, "commInitRank (waiting for every rank to join)")) != flagcxSuccess) goto out;
    idle(&spins);
  }
  /* Everyone has the segment mapped: the last rank removes the name. */
  if (__atomic_add_fetch(&h->attached, 1, __ATOMIC_ACQ_REL) == (uint32_t)nranks) shm_unlink(id.shmName);
  *comm = (flagcxVendorComm_t)c;
  return flagcxSuccess;
out:
  shm_unlink(id.shmName);
  munmap(c->base, c->size);
  free(c);
  return r;
}

static flagcxResult_t exCommDestroy(flagcxVendorComm_t comm) {
  exComm* c = (exComm*)comm;
  if (!c) return fail(flagcxInvalidArgument, "commDestroy: NULL communicator");
  munmap(c->base, c->size); /* the work is already done: collectives are synchronous */
  free(c);
  return flagcxSuccess;
}

static flagcxResult_t exCommAbort(flagcxVendorComm_t comm) {
  exComm* c = (exComm*)comm;
  if (!c) return fail(flagcxInvalidArgument, "commAbort: NULL communicator");
  __atomic_store_n(&header(c)->poisoned, 1, __ATOMIC_RELEASE); /* peers stop waiting for us */
  return exCommDestroy(comm);
}

static flagcxResult_t exCommGetAsyncError(flagcxVendorComm_t comm, flagcxResult_t* asyncError) {
  exComm* c = (exComm*)comm;
  *asyncError = __atomic_load_n(&header(c)->poisoned, __ATOMIC_ACQUIRE) ? flagcxRemoteError : flagcxSuccess;
  return flagcxSuccess;
}

/* ---- Point-to-point engine ------------------------------------------------ */
typedef struct {
  exComm* comm;
  int peer;
  int isSend;
  char* buf;
  size_t bytes, done;
} exOp;

/* progress runs ops until all are done. Per (comm, peer, direction) the
 * ops run in issue order, so messages never interleave in a ring. */
static flagcxResult_t progress(exOp* ops, int n, const char* what) {
  int remaining = n, i, j;
  unsigned spins = 0;
  double start = now(), lastCheck = start;
  for (i = 0; i < n; i++)
    if (ops[i].done == ops[i].bytes) remaining--;
  while (remaining > 0) {
    int moved = 0;
    for (i = 0; i < n; i++) {
      exOp* o = &ops[i];
      exRing* rg;
      uint64_t head, tail, cap, off, chunk;
      int blocked = 0;
      if (o->done == o->bytes) continue;
      for (j = 0; j < i && !blocked; j++)
        blocked = ops[j].done < ops[j].bytes && ops[j].comm == o->comm && ops[j].peer == o->peer &&
                  ops[j].isSend == o->isSend;
      if (blocked) continue;
      cap = o->comm->cap;
      rg = o->isSend ? ring(o->comm, o->comm->rank, o->peer) : ring(o->comm, o->peer, o->comm->rank);
      head = __atomic_load_n(&rg->head, __ATOMIC_ACQUIRE);
      tail = __atomic_load_n(&rg->tail, __ATOMIC_ACQUIRE);
      chunk = o->isSend ? cap - (head - tail) : head - tail;
      if (chunk > o->bytes - o->done) chunk = o->bytes - o->done;
      if (!chunk) continue;
      off = (o->isSend ? head : tail) % cap;
      if (chunk > cap - off) chunk = cap - off; /* up to the end of the ring; the rest next round */
      if (o->isSend) {
        memcpy((char*)(rg + 1) + off, o->buf + o->done, chunk);
        __atomic_store_n(&rg->head, head + chunk, __ATOMIC_RELEASE);
      } else {
        memcpy(o->buf + o->done, (char*)(rg + 1) + off, chunk);
        __atomic_store_n(&rg->tail, tail + chunk, __ATOMIC_RELEASE);
      }
      o->done += chunk;
      if (o->done == o->bytes) remaining--;
      moved = 1;
    }
    if (moved) {
      spins = 0;
      start = now();
      continue;
    }
    idle(&spins);
    if (now() - lastCheck > 0.1) { /* liveness and timeout, ten times a second */
      lastCheck = now();
      for (i = 0; i < n; i++)
        if (ops[i].done < ops[i].bytes) {
          flagcxResult_t r = waitCheck(ops[i].comm, start, what);
          if (r != flagcxSuccess) return r;
          break;
        }
    }
  }
  return flagcxSuccess;
}

/* Groups: per thread, nesting; send/recv inside a group are queued. */
static __thread int groupDepth;
static __thread exOp* groupOps;
static __thread int groupLen, groupCap;

static flagcxResult_t enqueue(exComm* c, int peer, int isSend, const void* buf, size_t bytes) {
  exOp op = {c, peer, isSend, (char*)buf, bytes, 0};
  if (groupDepth == 0) return progress(&op, 1, isSend ? "send" : "recv");
  if (groupLen == groupCap) {
    int ncap = groupCap ? 2 * groupCap : 64;
    exOp* n = realloc(groupOps, (size_t)ncap * sizeof *n);
    if (!n) return fail(flagcxSystemError, "group: out of memory");
    groupOps = n;
    groupCap = ncap;
  }
  groupOps[groupLen++] = op;
  return flagcxSuccess;
}

static flagcxResult_t exGroupStart(void) { groupDepth++; return flagcxSuccess; }
static flagcxResult_t exGroupEnd(void) {
  flagcxResult_t r;
  if (groupDepth == 0) return fail(flagcxInvalidUsage, "groupEnd without groupStart");
  if (--groupDepth > 0) return flagcxSuccess;
  r = progress(groupOps, groupLen, "groupEnd");
  groupLen = 0;
  return r;
}

static const size_t typeSize[flagcxNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

static flagcxResult_t checkArgs(exComm* c, flagcxDataType_t t, int peer, const char* call) {
  if (!c) return fail(flagcxInvalidArgument, "%s: NULL communicator", call);
  if ((unsigned)t >= flagcxNumTypes) return fail(flagcxInvalidArgument, "%s: unknown data type %d", call, (int)t);
  if (peer < 0 || peer >= c->nranks) return fail(flagcxInvalidArgument, "%s: rank %d outside 0..%d", call, peer, c->nranks - 1);
  return flagcxSuccess;
}

static flagcxResult_t exSend(const void* buf, size_t count, flagcxDataType_t t, int peer, flagcxVendorComm_t comm,
                             flagcxStream_t s) {
  TRY(checkArgs((exComm*)comm, t, peer, "send"));
  TRY(checkStream(s));
#ifdef EXAMPLE_BREAK_MIRROR_PEER
  peer = ((exComm*)comm)->nranks - 1 - peer; /* negative control: the wrong peer (the mirror) */
#endif
  return enqueue((exComm*)comm, peer, 1, buf, count * typeSize[t]);
}
static flagcxResult_t exRecv(void* buf, size_t count, flagcxDataType_t t, int peer, flagcxVendorComm_t comm,
                             flagcxStream_t s) {
  TRY(checkArgs((exComm*)comm, t, peer, "recv"));
  TRY(checkStream(s));
#ifdef EXAMPLE_BREAK_MIRROR_PEER
  peer = ((exComm*)comm)->nranks - 1 - peer;
#endif
  return enqueue((exComm*)comm, peer, 0, buf, count * typeSize[t]);
}

/* ---- Reductions ------------------------------------------------------------ */
static float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  float f;
  if (exp == 0x1f) bits = sign | 0x7f800000u | mant << 13;
  else if (exp == 0) {
    f = (float)mant / 16777216.0f; /* subnormal: mant * 2^-24 */
    return sign ? -f : f;
  } else bits = sign | (exp + 112) << 23 | mant << 13;
  memcpy(&f, &bits, 4);
  return f;
}
static uint16_t floatToHalf(float f) { /* round to nearest even */
  uint32_t b, mant, rem, hv;
  uint16_t sign;
  int exp, e;
  memcpy(&b, &f, 4);
  sign = (uint16_t)(b >> 16) & 0x8000;
  exp = (int)(b >> 23) & 0xff;
  mant = b & 0x7fffff;
  if (exp == 0xff) return sign | (mant ? 0x7e00 : 0x7c00);
  e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    uint32_t shift, m, halfway;
    if (e < -10) return sign;
    mant |= 0x800000;
    shift = (uint32_t)(14 - e);
    m = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1))) m++;
    return sign | (uint16_t)m;
  }
  hv = (uint32_t)e << 10 | mant >> 13;
  rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (hv & 1))) hv++;
  return sign | (uint16_t)hv;
}
static float bf16ToFloat(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static uint16_t floatToBf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffff) > 0x7f800000) return (uint16_t)(b >> 16) | 0x40;
#ifndef EXAMPLE_BREAK_BF16_TRUNCATE /* negative control: round toward zero */
  b += 0x7fff + ((b >> 16) & 1);
#endif
  return (uint16_t)(b >> 16);
}

/* Integer sums and products wrap (computed unsigned, as C allows). */
#ifdef EXAMPLE_BREAK_INT8_SATURATE /* negative control: int8 sums saturate */
#define SUM_OF(T, U, x, y) \
  (sizeof(T) == 1 && (T)-1 < 0 ? (int)(x) + (int)(y) > 127 ? 127 : (int)(x) + (int)(y) < -128 ? -128 : (int)(x) + (int)(y) : (U)(x) + (U)(y))
#else
#define SUM_OF(T, U, x, y) ((U)(x) + (U)(y))
#endif
#define INT_RED(T, U)                                                      \
  for (i = 0; i < n; i++) {                                                \
    T x = ((T*)a)[i], y = ((const T*)b)[i];                                \
    switch (op) {                                                          \
    case flagcxProd: x = (T)((U)x * (U)y); break;                          \
    case flagcxMax: x = x > y ? x : y; break;                              \
    case flagcxMin: x = x < y ? x : y; break;                              \
    default: x = (T)(SUM_OF(T, U, x, y)); break; /* sum, avg (divided at the end) */ \
    }                                                                      \
    ((T*)a)[i] = x;                                                        \
  }
#define FLOAT_RED(T, LOAD, STORE)                                          \
  for (i = 0; i < n; i++) {                                                \
    float x = LOAD(((T*)a)[i]), y = LOAD(((const T*)b)[i]);                \
    switch (op) {                                                          \
    case flagcxProd: x = x * y; break;                                     \
    case flagcxMax: x = x > y ? x : y; break;                              \
    case flagcxMin: x = x < y ? x : y; break;                              \
    default: x = x + y; break;                                             \
    }                                                                      \
    ((T*)a)[i] = STORE(x);                                                 \
  }
#define ID(x) (x)

/* a[i] = a[i] op b[i] */
static void reduceInto(void* a, const void* b, size_t n, flagcxDataType_t t, flagcxRedOp_t op) {
  size_t i;
  switch (t) {
  case flagcxInt8: INT_RED(int8_t, uint8_t) break;
  case flagcxUint8: INT_RED(uint8_t, uint8_t) break;
  case flagcxInt32: INT_RED(int32_t, uint32_t) break;
  case flagcxUint32: INT_RED(uint32_t, uint32_t) break;
  case flagcxInt64: INT_RED(int64_t, uint64_t) break;
  case flagcxUint64: INT_RED(uint64_t, uint64_t) break;
  case flagcxFloat16: FLOAT_RED(uint16_t, halfToFloat, floatToHalf) break;
  case flagcxBfloat16: FLOAT_RED(uint16_t, bf16ToFloat, floatToBf16) break;
  case flagcxFloat32: FLOAT_RED(float, ID, ID) break;
  case flagcxFloat64:
    for (i = 0; i < n; i++) {
      double x = ((double*)a)[i], y = ((const double*)b)[i];
      ((double*)a)[i] = op == flagcxProd ? x * y : op == flagcxMax ? (x > y ? x : y) : op == flagcxMin ? (x < y ? x : y) : x + y;
    }
    break;
  default: break;
  }
}

/* avg: the sum divided by n once (integers truncate toward zero). */
static void divideBy(void* a, size_t count, flagcxDataType_t t, int nranks) {
  size_t i;
  switch (t) {
  case flagcxInt8: for (i = 0; i < count; i++) ((int8_t*)a)[i] /= nranks; break;
  case flagcxUint8: for (i = 0; i < count; i++) ((uint8_t*)a)[i] /= nranks; break;
  case flagcxInt32: for (i = 0; i < count; i++) ((int32_t*)a)[i] /= nranks; break;
  case flagcxUint32: for (i = 0; i < count; i++) ((uint32_t*)a)[i] /= (uint32_t)nranks; break;
  case flagcxInt64: for (i = 0; i < count; i++) ((int64_t*)a)[i] /= nranks; break;
  case flagcxUint64: for (i = 0; i < count; i++) ((uint64_t*)a)[i] /= (uint64_t)nranks; break;
  case flagcxFloat16: for (i = 0; i < count; i++) ((uint16_t*)a)[i] = floatToHalf(halfToFloat(((uint16_t*)a)[i]) / nranks); break;
  case flagcxBfloat16: for (i = 0; i < count; i++) ((uint16_t*)a)[i] = floatToBf16(bf16ToFloat(((uint16_t*)a)[i]) / nranks); break;
  case flagcxFloat32: for (i = 0; i < count; i++) ((float*)a)[i] /= nranks; break;
  case flagcxFloat64: for (i = 0; i < count; i++) ((double*)a)[i] /= nranks; break;
  default: break;
  }
}

/* combine writes into out the reduction of the n blocks of tmp, ranks in
 * order 0..n-1 (so every rank gets identical bits). */
static void combine(void* out, const char* tmp, size_t count, flagcxDataType_t t, flagcxRedOp_t op, int nranks) {
  size_t bytes = count * typeSize[t];
  int p;
  memmove(out, tmp, bytes);
#ifdef EXAMPLE_BREAK_MIN_AS_SUM
  if (op == flagcxMin) op = flagcxSum; /* negative control: the wrong operation */
#endif
  for (p = 1; p < nranks; p++) {
#ifdef EXAMPLE_BREAK_SUM
    if (op == flagcxSum && p == nranks - 1) continue; /* negative control: the last rank goes missing */
#endif
#ifdef EXAMPLE_BREAK_ABOVE_4_RANKS
    if (p == 4) continue; /* negative control: wrong only with more than 4 ranks */
#endif
    reduceInto(out, tmp + (size_t)p * bytes, count, t, op);
  }
  if (op == flagcxAvg) divideBy(out, count, t, nranks);
}

/* ---- Collectives ------------------------------------------------------------ */
/* Each collective builds a list of sends and receives and runs it as one
 * group. tmp buffers are host memory of the plugin, freed before return. */
typedef struct { exOp* ops; int n; } opList;
static void addOp(opList* l, exComm* c, int peer, int isSend, const void* buf, size_t bytes) {
  if (bytes == 0) return;
  l->ops[l->n++] = (exOp){c, peer, isSend, (char*)buf, bytes, 0};
}
static flagcxResult_t runList(opList* l, const char* call) {
  flagcxResult_t r = progress(l->ops, l->n, call);
  free(l->ops);
  return r;
}
static flagcxResult_t newList(opList* l, exComm* c) {
  l->n = 0;
  if (!(l->ops = malloc(sizeof(exOp) * 2 * (size_t)c->nranks))) return fail(flagcxSystemError, "out of memory");
  return flagcxSuccess;
}

/* perCallScratch (FLAGCX_EXAMPLE_SCRATCH=1): a scratch buffer of nranks x
 * bytes from glibc's malloc, every page touched, then freed. Nothing leaks,
 * but the process's resident memory still moves: above the mmap threshold
 * the first free raises the threshold, later buffers come from the calling
 * thread's arena and stay cached there (the Go worker calls from several
 * OS threads, so several arenas fill). The leak check must tell this
 * plateau from a leak. */
static flagcxResult_t perCallScratch(exComm* c, size_t bytes, const char* call) {
  size_t len = (size_t)c->nranks * bytes;
  char* p;
  if (!scratchPerCall || len == 0) return flagcxSuccess;
  if (!(p = malloc(len))) return fail(flagcxSystemError, "%s: out of memory for a %zu-byte scratch buffer", call, len);
  memset(p, c->rank + 1, len);
  __asm__ volatile("" : : "r"(p) : "memory"); /* the stores are used: the compiler keeps malloc, memset and free */
  free(p);
  return flagcxSuccess;
}

static flagcxResult_t checkColl(exComm* c, flagcxDataType_t t, int op, int root, flagcxStream_t s, const char* call) {
  TRY(checkArgs(c, t, root, call));
  if (op >= flagcxNumRedOps) return fail(flagcxInvalidArgument, "%s: unknown reduction op %d", call, op);
#ifdef EXAMPLE_BREAK_UINT64_REDUCE
  /* negative control: a declared type the reductions refuse */
  if (t == flagcxUint64 && (!strcmp(call, "allReduce") || !strcmp(call, "reduce") || !strcmp(call, "reduceScatter")))
    return fail(flagcxInvalidArgument, "%s: uint64 is not reducible", call);
#endif
  return checkStream(s);
}

/* reduceTo: every rank's count elements reduced into recv on root (root < 0: on every rank). */
static flagcxResult_t reduceTo(const void* send, void* recv, size_t count, flagcxDataType_t t, flagcxRedOp_t op,
                               int root, exComm* c, const char* call) {
  size_t bytes = count * typeSize[t];
  char* tmp = NULL;
  opList l;
  int p, gets = root < 0 || root == c->rank;
  flagcxResult_t r;
  if (count == 0) return flagcxSuccess;
  TRY(newList(&l, c));
  if (gets && !(tmp = malloc((size_t)c->nranks * bytes))) {
    free(l.ops);
    return fail(flagcxSystemError, "%s: out of memory", call);
  }
  if (gets) memcpy(tmp + (size_t)c->rank * bytes, send, bytes);
  for (p = 0; p < c->nranks; p++) {
    if (p == c->rank) continue;
    if (root < 0 || root == p) addOp(&l, c, p, 1, send, bytes);
    if (gets) addOp(&l, c, p, 0, tmp + (size_t)p * bytes, bytes);
  }
  r = runList(&l, call);
  if (r == flagcxSuccess && gets) combine(recv, tmp, count, t, op, c->nranks);
#ifndef EXAMPLE_BREAK_LEAK /* negative control: a buffer lost per call */
  free(tmp);
#endif
  return r;
}

static flagcxResult_t exAllReduce(const void* send, void* recv, size_t count, flagcxDataType_t t, flagcxRedOp_t op,
                                  flagcxVendorComm_t comm, flagcxStream_t s) {
  TRY(checkColl((exComm*)comm, t, op, 0, s, "allReduce"));
  TRY(perCallScratch((exComm*)comm, count * typeSize[t], "allReduce"));
#ifdef EXAMPLE_BREAK_DEVICE_LEAK /* negative control: a device allocation lost per call */
  { void* lost; TRY(exDeviceMalloc(((exComm*)comm)->dev, &lost, 64 << 10)); }
#endif
#ifdef EXAMPLE_BREAK_SEGV
  { static int* volatile nowhere; if (count > 0) *nowhere = 1; } /* negative control: SIGSEGV */
#endif
#ifdef EXAMPLE_BREAK_HANG
  if (count > 0) for (;;) sleep(1); /* negative control: never returns */
#endif
#ifdef EXAMPLE_BREAK_HANG_4097
  if (count == 4097) for (;;) sleep(1); /* negative control: a hang at one size */
#endif
#ifdef EXAMPLE_BREAK_COUNT4
  if (count % 4 == 0 && count > 0) count--; /* negative control: a vector loop's tail lost at multiples of 4 */
#endif
#ifdef EXAMPLE_BREAK_UNALIGNED
  if ((uintptr_t)recv % 16 != 0 && count > 0) { /* negative control: an aligned-only head */
    size_t sz = typeSize[t];
    TRY(reduceTo((const char*)send + sz, (char*)recv + sz, count - 1, t, op, -1, (exComm*)comm, "allReduce"));
    return flagcxSuccess;
  }
#endif
  return reduceTo(send, recv, count, t, op, -1, (exComm*)comm, "allReduce");
}

static flagcxResult_t exReduce(const void* send, void* recv, size_t count, flagcxDataType_t t, flagcxRedOp_t op,
                               int root, flagcxVendorComm_t comm, flagcxStream_t s) {
  TRY(checkColl((exComm*)comm, t, op, root, s, "reduce"));
  TRY(perCallScratch((exComm*)comm, count * typeSize[t], "reduce"));
  return reduceTo(send, recv, count, t, op, root, (exComm*)comm, "reduce");
}

static flagcxResult_t exReduceScatter(const void* send, void* recv, size_t count, flagcxDataType_t t,
                                      flagcxRedOp_t op, flagcxVendorComm_t comm, flagcxStream_t s) {
  exComm* c = (exComm*)comm;
  size_t bytes = count * typeSize[t];
  char* tmp;
  opList l;
  int p;
  flagcxResult_t r;
  TRY(checkColl(c, t, op, 0, s, "reduceScatter"));
  TRY(perCallScratch(c, bytes, "reduceScatter"));
  if (count == 0) return flagcxSuccess;
  TRY(newList(&l, c));
  if (!(tmp = malloc((size_t)c->nranks * bytes))) {
    free(l.ops);
    return fail(flagcxSystemError, "reduceScatter: out of memory");
  }
  /* Peer p gets block p of my send buffer; I get block rank of everyone's. */
  memcpy(tmp + (size_t)c->rank * bytes, (const char*)send + (size_t)c->rank * bytes, bytes);
  for (p = 0; p < c->nranks; p++) {
    if (p == c->rank) continue;
    addOp(&l, c, p, 1, (const char*)send + (size_t)p * bytes, bytes);
    addOp(&l, c, p, 0, tmp + (size_t)p * bytes, bytes);
  }
  r = runList(&l, "reduceScatter");
  if (r == flagcxSuccess) combine(recv, tmp, count, t, op, c->nranks);
  free(tmp);
  return r;
}

static flagcxResult_t exBroadcast(const void* send, void* recv, size_t count, flagcxDataType_t t, int root,
                                  flagcxVendorComm_t comm, flagcxStream_t s) {
  exComm* c = (exComm*)comm;
  size_t bytes = count * typeSize[t];
  opList l;
  int p;
#ifdef EXAMPLE_BREAK_SWAP
  { const void* x = send; send = recv; recv = (void*)x; } /* negative control: two arguments swapped */
#endif
  TRY(checkColl(c, t, 0, root, s, "broadcast"));
  TRY(perCallScratch(c, bytes, "broadcast"));
  if (count == 0) return flagcxSuccess;
  TRY(newList(&l, c));
#ifdef EXAMPLE_BREAK_OVERRUN
  memset((char*)recv + bytes, 0x5a, 600); /* negative control: an overrun past the suite's 256 guard bytes */
#endif
#ifdef EXAMPLE_BREAK_MIDDLE_ROOT
  if (root > 0 && root < c->nranks - 1 && c->rank == root) memset((void*)send, 0, bytes); /* negative control */
#endif
  if (c->rank == root) {
    for (p = 0; p < c->nranks; p++)
      if (p != root) addOp(&l, c, p, 1, send, bytes);
    if (recv != send) memmove(recv, send, bytes);
  } else {
    addOp(&l, c, root, 0, recv, bytes);
  }
  return runList(&l, "broadcast");
}

/* exchange: the general pattern of the data-movement collectives. Block p
 * of sbuf (scount[p] elements at sdisp[p]) goes to peer p; block p of rbuf
 * comes from peer p. A rank's block to itself is a local copy. */
static flagcxResult_t exchange(exComm* c, const char* sbuf, const size_t* scount, const size_t* sdisp, char* rbuf,
                               const size_t* rcount, const size_t* rdisp, flagcxDataType_t t, const char* call) {
  size_t sz = typeSize[t];
  opList l;
  int p;
  TRY(newList(&l, c));
  for (p = 0; p < c->nranks; p++) {
    if (p == c->rank) continue;
    if (scount[p]) addOp(&l, c, p, 1, sbuf + sdisp[p] * sz, scount[p] * sz);
    if (rcount[p]) addOp(&l, c, p, 0, rbuf + rdisp[p] * sz, rcount[p] * sz);
  }
  if (scount[c->rank] && rcount[c->rank]) {
    size_t n = scount[c->rank] < rcount[c->rank] ? scount[c->rank] : rcount[c->rank];
    memmove(rbuf + rdisp[c->rank] * sz, sbuf + sdisp[c->rank] * sz, n * sz);
  }
  return runList(&l, call);
}

/* Per-peer count and displacement arrays for the fixed-size collectives. */
static flagcxResult_t blocks(exComm* c, size_t** counts, size_t** displs) {
  *counts = calloc((size_t)c->nranks, sizeof(size_t));
  *displs = calloc((size_t)c->nranks, sizeof(size_t));
  if (!*counts || !*displs) {
    free(*counts);
    free(*displs);
    return fail(flagcxSystemError, "out of memory");
  }
  return flagcxSuccess;
}

/* kind: 0 allGather, 1 alltoAll, 2 gather, 3 scatter */
static flagcxResult_t fixedExchange(int kind, const void* send, void* recv, size_t count, flagcxDataType_t t, int root,
                                   exComm* c, flagcxStream_t s, const char* call) {
  size_t *sc, *sd, *rc, *rd;
  int p;
  flagcxResult_t r;
  TRY(checkColl(c, t, 0, root, s, call));
  TRY(perCallScratch(c, count * typeSize[t], call));
  if (count == 0) return flagcxSuccess;
  TRY(blocks(c, &sc, &sd));
  if ((r = blocks(c, &rc, &rd)) != flagcxSuccess) {
    free(sc);
    free(sd);
    return r;
  }
  for (p = 0; p < c->nranks; p++) {
    switch (kind) {
    case 0: sc[p] = count; sd[p] = 0; rc[p] = count; rd[p] = p * count; break;
    case 1: sc[p] = count; sd[p] = p * count; rc[p] = count; rd[p] = p * count; break;
    case 2: sc[p] = p == root ? count : 0; rc[p] = c->rank == root ? count : 0; rd[p] = p * count; break;
    case 3: sc[p] = c->rank == root ? count : 0; sd[p] = p * count; rc[p] = p == root ? count : 0; break;
    }
  }
  r = exchange(c, send, sc, sd, recv, rc, rd, t, call);
  free(sc);
  free(sd);
  free(rc);
  free(rd);
  return r;
}

static flagcxResult_t exAllGather(const void* send, void* recv, size_t count, flagcxDataType_t t,
                                  flagcxVendorComm_t comm, flagcxStream_t s) {
  return fixedExchange(0, send, recv, count, t, 0, (exComm*)comm, s, "allGather");
}
static flagcxResult_t exAlltoAll(const void* send, void* recv, size_t count, flagcxDataType_t t,
                                 flagcxVendorComm_t comm, flagcxStream_t s) {
  return fixedExchange(1, send, recv, count, t, 0, (exComm*)comm, s, "alltoAll");
}
static flagcxResult_t exGather(const void* send, void* recv, size_t count, flagcxDataType_t t, int root,
                               flagcxVendorComm_t comm, flagcxStream_t s) {
  return fixedExchange(2, send, recv, count, t, root, (exComm*)comm, s, "gather");
}
static flagcxResult_t exScatter(const void* send, void* recv, size_t count, flagcxDataType_t t, int root,
                                flagcxVendorComm_t comm, flagcxStream_t s) {
  return fixedExchange(3, send, recv, count, t, root, (exComm*)comm, s, "scatter");
}
static flagcxResult_t exAlltoAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                                  const size_t* recvcounts, const size_t* rdispls, flagcxDataType_t t,
                                  flagcxVendorComm_t comm, flagcxStream_t s) {
  TRY(checkColl((exComm*)comm, t, 0, 0, s, "alltoAllv"));
  TRY(perCallScratch((exComm*)comm, sendcounts[((exComm*)comm)->rank] * typeSize[t], "alltoAllv"));
  return exchange((exComm*)comm, send, sendcounts, sdispls, recv, recvcounts, rdispls, t, "alltoAllv");
}

static const char* exGetErrorString(flagcxResult_t r) {
  static const char* names[] = {"success", "unhandled device error", "system error", "internal error",
                                "invalid argument", "invalid usage", "remote error", "in progress",
                                "unhandled CCL error", "not supported"};
  return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown result";
}

#if FLAGCX_PLUGIN_ABI_VERSION >= 4
/* Device-side reduction (ABI v4). Device memory is host memory here, and
 * streams run their work when it is enqueued, so the fold runs now. Floats
 * follow the header's rules exactly: max/min let a NaN lose and order the
 * zeros; the rest is reduceInto's. */
/* Float max/min by the header's rule on elements of type T whose bits are
 * B, compared as CT (half and bfloat16 widened to float): a NaN operand
 * loses; equal operands combine their bits (and for max, or for min), so
 * max(-0, +0) is +0 and min(-0, +0) is -0. */
#define FLOAT_MAXMIN(T, B, CT, LOAD)                                               \
  for (i = 0; i < n; i++) {                                                       \
    T xv = ((T*)a)[i], yv = ((const T*)b)[i];                                     \
    CT x = LOAD(xv), y = LOAD(yv);                                                \
    B xb, yb;                                                                     \
    if (op == flagcxMax ? (y > x || x != x) : (y < x || x != x)) xv = yv;         \
    else if (x == y) {                                                            \
      memcpy(&xb, &xv, sizeof xb);                                                \
      memcpy(&yb, &yv, sizeof yb);                                                \
      xb = op == flagcxMax ? (B)(xb & yb) : (B)(xb | yb);                         \
      memcpy(&xv, &xb, sizeof xv);                                                \
    }                                                                             \
    ((T*)a)[i] = xv;                                                              \
  }
static void foldInto(void* a, const void* b, size_t n, flagcxDataType_t t, flagcxRedOp_t op) {
  size_t i;
  if (op != flagcxMax && op != flagcxMin) {
    reduceInto(a, b, n, t, op);
    return;
  }
  switch (t) {
  case flagcxFloat16: FLOAT_MAXMIN(uint16_t, uint16_t, float, halfToFloat) break;
  case flagcxBfloat16: FLOAT_MAXMIN(uint16_t, uint16_t, float, bf16ToFloat) break;
  case flagcxFloat32: FLOAT_MAXMIN(float, uint32_t, float, ID) break;
  case flagcxFloat64: FLOAT_MAXMIN(double, uint64_t, double, ID) break;
  default: reduceInto(a, b, n, t, op); break;
  }
}

#define REDUCE_BLOCK 16384
static flagcxResult_t exReduceLocal(int dev, void* dst, const void* const* srcs, int nsrcs, size_t count,
                                    flagcxDataType_t t, flagcxRedOp_t op, int avgDivisor, flagcxStream_t s) {
  int k;
  CHECK_DEV(dev);
  TRY(checkStream(s));
  if ((unsigned)t >= flagcxNumTypes || (unsigned)op >= flagcxNumRedOps)
    return fail(flagcxInvalidArgument, "reduceLocal: data type %d or op %d unknown", t, op);
  if (nsrcs < 1 || nsrcs > FLAGCX_REDUCE_MAX_SRCS || !srcs || !dst || avgDivisor < 1)
    return fail(flagcxInvalidArgument, "reduceLocal: %d sources (1 to %d), avg divisor %d", nsrcs, FLAGCX_REDUCE_MAX_SRCS, avgDivisor);
  for (k = 0; k < nsrcs; k++)
    if (!srcs[k]) return fail(flagcxInvalidArgument, "reduceLocal: source %d is NULL", k);
  if (count == 0) return flagcxSuccess;
#ifdef EXAMPLE_BREAK_DEVICE_REDUCE /* negative control: the last source goes missing */
  if (nsrcs > 1) nsrcs--;
#endif
  /* Block by block through a private buffer, so that dst may be any of
   * the sources: every element is read from all of them before it is written. */
  {
    size_t size = typeSize[t], per = REDUCE_BLOCK / size, at, n;
    char tmp[REDUCE_BLOCK] __attribute__((aligned(16)));
    for (at = 0; at < count; at += n) {
      n = count - at < per ? count - at : per;
      memcpy(tmp, (const char*)srcs[0] + at * size, n * size);
      for (k = 1; k < nsrcs; k++) foldInto(tmp, (const char*)srcs[k] + at * size, n, t, op == flagcxAvg ? flagcxSum : op);
      if (op == flagcxAvg) divideBy(tmp, n, t, avgDivisor);
      memcpy((char*)dst + at * size, tmp, n * size);
    }
  }
  return flagcxSuccess;
}
#endif

/* ---- The exported table ------------------------------------------------------ */
/* Built against this SDK's header it is an ABI v5 table (relayReduce NULL:
 * its streams run inside their enqueue, and a relay waits on the device
 * for the host); against the v1 header (conformance/example/v1/) the same
 * source makes a v1 plugin, which is how the loader's compatibility with
 * v1 plugins is tested (v2 tables: the loader's own tests build one). */
#if FLAGCX_PLUGIN_ABI_VERSION >= 5
#define EXAMPLE_TABLE_T flagcxVendorPlugin_v5_t
#define EXAMPLE_TABLE flagcxVendorPlugin_v5
#elif FLAGCX_PLUGIN_ABI_VERSION >= 4
#define EXAMPLE_TABLE_T flagcxVendorPlugin_v4_t
#define EXAMPLE_TABLE flagcxVendorPlugin_v4
#elif FLAGCX_PLUGIN_ABI_VERSION >= 3
#define EXAMPLE_TABLE_T flagcxVendorPlugin_v3_t
#define EXAMPLE_TABLE flagcxVendorPlugin_v3
#elif FLAGCX_PLUGIN_ABI_VERSION >= 2
#define EXAMPLE_TABLE_T flagcxVendorPlugin_v2_t
#define EXAMPLE_TABLE flagcxVendorPlugin_v2
#else
#define EXAMPLE_TABLE_T flagcxVendorPlugin_v1_t
#define EXAMPLE_TABLE flagcxVendorPlugin_v1
#endif
EXPORT const EXAMPLE_TABLE_T EXAMPLE_TABLE = {
    .size = sizeof(EXAMPLE_TABLE_T),
    .abiVersion = EXAMPLE_ABI_VERSION,
    .name = EXAMPLE_NAME,
    .vendor = "EXAMPLE",
    .version = "1.0.0",
    .caps = FLAGCX_PLUGIN_CAP_DEVICE | FLAGCX_PLUGIN_CAP_CCL,
    .libraries = NULL, /* a real plugin lists the vendor libraries it dlopens */
    .init = exInit,
    .fini = NULL,
    .getLastError = exGetLastError,
    .device = {
        .getDeviceCount = exGetDeviceCount, .setDevice = exSetDevice, .getDeviceInfo = exGetDeviceInfo,
        .getLinkInfo = exGetLinkInfo, .deviceMalloc = exDeviceMalloc, .deviceFree = exDeviceFree,
        .hostMalloc = exHostMalloc, .hostFree = exHostFree,
        .pointerKind = NULL, /* OPTIONAL: host memory everywhere, the runtime cannot tell */
        .memCopy = exMemCopy, .memSet = exMemSet, .streamCreate = exStreamCreate,
        .streamDestroy = exStreamDestroy, .streamSynchronize = exStreamSynchronize,
        .streamQuery = exStreamQuery, .streamWaitEvent = exStreamWaitEvent, .eventCreate = exEventCreate,
        .eventDestroy = exEventDestroy, .eventRecord = exEventRecord, .eventQuery = exEventQuery,
        .eventSynchronize = exEventSynchronize, .eventElapsedTime = exEventElapsedTime,
#if FLAGCX_PLUGIN_ABI_VERSION >= 2
        .hostRegister = exHostRegister, .hostUnregister = exHostUnregister,
#endif
#if FLAGCX_PLUGIN_ABI_VERSION >= 3
        .memGetInfo = exMemGetInfo,
#endif
#if FLAGCX_PLUGIN_ABI_VERSION >= 4
        .reduceLocal = exReduceLocal,
#endif
    },
    .ccl = {
        .getUniqueIdBytes = exGetUniqueIdBytes, .getUniqueId = exGetUniqueId, .commInitRank = exCommInitRank,
        .commDestroy = exCommDestroy, .commAbort = exCommAbort, .commGetAsyncError = exCommGetAsyncError,
        .allReduce = exAllReduce, .reduce = exReduce, .broadcast = exBroadcast, .allGather = exAllGather,
        .reduceScatter = exReduceScatter, .alltoAll = exAlltoAll, .alltoAllv = exAlltoAllv,
        .gather = exGather, .scatter = exScatter, .send = exSend, .recv = exRecv,
        .groupStart = exGroupStart, .groupEnd = exGroupEnd, .getErrorString = exGetErrorString,
    },
};
