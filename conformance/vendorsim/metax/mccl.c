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
#include <stdint.h>

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

/* The entry points MCCL shares with NCCL: core/vsim_nccl.h. MCCL spells
 * its all-to-all AllToAll (NCCL: AlltoAll). */
#define VSIM_NCCL_PREFIX mccl
#define VSIM_NCCL_NAME "MCCL"
#define VSIM_NCCL_RUNTIME "MACA"
#define VSIM_NCCL_STREAM_T mcStream_t
#define VSIM_NCCL_DEVICE_ERROR mcclUnhandledMacaError
#define VSIM_NCCL_DEVICE_ERROR_TEXT "unhandled maca error"
#define VSIM_NCCL_VERSION_CODE MCCL_VERSION_CODE
#define VSIM_NCCL_DEFAULT_STREAM(s) ((s) == NULL)
#define VSIM_NCCL_ALLTOALL AllToAll
#include "../core/vsim_nccl.h"

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

QUERY(mcclCommMcDevice, vsim_comm_device(c))

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
