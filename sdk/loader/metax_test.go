package loader

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// The metax plugin's tests. The fake (fakeMetaxC) records every argument,
// so a wrong argument order, enum value, unique-id offset or handle makes a
// test fail; the emulator tests run the plugin on the make-built vendorsim
// MACA/MCCL in one process. The common vendor tests (vendors_test.go) run
// it on the emulators in 2 and 3 processes.

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
	return openFake(t, "metax", flags...)
}

// The common init failures (a missing MCCL, a runtime that is not a shared
// object, no MACA, the loader skipping the plugin) are vendors_test.go's.
func TestMetaxInitFailsCleanly(t *testing.T) {
	t.Run("wrong library lacks the vendor symbols", func(t *testing.T) {
		p, fake := fakeMetax(t)
		other := compileC(t, filepath.Join(t.TempDir(), "libother.so"), "int unrelated(void) { return 0; }\n")
		t.Setenv("FLAGCX_METAX_MCCL", other)
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "plugin metax: init")
		require.Contains(t, err.Error(), other+" lacks mcclGetVersion: it is not MetaX MCCL")
		require.Contains(t, err.Error(), "point FLAGCX_METAX_MCCL at")

		p2, _ := fakeMetax(t)
		t.Setenv("FLAGCX_METAX_MCRUNTIME", other)
		t.Setenv("FLAGCX_METAX_MCCL", fake)
		err = p2.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), other+" lacks mcGetDeviceCount: it is not MetaX MACA runtime")
		require.Contains(t, err.Error(), "FLAGCX_METAX_MCRUNTIME")
	})
	// In a fresh process: dlopen("libmcruntime.so") would find the
	// emulator of that soname if an earlier test had loaded it here.
	t.Run("MACA_PATH is searched first, a Moore Threads library is skipped", func(t *testing.T) {
		testkit.InFreshProcess(t, func(t *testing.T) {
			plugin := builtPlugin(t, "metax")
			fake := compileC(t, filepath.Join(t.TempDir(), "libfakemaca.so"), fakeMetaxC)
			b, err := os.ReadFile(fake)
			require.NoError(t, err)
			tree := func(dir string) {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, "lib"), 0o755))
				for _, n := range []string{"libmcruntime.so", "libmccl.so"} {
					require.NoError(t, os.WriteFile(filepath.Join(dir, "lib", n), b, 0o755))
				}
			}
			maca, musa := filepath.Join(t.TempDir(), "maca"), filepath.Join(t.TempDir(), "musa")
			tree(maca)
			tree(musa)
			t.Setenv("FLAGCX_METAX_MCRUNTIME", "")
			t.Setenv("FLAGCX_METAX_MCCL", "")

			t.Setenv("MACA_PATH", maca)
			p, err := Open(plugin)
			require.NoError(t, err)
			require.NoError(t, p.Init(InitOptions{}))
			require.Equal(t, filepath.Join(maca, "lib", "libmcruntime.so"), p.Info().Libraries[0].Path)
			require.Equal(t, filepath.Join(maca, "lib", "libmccl.so"), p.Info().Libraries[1].Path)

			t.Setenv("MACA_PATH", musa)
			p, err = Open(builtPlugin(t, "metax"))
			require.NoError(t, err)
			err = p.Init(InitOptions{})
			if err == nil {
				require.NotContains(t, p.Info().Libraries[0].Path, musa, "a MUSA library must never be taken for MetaX's")
				testkit.Skip(t, testkit.NoVendorSoftware, "MetaX MACA loads here (%s)", p.Info().Libraries[0].Path)
			}
			require.Contains(t, err.Error(), "cannot load libmcruntime.so (tried "+filepath.Join(musa, "lib", "libmcruntime.so"))
			require.Contains(t, err.Error(), "install MetaX MACA or set FLAGCX_METAX_MCRUNTIME")
		})
	})
}

// mxPtr reads a pointer-sized data symbol of the fake.
func mxPtr(t *testing.T, lib, sym string) uintptr { return *(*uintptr)(cSymbol(t, lib, sym)) }

// TestMetaxMapsOntoMacaAndMccl proves the mapping value by value against
// the recording fake.
func TestMetaxMapsOntoMacaAndMccl(t *testing.T) {
	p, fake := fakeMetax(t)
	require.NoError(t, p.Init(InitOptions{}))
	require.Equal(t, "MetaX", p.Vendor)
	info := p.Info()
	require.False(t, info.Emulated)
	require.Equal(t, "FLAGCX_METAX_MCRUNTIME", info.Libraries[0].EnvVar)
	require.Equal(t, "FLAGCX_METAX_MCCL", info.Libraries[1].EnvVar)
	require.Equal(t, fake, info.Libraries[1].Path)
	require.Equal(t, "2.16.5", info.Libraries[1].Version, "mcclGetVersion 21605")
	require.Equal(t, sdk.AllDataTypes(), info.DataTypes, "mccl.h has all ten, float64 included")
	require.Equal(t, sdk.AllRedOps(), info.RedOps, "mccl.h has mcclAvg")
	ival := func(sym string) int { return cInt(t, fake, sym) }
	calls := func() string { return cText(t, fake, "fake_calls") }

	t.Run("devices", func(t *testing.T) {
		n, err := p.DeviceCount()
		require.NoError(t, err)
		require.Equal(t, 2, n)
		di, err := p.DeviceInfo(1)
		require.NoError(t, err)
		require.Equal(t, "0000:1b:00.0", di.PCIBusID, "mcDeviceGetPCIBusId(buf, len, dev=1), lower-cased")
		require.Equal(t, "MetaX GPU 1", di.Name)
		_, err = p.DeviceInfo(5)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "plugin metax: getDeviceInfo: ")
		require.Contains(t, err.Error(), "mcDeviceGetPCIBusId: invalid device ordinal (mcError 101)")
		_, err = p.Link(0, 1)
		require.ErrorIs(t, err, sdk.ErrNotSupported, "no MACA call for links in the reference")
		require.NoError(t, p.SetDevice(1))
		require.Equal(t, 1, ival("fake_set_device"))
	})

	dev, err := p.DeviceMalloc(1, 256)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "deviceMalloc sets the device it was given")
	dev2, err := p.DeviceMalloc(0, 256)
	require.NoError(t, err)
	require.Equal(t, 0, ival("fake_set_device"))
	s, err := p.StreamCreate(1)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "streamCreate sets the device it was given")
	require.Equal(t, 1, ival("fake_stream_flags"), "mcStreamNonBlocking")

	t.Run("runtime errors quote MACA", func(t *testing.T) {
		before := ival("fake_last_error_calls")
		_, err := p.DeviceMalloc(0, 1<<41)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "plugin metax: deviceMalloc: ")
		require.Contains(t, err.Error(), "mcMalloc: out of memory (mcError 2)")
		require.Equal(t, before+1, ival("fake_last_error_calls"), "mcGetLastError clears the error")
	})

	t.Run("memcpy direction", func(t *testing.T) {
		tests := []struct {
			kind   MemcpyKind
			mcKind int // mcMemcpyKind (⚠ 1, 2, 3)
		}{{HostToDevice, 1}, {DeviceToHost, 2}, {DeviceToDevice, 3}}
		for _, tc := range tests {
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, s))
			require.Equal(t, tc.mcKind, ival("fake_kind"), "%s reaches mcMemcpyAsync as %d", tc.kind, tc.mcKind)
			require.Equal(t, 0, ival("fake_sync_copy"))
			require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_stream"))
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, 0))
			require.Equal(t, tc.mcKind, ival("fake_kind"), "%s reaches mcMemcpy as %d", tc.kind, tc.mcKind)
			require.Equal(t, 1, ival("fake_sync_copy"))
		}
	})

	t.Run("memset", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, p.Memset(dev, 0xAB, 16, s))
		require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_memset_stream"))
		require.Equal(t, 0xAB, ival("fake_memset_value"))
		require.Equal(t, 16, int(*(*uint64)(cSymbol(t, fake, "fake_memset_bytes"))))
		require.Equal(t, "mcMemsetAsync;", calls()[before:], "no synchronize with a stream")
		before = len(calls())
		require.NoError(t, p.Memset(dev, 0x11, 8, 0))
		require.Equal(t, "mcMemsetAsync;mcStreamSynchronize;", calls()[before:])
		require.Zero(t, mxPtr(t, fake, "fake_synced_stream"), "a NULL stream is waited for")
	})

	t.Run("pinned host memory is mcMallocHost", func(t *testing.T) {
		before := len(calls())
		h, err := p.HostMalloc(64)
		require.NoError(t, err)
		require.NoError(t, p.HostFree(h))
		require.Equal(t, "mcMallocHost;mcFreeHost;", calls()[before:])
	})

	t.Run("events", func(t *testing.T) {
		e0, err := p.EventCreate(0)
		require.NoError(t, err)
		require.Equal(t, 0, ival("fake_event_flags"), "mcEventDefault: timed")
		require.Equal(t, 0, ival("fake_set_device"), "eventCreate sets the device it was given")
		e1, err := p.EventCreate(0)
		require.NoError(t, err)
		require.NoError(t, p.EventRecord(e0, s))
		require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_stream"))
		done, err := p.EventQuery(e1)
		require.NoError(t, err)
		require.False(t, done, "mcErrorNotReady means pending, not failed")
		done, err = p.EventQuery(e1)
		require.NoError(t, err)
		require.True(t, done)
		_, err = p.EventQuery(e1)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError, "other codes are failures")
		require.Contains(t, err.Error(), "mcEventQuery: fake MACA: context is destroyed (mcError 709)")

		require.True(t, p.HasEventTiming())
		d, err := p.EventElapsed(e0, e1)
		require.NoError(t, err)
		require.Equal(t, 2500*time.Microsecond, d)
		require.Equal(t, uintptr(e0), mxPtr(t, fake, "fake_elapsed_start"), "mcEventElapsedTime(ms, start, end)")
		require.Equal(t, uintptr(e1), mxPtr(t, fake, "fake_elapsed_end"))

		require.NoError(t, p.StreamWaitEvent(s, e1))
		require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_wait_stream"), "mcStreamWaitEvent(stream, event, flags)")
		require.Equal(t, uintptr(e1), mxPtr(t, fake, "fake_wait_event"))
		require.Equal(t, 0, ival("fake_wait_flags"))
		require.NoError(t, p.EventDestroy(e0))
		require.NoError(t, p.EventDestroy(e1))
	})

	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Len(t, id, 128, "MCCL_UNIQUE_ID_BYTES")
	for i, b := range id {
		require.Equal(t, byte(i*5+2), b, "unique id byte %d as mcclGetUniqueId wrote it", i)
	}

	t.Run("unique id arrives intact, by value, nranks before rank", func(t *testing.T) {
		mine := make([]byte, 128)
		for i := range mine {
			mine[i] = byte(255 - 3*i)
		}
		c, err := p.CommInitRank(1, 4, mine, 3)
		require.NoError(t, err)
		require.Equal(t, mine, unsafe.Slice((*byte)(cSymbol(t, fake, "fake_uid")), 128))
		require.Equal(t, 4, ival("fake_nranks"))
		require.Equal(t, 3, ival("fake_rank"))
		require.Equal(t, 1, ival("fake_set_device"), "the communicator's device is set first")
		require.NoError(t, c.Destroy())

		_, err = p.CommInitRank(0, 13, mine, 0)
		require.ErrorIs(t, err, sdk.ErrInvalidUsage)
		require.Contains(t, err.Error(), "plugin metax: commInitRank: invalid usage: mcclCommInitRank: invalid usage: fake MCCL: 13 ranks are unlucky (mcclResult 5)")
	})

	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)

	t.Run("data types and ops", func(t *testing.T) {
		// flagcx -> mcclDataType_t / mcclRedOp_t (mccl.h): NCCL's numbers.
		mcclType := map[sdk.DataType]int{sdk.Int8: 0, sdk.Uint8: 1, sdk.Int32: 2, sdk.Uint32: 3, sdk.Int64: 4,
			sdk.Uint64: 5, sdk.Float16: 6, sdk.Float32: 7, sdk.Float64: 8, sdk.Bfloat16: 9}
		mcclOp := map[sdk.RedOp]int{sdk.Sum: 0, sdk.Prod: 1, sdk.Max: 2, sdk.Min: 3, sdk.Avg: 4}
		for dt, want := range mcclType {
			for op, wantOp := range mcclOp {
				require.NoError(t, comm.AllReduce(dev, dev2, 3, dt, op, s))
				require.Equal(t, want, ival("fake_dtype"), dt.String())
				require.Equal(t, wantOp, ival("fake_op"), op.String())
				require.Equal(t, []uintptr{dev, dev2, 3, uintptr(s)},
					[]uintptr{mxPtr(t, fake, "fake_send"), mxPtr(t, fake, "fake_recv"), mxPtr(t, fake, "fake_count"), mxPtr(t, fake, "fake_stream")})
			}
		}
		buffers := func(what string) {
			require.Equal(t, []uintptr{dev, dev2, uintptr(s)},
				[]uintptr{mxPtr(t, fake, "fake_send"), mxPtr(t, fake, "fake_recv"), mxPtr(t, fake, "fake_stream")}, what)
		}
		require.NoError(t, comm.Reduce(dev, dev2, 5, sdk.Bfloat16, sdk.Avg, 1, s))
		require.Equal(t, []int{9, 4, 1, 5}, []int{ival("fake_dtype"), ival("fake_op"), ival("fake_root"), int(mxPtr(t, fake, "fake_count"))})
		buffers("reduce")
		require.NoError(t, comm.Broadcast(dev, dev2, 6, sdk.Uint64, 1, s))
		require.Equal(t, []int{5, 1, 6}, []int{ival("fake_dtype"), ival("fake_root"), int(mxPtr(t, fake, "fake_count"))})
		buffers("broadcast")
		require.NoError(t, comm.AllGather(dev, dev2, 7, sdk.Float64, s))
		require.Equal(t, []int{8, 7}, []int{ival("fake_dtype"), int(mxPtr(t, fake, "fake_count"))})
		buffers("allGather")
		require.NoError(t, comm.ReduceScatter(dev, dev2, 8, sdk.Float16, sdk.Min, s))
		require.Equal(t, []int{6, 3, 8}, []int{ival("fake_dtype"), ival("fake_op"), int(mxPtr(t, fake, "fake_count"))})
		buffers("reduceScatter")
	})

	t.Run("MCCL errors quote MCCL", func(t *testing.T) {
		err := comm.AllReduce(dev, dev2, 7777, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "plugin metax: allReduce: invalid argument: mcclAllReduce: invalid argument: fake MCCL: count 7777 rejected (mcclResult 4)")
		err = comm.ReduceScatter(dev, dev2, 8888, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrUnhandledCCLError, "a code MCCL may add later is not one of ours")
		require.Contains(t, err.Error(), "mcclReduceScatter: fake MCCL error: fake MCCL: a code from the future (mcclResult 8)")
		err = comm.AsyncError()
		require.ErrorIs(t, err, sdk.ErrRemoteError)
		require.Contains(t, err.Error(), "fake MCCL: peer 1 vanished")
	})

	t.Run("gather scatter alltoall are MCCL's own", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			run   func() error
			call  string
			vals  []int // dtype, root, count
			roots bool
		}{
			{"gather", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 1, s) }, "mcclGather;", []int{7, 1, 4}, true},
			{"scatter", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int8, 0, s) }, "mcclScatter;", []int{0, 0, 2}, true},
			{"alltoall", func() error { return comm.AlltoAll(dev, dev2, 3, sdk.Int32, s) }, "mcclAllToAll;", []int{2, -1, 3}, false},
		} {
			before := len(calls())
			require.NoError(t, tc.run(), tc.name)
			require.Equal(t, tc.call, calls()[before:], tc.name)
			require.Equal(t, tc.vals, []int{ival("fake_dtype"), ival("fake_root"), int(mxPtr(t, fake, "fake_count"))}, tc.name)
			require.Equal(t, []uintptr{dev, dev2}, []uintptr{mxPtr(t, fake, "fake_send"), mxPtr(t, fake, "fake_recv")}, tc.name)
		}
	})

	t.Run("alltoallv is grouped send/recv at the displacements", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, comm.AlltoAllv(dev, []int{1, 0}, []int{3, 1}, dev2, []int{2, 5}, []int{0, 2}, sdk.Int32, s))
		want := fmt.Sprintf("GroupStart;Send(0,1,2,@%x);Recv(0,2,2,@%x);Recv(1,5,2,@%x);GroupEnd;", dev+12, dev2, dev2+8)
		require.Equal(t, want, calls()[before:])
	})

	t.Run("abort", func(t *testing.T) {
		c, err := p.CommInitRank(0, 2, id, 1)
		require.NoError(t, err)
		before := len(calls())
		require.NoError(t, c.Abort())
		require.Equal(t, "mcclCommAbort;", calls()[before:])
	})

	require.NoError(t, comm.Destroy())
	require.NoError(t, p.StreamDestroy(s))
	require.NoError(t, p.DeviceFree(dev))
	require.NoError(t, p.DeviceFree(dev2))
}

// TestMetaxComposesWhatMcclLacks: with an MCCL without mcclGather,
// mcclScatter and mcclAllToAll, the plugin issues grouped mcclSend/mcclRecv
// with the right peers, counts and offsets.
func TestMetaxComposesWhatMcclLacks(t *testing.T) {
	p, fake := fakeMetax(t, "-DNO_NATIVE")
	require.NoError(t, p.Init(InitOptions{}))
	s, r := uintptr(0x10000), uintptr(0x20000) // never dereferenced by the fake
	id, err := p.UniqueID()
	require.NoError(t, err)
	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)
	defer comm.Destroy()
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"gather at root", func() error { return comm.Gather(s, r, 4, sdk.Float32, 0, 0) },
			fmt.Sprintf("GroupStart;Send(0,4,7,@%x);Recv(0,4,7,@%x);Recv(1,4,7,@%x);GroupEnd;", s, r, r+16)},
		{"gather elsewhere", func() error { return comm.Gather(s, r, 4, sdk.Float32, 1, 0) },
			fmt.Sprintf("GroupStart;Send(1,4,7,@%x);GroupEnd;", s)},
		{"scatter at root", func() error { return comm.Scatter(s, r, 2, sdk.Int8, 0, 0) },
			fmt.Sprintf("GroupStart;Send(0,2,0,@%x);Recv(0,2,0,@%x);Send(1,2,0,@%x);GroupEnd;", s, r, s+2)},
		{"scatter elsewhere", func() error { return comm.Scatter(s, r, 2, sdk.Int8, 1, 0) },
			fmt.Sprintf("GroupStart;Recv(1,2,0,@%x);GroupEnd;", r)},
		{"alltoall", func() error { return comm.AlltoAll(s, r, 3, sdk.Uint64, 0) },
			fmt.Sprintf("GroupStart;Send(0,3,5,@%x);Recv(0,3,5,@%x);Send(1,3,5,@%x);Recv(1,3,5,@%x);GroupEnd;", s, r, s+24, r+24)},
	} {
		before := len(cText(t, fake, "fake_calls"))
		require.NoError(t, tc.run(), tc.name)
		require.Equal(t, tc.want, cText(t, fake, "fake_calls")[before:], tc.name)
	}
}

// TestMetaxNotReadyIsNeverDone: mcErrorNotReady's number is unknown (❌).
// A pending query is recognized by 600 or by MACA's own text; any other
// code is an error, never "done".
func TestMetaxNotReadyIsNeverDone(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		pending    bool
	}{
		{"another number, text says not ready", `"operation not ready yet"`, true},
		{"another number and text", `"busy"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := fakeMetax(t, "-DNOT_READY=34", "-DNOT_READY_TEXT="+tc.text)
			require.NoError(t, p.Init(InitOptions{}))
			e, err := p.EventCreate(0)
			require.NoError(t, err)
			done, err := p.EventQuery(e)
			require.False(t, done)
			if tc.pending {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
				require.Contains(t, err.Error(), "mcEventQuery: busy (mcError 34)")
			}
		})
	}
}

// TestMetaxEmulatorDisagreementFails builds the emulated MACA runtime with
// another numbering of the copy directions (a MACA whose values differ
// from the plugin's belief): the plugin's copies must then fail, with the
// vendor call named, while they succeed on the emulator as built.
func TestMetaxEmulatorDisagreementFails(t *testing.T) {
	root := repoRoot(t)
	sim := builtVendorsim(t, "metax")
	data := []byte("sixteen bytes!!!")

	good := emulatedPlugin(t, "metax")
	d, err := good.DeviceMalloc(0, len(data))
	require.NoError(t, err)
	require.NoError(t, good.CopyToDevice(d, data))
	back := make([]byte, len(data))
	require.NoError(t, good.CopyFromDevice(back, d))
	require.Equal(t, data, back)
	require.NoError(t, good.DeviceFree(d))

	other := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(other, "metax"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(sim, "libflagcx-vendorsim-core.so"), filepath.Join(other, "libflagcx-vendorsim-core.so")))
	mccl, err := os.ReadFile(filepath.Join(sim, "metax", "libmccl.so"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(other, "metax", "libmccl.so"), mccl, 0o755))
	src, err := os.ReadFile(filepath.Join(root, "conformance", "vendorsim", "metax", "mcruntime.c"))
	require.NoError(t, err)
	compileC(t, filepath.Join(other, "metax", "libmcruntime.so"), string(src),
		"-DVSIM_MC_H2D=2", "-DVSIM_MC_D2H=1", "-pthread", "-fvisibility=hidden",
		"-I", filepath.Join(root, "conformance", "vendorsim", "metax"),
		"-L", sim, "-lflagcx-vendorsim-core", "-Wl,-rpath,"+sim)

	p, err := Open(builtPlugin(t, "metax"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: other}))
	d, err = p.DeviceMalloc(0, len(data))
	require.NoError(t, err)
	err = p.CopyToDevice(d, data)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "plugin metax: memCopy: unhandled device error: mcMemcpy: invalid argument")
	err = p.CopyFromDevice(back, d)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "mcMemcpy")
	require.NoError(t, p.DeviceFree(d))
}

// TestMetaxEmulatedOneProcess: the plugin on the built emulators, one
// rank: MACA's errors, copies, events and MCCL's pointer checks as they
// reach the loader. (The libraries, devices and every collective on 2 and
// 3 ranks are the common tests', vendors_test.go.)
func TestMetaxEmulatedOneProcess(t *testing.T) {
	p := emulatedPlugin(t, "metax")
	n, err := p.DeviceCount()
	require.NoError(t, err)
	_, err = p.DeviceMalloc(n+3, 8)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "mcSetDevice: invalid device ordinal (emulated mcErrorInvalidDevice) (mcError 101)")

	// copies in every direction agree with the emulator's registry
	s, err := p.StreamCreate(0)
	require.NoError(t, err)
	a, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	b, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	h, err := p.HostMalloc(64)
	require.NoError(t, err)
	pinned := HostSlice(h, 64)
	for i := range pinned {
		pinned[i] = byte(i * 7)
	}
	require.NoError(t, p.Memcpy(a, h, 64, HostToDevice, s))
	require.NoError(t, p.Memcpy(b, a, 64, DeviceToDevice, s))
	require.NoError(t, p.Memset(a, 0, 64, s))
	require.NoError(t, p.Memcpy(h, b, 64, DeviceToHost, s))
	require.NoError(t, p.StreamSynchronize(s))
	for i := range pinned {
		require.Equal(t, byte(i*7), pinned[i])
	}
	err = p.Memcpy(a, h, 64, DeviceToHost, s)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError, "the emulator catches a direction that contradicts the pointers")
	require.Contains(t, err.Error(), "mcMemcpyAsync: invalid argument")
	done, err := p.StreamQuery(s)
	require.NoError(t, err)
	require.True(t, done)

	e0, err := p.EventCreate(0)
	require.NoError(t, err)
	e1, err := p.EventCreate(0)
	require.NoError(t, err)
	require.NoError(t, p.EventRecord(e0, s))
	require.NoError(t, p.EventRecord(e1, s))
	require.NoError(t, p.EventSynchronize(e1))
	el, err := p.EventElapsed(e0, e1)
	require.NoError(t, err)
	require.GreaterOrEqual(t, el, time.Duration(0))
	require.NoError(t, p.StreamWaitEvent(s, e1))

	id, err := p.UniqueID()
	require.NoError(t, err)
	c, err := p.CommInitRank(0, 1, id, 0)
	require.NoError(t, err)
	in := testkit.Encode(sdk.Float32, 8, func(i int) float64 { return float64(i + 1) })
	require.NoError(t, p.CopyToDevice(a, in))
	require.NoError(t, c.AllReduce(a, b, 8, sdk.Float32, sdk.Avg, s))
	require.NoError(t, c.Gather(a, b, 8, sdk.Float32, 0, s))
	require.NoError(t, c.AlltoAllv(a, []int{3}, []int{5}, b, []int{3}, []int{0}, sdk.Float32, s))
	got := make([]byte, 12)
	require.NoError(t, p.StreamSynchronize(s)) // a copy on no stream does not wait for s
	require.NoError(t, p.CopyFromDevice(got, b))
	require.Equal(t, in[20:32], got)

	host := make([]float32, 8)
	err = c.AllReduce(uintptr(unsafe.Pointer(&host[0])), b, 8, sdk.Float32, sdk.Sum, s)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "pageable host memory is refused by the emulated MCCL")
	require.Contains(t, err.Error(), "plugin metax: allReduce: invalid argument: mcclAllReduce")
	require.NoError(t, c.AsyncError())
	require.NoError(t, c.Destroy())

	for _, f := range []func() error{
		func() error { return p.EventDestroy(e0) }, func() error { return p.EventDestroy(e1) },
		func() error { return p.DeviceFree(a) }, func() error { return p.DeviceFree(b) },
		func() error { return p.HostFree(h) }, func() error { return p.StreamDestroy(s) },
	} {
		require.NoError(t, f())
	}
	err = p.StreamDestroy(s)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "mcStreamDestroy: invalid resource handle")
}
