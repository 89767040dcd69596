/*
 * flagcx-go's stand-in for FlagCX's flagcx/core/include/comm.h (its
 * communicator internals), for building FlagCX's perf tests unchanged:
 * they include it but use nothing of it beyond what the public headers it
 * pulls in declare.
 */
#ifndef FLAGCX_COMM_H_
#define FLAGCX_COMM_H_

#include "flagcx.h"
#include "flagcx_kernel.h"
#include "flagcx_net.h"

#endif /* FLAGCX_COMM_H_ */
