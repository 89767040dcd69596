// onesided.c: one rank of the C API's one-sided test (capi/capi_test.go
// starts the ranks, one process each). Built with $(CC) against
// build/include/flagcx.h and flagcx_kernel.h and build/lib/libflagcx.so.
//
//   onesided <rank> <nranks> [unique id in hex]
//
// Rank 0 without an id makes one and prints "ID <hex>" first. Every rank
// calls every one-sided entry on memory of its backend (flagcxMemAlloc's,
// read and written through the device handle): puts, gets, batched puts,
// puts with signals and signals around a ring of ranks, unaligned offsets
// and lengths, to itself too, each byte of the destinations, the signal
// words FlagCX's layout puts them in and the completion counter checked
// exactly; then what must fail: bad arguments (each with its code and a
// message naming the entry), a window freed by its peer while in use, a
// stale window handle, and a peer that never signals (flagcxWaitSignal
// fails within the deadline of a communicator made with FLAGCX_TIMEOUT=2,
// naming that peer). It prints "PASS rank <r>: <n> checks" at the end; any
// mismatch prints "FAIL ..." and exits 1.

#include <flagcx.h>
#include <flagcx_kernel.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report.h"

// FlagCX's pointer types (its flagcx_net.h).
#define PTR_HOST 0x1
#define PTR_CUDA 0x2

static int next, prev;
static flagcxDeviceHandle_t dh;
static flagcxComm_t comm;
static flagcxStream_t stream;

#define OK(call)                                                               \
  CHECK_RESULT(#call, flagcxResult_t, flagcxSuccess, flagcxGetErrorString,     \
               flagcxGetLastError(comm), call)

// expectOf checks a call (what) failed with want and a last error of c
// naming the entry (what up to its parenthesis) and containing text.
static void expectOf(flagcxComm_t c, const char *what, flagcxResult_t got,
                     flagcxResult_t want, const char *text) {
  char entry[64];
  snprintf(entry, sizeof entry, "%.*s", (int)strcspn(what, "("), what);
  if (got != want)
    fail("%s returned %d, want %d (%s)", what, got, want,
         flagcxGetLastError(c));
  const char *msg = flagcxGetLastError(c);
  if (msg == NULL || strstr(msg, entry) == NULL || strstr(msg, text) == NULL)
    fail("%s: last error \"%s\" does not name %s and say \"%s\"", what,
         msg ? msg : "(null)", entry, text);
  checks++;
}

#define EXPECT(call, want, text) expectOf(comm, #call, (call), want, text)

/* ---- Memory of the rank's backend ---------------------------------------- */

static void *dalloc(size_t bytes) {
  void *p = NULL;
  OK(flagcxMemAlloc(&p, bytes, flagcxMemCCL));
  OK(dh->deviceMemset(p, 0, bytes, flagcxMemDevice, NULL));
  return p;
}

static void put(void *dev, const void *host, size_t bytes) {
  OK(dh->deviceMemcpy(dev, (void *)host, bytes, flagcxMemcpyHostToDevice,
                      NULL));
}

static void get(void *host, const void *dev, size_t bytes) {
  OK(dh->deviceMemcpy(host, (void *)dev, bytes, flagcxMemcpyDeviceToHost,
                      NULL));
}

// pattern is byte i of rank r's source window: distinct per rank and
// offset (never 0, so untouched zeros show).
static uint8_t pattern(int r, size_t i) {
  return (uint8_t)(1 + (r * 37 + i * 7 + i / 251) % 255);
}

// expectBytes compares a window of this rank (win bytes of device memory)
// with want: the bytes [off, off+n) are src's pattern from srcOff, the
// rest as the host copy shadow says.
static void expectWindow(const char *what, const void *win, const uint8_t *shadow,
                         size_t winBytes) {
  uint8_t *got = malloc(winBytes);
  get(got, win, winBytes);
  for (size_t i = 0; i < winBytes; i++)
    if (got[i] != shadow[i])
      fail("%s: byte %zu is %u, want %u", what, i, got[i], shadow[i]);
  free(got);
  checks++;
}

// land records in shadow what a transfer of n bytes of rank src's pattern
// from srcOff writes at dstOff.
static void land(uint8_t *shadow, size_t dstOff, int src, size_t srcOff,
                 size_t n) {
  for (size_t j = 0; j < n; j++)
    shadow[dstOff + j] = pattern(src, srcOff + j);
}

static void expectSignals(const char *what, const void *sig, const uint64_t *want) {
  uint64_t got[64];
  get(got, sig, 8 * nranks);
  for (int r = 0; r < nranks; r++)
    if (got[r] != want[r])
      fail("%s: signal word of rank %d is %llu, want %llu", what, r,
           (unsigned long long)got[r], (unsigned long long)want[r]);
  checks++;
}

static void barrier(void) { OK(flagcxBarrier(comm, stream)); }

// sigWant is what this rank's signal words must hold: word r counts rank
// r's signals since the words were last zeroed.
static uint64_t sigWant[64];

// arrive waits for one more signal from peer.
static void arrive(int peer) {
  flagcxWaitSignalDesc_t d = {++sigWant[peer], peer};
  OK(flagcxWaitSignal(1, &d, comm, stream));
  OK(dh->streamSynchronize(stream));
}

static uint64_t counter(void) {
  uint64_t v = 0;
  OK(flagcxReadCounter(comm, &v));
  return v;
}

// issued counts the one-sided operations this rank issued. The counter
// is global and completions arrive when they arrive, so a count read
// before an operation may still lack earlier ones: waits name the total.
static uint64_t issued;

// settle waits until every operation this rank issued is complete, and
// checks that the counter holds exactly that many.
static void settle(const char *after) {
  OK(flagcxWaitCounter(comm, issued));
  if (counter() != issued)
    fail("the counter is %llu %s, want %llu", (unsigned long long)counter(),
         after, (unsigned long long)issued);
}

/* ---- What must work ------------------------------------------------------ */

// The window size: odd, so that no transfer is aligned by accident.
enum { WIN = 4099 };

static void *A, *B, *C, *sig; // registrations 0, 1, 2; signal words
static flagcxWindow_t wB, wC; // handles of B and C
static uint8_t shadowA[WIN], shadowB[WIN], shadowC[WIN]; // what they hold

static void setup(void) {
  A = dalloc(WIN), B = dalloc(WIN), C = dalloc(WIN);
  sig = dalloc(8 * nranks);
  for (size_t i = 0; i < WIN; i++)
    shadowA[i] = pattern(rank, i);
  put(A, shadowA, WIN);
  uint64_t c0 = 1;
  OK(flagcxReadCounter(comm, &c0));
  if (c0 != 0)
    fail("the counter is %llu before any operation, want 0",
         (unsigned long long)c0);
  OK(flagcxOneSideRegister(comm, A, WIN)); // index 0
  OK(flagcxCommWindowRegister(comm, B, WIN, &wB, FLAGCX_WIN_COLL_SYMMETRIC,
                              flagcxMemCCL));
  OK(flagcxCommWindowRegister(comm, C, WIN, &wC, FLAGCX_WIN_DEFAULT, flagcxMemCCL));
  // A buffer registered again keeps its index, with nothing exchanged.
  OK(flagcxOneSideRegister(comm, B, WIN));
  OK(flagcxOneSideSignalRegister(comm, sig, 8 * nranks, PTR_CUDA));
  OK(flagcxOneSideSignalRegister(comm, sig, 8 * nranks, PTR_CUDA));
  barrier();
}

// testTransfers: each rank writes to next and reads from prev, through
// every transfer entry, and checks what landed in its own windows.
static void testTransfers(void) {
  // Put A[3, 1004) into next's B at 5, then a signal.
  OK(flagcxPut(comm, next, 3, 5, 1001, 0, 1));
  OK(flagcxSignal(next, 0, comm, stream));
  issued += 2;
  settle("after a put and a signal");
  arrive(prev);
  land(shadowB, 5, prev, 3, 1001);
  expectWindow("flagcxPut into B", B, shadowB, WIN);
  expectSignals("after flagcxSignal", sig, sigWant);
  barrier();

  // Get prev's A[7, 784) into B at 11 (prev's A is not written to).
  OK(flagcxGet(comm, prev, 7, 11, 777, 0, 1));
  issued += 1;
  settle("after a get");
  land(shadowB, 11, prev, 7, 777);
  expectWindow("flagcxGet into B", B, shadowB, WIN);
  barrier();

  // A batch into next's C: 1 byte, a 0-byte transfer, 64 bytes, 2048 bytes
  // across the end of what the first wrote; then a signal.
  size_t so[] = {1, 9, 50, 1000}, dO[] = {0, 17, 1, 999},
         sz[] = {1, 0, 64, 2048};
  int si[] = {0, 0, 0, 0}, di[] = {2, 2, 2, 2};
  OK(flagcxBatchPut(comm, next, so, dO, sz, si, di, 4));
  OK(flagcxBatchPut(comm, next, so, dO, sz, si, di, 0)); // nothing
  OK(flagcxSignal(next, 0, comm, stream));
  issued += 5; // each transfer of a batch counts, the 0-byte one too
  settle("after a batch of 4 and a signal");
  arrive(prev);
  for (int k = 0; k < 4; k++)
    land(shadowC, dO[k], prev, so[k], sz[k]);
  expectWindow("flagcxBatchPut into C", C, shadowC, WIN);
  barrier(); // before prev writes C again

  // PutSignal of 45 int32 from A at 123 into next's C at 3100 (through
  // C's handle), then one of 0 elements: a signal alone.
  OK(flagcxPutSignal((char *)A + 123, 45, flagcxInt32, next, wC, 3100, 0, comm,
                     stream));
  issued += 1;
  arrive(prev);
  land(shadowC, 3100, prev, 123, 180);
  expectWindow("flagcxPutSignal into C", C, shadowC, WIN);
  OK(flagcxPutSignal((char *)A + 123, 0, flagcxInt32, next, wC, 0, 0, comm,
                     stream));
  issued += 1;
  arrive(prev);
  expectSignals("after flagcxPutSignal", sig, sigWant);

  // To itself: a put from A into C and a signal.
  OK(flagcxPut(comm, rank, 0, 4000, 99, 0, 2));
  OK(flagcxSignal(rank, 0, comm, stream));
  issued += 2;
  land(shadowC, 4000, rank, 0, 99);
  expectWindow("flagcxPut to itself", C, shadowC, WIN);
  sigWant[rank] += 1;
  expectSignals("after flagcxSignal to itself", sig, sigWant);
  barrier();
}

// testSignalReset: the caller resets its signal words (as FlagCX's perf
// tests do between sizes), and the counts start again from 0; one wait
// takes several descriptors.
static void testSignalReset(void) {
  OK(dh->deviceMemset(sig, 0, 8 * nranks, flagcxMemDevice, NULL));
  memset(sigWant, 0, sizeof sigWant);
  barrier();
  flagcxWaitSignalDesc_t d[64];
  int n = 0;
  for (int r = 0; r < nranks; r++) {
    if (r == rank)
      continue;
    OK(flagcxSignal(r, 0, comm, stream));
    OK(flagcxSignal(r, 0, comm, stream));
    issued += 2;
    d[n].opCnt = 2, d[n].peer = r, n++;
    sigWant[r] = 2;
  }
  OK(flagcxWaitSignal(n, d, comm, stream));
  OK(flagcxWaitSignal(0, NULL, NULL, NULL)); // nothing to wait for
  expectSignals("after the reset", sig, sigWant);
  barrier();
}

// testDedupWindow: a window of a buffer flagcxOneSideRegister registered
// has its index (0); deregistering the window leaves the registration.
static void testDedupWindow(void) {
  flagcxWindow_t wA = NULL;
  OK(flagcxCommWindowRegister(comm, A, WIN, &wA, FLAGCX_WIN_COLL_SYMMETRIC,
                              flagcxMemCCL));
  // From A (found by its address) into next's A at 3500 through wA.
  OK(flagcxPutSignal((char *)A + 2, 7, flagcxChar, next, wA, 3500, 0, comm,
                     stream));
  issued += 1;
  arrive(prev);
  land(shadowA, 3500, prev, 2, 7);
  expectWindow("flagcxPutSignal through a window of a registered buffer", A,
               shadowA, WIN);
  barrier();
  OK(flagcxCommWindowDeregister(comm, wA, flagcxMemCCL));
  OK(flagcxPut(comm, next, 0, 0, 8, 0, 1));
  issued += 1;
  settle("after a put through a deregistered window's index");
  barrier();
  land(shadowB, 0, prev, 0, 8);
  expectWindow("flagcxPut after a window of index 0 was deregistered", B,
               shadowB, WIN);
  OK(flagcxCommWindowDeregister(comm, NULL, flagcxMemCCL)); // as FlagCX's
}

/* ---- What must fail -------------------------------------------------------- */

static void testBadArguments(void) {
  char host[64];
  flagcxWaitSignalDesc_t d = {1, nranks};
  size_t off = 0;
  int idx = 0;
  EXPECT(flagcxPut(NULL, next, 0, 0, 8, 0, 1), flagcxInvalidArgument,
         "comm is NULL");
  EXPECT(flagcxPut(comm, nranks, 0, 0, 8, 0, 1), flagcxInvalidArgument,
         "peer");
  EXPECT(flagcxPut(comm, next, 0, 0, 8, 99, 1), flagcxInvalidArgument,
         "srcMrIdx 99");
  EXPECT(flagcxGet(comm, prev, 0, 0, 8, 0, -1), flagcxInvalidArgument,
         "dstMrIdx -1");
  EXPECT(flagcxPut(comm, next, WIN - 4, 0, 8, 0, 1), flagcxInvalidArgument,
         "outside");
  EXPECT(flagcxGet(comm, prev, 0, WIN, 1, 0, 1), flagcxInvalidArgument,
         "outside");
  EXPECT(flagcxPut(comm, next, (size_t)1 << 62, 0, 8, 0, 1),
         flagcxInvalidArgument, "out of range");
  EXPECT(flagcxBatchPut(comm, next, NULL, &off, &off, &idx, &idx, 2),
         flagcxInvalidArgument, "srcOffsets");
  EXPECT(flagcxPutSignal(A, 1, flagcxChar, next, NULL, 0, 0, comm, stream),
         flagcxInvalidArgument, "peerWin is NULL");
  EXPECT(flagcxPutSignal(host, 1, flagcxChar, next, wB, 0, 0, comm, stream),
         flagcxInvalidArgument, "no registered buffer");
  EXPECT(flagcxPutSignal(A, 1, flagcxChar, next, wB, 0, 1, comm, stream),
         flagcxInvalidArgument, "flags are reserved");
  EXPECT(flagcxPutSignal(A, 1, (flagcxDataType_t)42, next, wB, 0, 0, comm,
                         stream),
         flagcxInvalidArgument, "data type");
  EXPECT(flagcxSignal(next, 2, comm, stream), flagcxInvalidArgument,
         "flags are reserved");
  EXPECT(flagcxSignal(-1, 0, comm, stream), flagcxInvalidArgument, "peer");
  EXPECT(flagcxWaitSignal(-1, &d, comm, stream), flagcxInvalidArgument,
         "nDesc is negative");
  EXPECT(flagcxWaitSignal(1, NULL, comm, stream), flagcxInvalidArgument,
         "signalDescs is NULL");
  EXPECT(flagcxWaitSignal(1, &d, comm, stream), flagcxInvalidArgument, "peer");
  EXPECT(flagcxReadCounter(comm, NULL), flagcxInvalidArgument,
         "count is NULL");
  flagcxWindow_t w = NULL, notNull = (flagcxWindow_t)host;
  EXPECT(flagcxCommWindowRegister(comm, B, WIN, NULL, 0, flagcxMemCCL),
         flagcxInvalidArgument, "win is NULL");
  EXPECT(flagcxCommWindowRegister(comm, B, WIN, &notNull, 0, flagcxMemCCL),
         flagcxInvalidArgument, "*win is not NULL");
  EXPECT(flagcxCommWindowRegister(comm, B, WIN, &w, 0x8, flagcxMemCCL),
         flagcxInvalidArgument, "winFlags");
  EXPECT(flagcxCommWindowRegister(comm, B, WIN, &w, 0, flagcxMemSHMEM),
         flagcxNotSupported, "NVSHMEM");
  EXPECT(flagcxCommWindowRegister(comm, NULL, WIN, &w, 0, flagcxMemCCL),
         flagcxInvalidArgument, "buff is NULL");
  EXPECT(flagcxOneSideRegister(comm, B, 0), flagcxInvalidArgument,
         "size is 0");
  EXPECT(flagcxOneSideSignalRegister(comm, sig, 8 * nranks, 3),
         flagcxInvalidArgument, "ptrType 3");
  EXPECT(flagcxOneSideSignalRegister(comm, C, 8 * nranks, PTR_CUDA),
         flagcxInvalidUsage, "already registered");
  if (w != NULL)
    fail("a refused flagcxCommWindowRegister set *win");
  // Staging: accepted (and unused on the host backend); 64 KiB at least.
  char *stg = malloc(64 << 10);
  EXPECT(flagcxOneSideStagingRegister(comm, stg, 1024), flagcxInvalidArgument,
         "too few");
  OK(flagcxOneSideStagingRegister(comm, stg, 64 << 10));
  OK(flagcxOneSideStagingRegister(comm, stg, 64 << 10));
  EXPECT(flagcxOneSideStagingRegister(comm, host, 64 << 10),
         flagcxInvalidUsage, "already registered");
  OK(flagcxOneSideStagingDeregister(comm));
  OK(flagcxOneSideStagingDeregister(comm));
  free(stg);
  // One-sided calls are not grouped.
  OK(flagcxGroupStart(comm));
  EXPECT(flagcxPut(comm, next, 0, 0, 8, 0, 1), flagcxInvalidUsage, "group");
  OK(flagcxGroupEnd(comm));
}

// testFreedWindow: rank 1 deregisters window D while rank 0 still puts
// into it: rank 0's operation fails with an error naming rank 1 and the
// freed window; rank 1's stale handle and index are refused.
static void testFreedWindow(void) {
  void *D = dalloc(256);
  flagcxWindow_t wD = NULL;
  OK(flagcxCommWindowRegister(comm, D, 256, &wD, FLAGCX_WIN_COLL_SYMMETRIC,
                              flagcxMemCCL));
  int iD = 3; // the fourth registration: A, B, C, D
  if (rank == 1)
    OK(flagcxCommWindowDeregister(comm, wD, flagcxMemCCL));
  barrier();
  if (rank == 0) {
    // The put goes out; rank 1's refusal comes back to the next call to
    // rank 1 or to WaitCounter.
    settle("before the put into a freed window");
    OK(flagcxPut(comm, 1, 0, 0, 64, 0, iD));
    issued += 1;
    expectOf(comm, "flagcxWaitCounter(after a put into a freed window)",
             flagcxWaitCounter(comm, issued), flagcxInvalidUsage,
             "freed its memory of the window");
    const char *msg = flagcxGetLastError(comm);
    if (strstr(msg, "rank 1") == NULL || strstr(msg, "window 3") == NULL)
      fail("the freed window's error does not name rank 1 and window 3: %s",
           msg);
    printf("rank 0: a put into the window rank 1 freed: %s\n", msg);
  }
  if (rank == 1) {
    EXPECT(flagcxCommWindowDeregister(comm, wD, flagcxMemCCL),
           flagcxInvalidUsage, "already deregistered");
    EXPECT(flagcxPutSignal(A, 1, flagcxChar, 0, wD, 0, 0, comm, stream),
           flagcxInvalidUsage, "already deregistered");
    EXPECT(flagcxPut(comm, 0, 0, 0, 8, iD, 1), flagcxInvalidUsage,
           "deregistered that window");
  } else {
    OK(flagcxCommWindowDeregister(comm, wD, flagcxMemCCL));
  }
  barrier();
  OK(flagcxMemFree(D, flagcxMemCCL));
  // The communicator goes on: a put and a signal around the ring.
  OK(flagcxPutSignal((char *)A + 10, 3, flagcxChar, next, wB, 3000, 0, comm,
                     stream));
  issued += 1;
  arrive(prev);
  land(shadowB, 3000, prev, 10, 3);
  expectWindow("flagcxPutSignal after a freed window", B, shadowB, WIN);
  barrier();
}

// newComm makes a communicator of every rank with FLAGCX_TIMEOUT=timeout:
// rank 0's unique id goes to the others by a broadcast on comm.
static flagcxComm_t newComm(const char *timeout) {
  flagcxUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0)
    OK(flagcxGetUniqueId(&id));
  void *d = dalloc(sizeof id);
  put(d, &id, sizeof id);
  OK(flagcxBroadcast(d, d, sizeof id, flagcxChar, 0, comm, stream));
  OK(dh->streamSynchronize(stream));
  get(&id, d, sizeof id);
  OK(flagcxMemFree(d, flagcxMemCCL));
  setenv("FLAGCX_TIMEOUT", timeout, 1);
  flagcxComm_t c = NULL;
  OK(flagcxCommInitRank(&c, nranks, &id, rank));
  unsetenv("FLAGCX_TIMEOUT");
  return c;
}

// testSilentPeer: on a communicator with a 2-second deadline, rank 0 waits
// for a signal rank 1 never sends: the wait fails with flagcxRemoteError
// naming rank 1; rank 1 meanwhile waits in a barrier of the first
// communicator. A window of that communicator is refused on this one.
static void testSilentPeer(void) {
  flagcxComm_t c2 = newComm("2");
  flagcxWaitSignalDesc_t d = {1, 1};
  expectOf(c2, "flagcxWaitSignal(before any registration)",
           flagcxWaitSignal(1, &d, c2, stream), flagcxInvalidUsage,
           "no window is registered");
  void *E = dalloc(64);
  flagcxWindow_t wE = NULL;
  OK(flagcxCommWindowRegister(c2, E, 64, &wE, 0, flagcxMemCCL));
  EXPECT(flagcxPutSignal(A, 1, flagcxChar, next, wE, 0, 0, comm, stream),
         flagcxInvalidArgument, "another communicator");
  if (rank == 0) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    flagcxResult_t r = flagcxWaitSignal(1, &d, c2, stream);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    expectOf(c2, "flagcxWaitSignal(a peer that never signals)", r,
             flagcxRemoteError, "signalled 0 times, 1 awaited");
    if (strstr(flagcxGetLastError(c2), "rank 1") == NULL)
      fail("the silent peer's error does not name rank 1: %s",
           flagcxGetLastError(c2));
    printf("rank 0: flagcxWaitSignal for silent rank 1 failed after %.1f s "
           "(FLAGCX_TIMEOUT=2): %s\n",
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
           flagcxGetLastError(c2));
  }
  barrier();
  OK(flagcxCommWindowDeregister(c2, wE, flagcxMemCCL));
  OK(flagcxCommDestroy(c2));
  OK(flagcxMemFree(E, flagcxMemCCL));
}

// finish returns the signal words to the communicator (its own, which no
// signal reached yet), frees the windows, and checks what is refused after.
static void finish(void) {
  OK(flagcxOneSideSignalDeregister(comm));
  OK(flagcxOneSideSignalDeregister(comm)); // nothing registered: success
  OK(flagcxMemFree(sig, flagcxMemCCL));
  memset(sigWant, 0, sizeof sigWant);
  OK(flagcxSignal(next, 0, comm, stream));
  arrive(prev);
  barrier();
  OK(flagcxCommWindowDeregister(comm, wB, flagcxMemCCL));
  OK(flagcxCommWindowDeregister(comm, wC, flagcxMemCCL));
  EXPECT(flagcxCommWindowDeregister(comm, wC, flagcxMemCCL),
         flagcxInvalidUsage, "already deregistered");
  barrier();
  OK(flagcxMemFree(A, flagcxMemCCL));
  OK(flagcxMemFree(B, flagcxMemCCL));
  OK(flagcxMemFree(C, flagcxMemCCL));
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <rank> <nranks> [unique id in hex]\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  if (nranks < 2 || nranks > 64 || rank < 0 || rank >= nranks) {
    fprintf(stderr, "rank %d of %d: want 0 <= rank < nranks, 2 <= nranks <= 64\n",
            rank, nranks);
    return 2;
  }
  next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  flagcxUniqueId id;
  if (argc > 3) {
    if (strlen(argv[3]) != 2 * sizeof id)
      fail("the unique id is not %zu hex digits", 2 * sizeof id);
    for (size_t i = 0; i < sizeof id; i++)
      sscanf(argv[3] + 2 * i, "%2hhx", (unsigned char *)&id.internal[i]);
  } else {
    OK(flagcxGetUniqueId(&id));
    printf("ID ");
    for (size_t i = 0; i < sizeof id; i++)
      printf("%02x", (unsigned char)id.internal[i]);
    printf("\n");
  }
  OK(flagcxDeviceHandleInit(&dh));
  int ndev = 0;
  OK(dh->getDeviceCount(&ndev));
  OK(dh->setDevice(rank % ndev));
  OK(flagcxCommInitRank(&comm, nranks, &id, rank));
  OK(dh->streamCreate(&stream));

  setup();
  testTransfers();
  testSignalReset();
  testDedupWindow();
  testBadArguments();
  testFreedWindow();
  testSilentPeer();
  finish();

  OK(dh->streamDestroy(stream));
  OK(flagcxCommDestroy(comm));
  comm = NULL;
  OK(flagcxDeviceHandleFree(dh));
  printf("PASS rank %d: %d checks\n", rank, checks);
  return 0;
}
