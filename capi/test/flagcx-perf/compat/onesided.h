/*
 * flagcx-go's stand-in for FlagCX's flagcx/core/include/onesided.h (its
 * one-sided handle internals), for building FlagCX's perf tests unchanged:
 * they include it but use nothing of it.
 */
#ifndef FLAGCX_ONESIDED_H_
#define FLAGCX_ONESIDED_H_

#include "comm.h"

#endif /* FLAGCX_ONESIDED_H_ */
