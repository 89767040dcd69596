package vendorsim

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The nvidia plugin's relayReduce kernels (flagcx_relay_<type>) as the
// emulated CUDA runtime runs them (nvidia/cudart.c): launched here
// directly, as the plugin launches them, with the arguments of
// flagcxRelay_v5_t. The workers run with a start delay far beyond every
// deadline below, so a relay held back by it would show as a missing
// landed word, never as a slow pass.

const (
	cudaErrorNotSupported = 801
	relayAbort            = uint64(1) << 63
)

// relayArgs mirrors flagcxRelay_v5_t (sdk/include/flagcx_plugin.h), 144 bytes.
type relayArgs struct {
	Src, Window           uintptr
	Bytes                 uint64
	Landed, Go            uintptr
	Value                 uint64
	Srcs                  [8]uintptr
	NSrcs, DType, Op, Div int32
	Count                 uint64
	Dst                   uintptr
}

type dim3 struct{ X, Y, Z uint32 }

// relayAPI is the part of the runtime that loads and launches kernels.
type relayAPI struct {
	LibraryLoadData  func(lib *uintptr, code *byte, jit, jitv uintptr, njit uint32, lo, lov uintptr, nlib uint32) int32
	LibraryGetKernel func(k *uintptr, lib uintptr, name string) int32
	LaunchKernel     func(fn uintptr, grid, block dim3, args *unsafe.Pointer, shared uintptr, stream uintptr) int32
	HostRegister     func(p uintptr, n uintptr, flags uint32) int32
	HostUnregister   func(p uintptr) int32
}

var relayEnv = []string{"FLAGCX_VENDORSIM_SYNC=0", "FLAGCX_VENDORSIM_STREAM_DELAY_US=10000000"}

func init() {
	scenarios["relay"] = scenarioRelay
	scenarios["relay-timeout"] = scenarioRelayTimeout
	scenarios["relay-sync"] = scenarioRelaySync
}

// relayRig is a scenario's kernel, stream, registered words and window,
// and device buffers: src (16 float32 i), dst, and host source 1 (100 i).
type relayRig struct {
	w            *worker
	api          relayAPI
	kernel       uintptr
	stream       uintptr
	mem          []byte
	src, dst     devBuf
	value        uint64
	landed, goes *uint64
}

func newRelayRig(w *worker) *relayRig {
	g := &relayRig{w: w}
	for _, b := range []struct {
		name string
		f    any
	}{{"cudaLibraryLoadData", &g.api.LibraryLoadData}, {"cudaLibraryGetKernel", &g.api.LibraryGetKernel},
		{"cudaLaunchKernel", &g.api.LaunchKernel}, {"cudaHostRegister", &g.api.HostRegister}, {"cudaHostUnregister", &g.api.HostUnregister}} {
		if err := bind(w.e.hCuda, b.name, b.f); err != nil {
			w.failf("%v", err)
		}
	}
	image := []byte("flagcx-vendorsim-cubin 1\nflagcx_reduce_f32\nflagcx_relay_f32\n\x00")
	var lib uintptr
	w.ok("cudaLibraryLoadData", g.api.LibraryLoadData(&lib, &image[0], 0, 0, 0, 0, 0, 0))
	w.ok("cudaLibraryGetKernel", g.api.LibraryGetKernel(&g.kernel, lib, "flagcx_relay_f32"))
	w.ok("cudaStreamCreateWithFlags", w.e.cuda.StreamCreateWithFlags(&g.stream, 1))
	mem, err := syscall.Mmap(-1, 0, 8192, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		w.failf("mmap: %v", err)
	}
	g.mem = mem
	w.ok("cudaHostRegister", g.api.HostRegister(g.addr(0), 8192, 1))
	g.landed, g.goes = (*uint64)(unsafe.Pointer(&mem[0])), (*uint64)(unsafe.Pointer(&mem[8]))
	g.src = w.upload(float32Bytes(16, func(i int) float32 { return float32(i) }))
	g.dst = w.upload(make([]byte, 64))
	copy(mem[4096+64:], float32Bytes(16, func(i int) float32 { return float32(100 * i) }))
	return g
}

func (g *relayRig) addr(off int) uintptr { return uintptr(unsafe.Pointer(&g.mem[off])) }

// args is a relay of src into the window (offset 4096), folding the
// window and host source 1 (offset 4096+64) into dst, with a new value.
func (g *relayRig) args() *relayArgs {
	g.value++
	return &relayArgs{Src: uintptr(g.src.p), Window: g.addr(4096), Bytes: 64, Landed: g.addr(0), Go: g.addr(8), Value: g.value,
		Srcs: [8]uintptr{g.addr(4096), g.addr(4096 + 64)}, NSrcs: 2, DType: dtFloat32, Op: opSum, Div: 1, Count: 16, Dst: uintptr(g.dst.p)}
}

func (g *relayRig) launch(a *relayArgs, stream uintptr) int32 {
	p := unsafe.Pointer(a)
	rc := g.api.LaunchKernel(g.kernel, dim3{1, 1, 1}, dim3{512, 1, 1}, &p, 0, stream)
	runtime.KeepAlive(a)
	return rc
}

// landedIn waits, at most 5 s, for *landed to hold the rig's value.
func (g *relayRig) landedIn() bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		if atomic.LoadUint64(g.landed) == g.value {
			return true
		}
	}
	return false
}

func (g *relayRig) close() {
	g.w.ok("cudaHostUnregister", g.api.HostUnregister(g.addr(0)))
	_ = syscall.Munmap(g.mem)
}

func scenarioRelay(w *worker) {
	g := newRelayRig(w)
	c := w.e.cuda
	// A copy before the relay, held back by the start delay unless the
	// relay pulls it: the window must get its bytes.
	w.ok("cudaMemcpyAsync", c.MemcpyAsync(g.src.p, unsafe.Pointer(&float32Bytes(16, func(i int) float32 { return float32(i + 1) })[0]), 64, memcpyHostToDevice, g.stream))
	w.ok("cudaLaunchKernel", g.launch(g.args(), g.stream))
	w.out.Codes["landed"] = boolCode(g.landedIn())
	w.out.Buffers["window"] = append([]byte(nil), g.mem[4096:4096+64]...)
	w.out.Codes["query before the go"] = int(c.StreamQuery(g.stream))
	w.out.Buffers["dst before the go"] = append([]byte(nil), g.dst.bytes()...)
	atomic.StoreUint64(g.goes, g.value)
	w.out.Codes["sync after the go"] = int(c.StreamSynchronize(g.stream))
	w.out.Buffers["dst"] = append([]byte(nil), g.dst.bytes()...)

	// An abort: the stream completes, dst stays.
	w.ok("cudaMemsetAsync", c.MemsetAsync(g.dst.p, 0, 64, g.stream))
	w.ok("cudaLaunchKernel", g.launch(g.args(), g.stream))
	w.out.Codes["landed before the abort"] = boolCode(g.landedIn())
	atomic.StoreUint64(g.goes, g.value|relayAbort)
	w.out.Codes["sync after the abort"] = int(c.StreamSynchronize(g.stream))
	w.out.Buffers["dst after the abort"] = append([]byte(nil), g.dst.bytes()...)

	// A stream destroyed while its relay waits: the relay gives up.
	var other uintptr
	w.ok("cudaStreamCreateWithFlags", c.StreamCreateWithFlags(&other, 1))
	w.ok("cudaLaunchKernel", g.launch(g.args(), other))
	w.out.Codes["landed before the destroy"] = boolCode(g.landedIn())
	w.out.Codes["destroy while it waits"] = int(c.StreamDestroy(other))
	w.out.Buffers["dst after the destroy"] = append([]byte(nil), g.dst.bytes()...)

	// Pointers the kernel cannot use fail the launch.
	bad := map[string]func(a *relayArgs){
		"window in device memory":    func(a *relayArgs) { a.Window = uintptr(g.dst.p) },
		"src in host memory":         func(a *relayArgs) { a.Src = g.addr(4096 + 64) },
		"source 1 pageable":          func(a *relayArgs) { a.Srcs[1] = uintptr(unsafe.Pointer(&w.out)) },
		"landed unaligned":           func(a *relayArgs) { a.Landed = g.addr(4) },
		"dst in host memory":         func(a *relayArgs) { a.Dst = g.addr(4096 + 64) },
		"the kernel of another type": func(a *relayArgs) { a.DType = dtFloat64 },
		"value with the abort bit":   func(a *relayArgs) { a.Value |= relayAbort },
	}
	for name, mutate := range bad {
		a := g.args()
		mutate(a)
		w.out.Codes["bad: "+name] = int(g.launch(a, g.stream))
	}
	w.ok("cudaStreamSynchronize", c.StreamSynchronize(g.stream))
	w.ok("cudaStreamDestroy", c.StreamDestroy(g.stream))
	g.close()
}

// scenarioRelayTimeout: no go ever comes; after FLAGCX_VENDORSIM_TIMEOUT
// the relay gives up and fails its stream.
func scenarioRelayTimeout(w *worker) {
	g := newRelayRig(w)
	w.ok("cudaLaunchKernel", g.launch(g.args(), g.stream))
	w.out.Codes["landed"] = boolCode(g.landedIn())
	w.out.Codes["sync"] = int(w.e.cuda.StreamSynchronize(g.stream))
	w.out.Buffers["dst"] = append([]byte(nil), g.dst.bytes()...)
	w.ok("cudaStreamDestroy", w.e.cuda.StreamDestroy(g.stream))
	g.close()
}

// scenarioRelaySync: FLAGCX_VENDORSIM_SYNC=1 cannot run a relay.
func scenarioRelaySync(w *worker) {
	g := newRelayRig(w)
	w.out.Codes["launch"] = int(g.launch(g.args(), g.stream))
	w.ok("cudaStreamDestroy", w.e.cuda.StreamDestroy(g.stream))
	g.close()
}

func boolCode(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestRelayKernel(t *testing.T) {
	src := float32Bytes(16, func(i int) float32 { return float32(i + 1) })
	zeros := make([]byte, 64)
	for _, tc := range []struct {
		name     string
		scenario string
		env      []string
		want     map[string]int
		buffers  map[string][]byte
	}{
		{"go, abort, destroy and bad pointers", "relay", relayEnv, map[string]int{
			"landed": 1, "query before the go": cudaErrorNotReady, "sync after the go": cudaSuccess,
			"landed before the abort": 1, "sync after the abort": cudaSuccess,
			"landed before the destroy": 1, "destroy while it waits": cudaSuccess,
			"bad: window in device memory": cudaErrorInvalidValue, "bad: src in host memory": cudaErrorInvalidValue,
			"bad: source 1 pageable": cudaErrorInvalidValue, "bad: landed unaligned": cudaErrorInvalidValue,
			"bad: dst in host memory": cudaErrorInvalidValue, "bad: the kernel of another type": cudaErrorInvalidValue,
			"bad: value with the abort bit": cudaErrorInvalidValue,
		}, map[string][]byte{
			"window": src, "dst before the go": zeros,
			"dst":                 float32Bytes(16, func(i int) float32 { return float32(i + 1 + 100*i) }),
			"dst after the abort": zeros, "dst after the destroy": zeros,
		}},
		{"no go within FLAGCX_VENDORSIM_TIMEOUT", "relay-timeout", append([]string{EnvTimeout + "=1"}, relayEnv...),
			map[string]int{"landed": 1, "sync": cudaErrorLaunchFailure}, map[string][]byte{"dst": zeros}},
		{"FLAGCX_VENDORSIM_SYNC=1", "relay-sync", []string{"FLAGCX_VENDORSIM_SYNC=1"},
			map[string]int{"launch": cudaErrorNotSupported}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := runRanks(t, tc.scenario, 1, tc.env, nil, nil)[0]
			for k, v := range tc.want {
				require.Equal(t, v, run.out.Codes[k], k)
			}
			for k, v := range tc.buffers {
				require.Equal(t, v, run.out.Buffers[k], k)
			}
		})
	}
}
