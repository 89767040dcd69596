// shim_ext.c: the flagcx-go extensions of flagcx.h (its "flagcx-go
// extensions" section), which FlagCX's API lacks and the NCCL drop-in
// (capi/nccl/nccl.c) needs.

#include <stdlib.h>

#include "shim.h"

flagcxResult_t flagcxCommSplit(flagcxComm_t comm, int color, int key,
                               flagcxComm_t *newcomm) {
  USABLE("flagcxCommSplit");
  if (newcomm == NULL) // on comm too: see flagcxCommShrink
    return FAIL(comm, "flagcxCommSplit", flagcxInvalidArgument,
                "newcomm is NULL: pass the address of a flagcxComm_t, which "
                "the call sets to the new communicator (NULL with "
                "FLAGCX_SPLIT_NOCOLOR)");
  *newcomm = NULL;
  NEEDCOMM(comm, "flagcxCommSplit");
  CHECK(shimBind(comm));
  shimSyncEnv();
  flagcxComm_t c = calloc(1, sizeof *c);
  if (c == NULL)
    return FAIL(comm, "flagcxCommSplit", flagcxSystemError,
                "out of host memory");
  int got = 0;
  flagcxResult_t r = capiCommSplit(comm->id, color, key, &got, &c->id, &c->dev,
                                   &c->onDevice);
  if (r != flagcxSuccess || !got) { // !got: FLAGCX_SPLIT_NOCOLOR
    free(c);
    return r;
  }
  *newcomm = c;
  return flagcxSuccess;
}

flagcxResult_t flagcxCommShrink(flagcxComm_t comm, const int *exclude,
                                int nexclude, flagcxComm_t *newcomm) {
  USABLE("flagcxCommShrink");
  // The argument errors are recorded on comm, not only as the process's
  // (NEED): flagcxGetLastError(comm) reads comm's own last error first,
  // and would otherwise still show an older failure of comm.
  if (newcomm == NULL)
    return FAIL(comm, "flagcxCommShrink", flagcxInvalidArgument,
                "newcomm is NULL: pass the address of a flagcxComm_t, which "
                "the call sets to the shrunk communicator (NULL on an "
                "excluded rank)");
  *newcomm = NULL;
  NEEDCOMM(comm, "flagcxCommShrink");
  if (nexclude < 0)
    return FAIL(comm, "flagcxCommShrink", flagcxInvalidArgument,
                "nexclude is negative: pass how many ranks exclude holds");
  if (nexclude > 0 && exclude == NULL)
    return FAIL(comm, "flagcxCommShrink", flagcxInvalidArgument,
                "exclude is NULL but nexclude is not 0: pass the ranks to "
                "exclude, or nexclude 0 to exclude none");
  CHECK(shimBind(comm));
  shimSyncEnv();
  flagcxComm_t c = calloc(1, sizeof *c);
  if (c == NULL)
    return FAIL(comm, "flagcxCommShrink", flagcxSystemError,
                "out of host memory");
  int got = 0;
  flagcxResult_t r = capiCommShrink(comm->id, (int *)exclude, nexclude, &got,
                                    &c->id, &c->dev, &c->onDevice);
  if (r != flagcxSuccess || !got) { // !got: this rank is excluded
    free(c);
    return r;
  }
  *newcomm = c;
  return flagcxSuccess;
}

flagcxResult_t flagcxCommRevoke(flagcxComm_t comm) {
  USABLE("flagcxCommRevoke");
  NEEDCOMM(comm, "flagcxCommRevoke");
  return capiCommRevoke(comm->id);
}

flagcxResult_t flagcxSetLastError(flagcxComm_t comm, const char *entry,
                                  flagcxResult_t code, const char *msg) {
  USABLE("flagcxSetLastError");
  if (code == flagcxSuccess)
    return flagcxSuccess;
  if (code < 0 || code >= flagcxNumResults)
    return FAIL(comm, "flagcxSetLastError", flagcxInvalidArgument,
                "code is not a flagcxResult_t");
  return FAIL(comm, entry ? entry : "(no entry)", code, msg ? msg : "");
}

flagcxResult_t flagcxRedOpCreatePreMulSum(flagcxRedOp_t *op, void *scalar,
                                          flagcxDataType_t datatype,
                                          flagcxScalarResidence_t residence,
                                          flagcxComm_t comm) {
  USABLE("flagcxRedOpCreatePreMulSum");
  NEED(op, "flagcxRedOpCreatePreMulSum", "op");
  NEEDCOMM(comm, "flagcxRedOpCreatePreMulSum");
  int id = 0;
  CHECK(capiRedOpCreate(comm->id, &id, scalar, datatype, residence));
  *op = (flagcxRedOp_t)id;
  return flagcxSuccess;
}

flagcxResult_t flagcxRedOpDestroy(flagcxRedOp_t op, flagcxComm_t comm) {
  USABLE("flagcxRedOpDestroy");
  NEEDCOMM(comm, "flagcxRedOpDestroy");
  return capiRedOpDestroy(comm->id, op);
}
