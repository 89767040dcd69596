// shim_comm.c: FlagCX's communicator, collective, point-to-point and group
// entries, and those flagcx-go does not serve (see shim.c).

#include <stdlib.h>

#include "shim.h"

flagcxResult_t flagcxGetVersion(int *version) {
  USABLE("flagcxGetVersion");
  NEED(version, "flagcxGetVersion", "version");
  *version = 10000; // FlagCX's flagcxGetVersion: FLAGCX_VERSION(1, 0, 0)
  return flagcxSuccess;
}

flagcxResult_t flagcxGetUniqueId(flagcxUniqueId_t uniqueId) {
  USABLE("flagcxGetUniqueId");
  NEED(uniqueId, "flagcxGetUniqueId", "uniqueId");
  shimSyncEnv();
  return capiUniqueID(uniqueId);
}

flagcxResult_t flagcxCommInitRank(flagcxComm_t *comm, int nranks,
                                  flagcxUniqueId_t commId, int rank) {
  USABLE("flagcxCommInitRank");
  NEED(comm, "flagcxCommInitRank", "comm");
  *comm = NULL;
  NEED(commId, "flagcxCommInitRank", "commId");
  CHECK(shimReady("flagcxCommInitRank"));
  shimSyncEnv();
  flagcxComm_t c = calloc(1, sizeof *c);
  if (c == NULL)
    return FAIL((flagcxComm_t)NULL, "flagcxCommInitRank", flagcxSystemError,
                "out of host memory");
  flagcxResult_t r =
      capiCommInit(commId, nranks, rank, shimDevice(), &c->id, &c->dev,
                   &c->onDevice);
  if (r != flagcxSuccess) {
    free(c);
    return r;
  }
  *comm = c;
  return flagcxSuccess;
}

flagcxResult_t flagcxCommFinalize(flagcxComm_t comm) {
  USABLE("flagcxCommFinalize");
  NEEDCOMM(comm, "flagcxCommFinalize");
  return flagcxSuccess;
}

static flagcxResult_t freeComm(flagcxComm_t comm, int abort) {
  flagcxResult_t r = capiCommFree(comm->id, abort);
  shimBury(comm);
  return r;
}

flagcxResult_t flagcxCommDestroy(flagcxComm_t comm) {
  USABLE("flagcxCommDestroy");
  NEEDCOMM(comm, "flagcxCommDestroy");
  CHECK(shimBind(comm));
  return freeComm(comm, 0);
}

flagcxResult_t flagcxCommAbort(flagcxComm_t comm) {
  USABLE("flagcxCommAbort");
  NEEDCOMM(comm, "flagcxCommAbort");
  return freeComm(comm, 1);
}

flagcxResult_t flagcxCommResume(flagcxComm_t comm) {
  USABLE("flagcxCommResume");
  return UNSUPPORTED(comm, "flagcxCommResume",
                     "suspending and resuming a communicator");
}

flagcxResult_t flagcxCommSuspend(flagcxComm_t comm) {
  USABLE("flagcxCommSuspend");
  return UNSUPPORTED(comm, "flagcxCommSuspend",
                     "suspending and resuming a communicator");
}

const char *flagcxGetErrorString(flagcxResult_t result) {
  switch (result) {
  case flagcxSuccess:
    return "no error";
  case flagcxUnhandledDeviceError:
    return "unhandled device error (a device runtime call failed)";
  case flagcxSystemError:
    return "system error (a system call, an allocation or a library failed)";
  case flagcxInternalError:
    return "internal error (an internal check failed)";
  case flagcxInvalidArgument:
    return "invalid argument";
  case flagcxInvalidUsage:
    return "invalid usage (a call out of order or on a finished communicator)";
  case flagcxRemoteError:
    return "remote error (a peer failed, exited or could not be reached)";
  case flagcxInProgress:
    return "operation in progress";
  case flagcxUnhandledCCLError:
    return "unhandled error of the vendor's collective library";
  case flagcxNotSupported:
    return "not supported";
  default:
    return "unknown result code";
  }
}

// The text of flagcxGetLastError lives until this thread's next call of it.
const char *flagcxGetLastError(flagcxComm_t comm) {
  if (__atomic_load_n(&shimForked, __ATOMIC_RELAXED))
    return shimForkedError();
  struct shimThreadState *t = shimThread();
  if (t == NULL)
    return "out of host memory (for the last error's text)";
  capiLastError(comm ? comm->id : 0, t->lastError, sizeof t->lastError);
  return t->lastError;
}

static flagcxResult_t query(flagcxComm_t comm, const char *entry, int what,
                            int *out) {
  NEEDCOMM(comm, entry);
  if (out == NULL)
    return FAIL(comm, entry, flagcxInvalidArgument, "the result pointer is NULL");
  return capiCommQuery(comm->id, what, out);
}

flagcxResult_t flagcxCommGetAsyncError(flagcxComm_t comm,
                                       flagcxResult_t *asyncError) {
  USABLE("flagcxCommGetAsyncError");
  int r = 0;
  CHECK(query(comm, "flagcxCommGetAsyncError", 4, asyncError ? &r : NULL));
  *asyncError = (flagcxResult_t)r;
  return flagcxSuccess;
}

flagcxResult_t flagcxCommCount(const flagcxComm_t comm, int *count) {
  USABLE("flagcxCommCount");
  return query(comm, "flagcxCommCount", 0, count);
}

flagcxResult_t flagcxCommUserRank(const flagcxComm_t comm, int *rank) {
  USABLE("flagcxCommUserRank");
  return query(comm, "flagcxCommUserRank", 1, rank);
}

flagcxResult_t flagcxCommGetDeviceNumber(const flagcxComm_t comm, int *device) {
  USABLE("flagcxCommGetDeviceNumber");
  return query(comm, "flagcxCommGetDeviceNumber", 2, device);
}

flagcxResult_t flagcxIsHomoComm(flagcxComm_t comm, int *isHomo) {
  USABLE("flagcxIsHomoComm");
  return query(comm, "flagcxIsHomoComm", 3, isHomo);
}

flagcxResult_t flagcxBarrier(flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxBarrier");
  NEEDCOMM(comm, "flagcxBarrier");
  CHECK(shimBind(comm));
  return capiBarrier(comm->id, shimStream(stream));
}

// coll runs collective kind (a flagcxCommOp_t) for entry.
static flagcxResult_t coll(const char *entry, flagcxCommOp_t kind,
                           const void *send, void *recv, size_t count,
                           flagcxDataType_t dt, flagcxRedOp_t op, int root,
                           flagcxComm_t comm, flagcxStream_t stream) {
  NEEDCOMM(comm, entry);
  CHECK(shimBind(comm));
  return capiColl(comm->id, (char *)entry, kind, (void *)send, recv, count, dt,
                  op, root, shimStream(stream), shimGroupKey());
}

flagcxResult_t flagcxReduce(const void *sendbuff, void *recvbuff, size_t count,
                            flagcxDataType_t datatype, flagcxRedOp_t op,
                            int root, flagcxComm_t comm,
                            flagcxStream_t stream) {
  USABLE("flagcxReduce");
  return coll("flagcxReduce", flagcxCommOpReduce, sendbuff, recvbuff, count,
              datatype, op, root, comm, stream);
}

flagcxResult_t flagcxGather(const void *sendbuff, void *recvbuff, size_t count,
                            flagcxDataType_t datatype, int root,
                            flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxGather");
  return coll("flagcxGather", flagcxCommOpGather, sendbuff, recvbuff, count,
              datatype, flagcxSum, root, comm, stream);
}

flagcxResult_t flagcxScatter(const void *sendbuff, void *recvbuff, size_t count,
                             flagcxDataType_t datatype, int root,
                             flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxScatter");
  return coll("flagcxScatter", flagcxCommOpScatter, sendbuff, recvbuff, count,
              datatype, flagcxSum, root, comm, stream);
}

flagcxResult_t flagcxBroadcast(const void *sendbuff, void *recvbuff,
                               size_t count, flagcxDataType_t datatype,
                               int root, flagcxComm_t comm,
                               flagcxStream_t stream) {
  USABLE("flagcxBroadcast");
  return coll("flagcxBroadcast", flagcxCommOpBroadcast, sendbuff, recvbuff,
              count, datatype, flagcxSum, root, comm, stream);
}

flagcxResult_t flagcxAllReduce(const void *sendbuff, void *recvbuff,
                               size_t count, flagcxDataType_t datatype,
                               flagcxRedOp_t op, flagcxComm_t comm,
                               flagcxStream_t stream) {
  USABLE("flagcxAllReduce");
  return coll("flagcxAllReduce", flagcxCommOpAllReduce, sendbuff, recvbuff,
              count, datatype, op, 0, comm, stream);
}

flagcxResult_t flagcxReduceScatter(const void *sendbuff, void *recvbuff,
                                   size_t recvcount, flagcxDataType_t datatype,
                                   flagcxRedOp_t op, flagcxComm_t comm,
                                   flagcxStream_t stream) {
  USABLE("flagcxReduceScatter");
  return coll("flagcxReduceScatter", flagcxCommOpReduceScatter, sendbuff,
              recvbuff, recvcount, datatype, op, 0, comm, stream);
}

flagcxResult_t flagcxAllGather(const void *sendbuff, void *recvbuff,
                               size_t sendcount, flagcxDataType_t datatype,
                               flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxAllGather");
  return coll("flagcxAllGather", flagcxCommOpAllGather, sendbuff, recvbuff,
              sendcount, datatype, flagcxSum, 0, comm, stream);
}

flagcxResult_t flagcxAlltoAll(const void *sendbuff, void *recvbuff,
                              size_t count, flagcxDataType_t datatype,
                              flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxAlltoAll");
  return coll("flagcxAlltoAll", flagcxCommOpAlltoAll, sendbuff, recvbuff, count,
              datatype, flagcxSum, 0, comm, stream);
}

flagcxResult_t flagcxAlltoAllv(const void *sendbuff, size_t *sendcounts,
                               size_t *sdispls, void *recvbuff,
                               size_t *recvcounts, size_t *rdispls,
                               flagcxDataType_t datatype, flagcxComm_t comm,
                               flagcxStream_t stream) {
  USABLE("flagcxAlltoAllv");
  NEEDCOMM(comm, "flagcxAlltoAllv");
  CHECK(shimBind(comm));
  return capiAlltoAllv(comm->id, (void *)sendbuff, sendcounts, sdispls,
                       recvbuff, recvcounts, rdispls, datatype, shimStream(stream),
                       shimGroupKey());
}

flagcxResult_t flagcxSend(const void *sendbuff, size_t count,
                          flagcxDataType_t datatype, int peer,
                          flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxSend");
  NEEDCOMM(comm, "flagcxSend");
  CHECK(shimBind(comm));
  return capiP2P(comm->id, 0, (void *)sendbuff, count, datatype, peer,
                 shimStream(stream), shimGroupKey());
}

flagcxResult_t flagcxRecv(void *recvbuff, size_t count,
                          flagcxDataType_t datatype, int peer,
                          flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxRecv");
  NEEDCOMM(comm, "flagcxRecv");
  CHECK(shimBind(comm));
  return capiP2P(comm->id, 1, recvbuff, count, datatype, peer, shimStream(stream),
                 shimGroupKey());
}

flagcxResult_t flagcxGroupStart(flagcxComm_t comm) {
  USABLE("flagcxGroupStart");
  if (comm != NULL) {
    CHECK(shimLive(comm, "flagcxGroupStart"));
    return capiGroup(comm->id, 1, 0);
  }
  struct shimThreadState *t = shimThread();
  if (t == NULL)
    return FAIL((flagcxComm_t)NULL, "flagcxGroupStart", flagcxSystemError,
                "out of host memory");
  CHECK(capiGroup(0, 1, (uintptr_t)t));
  t->nullGroups++;
  return flagcxSuccess;
}

flagcxResult_t flagcxGroupEnd(flagcxComm_t comm) {
  USABLE("flagcxGroupEnd");
  if (comm != NULL) {
    CHECK(shimLive(comm, "flagcxGroupEnd"));
    CHECK(shimBind(comm));
    return capiGroup(comm->id, 0, 0);
  }
  struct shimThreadState *t = shimThread();
  if (t == NULL || t->nullGroups == 0)
    return FAIL((flagcxComm_t)NULL, "flagcxGroupEnd", flagcxInvalidUsage,
                "flagcxGroupEnd(NULL) without flagcxGroupStart(NULL) on this thread");
  t->nullGroups--;
  return capiGroup(0, 0, (uintptr_t)t);
}

/* ---- Memory ------------------------------------------------------------ */

flagcxResult_t flagcxMemAlloc(void **ptr, size_t size,
                              flagcxMemAllocator_t allocator) {
  USABLE("flagcxMemAlloc");
  NEED(ptr, "flagcxMemAlloc", "ptr");
  if (allocator == flagcxMemSHMEM)
    return UNSUPPORTED((flagcxComm_t)NULL, "flagcxMemAlloc",
                       "the NVSHMEM allocator (flagcxMemSHMEM)");
  if (size == 0)
    return FAIL((flagcxComm_t)NULL, "flagcxMemAlloc", flagcxInvalidArgument,
                "size is 0");
  return shimHandle.deviceMalloc(ptr, size, flagcxMemDevice, NULL);
}

flagcxResult_t flagcxMemFree(void *ptr, flagcxMemAllocator_t allocator) {
  USABLE("flagcxMemFree");
  if (allocator == flagcxMemSHMEM)
    return UNSUPPORTED((flagcxComm_t)NULL, "flagcxMemFree",
                       "the NVSHMEM allocator (flagcxMemSHMEM)");
  return shimHandle.deviceFree(ptr, flagcxMemDevice, NULL);
}

// Registration changes nothing in flagcx-go: collectives take any memory
// of the rank's backend. The handle is the buffer itself.
flagcxResult_t flagcxCommRegister(const flagcxComm_t comm, void *buff,
                                  size_t size, void **handle,
                                  flagcxMemAllocator_t allocator) {
  USABLE("flagcxCommRegister");
  (void)size;
  NEEDCOMM(comm, "flagcxCommRegister");
  NEED(handle, "flagcxCommRegister", "handle");
  if (allocator == flagcxMemSHMEM)
    return UNSUPPORTED(comm, "flagcxCommRegister",
                       "the NVSHMEM allocator (flagcxMemSHMEM)");
  *handle = buff;
  return flagcxSuccess;
}

flagcxResult_t flagcxCommDeregister(const flagcxComm_t comm, void *handle,
                                    flagcxMemAllocator_t allocator) {
  USABLE("flagcxCommDeregister");
  (void)handle, (void)allocator;
  NEEDCOMM(comm, "flagcxCommDeregister");
  return flagcxSuccess;
}
