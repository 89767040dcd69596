// nccl.c: libnccl.so.2, NCCL's C API (capi/nccl/nccl.h, NCCL 2.28.9) on top
// of libflagcx.so's C API (capi/include/flagcx.h), so that unmodified NCCL
// programs run on flagcx-go (docs/nccl.md).
//
// No Go here: the process's one Go runtime lives in libflagcx.so, which this
// library needs (DT_NEEDED, found beside it through its rpath $ORIGIN). An
// ncclComm_t is a flagcxComm_t; NCCL's result, data type and reduction enums
// have FlagCX's values (checked below), so they pass through unchanged.

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flagcx.h"

// The library is built with -fvisibility=hidden: NCCL's names (declared in
// nccl.h) alone are exported.
#define FLAGCX_NCCL_NO_CUDA 1
#pragma GCC visibility push(default)
#include "nccl.h"
// Entries of NCCL 2.28's device API (nccl_device.h) that have a host side;
// served only to refuse them.
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t comm,
                               const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm,
                                const struct ncclDevComm *devComm);
#pragma GCC visibility pop

// The nvidia plugin refuses a libnccl.so.2 that exports this marker, and
// opens NVIDIA's NCCL with RTLD_DEEPBIND while it is in the process
// (plugins/nvidia/nvidia.c, refuseSelf): through this library it would
// call back into flagcx-go.
__attribute__((visibility("default"))) const int flagcxgoNcclApi = 1;

/* ---- NCCL's enums are FlagCX's ------------------------------------------ */

#define SAME(n, f) _Static_assert((int)(n) == (int)(f), #n " must equal " #f)
SAME(ncclSuccess, flagcxSuccess);
SAME(ncclUnhandledCudaError, flagcxUnhandledDeviceError);
SAME(ncclSystemError, flagcxSystemError);
SAME(ncclInternalError, flagcxInternalError);
SAME(ncclInvalidArgument, flagcxInvalidArgument);
SAME(ncclInvalidUsage, flagcxInvalidUsage);
SAME(ncclRemoteError, flagcxRemoteError);
SAME(ncclInProgress, flagcxInProgress);
SAME(ncclInt8, flagcxInt8);
SAME(ncclUint8, flagcxUint8);
SAME(ncclInt32, flagcxInt32);
SAME(ncclUint32, flagcxUint32);
SAME(ncclInt64, flagcxInt64);
SAME(ncclUint64, flagcxUint64);
SAME(ncclFloat16, flagcxFloat16);
SAME(ncclFloat32, flagcxFloat32);
SAME(ncclFloat64, flagcxFloat64);
SAME(ncclBfloat16, flagcxBfloat16);
SAME(ncclSum, flagcxSum);
SAME(ncclProd, flagcxProd);
SAME(ncclMax, flagcxMax);
SAME(ncclMin, flagcxMin);
SAME(ncclAvg, flagcxAvg);
SAME(ncclNumOps, flagcxNumRedOps);
SAME(NCCL_SPLIT_NOCOLOR, FLAGCX_SPLIT_NOCOLOR);
SAME(ncclScalarDevice, flagcxScalarDevice);
SAME(ncclScalarHostImmediate, flagcxScalarHostImmediate);
_Static_assert(sizeof(ncclRedOp_t) == sizeof(flagcxRedOp_t), "ncclRedOp_t");
_Static_assert(sizeof(ncclDataType_t) == sizeof(flagcxDataType_t),
               "ncclDataType_t");
_Static_assert(sizeof(ncclResult_t) == sizeof(flagcxResult_t), "ncclResult_t");

#define COMM(c) ((flagcxComm_t)(c))

// res maps FlagCX's two results NCCL lacks: a failure of the vendor's
// library is a system error to NCCL, and what flagcx-go does not serve is
// invalid usage (ncclGetLastError names it).
static ncclResult_t res(flagcxResult_t r) {
  switch (r) {
  case flagcxUnhandledCCLError:
    return ncclSystemError;
  case flagcxNotSupported:
    return ncclInvalidUsage;
  default:
    return r >= flagcxSuccess && r < (flagcxResult_t)ncclNumResults
               ? (ncclResult_t)r
               : ncclInternalError;
  }
}

// refuse records msg as entry's failure (ncclGetLastError) and returns code.
static ncclResult_t refuse(ncclComm_t comm, const char *entry,
                           ncclResult_t code, const char *msg) {
  flagcxSetLastError(COMM(comm), entry, (flagcxResult_t)code, msg);
  return code;
}

#define NOT_SERVED(comm, entry, what)                                          \
  refuse(comm, entry, ncclInvalidUsage,                                        \
         what " is not supported by flagcx-go's libnccl.so.2 (docs/nccl.md "  \
              "lists what is)")

// stream is a CUDA stream as libflagcx.so takes it: a flagcxStream_t points
// at a struct whose first field is the native stream (capi/shim.h,
// docs/c-api.md). libflagcx.so reads it during the call and keeps no
// pointer to it, so a compound literal of the calling expression serves.
struct flagcxStream {
  uintptr_t base;
};
#define STREAM(s) (&(struct flagcxStream){(uintptr_t)(s)})

/* ---- Per-thread group state --------------------------------------------- */

// What ncclGroupSimulateEnd needs to know of the calling thread's group:
// its depth and whether an operation was queued in it. Behind a pthread key
// rather than __thread, as libflagcx.so does (capi/shim.c), so that the
// library also loads with dlopen (vLLM's ctypes) wherever TLS space is tight.
// inits are the ncclCommInitRank calls made inside the group, which its
// end runs (deferredInits).
struct deferredInit;
struct groupState {
  int depth;
  int ops;
  struct deferredInit *inits;
  int ninits, capInits;
};
static pthread_key_t groupKey;
static pthread_once_t groupOnce = PTHREAD_ONCE_INIT;
static void groupFree(void *p) {
  struct groupState *g = p;
  free(g->inits);
  free(g);
}
static void groupKeyInit(void) { pthread_key_create(&groupKey, groupFree); }

static struct groupState *group(void) {
  pthread_once(&groupOnce, groupKeyInit);
  struct groupState *g = pthread_getspecific(groupKey);
  if (g == NULL && (g = calloc(1, sizeof *g)) != NULL &&
      pthread_setspecific(groupKey, g) != 0) {
    free(g);
    g = NULL;
  }
  return g;
}

// queued notes an operation issued inside the thread's group.
static void queued(void) {
  struct groupState *g = group();
  if (g != NULL && g->depth > 0)
    g->ops++;
}

/* ---- Version, ids, errors ----------------------------------------------- */

ncclResult_t ncclGetVersion(int *version) {
  if (version == NULL)
    return refuse(NULL, "ncclGetVersion", ncclInvalidArgument,
                  "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

// flagcx-go's 256-byte id is magic[4] | secret[16] | address length
// (uint16, little endian) | address | zeros (core/uniqueid.go): NCCL's 128
// bytes hold it whole when the address fits in them.
enum { idLenAt = 20, idAddrAt = 22 };

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (uniqueId == NULL)
    return refuse(NULL, "ncclGetUniqueId", ncclInvalidArgument,
                  "uniqueId is NULL");
  flagcxUniqueId full;
  memset(&full, 0, sizeof full);
  flagcxResult_t r = flagcxGetUniqueId(&full);
  if (r != flagcxSuccess)
    return res(r);
  const unsigned char *b = (const unsigned char *)&full;
  size_t n = (size_t)b[idLenAt] | (size_t)b[idLenAt + 1] << 8;
  if (idAddrAt + n > NCCL_UNIQUE_ID_BYTES) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "the rendezvous address (%zu bytes) does not fit in NCCL's "
             "%d-byte id: set FLAGCX_SOCKET_IFNAME to an interface with a "
             "shorter (IPv4) address",
             n, NCCL_UNIQUE_ID_BYTES);
    return refuse(NULL, "ncclGetUniqueId", ncclInternalError, msg);
  }
  memcpy(uniqueId->internal, b, NCCL_UNIQUE_ID_BYTES);
  return ncclSuccess;
}

// fullID zero-extends NCCL's 128 bytes to FlagCX's id.
static void fullID(const ncclUniqueId *id, flagcxUniqueId *full) {
  memset(full, 0, sizeof *full);
  memcpy(full, id->internal, NCCL_UNIQUE_ID_BYTES);
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (a device runtime call failed; "
           "ncclGetLastError says which)";
  case ncclSystemError:
    return "unhandled system error (a system call, an allocation or a "
           "library failed; ncclGetLastError says which)";
  case ncclInternalError:
    return "internal error (ncclGetLastError says which)";
  case ncclInvalidArgument:
    return "invalid argument (ncclGetLastError says which)";
  case ncclInvalidUsage:
    return "invalid usage (a call out of order, on a finished communicator, "
           "or not served by flagcx-go; ncclGetLastError says which)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  return flagcxGetLastError(COMM(comm));
}

void ncclResetDebugInit(void) {}

/* ---- Communicators ------------------------------------------------------ */

// checkConfig reads the fields of config its caller's NCCL had (config->size
// bytes: NCCL 2.21 through 2.28 grew the struct at its end). Every setting
// is accepted; blocking = 0 is too, as the calls complete before they
// return (ncclSuccess, never ncclInProgress).
static ncclResult_t checkConfig(const char *entry, const ncclConfig_t *config) {
  if (config == NULL)
    return ncclSuccess;
  if (config->magic != 0xcafebeef)
    return refuse(NULL, entry, ncclInvalidArgument,
                  "config->magic is not NCCL's: initialize the config with "
                  "NCCL_CONFIG_INITIALIZER");
  size_t end = offsetof(ncclConfig_t, blocking) + sizeof config->blocking;
  if (config->size < end)
    return refuse(NULL, entry, ncclInvalidArgument,
                  "config->size is smaller than any NCCL's ncclConfig_t: "
                  "initialize the config with NCCL_CONFIG_INITIALIZER");
  int b = config->blocking;
  if (b != 0 && b != 1 && b != NCCL_CONFIG_UNDEF_INT)
    return refuse(NULL, entry, ncclInvalidArgument,
                  "config->blocking must be 0 or 1");
  return ncclSuccess;
}

static ncclResult_t deferInit(const char *entry, ncclComm_t *comm, int nranks,
                              const ncclUniqueId *id, int rank);

static ncclResult_t initRank(const char *entry, ncclComm_t *comm, int nranks,
                             const ncclUniqueId *id, int rank) {
  if (comm == NULL)
    return refuse(NULL, entry, ncclInvalidArgument, "comm is NULL");
  *comm = NULL;
  struct groupState *g = group();
  if (g != NULL && g->depth > 0)
    return deferInit(entry, comm, nranks, id, rank);
  flagcxUniqueId full;
  fullID(id, &full);
  flagcxComm_t c = NULL;
  flagcxResult_t r = flagcxCommInitRank(&c, nranks, &full, rank);
  *comm = (ncclComm_t)c;
  return res(r);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks,
                              ncclUniqueId commId, int rank) {
  return initRank("ncclCommInitRank", comm, nranks, &commId, rank);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  ncclResult_t r = checkConfig("ncclCommInitRankConfig", config);
  if (r != ncclSuccess)
    return r;
  return initRank("ncclCommInitRankConfig", comm, nranks, &commId, rank);
}

// Several ids spread NCCL's bootstrap over several ranks; flagcx-go's
// rendezvous is one process's, so the first id names the communicator and
// the others are not used (their rendezvous end on their own).
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks,
                                      int myrank, int nId,
                                      ncclUniqueId *commIds,
                                      ncclConfig_t *config) {
  const char *entry = "ncclCommInitRankScalable";
  if (nId < 1 || commIds == NULL)
    return refuse(NULL, entry, ncclInvalidArgument,
                  "pass nId >= 1 ids in commIds");
  ncclResult_t r = checkConfig(entry, config);
  if (r != ncclSuccess)
    return r;
  return initRank(entry, newcomm, nranks, &commIds[0], myrank);
}

// One rank of ncclCommInitAll, on a thread of its own: it sets its device
// there (the current device is per thread) and joins.
struct initAllRank {
  flagcxDeviceHandle_t h;
  flagcxUniqueId *id;
  int n, rank, dev;
  flagcxComm_t comm;
  flagcxResult_t r;
};

static void *initAllThread(void *arg) {
  struct initAllRank *a = arg;
  a->r = a->h->setDevice(a->dev);
  if (a->r == flagcxSuccess)
    a->r = flagcxCommInitRank(&a->comm, a->n, a->id, a->rank);
  return NULL;
}

static ncclResult_t checkDevList(int ndev, const int *devlist) {
  for (int i = 0; devlist != NULL && i < ndev; i++) {
    if (devlist[i] < 0)
      return refuse(NULL, "ncclCommInitAll", ncclInvalidArgument,
                    "devlist holds a negative device");
    for (int j = 0; j < i; j++)
      if (devlist[j] == devlist[i])
        return refuse(NULL, "ncclCommInitAll", ncclInvalidUsage,
                      "devlist names a device twice");
  }
  return ncclSuccess;
}

// runInitAll starts a thread per rank and waits for them all.
static flagcxResult_t runInitAll(struct initAllRank *ranks, int ndev) {
  pthread_t *th = calloc((size_t)ndev, sizeof *th);
  if (th == NULL)
    return flagcxSystemError;
  int started = 0;
  flagcxResult_t r = flagcxSuccess;
  for (; started < ndev; started++)
    if (pthread_create(&th[started], NULL, initAllThread, &ranks[started])) {
      r = flagcxSystemError;
      break;
    }
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  free(th);
  for (int i = 0; i < started && r == flagcxSuccess; i++)
    r = ranks[i].r;
  return r;
}

/* ---- ncclCommInitRank inside a group ----------------------------------- */

// An init inside a group runs at the group's end, beside the others of the
// group (NCCL's rule): one thread driving several ranks (nccl-tests -g 2)
// calls ncclCommInitRank for each inside one group, and each would wait
// for the others if it ran when called. *comm is set at the group's end.
struct deferredInit {
  ncclComm_t *comm;
  flagcxUniqueId id;
  int nranks, rank, dev;
};

static ncclResult_t deferInit(const char *entry, ncclComm_t *comm, int nranks,
                              const ncclUniqueId *id, int rank) {
  struct groupState *g = group();
  flagcxDeviceHandle_t h = NULL;
  int dev = 0;
  flagcxResult_t r = flagcxDeviceHandleInit(&h);
  if (r == flagcxSuccess) // the device current now is the rank's
    r = h->getDevice(&dev);
  if (h != NULL)
    flagcxDeviceHandleFree(h);
  if (r != flagcxSuccess)
    return res(r);
  if (g->ninits == g->capInits) {
    int n = g->capInits ? 2 * g->capInits : 4;
    struct deferredInit *m = realloc(g->inits, (size_t)n * sizeof *m);
    if (m == NULL)
      return refuse(NULL, entry, ncclSystemError, "out of host memory");
    g->inits = m;
    g->capInits = n;
  }
  struct deferredInit *d = &g->inits[g->ninits++];
  d->comm = comm;
  d->nranks = nranks;
  d->rank = rank;
  d->dev = dev;
  fullID(id, &d->id);
  g->ops++;
  return ncclSuccess;
}

// deferredInits runs the group's inits at once, a thread each (its device
// set there), and sets their communicators; on a failure none is kept.
// Each init is bounded by flagcx-go's rendezvous deadlines, so the joins
// end.
static ncclResult_t deferredInits(struct groupState *g) {
  int n = g->ninits;
  g->ninits = 0;
  if (n == 0)
    return ncclSuccess;
  flagcxDeviceHandle_t h = NULL;
  flagcxResult_t r = flagcxDeviceHandleInit(&h);
  struct initAllRank *ranks = calloc((size_t)n, sizeof *ranks);
  if (r == flagcxSuccess && ranks == NULL)
    r = flagcxSystemError;
  for (int i = 0; r == flagcxSuccess && i < n; i++)
    ranks[i] = (struct initAllRank){h, &g->inits[i].id, g->inits[i].nranks,
                                    g->inits[i].rank, g->inits[i].dev, NULL,
                                    flagcxSuccess};
  if (r == flagcxSuccess)
    r = runInitAll(ranks, n);
  for (int i = 0; ranks != NULL && i < n; i++) {
    if (r != flagcxSuccess && ranks[i].comm != NULL)
      flagcxCommAbort(ranks[i].comm);
    *g->inits[i].comm = r == flagcxSuccess ? (ncclComm_t)ranks[i].comm : NULL;
  }
  free(ranks);
  if (h != NULL)
    flagcxDeviceHandleFree(h);
  return res(r);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
  const char *entry = "ncclCommInitAll";
  if (comm == NULL || ndev < 1)
    return refuse(NULL, entry, ncclInvalidArgument,
                  "pass ndev >= 1 and room for ndev communicators in comm");
  ncclResult_t nr = checkDevList(ndev, devlist);
  if (nr != ncclSuccess)
    return nr;
  flagcxDeviceHandle_t h = NULL;
  flagcxUniqueId id;
  flagcxResult_t r = flagcxDeviceHandleInit(&h);
  if (r == flagcxSuccess)
    r = flagcxGetUniqueId(&id);
  struct initAllRank *ranks = calloc((size_t)ndev, sizeof *ranks);
  if (r == flagcxSuccess && ranks == NULL)
    r = flagcxSystemError;
  for (int i = 0; r == flagcxSuccess && i < ndev; i++)
    ranks[i] = (struct initAllRank){h, &id, ndev, i, devlist ? devlist[i] : i,
                                    NULL, flagcxSuccess};
  if (r == flagcxSuccess)
    r = runInitAll(ranks, ndev);
  for (int i = 0; ranks != NULL && i < ndev; i++) {
    if (r != flagcxSuccess && ranks[i].comm != NULL)
      flagcxCommAbort(ranks[i].comm);
    comm[i] = r == flagcxSuccess ? (ncclComm_t)ranks[i].comm : NULL;
  }
  free(ranks);
  if (h != NULL)
    flagcxDeviceHandleFree(h);
  return res(r);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config) {
  if (newcomm != NULL)
    *newcomm = NULL;
  ncclResult_t r = checkConfig("ncclCommSplit", config);
  if (r != ncclSuccess)
    return r;
  return res(flagcxCommSplit(COMM(comm), color, key, (flagcxComm_t *)newcomm));
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                            int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags) {
  // NCCL_SHRINK_ABORT asks to end the parent's operations first: a lost
  // rank's revoke has ended them already, and a planned shrink needs none
  // of the parent's links, so both flags shrink alike.
  (void)shrinkFlags;
  if (newcomm != NULL)
    *newcomm = NULL;
  ncclResult_t r = checkConfig("ncclCommShrink", config);
  if (r != ncclSuccess)
    return r;
  return res(flagcxCommShrink(COMM(comm), excludeRanksList, excludeRanksCount,
                              (flagcxComm_t *)newcomm));
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return res(flagcxCommFinalize(COMM(comm)));
}

// NULL is accepted by ncclCommDestroy and ncclCommAbort, as NCCL does.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return comm == NULL ? ncclSuccess : res(flagcxCommDestroy(COMM(comm)));
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return comm == NULL ? ncclSuccess : res(flagcxCommAbort(COMM(comm)));
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return refuse(comm, "ncclCommRevoke", ncclInvalidArgument,
                "revokeFlags must be NCCL_REVOKE_DEFAULT (0)");
  return res(flagcxCommRevoke(COMM(comm)));
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  flagcxResult_t a = flagcxSuccess;
  flagcxResult_t r =
      flagcxCommGetAsyncError(COMM(comm), asyncError ? &a : NULL);
  if (r == flagcxSuccess)
    *asyncError = res(a);
  return res(r);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  return res(flagcxCommCount(COMM(comm), count));
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  return res(flagcxCommGetDeviceNumber(COMM(comm), device));
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  return res(flagcxCommUserRank(COMM(comm), rank));
}

/* ---- Memory and registration -------------------------------------------- */

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  return res(flagcxMemAlloc(ptr, size, flagcxMemCCL));
}

ncclResult_t ncclMemFree(void *ptr) {
  return res(flagcxMemFree(ptr, flagcxMemCCL));
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                              void **handle) {
  return res(flagcxCommRegister(COMM(comm), buff, size, handle, flagcxMemCCL));
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  return res(flagcxCommDeregister(COMM(comm), handle, flagcxMemCCL));
}

// A window changes nothing either: collectives take any device memory, and
// symmetric kernels are NCCL's own. The handle is the buffer (the device
// API that would read a window, nccl_device.h, is refused).
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                    ncclWindow_t *win, int winFlags) {
  (void)size, (void)winFlags;
  if (comm == NULL)
    return refuse(NULL, "ncclCommWindowRegister", ncclInvalidArgument,
                  "comm is NULL");
  int n = 0;
  flagcxResult_t r = flagcxCommCount(COMM(comm), &n);
  if (r != flagcxSuccess)
    return res(r);
  if (buff == NULL || win == NULL)
    return refuse(comm, "ncclCommWindowRegister", ncclInvalidArgument,
                  "buff and win must not be NULL");
  *win = (ncclWindow_t)buff;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  (void)win;
  if (comm == NULL)
    return refuse(NULL, "ncclCommWindowDeregister", ncclInvalidArgument,
                  "comm is NULL");
  int n = 0;
  return res(flagcxCommCount(COMM(comm), &n));
}

ncclResult_t ncclDevCommCreate(ncclComm_t comm,
                               const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *outDevComm) {
  (void)reqs, (void)outDevComm;
  return NOT_SERVED(comm, "ncclDevCommCreate",
                    "NCCL's device API (nccl_device.h)");
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm,
                                const struct ncclDevComm *devComm) {
  (void)devComm;
  return NOT_SERVED(comm, "ncclDevCommDestroy",
                    "NCCL's device API (nccl_device.h)");
}

/* ---- Reduction operators ------------------------------------------------ */

// The ops are libflagcx.so's (flagcxRedOpCreatePreMulSum, a flagcx-go
// extension): it scales each input on the device, then sums.
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                      ncclDataType_t datatype,
                                      ncclScalarResidence_t residence,
                                      ncclComm_t comm) {
  const char *entry = "ncclRedOpCreatePreMulSum";
  if (datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2)
    return refuse(comm, entry, ncclInvalidUsage,
                  "reductions of ncclFloat8e4m3 and ncclFloat8e5m2 are not "
                  "supported by flagcx-go (FlagCX has no fp8 arithmetic): "
                  "reduce in ncclHalf, ncclBfloat16 or ncclFloat32");
  return res(flagcxRedOpCreatePreMulSum(
      (flagcxRedOp_t *)op, scalar, (flagcxDataType_t)datatype,
      (flagcxScalarResidence_t)residence, COMM(comm)));
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return res(flagcxRedOpDestroy((flagcxRedOp_t)op, COMM(comm)));
}

/* ---- Collectives -------------------------------------------------------- */

// dtype is what FlagCX's API takes for NCCL's datatype. FlagCX has no fp8:
// moving fp8 elements is moving bytes, so collectives that only move data
// take them as flagcxUint8; reductions of them are refused.
static ncclResult_t dtype(const char *entry, ncclComm_t comm,
                          ncclDataType_t dt, int reduces,
                          flagcxDataType_t *out) {
  *out = (flagcxDataType_t)dt;
  if (dt != ncclFloat8e4m3 && dt != ncclFloat8e5m2)
    return ncclSuccess;
  if (reduces)
    return refuse(comm, entry, ncclInvalidUsage,
                  "reductions of ncclFloat8e4m3 and ncclFloat8e5m2 are not "
                  "supported by flagcx-go (FlagCX has no fp8 arithmetic): "
                  "reduce in ncclHalf, ncclBfloat16 or ncclFloat32");
  *out = flagcxUint8;
  return ncclSuccess;
}

#define DTYPE(entry, comm, dt, reduces, out)                                   \
  flagcxDataType_t out;                                                        \
  do {                                                                         \
    ncclResult_t r_ = dtype(entry, comm, dt, reduces, &out);                   \
    if (r_ != ncclSuccess)                                                     \
      return r_;                                                               \
    queued();                                                                  \
  } while (0)

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  DTYPE("ncclReduce", comm, datatype, 1, t);
  return res(flagcxReduce(sendbuff, recvbuff, count, t, (flagcxRedOp_t)op,
                          root, COMM(comm), STREAM(stream)));
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream) {
  DTYPE("ncclBcast", comm, datatype, 0, t);
  return res(flagcxBroadcast(buff, buff, count, t, root, COMM(comm),
                             STREAM(stream)));
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  DTYPE("ncclBroadcast", comm, datatype, 0, t);
  return res(flagcxBroadcast(sendbuff, recvbuff, count, t, root, COMM(comm),
                             STREAM(stream)));
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  DTYPE("ncclAllReduce", comm, datatype, 1, t);
  return res(flagcxAllReduce(sendbuff, recvbuff, count, t, (flagcxRedOp_t)op,
                             COMM(comm), STREAM(stream)));
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  DTYPE("ncclReduceScatter", comm, datatype, 1, t);
  return res(flagcxReduceScatter(sendbuff, recvbuff, recvcount, t,
                                 (flagcxRedOp_t)op, COMM(comm),
                                 STREAM(stream)));
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  DTYPE("ncclAllGather", comm, datatype, 0, t);
  return res(flagcxAllGather(sendbuff, recvbuff, sendcount, t, COMM(comm),
                             STREAM(stream)));
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream) {
  DTYPE("ncclAlltoAll", comm, datatype, 0, t);
  return res(flagcxAlltoAll(sendbuff, recvbuff, count, t, COMM(comm),
                            STREAM(stream)));
}

ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  DTYPE("ncclGather", comm, datatype, 0, t);
  return res(flagcxGather(sendbuff, recvbuff, count, t, root, COMM(comm),
                          STREAM(stream)));
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  DTYPE("ncclScatter", comm, datatype, 0, t);
  return res(flagcxScatter(sendbuff, recvbuff, count, t, root, COMM(comm),
                           STREAM(stream)));
}

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  DTYPE("ncclSend", comm, datatype, 0, t);
  return res(
      flagcxSend(sendbuff, count, t, peer, COMM(comm), STREAM(stream)));
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  DTYPE("ncclRecv", comm, datatype, 0, t);
  return res(
      flagcxRecv(recvbuff, count, t, peer, COMM(comm), STREAM(stream)));
}

/* ---- Groups ------------------------------------------------------------- */

// NCCL's groups are the calling thread's: flagcxGroupStart(NULL)'s.
ncclResult_t ncclGroupStart(void) {
  struct groupState *g = group();
  if (g == NULL)
    return refuse(NULL, "ncclGroupStart", ncclSystemError,
                  "out of host memory");
  flagcxResult_t r = flagcxGroupStart(NULL);
  if (r == flagcxSuccess)
    g->depth++;
  return res(r);
}

// The outermost end runs the group's inits first: its collectives may use
// the communicators made before it, never those (*comm is set here).
ncclResult_t ncclGroupEnd(void) {
  struct groupState *g = group();
  ncclResult_t ir = ncclSuccess;
  if (g != NULL && g->depth > 0 && --g->depth == 0) {
    g->ops = 0;
    ir = deferredInits(g);
  }
  ncclResult_t r = res(flagcxGroupEnd(NULL));
  return ir != ncclSuccess ? ir : r;
}

// flagcx-go cannot simulate a group: it reports no time for a group with
// nothing in it, and refuses one with operations (NCCL would discard them
// unlaunched; here they may have run or would run at the group's end).
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  const char *entry = "ncclGroupSimulateEnd";
  if (simInfo == NULL || simInfo->magic != 0x74685283 ||
      simInfo->size < sizeof(ncclSimInfo_t))
    return refuse(NULL, entry, ncclInvalidArgument,
                  "simInfo is NULL or not initialized with "
                  "NCCL_SIM_INFO_INITIALIZER");
  struct groupState *g = group();
  if (g == NULL || g->depth == 0)
    return refuse(NULL, entry, ncclInvalidUsage,
                  "ncclGroupSimulateEnd without ncclGroupStart on this thread");
  if (g->ops > 0)
    return refuse(NULL, entry, ncclInvalidUsage,
                  "flagcx-go cannot simulate a group that holds operations "
                  "(it would have to run them): the group stays open, end it "
                  "with ncclGroupEnd to run them");
  ncclResult_t r = ncclGroupEnd();
  if (r == ncclSuccess)
    simInfo->estimatedTime = 0.0f;
  return r;
}

/* ---- NCCL's profiling names: pncclX is ncclX ----------------------------- */

#define P(name) extern __typeof__(name) p##name __attribute__((alias(#name)));
P(ncclMemAlloc)
P(ncclMemFree)
P(ncclGetVersion)
P(ncclGetUniqueId)
P(ncclCommInitRankConfig)
P(ncclCommInitRank)
P(ncclCommInitAll)
P(ncclCommFinalize)
P(ncclCommDestroy)
P(ncclCommAbort)
P(ncclCommRevoke)
P(ncclCommSplit)
P(ncclCommShrink)
P(ncclCommInitRankScalable)
P(ncclGetErrorString)
P(ncclGetLastError)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
P(ncclResetDebugInit)
#pragma GCC diagnostic pop
P(ncclCommGetAsyncError)
P(ncclCommCount)
P(ncclCommCuDevice)
P(ncclCommUserRank)
P(ncclCommRegister)
P(ncclCommDeregister)
P(ncclCommWindowRegister)
P(ncclCommWindowDeregister)
P(ncclRedOpCreatePreMulSum)
P(ncclRedOpDestroy)
P(ncclReduce)
P(ncclBcast)
P(ncclBroadcast)
P(ncclAllReduce)
P(ncclReduceScatter)
P(ncclAllGather)
P(ncclAlltoAll)
P(ncclGather)
P(ncclScatter)
P(ncclSend)
P(ncclRecv)
P(ncclGroupStart)
P(ncclGroupEnd)
P(ncclGroupSimulateEnd)
