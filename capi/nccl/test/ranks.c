// ranks.c: one rank of the NCCL drop-in's test (capi/nccl_test.go starts the
// ranks, one process each). Written against NCCL's own nccl.h
// (capi/nccl/test/nccl-2.28.9), linked against flagcx-go's
// build/lib/libnccl.so.2 and the emulated CUDA runtime.
//
//   ranks <rank> <nranks> [unique id in hex]   every entry on nranks ranks
//   ranks initall <ndev>                        ncclCommInitAll in one process
//   ranks multi <n> [host]                      one thread drives n ranks
//
// Rank 0 without an id makes one and prints "ID <hex>" first. Every result
// is checked bit for bit; any mismatch prints "FAIL ..." and exits 1; the
// end prints "PASS rank <r>: <n> checks".

#include <nccl.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../test/report.h"

static ncclComm_t comm;
static cudaStream_t stream;

#define OK(call)                                                               \
  CHECK_RESULT(#call, ncclResult_t, ncclSuccess, ncclGetErrorString,           \
               ncclGetLastError(NULL), call)

#define CUDA(call)                                                             \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess)                                                     \
      fail("%s returned %d: %s", #call, e_, cudaGetErrorString(e_));           \
  } while (0)

// expect checks a call failed with want and that ncclGetLastError(c) names
// entry and says text.
static void expectFailOf(ncclComm_t c, const char *what, ncclResult_t got,
                         ncclResult_t want, const char *entry,
                         const char *text) {
  if (got != want)
    fail("%s returned %d, want %d", what, got, want);
  const char *msg = ncclGetLastError(c);
  if (msg == NULL || strstr(msg, entry) == NULL || strstr(msg, text) == NULL)
    fail("%s: last error \"%s\" does not name %s and say \"%s\"", what,
         msg ? msg : "(null)", entry, text);
  checks++;
}
#define EXPECT(c, call, want, entry, text)                                     \
  expectFailOf(c, #call, (call), want, entry, text)

/* ---- Device memory ------------------------------------------------------ */

static void *dalloc(size_t bytes) {
  void *p = NULL;
  CUDA(cudaMalloc(&p, bytes));
  return p;
}

static void put(void *dev, const void *host, size_t bytes) {
  CUDA(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
}

// expectBits compares n 4-byte elements of device memory with want, bit for
// bit, once the stream is done.
static void expectBits(const char *what, void *dev, const void *want, int n) {
  CUDA(cudaStreamSynchronize(stream));
  uint32_t *got = calloc(n, 4);
  const uint32_t *w = want;
  CUDA(cudaMemcpy(got, dev, (size_t)n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (got[i] != w[i])
      fail("%s: element %d is 0x%08x, want 0x%08x", what, i, got[i], w[i]);
  free(got);
  checks++;
}

// value is rank r's element i: small integers, so every sum, product, max,
// min and average below is exact in float32 and int32.
static int value(int r, int i) { return (r + 1) * 1000 + i % 97; }

enum { COUNT = 1031 };

/* ---- Collectives -------------------------------------------------------- */

static void testAllReduce(void) {
  float *in = malloc(COUNT * 4), *want = malloc(COUNT * 4);
  int *iin = malloc(COUNT * 4), *imax = malloc(COUNT * 4),
      *imin = malloc(COUNT * 4);
  for (int i = 0; i < COUNT; i++) {
    in[i] = (float)(nranks * value(rank, i)); // avg of multiples of n: exact
    iin[i] = value(rank, i);
    want[i] = 0;
    for (int r = 0; r < nranks; r++)
      want[i] += (float)(nranks * value(r, i));
    imax[i] = value(nranks - 1, i);
    imin[i] = value(0, i);
  }
  void *send = dalloc(COUNT * 4), *recv = dalloc(COUNT * 4);
  put(send, in, COUNT * 4);
  OK(ncclAllReduce(send, recv, COUNT, ncclFloat32, ncclSum, comm, stream));
  expectBits("AllReduce float sum", recv, want, COUNT);
  for (int i = 0; i < COUNT; i++)
    want[i] /= (float)nranks;
  OK(ncclAllReduce(send, recv, COUNT, ncclFloat, ncclAvg, comm, stream));
  expectBits("AllReduce float avg", recv, want, COUNT);
  put(send, iin, COUNT * 4);
  OK(ncclAllReduce(send, recv, COUNT, ncclInt32, ncclMax, comm, stream));
  expectBits("AllReduce int max", recv, imax, COUNT);
  OK(ncclAllReduce(send, send, COUNT, ncclInt, ncclMin, comm, stream));
  expectBits("AllReduce int min in place", send, imin, COUNT);
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  free(in), free(want), free(iin), free(imax), free(imin);
}

static void testRooted(void) {
  int *in = malloc(COUNT * 4), *want = malloc(COUNT * 4);
  int root = 1 % nranks;
  for (int i = 0; i < COUNT; i++) {
    in[i] = value(rank, i);
    want[i] = 0;
    for (int r = 0; r < nranks; r++)
      want[i] += value(r, i);
  }
  void *send = dalloc(COUNT * 4), *recv = dalloc(COUNT * 4);
  put(send, in, COUNT * 4);
  OK(ncclReduce(send, rank == root ? recv : NULL, COUNT, ncclInt32, ncclSum,
                root, comm, stream));
  if (rank == root)
    expectBits("Reduce int sum", recv, want, COUNT);
  for (int i = 0; i < COUNT; i++)
    want[i] = value(nranks - 1, i);
  OK(ncclBroadcast(send, recv, COUNT, ncclInt32, nranks - 1, comm, stream));
  expectBits("Broadcast", recv, want, COUNT);
  for (int i = 0; i < COUNT; i++)
    want[i] = value(0, i);
  OK(ncclBcast(send, COUNT, ncclInt32, 0, comm, stream));
  expectBits("Bcast in place", send, want, COUNT);
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  free(in), free(want);
}

// testGathers: AllGather (out of place and in place), ReduceScatter,
// AlltoAll, Gather and Scatter; element i of block b names its origin.
static void testGathers(void) {
  int n = nranks, c = COUNT;
  int *in = malloc((size_t)n * c * 4), *want = malloc((size_t)n * c * 4);
  void *send = dalloc((size_t)n * c * 4), *recv = dalloc((size_t)n * c * 4);
  for (int i = 0; i < n * c; i++)
    in[i] = value(rank, i);
  put(send, in, (size_t)n * c * 4);
  for (int b = 0; b < n; b++)
    for (int i = 0; i < c; i++)
      want[b * c + i] = value(b, i);
  OK(ncclAllGather(send, recv, c, ncclInt32, comm, stream));
  expectBits("AllGather", recv, want, n * c);
  put((int *)recv + rank * c, in, (size_t)c * 4);
  OK(ncclAllGather((int *)recv + rank * c, recv, c, ncclInt32, comm, stream));
  expectBits("AllGather in place", recv, want, n * c);
  OK(ncclGather(send, rank == 0 ? recv : NULL, c, ncclInt32, 0, comm, stream));
  if (rank == 0)
    expectBits("Gather", recv, want, n * c);
  for (int i = 0; i < c; i++) {
    want[i] = 0;
    for (int r = 0; r < n; r++)
      want[i] += value(r, rank * c + i);
  }
  OK(ncclReduceScatter(send, recv, c, ncclInt32, ncclSum, comm, stream));
  expectBits("ReduceScatter", recv, want, c);
  for (int i = 0; i < c; i++)
    want[i] = value(n - 1, rank * c + i);
  OK(ncclScatter(rank == n - 1 ? send : NULL, recv, c, ncclInt32, n - 1, comm,
                 stream));
  expectBits("Scatter", recv, want, c);
  for (int b = 0; b < n; b++)
    for (int i = 0; i < c; i++)
      want[b * c + i] = value(b, rank * c + i);
  OK(ncclAlltoAll(send, recv, c, ncclInt32, comm, stream));
  expectBits("AlltoAll", recv, want, n * c);
  // fp8 moves as bytes: 4 fp8 elements are one 32-bit word here.
  for (int b = 0; b < n; b++)
    for (int i = 0; i < c; i++)
      want[b * c + i] = value(b, i);
  OK(ncclAllGather(send, recv, 4 * c, ncclFloat8e4m3, comm, stream));
  expectBits("AllGather fp8", recv, want, n * c);
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  free(in), free(want);
}

/* ---- Send, receive and groups ------------------------------------------ */

// testSendRecv: a ring and an exchange with every peer, each in one group,
// and a group that ncclGroupSimulateEnd refuses because it holds operations.
static void testSendRecv(void) {
  int n = nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int *in = malloc((size_t)n * COUNT * 4), *want = malloc((size_t)n * COUNT * 4);
  void *send = dalloc((size_t)n * COUNT * 4), *recv = dalloc((size_t)n * COUNT * 4);
  for (int i = 0; i < n * COUNT; i++)
    in[i] = value(rank, i);
  put(send, in, (size_t)n * COUNT * 4);
  for (int i = 0; i < COUNT; i++)
    want[i] = value(prev, i);
  OK(ncclGroupStart());
  OK(ncclSend(send, COUNT, ncclInt32, next, comm, stream));
  OK(ncclRecv(recv, COUNT, ncclInt32, prev, comm, stream));
  OK(ncclGroupEnd());
  expectBits("send/recv ring", recv, want, COUNT);

  OK(ncclGroupStart());
  for (int p = 0; p < n; p++) {
    OK(ncclSend((int *)send + p * COUNT, COUNT, ncclInt32, p, comm, stream));
    OK(ncclRecv((int *)recv + p * COUNT, COUNT, ncclInt32, p, comm, stream));
  }
  OK(ncclGroupEnd());
  for (int p = 0; p < n; p++)
    for (int i = 0; i < COUNT; i++)
      want[p * COUNT + i] = value(p, rank * COUNT + i);
  expectBits("send/recv with every peer", recv, want, n * COUNT);

  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  OK(ncclGroupStart());
  OK(ncclGroupSimulateEnd(&sim));
  if (sim.estimatedTime != 0.0f)
    fail("ncclGroupSimulateEnd of an empty group: estimatedTime %g", sim.estimatedTime);
  OK(ncclGroupStart());
  OK(ncclSend(send, COUNT, ncclInt32, next, comm, stream));
  OK(ncclRecv(recv, COUNT, ncclInt32, prev, comm, stream));
  EXPECT(NULL, ncclGroupSimulateEnd(&sim), ncclInvalidUsage,
         "ncclGroupSimulateEnd", "end it with ncclGroupEnd");
  OK(ncclGroupEnd());
  for (int i = 0; i < COUNT; i++)
    want[i] = value(prev, i);
  expectBits("send/recv after a refused simulation", recv, want, COUNT);
  CUDA(cudaFree(send));
  CUDA(cudaFree(recv));
  free(in), free(want);
}

// testGroupedCollectives: collectives inside a group (torch's coalescing
// manager), alone and with sends and receives.
static void testGroupedCollectives(void) {
  int n = nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int *in = malloc(COUNT * 4), *want = malloc(COUNT * 4), *ring = malloc(COUNT * 4);
  void *a = dalloc(COUNT * 4), *b = dalloc(COUNT * 4), *c = dalloc(COUNT * 4);
  for (int i = 0; i < COUNT; i++) {
    in[i] = value(rank, i);
    want[i] = 0;
    for (int r = 0; r < n; r++)
      want[i] += value(r, i);
    ring[i] = value(prev, i);
  }
  put(a, in, COUNT * 4);
  put(b, in, COUNT * 4);
  OK(ncclGroupStart());
  OK(ncclAllReduce(a, a, COUNT, ncclInt32, ncclSum, comm, stream));
  OK(ncclAllReduce(b, b, COUNT, ncclInt32, ncclSum, comm, stream));
  OK(ncclGroupEnd());
  expectBits("grouped AllReduce 1", a, want, COUNT);
  expectBits("grouped AllReduce 2", b, want, COUNT);
  put(a, in, COUNT * 4);
  OK(ncclGroupStart());
  OK(ncclSend(a, COUNT, ncclInt32, next, comm, stream));
  OK(ncclRecv(c, COUNT, ncclInt32, prev, comm, stream));
  OK(ncclAllReduce(b, b, COUNT, ncclInt32, ncclMin, comm, stream));
  OK(ncclGroupEnd());
  expectBits("grouped recv beside an AllReduce", c, ring, COUNT);
  expectBits("grouped AllReduce beside send/recv", b, want, COUNT);
  CUDA(cudaFree(a));
  CUDA(cudaFree(b));
  CUDA(cudaFree(c));
  free(in), free(want), free(ring);
}

/* ---- Pre-multiplied sums ------------------------------------------------ */

// expectBytes compares bytes of device memory with want once the stream is
// done.
static void expectBytes(const char *what, const void *dev, const void *want,
                        size_t bytes) {
  CUDA(cudaStreamSynchronize(stream));
  unsigned char *got = malloc(bytes);
  const unsigned char *w = want;
  CUDA(cudaMemcpy(got, dev, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < bytes; i++)
    if (got[i] != w[i])
      fail("%s: byte %zu is 0x%02x, want 0x%02x", what, i, got[i], w[i]);
  free(got);
  checks++;
}

static const ncclDataType_t premulTypes[] = {
    ncclInt8,  ncclUint8,   ncclInt32,   ncclUint32,  ncclInt64,
    ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};

static size_t typeSize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}

static int isFloat(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 ||
         t == ncclBfloat16;
}

// store writes v as element i of type t; v is exact in t (floats: small
// multiples of 1/2; integers wrap as the device's do).
static void store(ncclDataType_t t, void *buf, size_t i, double v) {
  float f = (float)v;
  uint32_t fb;
  memcpy(&fb, &f, 4);
  uint16_t h = 0;
  switch (t) {
  case ncclInt8: ((int8_t *)buf)[i] = (int8_t)(int64_t)v; break;
  case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
  case ncclInt32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
  case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
  case ncclInt64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v; break;
  case ncclFloat32: ((float *)buf)[i] = f; break;
  case ncclFloat64: ((double *)buf)[i] = v; break;
  case ncclBfloat16: ((uint16_t *)buf)[i] = (uint16_t)(fb >> 16); break;
  case ncclFloat16:
    if (fb << 1 != 0) // normal values only: exact ones need no rounding
      h = (uint16_t)((fb >> 16 & 0x8000) |
                     ((((fb >> 23) & 0xff) - 127 + 15) << 10) |
                     ((fb >> 13) & 0x3ff));
    ((uint16_t *)buf)[i] = h;
    break;
  default: fail("store: type %d", t);
  }
}

// premulScalar is rank r's scalar: integers any, floats powers of two.
static double premulScalar(ncclDataType_t t, int r, int round) {
  static const double fs[] = {1, 2, 0.5};
  return isFloat(t) ? fs[(r + round) % 3] : (double)(r + 2 + round);
}

static double premulInput(int r, size_t i) { return (double)(r + 1 + i % 5); }

// A pre-multiplied reduction issued, to be checked once it ran.
struct premulCall {
  void *send, *recv, *want;
  size_t bytes;
  int mine; // this rank gets a result
  char label[160];
};

// premulIssue issues coll ("allreduce", "reduce", "reducescatter") of type
// t with op, whose scalar on rank r is premulScalar(t, r, round).
static struct premulCall premulIssue(const char *what, const char *coll,
                                     ncclDataType_t t, ncclRedOp_t op,
                                     int round) {
  size_t es = typeSize(t), c = 257, n = (size_t)nranks;
  int rs = strcmp(coll, "reducescatter") == 0, root = 1 % nranks;
  int reduce = strcmp(coll, "reduce") == 0;
  size_t sendN = rs ? c * n : c;
  struct premulCall pc = {dalloc(sendN * es), dalloc(c * es), malloc(c * es),
                          c * es, !reduce || rank == root, ""};
  void *in = malloc(sendN * es);
  for (size_t i = 0; i < sendN; i++)
    store(t, in, i, premulInput(rank, i));
  for (size_t i = 0; i < c; i++) {
    double sum = 0;
    size_t at = rs ? (size_t)rank * c + i : i;
    for (int r = 0; r < nranks; r++)
      sum += premulScalar(t, r, round) * premulInput(r, at);
    store(t, pc.want, i, sum);
  }
  put(pc.send, in, sendN * es);
  free(in);
  snprintf(pc.label, sizeof pc.label, "%s: %s of type %d", what, coll, t);
  if (rs)
    OK(ncclReduceScatter(pc.send, pc.recv, c, t, op, comm, stream));
  else if (reduce)
    OK(ncclReduce(pc.send, pc.recv, c, t, op, root, comm, stream));
  else
    OK(ncclAllReduce(pc.send, pc.recv, c, t, op, comm, stream));
  return pc;
}

static void premulVerify(struct premulCall pc) {
  if (pc.mine)
    expectBytes(pc.label, pc.recv, pc.want, pc.bytes);
  CUDA(cudaFree(pc.send));
  CUDA(cudaFree(pc.recv));
  free(pc.want);
}

static void premulCheck(const char *what, const char *coll, ncclDataType_t t,
                        ncclRedOp_t op, int round) {
  premulVerify(premulIssue(what, coll, t, op, round));
}

// testPreMulSum: ncclRedOpCreatePreMulSum with host scalars (read at
// creation) and device scalars (read at each collective) of every type,
// with AllReduce, Reduce and ReduceScatter, in a group, and the errors of
// destroyed, unknown and mismatched ops.
static void testPreMulSum(void) {
  for (size_t k = 0; k < sizeof premulTypes / sizeof premulTypes[0]; k++) {
    ncclDataType_t t = premulTypes[k];
    unsigned char host[8], *dev = dalloc(8);
    ncclRedOp_t hop, dop;
    store(t, host, 0, premulScalar(t, rank, 0));
    OK(ncclRedOpCreatePreMulSum(&hop, host, t, ncclScalarHostImmediate, comm));
    store(t, host, 0, 7); // read at creation: this value is never used
    if (hop < ncclNumOps)
      fail("ncclRedOpCreatePreMulSum gave op %d, one of the built-in ops", hop);
    store(t, host, 0, premulScalar(t, rank, 1));
    put(dev, host, typeSize(t));
    OK(ncclRedOpCreatePreMulSum(&dop, dev, t, ncclScalarDevice, comm));
    if (dop == hop)
      fail("two ops of ncclRedOpCreatePreMulSum are both %d", dop);
    premulCheck("host scalar", "allreduce", t, hop, 0);
    premulCheck("device scalar", "allreduce", t, dop, 1);
    store(t, host, 0, premulScalar(t, rank, 2));
    put(dev, host, typeSize(t)); // read at the collective: the new value
    premulCheck("device scalar, changed", "allreduce", t, dop, 2);
    premulCheck("host scalar", "reduce", t, hop, 0);
    premulCheck("host scalar", "reducescatter", t, hop, 0);
    premulCheck("device scalar", "reducescatter", t, dop, 2);
    OK(ncclGroupStart());
    struct premulCall g1 = premulIssue("grouped host scalar", "allreduce", t, hop, 0);
    struct premulCall g2 = premulIssue("grouped device scalar", "reducescatter", t, dop, 2);
    OK(ncclGroupEnd());
    premulVerify(g1);
    premulVerify(g2);
    OK(ncclRedOpDestroy(hop, comm));
    OK(ncclRedOpDestroy(dop, comm));
    EXPECT(comm, ncclAllReduce(dev, dev, 1, t, hop, comm, stream),
           ncclInvalidArgument, "flagcxAllReduce", "was destroyed");
    EXPECT(comm, ncclRedOpDestroy(dop, comm), ncclInvalidArgument,
           "flagcxRedOpDestroy", "not one of this communicator");
    CUDA(cudaFree(dev));
  }
  float one = 1;
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &one, ncclFloat32, ncclScalarHostImmediate, comm));
  void *d = dalloc(16);
  EXPECT(comm, ncclAllReduce(d, d, 4, ncclInt32, op, comm, stream),
         ncclInvalidArgument, "flagcxAllReduce", "was made for float32");
  EXPECT(comm, ncclAllReduce(NULL, d, 4, ncclFloat32, op, comm, stream),
         ncclInvalidArgument, "flagcxAllReduce", "sendbuff is NULL");
  OK(ncclRedOpDestroy(op, comm));
  EXPECT(comm, ncclRedOpDestroy(ncclNumOps + 1000, comm), ncclInvalidArgument,
         "flagcxRedOpDestroy", "reduction op 1005");
  EXPECT(comm, ncclRedOpCreatePreMulSum(&op, &one, ncclFloat8e4m3, ncclScalarHostImmediate, comm),
         ncclInvalidUsage, "ncclRedOpCreatePreMulSum", "fp8");
  CUDA(cudaFree(d));
}

/* ---- Communicators ------------------------------------------------------ */

// shareID makes a new id on rank 0 and hands it to every rank through a
// Broadcast on comm.
static ncclUniqueId shareID(void) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0)
    OK(ncclGetUniqueId(&id));
  void *d = dalloc(sizeof id);
  put(d, &id, sizeof id);
  OK(ncclBroadcast(d, d, sizeof id, ncclUint8, 0, comm, stream));
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaMemcpy(&id, d, sizeof id, cudaMemcpyDeviceToHost));
  CUDA(cudaFree(d));
  return id;
}

static void expectShape(ncclComm_t c, const char *what, int n, int r) {
  int got = -1;
  OK(ncclCommCount(c, &got));
  if (got != n)
    fail("%s: ncclCommCount %d, want %d", what, got, n);
  OK(ncclCommUserRank(c, &got));
  if (got != r)
    fail("%s: ncclCommUserRank %d, want %d", what, got, r);
}

// sumOfRanks runs an AllReduce of (rank in c + 1) * 7 on c and checks it.
static void sumOfRanks(ncclComm_t c, const char *what, int n, int r) {
  int v[4] = {(r + 1) * 7, (r + 1) * 7, (r + 1) * 7, (r + 1) * 7};
  int s = 7 * n * (n + 1) / 2, want[4] = {s, s, s, s};
  void *d = dalloc(sizeof v);
  put(d, v, sizeof v);
  OK(ncclAllReduce(d, d, 4, ncclInt32, ncclSum, c, stream));
  expectBits(what, d, want, 4);
  CUDA(cudaFree(d));
}

// testInits: ncclCommInitRank and ncclCommInitRankScalable (whose second id
// is zeros: only the first names the communicator), each checked by shape
// and an AllReduce.
static void testInits(void) {
  ncclUniqueId id = shareID();
  ncclComm_t c = NULL;
  OK(ncclCommInitRank(&c, nranks, id, rank));
  expectShape(c, "ncclCommInitRank", nranks, rank);
  sumOfRanks(c, "AllReduce on ncclCommInitRank's", nranks, rank);
  OK(ncclCommDestroy(c));
  ncclUniqueId ids[2];
  ids[0] = shareID();
  memset(&ids[1], 0, sizeof ids[1]);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "scalable";
  OK(ncclCommInitRankScalable(&c, nranks, nranks - 1 - rank, 2, ids, &cfg));
  expectShape(c, "ncclCommInitRankScalable", nranks, nranks - 1 - rank);
  sumOfRanks(c, "AllReduce on ncclCommInitRankScalable's", nranks, nranks - 1 - rank);
  OK(ncclCommFinalize(c));
  OK(ncclCommDestroy(c));
  int n = 0;
  EXPECT(NULL, ncclCommCount(c, &n), ncclInvalidUsage, "flagcxCommCount",
         "already destroyed");
}

// testSplit: colors rank % 2 with keys reversing the order; with 3 ranks or
// more the last rank passes NCCL_SPLIT_NOCOLOR and gets NULL.
static void testSplit(void) {
  int none = nranks >= 3 && rank == nranks - 1;
  int color = none ? NCCL_SPLIT_NOCOLOR : rank % 2;
  ncclComm_t sub = (ncclComm_t)&sub;
  OK(ncclCommSplit(comm, color, -rank, &sub, NULL));
  if (none) {
    if (sub != NULL)
      fail("ncclCommSplit with NCCL_SPLIT_NOCOLOR gave a communicator");
    return;
  }
  int members = 0, below = 0; // ranks of my color; those after me in c
  for (int r = 0; r < nranks; r++) {
    int rnone = nranks >= 3 && r == nranks - 1;
    if (rnone || r % 2 != color)
      continue;
    members++;
    below += r > rank;
  }
  expectShape(sub, "ncclCommSplit", members, below);
  sumOfRanks(sub, "AllReduce on a split communicator", members, below);
  OK(ncclCommDestroy(sub));
}

// testShrink: a planned shrink without the last rank (every rank alive;
// the excluded one calls it too and gets NULL), checked by shape and an
// AllReduce.
static void testShrink(void) {
  if (nranks < 2)
    return;
  int last = nranks - 1;
  ncclComm_t sub = (ncclComm_t)&sub;
  OK(ncclCommShrink(comm, &last, 1, &sub, NULL, NCCL_SHRINK_DEFAULT));
  if (rank == last) {
    if (sub != NULL)
      fail("ncclCommShrink gave the excluded rank a communicator");
    return;
  }
  expectShape(sub, "ncclCommShrink", nranks - 1, rank);
  sumOfRanks(sub, "AllReduce on a shrunk communicator", nranks - 1, rank);
  OK(ncclCommDestroy(sub));
}

// testRevoke: rank 0 revokes a communicator split off comm; every rank
// sees it in ncclCommGetAsyncError (ncclRemoteError, within 10 s) and its
// next collective on it fails, and the revoked communicator is aborted.
static void testRevoke(void) {
  ncclComm_t sub = NULL;
  OK(ncclCommSplit(comm, 0, rank, &sub, NULL));
  if (rank == 0)
    OK(ncclCommRevoke(sub, NCCL_REVOKE_DEFAULT));
  ncclResult_t async = ncclSuccess;
  for (int i = 0; i < 10000 && async == ncclSuccess; i++) {
    OK(ncclCommGetAsyncError(sub, &async));
    if (async == ncclSuccess)
      usleep(1000);
  }
  checks++;
  if (async != ncclRemoteError)
    fail("ncclCommGetAsyncError after ncclCommRevoke: %d, want "
         "ncclRemoteError (%d)",
         async, ncclRemoteError);
  void *d = dalloc(16);
  checks++;
  if (ncclAllReduce(d, d, 4, ncclInt32, ncclSum, sub, stream) == ncclSuccess &&
      cudaStreamSynchronize(stream) == cudaSuccess)
    fail("an AllReduce on a revoked communicator succeeded");
  const char *why = ncclGetLastError(sub);
  checks++;
  if (why == NULL || strstr(why, "revoked") == NULL)
    fail("ncclGetLastError after a collective on a revoked communicator: %s",
         why ? why : "(null)");
  CUDA(cudaFree(d));
  OK(ncclCommAbort(sub)); // what is left to do with a revoked communicator
}

// testErrors: bad communicators and arguments, and what flagcx-go does not
// serve, each refused with its code and a last error that names it.
static void testErrors(void) {
  int x = 0;
  void *d = dalloc(16);
  EXPECT(NULL, ncclAllReduce(d, d, 4, ncclInt32, ncclSum, NULL, stream),
         ncclInvalidArgument, "flagcxAllReduce", "comm is NULL");
  EXPECT(comm, ncclAllReduce(d, d, 4, ncclNumTypes, ncclSum, comm, stream),
         ncclInvalidArgument, "flagcxAllReduce", "data type 12");
  EXPECT(comm, ncclAllReduce(d, d, 4, ncclFloat8e5m2, ncclSum, comm, stream),
         ncclInvalidUsage, "ncclAllReduce", "fp8");
  ncclComm_t shrunk = comm;
  EXPECT(comm, ncclCommShrink(comm, &x, -1, &shrunk, NULL, NCCL_SHRINK_DEFAULT),
         ncclInvalidArgument, "flagcxCommShrink", "nexclude is negative");
  if (shrunk != NULL)
    fail("a refused ncclCommShrink left *newcomm set");
  EXPECT(comm, ncclCommRevoke(comm, 1), ncclInvalidArgument, "ncclCommRevoke",
         "NCCL_REVOKE_DEFAULT");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  ncclComm_t c = NULL;
  EXPECT(NULL, ncclCommSplit(comm, 0, 0, &c, &bad), ncclInvalidArgument,
         "ncclCommSplit", "NCCL_CONFIG_INITIALIZER");
  ncclUniqueId zeros;
  memset(&zeros, 0, sizeof zeros);
  EXPECT(NULL, ncclCommInitRank(&c, nranks, zeros, rank), ncclInvalidArgument,
         "flagcxCommInitRank", "not one flagcxGetUniqueId made");
  if (c != NULL)
    fail("a refused ncclCommInitRank left *comm set");
  EXPECT(NULL, ncclCommWindowRegister(NULL, &x, 4, NULL, 0), ncclInvalidArgument,
         "ncclCommWindowRegister", "comm is NULL");
  ncclSimInfo_t sim; // not initialized
  memset(&sim, 0, sizeof sim);
  EXPECT(NULL, ncclGroupSimulateEnd(&sim), ncclInvalidArgument,
         "ncclGroupSimulateEnd", "NCCL_SIM_INFO_INITIALIZER");
  EXPECT(NULL, ncclGroupEnd(), ncclInvalidUsage, "flagcxGroupEnd",
         "without flagcxGroupStart");
  if (strcmp(ncclGetErrorString(ncclSuccess), "no error") != 0 ||
      strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage") == NULL)
    fail("ncclGetErrorString");
  CUDA(cudaFree(d));
}

// testMemory: ncclMemAlloc'd buffers, registered and in a window, carry an
// AllReduce; events time it.
static void testMemory(void) {
  int v[8], want[8];
  for (int i = 0; i < 8; i++) {
    v[i] = value(rank, i);
    want[i] = 0;
    for (int r = 0; r < nranks; r++)
      want[i] += value(r, i);
  }
  void *d = NULL, *h = NULL;
  ncclWindow_t win = NULL;
  OK(ncclMemAlloc(&d, sizeof v));
  OK(ncclCommRegister(comm, d, sizeof v, &h));
  OK(ncclCommWindowRegister(comm, d, sizeof v, &win, NCCL_WIN_COLL_SYMMETRIC));
  put(d, v, sizeof v);
  cudaEvent_t t0, t1;
  CUDA(cudaEventCreate(&t0));
  CUDA(cudaEventCreate(&t1));
  CUDA(cudaEventRecord(t0, stream));
  OK(ncclAllReduce(d, d, 8, ncclInt32, ncclSum, comm, stream));
  CUDA(cudaEventRecord(t1, stream));
  CUDA(cudaEventSynchronize(t1));
  float ms = -1;
  CUDA(cudaEventElapsedTime(&ms, t0, t1));
  if (ms < 0)
    fail("cudaEventElapsedTime %g", ms);
  expectBits("AllReduce on ncclMemAlloc'd memory", d, want, 8);
  OK(ncclCommWindowDeregister(comm, win));
  OK(ncclCommDeregister(comm, h));
  OK(ncclMemFree(d));
  CUDA(cudaEventDestroy(t0));
  CUDA(cudaEventDestroy(t1));
}

/* ---- main --------------------------------------------------------------- */

static void idFromHex(const char *hex, ncclUniqueId *id) {
  if (strlen(hex) != 2 * sizeof id->internal)
    fail("the id is %zu hex digits, want %zu", strlen(hex), 2 * sizeof id->internal);
  for (size_t i = 0; i < sizeof id->internal; i++) {
    unsigned v;
    sscanf(hex + 2 * i, "%2x", &v);
    id->internal[i] = (char)v;
  }
}

// testAsyncVendorError (CAPI_TEST_ASYNC=1, 2 ranks on the emulated
// runtime with FLAGCX_VENDORSIM_TIMEOUT=1): rank 0 enqueues an AllReduce
// that rank 1 never joins; the emulated library fails it on the device
// after its deadline, and ncclCommGetAsyncError must say so before any
// other call (torch's watchdog polls it). Rank 1 waits, then aborts.
static void testAsyncVendorError(void) {
  if (rank != 0) {
    sleep(6);
    OK(ncclCommAbort(comm));
    printf("PASS rank %d: %d checks\n", rank, checks);
    exit(0);
  }
  void *send = dalloc(4096), *recv = dalloc(4096);
  OK(ncclAllReduce(send, recv, 1024, ncclFloat32, ncclSum, comm, stream));
  ncclResult_t async = ncclSuccess;
  int waited = 0;
  for (; waited < 500 && async == ncclSuccess; waited++) {
    usleep(10000);
    OK(ncclCommGetAsyncError(comm, &async));
  }
  if (async == ncclSuccess)
    fail("ncclCommGetAsyncError still says success 5 s after the vendor's "
         "AllReduce failed");
  printf("ASYNC rank 0: %d after about %d ms: %s\n", async, waited * 10,
         ncclGetLastError(comm));
  checks++;
  OK(ncclCommAbort(comm));
  printf("PASS rank %d: %d checks\n", rank, checks);
  exit(0);
}

static void runRank(const char *hex) {
  int v = 0, ndev = 0, dev = -1;
  OK(ncclGetVersion(&v));
  if (v != 22809 || v != NCCL_VERSION_CODE)
    fail("ncclGetVersion %d, want 22809", v);
  ncclUniqueId id;
  if (hex == NULL) {
    OK(ncclGetUniqueId(&id));
    printf("ID ");
    for (size_t i = 0; i < sizeof id.internal; i++)
      printf("%02x", (unsigned char)id.internal[i]);
    printf("\n");
    fflush(stdout);
  } else {
    idFromHex(hex, &id);
  }
  CUDA(cudaGetDeviceCount(&ndev));
  CUDA(cudaSetDevice(rank % ndev));
  CUDA(cudaStreamCreate(&stream));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0; // completes at once all the same
  OK(ncclCommInitRankConfig(&comm, nranks, id, rank, &cfg));
  ncclResult_t async = ncclInternalError;
  OK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess)
    fail("ncclCommGetAsyncError %d", async);
  expectShape(comm, "ncclCommInitRankConfig", nranks, rank);
  OK(ncclCommCuDevice(comm, &dev));
  if (dev != rank % ndev)
    fail("ncclCommCuDevice %d, want %d", dev, rank % ndev);
  if (getenv("CAPI_TEST_ASYNC") != NULL)
    testAsyncVendorError();
  testAllReduce();
  testRooted();
  testGathers();
  testSendRecv();
  testGroupedCollectives();
  testPreMulSum();
  testInits();
  testSplit();
  testShrink();
  testRevoke();
  testErrors();
  testMemory();
  OK(ncclCommFinalize(comm));
  OK(ncclCommDestroy(comm));
  CUDA(cudaStreamDestroy(stream));
  printf("PASS rank %d: %d checks\n", rank, checks);
}

/* ---- ncclCommInitAll ---------------------------------------------------- */

struct allRank {
  ncclComm_t c;
  int r, n;
};

// allRankRun runs rank a->r's AllReduce on its own thread (collectives of
// several ranks need a thread each: docs/nccl.md).
static void *allRankRun(void *arg) {
  struct allRank *a = arg;
  int dev = -1;
  OK(ncclCommCuDevice(a->c, &dev));
  CUDA(cudaSetDevice(dev));
  cudaStream_t s;
  CUDA(cudaStreamCreate(&s));
  int v[4] = {a->r + 1, a->r + 1, a->r + 1, a->r + 1}, got[4];
  void *d = dalloc(sizeof v);
  put(d, v, sizeof v);
  OK(ncclAllReduce(d, d, 4, ncclInt32, ncclSum, a->c, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; i++)
    if (got[i] != a->n * (a->n + 1) / 2)
      fail("ncclCommInitAll rank %d: AllReduce element %d is %d", a->r, i, got[i]);
  CUDA(cudaFree(d));
  CUDA(cudaStreamDestroy(s));
  return NULL;
}

static void runInitAll(int n) {
  ncclComm_t comms[8];
  int devs[8];
  if (n < 1 || n > 8)
    fail("initall takes 1 to 8 devices");
  for (int i = 0; i < n; i++)
    devs[i] = n - 1 - i;
  OK(ncclCommInitAll(comms, n, devs));
  pthread_t th[8];
  struct allRank a[8];
  for (int i = 0; i < n; i++) {
    int dev = -1;
    expectShape(comms[i], "ncclCommInitAll", n, i);
    OK(ncclCommCuDevice(comms[i], &dev));
    if (dev != devs[i])
      fail("ncclCommInitAll rank %d: device %d, want %d", i, dev, devs[i]);
    a[i] = (struct allRank){comms[i], i, n};
    pthread_create(&th[i], NULL, allRankRun, &a[i]);
  }
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++)
    OK(ncclCommDestroy(comms[i]));
  devs[n - 1] = devs[0];
  if (n > 1)
    EXPECT(NULL, ncclCommInitAll(comms, n, devs), ncclInvalidUsage,
           "ncclCommInitAll", "names a device twice");
  printf("PASS initall: %d ranks, %d checks\n", n, checks);
}

/* ---- One thread, several ranks ----------------------------------------- */

// scaledSum is the sum over n ranks r of value(r, i), each times r + 2
// when scaled.
static int scaledSum(int n, int i, int scaled) {
  int sum = 0;
  for (int r = 0; r < n; r++)
    sum += (scaled ? r + 2 : 1) * value(r, i);
  return sum;
}

// runMulti: one thread drives n ranks (nccl-tests -g n): their inits in one
// group, then groups of collectives over all the communicators (each rank
// on device r % ndev with a stream of its own), every result exact.
// onHost: libflagcx.so runs on its host backend, whose ranks all say
// device 0 (their buffers are the emulated runtime's, host memory).
static void runMulti(int n, int onHost) {
  ncclComm_t c[8];
  cudaStream_t s[8];
  int *send[8], *recv[8], ndev = 0;
  if (n < 2 || n > 8)
    fail("multi takes 2 to 8 ranks");
  nranks = n;
  CUDA(cudaGetDeviceCount(&ndev));
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  OK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    CUDA(cudaSetDevice(r % ndev));
    OK(ncclCommInitRank(&c[r], n, id, r));
  }
  OK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    int dev = -1;
    expectShape(c[r], "grouped ncclCommInitRank", n, r);
    OK(ncclCommCuDevice(c[r], &dev));
    if (dev != (onHost ? 0 : r % ndev))
      fail("grouped ncclCommInitRank rank %d: device %d, want %d", r, dev, r % ndev);
    CUDA(cudaSetDevice(r % ndev));
    CUDA(cudaStreamCreate(&s[r]));
    send[r] = dalloc((size_t)n * COUNT * 4);
    recv[r] = dalloc((size_t)n * COUNT * 4);
    int *in = malloc((size_t)n * COUNT * 4);
    for (int i = 0; i < n * COUNT; i++)
      in[i] = value(r, i);
    put(send[r], in, (size_t)n * COUNT * 4);
    free(in);
  }
  int *want = malloc((size_t)n * COUNT * 4), *got = malloc((size_t)n * COUNT * 4);
#define MULTI_CHECK(what, r, buf, wantfn, elems)                               \
  do {                                                                         \
    CUDA(cudaStreamSynchronize(s[r]));                                         \
    CUDA(cudaMemcpy(got, buf, (size_t)(elems) * 4, cudaMemcpyDeviceToHost));   \
    for (int i = 0; i < (elems); i++) {                                        \
      want[i] = (wantfn);                                                      \
      if (got[i] != want[i])                                                   \
        fail("%s on rank %d: element %d is %d, want %d", what, r, i, got[i],   \
             want[i]);                                                         \
    }                                                                          \
    checks++;                                                                  \
  } while (0)
  // AllReduce on every communicator in one group.
  OK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    OK(ncclAllReduce(send[r], recv[r], COUNT, ncclInt32, ncclSum, c[r], s[r]));
  OK(ncclGroupEnd());
  for (int r = 0; r < n; r++)
    MULTI_CHECK("grouped AllReduce", r, recv[r], scaledSum(n, i, 0), COUNT);
  // A ring of sends and receives, and a pre-multiplied sum whose op is
  // made and destroyed around the call inside the group (as nccl-tests'
  // mulsum does), in one group; buffers registered inside a group too.
  void *reg[8];
  OK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    int scalar = r + 2;
    ncclRedOp_t op;
    OK(ncclCommRegister(c[r], send[r], (size_t)n * COUNT * 4, &reg[r]));
    OK(ncclSend(send[r], COUNT, ncclInt32, (r + 1) % n, c[r], s[r]));
    OK(ncclRecv(recv[r], COUNT, ncclInt32, (r + n - 1) % n, c[r], s[r]));
    OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclInt32, ncclScalarHostImmediate, c[r]));
    OK(ncclAllReduce(send[r], recv[r] + COUNT, COUNT, ncclInt32, op, c[r], s[r]));
    OK(ncclRedOpDestroy(op, c[r]));
  }
  OK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    MULTI_CHECK("grouped recv", r, recv[r], value((r + n - 1) % n, i), COUNT);
    MULTI_CHECK("grouped pre-multiplied AllReduce", r, recv[r] + COUNT,
                scaledSum(n, i, 1), COUNT);
    OK(ncclCommDeregister(c[r], reg[r]));
  }
  // AllGather of every rank's first block.
  OK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    OK(ncclAllGather(send[r], recv[r], COUNT, ncclInt32, c[r], s[r]));
  OK(ncclGroupEnd());
  for (int r = 0; r < n; r++)
    MULTI_CHECK("grouped AllGather", r, recv[r], value(i / COUNT, i % COUNT), n * COUNT);
#undef MULTI_CHECK
  // A grouped init that fails fails its group's end and leaves *comm NULL.
  ncclComm_t bad = (ncclComm_t)&bad;
  ncclUniqueId zeros;
  memset(&zeros, 0, sizeof zeros);
  OK(ncclGroupStart());
  OK(ncclCommInitRank(&bad, n, zeros, 0));
  EXPECT(NULL, ncclGroupEnd(), ncclInvalidArgument, "flagcxCommInitRank",
         "not one flagcxGetUniqueId made");
  if (bad != NULL)
    fail("a grouped ncclCommInitRank that failed left *comm set");
  for (int r = 0; r < n; r++) {
    CUDA(cudaFree(send[r]));
    CUDA(cudaFree(recv[r]));
    CUDA(cudaStreamDestroy(s[r]));
    OK(ncclCommDestroy(c[r]));
  }
  free(want), free(got);
  printf("PASS multi: %d ranks, %d checks\n", n, checks);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "initall") == 0) {
    runInitAll(atoi(argv[2]));
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "multi") == 0) {
    runMulti(atoi(argv[2]), argc > 3 && strcmp(argv[3], "host") == 0);
    return 0;
  }
  if (argc < 3)
    fail("usage: ranks <rank> <nranks> [id] | ranks initall <ndev>");
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  runRank(argc > 3 ? argv[3] : NULL);
  return 0;
}
