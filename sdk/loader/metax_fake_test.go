package loader

import "testing"

// fakeMetaxC is a FAKE libmcruntime + libmccl in one library: the MetaX
// signatures and values the metax plugin believes in
// (docs/vendor-facts.md#metax, mccl.h), recording what the plugin passes so the tests can
// prove its mapping value by value. Memory is host memory.
//
// Variants: -DEMULATED adds the vendorsim marker; -DNO_NATIVE leaves out
// mcclGather/mcclScatter/mcclAllToAll (older or smaller MCCL builds) so the
// plugin must compose them; -DNOT_READY=<code> and -DNOT_READY_TEXT=<string>
// change what mcEventQuery answers while the event is pending.
const fakeMetaxC = `
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef EMULATED
int flagcxVendorsimEmulated = 1;
#endif
#ifndef NOT_READY
#define NOT_READY 600
#endif
#ifndef NOT_READY_TEXT
#define NOT_READY_TEXT "device not ready"
#endif
typedef struct { char internal[128]; } mcclUniqueId;

int fake_kind = -1, fake_sync_copy = -1, fake_set_device = -1, fake_stream_flags = -1, fake_event_flags = -1;
int fake_wait_flags = -1, fake_memset_value = -1, fake_last_error_calls = 0;
int fake_dtype = -1, fake_op = -1, fake_root = -1, fake_nranks = -1, fake_rank = -1, fake_mccl_calls = 0;
size_t fake_count, fake_memset_bytes;
void *fake_stream, *fake_memset_stream, *fake_wait_stream, *fake_wait_event, *fake_elapsed_start, *fake_elapsed_end;
void *fake_synced_stream = (void*)1, *fake_comm_handle, *fake_send, *fake_recv;
unsigned char fake_uid[128];
char fake_calls[8192];
static char lastErr[256];
static int eventPolls;
static void note(const char* s) { strncat(fake_calls, s, sizeof fake_calls - strlen(fake_calls) - 1); }

/* ---- MACA runtime ---- */
int mcGetDeviceCount(int* n) { *n = 2; return 0; }
int mcSetDevice(int d) { fake_set_device = d; return d < 2 ? 0 : 101; }
int mcMalloc(void** p, size_t n) { if (n > ((size_t)1 << 40)) return 2; *p = calloc(1, n ? n : 1); return 0; }
int mcFree(void* p) { free(p); return 0; }
int mcMallocHost(void** p, size_t n, unsigned flags) { note("mcMallocHost;"); if (flags != 0) return 1; *p = calloc(1, n ? n : 1); return 0; }
int mcFreeHost(void* p) { note("mcFreeHost;"); free(p); return 0; }
int mcMemcpy(void* d, const void* s, size_t n, int kind) { fake_kind = kind; fake_sync_copy = 1; memcpy(d, s, n); return 0; }
int mcMemcpyAsync(void* d, const void* s, size_t n, int kind, void* st) {
  fake_kind = kind; fake_sync_copy = 0; fake_stream = st; memcpy(d, s, n); return 0;
}
int mcMemsetAsync(void* d, int v, size_t n, void* st) {
  fake_memset_stream = st; fake_memset_value = v; fake_memset_bytes = n; memset(d, v, n); note("mcMemsetAsync;"); return 0;
}
int mcStreamCreateWithFlags(void** s, unsigned f) { fake_stream_flags = (int)f; *s = malloc(1); return 0; }
int mcStreamDestroy(void* s) { free(s); return 0; }
int mcStreamSynchronize(void* s) { fake_synced_stream = s; note("mcStreamSynchronize;"); return 0; }
int mcStreamQuery(void* s) { (void)s; return 0; }
int mcStreamWaitEvent(void* s, void* e, unsigned f) { fake_wait_stream = s; fake_wait_event = e; fake_wait_flags = (int)f; return 0; }
int mcEventCreateWithFlags(void** e, unsigned f) { fake_event_flags = (int)f; *e = malloc(1); eventPolls = 0; return 0; }
int mcEventDestroy(void* e) { free(e); return 0; }
int mcEventRecord(void* e, void* s) { (void)e; fake_stream = s; return 0; }
/* pending, then reached, then a real failure */
int mcEventQuery(void* e) { (void)e; eventPolls++; return eventPolls == 1 ? NOT_READY : eventPolls == 2 ? 0 : 709; }
int mcEventSynchronize(void* e) { (void)e; return 0; }
int mcEventElapsedTime(float* ms, void* a, void* b) { fake_elapsed_start = a; fake_elapsed_end = b; *ms = 2.5f; return 0; }
int mcDeviceGetPCIBusId(char* b, int len, int dev) { snprintf(b, len, "0000:%02X:00.0", 0x1A + dev); return dev < 2 ? 0 : 101; }
const char* mcGetErrorString(int e) {
  if (e == NOT_READY) return NOT_READY_TEXT;
  switch (e) {
    case 2: return "out of memory";
    case 101: return "invalid device ordinal";
    case 709: return "fake MACA: context is destroyed";
    default: return "fake MACA error";
  }
}
int mcGetLastError(void) { fake_last_error_calls++; return 0; }

/* ---- MCCL ---- */
int mcclGetVersion(int* v) { *v = 21605; return 0; }
int mcclGetUniqueId(mcclUniqueId* id) { int i; for (i = 0; i < 128; i++) id->internal[i] = (char)(i * 5 + 2); return 0; }
int mcclCommInitRank(void** c, int nranks, mcclUniqueId id, int rank) {
  fake_nranks = nranks; fake_rank = rank; memcpy(fake_uid, id.internal, 128);
  if (nranks == 13) { snprintf(lastErr, sizeof lastErr, "fake MCCL: 13 ranks are unlucky"); return 5; }
  *c = fake_comm_handle = malloc(1); return 0;
}
int mcclCommDestroy(void* c) { free(c); note("mcclCommDestroy;"); return 0; }
int mcclCommAbort(void* c) { free(c); note("mcclCommAbort;"); return 0; }
int mcclCommGetAsyncError(void* c, int* a) { (void)c; *a = 6; snprintf(lastErr, sizeof lastErr, "fake MCCL: peer 1 vanished"); return 0; }
static int coll(const void* s, void* r, size_t count, int dt, int op, int root, void* comm, void* st) {
  fake_mccl_calls++; fake_send = (void*)s; fake_recv = r; fake_count = count; fake_dtype = dt; fake_op = op; fake_root = root; fake_stream = st;
  if (comm != fake_comm_handle) { snprintf(lastErr, sizeof lastErr, "fake MCCL: not my communicator"); return 4; }
  if (count == 7777) { snprintf(lastErr, sizeof lastErr, "fake MCCL: count 7777 rejected"); return 4; }
  if (count == 8888) { snprintf(lastErr, sizeof lastErr, "fake MCCL: a code from the future"); return 8; }
  lastErr[0] = 0; return 0;
}
int mcclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* c, void* st) { return coll(s, r, n, dt, op, -1, c, st); }
int mcclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* c, void* st) { return coll(s, r, n, dt, op, root, c, st); }
int mcclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* c, void* st) { return coll(s, r, n, dt, -1, root, c, st); }
int mcclAllGather(const void* s, void* r, size_t n, int dt, void* c, void* st) { return coll(s, r, n, dt, -1, -1, c, st); }
int mcclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* c, void* st) { return coll(s, r, n, dt, op, -1, c, st); }
int mcclSend(const void* b, size_t n, int dt, int peer, void* c, void* st) {
  char m[96]; (void)c; (void)st; fake_mccl_calls++;
  snprintf(m, sizeof m, "Send(%d,%zu,%d,@%lx);", peer, n, dt, (unsigned long)(uintptr_t)b); note(m); return 0;
}
int mcclRecv(void* b, size_t n, int dt, int peer, void* c, void* st) {
  char m[96]; (void)c; (void)st; fake_mccl_calls++;
  snprintf(m, sizeof m, "Recv(%d,%zu,%d,@%lx);", peer, n, dt, (unsigned long)(uintptr_t)b); note(m); return 0;
}
int mcclGroupStart(void) { note("GroupStart;"); return 0; }
int mcclGroupEnd(void) { note("GroupEnd;"); return 0; }
const char* mcclGetErrorString(int r) {
  switch (r) {
    case 4: return "invalid argument";
    case 5: return "invalid usage";
    case 6: return "remote process exited or there was a network error";
    default: return "fake MCCL error";
  }
}
const char* mcclGetLastError(void* c) { (void)c; return lastErr; }
#ifndef NO_NATIVE
int mcclGather(const void* s, void* r, size_t n, int dt, int root, void* c, void* st) { note("mcclGather;"); return coll(s, r, n, dt, -1, root, c, st); }
int mcclScatter(const void* s, void* r, size_t n, int dt, int root, void* c, void* st) { note("mcclScatter;"); return coll(s, r, n, dt, -1, root, c, st); }
int mcclAllToAll(const void* s, void* r, size_t n, int dt, void* c, void* st) { note("mcclAllToAll;"); return coll(s, r, n, dt, -1, -1, c, st); }
#endif
`

// fakeMetax builds the fake (with variant flags), points FLAGCX_METAX_* at
// it and opens a fresh copy of the built metax plugin.
func fakeMetax(t *testing.T, flags ...string) (*Plugin, string) {
	t.Helper()
	return openWithFake(t, "metax", "libfakemaca.so", fakeMetaxC, []string{"FLAGCX_METAX_MCRUNTIME", "FLAGCX_METAX_MCCL"}, flags...)
}
