/*
 * flagcx_kernel.h: the part of FlagCX's flagcx_kernel.h (flagcx/include of
 * flagos-ai/FlagCX) that flagcx-go's libflagcx.so serves.
 *
 * FlagCX's header declares its device (kernel) API, which flagcx-go does
 * not have, and a few host entries; of those, FlagCX's perf tests call
 * flagcxOneSideSignalDeregister. It is declared as FlagCX declares it:
 * outside extern "C", so a C++ program calls it by its C++ name, which
 * the library exports beside the C one. docs/c-api.md, "One-sided
 * operations", says what it does here.
 */
#ifndef FLAGCX_KERNEL_H_
#define FLAGCX_KERNEL_H_

#include "flagcx.h"

/* Returns the communicator to its own signal slots, so that the buffer
 * flagcxOneSideSignalRegister gave it may be freed. Collective in
 * flagcx-go: every rank calls it. */
flagcxResult_t flagcxOneSideSignalDeregister(flagcxComm_t comm);

#endif /* FLAGCX_KERNEL_H_ */
