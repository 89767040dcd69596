/*
 * flagcx-go's stand-in for FlagCX's flagcx/core/include/flagcx_net.h (its
 * net adaptor interface, internal to FlagCX), for building FlagCX's perf
 * tests unchanged: of it they use only the pointer types of
 * flagcxOneSideSignalRegister, whose values are FlagCX's.
 */
#ifndef FLAGCX_NET_H_
#define FLAGCX_NET_H_

#include "flagcx.h"

#define FLAGCX_PTR_HOST 0x1
#define FLAGCX_PTR_CUDA 0x2
#define FLAGCX_PTR_DMABUF 0x4

#endif /* FLAGCX_NET_H_ */
