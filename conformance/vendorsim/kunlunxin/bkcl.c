/*
 * bkcl.c: emulated Kunlunxin BKCL/XCCL (libbkcl.so).
 *
 * The BKCL entry points (docs/vendor-facts.md#kunlunxin-bkcl) that the kunlunxin
 * plugin calls (plus bkcl_comm_count / bkcl_comm_user_rank, which tests use
 * to see how bkcl_init_rank's arguments arrived), with BKCL's names and
 * argument orders:
 *   bkcl_init_rank(ctx*, RANK, NRANKS, id*)          rank before nranks, id by pointer
 *   bkcl_all_gather(ctx, send, COUNT, RECV, ...)      count before the receive buffer
 *   bkcl_all_to_all(ctx, send, COUNT, RECV, ...)      idem
 *   bkcl_all_to_all_v(ctx, send, sc*, sd*, stype, recv, rc*, rd*, rtype, stream)
 *                                                    count arrays in DEVICE memory
 *   bkcl_send/recv(ctx, buf, count, PEER, DTYPE, stream)
 * and no gather/scatter (BKCL has none).
 *
 * ❌ BKCL's numeric enum values and BKCL_UNIQUE_ID_BYTES are not public
 * (docs/vendor-facts.md#kunlunxin-bkcl). The table below is THIS EMULATOR'S MODEL of the
 * vendor, kept independent of the plugin's table on purpose (no shared
 * header): the plugin's table is its belief, this one the model it is
 * tested against; the mapping tests fail when the two disagree. Verify
 * both on a machine with XCCL (plugins/kunlunxin/README.md says how) and
 * change them together. -DVSIM_BKCL_PERTURB_FOR_TESTS builds a model that
 * disagrees on purpose (float<->int32, add<->max): the tests use it to show
 * that a disagreement is caught.
 *
 * -DVSIM_BKCL_CXX_NAMES exports the same functions under C++-mangled names
 * only, as some libbkcl.so builds do (bkcl.h without extern "C"): the
 * mangling of this model's declarations (struct BKCLContext*, enum
 * BKCLDataType/BKCLOp, struct BKCLUniqueId, void* XPUStream, size_t counts),
 * as g++ spells it. The real types, hence the real spellings, are
 * unverified.
 *
 * Streams are the XPU runtime's (xpurt.c): NULL is the default stream, any
 * other must be a live XPUStream of the communicator's device. Operations
 * run on that stream asynchronously (core/stream.c), as everywhere in
 * vendorsim.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

#ifdef VSIM_BKCL_CXX_NAMES
#define CXX(mangled) __asm__(mangled)
#else
#define CXX(mangled)
#endif

/* ---- BKCL types and values: the emulator's MODEL (❌ unverified) ---- */
typedef enum {
  BKCL_SUCCESS = 0,
  BKCL_INVALID_ARGUMENT = 1,
  BKCL_RUNTIME_ERROR = 2,
  BKCL_SYSTEM_ERROR = 3,
  BKCL_INTERNAL_ERROR = 4
} BKCLResult_t;

#ifndef VSIM_BKCL_PERTURB_FOR_TESTS
typedef enum {
  BKCL_FLOAT = 0,
  BKCL_FLOAT16 = 1,
  BKCL_INT32 = 2,
  BKCL_INT64 = 3,
  BKCL_UINT8 = 4,
  BKCL_FLOAT64 = 5,
  BKCL_BFLOAT16 = 6
} BKCLDataType;
typedef enum { BKCL_ADD = 0, BKCL_PRODUCT = 1, BKCL_MAX = 2, BKCL_MIN = 3, BKCL_AVG = 4 } BKCLOp;
#else /* a vendor that disagrees with the plugin's table */
typedef enum {
  BKCL_FLOAT = 2,
  BKCL_FLOAT16 = 1,
  BKCL_INT32 = 0,
  BKCL_INT64 = 3,
  BKCL_UINT8 = 4,
  BKCL_FLOAT64 = 5,
  BKCL_BFLOAT16 = 6
} BKCLDataType;
typedef enum { BKCL_ADD = 2, BKCL_PRODUCT = 1, BKCL_MAX = 0, BKCL_MIN = 3, BKCL_AVG = 4 } BKCLOp;
#endif

#define BKCL_UNIQUE_ID_BYTES 512 /* model; the real size is unknown */
typedef struct BKCLUniqueId {
  char internal[BKCL_UNIQUE_ID_BYTES];
} BKCLUniqueId;
typedef struct BKCLContext* BKCLContext_t;
typedef void* XPUStream;

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated Kunlunxin BKCL/XCCL (libbkcl.so; enum values and id size are a model, "
    "unverified; host memory and POSIX shared memory, no XPU)"
#ifdef VSIM_BKCL_CXX_NAMES
    " [C++ symbol names]"
#endif
#ifdef VSIM_BKCL_PERTURB_FOR_TESTS
    " [PERTURBED enum values, for tests]"
#endif
    ;

static const char* const TAG = "bkcl";

/* Core results (NCCL numbering) -> BKCL's five codes. */
static BKCLResult_t res(vsim_result r) {
  switch (r) {
    case VSIM_OK: return BKCL_SUCCESS;
    case VSIM_ERR_DEVICE: return BKCL_RUNTIME_ERROR;
    case VSIM_ERR_SYSTEM: return BKCL_SYSTEM_ERROR;
    case VSIM_ERR_INTERNAL: return BKCL_INTERNAL_ERROR;
    case VSIM_ERR_INVALID_ARG: return BKCL_INVALID_ARGUMENT;
    case VSIM_ERR_INVALID_USAGE: return BKCL_INVALID_ARGUMENT; /* BKCL has no "invalid usage" */
    case VSIM_ERR_REMOTE: return BKCL_SYSTEM_ERROR;            /* nor "remote error" */
  }
  return BKCL_INTERNAL_ERROR;
}

/* The core's reason text is kept for FLAGCX_VENDORSIM_DEBUG=1 (BKCL itself
 * has no error-text API). */
static BKCLResult_t done(vsim_result r, const char* api) {
  if (r != VSIM_OK) vsim_debug("%s -> %d: %s", api, (int)res(r), vsim_last_error());
  return res(r);
}

static BKCLResult_t fail(BKCLResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static BKCLResult_t fail(BKCLResult_t r, const char* fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s", msg);
  vsim_debug("%s -> %d", msg, (int)r);
  return r;
}

static int to_dtype(BKCLDataType t) {
  switch (t) {
    case BKCL_FLOAT: return VSIM_FLOAT32;
    case BKCL_FLOAT16: return VSIM_FLOAT16;
    case BKCL_INT32: return VSIM_INT32;
    case BKCL_INT64: return VSIM_INT64;
    case BKCL_UINT8: return VSIM_UINT8;
    case BKCL_FLOAT64: return VSIM_FLOAT64;
    case BKCL_BFLOAT16: return VSIM_BFLOAT16;
  }
  return -1;
}

static int to_op(BKCLOp op) {
  switch (op) {
    case BKCL_ADD: return VSIM_SUM;
    case BKCL_PRODUCT: return VSIM_PROD;
    case BKCL_MAX: return VSIM_MAX;
    case BKCL_MIN: return VSIM_MIN;
    case BKCL_AVG: return VSIM_AVG;
  }
  return -1;
}

static vsim_comm* get_comm(BKCLContext_t ctx, const char* api, BKCLResult_t* r) {
  vsim_comm* c = vsim_comm_lookup(ctx);
  if (c == NULL)
    *r = fail(BKCL_INVALID_ARGUMENT, "%s: invalid context %p (NULL, destroyed or not from bkcl_init_rank)", api,
              (void*)ctx);
  return c;
}

static vsim_stream* check_stream(vsim_comm* c, XPUStream s, const char* api, BKCLResult_t* r) {
  if (s == NULL) return vsim_stream_default(vsim_comm_device(c));
  vsim_stream* vs = vsim_stream_lookup(s);
  if (vs == NULL) {
    *r = fail(BKCL_RUNTIME_ERROR, "%s: stream %p is not a live XPUStream of this process", api, s);
    return NULL;
  }
  if (vsim_stream_device(vs) != vsim_comm_device(c)) {
    *r = fail(BKCL_RUNTIME_ERROR, "%s: stream %p belongs to XPU %d but the context uses XPU %d", api, s,
              vsim_stream_device(vs), vsim_comm_device(c));
    return NULL;
  }
  return vs;
}

/* Common prologue: the context, the stream and the data type. */
static vsim_comm* prologue(const char* api, BKCLContext_t ctx, XPUStream s, BKCLDataType t, int* dt,
                           vsim_stream** vs, BKCLResult_t* r) {
  vsim_comm* c = get_comm(ctx, api, r);
  if (c == NULL || (*vs = check_stream(c, s, api, r)) == NULL) return NULL;
  if ((*dt = to_dtype(t)) < 0) {
    *r = fail(BKCL_INVALID_ARGUMENT, "%s: invalid BKCLDataType %d", api, (int)t);
    return NULL;
  }
  return c;
}

/* ---- ids and contexts ---- */

EXPORT BKCLResult_t bkcl_get_unique_id(BKCLUniqueId* uid) CXX("_Z18bkcl_get_unique_idP12BKCLUniqueId");
EXPORT BKCLResult_t bkcl_get_unique_id(BKCLUniqueId* uid) {
  if (uid == NULL) return fail(BKCL_INVALID_ARGUMENT, "bkcl_get_unique_id: uid is NULL");
  return done(vsim_get_unique_id(uid, sizeof *uid, TAG), "bkcl_get_unique_id");
}

EXPORT BKCLResult_t bkcl_init_rank(BKCLContext_t* ctx, int rank, int nranks, BKCLUniqueId* uid)
    CXX("_Z14bkcl_init_rankPP11BKCLContextiiP12BKCLUniqueId");
EXPORT BKCLResult_t bkcl_init_rank(BKCLContext_t* ctx, int rank, int nranks, BKCLUniqueId* uid) {
  if (ctx == NULL || uid == NULL) return fail(BKCL_INVALID_ARGUMENT, "bkcl_init_rank: ctx or uid is NULL");
  if (vsim_device_count() == 0) return fail(BKCL_RUNTIME_ERROR, "bkcl_init_rank: no XPU (FLAGCX_VENDORSIM_DEVICES=0)");
  vsim_comm* c = NULL;
  vsim_result r = vsim_comm_init(&c, uid, sizeof *uid, TAG, nranks, rank, vsim_current_device(), "bkcl_init_rank");
  *ctx = (BKCLContext_t)c;
  return done(r, "bkcl_init_rank");
}

EXPORT BKCLResult_t bkcl_destroy_context(BKCLContext_t ctx) CXX("_Z20bkcl_destroy_contextP11BKCLContext");
EXPORT BKCLResult_t bkcl_destroy_context(BKCLContext_t ctx) {
  BKCLResult_t r = BKCL_SUCCESS;
  vsim_comm* c = get_comm(ctx, "bkcl_destroy_context", &r);
  return c ? done(vsim_comm_destroy(c), "bkcl_destroy_context") : r;
}

EXPORT BKCLResult_t bkcl_comm_abort(BKCLContext_t ctx) CXX("_Z15bkcl_comm_abortP11BKCLContext");
EXPORT BKCLResult_t bkcl_comm_abort(BKCLContext_t ctx) {
  BKCLResult_t r = BKCL_SUCCESS;
  vsim_comm* c = get_comm(ctx, "bkcl_comm_abort", &r);
  return c ? done(vsim_comm_abort(c), "bkcl_comm_abort") : r;
}

EXPORT BKCLResult_t bkcl_comm_count(const BKCLContext_t ctx, int* count) CXX("_Z15bkcl_comm_countP11BKCLContextPi");
EXPORT BKCLResult_t bkcl_comm_count(const BKCLContext_t ctx, int* count) {
  BKCLResult_t r = BKCL_SUCCESS;
  vsim_comm* c = get_comm(ctx, "bkcl_comm_count", &r);
  if (c == NULL) return r;
  if (count == NULL) return fail(BKCL_INVALID_ARGUMENT, "bkcl_comm_count: count is NULL");
  *count = vsim_comm_nranks(c);
  return BKCL_SUCCESS;
}

EXPORT BKCLResult_t bkcl_comm_user_rank(const BKCLContext_t ctx, int* rank)
    CXX("_Z19bkcl_comm_user_rankP11BKCLContextPi");
EXPORT BKCLResult_t bkcl_comm_user_rank(const BKCLContext_t ctx, int* rank) {
  BKCLResult_t r = BKCL_SUCCESS;
  vsim_comm* c = get_comm(ctx, "bkcl_comm_user_rank", &r);
  if (c == NULL) return r;
  if (rank == NULL) return fail(BKCL_INVALID_ARGUMENT, "bkcl_comm_user_rank: rank is NULL");
  *rank = vsim_comm_rank(c);
  return BKCL_SUCCESS;
}

/* ---- collectives ---- */

static BKCLResult_t coll(const char* api, int kind, BKCLContext_t ctx, const void* send, void* recv, size_t count,
                         BKCLDataType t, int use_op, BKCLOp op, int root, XPUStream s) {
  BKCLResult_t r = BKCL_SUCCESS;
  int dt, vop = 0;
  vsim_stream* vs = NULL;
  vsim_comm* c = prologue(api, ctx, s, t, &dt, &vs, &r);
  if (c == NULL) return r;
  if (use_op && (vop = to_op(op)) < 0) return fail(BKCL_INVALID_ARGUMENT, "%s: invalid BKCLOp %d", api, (int)op);
  vsim_coll_args a = {kind, dt, vop, root, count};
  return done(vsim_collective(c, api, &a, send, recv, vs), api);
}

EXPORT BKCLResult_t bkcl_all_reduce(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t count,
                                    BKCLDataType datatype, BKCLOp op, XPUStream stream)
    CXX("_Z15bkcl_all_reduceP11BKCLContextPKvPvm12BKCLDataType6BKCLOpS3_");
EXPORT BKCLResult_t bkcl_all_reduce(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t count,
                                    BKCLDataType datatype, BKCLOp op, XPUStream stream) {
  return coll("bkcl_all_reduce", VSIM_COLL_ALLREDUCE, ctx, sendbuf, recvbuf, count, datatype, 1, op, 0, stream);
}

EXPORT BKCLResult_t bkcl_reduce(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t count,
                                BKCLDataType datatype, BKCLOp op, int root, XPUStream stream)
    CXX("_Z11bkcl_reduceP11BKCLContextPKvPvm12BKCLDataType6BKCLOpiS3_");
EXPORT BKCLResult_t bkcl_reduce(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t count,
                                BKCLDataType datatype, BKCLOp op, int root, XPUStream stream) {
  return coll("bkcl_reduce", VSIM_COLL_REDUCE, ctx, sendbuf, recvbuf, count, datatype, 1, op, root, stream);
}

EXPORT BKCLResult_t bkcl_broadcast(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t count,
                                   BKCLDataType datatype, int root, XPUStream stream)
    CXX("_Z14bkcl_broadcastP11BKCLContextPKvPvm12BKCLDataTypeiS3_");
EXPORT BKCLResult_t bkcl_broadcast(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t count,
                                   BKCLDataType datatype, int root, XPUStream stream) {
  return coll("bkcl_broadcast", VSIM_COLL_BROADCAST, ctx, sendbuf, recvbuf, count, datatype, 0, BKCL_ADD, root,
              stream);
}

/* count BEFORE recvbuf */
EXPORT BKCLResult_t bkcl_all_gather(BKCLContext_t ctx, const void* sendbuf, size_t sendcnt, void* recvbuf,
                                    BKCLDataType datatype, XPUStream stream)
    CXX("_Z15bkcl_all_gatherP11BKCLContextPKvmPv12BKCLDataTypeS3_");
EXPORT BKCLResult_t bkcl_all_gather(BKCLContext_t ctx, const void* sendbuf, size_t sendcnt, void* recvbuf,
                                    BKCLDataType datatype, XPUStream stream) {
  return coll("bkcl_all_gather", VSIM_COLL_ALLGATHER, ctx, sendbuf, recvbuf, sendcnt, datatype, 0, BKCL_ADD, 0,
              stream);
}

EXPORT BKCLResult_t bkcl_reduce_scatter(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t recvcnt,
                                        BKCLDataType datatype, BKCLOp op, XPUStream stream)
    CXX("_Z19bkcl_reduce_scatterP11BKCLContextPKvPvm12BKCLDataType6BKCLOpS3_");
EXPORT BKCLResult_t bkcl_reduce_scatter(BKCLContext_t ctx, const void* sendbuf, void* recvbuf, size_t recvcnt,
                                        BKCLDataType datatype, BKCLOp op, XPUStream stream) {
  return coll("bkcl_reduce_scatter", VSIM_COLL_REDUCESCATTER, ctx, sendbuf, recvbuf, recvcnt, datatype, 1, op, 0,
              stream);
}

/* count BEFORE recvbuf, per peer */
EXPORT BKCLResult_t bkcl_all_to_all(BKCLContext_t ctx, const void* sendbuf, size_t count, void* recvbuf,
                                    BKCLDataType datatype, XPUStream stream)
    CXX("_Z15bkcl_all_to_allP11BKCLContextPKvmPv12BKCLDataTypeS3_");
EXPORT BKCLResult_t bkcl_all_to_all(BKCLContext_t ctx, const void* sendbuf, size_t count, void* recvbuf,
                                    BKCLDataType datatype, XPUStream stream) {
  return coll("bkcl_all_to_all", VSIM_COLL_ALLTOALL, ctx, sendbuf, recvbuf, count, datatype, 0, BKCL_ADD, 0, stream);
}

/* A count array must be device memory of the context's XPU holding nranks
 * size_t: BKCL reads the counts on the device ([FCX] copies them there).
 * Enforced even with FLAGCX_VENDORSIM_CHECK_POINTERS=0: it is the API. */
static int device_array(vsim_comm* c, const char* api, const char* what, const size_t* p, BKCLResult_t* r) {
  size_t bytes = (size_t)vsim_comm_nranks(c) * sizeof *p;
  vsim_mem_info info;
  int k = p ? vsim_mem_check_range(p, bytes, &info) : VSIM_MEM_UNREGISTERED;
  if (k == VSIM_MEM_DEVICE && info.device == vsim_comm_device(c)) return 0;
  if (k < 0)
    *r = fail(BKCL_INVALID_ARGUMENT, "%s: %s %p needs %zu bytes (nranks size_t) but its allocation is shorter", api,
              what, (const void*)p, bytes);
  else
    *r = fail(BKCL_INVALID_ARGUMENT,
              "%s: %s %p is %s, but BKCL reads the counts on the device: copy them to memory from xpu_malloc "
              "on XPU %d",
              api, what, (const void*)p,
              k == VSIM_MEM_DEVICE ? "memory of another XPU" : k == VSIM_MEM_HOST ? "pinned host memory" : "host memory",
              vsim_comm_device(c));
  return -1;
}

/* Counts and displacements in elements (as FlagCX and Paddle pass them, ⚠
 * undocumented); a zero count moves nothing. Issued as one group of sends
 * and receives, so any pattern completes. */
EXPORT BKCLResult_t bkcl_all_to_all_v(BKCLContext_t ctx, const void* sendbuf, const size_t* sendcounts,
                                      const size_t* sdispls, BKCLDataType sendtype, void* recvbuf,
                                      const size_t* recvcounts, const size_t* rdispls, BKCLDataType recvtype,
                                      XPUStream stream)
    CXX("_Z17bkcl_all_to_all_vP11BKCLContextPKvPKmS4_12BKCLDataTypePvS4_S4_S5_S6_");
EXPORT BKCLResult_t bkcl_all_to_all_v(BKCLContext_t ctx, const void* sendbuf, const size_t* sendcounts,
                                      const size_t* sdispls, BKCLDataType sendtype, void* recvbuf,
                                      const size_t* recvcounts, const size_t* rdispls, BKCLDataType recvtype,
                                      XPUStream stream) {
  static const char api[] = "bkcl_all_to_all_v";
  BKCLResult_t r = BKCL_SUCCESS;
  int dt, rdt;
  vsim_stream* vs = NULL;
  vsim_comm* c = prologue(api, ctx, stream, sendtype, &dt, &vs, &r);
  if (c == NULL) return r;
  if ((rdt = to_dtype(recvtype)) < 0) return fail(BKCL_INVALID_ARGUMENT, "%s: invalid recvtype %d", api, (int)recvtype);
  if (rdt != dt)
    return fail(BKCL_INVALID_ARGUMENT, "%s: sendtype %d and recvtype %d differ (not emulated)", api, (int)sendtype,
                (int)recvtype);
  if (device_array(c, api, "sendcounts", sendcounts, &r) || device_array(c, api, "sdispls", sdispls, &r) ||
      device_array(c, api, "recvcounts", recvcounts, &r) || device_array(c, api, "rdispls", rdispls, &r))
    return r;
  size_t es = vsim_dtype_size(dt);
  int n = vsim_comm_nranks(c);
  vsim_result first = vsim_group_start();
  for (int p = 0; p < n && first == VSIM_OK; p++) {
    if (sendcounts[p])
      first = vsim_send(c, api, (const char*)sendbuf + sdispls[p] * es, sendcounts[p], dt, p, vs);
    if (first == VSIM_OK && recvcounts[p])
      first = vsim_recv(c, api, (char*)recvbuf + rdispls[p] * es, recvcounts[p], dt, p, vs);
  }
  vsim_result end = vsim_group_end(api);
  return done(first != VSIM_OK ? first : end, api);
}

/* ---- point-to-point and groups: peer BEFORE the data type ---- */

EXPORT BKCLResult_t bkcl_send(BKCLContext_t ctx, const void* sendbuf, size_t count, int peer, BKCLDataType datatype,
                              XPUStream stream) CXX("_Z9bkcl_sendP11BKCLContextPKvmi12BKCLDataTypePv");
EXPORT BKCLResult_t bkcl_send(BKCLContext_t ctx, const void* sendbuf, size_t count, int peer, BKCLDataType datatype,
                              XPUStream stream) {
  BKCLResult_t r = BKCL_SUCCESS;
  int dt;
  vsim_stream* vs = NULL;
  vsim_comm* c = prologue("bkcl_send", ctx, stream, datatype, &dt, &vs, &r);
  return c ? done(vsim_send(c, "bkcl_send", sendbuf, count, dt, peer, vs), "bkcl_send") : r;
}

EXPORT BKCLResult_t bkcl_recv(BKCLContext_t ctx, void* recvbuf, size_t count, int peer, BKCLDataType datatype,
                              XPUStream stream) CXX("_Z9bkcl_recvP11BKCLContextPvmi12BKCLDataTypeS1_");
EXPORT BKCLResult_t bkcl_recv(BKCLContext_t ctx, void* recvbuf, size_t count, int peer, BKCLDataType datatype,
                              XPUStream stream) {
  BKCLResult_t r = BKCL_SUCCESS;
  int dt;
  vsim_stream* vs = NULL;
  vsim_comm* c = prologue("bkcl_recv", ctx, stream, datatype, &dt, &vs, &r);
  return c ? done(vsim_recv(c, "bkcl_recv", recvbuf, count, dt, peer, vs), "bkcl_recv") : r;
}

EXPORT BKCLResult_t bkcl_group_start(void) CXX("_Z16bkcl_group_startv");
EXPORT BKCLResult_t bkcl_group_start(void) { return done(vsim_group_start(), "bkcl_group_start"); }

EXPORT BKCLResult_t bkcl_group_end(void) CXX("_Z14bkcl_group_endv");
EXPORT BKCLResult_t bkcl_group_end(void) { return done(vsim_group_end("bkcl_group_end"), "bkcl_group_end"); }
