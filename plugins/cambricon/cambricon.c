/*
 * libflagcx-cambricon.so: the flagcx-go plugin ABI (sdk/include/flagcx_plugin.h)
 * mapped onto Cambricon CNRT (device runtime) and CNCL (collectives).
 *
 * Both vendor libraries are dlopen'ed at init, so this file builds with gcc
 * alone: the few CNRT/CNCL types and prototypes it needs are declared below
 * from the public headers (values, signatures and evidence:
 * docs/vendor-facts.md#cambricon; cncl.h v1.25.0 [CNCLH], cnrt.h v6.14.1
 * [CNRTH], call sites in FlagCX [FCX]). Every fact used here that
 * docs/vendor-facts.md marks ⚠ or lists as not surveyed is marked
 * "UNVERIFIED" where it is used, with how to check it on a machine with an
 * MLU; README.md lists them all.
 *
 * What differs from NCCL/CUDA and is translated here:
 *   - data types: CNCL numbers its types 0x10.. (table cnclType[] below) and
 *     has NO float64: float64 is reported as not supported (FlagCX maps it
 *     to cnclFloat32, which is a wrong answer, not a mapping);
 *   - ops: sum/prod/max/min keep their numbers; CNCL has no avg (not
 *     supported);
 *   - memcpy directions: CNRT is H2D 0, D2D 1, D2H 2 (table cnrtDir[]);
 *   - argument orders: cnrtMemcpyAsync(dst, src, n, queue, dir),
 *     cnrtQueueWaitNotifier(notifier, queue, flag),
 *     cnrtNotifierElapsedTime(start, end, ms), cnclGetComm*(int* out, comm);
 *   - the unique id is the whole 136-byte struct cnclCliqueId (data[128] and
 *     hash), passed by pointer to cnclInitComms(comms, 1, &dev, &rank, nranks,
 *     id);
 *   - streams are cnrtQueue_t, events are cnrtNotifier_t.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flagcx_plugin.h"
#include "shim.h"

/* ---- Vendor declarations (no Neuware SDK needed) ------------------------- */
/* CNRT (cnrt.h v6.x, H [CNRTH]) */
typedef int cnrtRet_t;
enum { cnrtSuccess = 0, cnrtErrorNotReady = 1, cnrtErrorNoDevice = 100004, cnrtErrorBusy = 632014 };
/* cnrtMemTransDir_t: H2D 0, D2D 1, D2H 2 (HostToHost 3, PeerToPeer 4, NoDirection 5 unused). */
enum { cnrtMemcpyHostToDev = 0, cnrtMemcpyDevToDev = 1, cnrtMemcpyDevToHost = 2 };
/* UNVERIFIED (⚠, docs/vendor-facts.md#cambricon-cnrt): CNRT_NOTIFIER_WAIT_DEFAULT
 * is presumed 0 (FlagCX passes the name).
 * Check: grep CNRT_NOTIFIER_WAIT_DEFAULT $NEUWARE_HOME/include/cnrt.h */
#define CNRT_NOTIFIER_WAIT_DEFAULT 0u
typedef struct cnrtQueue* cnrtQueue_t;
typedef struct cnrtNotifier* cnrtNotifier_t;

/* CNCL (cncl.h v1.25.0, H [CNCLH]) */
typedef int cnclResult_t;
enum {
  CNCL_RET_SUCCESS = 0x00, CNCL_RET_ERR_INTERNAL = 0x01, CNCL_RET_ERR_UNSUPPORTED = 0x11,
  CNCL_RET_ERR_NULL_POINTER = 0x21, CNCL_RET_ERR_INIT = 0x51, CNCL_RET_ERR_NOT_INIT = 0x61,
  CNCL_RET_ERR_REINIT = 0x71, CNCL_RET_ERR_SYS_SOCKET = 0x22, CNCL_RET_ERR_SYS_IBV = 0x32,
  CNCL_RET_ASYNC_IN_PROGRESS = 0x06, CNCL_RET_ASYNC_ERROR = 0x16, CNCL_RET_ERR_ARGUMENTS = 0x07,
  CNCL_RET_IB_RECV_NOTREADY = 0x09
};
typedef int cnclDataType_t;
enum {
  cnclFloat16 = 0x10, cnclBfloat16 = 0x11, cnclFloat32 = 0x12, cnclInt8 = 0x20, cnclInt32 = 0x22,
  cnclInt64 = 0x23, cnclUint8 = 0x30, cnclUint32 = 0x32, cnclUint64 = 0x33
};
typedef int cnclReduceOp_t; /* cnclSum 0, cnclProd 1, cnclMax 2, cnclMin 3: no avg */
#define CNCL_CLIQUE_ID_BYTES_SIZE 128
/* UNVERIFIED (⚠, docs/vendor-facts.md#cambricon-cncl): sizeof is 136 on
 * x86-64/aarch64 (char[128] + uint64_t, no padding). The whole struct is
 * exchanged, hash included. */
typedef struct cnclCliqueId { char data[CNCL_CLIQUE_ID_BYTES_SIZE]; uint64_t hash; } cnclCliqueId;
typedef struct cnclComm* cnclComm_t;

/* flagcxDataType_t -> cnclDataType_t; -1: CNCL has no such type. The one gap
 * is float64 (cncl.h has none). */
static const int cnclType[flagcxNumTypes] = {
    [flagcxInt8] = cnclInt8,       [flagcxUint8] = cnclUint8,     [flagcxInt32] = cnclInt32,
    [flagcxUint32] = cnclUint32,   [flagcxInt64] = cnclInt64,     [flagcxUint64] = cnclUint64,
    [flagcxFloat16] = cnclFloat16, [flagcxFloat32] = cnclFloat32, [flagcxFloat64] = -1,
    [flagcxBfloat16] = cnclBfloat16};
/* flagcxMemcpyKind_t (H2D 0, D2H 1, D2D 2) -> cnrtMemTransDir_t. */
static const int cnrtDir[3] = {cnrtMemcpyHostToDev, cnrtMemcpyDevToHost, cnrtMemcpyDevToDev};
#define TYPE_MASK ((1u << flagcxNumTypes) - 1 - (1u << flagcxFloat64))
#define OP_MASK ((1u << flagcxSum) | (1u << flagcxProd) | (1u << flagcxMax) | (1u << flagcxMin))

/* Function pointers, filled by dlsym at init. REQ: init fails without it;
 * OPT: NULL means the feature is unavailable. */
#define CNRT_FUNCS(REQ, OPT)                                                        \
  REQ(cnrtRet_t, cnrtGetDeviceCount, (unsigned*))                                   \
  REQ(cnrtRet_t, cnrtSetDevice, (int))                                              \
  REQ(cnrtRet_t, cnrtMalloc, (void**, size_t))                                      \
  REQ(cnrtRet_t, cnrtFree, (void*))                                                 \
  REQ(cnrtRet_t, cnrtHostMalloc, (void**, size_t))                                  \
  REQ(cnrtRet_t, cnrtFreeHost, (void*))                                             \
  REQ(cnrtRet_t, cnrtMemcpy, (void*, void*, size_t, int))                           \
  REQ(cnrtRet_t, cnrtMemset, (void*, int, size_t))                                  \
  REQ(cnrtRet_t, cnrtMemsetAsync, (void*, int, size_t, cnrtQueue_t))                \
  REQ(cnrtRet_t, cnrtQueueCreate, (cnrtQueue_t*))                                   \
  REQ(cnrtRet_t, cnrtQueueDestroy, (cnrtQueue_t))                                   \
  REQ(cnrtRet_t, cnrtQueueSync, (cnrtQueue_t))                                      \
  REQ(cnrtRet_t, cnrtNotifierCreate, (cnrtNotifier_t*))                             \
  REQ(cnrtRet_t, cnrtNotifierDestroy, (cnrtNotifier_t))                             \
  REQ(cnrtRet_t, cnrtPlaceNotifier, (cnrtNotifier_t, cnrtQueue_t))                  \
  REQ(cnrtRet_t, cnrtWaitNotifier, (cnrtNotifier_t))                                \
  REQ(cnrtRet_t, cnrtQueueWaitNotifier, (cnrtNotifier_t, cnrtQueue_t, unsigned))    \
  REQ(const char*, cnrtGetErrorStr, (cnrtRet_t))                                    \
  OPT(cnrtRet_t, cnrtHostRegister, (void*, size_t, unsigned))                      \
  OPT(cnrtRet_t, cnrtHostUnregister, (void*))                                       \
  OPT(cnrtRet_t, cnrtMemcpyAsync, (void*, void*, size_t, cnrtQueue_t, int))         \
  OPT(cnrtRet_t, cnrtMemcpyAsync_V2, (void*, void*, size_t, cnrtQueue_t, int))      \
  OPT(cnrtRet_t, cnrtQueueQuery, (cnrtQueue_t))                                     \
  OPT(cnrtRet_t, cnrtQueryNotifier, (cnrtNotifier_t))                               \
  OPT(cnrtRet_t, cnrtNotifierElapsedTime, (cnrtNotifier_t, cnrtNotifier_t, float*)) \
  OPT(cnrtRet_t, cnrtDeviceGetPCIBusId, (char*, int, int))                          \
  OPT(cnrtRet_t, cnrtGetLibVersion, (int*, int*, int*))

#define CNCL_FUNCS(REQ, OPT)                                                                              \
  REQ(cnclResult_t, cnclGetCliqueId, (cnclCliqueId*))                                                     \
  REQ(cnclResult_t, cnclInitComms, (cnclComm_t*, int, const int*, const int*, int, cnclCliqueId*))        \
  REQ(cnclResult_t, cnclFreeComm, (cnclComm_t))                                                           \
  REQ(cnclResult_t, cnclGetCommCount, (int*, cnclComm_t))                                                 \
  REQ(cnclResult_t, cnclGetCommRank, (int*, cnclComm_t))                                                  \
  REQ(cnclResult_t, cnclAllReduce, (const void*, void*, size_t, int, int, cnclComm_t, cnrtQueue_t))       \
  REQ(cnclResult_t, cnclReduce, (const void*, void*, size_t, int, int, int, cnclComm_t, cnrtQueue_t))     \
  REQ(cnclResult_t, cnclBroadcast, (const void*, void*, size_t, int, int, cnclComm_t, cnrtQueue_t))       \
  REQ(cnclResult_t, cnclAllGather, (const void*, void*, size_t, int, cnclComm_t, cnrtQueue_t))            \
  REQ(cnclResult_t, cnclReduceScatter, (const void*, void*, size_t, int, int, cnclComm_t, cnrtQueue_t))   \
  REQ(cnclResult_t, cnclSend, (void*, size_t, int, int, cnclComm_t, cnrtQueue_t))                         \
  REQ(cnclResult_t, cnclRecv, (void*, size_t, int, int, cnclComm_t, cnrtQueue_t))                         \
  REQ(cnclResult_t, cnclGroupStart, (void))                                                               \
  REQ(cnclResult_t, cnclGroupEnd, (void))                                                                 \
  REQ(const char*, cnclGetErrorStr, (cnclResult_t))                                                       \
  OPT(cnclResult_t, cnclAbortComm, (cnclComm_t))                                                          \
  OPT(cnclResult_t, cnclGetCommAsyncError, (cnclComm_t))                                                  \
  OPT(cnclResult_t, cnclAlltoAll, (const void*, void*, size_t, int, cnclComm_t, cnrtQueue_t))             \
  OPT(cnclResult_t, cnclGetLibVersion, (int*, int*, int*))

CNRT_FUNCS(SHIM_DECLARE, SHIM_DECLARE)
CNCL_FUNCS(SHIM_DECLARE, SHIM_DECLARE)

/* ---- State, errors, logging ---------------------------------------------- */
enum { LIB_CNRT, LIB_CNCL, NUM_LIBS };
/* $NEUWARE_HOME/lib64 is tried first when NEUWARE_HOME is set (see shimPlugin). */
static const flagcxPluginLibrary_v1_t libraries[NUM_LIBS + 1] = {
    {"runtime", "FLAGCX_CAMBRICON_CNRT", "libcnrt.so:/usr/local/neuware/lib64/libcnrt.so", 0, 0},
    {"ccl", "FLAGCX_CAMBRICON_CNCL", "libcncl.so:/usr/local/neuware/lib64/libcncl.so", 0, 0},
    {NULL, NULL, NULL, 0, 0}};

/* vendorsim builds only (not a vendor API): the emulator's reason for its
 * last failure on this thread, appended to our messages. */
static const char* (*simLastError[NUM_LIBS])(void);

static const char* simWhy(int lib, char* buf, size_t n) {
  const char* w = simLastError[lib] ? simLastError[lib]() : NULL;
  if (!w || !*w) return "";
  shimPrintf(buf, n, " [vendorsim: %s]", w);
  return buf;
}

/* Every CNRT failure is a device-runtime error carrying CNRT's own text. */
static flagcxResult_t cnrtCheck(cnrtRet_t e, const char* call) {
  char why[640];
  if (e == cnrtSuccess) return flagcxSuccess;
  return shimFail(flagcxUnhandledDeviceError, "%s: %s (cnrtRet %d)%s", call, f_cnrtGetErrorStr(e), e,
              simWhy(LIB_CNRT, why, sizeof why));
}

/* cnclResult_t -> flagcxResult_t. The low nibble of a CNCL code is its
 * family (1 CNCL itself, 2 system, 3 runtime, 4 device, 5 in-network,
 * 6 async, 7 arguments, 8 allocation, 9 IB); known codes first. */
static flagcxResult_t cnclResult(cnclResult_t r) {
  switch (r) {
    case CNCL_RET_SUCCESS: return flagcxSuccess;
    case CNCL_RET_ERR_INTERNAL: return flagcxInternalError;
    case CNCL_RET_ERR_UNSUPPORTED: return flagcxNotSupported;
    case CNCL_RET_ERR_NULL_POINTER:
    case CNCL_RET_ERR_ARGUMENTS: return flagcxInvalidArgument;
    case CNCL_RET_ERR_INIT:
    case CNCL_RET_ERR_NOT_INIT:
    case CNCL_RET_ERR_REINIT: return flagcxInvalidUsage;
    case CNCL_RET_ASYNC_IN_PROGRESS: return flagcxInProgress;
    case CNCL_RET_ERR_SYS_SOCKET:
    case CNCL_RET_ERR_SYS_IBV:
    case CNCL_RET_IB_RECV_NOTREADY: return flagcxRemoteError; /* a peer or the network went away */
  }
  switch (r & 0xf) {
    case 2: return flagcxSystemError;
    case 3: case 4: case 8: return flagcxUnhandledDeviceError;
    default: return flagcxUnhandledCclError;
  }
}

static flagcxResult_t cnclCheck(cnclResult_t r, const char* call) {
  char why[640];
  if (r == CNCL_RET_SUCCESS) return flagcxSuccess;
  return shimFail(cnclResult(r), "%s: %s (cnclResult 0x%02x)%s", call, f_cnclGetErrorStr(r), (unsigned)r,
              simWhy(LIB_CNCL, why, sizeof why));
}

#define CNRT(fn, args) \
  do { flagcxResult_t r_ = cnrtCheck(f_##fn args, #fn); if (r_ != flagcxSuccess) return r_; } while (0)

/* ---- Init: load libraries ------------------------------------------------- */
/* Emulators (conformance/vendorsim) also say why they failed. */
static void simOpened(int lib, void* h) {
  simLastError[lib] = shimStatus[lib].emulated ? (const char* (*)(void))dlsym(h, "flagcxVendorsimLastError") : NULL;
}

static flagcxResult_t loadCnrt(void* h) {
  int lib = LIB_CNRT, a, b, c;
  simOpened(lib, h);
  CNRT_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (!f_cnrtMemcpyAsync && !f_cnrtMemcpyAsync_V2)
    return shimMissing(lib, "cnrtMemcpyAsync (and cnrtMemcpyAsync_V2)", "");
  /* UNVERIFIED: cnrtGetLibVersion(int*, int*, int*) is not surveyed
   * (docs/vendor-facts.md#cambricon-cnrt; optional: only the version text
   * depends on it). */
  if (f_cnrtGetLibVersion && f_cnrtGetLibVersion(&a, &b, &c) == cnrtSuccess)
    shimPrintf(shimStatus[lib].version, sizeof shimStatus[lib].version, "%d.%d.%d", a, b, c);
  return flagcxSuccess;
}

static flagcxResult_t loadCncl(void* h) {
  int lib = LIB_CNCL, a, b, c;
  simOpened(lib, h);
  CNCL_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (f_cnclGetLibVersion && f_cnclGetLibVersion(&a, &b, &c) == CNCL_RET_SUCCESS)
    shimPrintf(shimStatus[lib].version, sizeof shimStatus[lib].version, "%d.%d.%d", a, b, c);
  return flagcxSuccess;
}

static void fillMasks(flagcxPluginInfo_v1_t* info) {
  info->dataTypeMask = TYPE_MASK; /* all but float64 */
  info->redOpMask = OP_MASK;      /* all but avg */
}

static flagcxResult_t (*const loaders[NUM_LIBS])(void*) = {loadCnrt, loadCncl};

static void simReset(void) { memset(simLastError, 0, sizeof simLastError); }
static void initDone(void) { shimLog(flagcxLogInfo, "CNCL has no float64 and no avg: both are reported as not supported"); }

const shimPlugin_t shimPlugin = {
    .libraries = libraries,
    .numLibraries = NUM_LIBS,
    .loaders = loaders,
    .homeEnv = "NEUWARE_HOME",
    .homeDir = "lib64",
    .homeTried = "$NEUWARE_HOME/lib64, ",
    .install = "install Cambricon Neuware, set NEUWARE_HOME,",
    .missingFmt = "%s lacks %s%s: it is not Cambricon's %s or too old; point %s at another one",
    .initFailed = simReset,
    .initDone = initDone,
    .fillMasks = fillMasks,
};

/* ---- Device runtime ------------------------------------------------------- */
static flagcxResult_t cnGetDeviceCount(int* count) {
  unsigned n = 0;
  cnrtRet_t e;
  READY();
  e = f_cnrtGetDeviceCount(&n); /* unsigned int*, as cnrt.h declares it */
  if (e == cnrtErrorNoDevice) { *count = 0; return flagcxSuccess; } /* no MLU is an answer */
  if (e != cnrtSuccess) return cnrtCheck(e, "cnrtGetDeviceCount");
  *count = (int)n;
  return flagcxSuccess;
}

static flagcxResult_t cnSetDevice(int dev) { READY(); return cnrtCheck(f_cnrtSetDevice(dev), "cnrtSetDevice"); }

/* "0000:3B:00.0" or NVML-style "00000000:3b:00.0" -> "0000:3b:00.0". */
static void normalizeBusId(char* s) {
  char* colon = strchr(s, ':');
  char* c;
  if (colon && colon - s == 8 && strncmp(s, "0000", 4) == 0) memmove(s, s + 4, strlen(s + 4) + 1);
  for (c = s; *c; c++) *c = tolower((unsigned char)*c);
}

static flagcxResult_t cnGetDeviceInfo(int dev, flagcxDeviceInfo_v1_t* info) {
  char path[96];
  int n = 0;
  FILE* f;
  flagcxResult_t r;
  READY();
  memset(info, 0, sizeof *info);
  info->numaNode = -1;
  if ((r = cnGetDeviceCount(&n)) != flagcxSuccess) return r;
  if (dev < 0 || dev >= n) return shimFail(flagcxInvalidArgument, "getDeviceInfo: device %d of %d MLUs", dev, n);
  /* No name or memory-size call is used: cnrtGetDeviceProperties' struct
   * layout was not surveyed (docs/vendor-facts.md#cambricon-cnrt), so name
   * is generic and memory 0. */
  shimPrintf(info->name, sizeof info->name, "Cambricon MLU %d", dev);
  /* UNVERIFIED (C [FCX], docs/vendor-facts.md#cambricon-cnrt):
   * cnrtDeviceGetPCIBusId(char*, int len, int dev) and its text form;
   * normalized to "dddd:bb:dd.f" lower case. */
  if (f_cnrtDeviceGetPCIBusId) {
    CNRT(cnrtDeviceGetPCIBusId, (info->pciBusId, (int)sizeof info->pciBusId, dev));
    normalizeBusId(info->pciBusId);
    shimPrintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", info->pciBusId);
    if ((f = fopen(path, "r"))) {
      if (fscanf(f, "%d", &info->numaNode) != 1) info->numaNode = -1;
      fclose(f);
    }
  }
  return flagcxSuccess;
}

/* No CNRT topology call is used (cnrtGetTopologyRelationship was not
 * surveyed, docs/vendor-facts.md#cambricon-cnrt): the same device is Self,
 * any other pair Unknown. */
static flagcxResult_t cnGetLinkInfo(int a, int b, flagcxLinkInfo_v1_t* link) {
  READY();
  memset(link, 0, sizeof *link);
  link->type = a == b ? flagcxLinkSelf : flagcxLinkUnknown;
  shimPrintf(link->name, sizeof link->name, "%s", a == b ? "X" : "unknown");
  return flagcxSuccess;
}

static flagcxResult_t cnDeviceMalloc(int dev, void** ptr, size_t bytes) {
  READY();
  CNRT(cnrtSetDevice, (dev)); /* cnrtMalloc allocates on the current device */
  return cnrtCheck(f_cnrtMalloc(ptr, bytes), "cnrtMalloc");
}
static flagcxResult_t cnDeviceFree(void* ptr) { READY(); return cnrtCheck(f_cnrtFree(ptr), "cnrtFree"); }
static flagcxResult_t cnHostMalloc(void** ptr, size_t bytes) {
  READY();
  return cnrtCheck(f_cnrtHostMalloc(ptr, bytes), "cnrtHostMalloc");
}
static flagcxResult_t cnHostFree(void* ptr) { READY(); return cnrtCheck(f_cnrtFreeHost(ptr), "cnrtFreeHost"); }
/* cnrtHostRegister exists in CNRT 6 (cnrt.h's cnrtAttrSupportHostRegsiter
 * names it); its flags argument is taken as 0 = default (unverified). */
static flagcxResult_t cnHostRegister(void* ptr, size_t bytes) {
  READY();
  if (!f_cnrtHostRegister) return shimFail(flagcxNotSupported, "cnrtHostRegister not found in libcnrt");
  return cnrtCheck(f_cnrtHostRegister(ptr, bytes, 0), "cnrtHostRegister");
}
static flagcxResult_t cnHostUnregister(void* ptr) {
  READY();
  if (!f_cnrtHostUnregister) return shimFail(flagcxNotSupported, "cnrtHostUnregister not found in libcnrt");
  return cnrtCheck(f_cnrtHostUnregister(ptr), "cnrtHostUnregister");
}

static flagcxResult_t cnMemCopy(void* dst, const void* src, size_t bytes, flagcxMemcpyKind_t kind, flagcxStream_t s) {
  READY();
  if ((unsigned)kind > flagcxMemcpyDeviceToDevice)
    return shimFail(flagcxInvalidArgument, "memCopy: direction %d is not 0 (H2D), 1 (D2H) or 2 (D2D)", (int)kind);
  if (!s) return cnrtCheck(f_cnrtMemcpy(dst, (void*)src, bytes, cnrtDir[kind]), "cnrtMemcpy");
  /* queue BEFORE direction */
  if (f_cnrtMemcpyAsync)
    return cnrtCheck(f_cnrtMemcpyAsync(dst, (void*)src, bytes, (cnrtQueue_t)s, cnrtDir[kind]), "cnrtMemcpyAsync");
  return cnrtCheck(f_cnrtMemcpyAsync_V2(dst, (void*)src, bytes, (cnrtQueue_t)s, cnrtDir[kind]), "cnrtMemcpyAsync_V2");
}

static flagcxResult_t cnMemSet(void* dst, int value, size_t bytes, flagcxStream_t s) {
  READY();
  if (!s) return cnrtCheck(f_cnrtMemset(dst, value, bytes), "cnrtMemset");
  return cnrtCheck(f_cnrtMemsetAsync(dst, value, bytes, (cnrtQueue_t)s), "cnrtMemsetAsync");
}

static flagcxResult_t cnStreamCreate(int dev, flagcxStream_t* s) {
  READY();
  CNRT(cnrtSetDevice, (dev)); /* a queue belongs to the current device */
  return cnrtCheck(f_cnrtQueueCreate((cnrtQueue_t*)s), "cnrtQueueCreate");
}
static flagcxResult_t cnStreamDestroy(flagcxStream_t s) {
  READY();
  return cnrtCheck(f_cnrtQueueDestroy((cnrtQueue_t)s), "cnrtQueueDestroy");
}
static flagcxResult_t cnStreamSynchronize(flagcxStream_t s) {
  READY();
  return cnrtCheck(f_cnrtQueueSync((cnrtQueue_t)s), "cnrtQueueSync");
}
/* cnrtErrorNotReady (1) and cnrtErrorBusy (632014) both mean "pending"
 * (UNVERIFIED which one CNRT 6 returns: FlagCX tests only cnrtErrorBusy). */
static flagcxResult_t queryResult(cnrtRet_t e, const char* call) {
  if (e == cnrtErrorNotReady || e == cnrtErrorBusy) return flagcxInProgress;
  return cnrtCheck(e, call);
}
static flagcxResult_t cnStreamQuery(flagcxStream_t s) {
  READY();
  if (!f_cnrtQueueQuery) return shimFail(flagcxNotSupported, "cnrtQueueQuery not found in libcnrt");
  return queryResult(f_cnrtQueueQuery((cnrtQueue_t)s), "cnrtQueueQuery");
}
static flagcxResult_t cnStreamWaitEvent(flagcxStream_t s, flagcxEvent_t e) {
  READY(); /* notifier FIRST, then the queue */
  return cnrtCheck(f_cnrtQueueWaitNotifier((cnrtNotifier_t)e, (cnrtQueue_t)s, CNRT_NOTIFIER_WAIT_DEFAULT),
                   "cnrtQueueWaitNotifier");
}

static flagcxResult_t cnEventCreate(int dev, flagcxEvent_t* e) {
  READY();
  CNRT(cnrtSetDevice, (dev));
  /* cnrtNotifierCreate: default flags, timing enabled */
  return cnrtCheck(f_cnrtNotifierCreate((cnrtNotifier_t*)e), "cnrtNotifierCreate");
}
static flagcxResult_t cnEventDestroy(flagcxEvent_t e) {
  READY();
  return cnrtCheck(f_cnrtNotifierDestroy((cnrtNotifier_t)e), "cnrtNotifierDestroy");
}
static flagcxResult_t cnEventRecord(flagcxEvent_t e, flagcxStream_t s) {
  READY();
  return cnrtCheck(f_cnrtPlaceNotifier((cnrtNotifier_t)e, (cnrtQueue_t)s), "cnrtPlaceNotifier");
}
static flagcxResult_t cnEventQuery(flagcxEvent_t e) {
  READY();
  if (!f_cnrtQueryNotifier) return shimFail(flagcxNotSupported, "cnrtQueryNotifier not found in libcnrt");
  return queryResult(f_cnrtQueryNotifier((cnrtNotifier_t)e), "cnrtQueryNotifier");
}
static flagcxResult_t cnEventSynchronize(flagcxEvent_t e) {
  READY();
  return cnrtCheck(f_cnrtWaitNotifier((cnrtNotifier_t)e), "cnrtWaitNotifier");
}
static flagcxResult_t cnEventElapsedTime(float* ms, flagcxEvent_t start, flagcxEvent_t end) {
  READY();
  if (!f_cnrtNotifierElapsedTime) return shimFail(flagcxNotSupported, "cnrtNotifierElapsedTime not found in libcnrt");
  /* ms LAST */
  return cnrtCheck(f_cnrtNotifierElapsedTime((cnrtNotifier_t)start, (cnrtNotifier_t)end, ms), "cnrtNotifierElapsedTime");
}

/* ---- Collective library --------------------------------------------------- */
/* Our handle wraps cnclComm_t with rank and size for the grouped
 * Gather/Scatter/AlltoAllv. */
typedef struct { cnclComm_t cncl; int rank, nranks; } cnComm;
#define CC(c) (((cnComm*)(c))->cncl)

/* Translates t (and op, when op >= 0); float64 and avg are not supported. */
static flagcxResult_t checkTypeOp(const char* call, flagcxDataType_t t, int op, int* ct) {
  if ((unsigned)t >= flagcxNumTypes) return shimFail(flagcxInvalidArgument, "%s: data type %d is unknown", call, (int)t);
  if ((*ct = cnclType[t]) < 0)
    return shimFail(flagcxNotSupported, "%s: CNCL has no float64 type (cncl.h defines none)", call);
  if (op < 0) return flagcxSuccess;
  if (op >= flagcxNumRedOps) return shimFail(flagcxInvalidArgument, "%s: reduction op %d is unknown", call, op);
  if (op == flagcxAvg) return shimFail(flagcxNotSupported, "%s: CNCL has no avg reduction (cncl.h: sum, prod, max, min)", call);
  return flagcxSuccess; /* sum 0, prod 1, max 2, min 3: the same numbers in cnclReduceOp_t */
}
#define TYPE_OP(call, t, op, ct) \
  do { flagcxResult_t r_ = checkTypeOp(call, t, op, &ct); if (r_ != flagcxSuccess) return r_; } while (0)

static flagcxResult_t cnGetUniqueIdBytes(size_t* bytes) { *bytes = sizeof(cnclCliqueId); return flagcxSuccess; }

static flagcxResult_t cnGetUniqueId(void* id) {
  cnclCliqueId u;
  flagcxResult_t r;
  READY();
  memset(&u, 0, sizeof u);
  if ((r = cnclCheck(f_cnclGetCliqueId(&u), "cnclGetCliqueId")) == flagcxSuccess) memcpy(id, &u, sizeof u);
  return r;
}

static flagcxResult_t cnCommInitRank(flagcxVendorComm_t* comm, int nranks, const void* id, int rank, int dev) {
  cnclCliqueId u;
  cnComm* c;
  flagcxResult_t r;
  int n = -1, me = -1;
  READY();
  CNRT(cnrtSetDevice, (dev));
  if (!(c = calloc(1, sizeof *c))) return shimFail(flagcxSystemError, "commInitRank: out of memory");
  memcpy(&u, id, sizeof u); /* all 136 bytes, data and hash */
  c->rank = rank;
  c->nranks = nranks;
  /* one communicator of this process: dev_list = {dev}, rank_list = {rank} */
  if ((r = cnclCheck(f_cnclInitComms(&c->cncl, 1, &dev, &rank, nranks, &u), "cnclInitComms")) != flagcxSuccess) {
    free(c);
    return r;
  }
  /* Output first: cnclGetCommCount(int*, comm). A communicator that
   * disagrees with what we asked for is a bug somewhere; do not use it. */
  if ((r = cnclCheck(f_cnclGetCommCount(&n, c->cncl), "cnclGetCommCount")) == flagcxSuccess &&
      (r = cnclCheck(f_cnclGetCommRank(&me, c->cncl), "cnclGetCommRank")) == flagcxSuccess && (n != nranks || me != rank))
    r = shimFail(flagcxInternalError, "cnclInitComms made rank %d of %d, but rank %d of %d was asked for", me, n, rank, nranks);
  if (r != flagcxSuccess) {
    f_cnclFreeComm(c->cncl);
    free(c);
    return r;
  }
  *comm = (flagcxVendorComm_t)c;
  return flagcxSuccess;
}

static flagcxResult_t cnCommDestroy(flagcxVendorComm_t comm) {
  flagcxResult_t r;
  READY();
  if ((r = cnclCheck(f_cnclFreeComm(CC(comm)), "cnclFreeComm")) == flagcxSuccess) free(comm);
  return r;
}

static flagcxResult_t cnCommAbort(flagcxVendorComm_t comm) {
  flagcxResult_t r;
  READY();
  if (!f_cnclAbortComm) return shimFail(flagcxNotSupported, "cnclAbortComm not found in libcncl");
  if ((r = cnclCheck(f_cnclAbortComm(CC(comm)), "cnclAbortComm")) == flagcxSuccess) free(comm);
  return r;
}

/* cnclGetCommAsyncError returns the status itself (no out-parameter). */
static flagcxResult_t cnCommGetAsyncError(flagcxVendorComm_t comm, flagcxResult_t* asyncError) {
  cnclResult_t a;
  READY();
  if (!f_cnclGetCommAsyncError) return shimFail(flagcxNotSupported, "cnclGetCommAsyncError not found in libcncl");
  a = f_cnclGetCommAsyncError(CC(comm));
  if (a == CNCL_RET_SUCCESS || a == CNCL_RET_ASYNC_IN_PROGRESS) {
    *asyncError = a == CNCL_RET_SUCCESS ? flagcxSuccess : flagcxInProgress;
    return flagcxSuccess;
  }
  cnclCheck(a, "cnclGetCommAsyncError"); /* keeps CNCL's text for getLastError */
  *asyncError = a == CNCL_RET_ASYNC_ERROR ? flagcxUnhandledCclError : cnclResult(a);
  return flagcxSuccess;
}

static flagcxResult_t cnAllReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op,
                                  flagcxVendorComm_t c, flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclAllReduce", t, op, ct);
  return cnclCheck(f_cnclAllReduce(s, r, n, ct, op, CC(c), (cnrtQueue_t)st), "cnclAllReduce");
}
static flagcxResult_t cnReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op, int root,
                               flagcxVendorComm_t c, flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclReduce", t, op, ct);
  return cnclCheck(f_cnclReduce(s, r, n, ct, op, root, CC(c), (cnrtQueue_t)st), "cnclReduce");
}
static flagcxResult_t cnBroadcast(const void* s, void* r, size_t n, flagcxDataType_t t, int root, flagcxVendorComm_t c,
                                  flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclBroadcast", t, -1, ct);
  return cnclCheck(f_cnclBroadcast(s, r, n, ct, root, CC(c), (cnrtQueue_t)st), "cnclBroadcast");
}
static flagcxResult_t cnAllGather(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c,
                                  flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclAllGather", t, -1, ct);
  return cnclCheck(f_cnclAllGather(s, r, n, ct, CC(c), (cnrtQueue_t)st), "cnclAllGather");
}
static flagcxResult_t cnReduceScatter(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op,
                                      flagcxVendorComm_t c, flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclReduceScatter", t, op, ct);
  return cnclCheck(f_cnclReduceScatter(s, r, n, ct, op, CC(c), (cnrtQueue_t)st), "cnclReduceScatter");
}
static flagcxResult_t cnSend(const void* s, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c,
                             flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclSend", t, -1, ct);
  /* cnclSend's buffer is declared non-const in cncl.h; CNCL only reads it */
  return cnclCheck(f_cnclSend((void*)s, n, ct, peer, CC(c), (cnrtQueue_t)st), "cnclSend");
}
static flagcxResult_t cnRecv(void* r, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c,
                             flagcxStream_t st) {
  int ct = -1;
  READY();
  TYPE_OP("cnclRecv", t, -1, ct);
  return cnclCheck(f_cnclRecv(r, n, ct, peer, CC(c), (cnrtQueue_t)st), "cnclRecv");
}
static flagcxResult_t cnGroupStart(void) { READY(); return cnclCheck(f_cnclGroupStart(), "cnclGroupStart"); }
static flagcxResult_t cnGroupEnd(void) { READY(); return cnclCheck(f_cnclGroupEnd(), "cnclGroupEnd"); }

/* CNCL has no Gather, Scatter or AlltoAllv (nor AlltoAll in old versions):
 * grouped point-to-point. Counts and displacements are in elements;
 * sc/sd/rc/rd == NULL means count for every peer at p*count. sendTo /
 * recvFrom: ALL peers, NONE, or one peer (a single buffer at offset 0). The
 * group is closed even after a failure. */
typedef struct { shimXfer x; cnclComm_t cncl; int ct; cnrtQueue_t q; } cnXfer;
static int cnXferSend(shimXfer* x, const void* b, size_t n, int p) {
  cnXfer* k = (cnXfer*)x;
  return f_cnclSend((void*)b, n, k->ct, p, k->cncl, k->q);
}
static int cnXferRecv(shimXfer* x, void* b, size_t n, int p) {
  cnXfer* k = (cnXfer*)x;
  return f_cnclRecv(b, n, k->ct, p, k->cncl, k->q);
}
static flagcxResult_t grouped(const char* call, const void* s, const size_t* sc, const size_t* sd, void* r,
                              const size_t* rc, const size_t* rd, size_t count, flagcxDataType_t t, int sendTo,
                              int recvFrom, flagcxVendorComm_t comm, flagcxStream_t st) {
  cnComm* c = (cnComm*)comm;
  cnXfer x;
  int ct = -1;
  READY();
  TYPE_OP(call, t, -1, ct);
  x = (cnXfer){{c->nranks, shimTypeSize[t], f_cnclGroupStart, f_cnclGroupEnd, cnXferSend, cnXferRecv},
               c->cncl, ct, (cnrtQueue_t)st};
  return cnclCheck(shimGrouped(&x.x, s, sc, sd, r, rc, rd, count, sendTo, recvFrom), call);
}

static flagcxResult_t cnGather(const void* s, void* r, size_t n, flagcxDataType_t t, int root, flagcxVendorComm_t c,
                               flagcxStream_t st) {
  READY(); /* every rank sends n to root; root receives peer p's n at p*n */
  return grouped("gather (grouped cnclSend/cnclRecv)", s, NULL, NULL, r, NULL, NULL, n, t, root,
                 ((cnComm*)c)->rank == root ? SHIM_ALL : SHIM_NONE, c, st);
}
static flagcxResult_t cnScatter(const void* s, void* r, size_t n, flagcxDataType_t t, int root, flagcxVendorComm_t c,
                                flagcxStream_t st) {
  READY(); /* root sends p*n.. to peer p; every rank receives n from root */
  return grouped("scatter (grouped cnclSend/cnclRecv)", s, NULL, NULL, r, NULL, NULL, n, t,
                 ((cnComm*)c)->rank == root ? SHIM_ALL : SHIM_NONE, root, c, st);
}
static flagcxResult_t cnAlltoAll(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c,
                                 flagcxStream_t st) {
  int ct = -1;
  READY();
  if (f_cnclAlltoAll) {
    TYPE_OP("cnclAlltoAll", t, -1, ct);
    return cnclCheck(f_cnclAlltoAll(s, r, n, ct, CC(c), (cnrtQueue_t)st), "cnclAlltoAll");
  }
  return grouped("alltoAll (grouped cnclSend/cnclRecv)", s, NULL, NULL, r, NULL, NULL, n, t, SHIM_ALL, SHIM_ALL, c, st);
}
static flagcxResult_t cnAlltoAllv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                                  const size_t* rd, flagcxDataType_t t, flagcxVendorComm_t c, flagcxStream_t st) {
  return grouped("alltoAllv (grouped cnclSend/cnclRecv)", s, sc, sd, r, rc, rd, 0, t, SHIM_ALL, SHIM_ALL, c, st);
}

static const char* cnGetErrorString(flagcxResult_t r) {
  switch (r) {
    case flagcxSuccess: return "success";
    case flagcxUnhandledDeviceError: return "CNRT or MLU device error";
    case flagcxSystemError: return "system error (CNCL_RET_ERR_SYSTEM family)";
    case flagcxInternalError: return "CNCL internal error";
    case flagcxInvalidArgument: return "invalid argument (CNCL_RET_ERR_ARGUMENTS / NULL_POINTER)";
    case flagcxInvalidUsage: return "invalid usage (CNCL_RET_ERR_INIT / NOT_INIT / REINIT)";
    case flagcxRemoteError: return "a peer or the network failed (CNCL socket / IB error)";
    case flagcxInProgress: return "in progress (CNCL_RET_ASYNC_IN_PROGRESS)";
    case flagcxUnhandledCclError: return "unhandled CNCL error";
    case flagcxNotSupported: return "not supported by CNCL";
    default: return "unknown result";
  }
}

/* ---- The exported table ---------------------------------------------------- */
SHIM_EXPORT const flagcxVendorPlugin_v5_t flagcxVendorPlugin_v5 = {
    SHIM_TABLE_HEAD("cambricon", "Cambricon", FLAGCX_PLUGIN_CAP_DEVICE | FLAGCX_PLUGIN_CAP_CCL, libraries),
    .device = {
        .getDeviceCount = cnGetDeviceCount, .setDevice = cnSetDevice, .getDeviceInfo = cnGetDeviceInfo,
        .getLinkInfo = cnGetLinkInfo, .deviceMalloc = cnDeviceMalloc, .deviceFree = cnDeviceFree,
        .hostMalloc = cnHostMalloc, .hostFree = cnHostFree, .pointerKind = NULL,
        .memCopy = cnMemCopy, .memSet = cnMemSet, .streamCreate = cnStreamCreate,
        .streamDestroy = cnStreamDestroy, .streamSynchronize = cnStreamSynchronize,
        .streamQuery = cnStreamQuery, .streamWaitEvent = cnStreamWaitEvent, .eventCreate = cnEventCreate,
        .eventDestroy = cnEventDestroy, .eventRecord = cnEventRecord, .eventQuery = cnEventQuery,
        .eventSynchronize = cnEventSynchronize, .eventElapsedTime = cnEventElapsedTime,
        .hostRegister = cnHostRegister, .hostUnregister = cnHostUnregister, /* ABI v2 */
        .memGetInfo = NULL, /* ABI v3: no memory-info call in docs/vendor-facts.md */
    },
    .ccl = {
        .getUniqueIdBytes = cnGetUniqueIdBytes, .getUniqueId = cnGetUniqueId, .commInitRank = cnCommInitRank,
        .commDestroy = cnCommDestroy, .commAbort = cnCommAbort, .commGetAsyncError = cnCommGetAsyncError,
        .allReduce = cnAllReduce, .reduce = cnReduce, .broadcast = cnBroadcast, .allGather = cnAllGather,
        .reduceScatter = cnReduceScatter, .alltoAll = cnAlltoAll, .alltoAllv = cnAlltoAllv,
        .gather = cnGather, .scatter = cnScatter, .send = cnSend, .recv = cnRecv,
        .groupStart = cnGroupStart, .groupEnd = cnGroupEnd, .getErrorString = cnGetErrorString,
    },
};
