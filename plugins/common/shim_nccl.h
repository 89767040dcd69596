/*
 * shim_nccl.h: the collective half of a plugin whose vendor library is
 * shaped like NCCL (nvidia's NCCL, MetaX's MCCL): the same entry points with
 * a vendor prefix, NCCL's result, type and op numbers, a 128-byte unique id
 * passed by value. It defines the function-pointer list these libraries
 * share, the result check, and every ccl entry of the ABI table
 * (SHIM_NCCL_CCL_TABLE), as static functions of the including plugin, so
 * each plugin stays one shared object with its own exported table.
 *
 * The plugin defines before including it:
 *   SHIM_NCCL_PREFIX      the library's prefix token: nccl, mccl
 *   SHIM_NCCL_NAME        its name in text: "NCCL", "MCCL"
 *   SHIM_NCCL_LIB         its library in text: "libnccl"
 *   SHIM_NCCL_RESULT_T, SHIM_NCCL_COMM_T, SHIM_NCCL_UNIQUE_ID_T, SHIM_NCCL_STREAM_T
 *   SHIM_NCCL_SET_DEVICE(dev)  a statement making dev current (returns on failure)
 *   SHIM_NCCL_ALLTOALL    the spelling of its optional all-to-all: AlltoAll, AllToAll
 * and may define:
 *   SHIM_NCCL_TYPE(t), SHIM_NCCL_OP(o)  our numbers to the library's (identity)
 *   SHIM_NCCL_CHECK_OP(call, op)        a further check of a known op (none)
 *   SHIM_NCCL_ALLREDUCE_STREAM(st)      a statement run on allReduce's stream
 *   SHIM_NCCL_GATHER_SCATTER            the library may export Gather/Scatter
 *                                       (looked up as optional; else grouped p2p)
 * The plugin's REQ/OPT list starts with SHIM_NCCL_FUNCS(REQ, OPT) and adds
 * its own optional collectives (the all-to-all, and Gather/Scatter when it
 * defines SHIM_NCCL_GATHER_SCATTER).
 */
#ifndef FLAGCX_PLUGINS_SHIM_NCCL_H
#define FLAGCX_PLUGINS_SHIM_NCCL_H

#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define SHIM_CAT3_(a, b, c) a##b##c
#define SHIM_CAT3(a, b, c) SHIM_CAT3_(a, b, c)
#define SHIM_STR_(x) #x
#define SHIM_STR(x) SHIM_STR_(x)
/* NCCL_NAME(AllReduce) is ncclAllReduce; NCCL_F(AllReduce) its pointer;
 * NCCL_S(AllReduce) its name in text. */
#define NCCL_NAME(x) SHIM_CAT3(, SHIM_NCCL_PREFIX, x)
#define NCCL_F(x) SHIM_CAT3(f_, SHIM_NCCL_PREFIX, x)
#define NCCL_S(x) SHIM_STR(NCCL_NAME(x))
/* Expands name before M pastes it onto f_. */
#define SHIM_NCCL_X(M, ret, name, args) M(ret, name, args)

#ifndef SHIM_NCCL_TYPE
#define SHIM_NCCL_TYPE(t) (t)
#endif
#ifndef SHIM_NCCL_OP
#define SHIM_NCCL_OP(o) (o)
#endif
#ifndef SHIM_NCCL_CHECK_OP
#define SHIM_NCCL_CHECK_OP(call, op) flagcxSuccess
#endif
#ifndef SHIM_NCCL_ALLREDUCE_STREAM
#define SHIM_NCCL_ALLREDUCE_STREAM(st)
#endif

#define NCCL_R SHIM_NCCL_RESULT_T
#define NCCL_C SHIM_NCCL_COMM_T
#define NCCL_ST SHIM_NCCL_STREAM_T
/* The entries every NCCL-shaped library has. REQ: init fails without it;
 * OPT: NULL means the feature is unavailable. */
#define SHIM_NCCL_FUNCS(REQ, OPT)                                                                            \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(GetVersion), (int*))                                                    \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(GetUniqueId), (SHIM_NCCL_UNIQUE_ID_T*))                                 \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(CommInitRank), (NCCL_C*, int, SHIM_NCCL_UNIQUE_ID_T, int))              \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(CommDestroy), (NCCL_C))                                                 \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(AllReduce), (const void*, void*, size_t, int, int, NCCL_C, NCCL_ST))    \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(Reduce), (const void*, void*, size_t, int, int, int, NCCL_C, NCCL_ST))  \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(Broadcast), (const void*, void*, size_t, int, int, NCCL_C, NCCL_ST))    \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(AllGather), (const void*, void*, size_t, int, NCCL_C, NCCL_ST))         \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(ReduceScatter), (const void*, void*, size_t, int, int, NCCL_C, NCCL_ST)) \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(Send), (const void*, size_t, int, int, NCCL_C, NCCL_ST))                \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(Recv), (void*, size_t, int, int, NCCL_C, NCCL_ST))                      \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(GroupStart), (void))                                                    \
  SHIM_NCCL_X(REQ, NCCL_R, NCCL_NAME(GroupEnd), (void))                                                      \
  SHIM_NCCL_X(REQ, const char*, NCCL_NAME(GetErrorString), (NCCL_R))                                         \
  SHIM_NCCL_X(OPT, NCCL_R, NCCL_NAME(CommAbort), (NCCL_C))                                                   \
  SHIM_NCCL_X(OPT, NCCL_R, NCCL_NAME(CommGetAsyncError), (NCCL_C, NCCL_R*))                                  \
  SHIM_NCCL_X(OPT, const char*, NCCL_NAME(GetLastError), (NCCL_C))                                           \
  SHIM_NCCL_X(OPT, NCCL_R, NCCL_NAME(SHIM_NCCL_ALLTOALL), (const void*, void*, size_t, int, NCCL_C, NCCL_ST))
#ifdef SHIM_NCCL_GATHER_SCATTER
#define SHIM_NCCL_GATHER_SCATTER_FUNCS(REQ, OPT)                                                        \
  SHIM_NCCL_X(OPT, NCCL_R, NCCL_NAME(Gather), (const void*, void*, size_t, int, int, NCCL_C, NCCL_ST)) \
  SHIM_NCCL_X(OPT, NCCL_R, NCCL_NAME(Scatter), (const void*, void*, size_t, int, int, NCCL_C, NCCL_ST))
#else
#define SHIM_NCCL_GATHER_SCATTER_FUNCS(REQ, OPT)
#endif

/* The plugin's own list of the library, declared and loaded with it. */
#define SHIM_NCCL_ALL_FUNCS(REQ, OPT) SHIM_NCCL_FUNCS(REQ, OPT) SHIM_NCCL_GATHER_SCATTER_FUNCS(REQ, OPT)
SHIM_NCCL_ALL_FUNCS(SHIM_DECLARE, SHIM_DECLARE)

static int ncclShapeVersion; /* the loaded library's, from GetVersion */

/* Loads the library's entries and its version into shimStatus[lib]. */
static flagcxResult_t ncclShapeLoad(void* h, int lib) {
  SHIM_NCCL_ALL_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (NCCL_F(GetVersion)(&ncclShapeVersion) != 0) ncclShapeVersion = 0;
  /* X*1000+Y*100+Z up to 2.8, else X*10000+Y*100+Z */
  shimVersionNccl(shimStatus[lib].version, sizeof shimStatus[lib].version, ncclShapeVersion);
  return flagcxSuccess;
}

/* Codes 1..7 equal ours (1 is the vendor runtime's error, our device
 * error); anything newer (NCCL 2.30's ncclTimeout 8 is not our 8) becomes
 * "unhandled CCL error", with the library's own text kept. */
static flagcxResult_t ncclCheck(NCCL_R r, const char* call, NCCL_C comm) {
  const char* last;
  if (r == 0) return flagcxSuccess;
  last = NCCL_F(GetLastError) ? NCCL_F(GetLastError)(comm) : NULL;
  return shimFail(r >= 1 && r <= 7 ? (flagcxResult_t)r : flagcxUnhandledCclError, "%s: %s%s%s (%s %d)", call,
                  NCCL_F(GetErrorString)(r), last && *last ? ": " : "", last ? last : "", NCCL_S(Result), r);
}

/* Our handle wraps the library's communicator with rank and size, which
 * the grouped compositions need without extra library calls. */
typedef struct { NCCL_C lib; int rank, nranks; } ncclShapeComm;
#define NC(c) (((ncclShapeComm*)(c))->lib)

/* Our dtype and op numbers are NCCL's, which the library shares: checked,
 * they pass through SHIM_NCCL_TYPE/OP. op < 0: the call has none. */
static flagcxResult_t checkTypeOp(const char* call, flagcxDataType_t t, int op) {
  if ((unsigned)t >= flagcxNumTypes) return shimFail(flagcxInvalidArgument, "%s: data type %d is unknown", call, (int)t);
  if (op < 0) return flagcxSuccess;
  if (op >= flagcxNumRedOps) return shimFail(flagcxInvalidArgument, "%s: reduction op %d is unknown", call, op);
  return SHIM_NCCL_CHECK_OP(call, op);
}
#define CHECK_TYPE_OP(call, t, op) \
  do { flagcxResult_t r_ = checkTypeOp(call, t, op); if (r_ != flagcxSuccess) return r_; } while (0)
#define T(t) SHIM_NCCL_TYPE(t)
#define O(o) SHIM_NCCL_OP(o)
#define ST(st) ((NCCL_ST)(st))

static flagcxResult_t ncclShapeGetUniqueIdBytes(size_t* bytes) { *bytes = sizeof(SHIM_NCCL_UNIQUE_ID_T); return flagcxSuccess; }

static flagcxResult_t ncclShapeGetUniqueId(void* id) {
  SHIM_NCCL_UNIQUE_ID_T u;
  flagcxResult_t r;
  READY();
  if ((r = ncclCheck(NCCL_F(GetUniqueId)(&u), NCCL_S(GetUniqueId), NULL)) == flagcxSuccess) memcpy(id, &u, sizeof u);
  return r;
}

static flagcxResult_t ncclShapeCommInitRank(flagcxVendorComm_t* comm, int nranks, const void* id, int rank, int dev) {
  SHIM_NCCL_UNIQUE_ID_T u;
  ncclShapeComm* c;
  flagcxResult_t r;
  READY();
  SHIM_NCCL_SET_DEVICE(dev); /* the library binds the communicator to the current device */
  if (!(c = calloc(1, sizeof *c))) return shimFail(flagcxSystemError, "commInitRank: out of memory");
  memcpy(&u, id, sizeof u);
  c->rank = rank;
  c->nranks = nranks;
  if ((r = ncclCheck(NCCL_F(CommInitRank)(&c->lib, nranks, u, rank), NCCL_S(CommInitRank), NULL)) != flagcxSuccess) {
    free(c);
    return r;
  }
  *comm = (flagcxVendorComm_t)c;
  return flagcxSuccess;
}

static flagcxResult_t ncclShapeCommDestroy(flagcxVendorComm_t comm) {
  flagcxResult_t r;
  READY();
  if ((r = ncclCheck(NCCL_F(CommDestroy)(NC(comm)), NCCL_S(CommDestroy), NC(comm))) == flagcxSuccess) free(comm);
  return r;
}

static flagcxResult_t ncclShapeCommAbort(flagcxVendorComm_t comm) {
  flagcxResult_t r;
  READY();
  if (!NCCL_F(CommAbort)) return shimFail(flagcxNotSupported, NCCL_S(CommAbort) " not found in " SHIM_NCCL_LIB);
  if ((r = ncclCheck(NCCL_F(CommAbort)(NC(comm)), NCCL_S(CommAbort), NULL)) == flagcxSuccess) free(comm);
  return r;
}

static flagcxResult_t ncclShapeCommGetAsyncError(flagcxVendorComm_t comm, flagcxResult_t* asyncError) {
  NCCL_R a = 0;
  flagcxResult_t r;
  READY();
  if (!NCCL_F(CommGetAsyncError))
    return shimFail(flagcxNotSupported, NCCL_S(CommGetAsyncError) " not found in " SHIM_NCCL_LIB);
  if ((r = ncclCheck(NCCL_F(CommGetAsyncError)(NC(comm), &a), NCCL_S(CommGetAsyncError), NC(comm))) != flagcxSuccess)
    return r;
  *asyncError = a >= 0 && a <= 7 ? (flagcxResult_t)a : flagcxUnhandledCclError;
  if (a != 0) ncclCheck(a, "asynchronous " SHIM_NCCL_NAME " error", NC(comm)); /* keep its text for getLastError */
  return flagcxSuccess;
}

static flagcxResult_t ncclShapeAllReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op,
                                         flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(AllReduce), t, op);
  SHIM_NCCL_ALLREDUCE_STREAM(st);
  return ncclCheck(NCCL_F(AllReduce)(s, r, n, T(t), O(op), NC(c), ST(st)), NCCL_S(AllReduce), NC(c));
}
static flagcxResult_t ncclShapeReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op, int root,
                                      flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(Reduce), t, op);
  return ncclCheck(NCCL_F(Reduce)(s, r, n, T(t), O(op), root, NC(c), ST(st)), NCCL_S(Reduce), NC(c));
}
static flagcxResult_t ncclShapeBroadcast(const void* s, void* r, size_t n, flagcxDataType_t t, int root,
                                         flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(Broadcast), t, -1);
  return ncclCheck(NCCL_F(Broadcast)(s, r, n, T(t), root, NC(c), ST(st)), NCCL_S(Broadcast), NC(c));
}
static flagcxResult_t ncclShapeAllGather(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c,
                                         flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(AllGather), t, -1);
  return ncclCheck(NCCL_F(AllGather)(s, r, n, T(t), NC(c), ST(st)), NCCL_S(AllGather), NC(c));
}
static flagcxResult_t ncclShapeReduceScatter(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op,
                                             flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(ReduceScatter), t, op);
  return ncclCheck(NCCL_F(ReduceScatter)(s, r, n, T(t), O(op), NC(c), ST(st)), NCCL_S(ReduceScatter), NC(c));
}
static flagcxResult_t ncclShapeSend(const void* s, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c,
                                    flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(Send), t, -1);
  return ncclCheck(NCCL_F(Send)(s, n, T(t), peer, NC(c), ST(st)), NCCL_S(Send), NC(c));
}
static flagcxResult_t ncclShapeRecv(void* r, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c,
                                    flagcxStream_t st) {
  READY();
  CHECK_TYPE_OP(NCCL_S(Recv), t, -1);
  return ncclCheck(NCCL_F(Recv)(r, n, T(t), peer, NC(c), ST(st)), NCCL_S(Recv), NC(c));
}
static flagcxResult_t ncclShapeGroupStart(void) { READY(); return ncclCheck(NCCL_F(GroupStart)(), NCCL_S(GroupStart), NULL); }
static flagcxResult_t ncclShapeGroupEnd(void) { READY(); return ncclCheck(NCCL_F(GroupEnd)(), NCCL_S(GroupEnd), NULL); }

/* What the library lacks (NCCL: Gather, Scatter, AlltoAllv, and AlltoAll
 * before ncclAlltoAll) is grouped point-to-point, as FlagCX does. Counts
 * and displacements are in elements; sc/sd/rc/rd == NULL means count for
 * every peer at p*count. sendTo/recvFrom: ALL peers, NONE, or one peer (a
 * single buffer, at offset 0). The group is closed even after a failure. */
typedef struct { shimXfer x; NCCL_C lib; int t; NCCL_ST st; } ncclShapeXfer;
static int ncclShapeXferSend(shimXfer* x, const void* b, size_t n, int p) {
  ncclShapeXfer* k = (ncclShapeXfer*)x;
  return NCCL_F(Send)(b, n, k->t, p, k->lib, k->st);
}
static int ncclShapeXferRecv(shimXfer* x, void* b, size_t n, int p) {
  ncclShapeXfer* k = (ncclShapeXfer*)x;
  return NCCL_F(Recv)(b, n, k->t, p, k->lib, k->st);
}
static flagcxResult_t grouped(const char* call, const void* s, const size_t* sc, const size_t* sd, void* r,
                              const size_t* rc, const size_t* rd, size_t count, flagcxDataType_t t, int sendTo,
                              int recvFrom, flagcxVendorComm_t comm, flagcxStream_t st) {
  ncclShapeComm* c = (ncclShapeComm*)comm;
  ncclShapeXfer x;
  READY();
  CHECK_TYPE_OP(call, t, -1);
  x = (ncclShapeXfer){{c->nranks, shimTypeSize[t], NCCL_F(GroupStart), NCCL_F(GroupEnd), ncclShapeXferSend,
                       ncclShapeXferRecv},
                      c->lib, T(t), ST(st)};
  return ncclCheck(shimGrouped(&x.x, s, sc, sd, r, rc, rd, count, sendTo, recvFrom), call, c->lib);
}

#define NCCL_GROUPED(what) what " (grouped " NCCL_S(Send) "/" NCCL_S(Recv) ")"
static flagcxResult_t ncclShapeGather(const void* s, void* r, size_t n, flagcxDataType_t t, int root,
                                      flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
#ifdef SHIM_NCCL_GATHER_SCATTER
  if (NCCL_F(Gather)) {
    CHECK_TYPE_OP(NCCL_S(Gather), t, -1);
    return ncclCheck(NCCL_F(Gather)(s, r, n, T(t), root, NC(c), ST(st)), NCCL_S(Gather), NC(c));
  }
#endif
  /* every rank sends n to root; root receives peer p's n at p*n */
  return grouped(NCCL_GROUPED("gather"), s, NULL, NULL, r, NULL, NULL, n, t, root,
                 ((ncclShapeComm*)c)->rank == root ? SHIM_ALL : SHIM_NONE, c, st);
}
static flagcxResult_t ncclShapeScatter(const void* s, void* r, size_t n, flagcxDataType_t t, int root,
                                       flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
#ifdef SHIM_NCCL_GATHER_SCATTER
  if (NCCL_F(Scatter)) {
    CHECK_TYPE_OP(NCCL_S(Scatter), t, -1);
    return ncclCheck(NCCL_F(Scatter)(s, r, n, T(t), root, NC(c), ST(st)), NCCL_S(Scatter), NC(c));
  }
#endif
  /* root sends p*n.. to peer p; every rank receives n from root */
  return grouped(NCCL_GROUPED("scatter"), s, NULL, NULL, r, NULL, NULL, n, t,
                 ((ncclShapeComm*)c)->rank == root ? SHIM_ALL : SHIM_NONE, root, c, st);
}
static flagcxResult_t ncclShapeAlltoAll(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c,
                                        flagcxStream_t st) {
  READY();
  if (NCCL_F(SHIM_NCCL_ALLTOALL)) { /* only in recent NCCL; MCCL has it (H) */
    CHECK_TYPE_OP(NCCL_S(SHIM_NCCL_ALLTOALL), t, -1);
    return ncclCheck(NCCL_F(SHIM_NCCL_ALLTOALL)(s, r, n, T(t), NC(c), ST(st)), NCCL_S(SHIM_NCCL_ALLTOALL), NC(c));
  }
  return grouped(NCCL_GROUPED("alltoAll"), s, NULL, NULL, r, NULL, NULL, n, t, SHIM_ALL, SHIM_ALL, c, st);
}
/* Always grouped: the ABI reads the count arrays on the host during the
 * call; MCCL's mcclAllToAllv does not say whether it does (its RCCL
 * ancestor composes it from grouped send/recv anyway). */
static flagcxResult_t ncclShapeAlltoAllv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                                         const size_t* rd, flagcxDataType_t t, flagcxVendorComm_t c, flagcxStream_t st) {
  return grouped(NCCL_GROUPED("alltoAllv"), s, sc, sd, r, rc, rd, 0, t, SHIM_ALL, SHIM_ALL, c, st);
}

static const char* ncclShapeGetErrorString(flagcxResult_t r) {
  if (r >= 0 && r <= 7 && NCCL_F(GetErrorString)) return NCCL_F(GetErrorString)(r);
  return r == flagcxUnhandledCclError ? "unhandled " SHIM_NCCL_NAME " error"
         : r == flagcxNotSupported    ? "not supported"
                                      : "unknown result";
}

/* The .ccl part of the plugin's table. */
#define SHIM_NCCL_CCL_TABLE                                                                                        \
  {                                                                                                                \
    .getUniqueIdBytes = ncclShapeGetUniqueIdBytes, .getUniqueId = ncclShapeGetUniqueId,                                 \
    .commInitRank = ncclShapeCommInitRank, .commDestroy = ncclShapeCommDestroy, .commAbort = ncclShapeCommAbort,   \
    .commGetAsyncError = ncclShapeCommGetAsyncError, .allReduce = ncclShapeAllReduce, .reduce = ncclShapeReduce,   \
    .broadcast = ncclShapeBroadcast, .allGather = ncclShapeAllGather, .reduceScatter = ncclShapeReduceScatter,     \
    .alltoAll = ncclShapeAlltoAll, .alltoAllv = ncclShapeAlltoAllv, .gather = ncclShapeGather,                     \
    .scatter = ncclShapeScatter, .send = ncclShapeSend, .recv = ncclShapeRecv, .groupStart = ncclShapeGroupStart,  \
    .groupEnd = ncclShapeGroupEnd, .getErrorString = ncclShapeGetErrorString,                                      \
  }

#endif /* FLAGCX_PLUGINS_SHIM_NCCL_H */
