package loader

import (
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/base/cmem"
)

// cSymbol reads a data symbol of a library this process loaded (dlopen of
// the same path returns the same object).
func cSymbol(t *testing.T, lib, sym string) unsafe.Pointer {
	t.Helper()
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	addr, err := purego.Dlsym(h, sym)
	require.NoError(t, err)
	return cmem.Ptr(addr)
}

func cInt(t *testing.T, lib, sym string) int {
	return int(*(*int32)(cSymbol(t, lib, sym)))
}

func cText(t *testing.T, lib, sym string) string {
	return cmem.GoString(uintptr(cSymbol(t, lib, sym)))
}

// mockPluginC is a complete plugin over host memory ("acme"), shaped like
// the vendors the ABI must fit: a 136-byte unique id (as CNCL), no float64
// and no avg (as CNCL), no event timing or query (as the XPU runtime), and
// no gather/scatter/alltoall(v) (the loader composes them). Macros make the
// broken variants: MOCK_V2 (the v2 table), MOCK_V4 (the v4 table), MOCK_ABI, MOCK_SIZE_DELTA, MOCK_NULL_MEMCOPY,
// MOCK_INIT_FAIL.
const mockPluginC = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flagcx_plugin.h"
#ifdef MOCK_V2 /* an ABI v2 plugin: the v2 table, no memGetInfo */
#ifndef MOCK_ABI
#define MOCK_ABI 2
#endif
#define MOCK_TABLE_T flagcxVendorPlugin_v2_t
#define MOCK_TABLE flagcxVendorPlugin_v2
#elif defined(MOCK_V4) /* an ABI v4 plugin: the v4 table, no relayReduce */
#ifndef MOCK_ABI
#define MOCK_ABI 4
#endif
#define MOCK_TABLE_T flagcxVendorPlugin_v4_t
#define MOCK_TABLE flagcxVendorPlugin_v4
#else
#define MOCK_TABLE_T flagcxVendorPlugin_v5_t
#define MOCK_TABLE flagcxVendorPlugin_v5
#endif
#ifndef MOCK_ABI
#define MOCK_ABI FLAGCX_PLUGIN_ABI_VERSION
#endif
#ifndef MOCK_SIZE_DELTA
#define MOCK_SIZE_DELTA 0
#endif

char mock_calls[4096];
int mock_last_kind = -1;
static __thread char lastErr[256];
static void* devPtrs[64];
static const void* pendSend; static size_t pendBytes;
static const size_t tsize[10] = {1,1,4,4,8,8,2,4,8,2};

static void note(const char* s) { strncat(mock_calls, s, sizeof mock_calls - strlen(mock_calls) - 1); }
static flagcxResult_t fail(flagcxResult_t r, const char* m) { snprintf(lastErr, sizeof lastErr, "%s", m); return r; }

static const flagcxPluginLibrary_v1_t libs[] = {{"runtime", "FLAGCX_ACME_RT", "libacmert.so.1", 0, 0}, {0}};

static flagcxResult_t init(flagcxLogFn_t log, void* ctx, flagcxPluginInfo_v1_t* info) {
  log(ctx, flagcxLogInfo, "acme init called");
  info->numLibraries = 1;
#ifdef MOCK_INIT_FAIL
  snprintf(info->libraries[0].error, sizeof info->libraries[0].error, "cannot load libacmert.so.1: set FLAGCX_ACME_RT");
  return fail(flagcxSystemError, "cannot load libacmert.so.1 (no such file): install it or set FLAGCX_ACME_RT to its path");
#endif
  info->libraries[0].loaded = 1;
  snprintf(info->libraries[0].path, sizeof info->libraries[0].path, "/opt/acme/libacmert.so.1");
  snprintf(info->libraries[0].version, sizeof info->libraries[0].version, "3.1");
  info->dataTypeMask = 0x3ff & ~(1u << flagcxFloat64);
  info->redOpMask = 0xf;
  return flagcxSuccess;
}
static const char* getLastError(void) { return lastErr; }

static flagcxResult_t getDeviceCount(int* n) { *n = 1; return flagcxSuccess; }
static flagcxResult_t setDevice(int d) { return d == 0 ? flagcxSuccess : fail(flagcxInvalidArgument, "ACME_ERR_DEV: no such device"); }
static flagcxResult_t getDeviceInfo(int d, flagcxDeviceInfo_v1_t* i) {
  if (d != 0) return fail(flagcxInvalidArgument, "ACME_ERR_DEV: no such device");
  snprintf(i->name, sizeof i->name, "Acme X1"); snprintf(i->pciBusId, sizeof i->pciBusId, "0000:01:00.0");
  i->totalMemory = 1ull << 30; i->numaNode = 0; return flagcxSuccess;
}
static flagcxResult_t deviceMalloc(int d, void** p, size_t n) {
  int i; (void)d;
  for (i = 0; i < 64; i++) if (!devPtrs[i]) { *p = devPtrs[i] = calloc(1, n ? n : 1); return flagcxSuccess; }
  return fail(flagcxSystemError, "ACME_ERR_NOMEM");
}
static flagcxResult_t deviceFree(void* p) { int i; for (i = 0; i < 64; i++) if (devPtrs[i] == p) devPtrs[i] = NULL; free(p); return flagcxSuccess; }
static flagcxResult_t hostMalloc(void** p, size_t n) { *p = calloc(1, n ? n : 1); return flagcxSuccess; }
static flagcxResult_t hostFree(void* p) { free(p); return flagcxSuccess; }
static flagcxResult_t pointerKind(const void* p, flagcxMemoryKind_t* k) {
  int i; *k = flagcxMemHost;
  for (i = 0; i < 64; i++) if (devPtrs[i] && devPtrs[i] == p) *k = flagcxMemDevice;
  return flagcxSuccess;
}
__attribute__((unused)) static flagcxResult_t memCopy(void* d, const void* s, size_t n, flagcxMemcpyKind_t k, flagcxStream_t st) {
  (void)st; mock_last_kind = k; memcpy(d, s, n); return flagcxSuccess;
}
static flagcxResult_t memSet(void* d, int v, size_t n, flagcxStream_t st) { (void)st; memset(d, v, n); return flagcxSuccess; }
static flagcxResult_t streamCreate(int d, flagcxStream_t* s) { (void)d; *s = (flagcxStream_t)malloc(1); return flagcxSuccess; }
static flagcxResult_t handleFree(void* h) { free(h); return flagcxSuccess; }
static flagcxResult_t streamDestroy(flagcxStream_t s) { return handleFree(s); }
static flagcxResult_t streamSync(flagcxStream_t s) { (void)s; return flagcxSuccess; }
static flagcxResult_t streamWaitEvent(flagcxStream_t s, flagcxEvent_t e) { (void)s; (void)e; return flagcxSuccess; }
static flagcxResult_t eventCreate(int d, flagcxEvent_t* e) { (void)d; *e = (flagcxEvent_t)malloc(1); return flagcxSuccess; }
static flagcxResult_t eventDestroy(flagcxEvent_t e) { return handleFree(e); }
static flagcxResult_t eventRecord(flagcxEvent_t e, flagcxStream_t s) { (void)e; (void)s; return flagcxSuccess; }
static flagcxResult_t eventSync(flagcxEvent_t e) { (void)e; return flagcxSuccess; }

static flagcxResult_t uidBytes(size_t* n) { *n = 136; return flagcxSuccess; }
static flagcxResult_t uid(void* id) { memset(id, 0xac, 136); return flagcxSuccess; }
static flagcxResult_t commInitRank(flagcxVendorComm_t* c, int n, const void* id, int r, int d) {
  (void)d; if (n != 1 || r != 0) return fail(flagcxInvalidUsage, "ACME_ERR_SIZE: acme runs one rank");
  if (((const unsigned char*)id)[135] != 0xac) return fail(flagcxInvalidArgument, "ACME_ERR_ID: bad clique id");
  *c = (flagcxVendorComm_t)malloc(1); return flagcxSuccess;
}
static flagcxResult_t commDestroy(flagcxVendorComm_t c) { return handleFree(c); }
static flagcxResult_t allReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op, flagcxVendorComm_t c, flagcxStream_t st) {
  (void)op; (void)c; (void)st;
  if (n == 13) return fail(flagcxInvalidArgument, "ACME_ERR_13: unlucky count");
  note("allReduce;"); memmove(r, s, n * tsize[t]); return flagcxSuccess;
}
static flagcxResult_t reduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op, int root, flagcxVendorComm_t c, flagcxStream_t st) {
  (void)root; return allReduce(s, r, n, t, op, c, st);
}
static flagcxResult_t broadcast(const void* s, void* r, size_t n, flagcxDataType_t t, int root, flagcxVendorComm_t c, flagcxStream_t st) {
  (void)root; return allReduce(s, r, n, t, flagcxSum, c, st);
}
static flagcxResult_t allGather(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c, flagcxStream_t st) {
  return allReduce(s, r, n, t, flagcxSum, c, st);
}
static flagcxResult_t reduceScatter(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op, flagcxVendorComm_t c, flagcxStream_t st) {
  return allReduce(s, r, n, t, op, c, st);
}
static flagcxResult_t send(const void* b, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c, flagcxStream_t st) {
  char m[64]; (void)c; (void)st; snprintf(m, sizeof m, "send(%d,%zu);", peer, n); note(m);
  pendSend = b; pendBytes = n * tsize[t]; return flagcxSuccess;
}
static flagcxResult_t recv(void* b, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c, flagcxStream_t st) {
  char m[64]; (void)c; (void)st; snprintf(m, sizeof m, "recv(%d,%zu);", peer, n); note(m);
  if (pendSend && pendBytes == n * tsize[t]) memcpy(b, pendSend, pendBytes);
  return flagcxSuccess;
}
static flagcxResult_t groupStart(void) { note("groupStart;"); return flagcxSuccess; }
static flagcxResult_t groupEnd(void) { note("groupEnd;"); return flagcxSuccess; }

#ifndef MOCK_V2
static flagcxResult_t memGetInfo(int d, size_t* freeBytes, size_t* totalBytes) {
  if (d != 0) return fail(flagcxInvalidArgument, "ACME_ERR_DEV: no such device");
  *totalBytes = (size_t)1 << 30; *freeBytes = (size_t)3 << 28; return flagcxSuccess;
}
#endif
#if !defined(MOCK_V2) && !defined(MOCK_V4)
/* relayReduce notes every field it was handed and, being a mock without a
 * device, stores the value to landed at once. */
static flagcxResult_t relayReduce(int d, const flagcxRelay_v5_t* r, flagcxStream_t st) {
  char m[256]; (void)st;
  snprintf(m, sizeof m, "relay(%d,%p,%p,%llu,%llu,%d:%p:%p,%d,%d,%d,%llu,%p);", d, r->src, r->window,
           (unsigned long long)r->bytes, (unsigned long long)r->value, r->nsrcs, r->srcs[0], r->srcs[r->nsrcs - 1],
           r->dtype, r->op, r->avgDivisor, (unsigned long long)r->count, r->dst);
  note(m);
  if (r->bytes || r->count) *r->landed = r->value;
  return flagcxSuccess;
}
#endif

__attribute__((visibility("default"))) const MOCK_TABLE_T MOCK_TABLE = {
  .size = sizeof(MOCK_TABLE_T) + MOCK_SIZE_DELTA, .abiVersion = MOCK_ABI,
  .name = "acme", .vendor = "ACME", .version = "0.1", .caps = FLAGCX_PLUGIN_CAP_DEVICE | FLAGCX_PLUGIN_CAP_CCL,
  .libraries = libs, .init = init, .getLastError = getLastError,
  .device = {.getDeviceCount = getDeviceCount, .setDevice = setDevice, .getDeviceInfo = getDeviceInfo,
    .deviceMalloc = deviceMalloc, .deviceFree = deviceFree, .hostMalloc = hostMalloc, .hostFree = hostFree,
    .pointerKind = pointerKind,
#ifndef MOCK_NULL_MEMCOPY
    .memCopy = memCopy,
#endif
    .memSet = memSet, .streamCreate = streamCreate, .streamDestroy = streamDestroy,
    .streamSynchronize = streamSync, .streamWaitEvent = streamWaitEvent, .eventCreate = eventCreate,
    .eventDestroy = eventDestroy, .eventRecord = eventRecord, .eventSynchronize = eventSync,
#ifndef MOCK_V2
    .memGetInfo = memGetInfo,
#endif
#if !defined(MOCK_V2) && !defined(MOCK_V4)
    .relayReduce = relayReduce,
#endif
  },
  .ccl = {.getUniqueIdBytes = uidBytes, .getUniqueId = uid, .commInitRank = commInitRank, .commDestroy = commDestroy,
    .allReduce = allReduce, .reduce = reduce, .broadcast = broadcast, .allGather = allGather,
    .reduceScatter = reduceScatter, .send = send, .recv = recv, .groupStart = groupStart, .groupEnd = groupEnd},
};
`

// mockPlugin builds the acme plugin (with variant flags) as
// dir/libflagcx-<name>.so.
func mockPlugin(t *testing.T, dir, name string, flags ...string) string {
	return compileC(t, filepath.Join(dir, "libflagcx-"+name+".so"), mockPluginC, flags...)
}
