/*
 * flagcx.h: FlagCX's host API, served by flagcx-go's libflagcx.so.
 *
 * Programs written for FlagCX (its torch plugin, its perf tests, Paddle)
 * compile against this header and link -lflagcx unchanged: the names, the
 * enum values, the struct layouts and the meaning of every entry are
 * FlagCX's (flagcx/include/flagcx.h of flagos-ai/FlagCX, API 0.13; the
 * one-sided entries and windows as of FlagCX commit
 * 0c721293a79348323afc874d7067b4fce0b06643, whose test_put, test_get and
 * test_one_side_register run on this library unchanged). What flagcx-go
 * does not serve (IPC handles, suspend/resume, NVSHMEM memory) returns
 * flagcxNotSupported, and flagcxGetLastError says why. docs/c-api.md lists
 * what is supported.
 *
 * The process picks its backend once, at its first call that needs one:
 * FLAGCX_BACKEND=<plugin>|host, else the first plugin of FLAGCX_PLUGIN_DIR
 * (default: ../plugins next to this library) whose runtime loads with a
 * device, else the host (CPU) backend. Ranks on different backends form one
 * heterogeneous communicator.
 */
#ifndef FLAGCX_H_
#define FLAGCX_H_

#include <stddef.h>
#include <stdint.h>

/* The FlagCX API release this header follows. */
#define FLAGCX_VERSION_MAJOR 0
#define FLAGCX_VERSION_MINOR 13
#define FLAGCX_VERSION_PATCH 0
#define FLAGCX_VERSION_CODE                                                    \
  (FLAGCX_VERSION_MAJOR * 10000 + FLAGCX_VERSION_MINOR * 100 +                 \
   FLAGCX_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes (numbered as NCCL's). */
typedef enum {
  flagcxSuccess = 0,
  flagcxUnhandledDeviceError = 1,
  flagcxSystemError = 2,
  flagcxInternalError = 3,
  flagcxInvalidArgument = 4,
  flagcxInvalidUsage = 5,
  flagcxRemoteError = 6,
  flagcxInProgress = 7,
  flagcxUnhandledCCLError = 8,
  flagcxNotSupported = 9,
  flagcxNumResults = 10
} flagcxResult_t;

/* Element types; several names share a value, as in FlagCX. */
typedef enum {
  flagcxInt8 = 0,
  flagcxChar = 0,
  flagcxUint8 = 1,
  flagcxInt32 = 2,
  flagcxInt = 2,
  flagcxUint32 = 3,
  flagcxInt64 = 4,
  flagcxUint64 = 5,
  flagcxFloat16 = 6,
  flagcxHalf = 6,
  flagcxFloat32 = 7,
  flagcxFloat = 7,
  flagcxFloat64 = 8,
  flagcxDouble = 8,
  flagcxBfloat16 = 9,
  flagcxNumTypes = 10
} flagcxDataType_t;

/* Reductions. flagcxMaxRedOp makes the enum as wide as an int. */
typedef enum { flagcxNumRedOps_dummy = 5 } flagcxRedOp_dummy_t;
typedef enum {
  flagcxSum = 0,
  flagcxProd = 1,
  flagcxMax = 2,
  flagcxMin = 3,
  flagcxAvg = 4,
  flagcxRedNoOp = 5,
  flagcxNumRedOps = 5,
  flagcxMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(flagcxRedOp_dummy_t))
} flagcxRedOp_t;

/* Bytes of one element of dtype (0 for an unknown type). */
size_t getFlagcxDataTypeSize(flagcxDataType_t dtype);

/* Operation kinds (the torch plugin's tuner names them). */
typedef enum {
  flagcxCommOpSend = 0,
  flagcxCommOpRecv = 1,
  flagcxCommOpBroadcast = 2,
  flagcxCommOpGather = 3,
  flagcxCommOpScatter = 4,
  flagcxCommOpReduce = 5,
  flagcxCommOpAllReduce = 6,
  flagcxCommOpAllGather = 7,
  flagcxCommOpReduceScatter = 8,
  flagcxCommOpAlltoAll = 9,
  flagcxCommOpAlltoAllv = 10,
  flagcxCommNoOp = 11,
  flagcxNumCommOps = 12
} flagcxCommOp_t;

typedef enum {
  flagcxMemcpyHostToDevice = 0,
  flagcxMemcpyDeviceToHost = 1,
  flagcxMemcpyDeviceToDevice = 2
} flagcxMemcpyType_t;

typedef enum {
  flagcxMemHost = 0, /* pinned host memory */
  flagcxMemDevice = 1,
  flagcxMemManaged = 2
} flagcxMemType_t;

typedef enum {
  flagcxEventDefault = 0,
  flagcxEventDisableTiming = 1
} flagcxEventType_t;

typedef enum {
  FLAGCX_VENDOR_NVIDIA = 0,
  FLAGCX_VENDOR_ILUVATAR_COREX = 1,
  FLAGCX_VENDOR_MLU = 2,
  FLAGCX_VENDOR_METAX = 3,
} flagcxVendorType;

/* A communicator's name: made by flagcxGetUniqueId on one rank, copied to
 * every rank byte for byte. */
#define FLAGCX_UNIQUE_ID_BYTES 256
typedef struct {
  char internal[FLAGCX_UNIQUE_ID_BYTES];
} flagcxUniqueId;
typedef flagcxUniqueId *flagcxUniqueId_t;

typedef struct flagcxComm *flagcxComm_t;
/* A stream points at the backend's native stream handle (its first field),
 * as FlagCX's adaptors lay it out: *(cudaStream_t *)stream is the CUDA
 * stream on the nvidia backend. The host backend has no native stream. */
typedef struct flagcxStream *flagcxStream_t;
/* An event points at the backend's native event handle the same way. */
typedef struct flagcxEvent *flagcxEvent_t;
typedef struct flagcxIpcMemHandle *flagcxIpcMemHandle_t;
struct flagcxInnerWindow;
typedef struct flagcxInnerWindow *flagcxInnerWindow_t;
struct flagcxSymWindow;
typedef struct flagcxSymWindow *flagcxSymWindow_t;
struct flagcxWindow;
typedef struct flagcxWindow *flagcxWindow_t;

/* Kernel arguments (FlagCX's device API; kept for layout compatibility). */
typedef struct {
  flagcxStream_t stream;
  flagcxEvent_t event;
  void **argList;
} flagcxFuncArgs;

/* The device runtime of the process's backend, in FlagCX's order. The
 * current device is per calling thread (setDevice), as in vendor runtimes;
 * allocations, streams and events are made on it. */
struct flagcxDeviceHandle {
  /* Basic functions */
  flagcxResult_t (*deviceSynchronize)();
  flagcxResult_t (*deviceMemcpy)(void *dst, void *src, size_t size,
                                 flagcxMemcpyType_t type,
                                 flagcxStream_t stream);
  flagcxResult_t (*deviceMemset)(void *ptr, int value, size_t size,
                                 flagcxMemType_t type, flagcxStream_t stream);
  flagcxResult_t (*deviceMalloc)(void **ptr, size_t size, flagcxMemType_t type,
                                 flagcxStream_t stream);
  flagcxResult_t (*deviceFree)(void *ptr, flagcxMemType_t type,
                               flagcxStream_t stream);
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDevice)(int *dev);
  flagcxResult_t (*getDeviceCount)(int *count);
  flagcxResult_t (*getVendor)(char *vendor);
  flagcxResult_t (*hostGetDevicePointer)(void **pDevice, void *pHost);
  /* Stream functions. streamCopy wraps a framework's native stream
   * (oldStream is e.g. a cudaStream_t) without owning it; streamFree
   * releases that wrapper, streamDestroy a stream from streamCreate. */
  flagcxResult_t (*streamCreate)(flagcxStream_t *stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamCopy)(flagcxStream_t *newStream, void *oldStream);
  flagcxResult_t (*streamFree)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream);
  flagcxResult_t (*streamQuery)(flagcxStream_t stream);
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);
  /* Event functions */
  flagcxResult_t (*eventCreate)(flagcxEvent_t *event,
                                flagcxEventType_t eventType);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event);
  flagcxResult_t (*eventQuery)(flagcxEvent_t event);
  flagcxResult_t (*eventElapsedTime)(float *ms, flagcxEvent_t start,
                                     flagcxEvent_t end);
  /* IPC memory handles: flagcxNotSupported in flagcx-go. */
  flagcxResult_t (*ipcMemHandleCreate)(flagcxIpcMemHandle_t *handle,
                                       size_t *size);
  flagcxResult_t (*ipcMemHandleGet)(flagcxIpcMemHandle_t handle, void *devPtr);
  flagcxResult_t (*ipcMemHandleOpen)(flagcxIpcMemHandle_t handle,
                                     void **devPtr);
  flagcxResult_t (*ipcMemHandleClose)(void *devPtr);
  flagcxResult_t (*ipcMemHandleFree)(flagcxIpcMemHandle_t handle);
};
typedef struct flagcxDeviceHandle *flagcxDeviceHandle_t;

/* Chooses the backend (if not yet chosen) and returns a filled table,
 * usable before any communicator exists. */
flagcxResult_t flagcxDeviceHandleInit(flagcxDeviceHandle_t *devHandle);
/* Frees the table (the backend stays loaded for the process). */
flagcxResult_t flagcxDeviceHandleFree(flagcxDeviceHandle_t devHandle);

/* Deprecated: flagcxHandleInit fills only devHandle, as FlagCX's does. */
struct flagcxHandlerGroup {
  flagcxUniqueId_t uniqueId;
  flagcxComm_t comm;
  flagcxDeviceHandle_t devHandle;
};
typedef struct flagcxHandlerGroup *flagcxHandlerGroup_t;
flagcxResult_t flagcxHandleInit(flagcxHandlerGroup_t *handler);
flagcxResult_t flagcxHandleFree(flagcxHandlerGroup_t handler);

/* Where flagcxMemAlloc takes memory from. */
typedef enum {
  flagcxMemCCL = 0,   /* the backend's device memory */
  flagcxMemSHMEM = 1, /* NVSHMEM: flagcxNotSupported in flagcx-go */
} flagcxMemAllocator_t;

/* flagcxMemAlloc: device memory of the calling thread's current device.
 * flagcxCommRegister: accepted; flagcx-go's collectives need no
 * registration, so *handle is buff itself and nothing else changes. */
#ifdef __cplusplus
flagcxResult_t flagcxMemAlloc(void **ptr, size_t size,
                              flagcxMemAllocator_t allocator = flagcxMemCCL);
flagcxResult_t flagcxMemFree(void *ptr,
                             flagcxMemAllocator_t allocator = flagcxMemCCL);
flagcxResult_t
flagcxCommRegister(const flagcxComm_t comm, void *buff, size_t size,
                   void **handle,
                   flagcxMemAllocator_t allocator = flagcxMemCCL);
flagcxResult_t
flagcxCommDeregister(const flagcxComm_t comm, void *handle,
                     flagcxMemAllocator_t allocator = flagcxMemCCL);
#else
flagcxResult_t flagcxMemAlloc(void **ptr, size_t size,
                              flagcxMemAllocator_t allocator);
flagcxResult_t flagcxMemFree(void *ptr, flagcxMemAllocator_t allocator);
flagcxResult_t flagcxCommRegister(const flagcxComm_t comm, void *buff,
                                  size_t size, void **handle,
                                  flagcxMemAllocator_t allocator);
flagcxResult_t flagcxCommDeregister(const flagcxComm_t comm, void *handle,
                                    flagcxMemAllocator_t allocator);
#endif

/* Windows: flagcxCommWindowRegister registers this rank's size bytes at
 * buff for one-sided calls, collectively (every rank, in the same order as
 * the other registrations), as flagcxOneSideRegister does, and returns a
 * handle (*win must be NULL before the call). The registration's index
 * (flagcxPut's and flagcxGet's srcMrIdx/dstMrIdx) is the next one of the
 * communicator, or the index already holding buff. Both flags register
 * alike. flagcxCommWindowDeregister frees the registration on this rank
 * once no handle (and no flagcxOneSideRegister) holds it: later operations
 * of peers on it fail, naming it. A NULL win is accepted. */
#define FLAGCX_WIN_DEFAULT 0x00
#define FLAGCX_WIN_COLL_SYMMETRIC 0x01
#ifdef __cplusplus
flagcxResult_t
flagcxCommWindowRegister(flagcxComm_t comm, void *buff, size_t size,
                         flagcxWindow_t *win, int winFlags,
                         flagcxMemAllocator_t allocator = flagcxMemCCL);
flagcxResult_t
flagcxCommWindowDeregister(flagcxComm_t comm, flagcxWindow_t win,
                           flagcxMemAllocator_t allocator = flagcxMemCCL);
#else
flagcxResult_t flagcxCommWindowRegister(flagcxComm_t comm, void *buff,
                                        size_t size, flagcxWindow_t *win,
                                        int winFlags,
                                        flagcxMemAllocator_t allocator);
flagcxResult_t flagcxCommWindowDeregister(flagcxComm_t comm, flagcxWindow_t win,
                                          flagcxMemAllocator_t allocator);
#endif

/* Registers this rank's size bytes at buff (device memory of the rank's
 * backend; host memory on the host backend) for one-sided calls: collective,
 * and the registration lasts as long as the communicator. A buffer already
 * registered keeps its index and nothing is exchanged. */
flagcxResult_t flagcxOneSideRegister(flagcxComm_t comm, void *buff,
                                     size_t size);

/* *isHomo = 1 when every rank is in one vendor cluster, else 0. */
flagcxResult_t flagcxIsHomoComm(flagcxComm_t comm, int *isHomo);

/* The library's version number, as FlagCX reports it (10000). */
flagcxResult_t flagcxGetVersion(int *version);

/* Makes a new unique id. The calling process hosts the communicator's
 * rendezvous: it must stay alive until every rank has joined. */
flagcxResult_t flagcxGetUniqueId(flagcxUniqueId_t uniqueId);

/* Joins rank (0 <= rank < nranks) to the communicator of *commId on the
 * calling thread's current device. Every rank calls it concurrently (a
 * thread or process each); it returns once all have joined. */
flagcxResult_t flagcxCommInitRank(flagcxComm_t *comm, int nranks,
                                  flagcxUniqueId_t commId, int rank);

/* Operations complete before their calls return or on their stream, so
 * there is nothing to flush: returns flagcxSuccess. */
flagcxResult_t flagcxCommFinalize(flagcxComm_t comm);
/* Frees the communicator; calls with comm afterwards return
 * flagcxInvalidUsage. */
flagcxResult_t flagcxCommDestroy(flagcxComm_t comm);
/* Stops operations in flight (peers see an error naming this rank) and
 * frees the communicator. */
flagcxResult_t flagcxCommAbort(flagcxComm_t comm);
/* flagcxNotSupported in flagcx-go. */
flagcxResult_t flagcxCommResume(flagcxComm_t comm);
flagcxResult_t flagcxCommSuspend(flagcxComm_t comm);

/* The name of a result code. */
const char *flagcxGetErrorString(flagcxResult_t result);
/* The last failure's message: comm's, or the process's with comm NULL.
 * The text stays valid until the next failing call on the same thread. */
const char *flagcxGetLastError(flagcxComm_t comm);
/* *asyncError is the error that ended comm in the background (a missed
 * deadline: FLAGCX_TIMEOUT), else flagcxSuccess. */
flagcxResult_t flagcxCommGetAsyncError(flagcxComm_t comm,
                                       flagcxResult_t *asyncError);

flagcxResult_t flagcxCommCount(const flagcxComm_t comm, int *count);
/* The device the communicator runs on (0 on the host backend). */
flagcxResult_t flagcxCommGetDeviceNumber(const flagcxComm_t comm, int *device);
flagcxResult_t flagcxCommUserRank(const flagcxComm_t comm, int *rank);

/*
 * Collectives. Every rank calls them in the same order. They return once
 * the operation is enqueued on stream (device backends) or done (the host
 * backend, and schedules across vendor clusters). Counts are elements. In
 * place: send == recv (AllReduce, Reduce, Broadcast, AlltoAll(v)),
 * send == recv + rank * count elements (AllGather, Gather),
 * recv == send + rank * count elements (ReduceScatter, Scatter).
 */

/* Returns once every rank has called it; stream is synchronized first. */
flagcxResult_t flagcxBarrier(flagcxComm_t comm, flagcxStream_t stream);

/* recvbuff may be NULL except on root. */
flagcxResult_t flagcxReduce(const void *sendbuff, void *recvbuff, size_t count,
                            flagcxDataType_t datatype, flagcxRedOp_t op,
                            int root, flagcxComm_t comm, flagcxStream_t stream);
/* Root's recvbuff holds nranks blocks of count; NULL elsewhere allowed. */
flagcxResult_t flagcxGather(const void *sendbuff, void *recvbuff, size_t count,
                            flagcxDataType_t datatype, int root,
                            flagcxComm_t comm, flagcxStream_t stream);
/* Root's sendbuff holds nranks blocks of count; NULL elsewhere allowed. */
flagcxResult_t flagcxScatter(const void *sendbuff, void *recvbuff, size_t count,
                             flagcxDataType_t datatype, int root,
                             flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxBroadcast(const void *sendbuff, void *recvbuff,
                               size_t count, flagcxDataType_t datatype,
                               int root, flagcxComm_t comm,
                               flagcxStream_t stream);
flagcxResult_t flagcxAllReduce(const void *sendbuff, void *recvbuff,
                               size_t count, flagcxDataType_t datatype,
                               flagcxRedOp_t op, flagcxComm_t comm,
                               flagcxStream_t stream);
/* sendbuff holds nranks blocks of recvcount; rank i receives block i. */
flagcxResult_t flagcxReduceScatter(const void *sendbuff, void *recvbuff,
                                   size_t recvcount, flagcxDataType_t datatype,
                                   flagcxRedOp_t op, flagcxComm_t comm,
                                   flagcxStream_t stream);
/* recvbuff holds nranks blocks of sendcount, in rank order. */
flagcxResult_t flagcxAllGather(const void *sendbuff, void *recvbuff,
                               size_t sendcount, flagcxDataType_t datatype,
                               flagcxComm_t comm, flagcxStream_t stream);
/* Block i of sendbuff (count elements) goes to rank i. */
flagcxResult_t flagcxAlltoAll(const void *sendbuff, void *recvbuff,
                              size_t count, flagcxDataType_t datatype,
                              flagcxComm_t comm, flagcxStream_t stream);
/* Counts and displacements in elements, one per rank. */
flagcxResult_t flagcxAlltoAllv(const void *sendbuff, size_t *sendcounts,
                               size_t *sdispls, void *recvbuff,
                               size_t *recvcounts, size_t *rdispls,
                               flagcxDataType_t datatype, flagcxComm_t comm,
                               flagcxStream_t stream);

/* Point to point: peer posts the matching call with the same count and
 * type. Sends and receives that must progress together go between
 * flagcxGroupStart and flagcxGroupEnd. */
flagcxResult_t flagcxSend(const void *sendbuff, size_t count,
                          flagcxDataType_t datatype, int peer,
                          flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxRecv(void *recvbuff, size_t count,
                          flagcxDataType_t datatype, int peer,
                          flagcxComm_t comm, flagcxStream_t stream);

/*
 * One-sided operations, on any communicator (homogeneous or not), between
 * registrations named by index. A passive target calls nothing. Operations
 * of one rank to one peer take effect there in issue order: once a signal
 * sent after a put is seen, the put's bytes are in place. On the host
 * backend Put, BatchPut, PutSignal and Signal return once their source may
 * be reused, Get once its bytes are in place; the counter (ReadCounter)
 * counts this rank's operations complete at their peer. Every wait has the
 * communicator's deadline (FLAGCX_TIMEOUT) and then fails with
 * flagcxRemoteError naming the peers it waited for. They cannot be grouped.
 */

/* Makes the size bytes at buff (an 8-byte word per rank: word r counts the
 * signals of rank r) this rank's signal slots, collectively; ptrType is
 * FLAGCX_PTR_HOST (1), FLAGCX_PTR_CUDA (2) or FLAGCX_PTR_DMABUF (4), as
 * FlagCX's flagcx_net.h numbers them. Without it a communicator has slots
 * of its own. flagcxOneSideSignalDeregister (flagcx_kernel.h) gives the
 * buffer back. */
flagcxResult_t flagcxOneSideSignalRegister(const flagcxComm_t comm, void *buff,
                                           size_t size, int ptrType);
/* Host memory (64 KiB or more) through which a device rank's transfers are
 * staged, instead of the communicator's own; accepted and unused on the
 * host backend. Not collective in flagcx-go. */
flagcxResult_t flagcxOneSideStagingRegister(const flagcxComm_t comm, void *buff,
                                            size_t size);
flagcxResult_t flagcxOneSideStagingDeregister(const flagcxComm_t comm);
/* Reads size bytes of peer's registration srcMrIdx at srcOffset into this
 * rank's registration dstMrIdx at dstOffset. */
flagcxResult_t flagcxGet(flagcxComm_t comm, int peer, size_t srcOffset,
                         size_t dstOffset, size_t size, int srcMrIdx,
                         int dstMrIdx);
/* Writes size bytes of this rank's registration srcMrIdx at srcOffset into
 * peer's registration dstMrIdx at dstOffset. */
flagcxResult_t flagcxPut(flagcxComm_t comm, int peer, size_t srcOffset,
                         size_t dstOffset, size_t size, int srcMrIdx,
                         int dstMrIdx);
flagcxResult_t flagcxBatchPut(flagcxComm_t comm, int peer,
                              const size_t *srcOffsets,
                              const size_t *dstOffsets, const size_t *sizes,
                              const int *srcMrIdxs, const int *dstMrIdxs,
                              size_t count);
/* Writes count elements at localbuff (inside a registration of this rank)
 * into peer's memory of peerWin at peerWinOffset bytes, then adds one to
 * peer's signal slot of this rank; count 0 signals alone. flags: 0. */
flagcxResult_t flagcxPutSignal(const void *localbuff, size_t count,
                               flagcxDataType_t datatype, int peer,
                               flagcxWindow_t peerWin, size_t peerWinOffset,
                               unsigned int flags, flagcxComm_t comm,
                               flagcxStream_t stream);
/* Adds one to peer's signal slot of this rank, after this rank's earlier
 * operations on peer took effect. flags: 0. */
flagcxResult_t flagcxSignal(int peer, unsigned int flags, flagcxComm_t comm,
                            flagcxStream_t stream);
typedef struct {
  uint64_t opCnt; /* operations to wait for from peer */
  int peer;       /* the rank that signals */
} flagcxWaitSignalDesc_t;
/* Waits until this rank's slot of each descriptor's peer holds at least its
 * opCnt (signals since the slot was last zero); nDesc 0 returns at once. */
flagcxResult_t flagcxWaitSignal(int nDesc,
                                const flagcxWaitSignalDesc_t *signalDescs,
                                flagcxComm_t comm, flagcxStream_t stream);
/* The number of this rank's one-sided operations complete at their peer
 * (each transfer of a BatchPut counts one); WaitCounter waits until it
 * reaches target, or fails with the first error a peer reported. */
flagcxResult_t flagcxReadCounter(flagcxComm_t comm, uint64_t *count);
flagcxResult_t flagcxWaitCounter(flagcxComm_t comm, uint64_t target);

/* Groups: sends and receives between flagcxGroupStart(comm) and
 * flagcxGroupEnd(comm) run together at GroupEnd, so any pattern completes.
 * Groups nest. Collectives in a group are checked when called and run at
 * GroupEnd, in call order, before the sends and receives; their buffers
 * must stay untouched until then. With comm NULL
 * the group is the calling thread's and covers every communicator the
 * thread uses until its matching flagcxGroupEnd(NULL). */
flagcxResult_t flagcxGroupStart(flagcxComm_t comm);
flagcxResult_t flagcxGroupEnd(flagcxComm_t comm);

/* ---- flagcx-go extensions -------------------------------------------------
 * Not in FlagCX's API: entries flagcx-go's libflagcx.so adds for its NCCL
 * drop-in (build/lib/libnccl.so.2, docs/nccl.md). FlagCX's library does not
 * have them; a program that must also run on FlagCX does not call them. */

/* flagcxCommSplit makes a communicator of the ranks of comm that pass the
 * same color (>= 0), numbered by key, then by their rank in comm, as
 * ncclCommSplit. It is collective: every rank of comm calls it. A rank
 * passing FLAGCX_SPLIT_NOCOLOR takes part and gets *newcomm NULL. Each rank
 * keeps its backend and device; the new communicator's clusters are its
 * ranks' vendors (FLAGCX_CLUSTER_SPLIT_LIST does not split it further). */
#define FLAGCX_SPLIT_NOCOLOR (-1)
flagcxResult_t flagcxCommSplit(flagcxComm_t comm, int color, int key,
                               flagcxComm_t *newcomm);

/* flagcxCommShrink makes a communicator of the ranks of comm not among
 * the nexclude ranks of exclude, as ncclCommShrink (core's Shrink): the way
 * on after a rank was lost (exclude the ranks a revoked communicator's
 * error names), or a planned shrink. It is collective over the survivors,
 * which pass the same list; the excluded ranks, dead or alive, need not
 * take part (one that calls it gets *newcomm NULL). The survivors keep
 * their order and their backends and devices; clusters lose the excluded
 * ranks, and their vendor communicators start anew. comm is left as it
 * is: destroy or abort it. */
flagcxResult_t flagcxCommShrink(flagcxComm_t comm, const int *exclude,
                                int nexclude, flagcxComm_t *newcomm);

/* flagcxCommRevoke revokes comm on every rank, as ncclCommRevoke (core's
 * Revoke): each rank's operations in flight on it end at once, and every
 * later one fails, with an error naming the rank that revoked it; what is
 * left to do with comm is flagcxCommShrink (excluding no rank, or the lost
 * ones), flagcxCommDestroy or flagcxCommAbort. It does not wait for the
 * other ranks and may be called from any thread. */
flagcxResult_t flagcxCommRevoke(flagcxComm_t comm);

/* flagcxSetLastError records a failure of entry (a library built on this
 * one, e.g. "ncclCommShrink") as flagcxGetLastError(comm) and
 * flagcxGetLastError(NULL) report it: "<entry>: <description of code>:
 * <msg>". It returns code. */
flagcxResult_t flagcxSetLastError(flagcxComm_t comm, const char *entry,
                                  flagcxResult_t code, const char *msg);

/* flagcxRedOpCreatePreMulSum makes a reduction op of comm, as NCCL's
 * ncclRedOpCreatePreMulSum: a reduction with it (AllReduce, Reduce,
 * ReduceScatter, of datatype only) multiplies each rank's input by that
 * rank's scalar, one element of datatype, then sums. With
 * flagcxScalarHostImmediate the scalar is host memory, read now; with
 * flagcxScalarDevice it is device memory (host memory on a host rank),
 * read on the stream at each collective. *op is above the built-in ops and
 * names the op on comm only. flagcxRedOpDestroy forgets it; collectives
 * already issued with it are not affected. */
typedef enum {
  flagcxScalarDevice = 0,
  flagcxScalarHostImmediate = 1
} flagcxScalarResidence_t;
flagcxResult_t flagcxRedOpCreatePreMulSum(flagcxRedOp_t *op, void *scalar,
                                          flagcxDataType_t datatype,
                                          flagcxScalarResidence_t residence,
                                          flagcxComm_t comm);
flagcxResult_t flagcxRedOpDestroy(flagcxRedOp_t op, flagcxComm_t comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGCX_H_ */
