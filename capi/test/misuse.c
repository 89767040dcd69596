// misuse.c: libflagcx.so used as it must not be, or cannot be; each case
// must end with one clear error, never a hang (capi/capi_test.go runs it).
//
//   misuse fork        a child forked after the library loaded: every call
//                      is refused at once with flagcxInvalidUsage and a
//                      message; the parent carries on
//   misuse alone <n>   rank 0 of n whose peers never come: flagcxRemoteError
//                      (the test reads the message, which names them)
//   misuse destroyed   calls with a destroyed communicator: flagcxInvalidUsage
//   misuse badenv      flagcxGetUniqueId under a malformed FLAGCX_TIMEOUT
//                      (set by the test): flagcxInvalidArgument
//   misuse hugecount   collectives and a send of 2^40 elements on 64-byte
//                      buffers: flagcxInvalidArgument, the buffer too small
//                      (on the host backend)
//   misuse newcomm     flagcxCommShrink and flagcxCommSplit with bad
//                      arguments, each after another failure of the
//                      communicator: prints "<call>: <result>: <its last
//                      error>" per call (the test reads the messages)
//
// Prints "PASS <case>" at the end, "FAIL ..." and exit 1 on a mismatch.
// The backend is whatever FLAGCX_BACKEND says.

#include <flagcx.h>

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  _exit(1);
}

#define OK(call)                                                               \
  do {                                                                         \
    flagcxResult_t r_ = (call);                                                \
    if (r_ != flagcxSuccess)                                                   \
      fail("%s returned %d: %s", #call, r_, flagcxGetLastError(NULL));         \
  } while (0)

// expect checks that call returned want and that the process's last error
// contains each of the NULL-terminated texts.
static void expectOf(const char *what, flagcxResult_t got, flagcxResult_t want,
                     ...) {
  if (got != want)
    fail("%s returned %d, want %d (%s): %s", what, got, want,
         flagcxGetErrorString(want), flagcxGetLastError(NULL));
  const char *msg = flagcxGetLastError(NULL);
  va_list ap;
  va_start(ap, want);
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
    if (msg == NULL || strstr(msg, s) == NULL)
      fail("%s: last error \"%s\" does not say \"%s\"", what,
           msg ? msg : "(null)", s);
  va_end(ap);
}
#define EXPECT(call, want, ...) expectOf(#call, (call), want, __VA_ARGS__, NULL)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// oneRank makes a communicator of one rank and checks an AllReduce on it.
static flagcxComm_t oneRank(flagcxDeviceHandle_t dh) {
  flagcxUniqueId id;
  flagcxComm_t comm;
  OK(flagcxGetUniqueId(&id));
  OK(flagcxCommInitRank(&comm, 1, &id, 0));
  int in[2] = {3, 4}, out[2] = {0, 0};
  void *dev;
  OK(dh->deviceMalloc(&dev, sizeof in, flagcxMemDevice, NULL));
  OK(dh->deviceMemcpy(dev, in, sizeof in, flagcxMemcpyHostToDevice, NULL));
  OK(flagcxAllReduce(dev, dev, 2, flagcxInt32, flagcxSum, comm, NULL));
  OK(dh->deviceMemcpy(out, dev, sizeof out, flagcxMemcpyDeviceToHost, NULL));
  OK(dh->deviceFree(dev, flagcxMemDevice, NULL));
  if (out[0] != 3 || out[1] != 4)
    fail("a one-rank AllReduce gave %d %d, want 3 4", out[0], out[1]);
  return comm;
}

#define FORKED(call) EXPECT(call, flagcxInvalidUsage, "fork", "exec")

// forkedChild runs in the child: the first call must come back at once (the
// alarm kills a child that blocks), then every kind of entry is refused.
static void forkedChild(flagcxDeviceHandle_t dh, flagcxComm_t comm) {
  alarm(5); // a call that enters the Go runtime here never returns
  flagcxUniqueId id;
  double t0 = now();
  flagcxResult_t r = flagcxGetUniqueId(&id);
  double took = now() - t0;
  expectOf("flagcxGetUniqueId in the child", r, flagcxInvalidUsage,
           "flagcxGetUniqueId: invalid usage: ", "fork()", "exec",
           "load the library only after the fork", NULL);
  printf("child: flagcxGetUniqueId returned %d in %.3f s: %s\n", r, took,
         flagcxGetLastError(NULL));
  int x;
  void *p = NULL;
  flagcxStream_t s = NULL;
  flagcxEvent_t e = NULL;
  flagcxComm_t c2 = NULL;
  flagcxDeviceHandle_t dh2 = NULL;
  FORKED(flagcxGetVersion(&x));
  FORKED(flagcxCommInitRank(&c2, 1, &id, 0));
  FORKED(flagcxDeviceHandleInit(&dh2));
  FORKED(flagcxAllReduce(&x, &x, 1, flagcxInt32, flagcxSum, comm, NULL));
  FORKED(flagcxSend(&x, 1, flagcxInt32, 0, comm, NULL));
  FORKED(flagcxGroupStart(NULL));
  FORKED(flagcxBarrier(comm, NULL));
  FORKED(flagcxCommCount(comm, &x));
  FORKED(flagcxCommGetAsyncError(comm, (flagcxResult_t *)&x));
  FORKED(flagcxMemAlloc(&p, 64, flagcxMemCCL));
  FORKED(flagcxCommWindowRegister(comm, &x, sizeof x, NULL, 0, flagcxMemCCL));
  FORKED(flagcxPut(comm, 0, 0, 0, 1, 0, 0));
  flagcxWaitSignalDesc_t wd = {1, 0};
  FORKED(flagcxWaitSignal(1, &wd, comm, NULL));
  FORKED(flagcxCommDestroy(comm));
  FORKED(flagcxCommAbort(comm));
  FORKED(dh->deviceMalloc(&p, 64, flagcxMemDevice, NULL));
  FORKED(dh->setDevice(0));
  FORKED(dh->getDevice(&x));
  FORKED(dh->getVendor((char[64]){0}));
  FORKED(dh->streamCreate(&s));
  FORKED(dh->streamCopy(&s, NULL));
  FORKED(dh->eventCreate(&e, flagcxEventDefault));
  FORKED(dh->ipcMemHandleClose(NULL));
  if (strcmp(flagcxGetErrorString(flagcxInvalidUsage),
             "invalid usage (a call out of order or on a finished "
             "communicator)") != 0)
    fail("flagcxGetErrorString changed in the child");
  printf("child: every entry refused\n");
  fflush(stdout);
  _exit(0);
}

// forkCase forks after the library has a backend, a communicator and the
// Go runtime's threads running; the parent must be unaffected.
static void forkCase(void) {
  flagcxDeviceHandle_t dh;
  OK(flagcxDeviceHandleInit(&dh));
  flagcxComm_t comm = oneRank(dh);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0)
    fail("fork failed");
  if (pid == 0)
    forkedChild(dh, comm);
  int st;
  if (waitpid(pid, &st, 0) != pid)
    fail("waitpid failed");
  if (WIFSIGNALED(st))
    fail("the forked child was killed by signal %d%s", WTERMSIG(st),
         WTERMSIG(st) == SIGALRM ? ": a call blocked for 5 s instead of "
                                   "returning an error at once"
                                 : "");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail("the forked child failed (status %d)", st);
  flagcxCommDestroy(oneRank(dh)); // the parent's library still works
  OK(flagcxCommDestroy(comm));
  OK(flagcxDeviceHandleFree(dh));
  printf("PASS fork\n");
}

// aloneCase is rank 0 of n whose peers never start.
static void aloneCase(int n) {
  flagcxUniqueId id;
  flagcxComm_t comm;
  OK(flagcxGetUniqueId(&id));
  double t0 = now();
  EXPECT(flagcxCommInitRank(&comm, n, &id, 0), flagcxRemoteError,
         "flagcxCommInitRank: rank 0 of ", "did not join");
  printf("alone: flagcxCommInitRank returned after %.1f s: %s\n", now() - t0,
         flagcxGetLastError(NULL));
  printf("PASS alone\n");
}

#define DESTROYED(call)                                                        \
  EXPECT(call, flagcxInvalidUsage, "the communicator was already destroyed",   \
         "flagcxCommInitRank")

static void destroyedCase(void) {
  flagcxDeviceHandle_t dh;
  OK(flagcxDeviceHandleInit(&dh));
  flagcxComm_t comm = oneRank(dh);
  OK(flagcxCommDestroy(comm));
  int x = 1;
  DESTROYED(flagcxAllReduce(&x, &x, 1, flagcxInt32, flagcxSum, comm, NULL));
  EXPECT(flagcxAllReduce(&x, &x, 1, flagcxInt32, flagcxSum, comm, NULL),
         flagcxInvalidUsage, "flagcxAllReduce: invalid usage: ");
  DESTROYED(flagcxRecv(&x, 1, flagcxInt32, 0, comm, NULL));
  DESTROYED(flagcxBarrier(comm, NULL));
  DESTROYED(flagcxCommCount(comm, &x));
  DESTROYED(flagcxGroupStart(comm));
  DESTROYED(flagcxGroupEnd(comm));
  DESTROYED(flagcxCommDestroy(comm));
  DESTROYED(flagcxCommAbort(comm));
  flagcxComm_t aborted = oneRank(dh);
  OK(flagcxCommAbort(aborted));
  DESTROYED(flagcxBroadcast(&x, &x, 1, flagcxInt32, 0, aborted, NULL));
  OK(flagcxDeviceHandleFree(dh));
  printf("PASS destroyed\n");
}

static void badEnvCase(void) {
  flagcxUniqueId id;
  EXPECT(flagcxGetUniqueId(&id), flagcxInvalidArgument,
         "flagcxGetUniqueId: invalid argument: ", "FLAGCX_TIMEOUT=\"soon\"",
         "allowed is a positive number of seconds");
  printf("PASS badenv\n");
}

// hugeCountCase: a count far beyond the buffers. C passes no lengths, but
// the memory mapped at a buffer bounds it: the buffer too small is
// reported as that, never as send and recv overlapping (the spans the
// count implies do), and nothing is read.
static void hugeCountCase(void) {
  flagcxDeviceHandle_t dh;
  OK(flagcxDeviceHandleInit(&dh));
  flagcxComm_t comm = oneRank(dh);
  void *a, *b;
  OK(dh->deviceMalloc(&a, 64, flagcxMemDevice, NULL));
  OK(dh->deviceMalloc(&b, 64, flagcxMemDevice, NULL));
  const size_t huge = (size_t)1 << 40;
  EXPECT(flagcxAllReduce(a, b, huge, flagcxFloat32, flagcxSum, comm, NULL),
         flagcxInvalidArgument,
         "flagcxAllReduce: invalid argument: send buffer holds at most ",
         "but 1099511627776 elements of float32 need 4398046511104: pass a "
         "buffer of at least 4398046511104 bytes or a smaller count");
  printf("hugecount: %s\n", flagcxGetLastError(NULL));
  EXPECT(flagcxAllReduce(a, a, huge, flagcxFloat32, flagcxSum, comm, NULL),
         flagcxInvalidArgument, "send buffer holds at most ");
  EXPECT(flagcxBroadcast(a, b, huge, flagcxInt8, 0, comm, NULL),
         flagcxInvalidArgument, "send buffer holds at most ");
  EXPECT(flagcxSend(a, huge, flagcxInt8, 0, comm, NULL), flagcxInvalidArgument,
         "flagcxSend: invalid argument: buffer holds at most ",
         "but 1099511627776 elements of int8 need 1099511627776");
  OK(dh->deviceFree(a, flagcxMemDevice, NULL));
  OK(dh->deviceFree(b, flagcxMemDevice, NULL));
  OK(flagcxCommDestroy(comm));
  OK(flagcxDeviceHandleFree(dh));
  printf("PASS hugecount\n");
}

// ON_COMM prints what call returned and comm's last error. An unrelated
// failure of comm comes first (an AllReduce of an invalid data type), so
// that a call which does not record its own error shows that one instead.
#define ON_COMM(comm, call)                                                    \
  do {                                                                         \
    int x_ = 0;                                                                \
    if (flagcxAllReduce(&x_, &x_, 1, (flagcxDataType_t)99, flagcxSum, comm,    \
                        NULL) != flagcxInvalidArgument)                        \
      fail("an AllReduce of data type 99 was not refused");                    \
    flagcxResult_t r_ = (call);                                                \
    printf("%s: %d: %s\n", #call, r_, flagcxGetLastError(comm));              \
  } while (0)

static void newcommCase(void) {
  flagcxDeviceHandle_t dh;
  OK(flagcxDeviceHandleInit(&dh));
  flagcxComm_t comm = oneRank(dh);
  flagcxComm_t nc = NULL;
  int ex = 0;
  ON_COMM(comm, flagcxCommShrink(comm, &ex, 0, NULL));
  ON_COMM(comm, flagcxCommShrink(comm, NULL, 1, &nc));
  ON_COMM(comm, flagcxCommShrink(comm, &ex, -1, &nc));
  ON_COMM(comm, flagcxCommSplit(comm, 0, 0, NULL));
  ON_COMM(NULL, flagcxCommShrink(NULL, &ex, 0, NULL));
  OK(flagcxCommDestroy(comm));
  OK(flagcxDeviceHandleFree(dh));
  printf("PASS newcomm\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "fork") == 0)
    forkCase();
  else if (argc == 3 && strcmp(argv[1], "alone") == 0)
    aloneCase(atoi(argv[2]));
  else if (argc == 2 && strcmp(argv[1], "destroyed") == 0)
    destroyedCase();
  else if (argc == 2 && strcmp(argv[1], "badenv") == 0)
    badEnvCase();
  else if (argc == 2 && strcmp(argv[1], "newcomm") == 0)
    newcommCase();
  else if (argc == 2 && strcmp(argv[1], "hugecount") == 0)
    hugeCountCase();
  else {
    fprintf(stderr, "usage: %s fork | alone <nranks> | destroyed | badenv | "
            "hugecount | newcomm\n",
            argv[0]);
    return 2;
  }
  return 0;
}
