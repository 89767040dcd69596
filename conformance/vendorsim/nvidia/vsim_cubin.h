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

#endif /* VSIM_CUBIN_H */
