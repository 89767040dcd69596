/* Stub of CUDA's cuda_fp16.h for capi/nccl/test (not CUDA's header): NCCL's
 * nccl.h includes it; the test programs use no half type. */
#ifndef FLAGCX_STUB_CUDA_FP16_H
#define FLAGCX_STUB_CUDA_FP16_H
#endif
