/* Stub of CUDA's cuda_bf16.h for capi/nccl/test (not CUDA's header): NCCL's
 * nccl.h includes it; the test programs use no bfloat16 type. */
#ifndef FLAGCX_STUB_CUDA_BF16_H
#define FLAGCX_STUB_CUDA_BF16_H
#endif
