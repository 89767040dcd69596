/*
 * nccl.c: emulated NCCL (libnccl.so.2), reporting version 2.28.9.
 *
 * Exactly the NCCL entry points of docs/vendor-facts.md#nvidia-nccl, with NCCL's
 * names, argument orders and enum values; ncclUniqueId (128 bytes) is taken
 * BY VALUE as in nccl.h. NCCL's enums are the core's numbering, so values
 * pass through unchanged; this file only checks NCCL's own handles (comm,
 * cudaStream_t) and maps calls onto the core.
 *
 * Differences from real NCCL (documented in the README): operations run on
 * the stream's worker (core/stream.c), and a failure there shows in
 * ncclCommGetAsyncError and the stream's next synchronise; a non-blocking config is
 * accepted but behaves as blocking (never ncclInProgress); collectives queued
 * in a group run at the outermost ncclGroupEnd together with the p2p
 * operations; fp8 types and custom reduction ops are not emulated.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- NCCL types (nccl.h) ---- */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef int ncclDataType_t; /* ncclInt8 = 0 .. ncclBfloat16 = 9 (fp8 10, 11 not emulated) */
typedef int ncclRedOp_t;    /* ncclSum = 0 .. ncclAvg = 4 */

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm* ncclComm_t;
typedef struct CUstream_st* cudaStream_t;

/* ncclConfig_t is versioned and growing; the emulator reads only its
 * leading fields, which every version has. */
typedef struct ncclConfig ncclConfig_t;
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
} ncclConfig_head;
#define NCCL_CONFIG_MAGIC 0xcafebeefu

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE (NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH)

/* ---- emulator marker ---- */
#ifndef VSIM_SINGLE_BINARY /* the smoke test links cudart.c and nccl.c into one program */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated NCCL 2.28.9 (host memory and POSIX shared memory, no GPU)";
#endif

static const char* const TAG = "nccl";

static ncclResult_t res(vsim_result r) { return (ncclResult_t)r; }

static ncclResult_t fail(ncclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s", msg);
  return r;
}

static vsim_comm* get_comm(ncclComm_t comm, const char* api, ncclResult_t* r) {
  vsim_comm* c = vsim_comm_lookup(comm);
  if (c == NULL) {
    *r = fail(ncclInvalidArgument, "%s: invalid communicator %p (NULL, destroyed or not from ncclCommInitRank)",
              api, (void*)comm);
  }
  return c;
}

/* The core stream NCCL enqueues on (the built-in handles: the default
 * stream of the communicator's device); NULL with *r set when a real
 * launch on that stream would fail in CUDA. */
static vsim_stream* check_stream(vsim_comm* c, cudaStream_t s, const char* api, ncclResult_t* r) {
  if (s == NULL || s == (cudaStream_t)0x1 || s == (cudaStream_t)0x2) {
    vsim_stream* d = vsim_stream_default(vsim_comm_device(c));
    if (d == NULL) *r = fail(ncclSystemError, "%s: out of host memory", api);
    return d;
  }
  vsim_stream* vs = vsim_stream_lookup(s);
  if (vs == NULL) {
    *r = fail(ncclUnhandledCudaError, "%s: stream %p is not a live cudaStream_t of this process", api, (void*)s);
    return NULL;
  }
  if (vsim_stream_device(vs) != vsim_comm_device(c)) {
    *r = fail(ncclUnhandledCudaError, "%s: stream %p belongs to device %d but the communicator uses device %d",
              api, (void*)s, vsim_stream_device(vs), vsim_comm_device(c));
    return NULL;
  }
  return vs;
}

/* ---- version, ids, init ---- */

EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == NULL) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return res(vsim_get_unique_id(uniqueId, sizeof *uniqueId, TAG));
}

static ncclResult_t init(ncclComm_t* comm, int nranks, const ncclUniqueId* id, int rank, const char* api) {
  if (vsim_device_count() == 0) {
    return fail(ncclUnhandledCudaError, "%s: no CUDA device (FLAGCX_VENDORSIM_DEVICES=0)", api);
  }
  vsim_comm* c = NULL;
  vsim_result r = vsim_comm_init(&c, id, sizeof *id, TAG, nranks, rank, vsim_current_device(), api);
  if (comm != NULL) *comm = (ncclComm_t)c;
  return res(r);
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init(comm, nranks, &commId, rank, "ncclCommInitRank");
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                           ncclConfig_t* config) {
  if (config != NULL) {
    ncclConfig_head h;
    memcpy(&h, config, sizeof h);
    if (h.magic != NCCL_CONFIG_MAGIC) {
      return fail(ncclInvalidArgument,
                  "ncclCommInitRankConfig: config->magic is 0x%x, not 0x%x (initialise the config "
                  "with NCCL_CONFIG_INITIALIZER)",
                  h.magic, NCCL_CONFIG_MAGIC);
    }
    /* blocking == 0 would make real NCCL return ncclInProgress; the emulator
     * always completes, which a non-blocking caller must accept too. */
  }
  return init(comm, nranks, &commId, rank, "ncclCommInitRankConfig");
}

/* ---- communicator lifetime and queries ---- */

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, "ncclCommFinalize", &r);
  return c ? res(vsim_comm_finalize(c)) : r;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL */
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, "ncclCommDestroy", &r);
  return c ? res(vsim_comm_destroy(c)) : r;
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL */
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, "ncclCommAbort", &r);
  return c ? res(vsim_comm_abort(c)) : r;
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, "ncclCommGetAsyncError", &r);
  if (c == NULL) return r;
  if (asyncError == NULL) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *asyncError = res(vsim_comm_async_error(c));
  return ncclSuccess;
}

#define QUERY(NAME, EXPR)                                                     \
  EXPORT ncclResult_t NAME(const ncclComm_t comm, int* out) {                 \
    ncclResult_t r = ncclSuccess;                                             \
    vsim_comm* c = get_comm(comm, #NAME, &r);                                 \
    if (c == NULL) return r;                                                  \
    if (out == NULL) return fail(ncclInvalidArgument, #NAME ": out is NULL"); \
    *out = EXPR;                                                              \
    return ncclSuccess;                                                       \
  }
QUERY(ncclCommCount, vsim_comm_nranks(c))
QUERY(ncclCommCuDevice, vsim_comm_device(c))
QUERY(ncclCommUserRank, vsim_comm_rank(c))

/* ---- collectives ---- */

static ncclResult_t coll(const char* api, int kind, const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, api, &r);
  if (c == NULL) return r;
  vsim_stream* s = check_stream(c, stream, api, &r);
  if (s == NULL) return r;
  vsim_coll_args a = {kind, dt, op, root, count};
  return res(vsim_collective(c, api, &a, sendbuff, recvbuff, s));
}

EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclAllReduce", VSIM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclReduce", VSIM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclBroadcast", VSIM_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclAllGather", VSIM_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, 0, comm, stream);
}

EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  return coll("ncclReduceScatter", VSIM_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0,
              comm, stream);
}

EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclAlltoAll", VSIM_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, 0, comm, stream);
}

/* ---- point-to-point and groups ---- */

EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, "ncclSend", &r);
  if (c == NULL) return r;
  vsim_stream* s = check_stream(c, stream, "ncclSend", &r);
  if (s == NULL) return r;
  return res(vsim_send(c, "ncclSend", sendbuff, count, datatype, peer, s));
}

EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
  ncclResult_t r = ncclSuccess;
  vsim_comm* c = get_comm(comm, "ncclRecv", &r);
  if (c == NULL) return r;
  vsim_stream* s = check_stream(c, stream, "ncclRecv", &r);
  if (s == NULL) return r;
  return res(vsim_recv(c, "ncclRecv", recvbuff, count, datatype, peer, s));
}

EXPORT ncclResult_t ncclGroupStart(void) { return res(vsim_group_start()); }

EXPORT ncclResult_t ncclGroupEnd(void) { return res(vsim_group_end("ncclGroupEnd")); }

/* ---- errors ---- */

EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (vendorsim: see ncclGetLastError)";
    case ncclSystemError: return "unhandled system error (vendorsim: see ncclGetLastError)";
    case ncclInternalError: return "internal error (vendorsim: see ncclGetLastError)";
    case ncclInvalidArgument: return "invalid argument (vendorsim: see ncclGetLastError)";
    case ncclInvalidUsage: return "invalid usage (vendorsim: see ncclGetLastError)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  const char* t = vsim_last_error();
  if (t[0] != '\0') return t;
  vsim_comm* c = comm ? vsim_comm_lookup(comm) : NULL;
  return c ? vsim_comm_last_error(c) : t;
}
