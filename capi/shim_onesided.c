// shim_onesided.c: FlagCX's one-sided entries (registration, windows,
// put/get, signals, the completion counter) over exports_onesided.go;
// docs/c-api.md, "One-sided operations", says what each does here.

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "include/flagcx_kernel.h"
#include "shim.h"

// capiWaitSignal reads the descriptors as Go's waitDesc.
_Static_assert(sizeof(flagcxWaitSignalDesc_t) == 16 &&
                   offsetof(flagcxWaitSignalDesc_t, opCnt) == 0 &&
                   offsetof(flagcxWaitSignalDesc_t, peer) == 8,
               "flagcxWaitSignalDesc_t is not FlagCX's layout");

/* ---- Windows ----------------------------------------------------------- */

// Deregistered windows keep their struct, as destroyed communicators do
// (shim.c), so that a stale handle is refused instead of freed memory read.
static struct flagcxWindow *deadWins;
static pthread_mutex_t deadWinMu = PTHREAD_MUTEX_INITIALIZER;

static void buryWindow(flagcxWindow_t win) {
  pthread_mutex_lock(&deadWinMu);
  win->deregistered = 1;
  win->nextDead = deadWins;
  deadWins = win;
  pthread_mutex_unlock(&deadWinMu);
}

// liveWindow refuses a window handle that comm cannot use.
static flagcxResult_t liveWindow(flagcxComm_t comm, flagcxWindow_t win,
                                 const char *entry) {
  if (__atomic_load_n(&win->deregistered, __ATOMIC_RELAXED))
    return FAIL(comm, entry, flagcxInvalidUsage,
                "the window was already deregistered "
                "(flagcxCommWindowDeregister): register the memory again");
  if (win->comm != comm->id)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "the window belongs to another communicator");
  return flagcxSuccess;
}

flagcxResult_t flagcxCommWindowRegister(flagcxComm_t comm, void *buff,
                                        size_t size, flagcxWindow_t *win,
                                        int winFlags,
                                        flagcxMemAllocator_t allocator) {
  USABLE("flagcxCommWindowRegister");
  static const char entry[] = "flagcxCommWindowRegister";
  NEEDCOMM(comm, entry);
  if (win == NULL)
    return FAIL(comm, entry, flagcxInvalidArgument, "win is NULL");
  if (*win != NULL)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "*win is not NULL: pass a flagcxWindow_t set to NULL, which "
                "the call fills");
  if (allocator == flagcxMemSHMEM)
    return UNSUPPORTED(comm, entry, "the NVSHMEM allocator (flagcxMemSHMEM)");
  if ((winFlags & ~(FLAGCX_WIN_DEFAULT | FLAGCX_WIN_COLL_SYMMETRIC)) != 0)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "winFlags has bits other than FLAGCX_WIN_COLL_SYMMETRIC");
  CHECK(shimBind(comm));
  flagcxWindow_t w = calloc(1, sizeof *w);
  if (w == NULL)
    return FAIL(comm, entry, flagcxSystemError, "out of host memory");
  int index = -1;
  flagcxResult_t r =
      capiOneSideRegister(comm->id, (char *)entry, buff, size, 1, &index);
  if (r != flagcxSuccess) {
    free(w);
    return r;
  }
  w->comm = comm->id;
  w->index = index;
  *win = w;
  return flagcxSuccess;
}

flagcxResult_t flagcxCommWindowDeregister(flagcxComm_t comm, flagcxWindow_t win,
                                          flagcxMemAllocator_t allocator) {
  USABLE("flagcxCommWindowDeregister");
  static const char entry[] = "flagcxCommWindowDeregister";
  if (win == NULL)
    return flagcxSuccess; // as FlagCX's
  NEEDCOMM(comm, entry);
  if (allocator == flagcxMemSHMEM)
    return UNSUPPORTED(comm, entry, "the NVSHMEM allocator (flagcxMemSHMEM)");
  CHECK(liveWindow(comm, win, entry));
  CHECK(shimBind(comm));
  flagcxResult_t r = capiWindowDeregister(comm->id, win->index);
  buryWindow(win);
  return r;
}

/* ---- Registration ------------------------------------------------------ */

flagcxResult_t flagcxOneSideRegister(flagcxComm_t comm, void *buff,
                                     size_t size) {
  USABLE("flagcxOneSideRegister");
  static const char entry[] = "flagcxOneSideRegister";
  NEEDCOMM(comm, entry);
  CHECK(shimBind(comm));
  int index = -1;
  return capiOneSideRegister(comm->id, (char *)entry, buff, size, 0, &index);
}

flagcxResult_t flagcxOneSideSignalRegister(const flagcxComm_t comm, void *buff,
                                           size_t size, int ptrType) {
  USABLE("flagcxOneSideSignalRegister");
  NEEDCOMM(comm, "flagcxOneSideSignalRegister");
  CHECK(shimBind(comm));
  return capiSignalRegister(comm->id, buff, size, ptrType);
}

flagcxResult_t flagcxOneSideSignalDeregister(flagcxComm_t comm) {
  USABLE("flagcxOneSideSignalDeregister");
  NEEDCOMM(comm, "flagcxOneSideSignalDeregister");
  CHECK(shimBind(comm));
  return capiSignalDeregister(comm->id);
}

// FlagCX declares flagcxOneSideSignalDeregister outside its extern "C"
// block (flagcx_kernel_internal.h), so C++ programs built against FlagCX's
// own headers call it by its C++ name: the library answers to that too.
flagcxResult_t shimSignalDeregisterCxx(flagcxComm_t comm) __asm__(
    "_Z29flagcxOneSideSignalDeregisterP10flagcxComm");
flagcxResult_t shimSignalDeregisterCxx(flagcxComm_t comm) {
  return flagcxOneSideSignalDeregister(comm);
}

flagcxResult_t flagcxOneSideStagingRegister(const flagcxComm_t comm, void *buff,
                                            size_t size) {
  USABLE("flagcxOneSideStagingRegister");
  NEEDCOMM(comm, "flagcxOneSideStagingRegister");
  return capiStaging(comm->id, 1, buff, size);
}

flagcxResult_t flagcxOneSideStagingDeregister(const flagcxComm_t comm) {
  USABLE("flagcxOneSideStagingDeregister");
  NEEDCOMM(comm, "flagcxOneSideStagingDeregister");
  return capiStaging(comm->id, 0, NULL, 0);
}

/* ---- Transfers --------------------------------------------------------- */

flagcxResult_t flagcxGet(flagcxComm_t comm, int peer, size_t srcOffset,
                         size_t dstOffset, size_t size, int srcMrIdx,
                         int dstMrIdx) {
  USABLE("flagcxGet");
  NEEDCOMM(comm, "flagcxGet");
  CHECK(shimBind(comm));
  return capiRMA(comm->id, "flagcxGet", 2, peer, 1, &srcOffset, &dstOffset,
                 &size, &srcMrIdx, &dstMrIdx);
}

flagcxResult_t flagcxPut(flagcxComm_t comm, int peer, size_t srcOffset,
                         size_t dstOffset, size_t size, int srcMrIdx,
                         int dstMrIdx) {
  USABLE("flagcxPut");
  NEEDCOMM(comm, "flagcxPut");
  CHECK(shimBind(comm));
  return capiRMA(comm->id, "flagcxPut", 0, peer, 1, &srcOffset, &dstOffset,
                 &size, &srcMrIdx, &dstMrIdx);
}

flagcxResult_t flagcxBatchPut(flagcxComm_t comm, int peer,
                              const size_t *srcOffsets,
                              const size_t *dstOffsets, const size_t *sizes,
                              const int *srcMrIdxs, const int *dstMrIdxs,
                              size_t count) {
  USABLE("flagcxBatchPut");
  NEEDCOMM(comm, "flagcxBatchPut");
  CHECK(shimBind(comm));
  return capiRMA(comm->id, "flagcxBatchPut", 1, peer, count,
                 (size_t *)srcOffsets, (size_t *)dstOffsets, (size_t *)sizes,
                 (int *)srcMrIdxs, (int *)dstMrIdxs);
}

flagcxResult_t flagcxPutSignal(const void *localbuff, size_t count,
                               flagcxDataType_t datatype, int peer,
                               flagcxWindow_t peerWin, size_t peerWinOffset,
                               unsigned int flags, flagcxComm_t comm,
                               flagcxStream_t stream) {
  USABLE("flagcxPutSignal");
  static const char entry[] = "flagcxPutSignal";
  NEEDCOMM(comm, entry);
  if (peerWin == NULL)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "peerWin is NULL: pass the window flagcxCommWindowRegister "
                "made of the destination");
  CHECK(liveWindow(comm, peerWin, entry));
  if (flags != 0)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "flags are reserved: pass 0");
  CHECK(shimBind(comm));
  return capiPutSignal(comm->id, (void *)localbuff, count, datatype, peer,
                       peerWin->index, peerWinOffset, shimStream(stream));
}

flagcxResult_t flagcxSignal(int peer, unsigned int flags, flagcxComm_t comm,
                            flagcxStream_t stream) {
  USABLE("flagcxSignal");
  NEEDCOMM(comm, "flagcxSignal");
  if (flags != 0)
    return FAIL(comm, "flagcxSignal", flagcxInvalidArgument,
                "flags are reserved: pass 0");
  CHECK(shimBind(comm));
  return capiSignal(comm->id, peer, shimStream(stream));
}

flagcxResult_t flagcxWaitSignal(int nDesc,
                                const flagcxWaitSignalDesc_t *signalDescs,
                                flagcxComm_t comm, flagcxStream_t stream) {
  USABLE("flagcxWaitSignal");
  static const char entry[] = "flagcxWaitSignal";
  if (nDesc == 0)
    return flagcxSuccess; // as FlagCX's, whatever the other arguments
  NEEDCOMM(comm, entry);
  if (nDesc < 0)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "nDesc is negative: pass how many descriptors signalDescs "
                "holds");
  if (signalDescs == NULL)
    return FAIL(comm, entry, flagcxInvalidArgument,
                "signalDescs is NULL with nDesc > 0");
  CHECK(shimBind(comm));
  return capiWaitSignal(comm->id, nDesc, (void *)signalDescs,
                        shimStream(stream));
}

flagcxResult_t flagcxReadCounter(flagcxComm_t comm, uint64_t *count) {
  USABLE("flagcxReadCounter");
  NEEDCOMM(comm, "flagcxReadCounter");
  if (count == NULL)
    return FAIL(comm, "flagcxReadCounter", flagcxInvalidArgument,
                "count is NULL");
  return capiReadCounter(comm->id, count);
}

flagcxResult_t flagcxWaitCounter(flagcxComm_t comm, uint64_t target) {
  USABLE("flagcxWaitCounter");
  NEEDCOMM(comm, "flagcxWaitCounter");
  CHECK(shimBind(comm));
  return capiWaitCounter(comm->id, target);
}
