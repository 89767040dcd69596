/*
 * flagcx_plugin.h: the vendor-plugin contract of flagcx-go, ABI version 5.
 *
 * A vendor plugin is a shared object named libflagcx-<name>.so that exports
 * ONE data symbol,
 *
 *     const flagcxVendorPlugin_v5_t flagcxVendorPlugin_v5 = { ... };
 *
 * holding its name, its capabilities and two groups of function pointers:
 * the device runtime (devices, memory, copies, streams, events) and the
 * collective library (communicators, collectives, send/recv, groups).
 *
 * Rules that hold for every entry (sdk/README.md explains them at length):
 *  - Every entry but getLastError/getErrorString returns a flagcxResult_t,
 *    numbered as ncclResult_t. A failing entry also records a message for
 *    getLastError() on the calling thread, quoting the vendor's own error
 *    string ("ncclAllReduce: invalid argument (NCCL 2.28.3: ...)").
 *  - An entry marked OPTIONAL may be NULL: the host then treats that
 *    operation as not supported (and falls back where it can). Any entry may
 *    also return flagcxNotSupported at run time (for a data type, an op or a
 *    vendor library too old); the host reports that as "not supported",
 *    never as a wrong result.
 *  - The plugin never keeps a pointer the host passed in (info structs,
 *    count arrays, unique-id bytes) after the entry returns. The host never
 *    frees memory the plugin returns (strings); buffers from deviceMalloc /
 *    hostMalloc belong to the host until it frees them with the matching
 *    entry.
 *  - Entries take the device index where they create device state (memory,
 *    streams, events, communicators), because the host (Go) moves work
 *    between OS threads and a "current device" per thread would be lost.
 *  - The host calls init once, before any other entry except getLastError,
 *    and never concurrently with another entry. Other entries may be called
 *    from several threads at once, with the vendor's own limits (one thread
 *    at a time per communicator; groupStart..groupEnd on one thread).
 *
 * Vendor teams build against this header alone (no flagcx-go sources):
 *     cc -shared -fPIC -O2 -I<flagcx-go>/sdk/include -o libflagcx-acme.so acme.c
 * and load their runtime with dlopen at init, so the plugin builds anywhere.
 *
 * Versioning: a new field or entry makes a new table version. v2 added
 * host memory registration (hostRegister, hostUnregister), with which the
 * host stages heterogeneous traffic in its shared memory without a copy.
 * v3 added memGetInfo (device memory free/total), with which the
 * conformance leak check sees device-memory leaks on real devices. v4
 * added reduceLocal (an element-wise reduction of buffers of one device, on
 * a stream),
 * with which the clusters of a heterogeneous communicator reduce on their
 * devices and the host only relays their data. v5 added relayReduce (one
 * enqueue that puts a device buffer in host memory, waits on the device
 * for the host's go and folds host-memory inputs into device memory), with
 * which a small heterogeneous reduction takes one launch and no host wait
 * on a device copy.
 * Hosts probe the newest symbol they know first (flagcxVendorPlugin_v5,
 * then _v4, _v3, _v2, _v1) and adapt older tables, their newer entries
 * NULL: a v1 plugin keeps loading and its traffic takes the staged copy
 * path; a v2 plugin keeps loading and its memory info is "not supported";
 * a v3 plugin keeps loading and the host reduces its clusters' data; a v4
 * plugin keeps loading and its small calls copy through the host. A plugin
 * may export several versions at once to serve older hosts (sdk/README.md
 * shows how).
 */
#ifndef FLAGCX_PLUGIN_H_
#define FLAGCX_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLAGCX_PLUGIN_ABI_VERSION 5
#define FLAGCX_PLUGIN_SYMBOL_V1 "flagcxVendorPlugin_v1"
#define FLAGCX_PLUGIN_SYMBOL_V2 "flagcxVendorPlugin_v2"
#define FLAGCX_PLUGIN_SYMBOL_V3 "flagcxVendorPlugin_v3"
#define FLAGCX_PLUGIN_SYMBOL_V4 "flagcxVendorPlugin_v4"
#define FLAGCX_PLUGIN_SYMBOL_V5 "flagcxVendorPlugin_v5"

/* The most source buffers one reduceLocal or relayReduce call (ABI v4, v5)
 * folds. */
#define FLAGCX_REDUCE_MAX_SRCS 8

/* The largest vendor unique id the host exchanges between ranks (bytes). */
#define FLAGCX_UNIQUE_ID_MAX_BYTES 4096

/* ---------------------------------------------------------------------- */
/* Enumerations. Result, data type and op use NCCL's (and FlagCX's) numbers */
/* so they cross unchanged; a plugin translates them for other vendors.      */

typedef enum {
  flagcxSuccess = 0,
  flagcxUnhandledDeviceError = 1, /* device runtime failed (cudaError...) */
  flagcxSystemError = 2,          /* OS: dlopen, malloc, sockets */
  flagcxInternalError = 3,        /* bug in the plugin or vendor library */
  flagcxInvalidArgument = 4,      /* bad pointer, count, dtype, rank... */
  flagcxInvalidUsage = 5,         /* wrong call order, not initialized */
  flagcxRemoteError = 6,          /* a peer failed */
  flagcxInProgress = 7,           /* not finished yet (queries, async init) */
  flagcxUnhandledCclError = 8,    /* vendor CCL failed with a code we do not map */
  flagcxNotSupported = 9,         /* this operation/type/op is not supported */
  flagcxNumResults = 10
} flagcxResult_t;

typedef enum {
  flagcxInt8 = 0, flagcxChar = 0,
  flagcxUint8 = 1,
  flagcxInt32 = 2, flagcxInt = 2,
  flagcxUint32 = 3,
  flagcxInt64 = 4,
  flagcxUint64 = 5,
  flagcxFloat16 = 6, flagcxHalf = 6,
  flagcxFloat32 = 7, flagcxFloat = 7,
  flagcxFloat64 = 8, flagcxDouble = 8,
  flagcxBfloat16 = 9,
  flagcxNumTypes = 10
} flagcxDataType_t;

typedef enum {
  flagcxSum = 0,
  flagcxProd = 1,
  flagcxMax = 2,
  flagcxMin = 3,
  flagcxAvg = 4,
  flagcxNumRedOps = 5
} flagcxRedOp_t;

/* FlagCX's direction numbering (NOT CUDA's: a plugin maps it). */
typedef enum {
  flagcxMemcpyHostToDevice = 0,
  flagcxMemcpyDeviceToHost = 1,
  flagcxMemcpyDeviceToDevice = 2
} flagcxMemcpyKind_t;

/* What pointerKind says about an address. */
typedef enum {
  flagcxMemUnknown = 0,    /* the runtime cannot tell */
  flagcxMemHost = 1,       /* ordinary (pageable) host memory */
  flagcxMemHostPinned = 2, /* page-locked host memory known to the runtime */
  flagcxMemDevice = 3,     /* device memory */
  flagcxMemManaged = 4     /* unified/managed memory */
} flagcxMemoryKind_t;

/* How two local devices reach each other, best first. */
typedef enum {
  flagcxLinkUnknown = 0,
  flagcxLinkSelf = 1,       /* the same device */
  flagcxLinkFabric = 2,     /* vendor fabric: NVLink, XPU Link, MLU-Link... */
  flagcxLinkSameSwitch = 3, /* PCIe switch(es), not through the host bridge */
  flagcxLinkHostBridge = 4, /* through one CPU's host bridge */
  flagcxLinkNumaNode = 5,   /* across host bridges of one NUMA node */
  flagcxLinkSystem = 6      /* across NUMA nodes (SMP interconnect) */
} flagcxLinkType_t;

/* Levels of the log callback, as FlagCX's FLAGCX_DEBUG (and NCCL_DEBUG). */
typedef enum {
  flagcxLogNone = 0,
  flagcxLogVersion = 1,
  flagcxLogWarn = 2,
  flagcxLogInfo = 3,
  flagcxLogAbort = 4,
  flagcxLogTrace = 5
} flagcxLogLevel_t;

/* Static capability bits (flagcxVendorPlugin_v1_t.caps). */
#define FLAGCX_PLUGIN_CAP_DEVICE (1ull << 0) /* the device group is filled */
#define FLAGCX_PLUGIN_CAP_CCL (1ull << 1)    /* the ccl group is filled */

/* Opaque handles: the vendor's own stream / event / communicator pointers. */
typedef struct flagcxStreamOpaque* flagcxStream_t;
typedef struct flagcxEventOpaque* flagcxEvent_t;
typedef struct flagcxVendorCommOpaque* flagcxVendorComm_t;

/*
 * Log callback the host passes to init. Call it only from inside an entry,
 * on the thread that called the entry (never from a vendor-owned thread).
 * msg is one line without a trailing newline; the host copies it.
 */
typedef void (*flagcxLogFn_t)(void* logCtx, int level, const char* msg);

/* ---------------------------------------------------------------------- */
/* Data structures (versioned with the table: v2 may grow them).          */

/* One vendor library the plugin loads at init (static, in the table). */
typedef struct {
  const char* role;    /* "runtime", "ccl", "management" */
  const char* envVar;  /* a path in it overrides the search: "FLAGCX_NVIDIA_NCCL" */
  const char* sonames; /* candidates tried in order, ':'-separated */
  int32_t optional;    /* 1: the plugin works (reduced) without it */
  int32_t reserved;
} flagcxPluginLibrary_v1_t;

#define FLAGCX_PLUGIN_MAX_LIBRARIES 4

/* What init found for one library (same order as the table's list). */
typedef struct {
  int32_t loaded;     /* 1: dlopen succeeded and the required symbols exist */
  int32_t emulated;   /* 1: it exports flagcxVendorsimEmulated (a vendorsim build) */
  char path[512];     /* file it was loaded from, or what was tried */
  char version[64];   /* vendor's version, e.g. "2.28.3"; "" when unknown */
  char error[512];    /* why it did not load (loaded == 0) */
} flagcxLibraryStatus_v1_t;

/* Filled by init (the host zeroes it first). */
typedef struct {
  int32_t emulated;       /* 1: any loaded vendor library is an emulator */
  uint32_t dataTypeMask;  /* bit (1u << t): the CCL accepts flagcxDataType_t t */
  uint32_t redOpMask;     /* bit (1u << o): the CCL accepts flagcxRedOp_t o */
  int32_t numLibraries;   /* entries used in libraries[] */
  flagcxLibraryStatus_v1_t libraries[FLAGCX_PLUGIN_MAX_LIBRARIES];
} flagcxPluginInfo_v1_t;

typedef struct {
  uint64_t totalMemory; /* bytes; 0 when unknown */
  int32_t numaNode;     /* -1 when unknown */
  int32_t reserved;
  char name[128];       /* "NVIDIA H200" */
  char uuid[96];        /* vendor's text form, "GPU-..."; "" when unknown */
  char pciBusId[32];    /* "0000:3b:00.0" (domain:bus:device.function) */
} flagcxDeviceInfo_v1_t;

typedef struct {
  int32_t type;        /* flagcxLinkType_t */
  int32_t fabricLinks; /* number of fabric links (e.g. NVLinks) when type is Fabric, else 0 */
  char name[32];       /* short vendor label: "NV18", "PIX", "PHB", "SYS" */
} flagcxLinkInfo_v1_t;

/* ---------------------------------------------------------------------- */
/* Device runtime. Required when caps has FLAGCX_PLUGIN_CAP_DEVICE, except   */
/* entries marked OPTIONAL. A NULL stream means "synchronous": the entry     */
/* returns after the work is done.                                          */
typedef struct {
  flagcxResult_t (*getDeviceCount)(int* count); /* 0 devices is success */
  /* Sets the calling thread's current device (vendor semantics). Entries
   * below take the device explicitly, so the host rarely needs this. */
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDeviceInfo)(int dev, flagcxDeviceInfo_v1_t* info);
  /* OPTIONAL. How devA reaches devB (type Unknown when it cannot tell). */
  flagcxResult_t (*getLinkInfo)(int devA, int devB, flagcxLinkInfo_v1_t* link);

  flagcxResult_t (*deviceMalloc)(int dev, void** ptr, size_t bytes);
  flagcxResult_t (*deviceFree)(void* ptr); /* may synchronize the device */
  /* Page-locked host memory usable for async copies by every device. */
  flagcxResult_t (*hostMalloc)(void** ptr, size_t bytes);
  flagcxResult_t (*hostFree)(void* ptr);
  /* OPTIONAL. Lets the host refuse host memory to device collectives and
   * device memory to the host backend. Never dereferences ptr. */
  flagcxResult_t (*pointerKind)(const void* ptr, flagcxMemoryKind_t* kind);

  /* Copy bytes. With a stream: enqueue and return; host memory must be
   * pinned (hostMalloc) and stay valid until the stream passes the copy.
   * With NULL: blocks until the copy is done; any host memory works. */
  flagcxResult_t (*memCopy)(void* dst, const void* src, size_t bytes,
                            flagcxMemcpyKind_t kind, flagcxStream_t stream);
  /* Sets bytes of device memory to (unsigned char)value; stream as memCopy. */
  flagcxResult_t (*memSet)(void* dst, int value, size_t bytes, flagcxStream_t stream);

  flagcxResult_t (*streamCreate)(int dev, flagcxStream_t* stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream); /* blocks */
  /* OPTIONAL. flagcxSuccess: all work done; flagcxInProgress: pending. */
  flagcxResult_t (*streamQuery)(flagcxStream_t stream);
  /* Work enqueued on stream after this waits for event's last record. */
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);

  /* Events are created with timing enabled where the runtime can time. */
  flagcxResult_t (*eventCreate)(int dev, flagcxEvent_t* event);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  /* OPTIONAL. flagcxSuccess: reached; flagcxInProgress: not yet. */
  flagcxResult_t (*eventQuery)(flagcxEvent_t event);
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event); /* blocks */
  /* OPTIONAL (host falls back to host timers). Milliseconds from start to
   * end, both recorded and reached. */
  flagcxResult_t (*eventElapsedTime)(float* ms, flagcxEvent_t start, flagcxEvent_t end);
} flagcxDeviceRuntime_v1_t;

/* ---------------------------------------------------------------------- */
/* Collective library. Required when caps has FLAGCX_PLUGIN_CAP_CCL, except  */
/* entries marked OPTIONAL. Counts are in elements; buffers are device       */
/* memory the caller keeps valid until the stream passes the operation.     */
/* Collectives enqueue on the stream and return; they do not wait for peers */
/* (beyond what the vendor CCL itself does). Data types and ops outside the */
/* info masks return flagcxNotSupported.                                    */
typedef struct {
  /* Bytes of this vendor's unique id (<= FLAGCX_UNIQUE_ID_MAX_BYTES). */
  flagcxResult_t (*getUniqueIdBytes)(size_t* bytes);
  /* Writes getUniqueIdBytes bytes to id (caller-owned). The host sends
   * them to every rank unchanged. */
  flagcxResult_t (*getUniqueId)(void* id);
  /* Joins rank (0..nranks-1) on device dev. Blocks until every rank joined.
   * id holds getUniqueIdBytes bytes; the plugin copies it. */
  flagcxResult_t (*commInitRank)(flagcxVendorComm_t* comm, int nranks, const void* id,
                                 int rank, int dev);
  /* Waits for the communicator's work, then frees it. */
  flagcxResult_t (*commDestroy)(flagcxVendorComm_t comm);
  /* OPTIONAL. Frees at once; work in flight fails. */
  flagcxResult_t (*commAbort)(flagcxVendorComm_t comm);
  /* OPTIONAL. Error of asynchronous work (flagcxInProgress while a
   * non-blocking operation is still running). Never blocks. */
  flagcxResult_t (*commGetAsyncError)(flagcxVendorComm_t comm, flagcxResult_t* asyncError);

  flagcxResult_t (*allReduce)(const void* sendbuff, void* recvbuff, size_t count,
                              flagcxDataType_t datatype, flagcxRedOp_t op,
                              flagcxVendorComm_t comm, flagcxStream_t stream);
  flagcxResult_t (*reduce)(const void* sendbuff, void* recvbuff, size_t count,
                           flagcxDataType_t datatype, flagcxRedOp_t op, int root,
                           flagcxVendorComm_t comm, flagcxStream_t stream);
  flagcxResult_t (*broadcast)(const void* sendbuff, void* recvbuff, size_t count,
                              flagcxDataType_t datatype, int root,
                              flagcxVendorComm_t comm, flagcxStream_t stream);
  /* recvbuff holds nranks*sendcount elements, rank r's at r*sendcount. */
  flagcxResult_t (*allGather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                              flagcxDataType_t datatype,
                              flagcxVendorComm_t comm, flagcxStream_t stream);
  /* sendbuff holds nranks*recvcount elements. */
  flagcxResult_t (*reduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  flagcxDataType_t datatype, flagcxRedOp_t op,
                                  flagcxVendorComm_t comm, flagcxStream_t stream);
  /* OPTIONAL (host composes from group + send/recv). count per peer. */
  flagcxResult_t (*alltoAll)(const void* sendbuff, void* recvbuff, size_t count,
                             flagcxDataType_t datatype,
                             flagcxVendorComm_t comm, flagcxStream_t stream);
  /* OPTIONAL (host composes). Counts and displacements are host arrays of
   * nranks elements, in elements, read during the call only. */
  flagcxResult_t (*alltoAllv)(const void* sendbuff, const size_t* sendcounts,
                              const size_t* sdispls, void* recvbuff,
                              const size_t* recvcounts, const size_t* rdispls,
                              flagcxDataType_t datatype,
                              flagcxVendorComm_t comm, flagcxStream_t stream);
  /* OPTIONAL (host composes). root's recvbuff holds nranks*count elements. */
  flagcxResult_t (*gather)(const void* sendbuff, void* recvbuff, size_t count,
                           flagcxDataType_t datatype, int root,
                           flagcxVendorComm_t comm, flagcxStream_t stream);
  /* OPTIONAL (host composes). root's sendbuff holds nranks*count elements. */
  flagcxResult_t (*scatter)(const void* sendbuff, void* recvbuff, size_t count,
                            flagcxDataType_t datatype, int root,
                            flagcxVendorComm_t comm, flagcxStream_t stream);
  flagcxResult_t (*send)(const void* sendbuff, size_t count, flagcxDataType_t datatype,
                         int peer, flagcxVendorComm_t comm, flagcxStream_t stream);
  flagcxResult_t (*recv)(void* recvbuff, size_t count, flagcxDataType_t datatype,
                         int peer, flagcxVendorComm_t comm, flagcxStream_t stream);
  /* Per calling thread, nesting, as ncclGroupStart/End. groupEnd issues the
   * grouped operations (may block while it launches them). */
  flagcxResult_t (*groupStart)(void);
  flagcxResult_t (*groupEnd)(void);
  /* OPTIONAL. The vendor's description of a result code (static string). */
  const char* (*getErrorString)(flagcxResult_t result);
} flagcxCcl_v1_t;

/* ---------------------------------------------------------------------- */
/* The v1 table (hosts still load it; new plugins export v2, below), as:  */
/*   const flagcxVendorPlugin_v1_t flagcxVendorPlugin_v1 = {               */
/*     .size = sizeof(flagcxVendorPlugin_v1_t),                            */
/*     .abiVersion = 1, ... };                                             */
typedef struct flagcxVendorPlugin_v1 {
  uint32_t size;          /* sizeof(flagcxVendorPlugin_v1_t) as built */
  uint32_t abiVersion;    /* 1 */
  const char* name;       /* "nvidia": matches libflagcx-<name>.so */
  const char* vendor;     /* "NVIDIA": ranks with equal vendors form a cluster */
  const char* version;    /* the plugin's own version, free text */
  uint64_t caps;          /* FLAGCX_PLUGIN_CAP_* */
  /* Vendor libraries loaded at init, ended by an entry with role == NULL
   * (NULL when none). The host shows them and, when emulation is asked for,
   * points each envVar at the vendorsim build before init. */
  const flagcxPluginLibrary_v1_t* libraries;

  /* Loads the vendor libraries and fills info. On failure returns an error
   * and getLastError says which library is missing and which envVar points
   * at it. May block (library loading, driver init). A later call after a
   * success returns flagcxSuccess and fills info again. */
  flagcxResult_t (*init)(flagcxLogFn_t log, void* logCtx, flagcxPluginInfo_v1_t* info);
  /* OPTIONAL. Releases what init acquired; no entry is called afterwards. */
  flagcxResult_t (*fini)(void);
  /* The message of the last failing entry on the calling thread (""
   * when none): plugin-owned, valid until the next entry on that thread. */
  const char* (*getLastError)(void);

  flagcxDeviceRuntime_v1_t device;
  flagcxCcl_v1_t ccl;
} flagcxVendorPlugin_v1_t;

/* ---------------------------------------------------------------------- */
/* ABI v2: the device runtime gains host memory registration; everything    */
/* else is v1's. Export it as:                                              */
/*   const flagcxVendorPlugin_v2_t flagcxVendorPlugin_v2 = {               */
/*     .size = sizeof(flagcxVendorPlugin_v2_t),                            */
/*     .abiVersion = 2, ... };                                             */
typedef struct {
  /* The v1 entries, unchanged and in the same order. */
  flagcxResult_t (*getDeviceCount)(int* count);
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDeviceInfo)(int dev, flagcxDeviceInfo_v1_t* info);
  flagcxResult_t (*getLinkInfo)(int devA, int devB, flagcxLinkInfo_v1_t* link); /* OPTIONAL */
  flagcxResult_t (*deviceMalloc)(int dev, void** ptr, size_t bytes);
  flagcxResult_t (*deviceFree)(void* ptr);
  flagcxResult_t (*hostMalloc)(void** ptr, size_t bytes);
  flagcxResult_t (*hostFree)(void* ptr);
  flagcxResult_t (*pointerKind)(const void* ptr, flagcxMemoryKind_t* kind); /* OPTIONAL */
  flagcxResult_t (*memCopy)(void* dst, const void* src, size_t bytes,
                            flagcxMemcpyKind_t kind, flagcxStream_t stream);
  flagcxResult_t (*memSet)(void* dst, int value, size_t bytes, flagcxStream_t stream);
  flagcxResult_t (*streamCreate)(int dev, flagcxStream_t* stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream);
  flagcxResult_t (*streamQuery)(flagcxStream_t stream); /* OPTIONAL */
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);
  flagcxResult_t (*eventCreate)(int dev, flagcxEvent_t* event);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  flagcxResult_t (*eventQuery)(flagcxEvent_t event); /* OPTIONAL */
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event);
  flagcxResult_t (*eventElapsedTime)(float* ms, flagcxEvent_t start, flagcxEvent_t end); /* OPTIONAL */

  /* OPTIONAL (v2). Page-locks [ptr, ptr+bytes) of existing host memory
   * (malloc'ed, or an mmap of a shared-memory file that other processes
   * map too; the host passes page-aligned ranges) and makes it usable by
   * every device for async copies (memCopy with a stream), as hostMalloc's
   * memory is: cudaHostRegister(ptr, bytes, cudaHostRegisterPortable) and
   * each vendor's equivalent. The memory stays the caller's. A range that
   * overlaps a registered one is flagcxInvalidUsage. */
  flagcxResult_t (*hostRegister)(void* ptr, size_t bytes);
  /* OPTIONAL (v2). Undoes hostRegister of the range that starts at ptr
   * (flagcxInvalidUsage when none does). Copies using it must be done. */
  flagcxResult_t (*hostUnregister)(void* ptr);
} flagcxDeviceRuntime_v2_t;

typedef flagcxCcl_v1_t flagcxCcl_v2_t;

typedef struct flagcxVendorPlugin_v2 {
  uint32_t size;          /* sizeof(flagcxVendorPlugin_v2_t) as built */
  uint32_t abiVersion;    /* 2 */
  const char* name;
  const char* vendor;
  const char* version;
  uint64_t caps;
  const flagcxPluginLibrary_v1_t* libraries;
  flagcxResult_t (*init)(flagcxLogFn_t log, void* logCtx, flagcxPluginInfo_v1_t* info);
  flagcxResult_t (*fini)(void); /* OPTIONAL */
  const char* (*getLastError)(void);

  flagcxDeviceRuntime_v2_t device;
  flagcxCcl_v2_t ccl;
} flagcxVendorPlugin_v2_t;

/* ---------------------------------------------------------------------- */
/* ABI v3: the device runtime gains memGetInfo; everything else is v2's.    */
/* Export it as:                                                            */
/*   const flagcxVendorPlugin_v3_t flagcxVendorPlugin_v3 = {               */
/*     .size = sizeof(flagcxVendorPlugin_v3_t),                            */
/*     .abiVersion = 3, ... };                                             */
typedef struct {
  /* The v2 entries, unchanged and in the same order. */
  flagcxResult_t (*getDeviceCount)(int* count);
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDeviceInfo)(int dev, flagcxDeviceInfo_v1_t* info);
  flagcxResult_t (*getLinkInfo)(int devA, int devB, flagcxLinkInfo_v1_t* link); /* OPTIONAL */
  flagcxResult_t (*deviceMalloc)(int dev, void** ptr, size_t bytes);
  flagcxResult_t (*deviceFree)(void* ptr);
  flagcxResult_t (*hostMalloc)(void** ptr, size_t bytes);
  flagcxResult_t (*hostFree)(void* ptr);
  flagcxResult_t (*pointerKind)(const void* ptr, flagcxMemoryKind_t* kind); /* OPTIONAL */
  flagcxResult_t (*memCopy)(void* dst, const void* src, size_t bytes,
                            flagcxMemcpyKind_t kind, flagcxStream_t stream);
  flagcxResult_t (*memSet)(void* dst, int value, size_t bytes, flagcxStream_t stream);
  flagcxResult_t (*streamCreate)(int dev, flagcxStream_t* stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream);
  flagcxResult_t (*streamQuery)(flagcxStream_t stream); /* OPTIONAL */
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);
  flagcxResult_t (*eventCreate)(int dev, flagcxEvent_t* event);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  flagcxResult_t (*eventQuery)(flagcxEvent_t event); /* OPTIONAL */
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event);
  flagcxResult_t (*eventElapsedTime)(float* ms, flagcxEvent_t start, flagcxEvent_t end); /* OPTIONAL */
  flagcxResult_t (*hostRegister)(void* ptr, size_t bytes); /* OPTIONAL (v2) */
  flagcxResult_t (*hostUnregister)(void* ptr);             /* OPTIONAL (v2) */

  /* OPTIONAL (v3). The free and total device memory of device dev, in
   * bytes, as cudaMemGetInfo reports them (free counts every process's
   * allocations, total is the device's usable memory). The PLUGIN makes dev
   * the calling thread's current device first (as deviceMalloc does): the
   * host never relies on a current device. Both pointers are non-NULL. */
  flagcxResult_t (*memGetInfo)(int dev, size_t* freeBytes, size_t* totalBytes);
} flagcxDeviceRuntime_v3_t;

typedef flagcxCcl_v1_t flagcxCcl_v3_t;

typedef struct flagcxVendorPlugin_v3 {
  uint32_t size;          /* sizeof(flagcxVendorPlugin_v3_t) as built */
  uint32_t abiVersion;    /* 3 */
  const char* name;
  const char* vendor;
  const char* version;
  uint64_t caps;
  const flagcxPluginLibrary_v1_t* libraries;
  flagcxResult_t (*init)(flagcxLogFn_t log, void* logCtx, flagcxPluginInfo_v1_t* info);
  flagcxResult_t (*fini)(void); /* OPTIONAL */
  const char* (*getLastError)(void);

  flagcxDeviceRuntime_v3_t device;
  flagcxCcl_v3_t ccl;
} flagcxVendorPlugin_v3_t;

/* ---------------------------------------------------------------------- */
/* ABI v4: the device runtime gains reduceLocal; everything else is v3's.   */
/* Export it as:                                                            */
/*   const flagcxVendorPlugin_v4_t flagcxVendorPlugin_v4 = {               */
/*     .size = sizeof(flagcxVendorPlugin_v4_t),                            */
/*     .abiVersion = 4, ... };                                             */
typedef struct {
  /* The v3 entries, unchanged and in the same order. */
  flagcxResult_t (*getDeviceCount)(int* count);
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDeviceInfo)(int dev, flagcxDeviceInfo_v1_t* info);
  flagcxResult_t (*getLinkInfo)(int devA, int devB, flagcxLinkInfo_v1_t* link); /* OPTIONAL */
  flagcxResult_t (*deviceMalloc)(int dev, void** ptr, size_t bytes);
  flagcxResult_t (*deviceFree)(void* ptr);
  flagcxResult_t (*hostMalloc)(void** ptr, size_t bytes);
  flagcxResult_t (*hostFree)(void* ptr);
  flagcxResult_t (*pointerKind)(const void* ptr, flagcxMemoryKind_t* kind); /* OPTIONAL */
  flagcxResult_t (*memCopy)(void* dst, const void* src, size_t bytes,
                            flagcxMemcpyKind_t kind, flagcxStream_t stream);
  flagcxResult_t (*memSet)(void* dst, int value, size_t bytes, flagcxStream_t stream);
  flagcxResult_t (*streamCreate)(int dev, flagcxStream_t* stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream);
  flagcxResult_t (*streamQuery)(flagcxStream_t stream); /* OPTIONAL */
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);
  flagcxResult_t (*eventCreate)(int dev, flagcxEvent_t* event);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  flagcxResult_t (*eventQuery)(flagcxEvent_t event); /* OPTIONAL */
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event);
  flagcxResult_t (*eventElapsedTime)(float* ms, flagcxEvent_t start, flagcxEvent_t end); /* OPTIONAL */
  flagcxResult_t (*hostRegister)(void* ptr, size_t bytes); /* OPTIONAL (v2) */
  flagcxResult_t (*hostUnregister)(void* ptr);             /* OPTIONAL (v2) */
  flagcxResult_t (*memGetInfo)(int dev, size_t* freeBytes, size_t* totalBytes); /* OPTIONAL (v3) */

  /* OPTIONAL (v4). Enqueues on stream, on device dev, the element-wise
   * reduction
   *     dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrcs-1][i]
   * for i < count, folded left to right in the data type itself: every
   * step rounds to it (half and bfloat16 to nearest even, as an exact
   * float32 operation followed by one rounding), integers wrap. max/min
   * of floats: a NaN operand yields the other operand, and max(-0, +0) is
   * +0, min(-0, +0) is -0. flagcxAvg sums and then divides the sum by
   * avgDivisor (>= 1): integers truncate toward zero, floats divide in
   * their own type (half and bfloat16 in float32, then round); other ops
   * ignore avgDivisor. These are the host engine's rules, so a cluster
   * that reduces on its device gets the bits the host would.
   * 1 <= nsrcs <= FLAGCX_REDUCE_MAX_SRCS; srcs and dst are device memory
   * of dev, dst may be one of the srcs (each element is read before it is
   * written), no other overlap. The plugin reads the srcs array before it
   * returns (the host reuses it); the reduction runs later, in stream
   * order. A plugin reduces every data type and op of its masks, or none
   * (flagcxNotSupported for all, e.g. when a compiler it needs is missing:
   * the host then reduces on the host). count 0 enqueues nothing and
   * answers which (the host asks once, when a communicator starts). */
  flagcxResult_t (*reduceLocal)(int dev, void* dst, const void* const* srcs, int nsrcs, size_t count,
                                flagcxDataType_t dtype, flagcxRedOp_t op, int avgDivisor,
                                flagcxStream_t stream);
} flagcxDeviceRuntime_v4_t;

typedef flagcxCcl_v1_t flagcxCcl_v4_t;

typedef struct flagcxVendorPlugin_v4 {
  uint32_t size;          /* sizeof(flagcxVendorPlugin_v4_t) as built */
  uint32_t abiVersion;    /* 4 */
  const char* name;
  const char* vendor;
  const char* version;
  uint64_t caps;
  const flagcxPluginLibrary_v1_t* libraries;
  flagcxResult_t (*init)(flagcxLogFn_t log, void* logCtx, flagcxPluginInfo_v1_t* info);
  flagcxResult_t (*fini)(void); /* OPTIONAL */
  const char* (*getLastError)(void);

  flagcxDeviceRuntime_v4_t device;
  flagcxCcl_v4_t ccl;
} flagcxVendorPlugin_v4_t;

/* ---------------------------------------------------------------------- */
/* ABI v5: the device runtime gains relayReduce; everything else is v4's.   */
/* Export it as:                                                            */
/*   const flagcxVendorPlugin_v5_t flagcxVendorPlugin_v5 = {               */
/*     .size = sizeof(flagcxVendorPlugin_v5_t),                            */
/*     .abiVersion = 5, ... };                                             */

/* A relayReduce's go word holds a call's value with this bit set when the
 * host gives up: the device then stops without writing dst. The abort of a
 * call stops every earlier call on the same words still waiting (values
 * only grow), since a host that gives up answers its calls in order
 * without waiting for the device to read each answer. */
#define FLAGCX_RELAY_ABORT (1ull << 63)
/* A relayReduce's landed word holds the call's value with this bit set once
 * the device is done with host memory (folded, or stopped). */
#define FLAGCX_RELAY_DONE (1ull << 62)

/* What one relayReduce does, in its stream's order (relayReduce below). */
typedef struct {
  const void* src;  /* device memory of dev: the bytes to put in window */
  void* window;     /* host memory registered with hostRegister */
  uint64_t bytes;   /* how many (0: none, and landed is still stored) */
  uint64_t* landed; /* registered host memory: value is stored here once window holds src's bytes */
  const uint64_t* go; /* registered host memory: the device waits until it holds value, or FLAGCX_RELAY_ABORT with a value >= value */
  uint64_t value;   /* 1 <= value < FLAGCX_RELAY_DONE, larger for every call on a landed/go pair */
  const void* srcs[FLAGCX_REDUCE_MAX_SRCS]; /* device memory of dev or registered host memory */
  int32_t nsrcs;    /* 1 <= nsrcs <= FLAGCX_REDUCE_MAX_SRCS */
  int32_t dtype;    /* flagcxDataType_t */
  int32_t op;       /* flagcxRedOp_t */
  int32_t avgDivisor; /* >= 1, as reduceLocal's */
  uint64_t count;   /* elements of dtype to fold (0: none) */
  void* dst;        /* device memory of dev */
} flagcxRelay_v5_t;

typedef struct {
  /* The v4 entries, unchanged and in the same order. */
  flagcxResult_t (*getDeviceCount)(int* count);
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDeviceInfo)(int dev, flagcxDeviceInfo_v1_t* info);
  flagcxResult_t (*getLinkInfo)(int devA, int devB, flagcxLinkInfo_v1_t* link); /* OPTIONAL */
  flagcxResult_t (*deviceMalloc)(int dev, void** ptr, size_t bytes);
  flagcxResult_t (*deviceFree)(void* ptr);
  flagcxResult_t (*hostMalloc)(void** ptr, size_t bytes);
  flagcxResult_t (*hostFree)(void* ptr);
  flagcxResult_t (*pointerKind)(const void* ptr, flagcxMemoryKind_t* kind); /* OPTIONAL */
  flagcxResult_t (*memCopy)(void* dst, const void* src, size_t bytes,
                            flagcxMemcpyKind_t kind, flagcxStream_t stream);
  flagcxResult_t (*memSet)(void* dst, int value, size_t bytes, flagcxStream_t stream);
  flagcxResult_t (*streamCreate)(int dev, flagcxStream_t* stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream);
  flagcxResult_t (*streamQuery)(flagcxStream_t stream); /* OPTIONAL */
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);
  flagcxResult_t (*eventCreate)(int dev, flagcxEvent_t* event);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  flagcxResult_t (*eventQuery)(flagcxEvent_t event); /* OPTIONAL */
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event);
  flagcxResult_t (*eventElapsedTime)(float* ms, flagcxEvent_t start, flagcxEvent_t end); /* OPTIONAL */
  flagcxResult_t (*hostRegister)(void* ptr, size_t bytes); /* OPTIONAL (v2) */
  flagcxResult_t (*hostUnregister)(void* ptr);             /* OPTIONAL (v2) */
  flagcxResult_t (*memGetInfo)(int dev, size_t* freeBytes, size_t* totalBytes); /* OPTIONAL (v3) */
  flagcxResult_t (*reduceLocal)(int dev, void* dst, const void* const* srcs, int nsrcs, size_t count,
                                flagcxDataType_t dtype, flagcxRedOp_t op, int avgDivisor,
                                flagcxStream_t stream); /* OPTIONAL (v4) */

  /* OPTIONAL (v5). Enqueues on stream, on device dev, one relay through
   * host memory, in four parts that run in this order once the stream's
   * earlier work is done:
   *   1. copy relay->bytes bytes of src to window;
   *   2. once the host can read them there, store relay->value to *landed;
   *   3. wait until *go holds value (go on), or FLAGCX_RELAY_ABORT set
   *      beside value or a larger one (stop: skip part 4; the abort of a
   *      later call on the same words stops this one too); this wait has
   *      no deadline of its own, the host always answers one way or the
   *      other;
   *   4. dst[i] = srcs[0][i] op ... op srcs[nsrcs-1][i] for i < count,
   *      by reduceLocal's rules (the host engine's, bit for bit), reading
   *      every source after the go (other processes wrote host sources
   *      just before it, so nothing of them may come from a cache);
   *   5. once every read of host memory is done (after part 4, or the
   *      stop), store value | FLAGCX_RELAY_DONE to *landed: the host then
   *      lets the other ranks write their windows again without a call
   *      into the runtime.
   * The stream's later work runs after part 5. A source may be window
   * (then it holds src's bytes) or src itself; dst may be one of the srcs
   * (each element is read before it is written), no other overlap.
   * The host calls this for small messages (a few KiB), so one block of
   * threads is enough. The plugin reads *relay before it returns. With
   * relay->count == 0 and relay->bytes == 0 nothing is enqueued and the
   * result answers whether the plugin relays (the host asks once, when a
   * communicator starts): a plugin relays every data type and op of its
   * masks, or answers flagcxNotSupported. */
  flagcxResult_t (*relayReduce)(int dev, const flagcxRelay_v5_t* relay, flagcxStream_t stream);
} flagcxDeviceRuntime_v5_t;

typedef flagcxCcl_v1_t flagcxCcl_v5_t;

typedef struct flagcxVendorPlugin_v5 {
  uint32_t size;          /* sizeof(flagcxVendorPlugin_v5_t) as built */
  uint32_t abiVersion;    /* 5 */
  const char* name;
  const char* vendor;
  const char* version;
  uint64_t caps;
  const flagcxPluginLibrary_v1_t* libraries;
  flagcxResult_t (*init)(flagcxLogFn_t log, void* logCtx, flagcxPluginInfo_v1_t* info);
  flagcxResult_t (*fini)(void); /* OPTIONAL */
  const char* (*getLastError)(void);

  flagcxDeviceRuntime_v5_t device;
  flagcxCcl_v5_t ccl;
} flagcxVendorPlugin_v5_t;

#ifdef __cplusplus
}
#endif

#endif /* FLAGCX_PLUGIN_H_ */
