/*
 * libflagcx-metax.so: the flagcx-go plugin ABI (sdk/include/flagcx_plugin.h)
 * mapped onto MetaX's MACA runtime (libmcruntime.so) and MCCL (libmccl.so).
 *
 * Both libraries are dlopen'ed at init, so this file builds with gcc alone:
 * the few MetaX types and prototypes it needs are declared below. Evidence
 * (docs/vendor-facts.md#metax, marks and tags as there: H = read in a
 * vendor header, C = seen at a real call site, ⚠ = inferred, ❌ = not
 * found):
 *
 *   - MCCL: H [MCCLH], the MetaX mccl.h with MCCL_VERSION_CODE 21605 (code
 *     index id 54691111213). Results, data types, ops, the 128-byte unique id
 *     passed BY VALUE and every signature used here, including mcclGather,
 *     mcclScatter and mcclAllToAll, are in that header. The numbering is
 *     NCCL's, which FlagCX's mccl_adaptor.cc also relies on (C [FCX]).
 *   - MACA runtime: names and signatures C [FCX] maca_adaptor.cc, [VLM]. Only
 *     mcSuccess = 0 and mcMemcpyDefault = 4 are confirmed by call sites; the
 *     values marked ⚠ / ❌ below are beliefs, not facts (see METAX_UNVERIFIED
 *     and README.md for how to check them on a MetaX machine).
 *
 * Names marked "not surveyed" (docs/vendor-facts.md#evidence-marks) are
 * optional lookups: when dlsym does not find them the feature they serve
 * degrades instead of failing.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "flagcx_plugin.h"
#include "shim.h"

/* ---- Vendor declarations (no MACA SDK needed) ----------------------------- */
typedef int mcError_t; /* mcSuccess = 0: C [VLM] (result != 0), [FCX] */
typedef void* mcStream_t;
typedef void* mcEvent_t;
enum { mcSuccess = 0 };

/*
 * METAX_UNVERIFIED: the MACA runtime values this plugin believes. None of
 * them was read in a MetaX header; they mirror CUDA (MACA is a CUDA/HIP
 * work-alike). To verify on a MetaX machine, compile and run
 *
 *   #include <mcr/mc_runtime.h>
 *   #include <stdio.h>
 *   int main(void) { printf("%d %d %d %d %d %d %d\n", mcMemcpyHostToDevice,
 *     mcMemcpyDeviceToHost, mcMemcpyDeviceToDevice, mcStreamNonBlocking,
 *     mcEventDefault, (int)mcErrorNotReady, (int)mcErrorNoDevice); }
 *
 * (cc -I$MACA_PATH/include probe.c); expected "1 2 3 1 0 600 100". If a value
 * differs, change it here AND in conformance/vendorsim/metax/mcruntime.c
 * (the emulator's model of MACA is kept separate on purpose).
 */
/* mcMemcpyKind ⚠: 1, 2, 3 from third-party ctypes declarations (code index
 * ids 67386013764, 67172498097); Default = 4 is C [VLM]. */
enum { mcMemcpyHostToDevice = 1, mcMemcpyDeviceToHost = 2, mcMemcpyDeviceToDevice = 3 };
/* ⚠ mcStreamNonBlocking (UCC MACA header), mcEventDefault (CUDA mirror). */
enum { mcStreamNonBlocking = 0x01, mcEventDefault = 0x00 };
/* ❌ mcErrorNotReady: numeric value not found. CUDA and HIP use 600. A query
 * that returns it, or any code whose mcGetErrorString text says "not
 * ready", is read as "pending"; any other code is reported as an error (so
 * a wrong guess turns into an error message, never into "done"). */
#define MC_ERROR_NOT_READY_GUESS 600
/* ⚠ mcErrorNoDevice: CUDA's and HIP's 100. mcGetDeviceCount returning it
 * means "no MetaX device", which the ABI reports as count 0. */
#define MC_ERROR_NO_DEVICE_GUESS 100

typedef int mcclResult_t; /* mcclSuccess 0 .. mcclInProgress 7, mcclNumResults 8: H */
typedef void* mcclComm_t;
typedef struct { char internal[128]; } mcclUniqueId; /* MCCL_UNIQUE_ID_BYTES 128, BY VALUE: H */

/* Function pointers, filled by dlsym at init. REQ: init fails without it;
 * OPT: NULL means the feature is unavailable. */
#define MCRT_FUNCS(REQ, OPT)                                                    \
  REQ(mcError_t, mcGetDeviceCount, (int*))                                      \
  REQ(mcError_t, mcSetDevice, (int))                                            \
  REQ(mcError_t, mcMalloc, (void**, size_t))                                    \
  REQ(mcError_t, mcFree, (void*))                                               \
  REQ(mcError_t, mcMallocHost, (void**, size_t, unsigned))                      \
  REQ(mcError_t, mcFreeHost, (void*))                                           \
  REQ(mcError_t, mcMemcpy, (void*, const void*, size_t, int))                   \
  REQ(mcError_t, mcMemcpyAsync, (void*, const void*, size_t, int, mcStream_t))  \
  REQ(mcError_t, mcMemsetAsync, (void*, int, size_t, mcStream_t))               \
  REQ(mcError_t, mcStreamCreateWithFlags, (mcStream_t*, unsigned))             \
  REQ(mcError_t, mcStreamDestroy, (mcStream_t))                                 \
  REQ(mcError_t, mcStreamSynchronize, (mcStream_t))                             \
  REQ(mcError_t, mcStreamWaitEvent, (mcStream_t, mcEvent_t, unsigned))          \
  REQ(mcError_t, mcEventCreateWithFlags, (mcEvent_t*, unsigned))                \
  REQ(mcError_t, mcEventDestroy, (mcEvent_t))                                   \
  REQ(mcError_t, mcEventRecord, (mcEvent_t, mcStream_t))                        \
  REQ(mcError_t, mcEventSynchronize, (mcEvent_t))                               \
  REQ(mcError_t, mcDeviceGetPCIBusId, (char*, int, int))                        \
  REQ(const char*, mcGetErrorString, (mcError_t))                               \
  OPT(mcError_t, mcHostRegister, (void*, size_t, unsigned))                    \
  OPT(mcError_t, mcHostUnregister, (void*))                                     \
  OPT(mcError_t, mcMemGetInfo, (size_t*, size_t*))                              \
  OPT(mcError_t, mcStreamQuery, (mcStream_t))                                   \
  OPT(mcError_t, mcEventQuery, (mcEvent_t))                                     \
  OPT(mcError_t, mcEventElapsedTime, (float*, mcEvent_t, mcEvent_t))            \
  OPT(mcError_t, mcGetLastError, (void)) /* not surveyed */

MCRT_FUNCS(SHIM_DECLARE, SHIM_DECLARE)

/* ---- State, errors, logging ---------------------------------------------- */
enum { LIB_MCRT, LIB_MCCL, NUM_LIBS };
/* Candidates after $MACA_PATH/lib/<name> (tried first when MACA_PATH is
 * set). The plain soname honours LD_LIBRARY_PATH; /opt/maca/lib is where
 * most callers find MACA, /opt/maca/lib64 where FlagCX's metax.mk links. */
static const flagcxPluginLibrary_v1_t libraries[NUM_LIBS + 1] = {
    {"runtime", "FLAGCX_METAX_MCRUNTIME", "libmcruntime.so:/opt/maca/lib/libmcruntime.so:/opt/maca/lib64/libmcruntime.so", 0, 0},
    {"ccl", "FLAGCX_METAX_MCCL", "libmccl.so:/opt/maca/lib/libmccl.so:/opt/maca/lib64/libmccl.so", 0, 0},
    {NULL, NULL, NULL, 0, 0}};

static flagcxResult_t mcCheck(mcError_t e, const char* call) {
  if (e == mcSuccess) return flagcxSuccess;
  if (f_mcGetLastError) f_mcGetLastError(); /* clear a non-sticky error, as CUDA needs */
  return shimFail(flagcxUnhandledDeviceError, "%s: %s (mcError %d)", call, f_mcGetErrorString(e), e);
}

#define MC(fn, args) \
  do { flagcxResult_t r_ = mcCheck(f_##fn args, #fn); if (r_ != flagcxSuccess) return r_; } while (0)

/* MCCL's half: plugins/common/shim_nccl.h, shared with nvidia. MCCL's
 * results, types and ops are NCCL's numbers in mccl.h (H); mcclResult 1 is
 * mcclUnhandledMacaError, our device error. */
#define SHIM_NCCL_PREFIX mccl
#define SHIM_NCCL_NAME "MCCL"
#define SHIM_NCCL_LIB "libmccl"
#define SHIM_NCCL_RESULT_T mcclResult_t
#define SHIM_NCCL_COMM_T mcclComm_t
#define SHIM_NCCL_UNIQUE_ID_T mcclUniqueId
#define SHIM_NCCL_STREAM_T mcStream_t
#define SHIM_NCCL_SET_DEVICE(dev) MC(mcSetDevice, (dev)) /* MCCL binds the communicator to the current device (H) */
#define SHIM_NCCL_ALLTOALL AllToAll /* note the spelling: AllToAll, not NCCL's AlltoAll */
/* mcclGather/mcclScatter/mcclAllToAll: H [MCCLH] (MCCL_GATHER_SCATTER 1),
 * used when the loaded library exports them. mcclAllToAllv exists (H) but
 * the header does not say whether its count arrays are read on the host
 * during the call (the ABI's contract) or on the device (as BKCL's are) ⚠,
 * so alltoAllv stays grouped send/recv, right either way. */
#define SHIM_NCCL_GATHER_SCATTER 1
/* flagcxDataType_t -> mcclDataType_t and flagcxRedOp_t -> mcclRedOp_t. Both
 * are NCCL's numbers in mccl.h (H), so the tables are the identity; they are
 * spelled out so that the mapping is visible and tested value by value. */
static const int mcclType[flagcxNumTypes] = {
    /* Int8 */ 0, /* Uint8 */ 1, /* Int32 */ 2, /* Uint32 */ 3, /* Int64 */ 4,
    /* Uint64 */ 5, /* Float16 */ 6, /* Float32 */ 7, /* Float64 */ 8, /* Bfloat16 */ 9};
static const int mcclOp[flagcxNumRedOps] = {/* Sum */ 0, /* Prod */ 1, /* Max */ 2, /* Min */ 3, /* Avg */ 4};
#define SHIM_NCCL_TYPE(t) mcclType[t]
#define SHIM_NCCL_OP(o) mcclOp[o]
#include "shim_nccl.h"

/* ---- Init: load libraries ------------------------------------------------- */
/* ⚠ Moore Threads MUSA ships its own libmccl.so with mccl* names
 * (docs/vendor-facts.md#metax-libraries): a search hit under a musa
 * directory is not MetaX's.
 * A path given in the variable is taken as it is. */
static const char* skipMusa(const char* path) {
  if (!strcasestr(path, "/musa")) return NULL;
  shimLog(flagcxLogWarn, "skipping %s: a Moore Threads MUSA library, not MetaX's", path);
  return "found only a MUSA library of that name";
}

static flagcxResult_t loadMcrt(void* h) {
  int lib = LIB_MCRT;
  MCRT_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  return flagcxSuccess;
}

static flagcxResult_t loadMccl(void* h) { return ncclShapeLoad(h, LIB_MCCL); }

static void fillMasks(flagcxPluginInfo_v1_t* info) {
  info->dataTypeMask = (1u << flagcxNumTypes) - 1; /* mcclInt8 0 .. mcclBfloat16 9: H */
  info->redOpMask = (1u << flagcxNumRedOps) - 1;   /* mcclSum 0 .. mcclAvg 4: H */
}

static flagcxResult_t (*const loaders[NUM_LIBS])(void*) = {loadMcrt, loadMccl};

static const char* const whats[NUM_LIBS] = {"MACA runtime", "MCCL"};

/* $MACA_PATH/lib/<name> is tried first when MACA_PATH is set. */
const shimPlugin_t shimPlugin = {
    .libraries = libraries,
    .numLibraries = NUM_LIBS,
    .loaders = loaders,
    .homeEnv = "MACA_PATH",
    .homeDir = "lib",
    .skip = skipMusa,
    .pathOnFailure = 1,
    .install = "install MetaX MACA",
    .missingFmt = "%s lacks %s%s: it is not MetaX %s (or too old); point %s at the one from MACA",
    .whats = whats,
    .fillMasks = fillMasks,
};


/* ---- Device runtime ------------------------------------------------------- */
static flagcxResult_t mxGetDeviceCount(int* count) {
  mcError_t e;
  READY();
  e = f_mcGetDeviceCount(count);
  if (e == MC_ERROR_NO_DEVICE_GUESS) { /* no device is an answer, not a failure */
    if (f_mcGetLastError) f_mcGetLastError();
    *count = 0;
    return flagcxSuccess;
  }
  return mcCheck(e, "mcGetDeviceCount");
}

static flagcxResult_t mxSetDevice(int dev) {
  READY();
  return mcCheck(f_mcSetDevice(dev), "mcSetDevice");
}

/* No MACA call for names, UUIDs, memory size or links is known
 * (docs/vendor-facts.md#metax-maca-runtime: mcGetDeviceProperties' struct
 * layout is ❌), so only the PCI bus id and
 * the NUMA node (from sysfs) are reported. */
static flagcxResult_t mxGetDeviceInfo(int dev, flagcxDeviceInfo_v1_t* info) {
  char path[96];
  FILE* f;
  char* c;
  READY();
  memset(info, 0, sizeof *info);
  info->numaNode = -1;
  MC(mcDeviceGetPCIBusId, (info->pciBusId, sizeof info->pciBusId, dev));
  for (c = info->pciBusId; *c; c++) *c = tolower((unsigned char)*c); /* sysfs spelling */
  shimPrintf(info->name, sizeof info->name, "MetaX GPU %d", dev);
  shimPrintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", info->pciBusId);
  if ((f = fopen(path, "r"))) {
    if (fscanf(f, "%d", &info->numaNode) != 1) info->numaNode = -1;
    fclose(f);
  }
  return flagcxSuccess;
}

static flagcxResult_t mxDeviceMalloc(int dev, void** ptr, size_t bytes) {
  READY();
  MC(mcSetDevice, (dev));
  return mcCheck(f_mcMalloc(ptr, bytes), "mcMalloc");
}
static flagcxResult_t mxDeviceFree(void* ptr) { READY(); return mcCheck(f_mcFree(ptr), "mcFree"); }
/* mcMallocHost, not mcHostAlloc: the latter was not seen anywhere (4.3).
 * It takes flags, as a public C caller passes them (ptr, size, flags); 0 is
 * the default. */
static flagcxResult_t mxHostMalloc(void** ptr, size_t bytes) {
  READY();
  return mcCheck(f_mcMallocHost(ptr, bytes, 0), "mcMallocHost");
}
static flagcxResult_t mxHostFree(void* ptr) { READY(); return mcCheck(f_mcFreeHost(ptr), "mcFreeHost"); }
/* mcHostRegister(void*, size_t, unsigned) as public callers declare it;
 * mcHostRegisterPortable is taken as CUDA's 1 (unverified). */
enum { mcHostRegisterPortable = 0x01 };
static flagcxResult_t mxHostRegister(void* ptr, size_t bytes) {
  READY();
  if (!f_mcHostRegister) return shimFail(flagcxNotSupported, "mcHostRegister not found in libmcruntime");
  return mcCheck(f_mcHostRegister(ptr, bytes, mcHostRegisterPortable), "mcHostRegister");
}
/* ABI v3: mcMemGetInfo (the CUDA mirror of cudaMemGetInfo, docs/vendor-facts.md)
 * on dev, made current here; optional, so a MACA without it loads. */
static flagcxResult_t mxMemGetInfo(int dev, size_t* freeBytes, size_t* totalBytes) {
  READY();
  if (!f_mcMemGetInfo) return shimFail(flagcxNotSupported, "mcMemGetInfo not found in libmcruntime");
  MC(mcSetDevice, (dev));
  return mcCheck(f_mcMemGetInfo(freeBytes, totalBytes), "mcMemGetInfo");
}
static flagcxResult_t mxHostUnregister(void* ptr) {
  READY();
  if (!f_mcHostUnregister) return shimFail(flagcxNotSupported, "mcHostUnregister not found in libmcruntime");
  return mcCheck(f_mcHostUnregister(ptr), "mcHostUnregister");
}

static flagcxResult_t mxMemCopy(void* dst, const void* src, size_t bytes, flagcxMemcpyKind_t kind, flagcxStream_t s) {
  /* flagcx H2D 0, D2H 1, D2D 2 -> mcMemcpyKind 1, 2, 3 (⚠, see METAX_UNVERIFIED) */
  static const int mcKind[3] = {mcMemcpyHostToDevice, mcMemcpyDeviceToHost, mcMemcpyDeviceToDevice};
  READY();
  if ((unsigned)kind > flagcxMemcpyDeviceToDevice)
    return shimFail(flagcxInvalidArgument, "memCopy: direction %d is not 0 (H2D), 1 (D2H) or 2 (D2D)", (int)kind);
  if (!s) return mcCheck(f_mcMemcpy(dst, src, bytes, mcKind[kind]), "mcMemcpy");
  return mcCheck(f_mcMemcpyAsync(dst, src, bytes, mcKind[kind], (mcStream_t)s), "mcMemcpyAsync");
}

static flagcxResult_t mxMemSet(void* dst, int value, size_t bytes, flagcxStream_t s) {
  READY();
  MC(mcMemsetAsync, (dst, value, bytes, (mcStream_t)s));
  return s ? flagcxSuccess : mcCheck(f_mcStreamSynchronize(NULL), "mcStreamSynchronize");
}

static flagcxResult_t mxStreamCreate(int dev, flagcxStream_t* s) {
  READY();
  MC(mcSetDevice, (dev));
  /* Non-blocking: collectives must not serialize with the default stream. */
  return mcCheck(f_mcStreamCreateWithFlags((mcStream_t*)s, mcStreamNonBlocking), "mcStreamCreateWithFlags");
}
static flagcxResult_t mxStreamDestroy(flagcxStream_t s) {
  READY();
  return mcCheck(f_mcStreamDestroy((mcStream_t)s), "mcStreamDestroy");
}
static flagcxResult_t mxStreamSynchronize(flagcxStream_t s) {
  READY();
  return mcCheck(f_mcStreamSynchronize((mcStream_t)s), "mcStreamSynchronize");
}
/* "Not ready" is an answer ("pending"), not a failure; its number is ❌. */
static flagcxResult_t queryResult(mcError_t e, const char* call) {
  const char* text;
  if (e == mcSuccess) return flagcxSuccess;
  text = f_mcGetErrorString(e);
  if (e == MC_ERROR_NOT_READY_GUESS || (text && strcasestr(text, "not ready"))) {
    if (f_mcGetLastError) f_mcGetLastError();
    return flagcxInProgress;
  }
  return mcCheck(e, call);
}
static flagcxResult_t mxStreamQuery(flagcxStream_t s) {
  READY();
  if (!f_mcStreamQuery) return shimFail(flagcxNotSupported, "mcStreamQuery not found in libmcruntime");
  return queryResult(f_mcStreamQuery((mcStream_t)s), "mcStreamQuery");
}
static flagcxResult_t mxStreamWaitEvent(flagcxStream_t s, flagcxEvent_t e) {
  READY(); /* flags 0 (mcEventWaitDefault ⚠ 0); C++ callers omit it */
  return mcCheck(f_mcStreamWaitEvent((mcStream_t)s, (mcEvent_t)e, 0), "mcStreamWaitEvent");
}

static flagcxResult_t mxEventCreate(int dev, flagcxEvent_t* e) {
  READY();
  MC(mcSetDevice, (dev));
  return mcCheck(f_mcEventCreateWithFlags((mcEvent_t*)e, mcEventDefault), "mcEventCreateWithFlags");
}
static flagcxResult_t mxEventDestroy(flagcxEvent_t e) {
  READY();
  return mcCheck(f_mcEventDestroy((mcEvent_t)e), "mcEventDestroy");
}
static flagcxResult_t mxEventRecord(flagcxEvent_t e, flagcxStream_t s) {
  READY();
  return mcCheck(f_mcEventRecord((mcEvent_t)e, (mcStream_t)s), "mcEventRecord");
}
static flagcxResult_t mxEventQuery(flagcxEvent_t e) {
  READY();
  if (!f_mcEventQuery) return shimFail(flagcxNotSupported, "mcEventQuery not found in libmcruntime");
  return queryResult(f_mcEventQuery((mcEvent_t)e), "mcEventQuery");
}
static flagcxResult_t mxEventSynchronize(flagcxEvent_t e) {
  READY();
  return mcCheck(f_mcEventSynchronize((mcEvent_t)e), "mcEventSynchronize");
}
static flagcxResult_t mxEventElapsedTime(float* ms, flagcxEvent_t start, flagcxEvent_t end) {
  READY(); /* (float* ms, start, end): the CUDA order, C [FCX] */
  if (!f_mcEventElapsedTime) return shimFail(flagcxNotSupported, "mcEventElapsedTime not found in libmcruntime");
  return mcCheck(f_mcEventElapsedTime(ms, (mcEvent_t)start, (mcEvent_t)end), "mcEventElapsedTime");
}

/* ---- The exported table ---------------------------------------------------- */
/* getLinkInfo and pointerKind are left NULL: no MACA call for link types
 * (MetaXLink) is known and mcPointerGetAttributes' struct is ❌
 * (docs/vendor-facts.md#metax-maca-runtime). The
 * host then shows links as "not reported" and skips its pointer checks. */
SHIM_EXPORT const flagcxVendorPlugin_v5_t flagcxVendorPlugin_v5 = {
    SHIM_TABLE_HEAD("metax", "MetaX", FLAGCX_PLUGIN_CAP_DEVICE | FLAGCX_PLUGIN_CAP_CCL, libraries),
    .device = {
        .getDeviceCount = mxGetDeviceCount, .setDevice = mxSetDevice, .getDeviceInfo = mxGetDeviceInfo,
        .getLinkInfo = NULL, .deviceMalloc = mxDeviceMalloc, .deviceFree = mxDeviceFree,
        .hostMalloc = mxHostMalloc, .hostFree = mxHostFree, .pointerKind = NULL,
        .memCopy = mxMemCopy, .memSet = mxMemSet, .streamCreate = mxStreamCreate,
        .streamDestroy = mxStreamDestroy, .streamSynchronize = mxStreamSynchronize,
        .streamQuery = mxStreamQuery, .streamWaitEvent = mxStreamWaitEvent, .eventCreate = mxEventCreate,
        .eventDestroy = mxEventDestroy, .eventRecord = mxEventRecord, .eventQuery = mxEventQuery,
        .eventSynchronize = mxEventSynchronize, .eventElapsedTime = mxEventElapsedTime,
        .hostRegister = mxHostRegister, .hostUnregister = mxHostUnregister, /* ABI v2 */
        .memGetInfo = mxMemGetInfo,                                          /* ABI v3 */
    },
    .ccl = SHIM_NCCL_CCL_TABLE,
};
