package vendorsim

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The asynchronous streams (core/stream.c): work runs after its call
// returns, so a caller that skips a synchronise, an event wait or uses the
// wrong stream reads stale data, as on a device. The other tests of this
// package run the synchronous mode (TestMain); these workers turn the
// default back on, with a long start delay so that "not yet run" is
// certain rather than likely.
var asyncEnv = []string{"FLAGCX_VENDORSIM_SYNC=0", "FLAGCX_VENDORSIM_STREAM_DELAY_US=300000", EnvTimeout + "=20"}

const (
	cudaErrorNotReady      = 600
	cudaErrorLaunchFailure = 719
)

// float32Bytes is count float32 values f(i), little endian.
func float32Bytes(count int, f func(i int) float32) []byte {
	b := make([]byte, 4*count)
	for i := range count {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
	return b
}

func init() {
	scenarios["streams"] = scenarioStreams
	scenarios["async-coll"] = scenarioAsyncColl
}

// hostByte reads byte i of emulated device memory directly (it is host
// memory): what a device would hold right now, without waiting for it.
func hostByte(b devBuf, i int) byte { return *(*byte)(b.at(i)) }

func scenarioStreams(w *worker) {
	c := w.e.cuda
	var blocking, nonBlocking, other uintptr
	w.ok("cudaStreamCreateWithFlags", c.StreamCreateWithFlags(&blocking, 0))
	w.ok("cudaStreamCreateWithFlags", c.StreamCreateWithFlags(&nonBlocking, 1))
	w.ok("cudaStreamCreateWithFlags", c.StreamCreateWithFlags(&other, 1))
	var ev uintptr
	w.ok("cudaEventCreateWithFlags", c.EventCreateWithFlags(&ev, 0))
	const n = 64
	src, dst, cp := w.malloc(n), w.malloc(n), w.malloc(n)
	w.ok("cudaMemcpy", c.Memcpy(src.p, unsafe.Pointer(&[n]byte{0: 7, n - 1: 9}), n, 1))
	w.ok("cudaMemcpy", c.Memcpy(dst.p, unsafe.Pointer(&[n]byte{}), n, 1))

	// An async copy has not run when its call returns; a query says so;
	// a synchronise waits for it.
	w.ok("cudaMemcpyAsync", c.MemcpyAsync(dst.p, src.p, n, 3, nonBlocking))
	w.out.Codes["before sync"] = int(hostByte(dst, 0))
	w.out.Codes["event query, never recorded"] = int(c.EventQuery(ev))
	w.ok("cudaEventRecord", c.EventRecord(ev, nonBlocking))
	w.out.Codes["event query, pending"] = int(c.EventQuery(ev))
	w.ok("cudaStreamSynchronize", c.StreamSynchronize(nonBlocking))
	w.out.Codes["after sync"] = int(hostByte(dst, 0))
	w.out.Codes["event query, passed"] = int(c.EventQuery(ev))

	// A second stream that waits for an event sees the first stream's
	// copy; one that does not wait reads what was there before.
	w.ok("cudaMemcpyAsync", c.MemcpyAsync(dst.p, src.p, n, 3, nonBlocking)) // nothing changes; a new position
	w.ok("cudaMemsetAsync", c.MemsetAsync(dst.p, 5, n, nonBlocking))
	w.ok("cudaEventRecord", c.EventRecord(ev, nonBlocking))
	w.ok("cudaStreamWaitEvent", c.StreamWaitEvent(other, ev, 0))
	w.ok("cudaMemcpyAsync", c.MemcpyAsync(cp.p, dst.p, n, 3, other))
	w.ok("cudaStreamSynchronize", c.StreamSynchronize(other))
	w.out.Codes["waited for the event"] = int(hostByte(cp, 0))

	w.ok("cudaMemsetAsync", c.MemsetAsync(dst.p, 6, n, nonBlocking))
	w.ok("cudaMemcpyAsync", c.MemcpyAsync(cp.p, dst.p, n, 3, other))
	w.ok("cudaStreamSynchronize", c.StreamSynchronize(other))
	w.out.Codes["did not wait"] = int(hostByte(cp, 0))
	w.ok("cudaStreamSynchronize", c.StreamSynchronize(nonBlocking))

	// The legacy default stream (cudaMemcpy) waits for blocking streams,
	// not for non-blocking ones.
	host := make([]byte, n)
	w.ok("cudaMemsetAsync", c.MemsetAsync(dst.p, 11, n, blocking))
	w.ok("cudaMemcpy", c.Memcpy(unsafe.Pointer(&host[0]), dst.p, n, 2))
	w.out.Codes["cudaMemcpy after a blocking stream"] = int(host[0])
	w.ok("cudaMemsetAsync", c.MemsetAsync(dst.p, 12, n, nonBlocking))
	w.ok("cudaMemcpy", c.Memcpy(unsafe.Pointer(&host[0]), dst.p, n, 2))
	w.out.Codes["cudaMemcpy after a non-blocking stream"] = int(host[0])
	w.ok("cudaDeviceSynchronize", c.DeviceSynchronize())
	w.out.Codes["after device synchronize"] = int(hostByte(dst, 0))

	// Freeing memory waits for the work that uses it.
	w.ok("cudaMemsetAsync", c.MemsetAsync(cp.p, 13, n, nonBlocking))
	w.ok("cudaStreamDestroy", c.StreamDestroy(nonBlocking)) // runs its work first
	w.out.Codes["after stream destroy"] = int(hostByte(cp, 0))
	w.free(src, dst, cp)
	w.ok("cudaEventDestroy", c.EventDestroy(ev))
	w.ok("cudaStreamDestroy", c.StreamDestroy(blocking))
	w.ok("cudaStreamDestroy", c.StreamDestroy(other))
}

func TestStreamsRunAsynchronously(t *testing.T) {
	run := runRanks(t, "streams", 1, asyncEnv, nil, nil)[0]
	want := map[string]int{
		"before sync":                            0,
		"event query, never recorded":            cudaSuccess,
		"event query, pending":                   cudaErrorNotReady,
		"after sync":                             7,
		"event query, passed":                    cudaSuccess,
		"waited for the event":                   5,
		"did not wait":                           5, // the memset to 6 had not run
		"cudaMemcpy after a blocking stream":     11,
		"cudaMemcpy after a non-blocking stream": 11, // the memset to 12 had not run
		"after device synchronize":               12,
		"after stream destroy":                   13,
	}
	for k, v := range want {
		require.Equal(t, v, run.out.Codes[k], k)
	}
}

// A collective's failure shows where asynchronous work shows it: the call
// returns success, the stream's synchronise fails, the communicator's
// async error names the cause; the collective's output is not written
// before the stream runs it, and is after.
func scenarioAsyncColl(w *worker) {
	w.initComm()
	c, nc := w.e.cuda, w.e.nccl
	const count = 16
	buf := w.upload(float32Bytes(count, func(i int) float32 { return float32(w.rank + i) }))
	// Rank 0 joins late, so rank 1's collective cannot have run when its
	// call returns, however the threads are scheduled: what rank 1 reads
	// then is the buffer before the collective, unless the emulator ran
	// the collective inside the call.
	if w.rank == 0 {
		time.Sleep(300 * time.Millisecond)
	}
	w.ok("ncclAllReduce", nc.AllReduce(buf.p, buf.p, count, dtFloat32, opSum, w.comm, w.stream))
	w.out.Codes["before sync"] = int(hostByte(buf, 10)) // byte 2 of element 2: 0x00 or 0x40 before, 0xa0 after
	w.ok("cudaStreamSynchronize", c.StreamSynchronize(w.stream))
	w.out.Buffers["sum"] = append([]byte(nil), buf.bytes()...)

	// A mismatched collective: accepted, failing on the stream.
	w.out.Codes["mismatch rc"] = int(nc.AllReduce(buf.p, buf.p, uintptr(count-w.rank), dtFloat32, opSum, w.comm, w.stream))
	w.out.Codes["sync"] = int(c.StreamSynchronize(w.stream))
	var async int32
	w.ok("ncclCommGetAsyncError", nc.CommGetAsyncError(w.comm, &async))
	w.out.Codes["async"] = int(async)
	w.out.Texts["err"] = w.lastError()
	w.free(buf)
	w.ok("ncclCommAbort", nc.CommAbort(w.comm))
	w.ok("cudaStreamDestroy", c.StreamDestroy(w.stream))
}

func TestCollectivesRunOnTheStream(t *testing.T) {
	runs := runRanks(t, "async-coll", 2, asyncEnv, nil, nil)
	for r, run := range runs {
		start := float32Bytes(16, func(i int) float32 { return float32(r + i) })
		if r == 1 { // rank 0 came late: only rank 1's read is certain to come first
			require.Equal(t, int(start[10]), run.out.Codes["before sync"], "rank %d: the collective ran inside its call, not on its stream", r)
		}
		require.Equal(t, float32Bytes(16, func(i int) float32 { return float32(1 + 2*i) }), run.out.Buffers["sum"], "rank %d", r)
		require.Equal(t, ncclSuccess, run.out.Codes["mismatch rc"], "rank %d: arguments are fine; the mismatch is found on the stream", r)
		require.Equal(t, cudaErrorLaunchFailure, run.out.Codes["sync"], "rank %d", r)
		require.Equal(t, ncclInvalidUsage, run.out.Codes["async"], "rank %d", r)
		require.Contains(t, run.out.Texts["err"], "does not match", "rank %d", r)
	}
}
