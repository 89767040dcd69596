package loader

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// The mapping test's copy of the numbers the kunlunxin plugin must pass.
//
// BKCL's values are UNVERIFIED (docs/vendor-facts.md#kunlunxin-bkcl: ❌, no public header):
// this copy, the plugin's table (plugins/kunlunxin/kunlunxin.c) and the
// emulator's model (conformance/vendorsim/kunlunxin/bkcl.c) are kept apart
// on purpose, so that changing one alone fails a test. Verify them with a
// probe compiled against bkcl.h (plugins/kunlunxin/README.md) and change
// all three together. The XPU values are from xpu/runtime.h ([KLRT], H).
const (
	klxBKCLSuccess         = 0
	klxBKCLInvalidArgument = 1

	klxBKCLFloat    = 0
	klxBKCLFloat16  = 1
	klxBKCLInt32    = 2
	klxBKCLInt64    = 3
	klxBKCLUint8    = 4
	klxBKCLFloat64  = 5
	klxBKCLBfloat16 = 6

	klxBKCLAdd     = 0
	klxBKCLProduct = 1
	klxBKCLMax     = 2
	klxBKCLMin     = 3

	klxXPUDeviceToHost   = 0
	klxXPUHostToDevice   = 1
	klxXPUDeviceToDevice = 2
	klxXPUMemMain        = 0
)

// klxTypes: the BKCL type each flagcx type maps to, and whether BKCL has it
// (it has no int8, uint32 or uint64: those would travel as the same-size
// type, and are never reduced that way).
var klxTypes = map[sdk.DataType]struct {
	bkcl   int
	native bool
}{
	sdk.Int8: {klxBKCLUint8, false}, sdk.Uint8: {klxBKCLUint8, true}, sdk.Int32: {klxBKCLInt32, true},
	sdk.Uint32: {klxBKCLInt32, false}, sdk.Int64: {klxBKCLInt64, true}, sdk.Uint64: {klxBKCLInt64, false},
	sdk.Float16: {klxBKCLFloat16, true}, sdk.Float32: {klxBKCLFloat, true}, sdk.Float64: {klxBKCLFloat64, true},
	sdk.Bfloat16: {klxBKCLBfloat16, true},
}

var klxOps = map[sdk.RedOp]int{sdk.Sum: klxBKCLAdd, sdk.Prod: klxBKCLProduct, sdk.Max: klxBKCLMax, sdk.Min: klxBKCLMin}

// fakeKunlunxinC is a FAKE libxpurt + libbkcl in one library, with the
// signatures of docs/vendor-facts.md#kunlunxin, recording what the plugin passes
// so the tests can prove its mapping (argument orders, enum values, unique
// id bytes, where the alltoallv counts live). "Device" memory is host
// memory the fake remembers. Variants:
//
//	-DEMULATED         exports the vendorsim marker
//	-DCXX_ONLY         BKCL functions only under C++ names (in a namespace)
//	-DOVERLOAD         (with CXX_ONLY) a second C++ bkcl_all_reduce
//	-DNO_BKCL          no BKCL at all (a wrong library for FLAGCX_KUNLUNXIN_BKCL)
//	-DNO_ALLTOALL      no bkcl_all_to_all(_v): the plugin groups send/recv
//	-DNO_MEMCPY_ASYNC  no xpu_memcpy_async
//	-DFAKE_UID_BYTES=n bkcl_get_unique_id writes n bytes (default 300)
const fakeKunlunxinC = `
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef EMULATED
int flagcxVendorsimEmulated = 1;
#endif
#ifndef FAKE_UID_BYTES
#define FAKE_UID_BYTES 300
#endif

int fake_kind = -1, fake_sync_copy = -1, fake_set_device = -1, fake_malloc_kind = -1, fake_host_flags = -1;
int fake_dtype = -1, fake_rtype = -1, fake_op = -1, fake_root = -1, fake_peer = -1, fake_rank = -1, fake_nranks = -1;
int fake_bkcl_calls = 0, fake_counts_on_device = -1;
size_t fake_count;
void *fake_stream, *fake_recvbuf;
unsigned char fake_uid[4096];
size_t fake_counts[32];
char fake_calls[8192];
static void* devs[64];
static size_t devsz[64];
static void note(const char* s) { strncat(fake_calls, s, sizeof fake_calls - strlen(fake_calls) - 1); }
__attribute__((unused)) static int isDev(const void* p, size_t n) {
  int i;
  for (i = 0; i < 64; i++)
    if (devs[i] && (const char*)p >= (char*)devs[i] && (const char*)p + n <= (char*)devs[i] + devsz[i]) return 1;
  return 0;
}

/* ---- XPU runtime: errors come back positive here and negative there, as
 * the XRE documentation and the header disagree. ---- */
int xpu_device_count(int* n) { *n = 2; return 0; }
int xpu_set_device(int d) { fake_set_device = d; return d < 2 ? 0 : 701; }
int xpu_malloc(void** p, uint64_t n, int kind) {
  int i;
  fake_malloc_kind = kind;
  if (n > (1ull << 40)) return -705;
  for (i = 0; i < 64; i++)
    if (!devs[i]) { *p = devs[i] = calloc(1, n ? n : 1); devsz[i] = n; return 0; }
  return -705;
}
int xpu_free(void* p) { int i; for (i = 0; i < 64; i++) if (devs[i] == p) devs[i] = 0; free(p); return 0; }
int xpu_host_alloc(void** p, uint64_t n, unsigned flags) { fake_host_flags = flags; *p = calloc(1, n ? n : 1); return 0; }
int xpu_host_free(void* p) { free(p); return 0; }
int xpu_memcpy(void* d, const void* s, uint64_t n, int kind) {
  fake_kind = kind; fake_sync_copy = 1; note("memcpy;"); memcpy(d, s, n); return 0;
}
#ifndef NO_MEMCPY_ASYNC
int xpu_memcpy_async(void* d, const void* s, uint64_t n, int kind, void* st) {
  fake_kind = kind; fake_sync_copy = 0; fake_stream = st; note("memcpyAsync;"); memcpy(d, s, n); return 0;
}
#endif
int xpu_stream_create(void** s) { *s = malloc(1); return 0; }
int xpu_stream_destroy(void* s) { free(s); return 0; }
int xpu_wait(void* s) { fake_stream = s; note("wait;"); return 0; }
int xpu_event_create(void** e) { *e = malloc(1); note("eventCreate;"); return 0; }
int xpu_event_record(void* e, void* s) { (void)e; fake_stream = s; note("eventRecord;"); return 0; }
int xpu_event_wait(void* e) { (void)e; note("eventWait;"); return 0; }
int xpu_event_destroy(void* e) { free(e); return 0; }
int xpu_stream_wait_event(void* s, void* e) { (void)e; fake_stream = s; note("streamWaitEvent;"); return 0; }
/* XPUATTR_PCI_ADDRESS (0): domain[31:16] bus[15:8] dev[7:3] fn[2:0] */
int xpu_device_get_attr(uint64_t* v, int attr, int dev) {
  if (attr != 0) return -712;
  if (dev >= 2) return -701;
  *v = 0x2ull << 16 | (uint64_t)(0x3b + dev) << 8 | 0x1f << 3 | 3;
  return 0;
}

#ifndef NO_BKCL
#ifdef CXX_ONLY
#define CXX(len, name) __asm__("_ZN5baidu3xpu4bkcl" #len #name "EPv")
#else
#define CXX(len, name)
#endif
#define DECL(len, name, args) int name args CXX(len, name); int name args

DECL(18, bkcl_get_unique_id, (unsigned char* id)) {
  int i; for (i = 0; i < FAKE_UID_BYTES; i++) id[i] = (unsigned char)(i * 7 + 3); return 0;
}
DECL(14, bkcl_init_rank, (void** ctx, int rank, int nranks, const void* id)) {
  fake_rank = rank; fake_nranks = nranks; memcpy(fake_uid, id, sizeof fake_uid); *ctx = malloc(16); note("InitRank;"); return 0;
}
DECL(20, bkcl_destroy_context, (void* ctx)) { free(ctx); note("Destroy;"); return 0; }
DECL(15, bkcl_comm_abort, (void* ctx)) { free(ctx); note("Abort;"); return 0; }
DECL(15, bkcl_all_reduce, (void* c, const void* s, void* r, size_t n, int dt, int op, void* st)) {
  (void)c; (void)s; fake_bkcl_calls++; fake_count = n; fake_dtype = dt; fake_op = op; fake_stream = st; fake_recvbuf = r;
  if (n == 7777) return 1; /* BKCL_INVALID_ARGUMENT */
  if (n == 6666) return 99; /* a code nobody knows */
  note("AllReduce;"); return 0;
}
#ifdef OVERLOAD
int bkcl_all_reduce_int64(void* c) __asm__("_ZN5baidu3xpu4bkcl15bkcl_all_reduceEPvPKvS2_l");
int bkcl_all_reduce_int64(void* c) { (void)c; return 0; }
#endif
DECL(11, bkcl_reduce, (void* c, const void* s, void* r, size_t n, int dt, int op, int root, void* st)) {
  (void)c; (void)s; fake_bkcl_calls++; fake_count = n; fake_dtype = dt; fake_op = op; fake_root = root; fake_stream = st;
  fake_recvbuf = r; note("Reduce;"); return 0;
}
DECL(14, bkcl_broadcast, (void* c, const void* s, void* r, size_t n, int dt, int root, void* st)) {
  (void)c; (void)s; fake_bkcl_calls++; fake_count = n; fake_dtype = dt; fake_root = root; fake_stream = st;
  fake_recvbuf = r; note("Broadcast;"); return 0;
}
DECL(15, bkcl_all_gather, (void* c, const void* s, size_t n, void* r, int dt, void* st)) {
  (void)c; (void)s; fake_bkcl_calls++; fake_count = n; fake_dtype = dt; fake_stream = st; fake_recvbuf = r;
  note("AllGather;"); return 0;
}
DECL(19, bkcl_reduce_scatter, (void* c, const void* s, void* r, size_t n, int dt, int op, void* st)) {
  (void)c; (void)s; fake_bkcl_calls++; fake_count = n; fake_dtype = dt; fake_op = op; fake_stream = st;
  fake_recvbuf = r; note("ReduceScatter;"); return 0;
}
DECL(9, bkcl_send, (void* c, const void* s, size_t n, int peer, int dt, void* st)) {
  char m[64]; (void)c; (void)s; fake_bkcl_calls++; fake_peer = peer; fake_dtype = dt; fake_stream = st;
  snprintf(m, sizeof m, "Send(%d,%zu,%d);", peer, n, dt); note(m); return 0;
}
DECL(9, bkcl_recv, (void* c, void* r, size_t n, int peer, int dt, void* st)) {
  char m[64]; (void)c; (void)r; fake_bkcl_calls++; fake_peer = peer; fake_dtype = dt; fake_stream = st;
  snprintf(m, sizeof m, "Recv(%d,%zu,%d);", peer, n, dt); note(m); return 0;
}
DECL(16, bkcl_group_start, (void)) { note("GroupStart;"); return 0; }
DECL(14, bkcl_group_end, (void)) { note("GroupEnd;"); return 0; }
#ifndef NO_ALLTOALL
DECL(15, bkcl_all_to_all, (void* c, const void* s, size_t n, void* r, int dt, void* st)) {
  char m[64]; (void)c; (void)s; fake_bkcl_calls++; fake_count = n; fake_dtype = dt; fake_stream = st; fake_recvbuf = r;
  snprintf(m, sizeof m, "AllToAll(%zu,%d);", n, dt); note(m); return 0;
}
DECL(17, bkcl_all_to_all_v, (void* c, const void* s, const size_t* sc, const size_t* sd, int st_, void* r,
                             const size_t* rc, const size_t* rd, int rt, void* st)) {
  size_t n = (size_t)fake_nranks, i;
  (void)c; (void)s; fake_bkcl_calls++; fake_dtype = st_; fake_rtype = rt; fake_stream = st; fake_recvbuf = r;
  fake_counts_on_device = isDev(sc, n * 8) && isDev(sd, n * 8) && isDev(rc, n * 8) && isDev(rd, n * 8);
  if (fake_counts_on_device) /* BKCL reads them on the device; the fake can because it is host memory */
    for (i = 0; i < n && i < 8; i++) {
      fake_counts[i] = sc[i]; fake_counts[8 + i] = sd[i]; fake_counts[16 + i] = rc[i]; fake_counts[24 + i] = rd[i];
    }
  note("AllToAllV;"); return 0;
}
#endif
#endif
`

// fakeKunlunxin builds the fake, points both FLAGCX_KUNLUNXIN_* at it and
// opens a fresh copy of the built plugin.
func fakeKunlunxin(t *testing.T, flags ...string) (*Plugin, string) {
	t.Helper()
	return openFake(t, "kunlunxin", flags...)
}

// The common init failures (a missing BKCL, a runtime that is not a shared
// object, no XPU software, the loader skipping the plugin) are
// vendors_test.go's.
func TestKunlunxinInitFailsCleanly(t *testing.T) {
	t.Run("wrong library: no BKCL symbols", func(t *testing.T) {
		p, _ := fakeKunlunxin(t)
		t.Setenv("FLAGCX_KUNLUNXIN_BKCL", compileC(t, filepath.Join(t.TempDir(), "libnotbkcl.so"), fakeKunlunxinC, "-DNO_BKCL"))
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "plugin kunlunxin: init")
		require.Contains(t, err.Error(), "libnotbkcl.so lacks bkcl_get_unique_id (neither the C name nor a C++-mangled")
		require.Contains(t, err.Error(), "point FLAGCX_KUNLUNXIN_BKCL at another one")
		require.Contains(t, p.Info().Libraries[1].Error, "bkcl_get_unique_id")
	})
	t.Run("wrong library: not an XPU runtime", func(t *testing.T) {
		p, _ := fakeKunlunxin(t)
		t.Setenv("FLAGCX_KUNLUNXIN_XPURT", compileC(t, filepath.Join(t.TempDir(), "libc-only.so"), "int unrelated(void) { return 0; }\n"))
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "lacks xpu_device_count")
		require.Contains(t, err.Error(), "FLAGCX_KUNLUNXIN_XPURT")
	})
	t.Run("C++ overloads are ambiguous, not guessed", func(t *testing.T) {
		p, _ := fakeKunlunxin(t, "-DCXX_ONLY", "-DOVERLOAD")
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "lacks bkcl_all_reduce (found several C++ overloads")
	})
}

// TestKunlunxinMapsOntoXpuAndBkcl proves the mapping with the recording
// fake: every value and argument position the plugin passes is compared
// with this file's copy of the vendor's numbers, so a wrong argument order,
// enum value or unique-id offset fails here.
func TestKunlunxinMapsOntoXpuAndBkcl(t *testing.T) {
	p, fake := fakeKunlunxin(t)
	require.NoError(t, p.Init(InitOptions{}))
	info := p.Info()
	require.False(t, info.Emulated)
	require.Equal(t, "FLAGCX_KUNLUNXIN_XPURT", info.Libraries[0].EnvVar)
	require.Equal(t, "FLAGCX_KUNLUNXIN_BKCL", info.Libraries[1].EnvVar)
	require.Equal(t, []sdk.DataType{sdk.Uint8, sdk.Int32, sdk.Int64, sdk.Float16, sdk.Float32, sdk.Float64, sdk.Bfloat16},
		info.DataTypes, "BKCL's own types: the host moves the others as bytes and reduces them elsewhere")
	require.Equal(t, []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min}, info.RedOps, "no avg: BKCL_AVG is unverified")
	ival := func(sym string) int { return cInt(t, fake, sym) }
	uval := func(sym string) uint64 { return *(*uint64)(cSymbol(t, fake, sym)) }
	calls := func() string { return cText(t, fake, "fake_calls") }

	t.Run("devices", func(t *testing.T) {
		n, err := p.DeviceCount()
		require.NoError(t, err)
		require.Equal(t, 2, n)
		di, err := p.DeviceInfo(1)
		require.NoError(t, err)
		require.Equal(t, "0002:3c:1f.3", di.PCIBusID, "XPUATTR_PCI_ADDRESS: domain[31:16] bus[15:8] dev[7:3] fn[2:0]")
		require.Equal(t, "Kunlunxin XPU 1", di.Name)
		_, err = p.DeviceInfo(5)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		l, err := p.Link(0, 1)
		require.NoError(t, err)
		require.Equal(t, LinkUnknown, l.Type)
		err = p.SetDevice(7)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "xpu_set_device: XPUERR_INVALID_DEVICE (XPUError 701)", "a positive XPU error code")
	})

	dev, err := p.DeviceMalloc(1, 256)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "deviceMalloc sets the device it was given")
	require.Equal(t, klxXPUMemMain, ival("fake_malloc_kind"), "XPU_MEM_MAIN passed explicitly")
	dev2, err := p.DeviceMalloc(0, 256)
	require.NoError(t, err)
	s, err := p.StreamCreate(1)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"))

	t.Run("xpu errors", func(t *testing.T) {
		_, err := p.DeviceMalloc(0, 1<<41)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "plugin kunlunxin: deviceMalloc: ")
		require.Contains(t, err.Error(), "xpu_malloc: XPUERR_NOMEM (XPUError -705)", "a negated XPU error code")
	})

	t.Run("memcpy direction", func(t *testing.T) {
		tests := []struct {
			kind    MemcpyKind
			xpuKind int
		}{{HostToDevice, klxXPUHostToDevice}, {DeviceToHost, klxXPUDeviceToHost}, {DeviceToDevice, klxXPUDeviceToDevice}}
		for _, tc := range tests {
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, s))
			require.Equal(t, tc.xpuKind, ival("fake_kind"), "%s reaches xpu_memcpy_async as %d", tc.kind, tc.xpuKind)
			require.Equal(t, 0, ival("fake_sync_copy"))
			require.Equal(t, uintptr(s), *(*uintptr)(cSymbol(t, fake, "fake_stream")))
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, 0))
			require.Equal(t, tc.xpuKind, ival("fake_kind"), "%s reaches xpu_memcpy as %d", tc.kind, tc.xpuKind)
			require.Equal(t, 1, ival("fake_sync_copy"))
		}
	})

	t.Run("memset is staged through host memory after the stream", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, p.Memset(dev, 0x3c, 200, s))
		require.Equal(t, "wait;memcpy;", calls()[before:])
		require.Equal(t, klxXPUHostToDevice, ival("fake_kind"))
		out := make([]byte, 256)
		require.NoError(t, p.CopyFromDevice(out, dev))
		for i, b := range out {
			if i < 200 {
				require.Equal(t, byte(0x3c), b, "byte %d", i)
			} else {
				require.Equal(t, byte(0), b, "byte %d is past the memset", i)
			}
		}
	})

	t.Run("pinned host memory", func(t *testing.T) {
		h, err := p.HostMalloc(64)
		require.NoError(t, err)
		require.Equal(t, 0, ival("fake_host_flags"))
		require.NoError(t, p.HostFree(h))
	})

	t.Run("events without timing or queries", func(t *testing.T) {
		e, err := p.EventCreate(0)
		require.NoError(t, err)
		require.Equal(t, 0, ival("fake_set_device"))
		require.NoError(t, p.EventRecord(e, s))
		require.NoError(t, p.EventSynchronize(e))
		require.NoError(t, p.StreamWaitEvent(s, e))
		require.False(t, p.HasEventTiming(), "the XPU runtime has no event timing: host timers instead")
		_, err = p.EventElapsed(e, e)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		_, err = p.EventQuery(e)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		_, err = p.StreamQuery(s)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.NoError(t, p.StreamSynchronize(s))
		require.NoError(t, p.EventDestroy(e))
	})

	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Len(t, id, UniqueIDMaxBytes, "BKCL_UNIQUE_ID_BYTES is unknown: the largest id the ABI carries")
	for i := 0; i < 300; i++ {
		require.Equal(t, byte(i*7+3), id[i], "id byte %d is bkcl_get_unique_id's byte %d (offset 0)", i, i)
	}

	t.Run("unique id arrives intact at offset 0, rank before nranks", func(t *testing.T) {
		mine := make([]byte, UniqueIDMaxBytes)
		for i := range mine {
			mine[i] = byte(255 - i%251)
		}
		c, err := p.CommInitRank(1, 4, mine, 3)
		require.NoError(t, err)
		require.Equal(t, mine, unsafe.Slice((*byte)(cSymbol(t, fake, "fake_uid")), UniqueIDMaxBytes))
		require.Equal(t, 3, ival("fake_rank"), "bkcl_init_rank(ctx, RANK, nranks, id)")
		require.Equal(t, 4, ival("fake_nranks"))
		require.Equal(t, 1, ival("fake_set_device"), "the context binds to the current XPU")
		require.NoError(t, c.Destroy())
	})

	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)

	t.Run("data types and ops with BKCL's numbers", func(t *testing.T) {
		for _, dt := range sdk.AllDataTypes() {
			want := klxTypes[dt]
			if !want.native {
				before := ival("fake_bkcl_calls")
				require.ErrorIs(t, comm.Broadcast(dev, dev2, 3, dt, 1, s), sdk.ErrNotSupported, "%s is not in the mask", dt)
				require.ErrorIs(t, comm.AllReduce(dev, dev2, 3, dt, sdk.Sum, s), sdk.ErrNotSupported)
				require.Equal(t, before, ival("fake_bkcl_calls"))
				continue
			}
			require.NoError(t, comm.Broadcast(dev, dev2, 3, dt, 1, s))
			require.Equal(t, want.bkcl, ival("fake_dtype"), "%s moves as BKCL type %d", dt, want.bkcl)
			require.Equal(t, 1, ival("fake_root"))
			for _, op := range []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min, sdk.Avg} {
				before := ival("fake_bkcl_calls")
				err := comm.AllReduce(dev, dev2, 3, dt, op, s)
				bop, opOK := klxOps[op]
				if !opOK {
					require.ErrorIs(t, err, sdk.ErrNotSupported, "%s %s", dt, op)
					require.Contains(t, err.Error(), "not supported")
					require.Equal(t, before, ival("fake_bkcl_calls"), "refused before BKCL sees it")
					continue
				}
				require.NoError(t, err, "%s %s", dt, op)
				require.Equal(t, want.bkcl, ival("fake_dtype"), "%s %s", dt, op)
				require.Equal(t, bop, ival("fake_op"), "%s %s", dt, op)
			}
		}
		require.NoError(t, comm.Reduce(dev, dev2, 5, sdk.Float64, sdk.Min, 1, s))
		require.Equal(t, []int{klxBKCLFloat64, klxBKCLMin, 1, 5}, []int{ival("fake_dtype"), ival("fake_op"), ival("fake_root"), int(uval("fake_count"))})
		require.Equal(t, uintptr(dev2), *(*uintptr)(cSymbol(t, fake, "fake_recvbuf")))
		require.NoError(t, comm.ReduceScatter(dev, dev2, 7, sdk.Bfloat16, sdk.Prod, s))
		require.Equal(t, []int{klxBKCLBfloat16, klxBKCLProduct, 7}, []int{ival("fake_dtype"), ival("fake_op"), int(uval("fake_count"))})
		require.Equal(t, uintptr(s), *(*uintptr)(cSymbol(t, fake, "fake_stream")))
	})

	t.Run("a host ignoring the mask: moved as the same-size type, never reduced", func(t *testing.T) {
		// The loader refuses types outside dataTypeMask; call the entries
		// directly, as another host might.
		for dt, bkcl := range map[sdk.DataType]int{sdk.Int8: klxBKCLUint8, sdk.Uint32: klxBKCLInt32, sdk.Uint64: klxBKCLInt64} {
			require.NoError(t, p.sys("allGather", p.t.CCL.AllGather, dev, dev2, 2, uintptr(dt), comm.h, uintptr(s)))
			require.Equal(t, bkcl, ival("fake_dtype"), "%s moves as BKCL type %d", dt, bkcl)
			before := ival("fake_bkcl_calls")
			err := p.sys("allReduce", p.t.CCL.AllReduce, dev, dev2, 2, uintptr(dt), uintptr(sdk.Max), comm.h, uintptr(s))
			require.ErrorIs(t, err, sdk.ErrNotSupported, "%s", dt)
			require.Contains(t, err.Error(), "BKCL has no "+dt.String()+" type")
			require.Equal(t, before, ival("fake_bkcl_calls"))
		}
		err := p.sys("allReduce", p.t.CCL.AllReduce, dev, dev2, 2, uintptr(sdk.Float32), uintptr(sdk.Avg), comm.h, uintptr(s))
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Contains(t, err.Error(), "BKCL_AVG")
	})

	t.Run("count before the receive buffer", func(t *testing.T) {
		require.NoError(t, comm.AllGather(dev, dev2, 5, sdk.Int64, s))
		require.Equal(t, 5, int(uval("fake_count")), "bkcl_all_gather(ctx, send, COUNT, recv, ...)")
		require.Equal(t, uintptr(dev2), *(*uintptr)(cSymbol(t, fake, "fake_recvbuf")))
		require.Equal(t, klxBKCLInt64, ival("fake_dtype"))
		require.NoError(t, comm.AlltoAll(dev, dev2, 6, sdk.Float16, s))
		require.Equal(t, 6, int(uval("fake_count")), "bkcl_all_to_all(ctx, send, COUNT, recv, ...)")
		require.Equal(t, uintptr(dev2), *(*uintptr)(cSymbol(t, fake, "fake_recvbuf")))
		require.Equal(t, klxBKCLFloat16, ival("fake_dtype"))
	})

	t.Run("send and recv: peer before the data type", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, comm.Send(dev, 9, sdk.Uint8, 1, s))
		require.NoError(t, comm.Recv(dev2, 9, sdk.Float32, 1, s))
		require.Equal(t, "Send(1,9,4);Recv(1,9,0);", calls()[before:])
	})

	t.Run("alltoallv counts are staged in device memory", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, comm.AlltoAllv(dev, []int{1, 4}, []int{0, 1}, dev2, []int{3, 2}, []int{0, 3}, sdk.Int32, s))
		require.Equal(t, 1, ival("fake_counts_on_device"), "bkcl_all_to_all_v reads its count arrays on the device")
		got := unsafe.Slice((*uint64)(cSymbol(t, fake, "fake_counts")), 32)
		require.Equal(t, []uint64{1, 4}, got[0:2], "sendcounts")
		require.Equal(t, []uint64{0, 1}, got[8:10], "sdispls")
		require.Equal(t, []uint64{3, 2}, got[16:18], "recvcounts")
		require.Equal(t, []uint64{0, 3}, got[24:26], "rdispls")
		require.Equal(t, []int{klxBKCLInt32, klxBKCLInt32}, []int{ival("fake_dtype"), ival("fake_rtype")})
		require.Equal(t, uintptr(dev2), *(*uintptr)(cSymbol(t, fake, "fake_recvbuf")))
		require.Equal(t, "eventCreate;memcpy;AllToAllV;eventRecord;", calls()[before:])
		// The second call rewrites the counts only after the first one read them.
		before = len(calls())
		require.NoError(t, comm.AlltoAllv(dev, []int{2, 2}, []int{0, 2}, dev2, []int{1, 1}, []int{0, 1}, sdk.Float32, s))
		require.Equal(t, "eventWait;memcpy;AllToAllV;eventRecord;", calls()[before:])
		require.Equal(t, []uint64{2, 2}, got[0:2])
		require.Equal(t, []uint64{1, 1}, got[16:18])
		require.Equal(t, klxBKCLFloat, ival("fake_dtype"))
	})

	t.Run("gather and scatter are grouped send/recv", func(t *testing.T) {
		tests := []struct {
			name string
			run  func() error
			want string
		}{
			{"gather at root", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 0, s) },
				"GroupStart;Send(0,4,0);Recv(0,4,0);Recv(1,4,0);GroupEnd;"},
			{"gather elsewhere", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 1, s) },
				"GroupStart;Send(1,4,0);GroupEnd;"},
			{"scatter at root", func() error { return comm.Scatter(dev, dev2, 2, sdk.Uint8, 0, s) },
				"GroupStart;Send(0,2,4);Recv(0,2,4);Send(1,2,4);GroupEnd;"},
			{"scatter elsewhere", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int64, 1, s) },
				"GroupStart;Recv(1,2,3);GroupEnd;"},
		}
		for _, tc := range tests {
			before := len(calls())
			*(*uintptr)(cSymbol(t, fake, "fake_stream")) = 0
			require.NoError(t, tc.run(), tc.name)
			require.Equal(t, tc.want, calls()[before:], tc.name)
			require.Equal(t, uintptr(s), *(*uintptr)(cSymbol(t, fake, "fake_stream")), "%s: on the caller's stream", tc.name)
		}
	})

	t.Run("BKCL errors surface with the call's name", func(t *testing.T) {
		err := comm.AllReduce(dev, dev2, 7777, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "plugin kunlunxin: allReduce: invalid argument: bkcl_all_reduce: BKCL_INVALID_ARGUMENT (BKCLResult 1")
		err = comm.AllReduce(dev, dev2, 6666, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrUnhandledCCLError)
		require.Contains(t, err.Error(), "bkcl_all_reduce: unknown BKCL result (BKCLResult 99")
		err = comm.AsyncError()
		require.ErrorIs(t, err, sdk.ErrNotSupported, "BKCL has no asynchronous error query")
	})

	before := len(calls())
	require.NoError(t, comm.Destroy())
	require.Equal(t, "eventWait;Destroy;", calls()[before:], "the staged counts outlive the last alltoallv")
	require.NoError(t, p.StreamDestroy(s))
	require.NoError(t, p.DeviceFree(dev))
	require.NoError(t, p.DeviceFree(dev2))
}

// Without bkcl_all_to_all(_v) and xpu_memcpy_async the plugin composes.
func TestKunlunxinOlderLibrariesCompose(t *testing.T) {
	p, fake := fakeKunlunxin(t, "-DNO_ALLTOALL", "-DNO_MEMCPY_ASYNC")
	require.NoError(t, p.Init(InitOptions{}))
	calls := func() string { return cText(t, fake, "fake_calls") }
	dev, err := p.DeviceMalloc(0, 256)
	require.NoError(t, err)
	s, err := p.StreamCreate(0)
	require.NoError(t, err)

	before := len(calls())
	require.NoError(t, p.Memcpy(dev, dev, 8, DeviceToDevice, s))
	require.Equal(t, "wait;memcpy;", calls()[before:], "the stream's work first, then a synchronous copy")
	require.Equal(t, klxXPUDeviceToDevice, cInt(t, fake, "fake_kind"))

	id, err := p.UniqueID()
	require.NoError(t, err)
	comm, err := p.CommInitRank(0, 2, id, 1)
	require.NoError(t, err)
	before = len(calls())
	require.NoError(t, comm.AlltoAll(dev, dev, 3, sdk.Int32, s))
	require.Equal(t, "GroupStart;Send(0,3,2);Recv(0,3,2);Send(1,3,2);Recv(1,3,2);GroupEnd;", calls()[before:])
	before = len(calls())
	require.NoError(t, comm.AlltoAllv(dev, []int{1, 0}, []int{0, 1}, dev, []int{2, 5}, []int{0, 2}, sdk.Float16, s))
	require.Equal(t, "GroupStart;Send(0,1,1);Recv(0,2,1);Recv(1,5,1);GroupEnd;", calls()[before:], "zero counts skipped")
	require.NoError(t, comm.Destroy())
}

// Some libbkcl.so builds export only C++ names: the plugin finds them.
func TestKunlunxinCxxOnlyBkcl(t *testing.T) {
	p, fake := fakeKunlunxin(t, "-DCXX_ONLY")
	var logs []string
	var mu sync.Mutex
	require.NoError(t, p.Init(InitOptions{Log: func(_ string, _ LogLevel, msg string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, msg)
	}}))
	require.Equal(t, "C++ symbols", p.Info().Libraries[1].Version)
	require.Contains(t, strings.Join(logs, "\n"), "bkcl_all_reduce: using C++ symbol _ZN5baidu3xpu4bkcl15bkcl_all_reduceEPv")
	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Equal(t, byte(3), id[0])
	comm, err := p.CommInitRank(0, 2, id, 1)
	require.NoError(t, err)
	require.Equal(t, 1, cInt(t, fake, "fake_rank"))
	dev, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	require.NoError(t, comm.AllGather(dev, dev, 2, sdk.Bfloat16, 0))
	require.Equal(t, klxBKCLBfloat16, cInt(t, fake, "fake_dtype"))
	require.Equal(t, 2, int(*(*uint64)(cSymbol(t, fake, "fake_count"))))
	require.NoError(t, comm.Destroy())
}

// A BKCL whose id would not fit the ABI's 4096 bytes is an error, not a
// truncated id.
func TestKunlunxinUniqueIdTooLarge(t *testing.T) {
	p, _ := fakeKunlunxin(t, "-DFAKE_UID_BYTES=5000")
	require.NoError(t, p.Init(InitOptions{}))
	_, err := p.UniqueID()
	require.ErrorIs(t, err, sdk.ErrInternalError)
	require.Contains(t, err.Error(), "bkcl_get_unique_id wrote 5000 bytes, more than the 4096")
}

// TestKunlunxinEmulatedCxxNames: the plugin on the emulated BKCL that
// exports only C++-mangled names (build/vendorsim/kunlunxin/cxx), two
// ranks on goroutines through runRank's exact checks.
func TestKunlunxinEmulatedCxxNames(t *testing.T) {
	sim := builtVendorsim(t, "kunlunxin")
	t.Setenv("FLAGCX_KUNLUNXIN_XPURT", filepath.Join(sim, "kunlunxin", "libxpurt.so.1"))
	t.Setenv("FLAGCX_KUNLUNXIN_BKCL", filepath.Join(sim, "kunlunxin", "cxx", "libbkcl.so"))
	p, err := Open(builtPlugin(t, "kunlunxin"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{}))
	require.True(t, p.Emulated(), "the marker is reported even when emulation was not requested")
	require.Equal(t, "C++ symbols", p.Info().Libraries[1].Version)
	reps, err := inProcessRanks(p, 2, rankOptions{types: []sdk.DataType{sdk.Float32, sdk.Int8, sdk.Bfloat16}})
	require.NoError(t, err)
	require.Empty(t, failures(reps))
	for r, rep := range reps {
		require.Contains(t, rep.Refused["ag/int8"], "not supported", "rank %d: BKCL has no int8", r)
	}
}

// TestKunlunxinEmulatorDisagreementIsCaught: the plugin's BKCL table and
// the emulator's model are independent; an emulator built with a model
// that disagrees (float<->int32, add<->max swapped) makes the exact checks
// fail instead of passing silently.
func TestKunlunxinEmulatorDisagreementIsCaught(t *testing.T) {
	sim := builtVendorsim(t, "kunlunxin")
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "conformance", "vendorsim", "kunlunxin", "bkcl.c"))
	require.NoError(t, err)
	perturbed := compileC(t, filepath.Join(t.TempDir(), "libbkcl.so"), string(src),
		"-I", filepath.Join(root, "conformance", "vendorsim", "kunlunxin"), "-std=gnu11", "-pthread",
		"-DVSIM_BKCL_PERTURB_FOR_TESTS", "-L", sim, "-lflagcx-vendorsim-core", "-Wl,-rpath,"+sim)
	t.Setenv("FLAGCX_KUNLUNXIN_XPURT", filepath.Join(sim, "kunlunxin", "libxpurt.so.1"))
	t.Setenv("FLAGCX_KUNLUNXIN_BKCL", perturbed)
	p, err := Open(builtPlugin(t, "kunlunxin"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{}))
	reps, err := inProcessRanks(p, 2, rankOptions{types: []sdk.DataType{sdk.Float32, sdk.Int32}})
	require.NoError(t, err)
	bad := strings.Join(failures(reps), "\n")
	require.Contains(t, bad, "rank 0 ar/float32/sum:", "float32 summed as int32 by the disagreeing model")
	require.Contains(t, bad, "rank 1 ar/int32/max:", "max computed as add by the disagreeing model")
	require.NotContains(t, bad, "ag/float32", "data movement does not depend on the type's number")
}
