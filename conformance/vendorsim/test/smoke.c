/*
 * smoke.c: a C smoke test of the emulator, meant for AddressSanitizer and
 * valgrind runs (`make vendorsim-check`). The Go tests in this directory are
 * the real test suite; this program only drives the main paths once from C,
 * where memory errors are visible:
 *   - three forked ranks: allreduce in several chunks, grouped ring
 *     send/recv larger than the mailbox, alltoall, a size mismatch;
 *   - one thread driving two ranks through grouped init and collectives;
 *   - cudaMemcpy kinds and pointer attributes.
 * It declares the vendor functions itself (no CUDA or NCCL headers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm* ncclComm_t;
int ncclGetUniqueId(ncclUniqueId*);
int ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
int ncclCommDestroy(ncclComm_t);
int ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);
int ncclAlltoAll(const void*, void*, size_t, int, ncclComm_t, void*);
int ncclSend(const void*, size_t, int, int, ncclComm_t, void*);
int ncclRecv(void*, size_t, int, int, ncclComm_t, void*);
int ncclGroupStart(void);
int ncclGroupEnd(void);
const char* ncclGetLastError(ncclComm_t);
int ncclCommGetAsyncError(ncclComm_t, int*);
int cudaDeviceSynchronize(void);
int cudaMalloc(void**, size_t);
int cudaFree(void*);
int cudaMallocHost(void**, size_t);
int cudaFreeHost(void*);
int cudaMemcpy(void*, const void*, size_t, int);
struct attrs { int type; int device; void* dp; void* hp; };
int cudaPointerGetAttributes(struct attrs*, const void*);

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "smoke: %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond,  \
              ncclGetLastError(NULL));                                       \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

enum { N = 3, COUNT = 1000, BIG = 300000 };

static void rank_main(ncclUniqueId id, int rank) {
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, N, id, rank) == 0);

  float *buf, host[COUNT];
  CHECK(cudaMalloc((void**)&buf, COUNT * sizeof(float)) == 0);
  for (int i = 0; i < COUNT; i++) host[i] = (float)(rank + i);
  CHECK(cudaMemcpy(buf, host, sizeof host, 1) == 0);
  CHECK(ncclAllReduce(buf, buf, COUNT, 7, 0, comm, NULL) == 0); /* in place, several chunks */
  CHECK(cudaMemcpy(host, buf, sizeof host, 2) == 0);
  for (int i = 0; i < COUNT; i++) CHECK(host[i] == (float)(3 * i + 3));

  /* Ring: everyone sends first, inside one group. */
  char *sbuf, *rbuf;
  CHECK(cudaMalloc((void**)&sbuf, BIG) == 0 && cudaMalloc((void**)&rbuf, BIG) == 0);
  memset(sbuf, 'a' + rank, BIG);
  CHECK(ncclGroupStart() == 0);
  CHECK(ncclSend(sbuf, BIG, 0, (rank + 1) % N, comm, NULL) == 0);
  CHECK(ncclRecv(rbuf, BIG, 0, (rank + N - 1) % N, comm, NULL) == 0);
  CHECK(ncclGroupEnd() == 0);
  CHECK(cudaDeviceSynchronize() == 0); /* the group ran on the default stream's worker */
  for (int i = 0; i < BIG; i++) CHECK(rbuf[i] == 'a' + (rank + N - 1) % N);

  /* alltoall of ints */
  int *a2a, ha[N * 5];
  CHECK(cudaMalloc((void**)&a2a, sizeof ha) == 0);
  for (int p = 0; p < N; p++)
    for (int j = 0; j < 5; j++) ha[p * 5 + j] = rank * 100 + p * 10 + j;
  CHECK(cudaMemcpy(a2a, ha, sizeof ha, 1) == 0);
  CHECK(ncclAlltoAll(a2a, a2a, 5, 2, comm, NULL) == 0);
  CHECK(cudaMemcpy(ha, a2a, sizeof ha, 2) == 0);
  for (int p = 0; p < N; p++)
    for (int j = 0; j < 5; j++) CHECK(ha[p * 5 + j] == p * 100 + rank * 10 + j);

  /* Size mismatch between rank 0 and rank 1: rank 1 must see invalid usage,
   * asynchronously (the receive is enqueued, its stream fails). */
  if (rank == 0) {
    CHECK(ncclSend(sbuf, 100, 0, 1, comm, NULL) == 0);
  } else if (rank == 1) {
    int async = 0;
    CHECK(ncclRecv(rbuf, 50, 0, 0, comm, NULL) == 0);
    CHECK(cudaDeviceSynchronize() == 719); /* cudaErrorLaunchFailure */
    CHECK(ncclCommGetAsyncError(comm, &async) == 0 && async == 5);
    CHECK(strstr(ncclGetLastError(comm), "size mismatch") != NULL);
  }
  cudaFree(buf);
  cudaFree(sbuf);
  cudaFree(rbuf);
  cudaFree(a2a);
  CHECK(ncclCommDestroy(comm) == 0);
  exit(0);
}

static void one_thread_two_ranks(void) {
  ncclUniqueId id;
  ncclComm_t c[2];
  CHECK(ncclGetUniqueId(&id) == 0);
  CHECK(ncclGroupStart() == 0);
  for (int r = 0; r < 2; r++) CHECK(ncclCommInitRank(&c[r], 2, id, r) == 0);
  CHECK(ncclGroupEnd() == 0);
  double* b[2];
  for (int r = 0; r < 2; r++) {
    double h[4] = {r + 1.0, r + 2.0, r + 3.0, r + 4.0};
    CHECK(cudaMalloc((void**)&b[r], sizeof h) == 0);
    CHECK(cudaMemcpy(b[r], h, sizeof h, 1) == 0);
  }
  CHECK(ncclGroupStart() == 0);
  for (int r = 0; r < 2; r++) CHECK(ncclAllReduce(b[r], b[r], 4, 8, 2 /*max*/, c[r], NULL) == 0);
  CHECK(ncclGroupEnd() == 0);
  for (int r = 0; r < 2; r++) {
    double h[4];
    CHECK(cudaMemcpy(h, b[r], sizeof h, 2) == 0);
    for (int i = 0; i < 4; i++) CHECK(h[i] == i + 2.0);
    cudaFree(b[r]);
    CHECK(ncclCommDestroy(c[r]) == 0);
  }
}

static void memory_checks(void) {
  void *d, *h;
  char plain[64];
  struct attrs a;
  CHECK(cudaMalloc(&d, 64) == 0 && cudaMallocHost(&h, 64) == 0);
  CHECK(cudaPointerGetAttributes(&a, (char*)d + 10) == 0 && a.type == 2);
  CHECK(cudaPointerGetAttributes(&a, h) == 0 && a.type == 1);
  CHECK(cudaPointerGetAttributes(&a, plain) == 0 && a.type == 0);
  CHECK(cudaMemcpy(d, plain, 64, 2) == 1); /* wrong direction */
  CHECK(cudaMemcpy(d, plain, 65, 1) == 1); /* past the allocation */
  CHECK(cudaMemcpy(d, h, 64, 1) == 0);
  CHECK(cudaFree(h) == 1 && cudaFreeHost(h) == 0 && cudaFree(d) == 0);
}

int main(void) {
  /* Small slots and mailboxes so that chunking and streaming are exercised. */
  setenv("FLAGCX_VENDORSIM_SLOT_BYTES", "512", 1);
  setenv("FLAGCX_VENDORSIM_MAILBOX_BYTES", "4096", 1);
  memory_checks();
  one_thread_two_ranks();

  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id) == 0);
  pid_t pids[N];
  for (int r = 0; r < N; r++) {
    pids[r] = fork();
    CHECK(pids[r] >= 0);
    if (pids[r] == 0) rank_main(id, r);
  }
  int failed = 0;
  for (int r = 0; r < N; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "smoke: rank %d failed (status 0x%x)\n", r, st);
      failed = 1;
    }
  }
  if (failed) return 1;
  printf("vendorsim smoke test: OK\n");
  return 0;
}
