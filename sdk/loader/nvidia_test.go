package loader

import (
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// fakeNvidiaC is a FAKE libcudart + libnccl in one library: the vendor
// signatures and enum values of docs/vendor-facts.md#nvidia, recording what
// the nvidia plugin passes so the tests can prove its mapping. Memory is
// host memory; "device" allocations are remembered for
// cudaPointerGetAttributes. -DEMULATED adds the vendorsim marker,
// -DNCCL_VER sets ncclGetVersion.
const fakeNvidiaC = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef NCCL_VER
#define NCCL_VER 22807
#endif
#ifdef EMULATED
int flagcxVendorsimEmulated = 1;
#endif
typedef struct { char internal[128]; } ncclUniqueId;
struct cudaPointerAttributes { int type; int device; void* devicePointer; void* hostPointer; };

int fake_kind = -1, fake_sync_copy = -1, fake_set_device = -1, fake_stream_flags = -1, fake_host_flags = -1;
int fake_dtype = -1, fake_op = -1, fake_root = -1, fake_nranks = -1, fake_rank = -1, fake_nccl_calls = 0;
size_t fake_count;
void* fake_stream;
unsigned char fake_uid[128];
char fake_calls[4096];
static char lastErr[256];
static void* devs[64];
static int eventPolls;
static void note(const char* s) { strncat(fake_calls, s, sizeof fake_calls - strlen(fake_calls) - 1); }

int cudaGetDeviceCount(int* n) { *n = 2; return 0; }
int cudaSetDevice(int d) { fake_set_device = d; return d < 2 ? 0 : 101; }
int cudaMalloc(void** p, size_t n) { int i; for (i = 0; i < 64; i++) if (!devs[i]) { *p = devs[i] = calloc(1, n); return 0; } return 2; }
int cudaFree(void* p) { int i; for (i = 0; i < 64; i++) if (devs[i] == p) devs[i] = 0; free(p); return 0; }
int cudaHostAlloc(void** p, size_t n, unsigned flags) { fake_host_flags = flags; *p = calloc(1, n); return 0; }
int cudaFreeHost(void* p) { free(p); return 0; }
int cudaMemcpy(void* d, const void* s, size_t n, int kind) { fake_kind = kind; fake_sync_copy = 1; memcpy(d, s, n); return 0; }
int cudaMemcpyAsync(void* d, const void* s, size_t n, int kind, void* st) {
  fake_kind = kind; fake_sync_copy = 0; fake_stream = st; memcpy(d, s, n); return 0;
}
int cudaMemsetAsync(void* d, int v, size_t n, void* st) { fake_stream = st; memset(d, v, n); return 0; }
int cudaStreamCreateWithFlags(void** s, unsigned flags) { fake_stream_flags = flags; *s = malloc(1); return 0; }
int cudaStreamDestroy(void* s) { free(s); return 0; }
int cudaStreamSynchronize(void* s) { (void)s; return 0; }
int cudaStreamQuery(void* s) { (void)s; return 0; }
int cudaStreamWaitEvent(void* s, void* e, unsigned f) { (void)s; (void)e; return f == 0 ? 0 : 1; }
int cudaEventCreateWithFlags(void** e, unsigned f) { (void)f; *e = malloc(1); eventPolls = 0; return 0; }
int cudaEventDestroy(void* e) { free(e); return 0; }
int cudaEventRecord(void* e, void* s) { (void)e; fake_stream = s; return 0; }
int cudaEventQuery(void* e) { (void)e; return eventPolls++ == 0 ? 600 : 0; } /* cudaErrorNotReady, then done */
int cudaEventSynchronize(void* e) { (void)e; return 0; }
int cudaEventElapsedTime(float* ms, void* a, void* b) { (void)a; (void)b; *ms = 1.5f; return 0; }
int cudaDeviceGetPCIBusId(char* b, int len, int dev) { snprintf(b, len, "0000:%02X:00.0", 0x1A + dev); return dev < 2 ? 0 : 101; }
const char* cudaGetErrorString(int e) { return e == 101 ? "invalid device ordinal" : "fake cuda error"; }
int cudaGetLastError(void) { return 0; }
int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }
int cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
  int i; a->type = 0; /* cudaMemoryTypeUnregistered */
  for (i = 0; i < 64; i++) if (devs[i] && devs[i] == p) a->type = 2; /* cudaMemoryTypeDevice */
  return 0;
}

int ncclGetVersion(int* v) { *v = NCCL_VER; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) { int i; for (i = 0; i < 128; i++) id->internal[i] = (char)(i * 3 + 1); return 0; }
int ncclCommInitRank(void** c, int nranks, ncclUniqueId id, int rank) {
  memcpy(fake_uid, id.internal, 128); fake_nranks = nranks; fake_rank = rank; *c = malloc(1); return 0;
}
int ncclCommDestroy(void* c) { free(c); return 0; }
int ncclCommAbort(void* c) { free(c); return 0; }
int ncclCommGetAsyncError(void* c, int* e) { (void)c; *e = 6; snprintf(lastErr, sizeof lastErr, "fake NCCL: peer 1 vanished"); return 0; }
static int coll(const char* name, size_t n, int t, int op, int root, void* st) {
  char m[96]; fake_nccl_calls++; fake_count = n; fake_dtype = t; fake_op = op; fake_root = root; fake_stream = st;
  snprintf(m, sizeof m, "%s;", name); note(m);
  if (n == 7777) { snprintf(lastErr, sizeof lastErr, "fake NCCL: count 7777 rejected"); return 4; }
  return 0;
}
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, void* c, void* st) { (void)s; (void)r; (void)c; return coll("AllReduce", n, t, op, -1, st); }
int ncclReduce(const void* s, void* r, size_t n, int t, int op, int root, void* c, void* st) { (void)s; (void)r; (void)c; return coll("Reduce", n, t, op, root, st); }
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, void* c, void* st) { (void)s; (void)r; (void)c; return coll("Broadcast", n, t, -1, root, st); }
int ncclAllGather(const void* s, void* r, size_t n, int t, void* c, void* st) { (void)s; (void)r; (void)c; return coll("AllGather", n, t, -1, -1, st); }
int ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, void* c, void* st) { (void)s; (void)r; (void)c; return coll("ReduceScatter", n, t, op, -1, st); }
int ncclSend(const void* b, size_t n, int t, int peer, void* c, void* st) {
  char m[64]; (void)b; (void)c; (void)st; (void)t; snprintf(m, sizeof m, "Send(%d,%zu);", peer, n); note(m); return 0;
}
int ncclRecv(void* b, size_t n, int t, int peer, void* c, void* st) {
  char m[64]; (void)b; (void)c; (void)st; (void)t; snprintf(m, sizeof m, "Recv(%d,%zu);", peer, n); note(m); return 0;
}
int ncclGroupStart(void) { note("GroupStart;"); return 0; }
int ncclGroupEnd(void) { note("GroupEnd;"); return 0; }
const char* ncclGetErrorString(int r) { return r == 4 ? "invalid argument (run with NCCL_DEBUG=WARN for details)" : "fake nccl error"; }
const char* ncclGetLastError(void* c) { (void)c; return lastErr; }
`

// fakeNvidia builds the fake vendor library and a fresh copy of the nvidia
// plugin, points FLAGCX_NVIDIA_* at them (NVML at nothing: it is optional)
// and opens the plugin.
func fakeNvidia(t *testing.T, flags ...string) (*Plugin, string) {
	t.Helper()
	return openFake(t, "nvidia", flags...)
}

// The common init failures (a missing NCCL, a runtime that is not a shared
// object, no CUDA, the loader skipping the plugin), the emulated selection
// and the plugin on the emulators are vendors_test.go's.

func TestNvidiaMapsOntoCudaAndNccl(t *testing.T) {
	p, fake := fakeNvidia(t)
	require.NoError(t, p.Init(InitOptions{}))
	info := p.Info()
	require.False(t, info.Emulated)
	require.Equal(t, "13.0", info.Libraries[0].Version)
	require.Equal(t, "2.28.7", info.Libraries[1].Version)
	require.Equal(t, "FLAGCX_NVIDIA_NCCL", info.Libraries[1].EnvVar)
	require.False(t, info.Libraries[2].Loaded, "NVML is optional")
	require.Contains(t, info.Libraries[2].Error, "FLAGCX_NVIDIA_NVML")
	require.Equal(t, sdk.AllDataTypes(), info.DataTypes)
	require.Equal(t, sdk.AllRedOps(), info.RedOps)
	ival := func(sym string) int { return cInt(t, fake, sym) }

	t.Run("devices without NVML", func(t *testing.T) {
		n, err := p.DeviceCount()
		require.NoError(t, err)
		require.Equal(t, 2, n)
		di, err := p.DeviceInfo(1)
		require.NoError(t, err)
		require.Equal(t, "0000:1b:00.0", di.PCIBusID, "lower case, as sysfs spells it")
		require.Equal(t, "NVIDIA GPU 1", di.Name)
		l, err := p.Link(0, 1)
		require.NoError(t, err)
		require.Equal(t, LinkInfo{Type: LinkUnknown, Name: "unknown"}, l)
		l, err = p.Link(1, 1)
		require.NoError(t, err)
		require.Equal(t, LinkSelf, l.Type)
		_, err = p.DeviceInfo(5)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "cudaDeviceGetPCIBusId: invalid device ordinal (cudaError 101)")
	})

	dev, err := p.DeviceMalloc(1, 256)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "deviceMalloc sets the device it was given")
	dev2, err := p.DeviceMalloc(0, 256)
	require.NoError(t, err)
	s, err := p.StreamCreate(1)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_stream_flags"), "cudaStreamNonBlocking")

	t.Run("memcpy direction", func(t *testing.T) {
		tests := []struct {
			kind     MemcpyKind
			cudaKind int
		}{{HostToDevice, 1}, {DeviceToHost, 2}, {DeviceToDevice, 3}}
		for _, tc := range tests {
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, s))
			require.Equal(t, tc.cudaKind, ival("fake_kind"), "%s reaches cudaMemcpyAsync as %d", tc.kind, tc.cudaKind)
			require.Equal(t, 0, ival("fake_sync_copy"))
			require.Equal(t, uintptr(s), *(*uintptr)(cSymbol(t, fake, "fake_stream")))
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, 0))
			require.Equal(t, tc.cudaKind, ival("fake_kind"), "%s reaches cudaMemcpy as %d", tc.kind, tc.cudaKind)
			require.Equal(t, 1, ival("fake_sync_copy"))
		}
	})

	t.Run("pinned host memory is portable", func(t *testing.T) {
		h, err := p.HostMalloc(64)
		require.NoError(t, err)
		require.Equal(t, 1, ival("fake_host_flags"), "cudaHostAllocPortable")
		require.NoError(t, p.HostFree(h))
	})

	t.Run("events", func(t *testing.T) {
		e, err := p.EventCreate(0)
		require.NoError(t, err)
		require.NoError(t, p.EventRecord(e, s))
		done, err := p.EventQuery(e)
		require.NoError(t, err)
		require.False(t, done, "cudaErrorNotReady means pending, not failed")
		done, err = p.EventQuery(e)
		require.NoError(t, err)
		require.True(t, done)
		require.True(t, p.HasEventTiming())
		d, err := p.EventElapsed(e, e)
		require.NoError(t, err)
		require.Equal(t, 1500.0, float64(d.Microseconds()))
		require.NoError(t, p.StreamWaitEvent(s, e))
		require.NoError(t, p.EventDestroy(e))
	})

	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Len(t, id, 128)
	require.Equal(t, byte(1), id[0])
	require.Equal(t, byte((127*3+1)%256), id[127])

	t.Run("unique id arrives intact by value", func(t *testing.T) {
		mine := make([]byte, 128)
		for i := range mine {
			mine[i] = byte(255 - i)
		}
		c, err := p.CommInitRank(1, 4, mine, 3)
		require.NoError(t, err)
		require.Equal(t, mine, unsafe.Slice((*byte)(cSymbol(t, fake, "fake_uid")), 128))
		require.Equal(t, 4, ival("fake_nranks"))
		require.Equal(t, 3, ival("fake_rank"))
		require.Equal(t, 1, ival("fake_set_device"))
		require.NoError(t, c.Destroy())
	})

	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)

	t.Run("data types and ops pass with NCCL's numbers", func(t *testing.T) {
		for _, dt := range sdk.AllDataTypes() {
			for _, op := range sdk.AllRedOps() {
				require.NoError(t, comm.AllReduce(dev, dev2, 3, dt, op, s))
				require.Equal(t, int(dt), ival("fake_dtype"), dt.String())
				require.Equal(t, int(op), ival("fake_op"), op.String())
			}
		}
		require.NoError(t, comm.AllReduce(dev, dev2, 3, sdk.Float16, sdk.Sum, s))
		require.Equal(t, 6, ival("fake_dtype"), "Float16 reaches NCCL as ncclFloat16 = 6")
		require.NoError(t, comm.Reduce(dev, dev2, 5, sdk.Bfloat16, sdk.Avg, 1, s))
		require.Equal(t, []int{9, 4, 1, 5}, []int{ival("fake_dtype"), ival("fake_op"), ival("fake_root"), int(*(*uint64)(cSymbol(t, fake, "fake_count")))})
		require.NoError(t, comm.Broadcast(dev, dev2, 5, sdk.Uint64, 1, s))
		require.Equal(t, []int{5, 1}, []int{ival("fake_dtype"), ival("fake_root")})
	})

	t.Run("vendor error string surfaces", func(t *testing.T) {
		err := comm.AllReduce(dev, dev2, 7777, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "plugin nvidia: allReduce: invalid argument: ncclAllReduce: invalid argument")
		require.Contains(t, err.Error(), "fake NCCL: count 7777 rejected")
		err = comm.AsyncError()
		require.ErrorIs(t, err, sdk.ErrRemoteError)
		require.Contains(t, err.Error(), "fake NCCL: peer 1 vanished")
	})

	t.Run("host slice refused before NCCL sees it", func(t *testing.T) {
		before := ival("fake_nccl_calls")
		host := make([]float32, 16)
		err := comm.AllReduce(uintptr(unsafe.Pointer(&host[0])), dev2, 16, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "is pageable host memory")
		require.Equal(t, before, ival("fake_nccl_calls"))
		require.ErrorContains(t, p.CheckHostMemory("allReduce", []string{"send buffer"}, dev), "is device memory")
	})

	t.Run("gather scatter alltoall are grouped send/recv", func(t *testing.T) {
		tests := []struct {
			name string
			run  func() error
			want string
		}{
			{"gather at root", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 0, s) },
				"GroupStart;Send(0,4);Recv(0,4);Recv(1,4);GroupEnd;"},
			{"gather elsewhere", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 1, s) },
				"GroupStart;Send(1,4);GroupEnd;"},
			{"scatter at root", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int8, 0, s) },
				"GroupStart;Send(0,2);Recv(0,2);Send(1,2);GroupEnd;"},
			{"scatter elsewhere", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int8, 1, s) },
				"GroupStart;Recv(1,2);GroupEnd;"},
			{"alltoall", func() error { return comm.AlltoAll(dev, dev2, 3, sdk.Int32, s) },
				"GroupStart;Send(0,3);Recv(0,3);Send(1,3);Recv(1,3);GroupEnd;"},
			{"alltoallv skips zero counts", func() error {
				return comm.AlltoAllv(dev, []int{1, 0}, []int{0, 1}, dev2, []int{2, 5}, []int{0, 2}, sdk.Int32, s)
			}, "GroupStart;Send(0,1);Recv(0,2);Recv(1,5);GroupEnd;"},
		}
		for _, tc := range tests {
			before := len(cText(t, fake, "fake_calls"))
			require.NoError(t, tc.run(), tc.name)
			require.Equal(t, tc.want, cText(t, fake, "fake_calls")[before:], tc.name)
		}
	})

	require.NoError(t, comm.Destroy())
	require.NoError(t, p.StreamDestroy(s))
	require.NoError(t, p.DeviceFree(dev))
	require.NoError(t, p.DeviceFree(dev2))
}

func TestNvidiaAvgNeedsNccl210(t *testing.T) {
	p, _ := fakeNvidia(t, "-DNCCL_VER=2903")
	require.NoError(t, p.Init(InitOptions{}))
	require.Equal(t, "2.9.3", p.Info().Libraries[1].Version)
	require.False(t, p.SupportsRedOp(sdk.Avg))
	require.True(t, p.SupportsRedOp(sdk.Max))
	id, err := p.UniqueID()
	require.NoError(t, err)
	comm, err := p.CommInitRank(0, 1, id, 0)
	require.NoError(t, err)
	dev, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	err = comm.AllReduce(dev, dev, 4, sdk.Float32, sdk.Avg, 0)
	require.ErrorIs(t, err, sdk.ErrNotSupported)
	require.Contains(t, err.Error(), "not supported")
}

// flagcxgoNcclC is a library that says it is flagcx-go's own NCCL API
// (build/lib/libnccl.so.2 exports this marker): the nvidia plugin must
// never take it for NVIDIA's NCCL, or it would call back into flagcx-go.
const flagcxgoNcclC = `__attribute__((visibility("default"))) const int flagcxgoNcclApi = 1;
int ncclGetVersion(int *v) { *v = 22809; return 0; }
`

// TestNvidiaRefusesFlagcxgoNccl: named by FLAGCX_NVIDIA_NCCL, flagcx-go's
// libnccl.so.2 fails init with why; found first on the library path, it is
// passed over for the next candidate (NVIDIA's NCCL in its usual homes).
func TestNvidiaRefusesFlagcxgoNccl(t *testing.T) {
	const why = "it is flagcx-go's own libnccl.so.2 (the NCCL API on top of flagcx-go), not NVIDIA's NCCL"
	t.Run("named by FLAGCX_NVIDIA_NCCL", func(t *testing.T) {
		p, _ := openFake(t, "nvidia")
		self := compileFake(t, "libnccl.so.2", flagcxgoNcclC)
		t.Setenv("FLAGCX_NVIDIA_NCCL", self)
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "cannot load libnccl.so.2 from FLAGCX_NVIDIA_NCCL="+self+": "+why)
		require.False(t, p.Info().Libraries[1].Loaded)
	})
	t.Run("first on the library path", func(t *testing.T) {
		self := compileFake(t, "libnccl.so.2", flagcxgoNcclC)
		t.Setenv("LD_LIBRARY_PATH", filepath.Dir(self)) // read by the fresh process's loader
		testkit.InFreshProcess(t, func(t *testing.T) {
			p, _ := openFake(t, "nvidia")
			t.Setenv("FLAGCX_NVIDIA_NCCL", "")
			err := p.Init(InitOptions{})
			ccl := p.Info().Libraries[1]
			require.NotEqual(t, self, ccl.Path, "flagcx-go's NCCL API must never be loaded as the vendor's NCCL")
			if err == nil {
				require.True(t, ccl.Loaded)
				t.Logf("NVIDIA's NCCL loaded from %s", ccl.Path)
				return
			}
			require.Contains(t, err.Error(), "cannot load libnccl.so.2 (tried libnccl.so.2:/usr/lib/x86_64-linux-gnu/libnccl.so.2:")
			require.Contains(t, err.Error(), "passed over one: "+why)
		})
	})
}
