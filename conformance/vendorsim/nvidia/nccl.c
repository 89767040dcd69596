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
#include <stdint.h>
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

/* The entry points NCCL shares with MCCL: core/vsim_nccl.h. The built-in
 * handles 0x1 and 0x2 (cudaStreamLegacy, cudaStreamPerThread) are the
 * device's default stream, as NULL is. */
#define VSIM_NCCL_PREFIX nccl
#define VSIM_NCCL_NAME "NCCL"
#define VSIM_NCCL_RUNTIME "CUDA"
#define VSIM_NCCL_STREAM_T cudaStream_t
#define VSIM_NCCL_DEVICE_ERROR ncclUnhandledCudaError
#define VSIM_NCCL_DEVICE_ERROR_TEXT "unhandled cuda error"
#define VSIM_NCCL_VERSION_CODE NCCL_VERSION_CODE
#define VSIM_NCCL_DEFAULT_STREAM(s) ((s) == NULL || (s) == (cudaStream_t)0x1 || (s) == (cudaStream_t)0x2)
#define VSIM_NCCL_ALLTOALL AlltoAll
#include "../core/vsim_nccl.h"

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

QUERY(ncclCommCuDevice, vsim_comm_device(c))
