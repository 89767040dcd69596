/*
 * libflagcx-nvidia.so: the flagcx-go plugin ABI (sdk/include/flagcx_plugin.h)
 * mapped onto the CUDA runtime, NCCL and NVML.
 *
 * Every vendor library is dlopen'ed at init, so this file builds with gcc
 * alone: the few vendor types and prototypes it needs are declared below,
 * from the public headers (sources and evidence: docs/vendor-facts.md#nvidia).
 * Names marked "not surveyed" (docs/vendor-facts.md#nvidia-not-surveyed) are
 * standard CUDA/NVML API this shim treats as OPTIONAL: when dlsym does not
 * find them, the feature they serve degrades (reduced device info, pointer
 * checks off) instead of failing.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flagcx_plugin.h"
#include "shim.h"

/* Conformance mutants: each NVIDIA_BREAK_* is one stream-ordering bug that
 * `flagcx conformance` must catch on the emulated runtime, whose streams
 * run asynchronously (conformance/suite/mutants_test.go builds them; a
 * release build defines none):
 *   NVIDIA_BREAK_SYNC        streamSynchronize returns without waiting;
 *   NVIDIA_BREAK_WAIT_EVENT  streamWaitEvent does nothing;
 *   NVIDIA_BREAK_NULL_STREAM allReduce runs on the legacy stream, not the caller's;
 *   NVIDIA_BREAK_REDUCE_STREAM reduceLocal launches on the legacy stream, not the caller's;
 *   NVIDIA_BREAK_RELAY_STREAM relayReduce launches on the legacy stream, not the caller's. */

/* ---- Vendor declarations (no CUDA SDK needed) ---------------------------- */
typedef int cudaError_t;
typedef void* cudaStream_t;
typedef void* cudaEvent_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorNoDevice = 100, cudaErrorNotReady = 600 };
enum { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum { cudaStreamNonBlocking = 0x01, cudaEventDefault = 0x00, cudaHostAllocPortable = 0x01 };
/* Not surveyed: cudaPointerAttributes as of CUDA 11+, and
 * cudaMemoryType Unregistered 0, Host 1, Device 2, Managed 3. Newer CUDA
 * appends reserved fields (CUDA 13 crashed on a 32-byte struct), so it is
 * always passed inside a larger zeroed buffer. */
struct cudaPointerAttributes { int type; int device; void* devicePointer; void* hostPointer; };
union cudaPointerAttributesBuf { struct cudaPointerAttributes a; char room[1024]; };

/* For the reduce entry (ABI v4): CUDA 12+ library management, kernel
 * launch, and the compute capability that picks the NVRTC target. */
typedef void* cudaLibrary_t;
typedef void* cudaKernel_t;
typedef struct { unsigned x, y, z; } nvDim3; /* dim3, passed by value */
enum { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
/* For relayReduce (ABI v5), not surveyed: cudaDeviceAttr 91, 1 where the
 * device reaches registered host memory at the host's own addresses (else
 * cudaHostGetDevicePointer gives the address it reaches it at). */
enum { cudaDevAttrCanUseHostPointerForRegisteredMem = 91 };

typedef int ncclResult_t; /* ncclSuccess 0 ... ncclInProgress 7, ncclTimeout 8 (2.30+) */
typedef void* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId; /* passed BY VALUE to ncclCommInitRank */
#define NCCL_AVG_MIN_VERSION 21000                   /* ncclAvg appeared in 2.10 */

typedef int nvmlReturn_t; /* NVML_SUCCESS 0 */
typedef void* nvmlDevice_t;
/* Not surveyed: nvmlMemory_t {total, free, used} in bytes. */
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
enum { NVML_P2P_CAPS_INDEX_NVLINK = 2, NVML_P2P_STATUS_OK = 0, NVML_FEATURE_ENABLED = 1 };
#define NVML_NVLINK_MAX_LINKS 18

/* Function pointers, filled by dlsym at init. REQ: init fails without it;
 * OPT: NULL means the feature is unavailable. */
#define CUDART_FUNCS(REQ, OPT)                                                  \
  REQ(cudaError_t, cudaGetDeviceCount, (int*))                                  \
  REQ(cudaError_t, cudaSetDevice, (int))                                        \
  REQ(cudaError_t, cudaMalloc, (void**, size_t))                                \
  REQ(cudaError_t, cudaFree, (void*))                                           \
  REQ(cudaError_t, cudaHostAlloc, (void**, size_t, unsigned))                   \
  REQ(cudaError_t, cudaFreeHost, (void*))                                       \
  REQ(cudaError_t, cudaMemcpy, (void*, const void*, size_t, int))               \
  REQ(cudaError_t, cudaMemcpyAsync, (void*, const void*, size_t, int, cudaStream_t)) \
  REQ(cudaError_t, cudaMemsetAsync, (void*, int, size_t, cudaStream_t))         \
  REQ(cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t*, unsigned))        \
  REQ(cudaError_t, cudaStreamDestroy, (cudaStream_t))                           \
  REQ(cudaError_t, cudaStreamSynchronize, (cudaStream_t))                       \
  REQ(cudaError_t, cudaStreamWaitEvent, (cudaStream_t, cudaEvent_t, unsigned))  \
  REQ(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t*, unsigned))          \
  REQ(cudaError_t, cudaEventDestroy, (cudaEvent_t))                             \
  REQ(cudaError_t, cudaEventRecord, (cudaEvent_t, cudaStream_t))                \
  REQ(cudaError_t, cudaEventSynchronize, (cudaEvent_t))                         \
  REQ(cudaError_t, cudaDeviceGetPCIBusId, (char*, int, int))                    \
  REQ(const char*, cudaGetErrorString, (cudaError_t))                           \
  OPT(cudaError_t, cudaHostRegister, (void*, size_t, unsigned))                 \
  OPT(cudaError_t, cudaHostUnregister, (void*))                                 \
  OPT(cudaError_t, cudaHostGetDevicePointer, (void**, void*, unsigned))         \
  OPT(cudaError_t, cudaMemGetInfo, (size_t*, size_t*))                          \
  OPT(cudaError_t, cudaStreamQuery, (cudaStream_t))                             \
  OPT(cudaError_t, cudaEventQuery, (cudaEvent_t))                               \
  OPT(cudaError_t, cudaEventElapsedTime, (float*, cudaEvent_t, cudaEvent_t))    \
  OPT(cudaError_t, cudaRuntimeGetVersion, (int*))                               \
  OPT(cudaError_t, cudaGetLastError, (void))                                    \
  OPT(cudaError_t, cudaPointerGetAttributes, (union cudaPointerAttributesBuf*, const void*)) \
  OPT(cudaError_t, cudaDeviceGetAttribute, (int*, int, int))                    \
  OPT(cudaError_t, cudaLibraryLoadData, (cudaLibrary_t*, const void*, void*, void**, unsigned, void*, void**, unsigned)) \
  OPT(cudaError_t, cudaLibraryGetKernel, (cudaKernel_t*, cudaLibrary_t, const char*)) \
  OPT(cudaError_t, cudaLaunchKernel, (const void*, nvDim3, nvDim3, void**, size_t, cudaStream_t))

/* NVML is optional as a whole; every symbol is looked up on its own. The
 * last five are not surveyed (standard NVML API). */
#define NVML_FUNCS(REQ, OPT)                                                    \
  OPT(nvmlReturn_t, nvmlInit_v2, (void))                                        \
  OPT(nvmlReturn_t, nvmlInit, (void))                                           \
  OPT(nvmlReturn_t, nvmlDeviceGetHandleByPciBusId_v2, (const char*, nvmlDevice_t*)) \
  OPT(nvmlReturn_t, nvmlDeviceGetP2PStatus, (nvmlDevice_t, nvmlDevice_t, int, int*)) \
  OPT(nvmlReturn_t, nvmlDeviceGetNvLinkState, (nvmlDevice_t, unsigned, int*))   \
  OPT(nvmlReturn_t, nvmlDeviceGetTopologyCommonAncestor, (nvmlDevice_t, nvmlDevice_t, int*)) \
  OPT(const char*, nvmlErrorString, (nvmlReturn_t))                             \
  OPT(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t, char*, unsigned))         \
  OPT(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char*, unsigned))         \
  OPT(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t*))     \
  OPT(nvmlReturn_t, nvmlDeviceGetNumaNodeId, (nvmlDevice_t, unsigned*))         \
  OPT(nvmlReturn_t, nvmlSystemGetDriverVersion, (char*, unsigned))

CUDART_FUNCS(SHIM_DECLARE, SHIM_DECLARE)
NVML_FUNCS(SHIM_DECLARE, SHIM_DECLARE)

/* NVRTC (optional library): compiles reduceLocal's and relayReduce's kernels. */
typedef int nvrtcResult; /* NVRTC_SUCCESS 0 */
typedef void* nvrtcProgram;
#define NVRTC_FUNCS(REQ, OPT)                                                   \
  REQ(nvrtcResult, nvrtcCreateProgram, (nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*)) \
  REQ(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram, int, const char* const*)) \
  REQ(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t*))                  \
  REQ(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char*))                        \
  REQ(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram, size_t*))             \
  REQ(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram, char*))                   \
  REQ(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram*))                        \
  REQ(const char*, nvrtcGetErrorString, (nvrtcResult))                          \
  OPT(nvrtcResult, nvrtcVersion, (int*, int*))
NVRTC_FUNCS(SHIM_DECLARE, SHIM_DECLARE)

/* ---- State, errors, logging ---------------------------------------------- */
enum { LIB_CUDART, LIB_NCCL, LIB_NVML, LIB_NVRTC, NUM_LIBS };
static const flagcxPluginLibrary_v1_t libraries[NUM_LIBS + 1] = {
    {"runtime", "FLAGCX_NVIDIA_CUDART",
     "libcudart.so.13:libcudart.so.12:/usr/local/cuda/lib64/libcudart.so.13:/usr/local/cuda/lib64/libcudart.so.12", 0, 0},
    /* After the loader's search, NCCL's usual homes: where flagcx-go's own
     * libnccl.so.2 (its NCCL API) is first on the library path, the search
     * by name finds that one, which refuseSelf turns down. */
    {"ccl", "FLAGCX_NVIDIA_NCCL",
     "libnccl.so.2:/usr/lib/x86_64-linux-gnu/libnccl.so.2:/usr/lib/aarch64-linux-gnu/libnccl.so.2:"
     "/usr/lib64/libnccl.so.2:/usr/local/cuda/lib64/libnccl.so.2:/usr/local/nccl/lib/libnccl.so.2",
     0, 0},
    {"management", "FLAGCX_NVIDIA_NVML", "libnvidia-ml.so.1", 1, 0},
    /* NVRTC compiles reduceLocal's and relayReduce's kernels (ABI v4, v5)
     * at their first use. */
    {"compiler", "FLAGCX_NVIDIA_NVRTC",
     "libnvrtc.so.13:libnvrtc.so.12:/usr/local/cuda/lib64/libnvrtc.so.13:/usr/local/cuda/lib64/libnvrtc.so.12", 1, 0},
    {NULL, NULL, NULL, 0, 0}};
static const char* const optionalNotes[NUM_LIBS] = {
    [LIB_NVML] = "; device names, memory and links will be reduced or unknown",
    [LIB_NVRTC] = "; reduceLocal and relayReduce are off: heterogeneous AllReduces reduce on the host"};

static int nvmlReady;

static flagcxResult_t cudaCheck(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return flagcxSuccess;
  if (f_cudaGetLastError) f_cudaGetLastError(); /* clear a non-sticky error */
  return shimFail(flagcxUnhandledDeviceError, "%s: %s (cudaError %d)", call, f_cudaGetErrorString(e), e);
}

#define CUDA(fn, args) \
  do { flagcxResult_t r_ = cudaCheck(f_##fn args, #fn); if (r_ != flagcxSuccess) return r_; } while (0)

/* NCCL's half: plugins/common/shim_nccl.h, shared with metax. Our dtype
 * and op numbers are NCCL's, so they pass unchanged once checked. */
#define SHIM_NCCL_PREFIX nccl
#define SHIM_NCCL_NAME "NCCL"
#define SHIM_NCCL_LIB "libnccl"
#define SHIM_NCCL_RESULT_T ncclResult_t
#define SHIM_NCCL_COMM_T ncclComm_t
#define SHIM_NCCL_UNIQUE_ID_T ncclUniqueId
#define SHIM_NCCL_STREAM_T cudaStream_t
#define SHIM_NCCL_SET_DEVICE(dev) CUDA(cudaSetDevice, (dev))
#define SHIM_NCCL_ALLTOALL AlltoAll
#define SHIM_NCCL_CHECK_OP(call, op)                                                                         \
  (op == flagcxAvg && ncclShapeVersion < NCCL_AVG_MIN_VERSION                                                \
       ? shimFail(flagcxNotSupported, "%s: avg needs NCCL >= 2.10, loaded %s", call, shimStatus[LIB_NCCL].version) \
       : flagcxSuccess)
#ifdef NVIDIA_BREAK_NULL_STREAM
#define SHIM_NCCL_ALLREDUCE_STREAM(st) st = NULL
#endif
#include "shim_nccl.h"

/* ---- Init: load libraries ------------------------------------------------- */


static flagcxResult_t loadCudart(void* h) {
  int lib = LIB_CUDART, v = 0;
  CUDART_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (f_cudaRuntimeGetVersion && f_cudaRuntimeGetVersion(&v) == cudaSuccess)
    shimPrintf(shimStatus[lib].version, sizeof shimStatus[lib].version, "%d.%d", v / 1000, v % 1000 / 10); /* 13000 -> 13.0 */
  return flagcxSuccess;
}

static flagcxResult_t loadNccl(void* h) { return ncclShapeLoad(h, LIB_NCCL); }

static flagcxResult_t loadNvml(void* h) {
  int lib = LIB_NVML;
  nvmlReturn_t r;
  NVML_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (!f_nvmlInit_v2) f_nvmlInit_v2 = f_nvmlInit;
  if (!f_nvmlInit_v2 || !f_nvmlDeviceGetHandleByPciBusId_v2) return shimMissing(lib, "nvmlInit_v2", "");
  if ((r = f_nvmlInit_v2()) != 0) {
    shimPrintf(shimStatus[lib].error, sizeof shimStatus[lib].error, "nvmlInit_v2: %s (nvmlReturn %d)",
            f_nvmlErrorString ? f_nvmlErrorString(r) : "error", r);
    return flagcxSystemError;
  }
  if (f_nvmlSystemGetDriverVersion) f_nvmlSystemGetDriverVersion(shimStatus[lib].version, sizeof shimStatus[lib].version);
  nvmlReady = 1;
  return flagcxSuccess;
}

static void fillMasks(flagcxPluginInfo_v1_t* info) {
  info->dataTypeMask = (1u << flagcxNumTypes) - 1; /* NCCL has all ten */
  info->redOpMask = 0xf | (ncclShapeVersion >= NCCL_AVG_MIN_VERSION ? 1u << flagcxAvg : 0);
}

static flagcxResult_t loadNvrtc(void* h) {
  int lib = LIB_NVRTC, major = 0, minor = 0;
  NVRTC_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (f_nvrtcVersion && f_nvrtcVersion(&major, &minor) == 0)
    shimPrintf(shimStatus[lib].version, sizeof shimStatus[lib].version, "%d.%d", major, minor);
  return flagcxSuccess;
}

static flagcxResult_t (*const loaders[NUM_LIBS])(void*) = {loadCudart, loadNccl, loadNvml, loadNvrtc};

static void resetNvml(void) { nvmlReady = 0; }

/* flagcx-go serves NCCL's API itself (build/lib/libnccl.so.2, docs/nccl.md)
 * and exports this marker there. The plugin must reach the real NCCL:
 * through flagcx-go's it would call itself. */
#define FLAGCXGO_NCCL_MARKER "flagcxgoNcclApi"

static const char* refuseSelf(void* h) {
  if (!dlsym(h, FLAGCXGO_NCCL_MARKER)) return NULL;
  return "it is flagcx-go's own libnccl.so.2 (the NCCL API on top of flagcx-go), not NVIDIA's NCCL";
}

/* With flagcx-go's NCCL API in the process, NVIDIA's NCCL exports the same
 * names: deep binding keeps its calls of its own functions inside it. */
static int openFlags(int lib) {
  return lib == LIB_NCCL && dlsym(RTLD_DEFAULT, FLAGCXGO_NCCL_MARKER) ? RTLD_DEEPBIND : 0;
}

const shimPlugin_t shimPlugin = {
    .libraries = libraries,
    .numLibraries = NUM_LIBS,
    .loaders = loaders,
    .refuse = refuseSelf,
    .openFlags = openFlags,
    .install = "install it",
    .missingFmt = "%s lacks %s%s: it is too old or not %s; point %s at another one",
    /* NVML: device info reduced, links unknown */
    .optionalNotes = optionalNotes,
    .initFailed = resetNvml,
    .fillMasks = fillMasks,
};

/* ---- Device runtime ------------------------------------------------------- */
static flagcxResult_t nvGetDeviceCount(int* count) {
  cudaError_t e;
  READY();
  e = f_cudaGetDeviceCount(count);
  if (e == cudaErrorNoDevice) { /* no GPU is an answer, not a failure */
    if (f_cudaGetLastError) f_cudaGetLastError();
    *count = 0;
    return flagcxSuccess;
  }
  return cudaCheck(e, "cudaGetDeviceCount");
}

static flagcxResult_t nvSetDevice(int dev) {
  READY();
  return cudaCheck(f_cudaSetDevice(dev), "cudaSetDevice");
}

static int nvmlHandle(int dev, nvmlDevice_t* d) {
  char bus[32];
  return nvmlReady && f_cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess &&
         f_nvmlDeviceGetHandleByPciBusId_v2(bus, d) == 0;
}

static flagcxResult_t nvGetDeviceInfo(int dev, flagcxDeviceInfo_v1_t* info) {
  nvmlDevice_t d;
  nvmlMemory_t mem;
  unsigned numa;
  char path[96];
  FILE* f;
  char* c;
  READY();
  memset(info, 0, sizeof *info);
  info->numaNode = -1;
  CUDA(cudaDeviceGetPCIBusId, (info->pciBusId, sizeof info->pciBusId, dev));
  for (c = info->pciBusId; *c; c++) *c = tolower((unsigned char)*c); /* sysfs spelling */
  shimPrintf(info->name, sizeof info->name, "NVIDIA GPU %d", dev);
  if (nvmlHandle(dev, &d)) {
    if (f_nvmlDeviceGetName) f_nvmlDeviceGetName(d, info->name, sizeof info->name);
    if (f_nvmlDeviceGetUUID) f_nvmlDeviceGetUUID(d, info->uuid, sizeof info->uuid);
    if (f_nvmlDeviceGetMemoryInfo && f_nvmlDeviceGetMemoryInfo(d, &mem) == 0) info->totalMemory = mem.total;
    if (f_nvmlDeviceGetNumaNodeId && f_nvmlDeviceGetNumaNodeId(d, &numa) == 0) info->numaNode = (int)numa;
  }
  /* NVML often says "not supported" for NUMA; the kernel knows. */
  shimPrintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", info->pciBusId);
  if (info->numaNode < 0 && (f = fopen(path, "r"))) {
    if (fscanf(f, "%d", &info->numaNode) != 1) info->numaNode = -1;
    fclose(f);
  }
  return flagcxSuccess;
}

static flagcxResult_t nvGetLinkInfo(int a, int b, flagcxLinkInfo_v1_t* link) {
  /* nvmlGpuTopologyLevel_t: INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50 */
  static const struct { int type; const char* name; } levels[6] = {
      {flagcxLinkSameSwitch, "PIX"}, {flagcxLinkSameSwitch, "PIX"}, {flagcxLinkSameSwitch, "PXB"},
      {flagcxLinkHostBridge, "PHB"}, {flagcxLinkNumaNode, "NODE"}, {flagcxLinkSystem, "SYS"}};
  nvmlDevice_t da, db;
  int p2p = -1, level = -1, state;
  unsigned l;
  READY();
  memset(link, 0, sizeof *link);
  if (a == b) {
    link->type = flagcxLinkSelf;
    shimPrintf(link->name, sizeof link->name, "X");
    return flagcxSuccess;
  }
  link->type = flagcxLinkUnknown;
  shimPrintf(link->name, sizeof link->name, "unknown");
  if (!nvmlHandle(a, &da) || !nvmlHandle(b, &db)) return flagcxSuccess; /* no NVML: unknown */
  if (f_nvmlDeviceGetP2PStatus && f_nvmlDeviceGetP2PStatus(da, db, NVML_P2P_CAPS_INDEX_NVLINK, &p2p) == 0 &&
      p2p == NVML_P2P_STATUS_OK) {
    link->type = flagcxLinkFabric;
    /* Counts a's active links: right for direct NVLink and for NVSwitch
     * systems (all links reach the switch), as nvidia-smi topo prints NV<n>. */
    for (l = 0; f_nvmlDeviceGetNvLinkState && l < NVML_NVLINK_MAX_LINKS; l++)
      if (f_nvmlDeviceGetNvLinkState(da, l, &state) == 0 && state == NVML_FEATURE_ENABLED) link->fabricLinks++;
    if (link->fabricLinks) shimPrintf(link->name, sizeof link->name, "NV%d", link->fabricLinks);
    else shimPrintf(link->name, sizeof link->name, "NVLink");
  } else if (f_nvmlDeviceGetTopologyCommonAncestor &&
             f_nvmlDeviceGetTopologyCommonAncestor(da, db, &level) == 0 && level >= 0 && level <= 50 &&
             level % 10 == 0) {
    link->type = levels[level / 10].type;
    shimPrintf(link->name, sizeof link->name, "%s", levels[level / 10].name);
  }
  return flagcxSuccess;
}

static flagcxResult_t nvDeviceMalloc(int dev, void** ptr, size_t bytes) {
  READY();
  CUDA(cudaSetDevice, (dev));
  return cudaCheck(f_cudaMalloc(ptr, bytes), "cudaMalloc");
}
static flagcxResult_t nvDeviceFree(void* ptr) { READY(); return cudaCheck(f_cudaFree(ptr), "cudaFree"); }
static flagcxResult_t nvHostMalloc(void** ptr, size_t bytes) {
  READY(); /* portable: pinned for every device, not only the current one */
  return cudaCheck(f_cudaHostAlloc(ptr, bytes, cudaHostAllocPortable), "cudaHostAlloc");
}
static flagcxResult_t nvHostFree(void* ptr) { READY(); return cudaCheck(f_cudaFreeHost(ptr), "cudaFreeHost"); }
/* Portable: pinned for every device, as hostMalloc's memory is. */
enum { cudaHostRegisterPortable = 0x01 };
static flagcxResult_t nvHostRegister(void* ptr, size_t bytes) {
  READY();
  if (!f_cudaHostRegister) return shimFail(flagcxNotSupported, "cudaHostRegister not found in libcudart");
  return cudaCheck(f_cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), "cudaHostRegister");
}
static flagcxResult_t nvHostUnregister(void* ptr) {
  READY();
  if (!f_cudaHostUnregister) return shimFail(flagcxNotSupported, "cudaHostUnregister not found in libcudart");
  return cudaCheck(f_cudaHostUnregister(ptr), "cudaHostUnregister");
}

/* ABI v3: cudaMemGetInfo on dev, made current here (the host never relies
 * on a current device). */
static flagcxResult_t nvMemGetInfo(int dev, size_t* freeBytes, size_t* totalBytes) {
  READY();
  if (!f_cudaMemGetInfo) return shimFail(flagcxNotSupported, "cudaMemGetInfo not found in libcudart");
  CUDA(cudaSetDevice, (dev));
  return cudaCheck(f_cudaMemGetInfo(freeBytes, totalBytes), "cudaMemGetInfo");
}

static flagcxResult_t nvPointerKind(const void* ptr, flagcxMemoryKind_t* kind) {
  static const flagcxMemoryKind_t kinds[4] = {flagcxMemHost, flagcxMemHostPinned, flagcxMemDevice, flagcxMemManaged};
  union cudaPointerAttributesBuf attr;
  cudaError_t e;
  READY();
  if (!f_cudaPointerGetAttributes) return shimFail(flagcxNotSupported, "cudaPointerGetAttributes not found in libcudart");
  memset(&attr, 0, sizeof attr);
  e = f_cudaPointerGetAttributes(&attr, ptr);
  if (e == cudaErrorInvalidValue) { /* CUDA < 11 for memory it does not know */
    if (f_cudaGetLastError) f_cudaGetLastError();
    *kind = flagcxMemHost;
    return flagcxSuccess;
  }
  if (e != cudaSuccess) return cudaCheck(e, "cudaPointerGetAttributes");
  *kind = attr.a.type >= 0 && attr.a.type < 4 ? kinds[attr.a.type] : flagcxMemUnknown;
  return flagcxSuccess;
}

/* The current device is per thread and Go callers move between threads, so
 * an entry that works on "the current device" first makes the buffer's own
 * device current (a memset of device 1's memory from a thread whose current
 * device is 0 fails with cudaErrorInvalidValue). */
static flagcxResult_t useDeviceOf(const void* ptr) {
  union cudaPointerAttributesBuf attr;
  if (!f_cudaPointerGetAttributes) return flagcxSuccess;
  memset(&attr, 0, sizeof attr);
  if (f_cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    if (f_cudaGetLastError) f_cudaGetLastError();
    return flagcxSuccess;
  }
  if (attr.a.type == 2 /* cudaMemoryTypeDevice */ && attr.a.device >= 0) CUDA(cudaSetDevice, (attr.a.device));
  return flagcxSuccess;
}

static flagcxResult_t nvMemCopy(void* dst, const void* src, size_t bytes, flagcxMemcpyKind_t kind, flagcxStream_t s) {
  /* flagcx H2D 0, D2H 1, D2D 2 -> cudaMemcpyKind 1, 2, 3 */
  static const int cudaKind[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
  READY();
  if ((unsigned)kind > flagcxMemcpyDeviceToDevice)
    return shimFail(flagcxInvalidArgument, "memCopy: direction %d is not 0 (H2D), 1 (D2H) or 2 (D2D)", (int)kind);
  if (!s) { /* the legacy stream is the current device's: make it the device's whose memory this is */
    flagcxResult_t r = useDeviceOf(kind == flagcxMemcpyDeviceToHost ? src : dst);
    if (r != flagcxSuccess) return r;
    CUDA(cudaMemcpy, (dst, src, bytes, cudaKind[kind]));
    /* From pageable memory cudaMemcpy may return once the data is staged,
     * before the DMA lands; the ABI promises the copy is done, and work on
     * non-blocking streams does not wait for the legacy stream. */
    return cudaCheck(f_cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
  }
  return cudaCheck(f_cudaMemcpyAsync(dst, src, bytes, cudaKind[kind], (cudaStream_t)s), "cudaMemcpyAsync");
}

static flagcxResult_t nvMemSet(void* dst, int value, size_t bytes, flagcxStream_t s) {
  flagcxResult_t r;
  READY();
  if ((r = useDeviceOf(dst)) != flagcxSuccess) return r;
  CUDA(cudaMemsetAsync, (dst, value, bytes, (cudaStream_t)s));
  return s ? flagcxSuccess : cudaCheck(f_cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
}

static flagcxResult_t nvStreamCreate(int dev, flagcxStream_t* s) {
  READY();
  CUDA(cudaSetDevice, (dev));
  /* Non-blocking: collectives must not serialize with the legacy stream. */
  return cudaCheck(f_cudaStreamCreateWithFlags((cudaStream_t*)s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}
static flagcxResult_t nvStreamDestroy(flagcxStream_t s) {
  READY();
  return cudaCheck(f_cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
}
static flagcxResult_t nvStreamSynchronize(flagcxStream_t s) {
  READY();
#ifdef NVIDIA_BREAK_SYNC
  (void)s;
  return flagcxSuccess;
#endif
  return cudaCheck(f_cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
}
/* cudaErrorNotReady is an answer ("pending"), not a failure. */
static flagcxResult_t queryResult(cudaError_t e, const char* call) {
  if (e == cudaErrorNotReady) {
    if (f_cudaGetLastError) f_cudaGetLastError();
    return flagcxInProgress;
  }
  return cudaCheck(e, call);
}
static flagcxResult_t nvStreamQuery(flagcxStream_t s) {
  READY();
  if (!f_cudaStreamQuery) return shimFail(flagcxNotSupported, "cudaStreamQuery not found in libcudart");
  return queryResult(f_cudaStreamQuery((cudaStream_t)s), "cudaStreamQuery");
}
static flagcxResult_t nvStreamWaitEvent(flagcxStream_t s, flagcxEvent_t e) {
  READY();
#ifdef NVIDIA_BREAK_WAIT_EVENT
  (void)s, (void)e;
  return flagcxSuccess;
#endif
  return cudaCheck(f_cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
}

static flagcxResult_t nvEventCreate(int dev, flagcxEvent_t* e) {
  READY();
  CUDA(cudaSetDevice, (dev));
  return cudaCheck(f_cudaEventCreateWithFlags((cudaEvent_t*)e, cudaEventDefault), "cudaEventCreateWithFlags");
}
static flagcxResult_t nvEventDestroy(flagcxEvent_t e) {
  READY();
  return cudaCheck(f_cudaEventDestroy((cudaEvent_t)e), "cudaEventDestroy");
}
static flagcxResult_t nvEventRecord(flagcxEvent_t e, flagcxStream_t s) {
  READY();
  return cudaCheck(f_cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
}
static flagcxResult_t nvEventQuery(flagcxEvent_t e) {
  READY();
  if (!f_cudaEventQuery) return shimFail(flagcxNotSupported, "cudaEventQuery not found in libcudart");
  return queryResult(f_cudaEventQuery((cudaEvent_t)e), "cudaEventQuery");
}
static flagcxResult_t nvEventSynchronize(flagcxEvent_t e) {
  READY();
  return cudaCheck(f_cudaEventSynchronize((cudaEvent_t)e), "cudaEventSynchronize");
}
static flagcxResult_t nvEventElapsedTime(float* ms, flagcxEvent_t start, flagcxEvent_t end) {
  READY();
  if (!f_cudaEventElapsedTime) return shimFail(flagcxNotSupported, "cudaEventElapsedTime not found in libcudart");
  return cudaCheck(f_cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end), "cudaEventElapsedTime");
}

#include "reduce_kernels.h"

/* ---- Local reduction (ABI v4: reduceLocal) ---------------------------------------------- */
/* The kernels (reduce_kernels.h: reduceLocal's and relayReduce's, one
 * program) are compiled at the first call of either entry with NVRTC (the
 * optional "compiler" library, loaded at init) to a cubin for the device's
 * architecture, and loaded with cudaLibraryLoadData, which makes them
 * available in every context. Without NVRTC or CUDA 12's library API both
 * entries answer flagcxNotSupported, and the host reduces instead. */

typedef struct {
  void* dst;
  const void* src[FLAGCX_REDUCE_MAX_SRCS];
  unsigned long long count;
  int nsrcs, op, div;
} nvReduceArgs; /* the kernels' Args, by value */

/* The kernels of one architecture, indexed by flagcxDataType_t. */
typedef struct {
  cudaKernel_t reduce[flagcxNumTypes]; /* reduceLocal's flagcx_reduce_<type> */
  cudaKernel_t relay[flagcxNumTypes];  /* relayReduce's flagcx_relay_<type> */
} nvKernelSet;

#define NV_MAX_ARCHS 4
static struct {
  int arch; /* 10 * major + minor; 0: slot free */
  nvKernelSet kernels;
} nvReduceLibs[NV_MAX_ARCHS];
static pthread_mutex_t nvReduceLock = PTHREAD_MUTEX_INITIALIZER;
static char nvReduceUnavailable[512]; /* why not, once it is known */

/* nvReduceFail records why the kernels are unavailable (every later call
 * of either entry answers the same); nvKernels fails the call with it. */
static flagcxResult_t nvReduceFail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static flagcxResult_t nvReduceFail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(nvReduceUnavailable, sizeof nvReduceUnavailable, fmt, ap);
  va_end(ap);
  return flagcxNotSupported;
}

static flagcxResult_t nvLoadNvrtc(void) {
  if (!f_cudaLibraryLoadData || !f_cudaLibraryGetKernel || !f_cudaLaunchKernel || !f_cudaDeviceGetAttribute)
    return nvReduceFail("libcudart lacks cudaLibraryLoadData/cudaLaunchKernel (CUDA 12 or newer has them)");
  if (!shimStatus[LIB_NVRTC].loaded)
    return nvReduceFail("NVRTC did not load (%s)", shimStatus[LIB_NVRTC].error);
  return flagcxSuccess;
}

/* nvCompile builds the kernels for arch into slot. */
static flagcxResult_t nvCompile(int arch, int slot) {
  nvrtcProgram prog;
  nvrtcResult r;
  char opt[64], *cubin = NULL, *log = NULL;
  const char* opts[2] = {opt, "--fmad=false"};
  size_t n = 0;
  cudaLibrary_t lib;
  cudaError_t e;
  int t;
  shimPrintf(opt, sizeof opt, "--gpu-architecture=sm_%d", arch);
  if ((r = f_nvrtcCreateProgram(&prog, nvReduceSource, "flagcx_reduce.cu", 0, NULL, NULL)) != 0)
    return nvReduceFail("nvrtcCreateProgram: %s", f_nvrtcGetErrorString(r));
  r = f_nvrtcCompileProgram(prog, 2, opts);
  if (r != 0) {
    if (f_nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 && (log = malloc(n)) && f_nvrtcGetProgramLog(prog, log) == 0)
      shimLog(flagcxLogWarn, "nvidia: the reduce and relay kernels do not compile for %s: %s", opt, log);
    free(log);
    f_nvrtcDestroyProgram(&prog);
    return nvReduceFail("nvrtcCompileProgram for %s: %s", opt, f_nvrtcGetErrorString(r));
  }
  if ((r = f_nvrtcGetCUBINSize(prog, &n)) != 0 || !(cubin = malloc(n)) || (r = f_nvrtcGetCUBIN(prog, cubin)) != 0) {
    free(cubin);
    f_nvrtcDestroyProgram(&prog);
    return nvReduceFail("nvrtcGetCUBIN: %s", r ? f_nvrtcGetErrorString(r) : "out of memory");
  }
  f_nvrtcDestroyProgram(&prog);
  e = f_cudaLibraryLoadData(&lib, cubin, NULL, NULL, 0, NULL, NULL, 0);
  free(cubin);
  if (e != cudaSuccess) return nvReduceFail("cudaLibraryLoadData: %s", f_cudaGetErrorString(e));
  for (t = 0; t < flagcxNumTypes; t++) {
    if ((e = f_cudaLibraryGetKernel(&nvReduceLibs[slot].kernels.reduce[t], lib, nvReduceKernelNames[t])) != cudaSuccess)
      return nvReduceFail("cudaLibraryGetKernel %s: %s", nvReduceKernelNames[t], f_cudaGetErrorString(e));
    if ((e = f_cudaLibraryGetKernel(&nvReduceLibs[slot].kernels.relay[t], lib, nvRelayKernelNames[t])) != cudaSuccess)
      return nvReduceFail("cudaLibraryGetKernel %s: %s", nvRelayKernelNames[t], f_cudaGetErrorString(e));
  }
  nvReduceLibs[slot].arch = arch; /* the library stays loaded for the process */
  return flagcxSuccess;
}

/* nvDevKernels[dev] is dev's kernel set once nvKernels found it (devices
 * from NV_MAX_DEVS on take the lock every time). */
#define NV_MAX_DEVS 64
static const nvKernelSet* nvDevKernels[NV_MAX_DEVS];

/* nvKernels finds (or builds) dev's kernels for entry (reduceLocal or
 * relayReduce, which its messages name); the caller made dev current. */
static flagcxResult_t nvKernels(int dev, const char* entry, const nvKernelSet** out) {
  int major = 0, minor = 0, arch, i;
  flagcxResult_t r = flagcxSuccess;
  /* Every call after a device's first takes no lock and asks the runtime
   * nothing: a relay's enqueue is on a 700-byte call's latency path. */
  if (dev >= 0 && dev < NV_MAX_DEVS && (*out = __atomic_load_n(&nvDevKernels[dev], __ATOMIC_ACQUIRE)) != NULL)
    return flagcxSuccess;
  pthread_mutex_lock(&nvReduceLock);
  if (nvReduceUnavailable[0]) {
    pthread_mutex_unlock(&nvReduceLock);
    return shimFail(flagcxNotSupported, "%s: %s", entry, nvReduceUnavailable);
  }
  if ((r = nvLoadNvrtc()) != flagcxSuccess) goto out;
  if ((r = cudaCheck(f_cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute")) ||
      (r = cudaCheck(f_cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute")))
    goto out;
  arch = 10 * major + minor;
  for (i = 0; i < NV_MAX_ARCHS && nvReduceLibs[i].arch && nvReduceLibs[i].arch != arch; i++) {}
  if (i == NV_MAX_ARCHS) {
    r = shimFail(flagcxNotSupported, "%s: devices of more than %d architectures in one process", entry, NV_MAX_ARCHS);
    goto out;
  }
  if (!nvReduceLibs[i].arch && (r = nvCompile(arch, i)) != flagcxSuccess) goto out;
  *out = &nvReduceLibs[i].kernels;
  if (dev >= 0 && dev < NV_MAX_DEVS) __atomic_store_n(&nvDevKernels[dev], *out, __ATOMIC_RELEASE);
out:
  if (r == flagcxNotSupported && nvReduceUnavailable[0]) r = shimFail(r, "%s: %s", entry, nvReduceUnavailable);
  pthread_mutex_unlock(&nvReduceLock);
  return r;
}

static flagcxResult_t nvReduceLocal(int dev, void* dst, const void* const* srcs, int nsrcs, size_t count,
                               flagcxDataType_t t, flagcxRedOp_t op, int avgDivisor, flagcxStream_t st) {
  nvReduceArgs a;
  void* args[1] = {&a};
  const nvKernelSet* k = NULL;
  unsigned long long blocks;
  flagcxResult_t r;
  int i;
  READY();
  if ((unsigned)t >= flagcxNumTypes || (unsigned)op >= flagcxNumRedOps || nsrcs < 1 || nsrcs > FLAGCX_REDUCE_MAX_SRCS ||
      avgDivisor < 1 || !srcs || !dst)
    return shimFail(flagcxInvalidArgument, "reduceLocal: type %d, op %d, %d sources (1 to %d), avg divisor %d", t, op, nsrcs,
                    FLAGCX_REDUCE_MAX_SRCS, avgDivisor);
  CUDA(cudaSetDevice, (dev));
  if ((r = nvKernels(dev, "reduceLocal", &k)) != flagcxSuccess) return r;
  if (count == 0) return flagcxSuccess; /* the host's check that the kernels are there */
  memset(&a, 0, sizeof a);
  a.dst = dst;
  for (i = 0; i < nsrcs; i++) a.src[i] = srcs[i];
  a.count = count;
  a.nsrcs = nsrcs;
  a.op = op;
  a.div = avgDivisor;
  blocks = (count + 255) / 256;
  if (blocks > 4096) blocks = 4096; /* grid-stride: enough to fill any GPU */
#ifdef NVIDIA_BREAK_REDUCE_STREAM
  st = NULL;
#endif
  return cudaCheck(f_cudaLaunchKernel((const void*)k->reduce[t], (nvDim3){(unsigned)blocks, 1, 1}, (nvDim3){256, 1, 1}, args, 0,
                                      (cudaStream_t)st),
                   "cudaLaunchKernel");
}

/* ---- Relay through host memory (ABI v5: relayReduce) --------------------------------- */
/* One launch of flagcx_relay_<type> (reduce_kernels.h, compiled with the
 * reduce kernels by nvKernels) as one block of NV_RELAY_THREADS threads:
 * it copies src to window, stores value to *landed, spins on *go and folds
 * the sources into dst, all in the stream's order. The host pointers
 * (window, landed, go, host sources) must be addresses the device reaches:
 * the host's own where the device says so (attribute 91, asked once per
 * device), else cudaHostGetDevicePointer's. */

/* Attribute 91 per device: 0 not asked yet, 1 usable, 2 not. */
static int nvHostPointers[NV_MAX_DEVS];

static int nvHostPointersUsable(int dev) {
  int v = 0, known = dev >= 0 && dev < NV_MAX_DEVS ? __atomic_load_n(&nvHostPointers[dev], __ATOMIC_RELAXED) : 0;
  if (known) return known == 1;
  if (f_cudaDeviceGetAttribute(&v, cudaDevAttrCanUseHostPointerForRegisteredMem, dev) != cudaSuccess) {
    if (f_cudaGetLastError) f_cudaGetLastError();
    v = 0; /* unknown: translate, which is right either way */
  }
  if (dev >= 0 && dev < NV_MAX_DEVS) __atomic_store_n(&nvHostPointers[dev], v ? 1 : 2, __ATOMIC_RELAXED);
  return v != 0;
}

/* nvReachable sets *p to the address the device reaches it at: unchanged
 * where direct, for NULL, and (mayBeDevice) for device or managed memory;
 * else translated by cudaHostGetDevicePointer. what names it in errors. */
static flagcxResult_t nvReachable(int direct, const void** p, int mayBeDevice, const char* what) {
  flagcxMemoryKind_t kind = flagcxMemHost;
  void* d = NULL;
  cudaError_t e;
  flagcxResult_t r;
  if (direct || *p == NULL) return flagcxSuccess;
  if (mayBeDevice) {
    if ((r = nvPointerKind(*p, &kind)) != flagcxSuccess) return r;
    if (kind == flagcxMemDevice || kind == flagcxMemManaged) return flagcxSuccess;
  }
  if (!f_cudaHostGetDevicePointer)
    return shimFail(flagcxNotSupported, "relayReduce: the device cannot use host pointers of registered memory "
                                        "(cudaDevAttrCanUseHostPointerForRegisteredMem 0) and libcudart lacks cudaHostGetDevicePointer");
  if ((e = f_cudaHostGetDevicePointer(&d, (void*)*p, 0)) != cudaSuccess) {
    if (f_cudaGetLastError) f_cudaGetLastError();
    return shimFail(flagcxUnhandledDeviceError, "relayReduce: cudaHostGetDevicePointer of %s %p: %s (cudaError %d): is it registered with hostRegister?",
                    what, *p, f_cudaGetErrorString(e), e);
  }
  *p = d;
  return flagcxSuccess;
}

/* nvRelayPointers checks a relay's pointers (the empty relay needs none)
 * and makes the host ones reachable from dev. */
static flagcxResult_t nvRelayPointers(int dev, flagcxRelay_v5_t* a) {
  static const char* const srcNames[FLAGCX_REDUCE_MAX_SRCS] = {"source 0", "source 1", "source 2", "source 3",
                                                                "source 4", "source 5", "source 6", "source 7"};
  const void *window = a->window, *landed = a->landed, *go = a->go;
  flagcxResult_t r;
  int i, direct;
  if (!a->landed || !a->go || a->value == 0 || a->value >= FLAGCX_RELAY_DONE || (((uintptr_t)a->landed | (uintptr_t)a->go) & 7))
    return shimFail(flagcxInvalidArgument, "relayReduce: landed %p, go %p, value %#llx: two 8-byte aligned words and a value in 1..2^62-1 are needed",
                    (void*)a->landed, (const void*)a->go, (unsigned long long)a->value);
  if (a->bytes && (!a->src || !a->window))
    return shimFail(flagcxInvalidArgument, "relayReduce: %llu bytes from src %p to window %p: both are needed",
                    (unsigned long long)a->bytes, a->src, a->window);
  for (i = 0; a->count && i < a->nsrcs; i++)
    if (!a->srcs[i]) return shimFail(flagcxInvalidArgument, "relayReduce: %s of %d is NULL", srcNames[i], a->nsrcs);
  if (a->count && !a->dst) return shimFail(flagcxInvalidArgument, "relayReduce: dst is NULL with count %llu", (unsigned long long)a->count);
  for (i = a->nsrcs; i < FLAGCX_REDUCE_MAX_SRCS; i++) a->srcs[i] = NULL; /* the kernel reads only nsrcs */
  direct = nvHostPointersUsable(dev);
  if ((r = nvReachable(direct, &window, 0, "window")) || (r = nvReachable(direct, &landed, 0, "landed")) ||
      (r = nvReachable(direct, &go, 0, "go")))
    return r;
  a->window = (void*)window, a->landed = (uint64_t*)landed, a->go = (const uint64_t*)go;
  for (i = 0; i < a->nsrcs; i++)
    if ((r = nvReachable(direct, &a->srcs[i], 1, srcNames[i])) != flagcxSuccess) return r;
  return flagcxSuccess;
}

static flagcxResult_t nvRelayReduce(int dev, const flagcxRelay_v5_t* relay, flagcxStream_t st) {
  flagcxRelay_v5_t a;
  void* args[1] = {&a};
  const nvKernelSet* k = NULL;
  flagcxResult_t r;
  READY();
  if (!relay) return shimFail(flagcxInvalidArgument, "relayReduce: relay is NULL");
  a = *relay; /* the kernel's argument, by value: the host may reuse *relay at once */
  if ((unsigned)a.dtype >= flagcxNumTypes || (unsigned)a.op >= flagcxNumRedOps || a.nsrcs < 1 ||
      a.nsrcs > FLAGCX_REDUCE_MAX_SRCS || a.avgDivisor < 1)
    return shimFail(flagcxInvalidArgument, "relayReduce: type %d, op %d, %d sources (1 to %d), avg divisor %d", (int)a.dtype,
                    (int)a.op, (int)a.nsrcs, FLAGCX_REDUCE_MAX_SRCS, (int)a.avgDivisor);
  CUDA(cudaSetDevice, (dev));
  if ((r = nvKernels(dev, "relayReduce", &k)) != flagcxSuccess) return r;
  if (a.count == 0 && a.bytes == 0) return flagcxSuccess; /* the host's check that the kernels are there */
  if ((r = nvRelayPointers(dev, &a)) != flagcxSuccess) return r;
#ifdef NVIDIA_BREAK_RELAY_STREAM
  st = NULL;
#endif
  return cudaCheck(f_cudaLaunchKernel((const void*)k->relay[a.dtype], (nvDim3){1, 1, 1}, (nvDim3){NV_RELAY_THREADS, 1, 1}, args, 0,
                                      (cudaStream_t)st),
                   "cudaLaunchKernel");
}

/* ---- The exported table ---------------------------------------------------- */
SHIM_EXPORT const flagcxVendorPlugin_v5_t flagcxVendorPlugin_v5 = {
    SHIM_TABLE_HEAD("nvidia", "NVIDIA", FLAGCX_PLUGIN_CAP_DEVICE | FLAGCX_PLUGIN_CAP_CCL, libraries),
    .device = {
        .getDeviceCount = nvGetDeviceCount, .setDevice = nvSetDevice, .getDeviceInfo = nvGetDeviceInfo,
        .getLinkInfo = nvGetLinkInfo, .deviceMalloc = nvDeviceMalloc, .deviceFree = nvDeviceFree,
        .hostMalloc = nvHostMalloc, .hostFree = nvHostFree, .pointerKind = nvPointerKind,
        .memCopy = nvMemCopy, .memSet = nvMemSet, .streamCreate = nvStreamCreate,
        .streamDestroy = nvStreamDestroy, .streamSynchronize = nvStreamSynchronize,
        .streamQuery = nvStreamQuery, .streamWaitEvent = nvStreamWaitEvent, .eventCreate = nvEventCreate,
        .eventDestroy = nvEventDestroy, .eventRecord = nvEventRecord, .eventQuery = nvEventQuery,
        .eventSynchronize = nvEventSynchronize, .eventElapsedTime = nvEventElapsedTime,
        .hostRegister = nvHostRegister, .hostUnregister = nvHostUnregister, /* ABI v2 */
        .memGetInfo = nvMemGetInfo,                                          /* ABI v3 */
        .reduceLocal = nvReduceLocal,                                        /* ABI v4 */
        .relayReduce = nvRelayReduce,                                        /* ABI v5 */
    },
    .ccl = SHIM_NCCL_CCL_TABLE,
};
