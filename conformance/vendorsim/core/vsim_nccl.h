/*
 * vsim_nccl.h: the entry points an NCCL-shaped collective library has in
 * common (nvidia/nccl.c, metax/mccl.c), emulated on the core: version,
 * unique id, init, lifetime, queries, the five collectives and the
 * all-to-all, send/recv, groups and error text. The including file
 * declares the library's own types and enums (from its header, kept apart
 * from the plugins' declarations: docs/architecture.md, decision 8) and
 * defines before including it:
 *
 *   VSIM_NCCL_PREFIX        the prefix token: nccl, mccl
 *   VSIM_NCCL_NAME          the library in text: "NCCL", "MCCL"
 *   VSIM_NCCL_RUNTIME       its device runtime in text: "CUDA", "MACA"
 *   VSIM_NCCL_STREAM_T      the runtime's stream type
 *   VSIM_NCCL_DEVICE_ERROR  result 1 by its name (ncclUnhandledCudaError)
 *   VSIM_NCCL_DEVICE_ERROR_TEXT  its text ("unhandled cuda error")
 *   VSIM_NCCL_VERSION_CODE  what GetVersion reports
 *   VSIM_NCCL_DEFAULT_STREAM(s)  1 when s names the device's default stream
 *   VSIM_NCCL_ALLTOALL      the all-to-all's spelling: AlltoAll, AllToAll
 *
 * Types are the library's: <prefix>Result_t, <prefix>Comm_t,
 * <prefix>UniqueId, <prefix>DataType_t, <prefix>RedOp_t; the results are
 * <prefix>Success and so on, NCCL's numbers, which are the core's.
 */
#ifndef VSIM_NCCL_H
#define VSIM_NCCL_H

#include <stdarg.h>
#include <stdio.h>

#include "vsim_core.h"

#define VSIM_CAT3_(a, b, c) a##b##c
#define VSIM_CAT3(a, b, c) VSIM_CAT3_(a, b, c)
#define VSIM_STR_(x) #x
#define VSIM_STR(x) VSIM_STR_(x)
/* N(AllReduce) is ncclAllReduce; S(AllReduce) its name in text. */
#define N(x) VSIM_CAT3(, VSIM_NCCL_PREFIX, x)
#define S(x) VSIM_STR(N(x))
#define RESULT N(Result_t)
#define COMM N(Comm_t)

static const char* const TAG = VSIM_STR(VSIM_NCCL_PREFIX);

static RESULT res(vsim_result r) { return (RESULT)r; }

static RESULT fail(RESULT r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static RESULT fail(RESULT r, const char* fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s", msg);
  return r;
}

static vsim_comm* get_comm(COMM comm, const char* api, RESULT* r) {
  vsim_comm* c = vsim_comm_lookup(comm);
  if (c == NULL) {
    *r = fail(N(InvalidArgument), "%s: invalid communicator %p (NULL, destroyed or not from %s)", api, (void*)comm,
              S(CommInitRank));
  }
  return c;
}

/* The core stream the library enqueues on (the default stream of the
 * communicator's device for the runtime's built-in handles); NULL with *r
 * set where a real launch on that stream would fail. */
static vsim_stream* check_stream(vsim_comm* c, VSIM_NCCL_STREAM_T s, const char* api, RESULT* r) {
  if (VSIM_NCCL_DEFAULT_STREAM(s)) {
    vsim_stream* d = vsim_stream_default(vsim_comm_device(c));
    if (d == NULL) *r = fail(N(SystemError), "%s: out of host memory", api);
    return d;
  }
  vsim_stream* vs = vsim_stream_lookup(s);
  if (vs == NULL) {
    *r = fail(VSIM_NCCL_DEVICE_ERROR, "%s: stream %p is not a live %s of this process", api, (void*)s,
              VSIM_STR(VSIM_NCCL_STREAM_T));
    return NULL;
  }
  if (vsim_stream_device(vs) != vsim_comm_device(c)) {
    *r = fail(VSIM_NCCL_DEVICE_ERROR, "%s: stream %p belongs to device %d but the communicator uses device %d", api,
              (void*)s, vsim_stream_device(vs), vsim_comm_device(c));
    return NULL;
  }
  return vs;
}

/* ---- version, ids, init ---- */

EXPORT RESULT N(GetVersion)(int* version) {
  if (version == NULL) return fail(N(InvalidArgument), "%s: version is NULL", S(GetVersion));
  *version = VSIM_NCCL_VERSION_CODE;
  return N(Success);
}

EXPORT RESULT N(GetUniqueId)(N(UniqueId) * uniqueId) {
  return res(vsim_get_unique_id(uniqueId, sizeof *uniqueId, TAG));
}

static RESULT init(COMM* comm, int nranks, const N(UniqueId) * id, int rank, const char* api) {
  if (vsim_device_count() == 0) {
    return fail(VSIM_NCCL_DEVICE_ERROR, "%s: no %s device (FLAGCX_VENDORSIM_DEVICES=0)", api, VSIM_NCCL_RUNTIME);
  }
  vsim_comm* c = NULL;
  vsim_result r = vsim_comm_init(&c, id, sizeof *id, TAG, nranks, rank, vsim_current_device(), api);
  if (comm != NULL) *comm = (COMM)c;
  return res(r);
}

EXPORT RESULT N(CommInitRank)(COMM* comm, int nranks, N(UniqueId) commId, int rank) {
  return init(comm, nranks, &commId, rank, S(CommInitRank));
}

/* ---- communicator lifetime and queries ---- */

EXPORT RESULT N(CommFinalize)(COMM comm) {
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, S(CommFinalize), &r);
  return c ? res(vsim_comm_finalize(c)) : r;
}

EXPORT RESULT N(CommDestroy)(COMM comm) {
  if (comm == NULL) return N(Success); /* as NCCL */
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, S(CommDestroy), &r);
  return c ? res(vsim_comm_destroy(c)) : r;
}

EXPORT RESULT N(CommAbort)(COMM comm) {
  if (comm == NULL) return N(Success); /* as NCCL */
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, S(CommAbort), &r);
  return c ? res(vsim_comm_abort(c)) : r;
}

EXPORT RESULT N(CommGetAsyncError)(COMM comm, RESULT* asyncError) {
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, S(CommGetAsyncError), &r);
  if (c == NULL) return r;
  if (asyncError == NULL) return fail(N(InvalidArgument), "%s: asyncError is NULL", S(CommGetAsyncError));
  *asyncError = res(vsim_comm_async_error(c));
  return N(Success);
}

/* (const comm, int* out): comm first, as NCCL (CNCL differs). The
 * including file adds its device query (ncclCommCuDevice, mcclCommMcDevice). */
#define QUERY(NAME, EXPR)                                                    \
  EXPORT RESULT NAME(const COMM comm, int* out) {                            \
    RESULT r = N(Success);                                                   \
    vsim_comm* c = get_comm(comm, #NAME, &r);                                \
    if (c == NULL) return r;                                                 \
    if (out == NULL) return fail(N(InvalidArgument), #NAME ": out is NULL"); \
    *out = EXPR;                                                             \
    return N(Success);                                                       \
  }
#define QUERY_(NAME, EXPR) QUERY(NAME, EXPR) /* expands NAME first */
QUERY_(N(CommCount), vsim_comm_nranks(c))
QUERY_(N(CommUserRank), vsim_comm_rank(c))

/* ---- collectives ---- */

static RESULT coll(const char* api, int kind, const void* sendbuff, void* recvbuff, size_t count, N(DataType_t) dt,
                   N(RedOp_t) op, int root, COMM comm, VSIM_NCCL_STREAM_T stream) {
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, api, &r);
  if (c == NULL) return r;
  vsim_stream* s = check_stream(c, stream, api, &r);
  if (s == NULL) return r;
  vsim_coll_args a = {kind, dt, op, root, count};
  return res(vsim_collective(c, api, &a, sendbuff, recvbuff, s));
}

EXPORT RESULT N(AllReduce)(const void* sendbuff, void* recvbuff, size_t count, N(DataType_t) datatype, N(RedOp_t) op,
                           COMM comm, VSIM_NCCL_STREAM_T stream) {
  return coll(S(AllReduce), VSIM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

EXPORT RESULT N(Reduce)(const void* sendbuff, void* recvbuff, size_t count, N(DataType_t) datatype, N(RedOp_t) op,
                        int root, COMM comm, VSIM_NCCL_STREAM_T stream) {
  return coll(S(Reduce), VSIM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

EXPORT RESULT N(Broadcast)(const void* sendbuff, void* recvbuff, size_t count, N(DataType_t) datatype, int root,
                           COMM comm, VSIM_NCCL_STREAM_T stream) {
  return coll(S(Broadcast), VSIM_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

EXPORT RESULT N(AllGather)(const void* sendbuff, void* recvbuff, size_t sendcount, N(DataType_t) datatype, COMM comm,
                           VSIM_NCCL_STREAM_T stream) {
  return coll(S(AllGather), VSIM_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, 0, comm, stream);
}

EXPORT RESULT N(ReduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount, N(DataType_t) datatype,
                               N(RedOp_t) op, COMM comm, VSIM_NCCL_STREAM_T stream) {
  return coll(S(ReduceScatter), VSIM_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
              stream);
}

EXPORT RESULT N(VSIM_NCCL_ALLTOALL)(const void* sendbuff, void* recvbuff, size_t count, N(DataType_t) datatype,
                                    COMM comm, VSIM_NCCL_STREAM_T stream) {
  return coll(S(VSIM_NCCL_ALLTOALL), VSIM_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, 0, comm, stream);
}

/* ---- point-to-point and groups ---- */

EXPORT RESULT N(Send)(const void* sendbuff, size_t count, N(DataType_t) datatype, int peer, COMM comm,
                      VSIM_NCCL_STREAM_T stream) {
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, S(Send), &r);
  if (c == NULL) return r;
  vsim_stream* s = check_stream(c, stream, S(Send), &r);
  if (s == NULL) return r;
  return res(vsim_send(c, S(Send), sendbuff, count, datatype, peer, s));
}

EXPORT RESULT N(Recv)(void* recvbuff, size_t count, N(DataType_t) datatype, int peer, COMM comm,
                      VSIM_NCCL_STREAM_T stream) {
  RESULT r = N(Success);
  vsim_comm* c = get_comm(comm, S(Recv), &r);
  if (c == NULL) return r;
  vsim_stream* s = check_stream(c, stream, S(Recv), &r);
  if (s == NULL) return r;
  return res(vsim_recv(c, S(Recv), recvbuff, count, datatype, peer, s));
}

EXPORT RESULT N(GroupStart)(void) { return res(vsim_group_start()); }

EXPORT RESULT N(GroupEnd)(void) { return res(vsim_group_end(S(GroupEnd))); }

/* ---- errors ---- */

#define SEE_LAST " (vendorsim: see " S(GetLastError) ")"
EXPORT const char* N(GetErrorString)(RESULT result) {
  switch (result) {
    case N(Success): return "no error";
    case VSIM_NCCL_DEVICE_ERROR: return VSIM_NCCL_DEVICE_ERROR_TEXT SEE_LAST;
    case N(SystemError): return "unhandled system error" SEE_LAST;
    case N(InternalError): return "internal error" SEE_LAST;
    case N(InvalidArgument): return "invalid argument" SEE_LAST;
    case N(InvalidUsage): return "invalid usage" SEE_LAST;
    case N(RemoteError): return "remote process exited or there was a network error";
    case N(InProgress): return VSIM_NCCL_NAME " operation in progress";
    default: return "unknown result code";
  }
}

EXPORT const char* N(GetLastError)(COMM comm) {
  const char* t = vsim_last_error();
  if (t[0] != '\0') return t;
  vsim_comm* c = comm ? vsim_comm_lookup(comm) : NULL;
  return c ? vsim_comm_last_error(c) : t;
}

#endif /* VSIM_NCCL_H */
