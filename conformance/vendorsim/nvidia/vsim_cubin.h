/*
 * vsim_cubin.h: what the emulated NVRTC (nvrtc.c) hands the emulated CUDA
 * runtime (cudart.c) in place of a cubin, and the kernels the emulated
 * device runs under their names.
 */
#ifndef VSIM_CUBIN_H
#define VSIM_CUBIN_H

#include <stdint.h>

/* The first line of an emulated image; the kernel names follow, one a line. */
#define VSIM_CUBIN_MAGIC "flagcx-vendorsim-cubin 1"

/* The nvidia plugin's reduceLocal kernels (plugins/nvidia/reduce_kernels.h):
 * flagcx_reduce_<type>, one Args by value, whose layout this mirrors. */
#define VSIM_REDUCE_PREFIX "flagcx_reduce_"
#define VSIM_REDUCE_MAX_SRCS 8
typedef struct {
  void* dst;
  const void* src[VSIM_REDUCE_MAX_SRCS];
  unsigned long long count;
  int nsrcs, op, div;
} vsim_reduce_args;

/* The nvidia plugin's relayReduce kernels (ABI v5, the same program):
 * flagcx_relay_<type>, one flagcxRelay_v5_t by value
 * (sdk/include/flagcx_plugin.h), whose layout this mirrors: 144 bytes on
 * x86-64 and every other LP64 target. */
#define VSIM_RELAY_PREFIX "flagcx_relay_"
#define VSIM_RELAY_ABORT (1ull << 63)
#define VSIM_RELAY_DONE (1ull << 62)
typedef struct {
  const void* src;
  void* window;
  uint64_t bytes;
  uint64_t* landed;
  const uint64_t* go;
  uint64_t value;
  const void* srcs[VSIM_REDUCE_MAX_SRCS];
  int32_t nsrcs, dtype, op, div;
  uint64_t count;
  void* dst;
} vsim_relay_args;
_Static_assert(sizeof(vsim_relay_args) == 144, "vsim_relay_args mirrors flagcxRelay_v5_t");

#endif /* VSIM_CUBIN_H */
