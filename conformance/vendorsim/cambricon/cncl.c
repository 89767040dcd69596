/*
 * cncl.c: emulated Cambricon CNCL (libcncl.so), reporting 1.25.0.
 *
 * Exactly the CNCL entry points that the cambricon plugin calls, with CNCL's
 * names, argument orders and enum values (docs/vendor-facts.md#cambricon-cncl,
 * all from cncl.h v1.25.0 [CNCLH]). What differs from NCCL, and is translated
 * here onto the core's NCCL numbering:
 *   - cnclDataType_t: Half/Float16 0x10, Bfloat16 0x11, Float/Float32 0x12,
 *     Int8/Char 0x20, Int16 0x21, Int/Int32 0x22, Int64 0x23, Uint8 0x30,
 *     Uint16 0x31, Uint32 0x32, Uint64 0x33, cnclInvalid 0x00. There is NO
 *     float64; int16/uint16 exist in CNCL but not in the core (they answer
 *     CNCL_RET_ERR_UNSUPPORTED here);
 *   - cnclReduceOp_t: Sum 0, Prod 1, Max 2, Min 3 and no Avg;
 *   - cnclResult_t codes 0x00..0x91 (table below);
 *   - the clique id is `struct cnclCliqueId { char data[128]; uint64_t
 *     hash; }` (136 bytes) passed BY POINTER;
 *   - cnclInitComms(comms, num_comm, dev_list, rank_list, nrank, clique_id)
 *     creates num_comm communicators of this process at once, each on its
 *     own device (dev_list[i]) and rank (rank_list[i]);
 *   - cnclGetCommCount/Rank/Device(int* out, comm): output FIRST;
 *   - cnclGetCommAsyncError(comm) returns the status as its result;
 *   - queues are cnrtQueue_t (the core's streams, shared with libcnrt.so).
 *
 * Emulator choices where real CNCL behaviour is not known (⚠, also in the
 * plugin's README):
 *   - cnclGetCliqueId sets `hash` to a 64-bit FNV-1a of `data` and
 *     cnclInitComms refuses an id whose hash does not match, so a plugin
 *     that exchanges only `data` (128 bytes, as torch_mlu does) or copies
 *     the id at an offset fails here;
 *   - core results map to: invalid argument and invalid usage (mismatched
 *     calls between ranks) -> CNCL_RET_ERR_ARGUMENTS; system (timeouts, shm)
 *     -> CNCL_RET_ERR_SYSTEM; a vanished or aborted peer ->
 *     CNCL_RET_ERR_SYS_SOCKET; bad queue -> CNCL_RET_ERR_MLU_RUNTIME;
 *   - a failed communicator reports CNCL_RET_ASYNC_ERROR from
 *     cnclGetCommAsyncError;
 *   - the NULL queue is accepted (default queue).
 * CNCL has no "last error" API; cnclGetErrorStr gives static text and the
 * reason is available through flagcxVendorsimLastError (not a CNCL API) and
 * with FLAGCX_VENDORSIM_DEBUG=1 on stderr.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- CNCL types and values (cncl.h v1.25.0) ---- */
typedef enum {
  CNCL_RET_SUCCESS = 0x00,
  CNCL_RET_ERR_INTERNAL = 0x01,
  CNCL_RET_ERR_UNSUPPORTED = 0x11,
  CNCL_RET_ERR_NULL_POINTER = 0x21,
  CNCL_RET_ERR_BUILD_RING = 0x31,
  CNCL_RET_ERR_BUILD_TREE = 0x41,
  CNCL_RET_ERR_INIT = 0x51,
  CNCL_RET_ERR_NOT_INIT = 0x61,
  CNCL_RET_ERR_REINIT = 0x71,
  CNCL_RET_ERR_NO_ALGO = 0x81,
  CNCL_RET_ERR_INVALID_VERSION = 0x91,
  CNCL_RET_ERR_SYSTEM = 0x02,
  CNCL_RET_ERR_SYS_MALLOC = 0x12,
  CNCL_RET_ERR_SYS_SOCKET = 0x22,
  CNCL_RET_ERR_SYS_IBV = 0x32,
  CNCL_RET_ERR_MLU_RUNTIME = 0x03,
  CNCL_RET_ERR_CNRT_DEVICE = 0x13,
  CNCL_RET_ERR_CNRT_MEMCOPY = 0x23,
  CNCL_RET_ERR_CNRT_MALLOC = 0x33,
  CNCL_RET_ERR_MLU_DEVICE = 0x04,
  CNCL_RET_ERR_INNETWORK_COMPUTE = 0x05,
  CNCL_RET_ASYNC_IN_PROGRESS = 0x06,
  CNCL_RET_ASYNC_ERROR = 0x16,
  CNCL_RET_ASYNC_UNKNOWN_ERROR = 0x26,
  CNCL_RET_ERR_ARGUMENTS = 0x07,
  CNCL_RET_ERR_MLU_ALLOCATE = 0x08,
  CNCL_RET_ERR_MLU_DEALLOCATE = 0x18,
  CNCL_RET_IB_RECV_NOTREADY = 0x09
} cnclResult_t;

typedef enum {
  cnclInvalid = 0x00,
  cnclHalf = 0x10,
  cnclFloat16 = 0x10,
  cnclBfloat16 = 0x11,
  cnclFloat = 0x12,
  cnclFloat32 = 0x12,
  cnclInt8 = 0x20,
  cnclChar = 0x20,
  cnclInt16 = 0x21,
  cnclInt = 0x22,
  cnclInt32 = 0x22,
  cnclInt64 = 0x23,
  cnclUint8 = 0x30,
  cnclUint16 = 0x31,
  cnclUint32 = 0x32,
  cnclUint64 = 0x33
} cnclDataType_t;

typedef enum { cnclSum = 0, cnclProd = 1, cnclMax = 2, cnclMin = 3 } cnclReduceOp_t;

#define CNCL_CLIQUE_ID_BYTES_SIZE 128
struct cnclCliqueId {
  char data[CNCL_CLIQUE_ID_BYTES_SIZE];
  uint64_t hash;
};
typedef struct cnclCliqueId* cnclCliqueId_t;
typedef struct cnclComm* cnclComm_t;
typedef struct cnrtQueue* cnrtQueue_t;
#define cnrtQueuePerThread ((cnrtQueue_t)1)

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] =
    "flagcx vendorsim: emulated Cambricon CNCL 1.25.0 (host memory and POSIX shared memory, no MLU)";
EXPORT const char* flagcxVendorsimLastError(void) { return vsim_last_error(); }

static const char* const TAG = "cncl";

static cnclResult_t fail(cnclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static cnclResult_t fail(cnclResult_t r, const char* fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vsim_set_last_error("%s", msg);
  vsim_debug("-> 0x%02x: %s", (unsigned)r, msg);
  return r;
}

/* Core (NCCL-numbered) results to CNCL codes; the core has set the text. */
static cnclResult_t res(vsim_result r) {
  switch (r) {
    case VSIM_OK: return CNCL_RET_SUCCESS;
    case VSIM_ERR_DEVICE: return CNCL_RET_ERR_MLU_RUNTIME;
    case VSIM_ERR_SYSTEM: return CNCL_RET_ERR_SYSTEM;
    case VSIM_ERR_INTERNAL: return CNCL_RET_ERR_INTERNAL;
    case VSIM_ERR_INVALID_ARG: return CNCL_RET_ERR_ARGUMENTS;
    case VSIM_ERR_INVALID_USAGE: return CNCL_RET_ERR_ARGUMENTS;
    case VSIM_ERR_REMOTE: return CNCL_RET_ERR_SYS_SOCKET;
  }
  return CNCL_RET_ERR_INTERNAL;
}

/* cnclDataType_t -> core data type; -1 unknown, -2 a CNCL type the core
 * does not have (int16, uint16). */
static int dtype(cnclDataType_t t) {
  switch ((int)t) {
    case cnclInt8: return VSIM_INT8;
    case cnclUint8: return VSIM_UINT8;
    case cnclInt32: return VSIM_INT32;
    case cnclUint32: return VSIM_UINT32;
    case cnclInt64: return VSIM_INT64;
    case cnclUint64: return VSIM_UINT64;
    case cnclFloat16: return VSIM_FLOAT16;
    case cnclFloat32: return VSIM_FLOAT32;
    case cnclBfloat16: return VSIM_BFLOAT16;
    case cnclInt16:
    case cnclUint16: return -2;
  }
  return -1;
}

static cnclResult_t check_dtype(const char* api, cnclDataType_t t, int* out) {
  *out = dtype(t);
  if (*out == -2) return fail(CNCL_RET_ERR_UNSUPPORTED, "%s: cnclInt16/cnclUint16 (0x%x) are not emulated", api, (int)t);
  if (*out < 0) return fail(CNCL_RET_ERR_ARGUMENTS, "%s: invalid cnclDataType_t 0x%x", api, (int)t);
  return CNCL_RET_SUCCESS;
}

static cnclResult_t check_op(const char* api, cnclReduceOp_t op) {
  if ((int)op < cnclSum || (int)op > cnclMin)
    return fail(CNCL_RET_ERR_ARGUMENTS, "%s: invalid cnclReduceOp_t %d (CNCL has sum 0, prod 1, max 2, min 3)", api,
                (int)op);
  return CNCL_RET_SUCCESS;
}

static vsim_comm* get_comm(cnclComm_t comm, const char* api, cnclResult_t* r) {
  vsim_comm* c = vsim_comm_lookup(comm);
  if (c == NULL)
    *r = fail(CNCL_RET_ERR_ARGUMENTS, "%s: invalid communicator %p (NULL, freed or not from cnclInitComms)", api,
              (void*)comm);
  return c;
}

static vsim_stream* check_queue(vsim_comm* c, cnrtQueue_t q, const char* api, cnclResult_t* r) {
  if (q == NULL || q == cnrtQueuePerThread) return vsim_stream_default(vsim_comm_device(c));
  vsim_stream* s = vsim_stream_lookup(q);
  if (s == NULL) {
    *r = fail(CNCL_RET_ERR_MLU_RUNTIME, "%s: queue %p is not a live cnrtQueue_t of this process", api, (void*)q);
    return NULL;
  }
  if (vsim_stream_device(s) != vsim_comm_device(c)) {
    *r = fail(CNCL_RET_ERR_MLU_RUNTIME, "%s: queue %p belongs to device %d but the communicator uses device %d", api,
              (void*)q, vsim_stream_device(s), vsim_comm_device(c));
    return NULL;
  }
  return s;
}

/* ---- version, clique ids, init ---- */

EXPORT cnclResult_t cnclGetLibVersion(int* major, int* minor, int* patch) {
  if (major == NULL || minor == NULL || patch == NULL) return fail(CNCL_RET_ERR_NULL_POINTER, "cnclGetLibVersion: NULL");
  *major = 1, *minor = 25, *patch = 0;
  return CNCL_RET_SUCCESS;
}

static uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
  return h;
}

EXPORT cnclResult_t cnclGetCliqueId(cnclCliqueId_t clique_id) {
  if (clique_id == NULL) return fail(CNCL_RET_ERR_NULL_POINTER, "cnclGetCliqueId: clique_id is NULL");
  vsim_result r = vsim_get_unique_id(clique_id->data, sizeof clique_id->data, TAG);
  if (r != VSIM_OK) return res(r);
  clique_id->hash = fnv1a(clique_id->data, sizeof clique_id->data);
  return CNCL_RET_SUCCESS;
}

EXPORT cnclResult_t cnclInitComms(cnclComm_t* comms, int num_comm, const int* dev_list, const int* rank_list,
                                  int nrank, const cnclCliqueId_t clique_id) {
  const char* api = "cnclInitComms";
  if (comms == NULL || dev_list == NULL || rank_list == NULL || clique_id == NULL)
    return fail(CNCL_RET_ERR_NULL_POINTER, "%s: comms, dev_list, rank_list or clique_id is NULL", api);
  if (num_comm < 1 || num_comm > nrank)
    return fail(CNCL_RET_ERR_ARGUMENTS, "%s: num_comm %d (nrank %d)", api, num_comm, nrank);
  if (clique_id->hash != fnv1a(clique_id->data, sizeof clique_id->data))
    return fail(CNCL_RET_ERR_ARGUMENTS,
                "%s: the clique id's hash does not match its data (were all %zu bytes of struct cnclCliqueId "
                "exchanged, from offset 0?)",
                api, sizeof *clique_id);
  for (int i = 0; i < num_comm; i++) {
    comms[i] = NULL;
    if (dev_list[i] < 0 || dev_list[i] >= vsim_device_count())
      return fail(CNCL_RET_ERR_CNRT_DEVICE, "%s: dev_list[%d] = %d, but there are %d MLU devices", api, i, dev_list[i],
                  vsim_device_count());
    for (int j = 0; j < i; j++)
      if (rank_list[j] == rank_list[i]) return fail(CNCL_RET_ERR_ARGUMENTS, "%s: rank %d listed twice", api, rank_list[i]);
  }
  if (num_comm == 1) {
    vsim_comm* c = NULL;
    vsim_result r = vsim_comm_init(&c, clique_id->data, sizeof clique_id->data, TAG, nrank, rank_list[0], dev_list[0], api);
    comms[0] = (cnclComm_t)c;
    return res(r);
  }
  /* Several communicators of one process join together (one group). */
  vsim_comm* cs[num_comm];
  vsim_group_start();
  vsim_result r = VSIM_OK;
  for (int i = 0; i < num_comm && r == VSIM_OK; i++) {
    cs[i] = NULL;
    r = vsim_comm_init(&cs[i], clique_id->data, sizeof clique_id->data, TAG, nrank, rank_list[i], dev_list[i], api);
  }
  vsim_result end = vsim_group_end(api);
  if (r == VSIM_OK) r = end;
  for (int i = 0; i < num_comm; i++) {
    if (r != VSIM_OK && cs[i] != NULL) vsim_comm_destroy(cs[i]);
    comms[i] = r == VSIM_OK ? (cnclComm_t)cs[i] : NULL;
  }
  return res(r);
}

/* ---- communicator lifetime and queries ---- */

EXPORT cnclResult_t cnclFreeComm(cnclComm_t comm) {
  cnclResult_t r = CNCL_RET_SUCCESS;
  vsim_comm* c = get_comm(comm, "cnclFreeComm", &r);
  return c ? res(vsim_comm_destroy(c)) : r;
}

EXPORT cnclResult_t cnclDestroyComms(cnclComm_t* comms, int num_comm) {
  if (comms == NULL) return fail(CNCL_RET_ERR_NULL_POINTER, "cnclDestroyComms: comms is NULL");
  cnclResult_t first = CNCL_RET_SUCCESS;
  for (int i = 0; i < num_comm; i++) {
    cnclResult_t r = cnclFreeComm(comms[i]);
    if (first == CNCL_RET_SUCCESS) first = r;
  }
  return first;
}

EXPORT cnclResult_t cnclAbortComm(cnclComm_t comm) {
  cnclResult_t r = CNCL_RET_SUCCESS;
  vsim_comm* c = get_comm(comm, "cnclAbortComm", &r);
  return c ? res(vsim_comm_abort(c)) : r;
}

EXPORT cnclResult_t cnclGetCommAsyncError(const cnclComm_t comm) {
  cnclResult_t r = CNCL_RET_SUCCESS;
  vsim_comm* c = get_comm(comm, "cnclGetCommAsyncError", &r);
  if (c == NULL) return r;
  vsim_result a = vsim_comm_async_error(c);
  if (a == VSIM_OK) return CNCL_RET_SUCCESS;
  return fail(CNCL_RET_ASYNC_ERROR, "cnclGetCommAsyncError: %s", vsim_comm_last_error(c));
}

/* Output FIRST, as cncl.h declares them. */
#define QUERY(NAME, EXPR)                                                        \
  EXPORT cnclResult_t NAME(int* out, const cnclComm_t comm) {                    \
    cnclResult_t r = CNCL_RET_SUCCESS;                                           \
    vsim_comm* c = get_comm(comm, #NAME, &r);                                    \
    if (c == NULL) return r;                                                     \
    if (out == NULL) return fail(CNCL_RET_ERR_NULL_POINTER, #NAME ": out is NULL"); \
    *out = EXPR;                                                                 \
    return CNCL_RET_SUCCESS;                                                     \
  }
QUERY(cnclGetCommCount, vsim_comm_nranks(c))
QUERY(cnclGetCommRank, vsim_comm_rank(c))
QUERY(cnclGetCommDevice, vsim_comm_device(c))

/* ---- collectives ---- */

static cnclResult_t coll(const char* api, int kind, const void* send, void* recv, size_t count, cnclDataType_t dt,
                         int op, int root, cnclComm_t comm, cnrtQueue_t queue) {
  cnclResult_t r = CNCL_RET_SUCCESS;
  int vdt;
  vsim_comm* c = get_comm(comm, api, &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_queue(c, queue, api, &r);
  if (vs == NULL) return r;
  if ((r = check_dtype(api, dt, &vdt)) != CNCL_RET_SUCCESS) return r;
  if (op >= 0 && (r = check_op(api, (cnclReduceOp_t)op)) != CNCL_RET_SUCCESS) return r;
  vsim_coll_args a = {kind, vdt, op < 0 ? 0 : op, root, count};
  return res(vsim_collective(c, api, &a, send, recv, vs));
}

EXPORT cnclResult_t cnclAllReduce(const void* sendbuff, void* recvbuff, size_t count, cnclDataType_t datatype,
                                  cnclReduceOp_t op, cnclComm_t comm, cnrtQueue_t queue) {
  return coll("cnclAllReduce", VSIM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, (int)op, 0, comm, queue);
}

EXPORT cnclResult_t cnclReduce(const void* sendbuff, void* recvbuff, size_t count, cnclDataType_t datatype,
                               cnclReduceOp_t op, int root, cnclComm_t comm, cnrtQueue_t queue) {
  return coll("cnclReduce", VSIM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, (int)op, root, comm, queue);
}

EXPORT cnclResult_t cnclBroadcast(const void* sendbuff, void* recvbuff, size_t count, cnclDataType_t datatype,
                                  int root, cnclComm_t comm, cnrtQueue_t queue) {
  return coll("cnclBroadcast", VSIM_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, -1, root, comm, queue);
}

EXPORT cnclResult_t cnclAllGather(const void* sendbuff, void* recvbuff, size_t count, cnclDataType_t datatype,
                                  cnclComm_t comm, cnrtQueue_t queue) {
  return coll("cnclAllGather", VSIM_COLL_ALLGATHER, sendbuff, recvbuff, count, datatype, -1, 0, comm, queue);
}

EXPORT cnclResult_t cnclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      cnclDataType_t datatype, cnclReduceOp_t op, cnclComm_t comm,
                                      cnrtQueue_t queue) {
  return coll("cnclReduceScatter", VSIM_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, (int)op, 0, comm,
              queue);
}

EXPORT cnclResult_t cnclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, cnclDataType_t datatype,
                                 cnclComm_t comm, cnrtQueue_t queue) {
  return coll("cnclAlltoAll", VSIM_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, -1, 0, comm, queue);
}

/* ---- point-to-point and groups ---- */

EXPORT cnclResult_t cnclSend(void* sendbuff, const size_t count, cnclDataType_t datatype, const int dest,
                             const cnclComm_t comm, cnrtQueue_t queue) {
  cnclResult_t r = CNCL_RET_SUCCESS;
  int vdt;
  vsim_comm* c = get_comm(comm, "cnclSend", &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_queue(c, queue, "cnclSend", &r);
  if (vs == NULL) return r;
  if ((r = check_dtype("cnclSend", datatype, &vdt)) != CNCL_RET_SUCCESS) return r;
  return res(vsim_send(c, "cnclSend", sendbuff, count, vdt, dest, vs));
}

EXPORT cnclResult_t cnclRecv(void* recvbuff, const size_t count, cnclDataType_t datatype, const int source,
                             const cnclComm_t comm, cnrtQueue_t queue) {
  cnclResult_t r = CNCL_RET_SUCCESS;
  int vdt;
  vsim_comm* c = get_comm(comm, "cnclRecv", &r);
  if (c == NULL) return r;
  vsim_stream* vs = check_queue(c, queue, "cnclRecv", &r);
  if (vs == NULL) return r;
  if ((r = check_dtype("cnclRecv", datatype, &vdt)) != CNCL_RET_SUCCESS) return r;
  return res(vsim_recv(c, "cnclRecv", recvbuff, count, vdt, source, vs));
}

EXPORT cnclResult_t cnclGroupStart(void) { return res(vsim_group_start()); }

EXPORT cnclResult_t cnclGroupEnd(void) { return res(vsim_group_end("cnclGroupEnd")); }

/* ---- errors ---- */

EXPORT const char* cnclGetErrorStr(cnclResult_t result) {
  switch (result) {
    case CNCL_RET_SUCCESS: return "CNCL_RET_SUCCESS";
    case CNCL_RET_ERR_INTERNAL: return "CNCL_RET_ERR_INTERNAL: internal error";
    case CNCL_RET_ERR_UNSUPPORTED: return "CNCL_RET_ERR_UNSUPPORTED: unsupported operation";
    case CNCL_RET_ERR_NULL_POINTER: return "CNCL_RET_ERR_NULL_POINTER: null pointer";
    case CNCL_RET_ERR_INIT: return "CNCL_RET_ERR_INIT: initialization failed";
    case CNCL_RET_ERR_SYSTEM: return "CNCL_RET_ERR_SYSTEM: system error";
    case CNCL_RET_ERR_SYS_SOCKET: return "CNCL_RET_ERR_SYS_SOCKET: socket error (a peer went away)";
    case CNCL_RET_ERR_MLU_RUNTIME: return "CNCL_RET_ERR_MLU_RUNTIME: MLU runtime error";
    case CNCL_RET_ERR_CNRT_DEVICE: return "CNCL_RET_ERR_CNRT_DEVICE: invalid MLU device";
    case CNCL_RET_ASYNC_IN_PROGRESS: return "CNCL_RET_ASYNC_IN_PROGRESS: asynchronous operation in progress";
    case CNCL_RET_ASYNC_ERROR: return "CNCL_RET_ASYNC_ERROR: asynchronous error";
    case CNCL_RET_ERR_ARGUMENTS: return "CNCL_RET_ERR_ARGUMENTS: invalid arguments";
    default: return "unknown CNCL result";
  }
}
