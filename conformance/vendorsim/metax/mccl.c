/*
 * mccl.c: emulated MetaX MCCL (libmccl.so), reporting version 2.16.5
 * (MCCL_VERSION_CODE 21605).
 *
 * The MCCL entry points the metax plugin calls, and a few more for tests,
 * with mccl.h's names, argument orders and enum values (H [MCCLH], the MetaX
 * mccl.h in the code index, id 54691111213; docs/vendor-facts.md#metax-mccl).
 * mcclUniqueId (128 bytes) is taken BY VALUE. MCCL's results, data types and
 * ops carry NCCL's numbers, which are the core's, so values pass unchanged;
 * the declarations below are this emulator's own (not shared with the
 * plugin), as the README explains.
 *
 * mcclGather and mcclScatter are grouped point-to-point in the core;
 * mcclAllToAll is the core's alltoall. Operations run on the caller's
 * stream asynchronously (core/stream.c), as everywhere in vendorsim; a
 * non-blocking config behaves as blocking.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- MCCL types (mccl.h) ---- */
typedef enum {
  mcclSuccess = 0,
  mcclUnhandledMacaError = 1,
  mcclSystemError = 2,
  mcclInternalError = 3,
  mcclInvalidArgument = 4,
  mcclInvalidUsage = 5,
  mcclRemoteError = 6,
  mcclInProgress = 7,
  mcclNumResults = 8 /* no mcclTimeout */
} mcclResult_t;

typedef int mcclDataType_t; /* mcclInt8 = 0 .. mcclBfloat16 = 9, mcclNumTypes 10 */
typedef int mcclRedOp_t;    /* mcclSum = 0 .. mcclAvg = 4, mcclNumOps 5 */

#define MCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[MCCL_UNIQUE_ID_BYTES];
} mcclUniqueId;

typedef struct mcclComm* mcclComm_t;
typedef struct mcStream_st* mcStream_t;

/* mcclConfig_v21400 {size_t size; unsigned magic; unsigned version; int blocking;} */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
} mcclConfig_t;
#define MCCL_CONFIG_MAGIC 0xcafebeefu

#define MCCL_VERSION_CODE 21605

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated MetaX MCCL 2.16.5 (libmccl.so; host memory and POSIX shared memory, no GPU)";

static const char* const TAG = "mccl";

static mcclResult_t res(vsim_result r) { return (mcclResult_t)r; }

static mcclResult_t fail(mcclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static mcclResult_t fail(mcclResult_t r, const char* fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s", msg);
  return r;
}

static vsim_comm* get_comm(mcclComm_t comm, const char* api, mcclResult_t* r) {
  vsim_comm* c = vsim_comm_lookup(comm);
  if (c == NULL) {
    *r = fail(mcclInvalidArgument, "%s: invalid communicator %p (NULL, destroyed or not from mcclCommInitRank)", api,
              (void*)comm);
  }
  return c;
}

/* A bad stream fails the way a launch on it fails in MACA. */
static vsim_stream* check_stream(vsim_comm* c, mcStream_t s, const char* api, mcclResult_t* r) {
  if (s == NULL) return vsim_stream_default(vsim_comm_device(c));
  vsim_stream* vs = vsim_stream_lookup(s);
  if (vs == NULL) {
    *r = fail(mcclUnhandledMacaError, "%s: stream %p is not a live mcStream_t of this process", api, (void*)s);
    return NULL;
  }
  if (vsim_stream_device(vs) != vsim_comm_device(c)) {
    *r = fail(mcclUnhandledMacaError, "%s: stream %p belongs to device %d but the communicator uses device %d", api,
              (void*)s, vsim_stream_device(vs), vsim_comm_device(c));
    return NULL;
  }
  return vs;
}

/* ---- version, ids, init ---- */

EXPORT mcclResult_t mcclGetVersion(int* version) {
  if (version == NULL) return fail(mcclInvalidArgument, "mcclGetVersion: version is NULL");
  *version = MCCL_VERSION_CODE;
  return mcclSuccess;
}

EXPORT mcclResult_t mcclGetUniqueId(mcclUniqueId* uniqueId) {
  return res(vsim_get_unique_id(uniqueId, sizeof *uniqueId, TAG));
}

static mcclResult_t init(mcclComm_t* comm, int nranks, const mcclUniqueId* id, int rank, const char* api) {
  if (vsim_device_count() == 0) return fail(mcclUnhandledMacaError, "%s: no MACA device (FLAGCX_VENDORSIM_DEVICES=0)", api);
  vsim_comm* c = NULL;
  vsim_result r = vsim_comm_init(&c, id, sizeof *id, TAG, nranks, rank, vsim_current_device(), api);
  if (comm != NULL) *comm = (mcclComm_t)c;
  return res(r);
}

EXPORT mcclResult_t mcclCommInitRank(mcclComm_t* comm, int nranks, mcclUniqueId commId, int rank) {
  return init(comm, nranks, &commId, rank, "mcclCommInitRank");
}

EXPORT mcclResult_t mcclCommInitRankConfig(mcclComm_t* comm, int nranks, mcclUniqueId commId, int rank,
                                           mcclConfig_t* config) {
  if (config != NULL && config->magic != MCCL_CONFIG_MAGIC) {
    return fail(mcclInvalidArgument,
                "mcclCommInitRankConfig: config->magic is 0x%x, not 0x%x (initialise the config with "
                "MCCL_CONFIG_INITIALIZER)",
                config->magic, MCCL_CONFIG_MAGIC);
  }
  return init(comm, nranks, &commId, rank, "mcclCommInitRankConfig");
}

/* ---- communicator lifetime and queries ---- */

EXPORT mcclResult_t mcclCommFinalize(mcclComm_t comm) {
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, "mcclCommFinalize", &r);
  return c ? res(vsim_comm_finalize(c)) : r;
}

EXPORT mcclResult_t mcclCommDestroy(mcclComm_t comm) {
  if (comm == NULL) return mcclSuccess;
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, "mcclCommDestroy", &r);
  return c ? res(vsim_comm_destroy(c)) : r;
}

EXPORT mcclResult_t mcclCommAbort(mcclComm_t comm) {
  if (comm == NULL) return mcclSuccess;
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, "mcclCommAbort", &r);
  return c ? res(vsim_comm_abort(c)) : r;
}

EXPORT mcclResult_t mcclCommGetAsyncError(mcclComm_t comm, mcclResult_t* asyncError) {
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, "mcclCommGetAsyncError", &r);
  if (c == NULL) return r;
  if (asyncError == NULL) return fail(mcclInvalidArgument, "mcclCommGetAsyncError: asyncError is NULL");
  *asyncError = res(vsim_comm_async_error(c));
  return mcclSuccess;
}

/* (const mcclComm_t comm, int* out): comm first, as NCCL (CNCL differs). */
#define QUERY(NAME, EXPR)                                                     \
  EXPORT mcclResult_t NAME(const mcclComm_t comm, int* out) {                 \
    mcclResult_t r = mcclSuccess;                                             \
    vsim_comm* c = get_comm(comm, #NAME, &r);                                 \
    if (c == NULL) return r;                                                  \
    if (out == NULL) return fail(mcclInvalidArgument, #NAME ": out is NULL"); \
    *out = EXPR;                                                              \
    return mcclSuccess;                                                       \
  }
QUERY(mcclCommCount, vsim_comm_nranks(c))
QUERY(mcclCommMcDevice, vsim_comm_device(c))
QUERY(mcclCommUserRank, vsim_comm_rank(c))

/* ---- collectives ---- */

static mcclResult_t coll(const char* api, int kind, const void* sendbuff, void* recvbuff, size_t count,
                         mcclDataType_t dt, mcclRedOp_t op, int root, mcclComm_t comm, mcStream_t stream) {
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, api, &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_stream(c, stream, api, &r);
  if (vs == NULL) return r;
  vsim_coll_args a = {kind, dt, op, root, count};
  return res(vsim_collective(c, api, &a, sendbuff, recvbuff, vs));
}

EXPORT mcclResult_t mcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                  mcclRedOp_t op, mcclComm_t comm, mcStream_t stream) {
  return coll("mcclAllReduce", VSIM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

EXPORT mcclResult_t mcclReduce(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                               mcclRedOp_t op, int root, mcclComm_t comm, mcStream_t stream) {
  return coll("mcclReduce", VSIM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

EXPORT mcclResult_t mcclBroadcast(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                  int root, mcclComm_t comm, mcStream_t stream) {
  return coll("mcclBroadcast", VSIM_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

EXPORT mcclResult_t mcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, mcclDataType_t datatype,
                                  mcclComm_t comm, mcStream_t stream) {
  return coll("mcclAllGather", VSIM_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, 0, comm, stream);
}

EXPORT mcclResult_t mcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      mcclDataType_t datatype, mcclRedOp_t op, mcclComm_t comm, mcStream_t stream) {
  return coll("mcclReduceScatter", VSIM_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
              stream);
}

/* MCCL spells it AllToAll (NCCL: AlltoAll). */
EXPORT mcclResult_t mcclAllToAll(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                 mcclComm_t comm, mcStream_t stream) {
  return coll("mcclAllToAll", VSIM_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, 0, comm, stream);
}

/* Gather: every rank sends count to root, which places rank p's at
 * p*count; Scatter the reverse. Grouped point-to-point in the core (nested
 * in the caller's group, if any). In place (sendbuff == recvbuff +
 * rank*count at the root) is a self-message onto the same bytes. */
static mcclResult_t rooted(const char* api, int gather, const void* sendbuff, void* recvbuff, size_t count,
                           mcclDataType_t dt, int root, mcclComm_t comm, mcStream_t stream) {
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, api, &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_stream(c, stream, api, &r);
  if (vs == NULL) return r;
  int n = vsim_comm_nranks(c), me = vsim_comm_rank(c);
  size_t es = vsim_dtype_size(dt);
  if (es == 0) return fail(mcclInvalidArgument, "%s: invalid data type %d", api, dt);
  if (root < 0 || root >= n) return fail(mcclInvalidArgument, "%s: invalid root %d (nranks %d)", api, root, n);
  if (count == 0) return mcclSuccess;
  vsim_result v = vsim_group_start();
  for (int p = 0; p < n && v == VSIM_OK; p++) {
    if (gather) {
      if (p == root) v = vsim_send(c, api, sendbuff, count, dt, root, vs);
      if (v == VSIM_OK && me == root) v = vsim_recv(c, api, (char*)recvbuff + (size_t)p * count * es, count, dt, p, vs);
    } else {
      if (me == root) v = vsim_send(c, api, (const char*)sendbuff + (size_t)p * count * es, count, dt, p, vs);
      if (v == VSIM_OK && p == root) v = vsim_recv(c, api, recvbuff, count, dt, root, vs);
    }
  }
  vsim_result end = vsim_group_end(api);
  return res(v != VSIM_OK ? v : end);
}

EXPORT mcclResult_t mcclGather(const void* sendbuff, void* recvbuff, size_t sendcount, mcclDataType_t datatype,
                               int root, mcclComm_t comm, mcStream_t stream) {
  return rooted("mcclGather", 1, sendbuff, recvbuff, sendcount, datatype, root, comm, stream);
}

EXPORT mcclResult_t mcclScatter(const void* sendbuff, void* recvbuff, size_t recvcount, mcclDataType_t datatype,
                                int root, mcclComm_t comm, mcStream_t stream) {
  return rooted("mcclScatter", 0, sendbuff, recvbuff, recvcount, datatype, root, comm, stream);
}

/* ---- point-to-point and groups ---- */

EXPORT mcclResult_t mcclSend(const void* sendbuff, size_t count, mcclDataType_t datatype, int peer, mcclComm_t comm,
                             mcStream_t stream) {
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, "mcclSend", &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_stream(c, stream, "mcclSend", &r);
  if (vs == NULL) return r;
  return res(vsim_send(c, "mcclSend", sendbuff, count, datatype, peer, vs));
}

EXPORT mcclResult_t mcclRecv(void* recvbuff, size_t count, mcclDataType_t datatype, int peer, mcclComm_t comm,
                             mcStream_t stream) {
  mcclResult_t r = mcclSuccess;
  vsim_comm* c = get_comm(comm, "mcclRecv", &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_stream(c, stream, "mcclRecv", &r);
  if (vs == NULL) return r;
  return res(vsim_recv(c, "mcclRecv", recvbuff, count, datatype, peer, vs));
}

EXPORT mcclResult_t mcclGroupStart(void) { return res(vsim_group_start()); }

EXPORT mcclResult_t mcclGroupEnd(void) { return res(vsim_group_end("mcclGroupEnd")); }

/* ---- errors ---- */

EXPORT const char* mcclGetErrorString(mcclResult_t result) {
  switch (result) {
    case mcclSuccess: return "no error";
    case mcclUnhandledMacaError: return "unhandled maca error (vendorsim: see mcclGetLastError)";
    case mcclSystemError: return "unhandled system error (vendorsim: see mcclGetLastError)";
    case mcclInternalError: return "internal error (vendorsim: see mcclGetLastError)";
    case mcclInvalidArgument: return "invalid argument (vendorsim: see mcclGetLastError)";
    case mcclInvalidUsage: return "invalid usage (vendorsim: see mcclGetLastError)";
    case mcclRemoteError: return "remote process exited or there was a network error";
    case mcclInProgress: return "MCCL operation in progress";
    default: return "unknown result code";
  }
}

EXPORT const char* mcclGetLastError(mcclComm_t comm) {
  const char* t = vsim_last_error();
  if (t[0] != '\0') return t;
  vsim_comm* c = comm ? vsim_comm_lookup(comm) : NULL;
  return c ? vsim_comm_last_error(c) : t;
}
