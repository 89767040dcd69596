// shim.h: what shim.c and shim_comm.c share. Everything here is hidden
// from the library's exported symbols.
#ifndef CAPI_SHIM_H_
#define CAPI_SHIM_H_

#include <stdint.h>
#include <time.h>

#include "include/flagcx.h"
#include "_cgo_export.h"

#define HIDDEN __attribute__((visibility("hidden")))

// A communicator: its number in the Go registry and where it runs.
struct flagcxComm {
  uint64_t id;
  int dev;
  int onDevice;
};

// base comes first: FlagCX's adaptors and its torch plugin read a stream
// as *(cudaStream_t *)stream.
struct flagcxStream {
  uintptr_t base;
};

struct flagcxEvent {
  uintptr_t base;
  struct timespec at; // when recorded, on the host backend
};

#define FAIL(comm, entry, code, msg)                                           \
  ((flagcxResult_t)capiFail((comm) ? (comm)->id : 0, (char *)(entry), (code),  \
                            (char *)(msg)))
#define UNSUPPORTED(comm, entry, what)                                         \
  ((flagcxResult_t)capiNotSupported((comm) ? (comm)->id : 0, (char *)(entry),  \
                                    (char *)(what)))
#define CHECK(call)                                                            \
  do {                                                                         \
    flagcxResult_t r_ = (flagcxResult_t)(call);                                \
    if (r_ != flagcxSuccess)                                                   \
      return r_;                                                               \
  } while (0)
#define NEED(ptr, entry, what)                                                 \
  do {                                                                         \
    if ((ptr) == NULL)                                                         \
      return FAIL((flagcxComm_t)NULL, entry, flagcxInvalidArgument,            \
                  what " is NULL");                                            \
  } while (0)
#define NEEDCOMM(comm, entry)                                                  \
  do {                                                                         \
    if ((comm) == NULL)                                                        \
      return FAIL((flagcxComm_t)NULL, entry, flagcxInvalidArgument,            \
                  "comm is NULL: pass a communicator from flagcxCommInitRank"); \
  } while (0)

// What the library keeps per calling thread.
struct shimThreadState {
  int curDev;           // the device last set here through setDevice
  int nullGroups;       // open flagcxGroupStart(NULL) groups of this thread
  char lastError[4096]; // flagcxGetLastError's text
};

// shimThread is the calling thread's state (NULL when out of memory).
HIDDEN struct shimThreadState *shimThread(void);

// shimGroupKey names the calling thread's flagcxGroupStart(NULL) group to
// the Go side: 0 when the thread has none open.
HIDDEN uintptr_t shimGroupKey(void);

// shimSyncEnv hands the process's current FLAGCX_* variables to the Go
// side (entries that read them call it first).
HIDDEN void shimSyncEnv(void);

// shimReady chooses the process's backend on first use.
HIDDEN flagcxResult_t shimReady(const char *entry);
// shimDevice is the calling thread's current device (0 when never set).
HIDDEN int shimDevice(void);
// shimStream is a stream's native handle (0 for NULL).
HIDDEN uintptr_t shimStream(flagcxStream_t s);
// shimBind makes comm's device current on the calling thread, as core's
// device ranks need (vendor runtimes keep the current device per thread).
HIDDEN flagcxResult_t shimBind(flagcxComm_t comm);
// shimHandle is the device handle's table.
HIDDEN extern const struct flagcxDeviceHandle shimHandle;

#endif
