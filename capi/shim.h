// shim.h: what shim.c and shim_comm.c share. Everything here is hidden
// from the library's exported symbols.
#ifndef CAPI_SHIM_H_
#define CAPI_SHIM_H_

#include <stdint.h>
#include <time.h>

#include "include/flagcx.h"
#include "_cgo_export.h"

#define HIDDEN __attribute__((visibility("hidden")))

// A communicator: its number in the Go registry and where it runs. Destroy
// and abort keep the struct (destroyed set, on the list of dead ones) so
// that a call with the stale handle is refused with a message instead of
// reading freed memory.
struct flagcxComm {
  uint64_t id;
  int dev;
  int onDevice;
  int destroyed;
  struct flagcxComm *nextDead;
};

// A window (flagcxCommWindowRegister): its communicator's number and the
// index of its registration (onesided.go). Deregistration keeps the struct
// (deregistered set, on a list) so that a stale handle is refused.
struct flagcxWindow {
  uint64_t comm;
  int index;
  int deregistered;
  struct flagcxWindow *nextDead;
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
    CHECK(shimLive(comm, entry));                                              \
  } while (0)

// shimLive refuses a communicator already destroyed or aborted.
HIDDEN flagcxResult_t shimLive(flagcxComm_t comm, const char *entry);
// shimBury marks comm destroyed and keeps its struct (see shim.c).
HIDDEN void shimBury(flagcxComm_t comm);

// shimForked is set in a child made by fork() after the library loaded
// (a pthread_atfork handler): the Go runtime's threads stayed in the
// parent, so a call into Go there would block for ever. Every entry
// checks it first, in C, and fails at once instead (USABLE).
HIDDEN extern int shimForked;
// shimForkedFail records entry as the call refused in a forked child and
// returns flagcxInvalidUsage; flagcxGetLastError then says why, in C.
HIDDEN flagcxResult_t shimForkedFail(const char *entry);
// shimForkedError is flagcxGetLastError's text in a forked child.
HIDDEN const char *shimForkedError(void);
#define USABLE(entry)                                                          \
  do {                                                                         \
    if (__atomic_load_n(&shimForked, __ATOMIC_RELAXED))                        \
      return shimForkedFail(entry);                                            \
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
