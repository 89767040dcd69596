// threads.c: ranks as threads of one process (capi/capi_test.go runs it).
//
//   threads <nranks>
//
// FlagCX lets one process drive several ranks, a thread each. Every thread
// sets its own current device (setDevice is per thread, as in vendor
// runtimes), joins the communicator, checks flagcxCommGetDeviceNumber and
// getDevice, runs an AllReduce and a send/recv ring in a
// flagcxGroupStart(NULL) group of its own (groups are per thread), with
// exact results. Then, on the host backend, thread 0 blocks in an AllReduce of a
// second communicator that rank 1 never joins, and the main thread aborts
// it: the call returns an error instead of hanging. Prints "PASS threads"
// at the end; "FAIL ..." and exit 1 otherwise.
//
// With CAPI_TEST_CUDART (candidate paths of the CUDA runtime the nvidia
// plugin loaded, colon-separated), threads set their device as PyTorch
// does, with cudaSetDevice itself instead of the device handle: the
// library must still create streams, memory and the communicator there.

#include <flagcx.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { COUNT = 4099, MAXRANKS = 8 };

static int nranks, ndev;
static flagcxDeviceHandle_t dh;
static flagcxUniqueId id, id2;
static flagcxComm_t second[MAXRANKS];
static volatile int blocked; // thread 0 is in the AllReduce to abort
static int (*cudaSetDevice)(int); // the runtime's own, with CAPI_TEST_CUDART

// findCudaSetDevice finds cudaSetDevice in the first loaded candidate.
static void findCudaSetDevice(const char *paths) {
  char *list = strdup(paths);
  for (char *p = strtok(list, ":"); p != NULL; p = strtok(NULL, ":")) {
    void *h = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL && (cudaSetDevice = (int (*)(int))dlsym(h, "cudaSetDevice")) != NULL)
      break;
  }
  free(list);
  if (cudaSetDevice == NULL) {
    printf("FAIL: none of CAPI_TEST_CUDART=%s is loaded\n", paths);
    exit(1);
  }
}

#define CHECK(r, call)                                                         \
  do {                                                                         \
    flagcxResult_t r_ = (call);                                                \
    if (r_ != flagcxSuccess) {                                                 \
      printf("FAIL rank %d: %s returned %d: %s\n", r, #call, r_,               \
             flagcxGetLastError(NULL));                                        \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static void *rankMain(void *arg) {
  int r = (int)(long)arg, dev = r % ndev, got = -1;
  if (cudaSetDevice != NULL) {
    if (cudaSetDevice(dev) != 0) {
      printf("FAIL rank %d: cudaSetDevice(%d) failed\n", r, dev);
      exit(1);
    }
  } else
    CHECK(r, dh->setDevice(dev));
  flagcxComm_t comm;
  CHECK(r, flagcxCommInitRank(&comm, nranks, &id, r));
  CHECK(r, flagcxCommGetDeviceNumber(comm, &got));
  char vendor[64];
  CHECK(r, dh->getVendor(vendor));
  int onHost = strcmp(vendor, "HOST") == 0;
  if (!onHost && got != dev) {
    printf("FAIL rank %d: flagcxCommGetDeviceNumber is %d, want %d\n", r, got, dev);
    exit(1);
  }
  CHECK(r, dh->getDevice(&got));
  if (got != dev) {
    printf("FAIL rank %d: getDevice on this thread is %d, want %d\n", r, got, dev);
    exit(1);
  }
  flagcxStream_t s;
  CHECK(r, dh->streamCreate(&s));
  int *in = malloc(COUNT * 4), *out = malloc(COUNT * 4);
  void *send, *recv;
  CHECK(r, dh->deviceMalloc(&send, COUNT * 4, flagcxMemDevice, NULL));
  CHECK(r, dh->deviceMalloc(&recv, COUNT * 4, flagcxMemDevice, NULL));
  for (int i = 0; i < COUNT; i++)
    in[i] = r * 100000 + i;
  CHECK(r, dh->deviceMemcpy(send, in, COUNT * 4, flagcxMemcpyHostToDevice, NULL));
  CHECK(r, flagcxAllReduce(send, recv, COUNT, flagcxInt32, flagcxSum, comm, s));
  CHECK(r, dh->streamSynchronize(s));
  CHECK(r, dh->deviceMemcpy(out, recv, COUNT * 4, flagcxMemcpyDeviceToHost, NULL));
  for (int i = 0; i < COUNT; i++) {
    int want = nranks * i + 100000 * nranks * (nranks - 1) / 2;
    if (out[i] != want) {
      printf("FAIL rank %d: allreduce element %d is %d, want %d\n", r, i, out[i], want);
      exit(1);
    }
  }
  int next = (r + 1) % nranks, prev = (r + nranks - 1) % nranks;
  // Every thread opens a group on NULL at once: groups are per thread.
  CHECK(r, flagcxGroupStart(NULL));
  CHECK(r, flagcxSend(send, COUNT, flagcxInt32, next, comm, s));
  CHECK(r, flagcxRecv(recv, COUNT, flagcxInt32, prev, comm, s));
  CHECK(r, flagcxGroupEnd(NULL));
  CHECK(r, dh->streamSynchronize(s));
  CHECK(r, dh->deviceMemcpy(out, recv, COUNT * 4, flagcxMemcpyDeviceToHost, NULL));
  for (int i = 0; i < COUNT; i++)
    if (out[i] != prev * 100000 + i) {
      printf("FAIL rank %d: ring element %d is %d, want %d\n", r, i, out[i], prev * 100000 + i);
      exit(1);
    }

  if (onHost && nranks >= 2 && r < 2) {
    // A second communicator of ranks 0 and 1; rank 1 then stays away.
    CHECK(r, flagcxCommInitRank(&second[r], 2, &id2, r));
    if (r == 0) {
      blocked = 1;
      flagcxResult_t res = flagcxAllReduce(send, recv, COUNT, flagcxInt32,
                                           flagcxSum, second[0], s);
      if (res == flagcxSuccess) {
        printf("FAIL rank 0: an AllReduce that rank 1 never joined succeeded\n");
        exit(1);
      }
      printf("aborted AllReduce returned %d: %s\n", res, flagcxGetLastError(NULL));
    }
  }
  CHECK(r, dh->deviceFree(send, flagcxMemDevice, NULL));
  CHECK(r, dh->deviceFree(recv, flagcxMemDevice, NULL));
  CHECK(r, dh->streamDestroy(s));
  CHECK(r, flagcxCommDestroy(comm));
  free(in), free(out);
  return NULL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (nranks < 1 || nranks > MAXRANKS) {
    fprintf(stderr, "usage: %s <nranks 1..%d>\n", argv[0], MAXRANKS);
    return 2;
  }
  CHECK(-1, flagcxDeviceHandleInit(&dh));
  CHECK(-1, dh->getDeviceCount(&ndev));
  if (getenv("CAPI_TEST_CUDART") != NULL)
    findCudaSetDevice(getenv("CAPI_TEST_CUDART"));
  CHECK(-1, flagcxGetUniqueId(&id));
  CHECK(-1, flagcxGetUniqueId(&id2));
  pthread_t t[MAXRANKS];
  for (int r = 0; r < nranks; r++)
    pthread_create(&t[r], NULL, rankMain, (void *)(long)r);
  char vendor[64];
  CHECK(-1, dh->getVendor(vendor));
  if (strcmp(vendor, "HOST") == 0 && nranks >= 2) {
    while (!blocked)
      usleep(1000);
    usleep(300 * 1000); // rank 0 is waiting for rank 1 now
    CHECK(-1, flagcxCommAbort(second[0]));
  }
  for (int r = 0; r < nranks; r++)
    pthread_join(t[r], NULL);
  if (second[1] != NULL)
    CHECK(-1, flagcxCommAbort(second[1]));
  CHECK(-1, flagcxDeviceHandleFree(dh));
  printf("PASS threads: %d ranks%s\n", nranks,
         cudaSetDevice ? ", devices set with cudaSetDevice" : "");
  return 0;
}
