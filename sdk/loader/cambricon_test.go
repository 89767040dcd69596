package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// fakeCambriconC is a FAKE libcnrt + libcncl in one library: the vendor
// signatures and enum values of docs/vendor-facts.md#cambricon, recording what the
// cambricon plugin passes, argument by argument, so the tests below prove
// the mapping (a swapped argument, a wrong enum value or a shifted clique id
// makes them fail). Handles are heap blocks; "device" memory is host memory.
// Variants: -DEMULATED adds the vendorsim marker; -DNO_CNCL leaves out every
// cncl* symbol (a wrong library); -DNO_ALLTOALL leaves out cnclAlltoAll;
// -DLIE_RANK makes cnclGetCommRank answer another rank.
const fakeCambriconC = `
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef EMULATED
int flagcxVendorsimEmulated = 1;
#endif
struct cnclCliqueId { char data[128]; uint64_t hash; };

int fake_dir = -1, fake_sync = -1, fake_set_device = -1, fake_init_device = -1, fake_wait_flag = -1;
int fake_dtype = -1, fake_op = -1, fake_root = -1, fake_nrank = -1, fake_rank = -1, fake_dev = -1, fake_num_comm = -1;
int fake_ccl_calls = 0;
size_t fake_count;
void *fake_queue, *fake_notifier, *fake_start, *fake_end, *fake_send, *fake_recv, *fake_comm;
unsigned char fake_clique[136];
char fake_calls[4096];
__attribute__((unused)) static int polls, commRank, commCount;
__attribute__((unused)) static void note(const char* s) { strncat(fake_calls, s, sizeof fake_calls - strlen(fake_calls) - 1); }

/* ---- CNRT ---- */
int cnrtGetDeviceCount(unsigned* n) { *n = 2; return 0; }
int cnrtSetDevice(int d) { fake_set_device = d; return d >= 0 && d < 2 ? 0 : 100005; }
int cnrtMalloc(void** p, size_t n) { *p = calloc(1, n ? n : 1); return 0; }
int cnrtFree(void* p) { free(p); return 0; }
int cnrtHostMalloc(void** p, size_t n) { *p = calloc(1, n ? n : 1); return 0; }
int cnrtFreeHost(void* p) { free(p); return 0; }
int cnrtMemcpy(void* d, void* s, size_t n, int dir) { fake_dir = dir; fake_sync = 1; memmove(d, s, n); return 0; }
int cnrtMemcpyAsync(void* d, void* s, size_t n, void* q, int dir) {
  fake_dir = dir; fake_sync = 0; fake_queue = q; memmove(d, s, n); return 0;
}
int cnrtMemset(void* p, int v, size_t n) { fake_sync = 1; memset(p, v, n); return 0; }
int cnrtMemsetAsync(void* p, int v, size_t n, void* q) { fake_sync = 0; fake_queue = q; memset(p, v, n); return 0; }
int cnrtQueueCreate(void** q) { *q = calloc(1, 16); return 0; }
int cnrtQueueDestroy(void* q) { free(q); return 0; }
int cnrtQueueSync(void* q) { fake_queue = q; return 0; }
int cnrtQueueQuery(void* q) { fake_queue = q; return 0; }
int cnrtNotifierCreate(void** n) { *n = calloc(1, 16); polls = 0; return 0; }
int cnrtNotifierDestroy(void* n) { free(n); return 0; }
int cnrtPlaceNotifier(void* n, void* q) { fake_notifier = n; fake_queue = q; return 0; }
int cnrtWaitNotifier(void* n) { fake_notifier = n; return 0; }
/* cnrtErrorNotReady, then cnrtErrorBusy, then reached */
int cnrtQueryNotifier(void* n) { static const int seq[3] = {1, 632014, 0}; fake_notifier = n; return seq[polls < 2 ? polls++ : 2]; }
int cnrtQueueWaitNotifier(void* n, void* q, unsigned f) { fake_notifier = n; fake_queue = q; fake_wait_flag = (int)f; return 0; }
int cnrtNotifierElapsedTime(void* a, void* b, float* ms) { fake_start = a; fake_end = b; *ms = 2.5f; return 0; }
int cnrtDeviceGetPCIBusId(char* b, int len, int dev) { snprintf(b, len, "00000000:%02X:00.0", 0x3A + dev); return 0; }
int cnrtGetLibVersion(int* a, int* b, int* c) { *a = 6; *b = 14; *c = 1; return 0; }
const char* cnrtGetErrorStr(int e) { return e == 100005 ? "invalid device" : "fake CNRT error"; }

/* ---- CNCL ---- */
#ifndef NO_CNCL
int cnclGetLibVersion(int* a, int* b, int* c) { *a = 1; *b = 25; *c = 0; return 0; }
int cnclGetCliqueId(struct cnclCliqueId* id) {
  int i; for (i = 0; i < 128; i++) id->data[i] = (char)(i * 5 + 3);
  id->hash = 0x8877665544332211ull; return 0;
}
int cnclInitComms(void** comms, int num, const int* devs, const int* ranks, int nrank, struct cnclCliqueId* id) {
  fake_num_comm = num; fake_dev = devs[0]; fake_rank = ranks[0]; fake_nrank = nrank; fake_init_device = fake_set_device;
  memcpy(fake_clique, id, sizeof *id);
  commRank = ranks[0]; commCount = nrank;
  comms[0] = calloc(1, 16); return 0;
}
int cnclFreeComm(void* c) { note("FreeComm;"); free(c); return 0; }
int cnclAbortComm(void* c) { note("AbortComm;"); free(c); return 0; }
int cnclGetCommCount(int* n, void* c) { (void)c; *n = commCount; return 0; }
#ifdef LIE_RANK
int cnclGetCommRank(int* r, void* c) { (void)c; *r = commRank + 1; return 0; }
#else
int cnclGetCommRank(int* r, void* c) { (void)c; *r = commRank; return 0; }
#endif
int cnclGetCommAsyncError(void* c) { (void)c; return 0x16; } /* CNCL_RET_ASYNC_ERROR */
static int rec(const void* s, void* r, size_t n, int dt, int op, int root, void* comm, void* q) {
  fake_ccl_calls++;
  fake_send = (void*)s; fake_recv = r; fake_count = n; fake_dtype = dt; fake_op = op; fake_root = root; fake_comm = comm; fake_queue = q;
  return n == 7777 ? 0x07 : 0; /* CNCL_RET_ERR_ARGUMENTS */
}
int cnclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* c, void* q) { return rec(s, r, n, dt, op, -1, c, q); }
int cnclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* c, void* q) { return rec(s, r, n, dt, op, root, c, q); }
int cnclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* c, void* q) { return rec(s, r, n, dt, -1, root, c, q); }
int cnclAllGather(const void* s, void* r, size_t n, int dt, void* c, void* q) { return rec(s, r, n, dt, -1, -1, c, q); }
int cnclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* c, void* q) { return rec(s, r, n, dt, op, -1, c, q); }
#ifndef NO_ALLTOALL
int cnclAlltoAll(const void* s, void* r, size_t n, int dt, void* c, void* q) { note("AlltoAll;"); return rec(s, r, n, dt, -1, -1, c, q); }
#endif
int cnclSend(void* b, size_t n, int dt, int peer, void* c, void* q) {
  char m[64]; snprintf(m, sizeof m, "Send(%d,%zu,0x%x);", peer, n, dt); note(m); return rec(b, NULL, n, dt, -1, peer, c, q);
}
int cnclRecv(void* b, size_t n, int dt, int peer, void* c, void* q) {
  char m[64]; snprintf(m, sizeof m, "Recv(%d,%zu,0x%x);", peer, n, dt); note(m); return rec(NULL, b, n, dt, -1, peer, c, q);
}
int cnclGroupStart(void) { note("GroupStart;"); return 0; }
int cnclGroupEnd(void) { note("GroupEnd;"); return 0; }
const char* cnclGetErrorStr(int r) { return r == 0x07 ? "fake CNCL: CNCL_RET_ERR_ARGUMENTS" : r == 0x16 ? "fake CNCL: CNCL_RET_ASYNC_ERROR" : "fake CNCL error"; }
#endif
`

// cambriconFake builds the fake (with variant flags), points both
// FLAGCX_CAMBRICON_* variables at it and opens a fresh copy of the plugin.
func cambriconFake(t *testing.T, flags ...string) (*Plugin, string) {
	t.Helper()
	return openFake(t, "cambricon", flags...)
}

// cncl.h v1.25.0 (docs/vendor-facts.md#cambricon-cncl): what each flagcx data type must
// reach CNCL as. Float64 has no CNCL type.
var cambriconTypes = map[sdk.DataType]int{
	sdk.Int8: 0x20, sdk.Uint8: 0x30, sdk.Int32: 0x22, sdk.Uint32: 0x32, sdk.Int64: 0x23, sdk.Uint64: 0x33,
	sdk.Float16: 0x10, sdk.Float32: 0x12, sdk.Bfloat16: 0x11,
}

// The common init failures (a missing CNCL, a runtime that is not a shared
// object, no Neuware, the loader skipping the plugin) are vendors_test.go's.
func TestCambriconInitFailsCleanly(t *testing.T) {
	t.Run("wrong library: lacks the CNCL symbols", func(t *testing.T) {
		p, _ := cambriconFake(t)
		t.Setenv("FLAGCX_CAMBRICON_CNCL", compileC(t, filepath.Join(t.TempDir(), "libnotcncl.so"), fakeCambriconC, "-DNO_CNCL"))
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "plugin cambricon: init: ")
		require.Contains(t, err.Error(), "libnotcncl.so lacks cnclGetCliqueId")
		require.Contains(t, err.Error(), "FLAGCX_CAMBRICON_CNCL")
	})
}

func TestCambriconMapsOntoCnrtAndCncl(t *testing.T) {
	p, fake := cambriconFake(t)
	require.NoError(t, p.Init(InitOptions{}))
	info := p.Info()
	require.False(t, info.Emulated)
	require.Equal(t, "6.14.1", info.Libraries[0].Version)
	require.Equal(t, "1.25.0", info.Libraries[1].Version)
	require.Equal(t, "FLAGCX_CAMBRICON_CNCL", info.Libraries[1].EnvVar)
	require.NotContains(t, info.DataTypes, sdk.Float64, "CNCL has no float64")
	require.Len(t, info.DataTypes, 9)
	require.Equal(t, []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min}, info.RedOps, "CNCL has no avg")
	ival := func(sym string) int { return cInt(t, fake, sym) }
	pval := func(sym string) uintptr { return *(*uintptr)(cSymbol(t, fake, sym)) }

	t.Run("devices", func(t *testing.T) {
		n, err := p.DeviceCount()
		require.NoError(t, err)
		require.Equal(t, 2, n, "cnrtGetDeviceCount's unsigned count")
		di, err := p.DeviceInfo(1)
		require.NoError(t, err)
		require.Equal(t, "0000:3b:00.0", di.PCIBusID, "CNRT's bus id, 4-digit domain, lower case")
		require.Equal(t, "Cambricon MLU 1", di.Name)
		_, err = p.DeviceInfo(2)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "device 2 of 2 MLUs")
		l, err := p.Link(0, 1)
		require.NoError(t, err)
		require.Equal(t, LinkUnknown, l.Type)
		require.NoError(t, p.SetDevice(1))
		require.Equal(t, 1, ival("fake_set_device"))
		err = p.SetDevice(7)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "plugin cambricon: setDevice: ")
		require.Contains(t, err.Error(), "cnrtSetDevice: invalid device (cnrtRet 100005)")
	})

	dev, err := p.DeviceMalloc(1, 256)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "deviceMalloc sets the device it was given")
	dev2, err := p.DeviceMalloc(0, 256)
	require.NoError(t, err)
	s, err := p.StreamCreate(1)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "streamCreate sets the device: a queue belongs to the current one")

	t.Run("memcpy direction is CNRT's numbering, queue before direction", func(t *testing.T) {
		// cnrtMemTransDir_t: HostToDev 0, DevToDev 1, DevToHost 2
		for _, tc := range []struct {
			kind MemcpyKind
			dir  int
		}{{HostToDevice, 0}, {DeviceToHost, 2}, {DeviceToDevice, 1}} {
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, s))
			require.Equal(t, tc.dir, ival("fake_dir"), "%s reaches cnrtMemcpyAsync as %d", tc.kind, tc.dir)
			require.Equal(t, 0, ival("fake_sync"))
			require.Equal(t, uintptr(s), pval("fake_queue"), "the queue is cnrtMemcpyAsync's 4th argument")
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, 0))
			require.Equal(t, tc.dir, ival("fake_dir"), "%s reaches cnrtMemcpy as %d", tc.kind, tc.dir)
			require.Equal(t, 1, ival("fake_sync"))
		}
	})

	t.Run("memset", func(t *testing.T) {
		require.NoError(t, p.Memset(dev, 7, 16, s))
		require.Equal(t, 0, ival("fake_sync"))
		require.Equal(t, uintptr(s), pval("fake_queue"))
		require.NoError(t, p.Memset(dev, 7, 16, 0))
		require.Equal(t, 1, ival("fake_sync"), "a NULL stream is the synchronous cnrtMemset")
	})

	t.Run("queues and notifiers", func(t *testing.T) {
		e, err := p.EventCreate(0)
		require.NoError(t, err)
		require.Equal(t, 0, ival("fake_set_device"))
		e2, err := p.EventCreate(1)
		require.NoError(t, err)
		require.NoError(t, p.EventRecord(e, s))
		require.Equal(t, []uintptr{uintptr(e), uintptr(s)}, []uintptr{pval("fake_notifier"), pval("fake_queue")}, "cnrtPlaceNotifier(notifier, queue)")
		for i, want := range []bool{false, false, true} {
			done, err := p.EventQuery(e)
			require.NoError(t, err)
			require.Equal(t, want, done, "poll %d: cnrtErrorNotReady and cnrtErrorBusy mean pending, not failed", i)
		}
		require.True(t, p.HasEventTiming())
		d, err := p.EventElapsed(e, e2)
		require.NoError(t, err)
		require.Equal(t, 2500.0, float64(d.Microseconds()))
		require.Equal(t, []uintptr{uintptr(e), uintptr(e2)}, []uintptr{pval("fake_start"), pval("fake_end")}, "cnrtNotifierElapsedTime(start, end, ms)")
		require.NoError(t, p.StreamWaitEvent(s, e2))
		require.Equal(t, []uintptr{uintptr(e2), uintptr(s)}, []uintptr{pval("fake_notifier"), pval("fake_queue")}, "cnrtQueueWaitNotifier(notifier, queue, flag)")
		require.Equal(t, 0, ival("fake_wait_flag"), "CNRT_NOTIFIER_WAIT_DEFAULT")
		done, err := p.StreamQuery(s)
		require.NoError(t, err)
		require.True(t, done)
		require.NoError(t, p.StreamSynchronize(s))
		require.NoError(t, p.EventSynchronize(e))
		require.NoError(t, p.EventDestroy(e))
		require.NoError(t, p.EventDestroy(e2))
	})

	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Len(t, id, 136, "struct cnclCliqueId: data[128] and a uint64_t hash")
	require.Equal(t, byte(3), id[0])
	require.Equal(t, byte((127*5+3)%256), id[127])
	require.Equal(t, []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}, id[128:], "the hash travels with the id")

	t.Run("clique id arrives intact, by pointer, with device and rank lists", func(t *testing.T) {
		mine := make([]byte, 136)
		for i := range mine {
			mine[i] = byte(251 - i)
		}
		c, err := p.CommInitRank(1, 4, mine, 3)
		require.NoError(t, err)
		require.Equal(t, mine, unsafe.Slice((*byte)(cSymbol(t, fake, "fake_clique")), 136), "all 136 bytes, at offset 0")
		require.Equal(t, 1, ival("fake_num_comm"), "one communicator per process")
		require.Equal(t, 1, ival("fake_dev"), "dev_list[0]")
		require.Equal(t, 3, ival("fake_rank"), "rank_list[0]")
		require.Equal(t, 4, ival("fake_nrank"))
		require.Equal(t, 1, ival("fake_init_device"), "the device is set before cnclInitComms")
		before := len(cText(t, fake, "fake_calls"))
		require.NoError(t, c.Destroy())
		require.Equal(t, "FreeComm;", cText(t, fake, "fake_calls")[before:])
	})

	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)

	t.Run("data types reach CNCL with cncl.h's numbers, ops unchanged", func(t *testing.T) {
		for dt, want := range cambriconTypes {
			for _, op := range []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min} {
				require.NoError(t, comm.AllReduce(dev, dev2, 3, dt, op, s))
				require.Equal(t, want, ival("fake_dtype"), "%s reaches CNCL as 0x%x", dt, want)
				require.Equal(t, int(op), ival("fake_op"), op.String())
			}
		}
	})

	t.Run("every collective's arguments land in CNCL's positions", func(t *testing.T) {
		type call struct {
			send, recv       uintptr
			count            uint64
			dtype, op, root  int
			queue, commInCCL uintptr
		}
		got := func() call {
			return call{pval("fake_send"), pval("fake_recv"), *(*uint64)(cSymbol(t, fake, "fake_count")),
				ival("fake_dtype"), ival("fake_op"), ival("fake_root"), pval("fake_queue"), pval("fake_comm")}
		}
		require.NoError(t, comm.AllReduce(dev, dev2, 5, sdk.Int64, sdk.Min, s))
		cc := got().commInCCL
		require.NotZero(t, cc)
		for _, tc := range []struct {
			name string
			run  func() error
			want call
		}{
			{"allReduce", func() error { return comm.AllReduce(dev, dev2, 5, sdk.Int64, sdk.Min, s) }, call{dev, dev2, 5, 0x23, 3, -1, uintptr(s), cc}},
			{"reduce", func() error { return comm.Reduce(dev, dev2, 6, sdk.Bfloat16, sdk.Prod, 1, s) }, call{dev, dev2, 6, 0x11, 1, 1, uintptr(s), cc}},
			{"broadcast", func() error { return comm.Broadcast(dev, dev2, 7, sdk.Uint64, 1, s) }, call{dev, dev2, 7, 0x33, -1, 1, uintptr(s), cc}},
			{"allGather", func() error { return comm.AllGather(dev, dev2, 8, sdk.Uint8, s) }, call{dev, dev2, 8, 0x30, -1, -1, uintptr(s), cc}},
			{"reduceScatter", func() error { return comm.ReduceScatter(dev, dev2, 9, sdk.Float16, sdk.Max, s) }, call{dev, dev2, 9, 0x10, 2, -1, uintptr(s), cc}},
			{"alltoAll", func() error { return comm.AlltoAll(dev, dev2, 10, sdk.Int32, s) }, call{dev, dev2, 10, 0x22, -1, -1, uintptr(s), cc}},
			{"send", func() error { return comm.Send(dev, 11, sdk.Uint32, 1, s) }, call{dev, 0, 11, 0x32, -1, 1, uintptr(s), cc}},
			{"recv", func() error { return comm.Recv(dev2, 12, sdk.Int8, 1, s) }, call{0, dev2, 12, 0x20, -1, 1, uintptr(s), cc}},
		} {
			require.NoError(t, tc.run(), tc.name)
			require.Equal(t, tc.want, got(), tc.name)
		}
	})

	t.Run("float64 and avg are not supported, never mapped", func(t *testing.T) {
		before := ival("fake_ccl_calls")
		err := comm.AllReduce(dev, dev2, 4, sdk.Float64, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		err = comm.AllReduce(dev, dev2, 4, sdk.Float32, sdk.Avg, s)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		// the plugin itself refuses them too, not only the loader's masks
		err = p.sys("allReduce", p.t.CCL.AllReduce, dev, dev2, 4, uintptr(sdk.Float64), uintptr(sdk.Sum), comm.h, uintptr(s))
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Contains(t, err.Error(), "CNCL has no float64")
		err = p.sys("broadcast", p.t.CCL.Broadcast, dev, dev2, 4, uintptr(sdk.Float64), 0, comm.h, uintptr(s))
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		err = p.sys("reduce", p.t.CCL.Reduce, dev, dev2, 4, uintptr(sdk.Float32), uintptr(sdk.Avg), 0, comm.h, uintptr(s))
		require.ErrorIs(t, err, sdk.ErrNotSupported)
		require.Contains(t, err.Error(), "CNCL has no avg")
		require.Equal(t, before, ival("fake_ccl_calls"), "CNCL never saw them")
	})

	t.Run("vendor errors name the plugin, the entry and the CNCL call", func(t *testing.T) {
		err := comm.AllReduce(dev, dev2, 7777, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "plugin cambricon: allReduce: invalid argument: cnclAllReduce: fake CNCL: CNCL_RET_ERR_ARGUMENTS (cnclResult 0x07)")
		err = comm.AsyncError()
		require.ErrorIs(t, err, sdk.ErrUnhandledCCLError)
		require.Contains(t, err.Error(), "cnclGetCommAsyncError: fake CNCL: CNCL_RET_ASYNC_ERROR (cnclResult 0x16)")
	})

	t.Run("gather scatter alltoallv are grouped cnclSend/cnclRecv", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			run  func() error
			want string
		}{
			{"gather at root", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 0, s) },
				"GroupStart;Send(0,4,0x12);Recv(0,4,0x12);Recv(1,4,0x12);GroupEnd;"},
			{"gather elsewhere", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 1, s) },
				"GroupStart;Send(1,4,0x12);GroupEnd;"},
			{"scatter at root", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int8, 0, s) },
				"GroupStart;Send(0,2,0x20);Recv(0,2,0x20);Send(1,2,0x20);GroupEnd;"},
			{"scatter elsewhere", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int8, 1, s) },
				"GroupStart;Recv(1,2,0x20);GroupEnd;"},
			{"alltoall is CNCL's own", func() error { return comm.AlltoAll(dev, dev2, 3, sdk.Int32, s) }, "AlltoAll;"},
			{"alltoallv skips zero counts", func() error {
				return comm.AlltoAllv(dev, []int{1, 0}, []int{0, 1}, dev2, []int{2, 5}, []int{0, 2}, sdk.Int32, s)
			}, "GroupStart;Send(0,1,0x22);Recv(0,2,0x22);Recv(1,5,0x22);GroupEnd;"},
		} {
			before := len(cText(t, fake, "fake_calls"))
			require.NoError(t, tc.run(), tc.name)
			require.Equal(t, tc.want, cText(t, fake, "fake_calls")[before:], tc.name)
		}
		// alltoallv displacements are in elements: peer 1's receive lands 2 int32s in
		require.NoError(t, comm.AlltoAllv(dev, []int{0, 0}, []int{0, 0}, dev2, []int{0, 5}, []int{0, 2}, sdk.Int32, s))
		require.Equal(t, dev2+8, pval("fake_recv"))
		require.NoError(t, comm.AlltoAllv(dev, []int{0, 3}, []int{0, 4}, dev2, []int{0, 0}, []int{0, 0}, sdk.Float16, s))
		require.Equal(t, dev+4*2, pval("fake_send"))
	})

	before := len(cText(t, fake, "fake_calls"))
	require.NoError(t, comm.Abort())
	require.Equal(t, "AbortComm;", cText(t, fake, "fake_calls")[before:])
	require.NoError(t, p.StreamDestroy(s))
	require.NoError(t, p.DeviceFree(dev))
	require.NoError(t, p.DeviceFree(dev2))
}

func TestCambriconAlltoAllWithoutCnclAlltoAll(t *testing.T) {
	p, fake := cambriconFake(t, "-DNO_ALLTOALL")
	require.NoError(t, p.Init(InitOptions{}))
	id, err := p.UniqueID()
	require.NoError(t, err)
	comm, err := p.CommInitRank(0, 2, id, 1)
	require.NoError(t, err)
	dev, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	before := len(cText(t, fake, "fake_calls"))
	require.NoError(t, comm.AlltoAll(dev, dev, 3, sdk.Bfloat16, 0))
	require.Equal(t, "GroupStart;Send(0,3,0x11);Recv(0,3,0x11);Send(1,3,0x11);Recv(1,3,0x11);GroupEnd;", cText(t, fake, "fake_calls")[before:])
}

func TestCambriconRefusesACommunicatorThatDisagrees(t *testing.T) {
	p, fake := cambriconFake(t, "-DLIE_RANK")
	require.NoError(t, p.Init(InitOptions{}))
	id, err := p.UniqueID()
	require.NoError(t, err)
	_, err = p.CommInitRank(0, 3, id, 1)
	require.ErrorIs(t, err, sdk.ErrInternalError)
	require.Contains(t, err.Error(), "cnclInitComms made rank 2 of 3, but rank 1 of 3 was asked for")
	require.True(t, strings.HasSuffix(cText(t, fake, "fake_calls"), "FreeComm;"), "the bad communicator is freed")
}

// TestCambriconMutantsFailOnTheEmulator proves that the emulator catches
// the mistakes a CNCL/CNRT shim can make: each mutant is the plugin's own
// source with one mapping broken, built and run (2 ranks on goroutines)
// through the same exact checks that the real plugin passes (runRank's
// short version: the runtime, then AllReduce of int8 and float32).
func TestCambriconMutantsFailOnTheEmulator(t *testing.T) {
	sim := builtVendorsim(t, "cambricon")
	srcBytes, err := os.ReadFile(filepath.Join(repoRoot(t), "plugins", "cambricon", "cambricon.c"))
	require.NoError(t, err)
	src := string(srcBytes)
	run := func(t *testing.T, plugin string) error {
		p, err := Open(plugin)
		require.NoError(t, err)
		require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
		reps, err := inProcessRanks(p, 2, rankOptions{short: true})
		if err != nil {
			return err
		}
		var errs []error
		for r, rep := range reps {
			if len(rep.Failures) > 0 {
				errs = append(errs, fmt.Errorf("rank %d: %d wrong results, first: %s", r, len(rep.Failures), rep.Failures[0]))
			}
		}
		return errors.Join(errs...)
	}
	t.Run("the plugin as it is passes", func(t *testing.T) {
		require.NoError(t, run(t, builtPlugin(t, "cambricon")))
	})
	for _, m := range []struct {
		name, old, new, want string
	}{
		{"CUDA's memcpy directions",
			"static const int cnrtDir[3] = {cnrtMemcpyHostToDev, cnrtMemcpyDevToHost, cnrtMemcpyDevToDev};",
			"static const int cnrtDir[3] = {1, 2, 3};", "cnrtMemcpy: Invalid argument"},
		{"D2H and D2D swapped",
			"static const int cnrtDir[3] = {cnrtMemcpyHostToDev, cnrtMemcpyDevToHost, cnrtMemcpyDevToDev};",
			"static const int cnrtDir[3] = {cnrtMemcpyHostToDev, cnrtMemcpyDevToDev, cnrtMemcpyDevToHost};", "cnrtMemcpy"},
		{"direction before queue in cnrtMemcpyAsync",
			"f_cnrtMemcpyAsync(dst, (void*)src, bytes, (cnrtQueue_t)s, cnrtDir[kind])",
			"f_cnrtMemcpyAsync(dst, (void*)src, bytes, (cnrtQueue_t)(uintptr_t)cnrtDir[kind], (int)(uintptr_t)s)", "cnrtMemcpyAsync"},
		{"queue and notifier swapped in cnrtQueueWaitNotifier",
			"f_cnrtQueueWaitNotifier((cnrtNotifier_t)e, (cnrtQueue_t)s,",
			"f_cnrtQueueWaitNotifier((cnrtNotifier_t)s, (cnrtQueue_t)e,", "cnrtQueueWaitNotifier"},
		{"float32 sent as float16",
			"[flagcxFloat32] = cnclFloat32", "[flagcxFloat32] = cnclFloat16", "float32"},
		{"int8 sent as uint8",
			"[flagcxInt8] = cnclInt8,       [flagcxUint8] = cnclUint8,",
			"[flagcxInt8] = cnclUint8,      [flagcxUint8] = cnclInt8,", "int8"},
		{"clique id without its hash (128 bytes, as torch_mlu sends)",
			"memcpy(&u, id, sizeof u); /* all 136 bytes, data and hash */",
			"memset(&u, 0, sizeof u); memcpy(&u, id, CNCL_CLIQUE_ID_BYTES_SIZE);", "hash does not match"},
		{"clique id copied at an offset",
			"memcpy(&u, id, sizeof u); /* all 136 bytes, data and hash */",
			"memset(&u, 0, sizeof u); memcpy((char*)&u + 4, id, sizeof u - 4);", "cnclInitComms"},
		{"max and min swapped",
			"return cnclCheck(f_cnclAllReduce(s, r, n, ct, op, CC(c), (cnrtQueue_t)st), \"cnclAllReduce\");",
			"return cnclCheck(f_cnclAllReduce(s, r, n, ct, op == 2 ? 3 : op == 3 ? 2 : op, CC(c), (cnrtQueue_t)st), \"cnclAllReduce\");", "max"},
	} {
		t.Run(m.name, func(t *testing.T) {
			require.Equal(t, 1, strings.Count(src, m.old), "the mutation's target is not (uniquely) in cambricon.c any more: update this test")
			dir := t.TempDir()
			common := filepath.Join(repoRoot(t), "plugins", "common") // the shared shim core (plugins/plugins.mk)
			plugin := compileC(t, filepath.Join(dir, "libflagcx-cambricon.so"), strings.Replace(src, m.old, m.new, 1),
				"-I", common, filepath.Join(common, "shim.c"), "-fvisibility=hidden", "-ldl")
			err := run(t, plugin)
			require.Error(t, err, "the emulator let a broken mapping pass")
			require.Contains(t, err.Error(), m.want)
		})
	}
}
