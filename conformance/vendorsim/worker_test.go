package vendorsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// Multi-rank tests run each rank in its own process, as real NCCL ranks
// are: testkit.Run re-executes the test binary as the "vendorsim-nccl"
// worker with envScenario naming a scenario. A worker drives the emulators
// and records what it got (buffers, return codes, error texts) in its
// report; the parent test asserts on it with require. A worker only fails
// on its own when it cannot run at all.

const (
	ncclWorker  = "vendorsim-nccl"
	envScenario = "VSIM_TEST_SCENARIO"
	envLibRoot  = "VSIM_TEST_ROOT"
)

func TestMain(m *testing.M) {
	// These tests check the emulated libraries call by call (results and
	// error codes as each call returns), so they run the synchronous mode;
	// the asynchronous streams, the default, are tested in
	// streams_test.go by workers that turn it back on.
	if _, set := os.LookupEnv("FLAGCX_VENDORSIM_SYNC"); !set {
		_ = os.Setenv("FLAGCX_VENDORSIM_SYNC", "1")
	}
	testkit.ServeWorker()
	os.Exit(m.Run())
}

func init() {
	testkit.Worker(ncclWorker, runWorker)
}

// workerOut is what a worker reports.
type workerOut struct {
	Buffers map[string][]byte  `json:"buffers"`
	Codes   map[string]int     `json:"codes"`
	Texts   map[string]string  `json:"texts"`
	Numbers map[string]float64 `json:"numbers"`
	Fail    string             `json:"fail"`
}

type worker struct {
	e      *emulators
	r      testkit.Rank
	rank   int
	nranks int
	id     uniqueID
	out    workerOut
	comm   uintptr
	stream uintptr
}

func newWorkerOut() workerOut {
	return workerOut{Buffers: map[string][]byte{}, Codes: map[string]int{}, Texts: map[string]string{}, Numbers: map[string]float64{}}
}

// workerAbort unwinds a scenario on an unexpected failure.
type workerAbort struct{ msg string }

func (w *worker) failf(format string, args ...any) {
	panic(workerAbort{fmt.Sprintf(format, args...)})
}

// ok requires a zero return code from an emulator call.
func (w *worker) ok(what string, rc int32) {
	if rc != 0 {
		w.failf("rank %d: %s returned %d: %s", w.rank, what, rc, w.e.nccl.GetLastError(w.comm))
	}
}

// save writes the report now (for a rank that exits on purpose).
func (w *worker) save() {
	if err := w.r.Save(&w.out); err != nil {
		fmt.Fprintln(os.Stderr, "worker: cannot write results:", err)
		os.Exit(3)
	}
}

// runWorker is one rank of the scenario envScenario names.
func runWorker(r testkit.Rank) (any, error) {
	w := &worker{r: r, rank: r.Rank, nranks: r.N, out: newWorkerOut()}
	if len(r.ID) != len(w.id.Internal) {
		return nil, fmt.Errorf("bad unique id: %d bytes", len(r.ID))
	}
	copy(w.id.Internal[:], r.ID)
	libs, err := FindNvidia(os.Getenv(envLibRoot))
	if err == nil {
		w.e, err = loadEmulators(libs)
	}
	if err != nil {
		return nil, err
	}
	fn, ok := scenarios[os.Getenv(envScenario)]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q", os.Getenv(envScenario))
	}
	w.out.Fail = recoverAbort(func() { fn(w) })
	return &w.out, nil
}

// recoverAbort runs f; a workerAbort it panics with is returned as text.
func recoverAbort(f func()) (fail string) {
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(workerAbort)
			if !ok {
				panic(r)
			}
			fail = a.msg
		}
	}()
	f()
	return ""
}

// rankRun is one rank's outcome as the parent sees it.
type rankRun struct {
	out    workerOut
	stderr string
}

// runRanks starts n workers of a scenario and waits for all of them.
// env applies to every rank; perRank (may be nil) adds variables per rank;
// skip (may be nil) says which ranks not to start at all.
func runRanks(t *testing.T, scenario string, n int, env []string, perRank func(r int) []string, skip func(r int) bool) []rankRun {
	t.Helper()
	e := testEmulators(t)
	var id uniqueID
	require.Equal(t, int32(ncclSuccess), e.nccl.GetUniqueID(&id))
	res := testkit.Run[workerOut](t, testkit.Spec{Worker: ncclWorker, N: n, ID: id.Internal[:],
		Env: append([]string{envScenario + "=" + scenario, envLibRoot + "=" + testkit.RepoRoot(t)}, env...), PerRank: perRank, Skip: skip})
	runs := make([]rankRun, n)
	for r := range n {
		runs[r] = rankRun{out: res[r].Report, stderr: res[r].Log}
		if skip == nil || !skip(r) {
			require.Empty(t, runs[r].out.Fail, "rank %d failed; stderr:\n%s", r, runs[r].stderr)
		}
	}
	return runs
}

// ---------------------------------------------------------------------
// Scenario helpers (worker side)
// ---------------------------------------------------------------------

// initComm selects device rank%count (so that device checks see real
// indices) and joins the communicator.
func (w *worker) initComm() {
	var ndev int32
	w.ok("cudaGetDeviceCount", w.e.cuda.GetDeviceCount(&ndev))
	w.ok("cudaSetDevice", w.e.cuda.SetDevice(int32(w.rank)%ndev))
	w.ok("ncclCommInitRank", w.e.nccl.CommInitRank(&w.comm, int32(w.nranks), w.id, int32(w.rank)))
	w.ok("cudaStreamCreateWithFlags", w.e.cuda.StreamCreateWithFlags(&w.stream, 1))
}

func (w *worker) finish() {
	w.ok("cudaStreamDestroy", w.e.cuda.StreamDestroy(w.stream))
	w.ok("ncclCommDestroy", w.e.nccl.CommDestroy(w.comm))
}

func (w *worker) upload(data []byte) devBuf {
	b, err := w.e.upload(data)
	if err != nil {
		w.failf("%v", err)
	}
	return b
}

func (w *worker) malloc(n int) devBuf {
	b, err := w.e.malloc(n)
	if err != nil {
		w.failf("%v", err)
	}
	return b
}

func (w *worker) fill(b devBuf, v byte) {
	w.ok("cudaMemsetAsync", w.e.cuda.MemsetAsync(b.p, int32(v), uintptr(b.n), w.stream))
}

// keep records a device buffer's contents under name, and frees it.
func (w *worker) keep(name string, b devBuf) {
	data, err := w.e.download(b)
	if err != nil {
		w.failf("%v", err)
	}
	w.out.Buffers[name] = data
	w.e.cuda.Free(b.p)
}

func (w *worker) free(bs ...devBuf) {
	for _, b := range bs {
		w.e.cuda.Free(b.p)
	}
}

func (w *worker) lastError() string { return w.e.nccl.GetLastError(w.comm) }

// ---------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------

var scenarios = map[string]func(*worker){
	"allreduce":     scenarioAllReduce,
	"rooted":        scenarioRooted,
	"gather":        scenarioGatherScatter,
	"p2p":           scenarioP2P,
	"p2p-mismatch":  scenarioP2PMismatch,
	"coll-mismatch": scenarioCollMismatch,
	"nranks":        scenarioNranksMismatch,
	"early-exit":    scenarioEarlyExit,
	"stalled-peer":  scenarioStalledPeer,
	"init-only":     scenarioInitOnly,
	"nvml":          scenarioNVML,
}

const matrixCount = 97

func scenarioAllReduce(w *worker) {
	w.initComm()
	n := w.nranks
	for dt := 0; dt < numDtypes; dt++ {
		for op := 0; op < numOps; op++ {
			in := encodeN(dt, matrixCount, func(i int) float64 { return inputValue(dt, op, w.rank, n, i) })
			send, recv := w.upload(in), w.malloc(len(in))
			w.ok("ncclAllReduce", w.e.nccl.AllReduce(send.p, recv.p, matrixCount, int32(dt), int32(op), w.comm, w.stream))
			w.keep(fmt.Sprintf("oop/%d/%d", dt, op), recv)
			w.free(send)
			buf := w.upload(in)
			w.ok("ncclAllReduce in place", w.e.nccl.AllReduce(buf.p, buf.p, matrixCount, int32(dt), int32(op), w.comm, w.stream))
			w.keep(fmt.Sprintf("ip/%d/%d", dt, op), buf)
		}
	}
	// count 0 moves nothing and needs no buffers
	w.out.Codes["count0"] = int(w.e.nccl.AllReduce(nil, nil, 0, dtFloat32, opSum, w.comm, w.stream))

	if n == 2 {
		// Round to nearest even after each half-precision step: rank 0 holds
		// 1 and 1+2^-10, rank 1 adds 2^-11 (exactly half an ulp) to both.
		f16 := map[int][]uint16{0: {0x3C00, 0x3C01}, 1: {0x1000, 0x1000}}
		bf16 := map[int][]uint16{0: {0x3F80, 0x3F81}, 1: {0x3B80, 0x3B80}}
		for _, c := range []struct {
			name string
			dt   int
			vals []uint16
		}{{"round/f16", dtFloat16, f16[w.rank]}, {"round/bf16", dtBfloat16, bf16[w.rank]}} {
			raw := unsafe.Slice((*byte)(unsafe.Pointer(&c.vals[0])), 4)
			buf := w.upload(raw)
			w.ok("ncclAllReduce rounding", w.e.nccl.AllReduce(buf.p, buf.p, 2, int32(c.dt), opSum, w.comm, w.stream))
			w.keep(c.name, buf)
		}
	}
	w.finish()
}

const rootedCount = 61

func scenarioRooted(w *worker) {
	w.initComm()
	n := w.nranks
	for root := 0; root < n; root++ {
		for dt := 0; dt < numDtypes; dt++ {
			es := dtypeSize[dt]
			for op := 0; op < numOps; op++ {
				in := encodeN(dt, rootedCount, func(i int) float64 { return inputValue(dt, op, w.rank, n, i) })
				send, recv := w.upload(in), w.malloc(len(in))
				w.fill(recv, 0x5A) // non-roots must not touch it
				w.ok("ncclReduce", w.e.nccl.Reduce(send.p, recv.p, rootedCount, int32(dt), int32(op), int32(root), w.comm, w.stream))
				w.keep(fmt.Sprintf("reduce/%d/%d/%d", root, dt, op), recv)
				w.free(send)
			}
			// in-place reduce (sum) on every rank
			in := encodeN(dt, rootedCount, func(i int) float64 { return inputValue(dt, opSum, w.rank, n, i) })
			buf := w.upload(in)
			w.ok("ncclReduce in place", w.e.nccl.Reduce(buf.p, buf.p, rootedCount, int32(dt), opSum, int32(root), w.comm, w.stream))
			w.keep(fmt.Sprintf("reduce-ip/%d/%d", root, dt), buf)

			// broadcast: non-roots pass no send buffer at all
			bin := encodeN(dt, rootedCount, func(i int) float64 { return a2aValue(w.rank, 0, i) })
			recv := w.malloc(rootedCount * es)
			var sendp unsafe.Pointer
			var send devBuf
			if w.rank == root {
				send = w.upload(bin)
				sendp = send.p
			}
			w.ok("ncclBroadcast", w.e.nccl.Broadcast(sendp, recv.p, rootedCount, int32(dt), int32(root), w.comm, w.stream))
			w.keep(fmt.Sprintf("bcast/%d/%d", root, dt), recv)
			if w.rank == root {
				w.free(send)
			}
			buf = w.upload(bin)
			w.ok("ncclBroadcast in place", w.e.nccl.Broadcast(buf.p, buf.p, rootedCount, int32(dt), int32(root), w.comm, w.stream))
			w.keep(fmt.Sprintf("bcast-ip/%d/%d", root, dt), buf)
		}
	}
	w.finish()
}

const gatherCount = 37

func scenarioGatherScatter(w *worker) {
	w.initComm()
	n, me := w.nranks, w.rank
	for dt := 0; dt < numDtypes; dt++ {
		es := dtypeSize[dt]
		// allgather, out of place and in place (sendbuff = recvbuff + rank*count)
		in := encodeN(dt, gatherCount, func(i int) float64 { return a2aValue(me, 0, i) })
		send, recv := w.upload(in), w.malloc(n*gatherCount*es)
		w.ok("ncclAllGather", w.e.nccl.AllGather(send.p, recv.p, gatherCount, int32(dt), w.comm, w.stream))
		w.keep(fmt.Sprintf("ag/%d", dt), recv)
		w.free(send)
		big := w.malloc(n * gatherCount * es)
		w.fill(big, 0x77)
		w.ok("cudaMemcpy", w.e.cuda.Memcpy(big.at(me*gatherCount*es), unsafe.Pointer(&in[0]), uintptr(len(in)), memcpyHostToDevice))
		w.ok("ncclAllGather in place", w.e.nccl.AllGather(big.at(me*gatherCount*es), big.p, gatherCount, int32(dt), w.comm, w.stream))
		w.keep(fmt.Sprintf("ag-ip/%d", dt), big)

		// reducescatter, every op, out of place and in place
		for op := 0; op < numOps; op++ {
			rin := encodeN(dt, n*gatherCount, func(i int) float64 { return inputValue(dt, op, me, n, i) })
			send, recv := w.upload(rin), w.malloc(gatherCount*es)
			w.ok("ncclReduceScatter", w.e.nccl.ReduceScatter(send.p, recv.p, gatherCount, int32(dt), int32(op), w.comm, w.stream))
			w.keep(fmt.Sprintf("rs/%d/%d", dt, op), recv)
			w.free(send)
			buf := w.upload(rin)
			w.ok("ncclReduceScatter in place", w.e.nccl.ReduceScatter(buf.p, buf.at(me*gatherCount*es), gatherCount, int32(dt), int32(op), w.comm, w.stream))
			w.keep(fmt.Sprintf("rs-ip/%d/%d", dt, op), buf)
		}

		// alltoall, out of place and in place
		ain := encodeN(dt, n*gatherCount, func(i int) float64 { return a2aValue(me, i/gatherCount, i%gatherCount) })
		send, recv = w.upload(ain), w.malloc(len(ain))
		w.ok("ncclAlltoAll", w.e.nccl.AlltoAll(send.p, recv.p, gatherCount, int32(dt), w.comm, w.stream))
		w.keep(fmt.Sprintf("a2a/%d", dt), recv)
		w.free(send)
		buf := w.upload(ain)
		w.ok("ncclAlltoAll in place", w.e.nccl.AlltoAll(buf.p, buf.p, gatherCount, int32(dt), w.comm, w.stream))
		w.keep(fmt.Sprintf("a2a-ip/%d", dt), buf)
	}
	w.finish()
}

// Message sizes for the p2p scenario; the mailbox is set to 4 KiB.
const (
	ringBytes  = 1<<20 + 13
	pairBytes  = 100_000
	multiSmall = 1000
	multiLarge = 30_000
	plainBytes = 64_000
	selfBytes  = 10_000
)

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (w *worker) keepDigest(name string, b devBuf) {
	data, err := w.e.download(b)
	if err != nil {
		w.failf("%v", err)
	}
	w.out.Texts[name] = digest(data)
	w.free(b)
}

func scenarioP2P(w *worker) {
	w.initComm()
	n, me := w.nranks, w.rank
	next, prev := (me+1)%n, (me+n-1)%n
	nc := w.e.nccl

	// 1. Ring inside one group, everyone's send issued before its receive,
	//    each message 256 times the mailbox.
	send, recv := w.upload(p2pPattern(me, next, 0, ringBytes)), w.malloc(ringBytes)
	w.ok("ncclGroupStart", nc.GroupStart())
	w.ok("ncclSend ring", nc.Send(send.p, ringBytes, dtInt8, int32(next), w.comm, w.stream))
	w.ok("ncclRecv ring", nc.Recv(recv.p, ringBytes, dtInt8, int32(prev), w.comm, w.stream))
	w.ok("ncclGroupEnd", nc.GroupEnd())
	w.keepDigest("ring", recv)
	w.free(send)

	// 2. Both directions at once, float32, in a nested group.
	toNext, toPrev := w.upload(p2pPattern(me, next, 1, pairBytes)), w.upload(p2pPattern(me, prev, 1, pairBytes))
	fromPrev, fromNext := w.malloc(pairBytes), w.malloc(pairBytes)
	w.ok("ncclGroupStart", nc.GroupStart())
	w.ok("ncclGroupStart nested", nc.GroupStart())
	w.ok("ncclSend next", nc.Send(toNext.p, pairBytes/4, dtFloat32, int32(next), w.comm, w.stream))
	w.ok("ncclSend prev", nc.Send(toPrev.p, pairBytes/4, dtFloat32, int32(prev), w.comm, w.stream))
	w.ok("ncclGroupEnd nested", nc.GroupEnd())
	w.ok("ncclRecv prev", nc.Recv(fromPrev.p, pairBytes/4, dtFloat32, int32(prev), w.comm, w.stream))
	w.ok("ncclRecv next", nc.Recv(fromNext.p, pairBytes/4, dtFloat32, int32(next), w.comm, w.stream))
	w.ok("ncclGroupEnd", nc.GroupEnd())
	w.keepDigest("fromPrev", fromPrev)
	w.keepDigest("fromNext", fromNext)
	w.free(toNext, toPrev)

	// 3. Two messages to the same peer in one group arrive in order.
	s1, s2 := w.upload(p2pPattern(me, next, 2, multiSmall)), w.upload(p2pPattern(me, next, 3, multiLarge))
	r1, r2 := w.malloc(multiSmall), w.malloc(multiLarge)
	w.ok("ncclGroupStart", nc.GroupStart())
	w.ok("ncclRecv 1", nc.Recv(r1.p, multiSmall/4, dtInt32, int32(prev), w.comm, w.stream))
	w.ok("ncclRecv 2", nc.Recv(r2.p, multiLarge/4, dtInt32, int32(prev), w.comm, w.stream))
	w.ok("ncclSend 1", nc.Send(s1.p, multiSmall/4, dtInt32, int32(next), w.comm, w.stream))
	w.ok("ncclSend 2", nc.Send(s2.p, multiLarge/4, dtInt32, int32(next), w.comm, w.stream))
	w.ok("ncclGroupEnd", nc.GroupEnd())
	w.keepDigest("multi1", r1)
	w.keepDigest("multi2", r2)
	w.free(s1, s2)

	// 4. To itself, in a group.
	ss, sr := w.upload(p2pPattern(me, me, 4, selfBytes)), w.malloc(selfBytes)
	w.ok("ncclGroupStart", nc.GroupStart())
	w.ok("ncclSend self", nc.Send(ss.p, selfBytes, dtUint8, int32(me), w.comm, w.stream))
	w.ok("ncclRecv self", nc.Recv(sr.p, selfBytes, dtUint8, int32(me), w.comm, w.stream))
	w.ok("ncclGroupEnd", nc.GroupEnd())
	w.keepDigest("self", sr)
	w.free(ss)

	// 5. Outside any group, larger than the mailbox, between pairs (0,1),
	//    (2,3)...: the even rank sends first, the odd rank receives first.
	partner := me ^ 1
	if partner < n {
		ps, pr := w.upload(p2pPattern(me, partner, 5, plainBytes)), w.malloc(plainBytes)
		if me%2 == 0 {
			w.ok("ncclSend plain", nc.Send(ps.p, plainBytes/8, dtFloat64, int32(partner), w.comm, w.stream))
			w.ok("ncclRecv plain", nc.Recv(pr.p, plainBytes/8, dtFloat64, int32(partner), w.comm, w.stream))
		} else {
			w.ok("ncclRecv plain", nc.Recv(pr.p, plainBytes/8, dtFloat64, int32(partner), w.comm, w.stream))
			w.ok("ncclSend plain", nc.Send(ps.p, plainBytes/8, dtFloat64, int32(partner), w.comm, w.stream))
		}
		w.keepDigest("plain", pr)
		w.free(ps)
	}

	// 6. Zero-sized messages move nothing and match nothing.
	w.out.Codes["send0"] = int(nc.Send(nil, 0, dtFloat32, int32(next), w.comm, w.stream))
	w.out.Codes["recv0"] = int(nc.Recv(nil, 0, dtFloat32, int32(prev), w.comm, w.stream))
	w.finish()
}

func scenarioP2PMismatch(w *worker) {
	w.initComm()
	buf := w.malloc(400)
	if w.rank == 0 {
		w.out.Codes["rc"] = int(w.e.nccl.Send(buf.p, 100, dtFloat32, 1, w.comm, w.stream))
	} else {
		w.out.Codes["rc"] = int(w.e.nccl.Recv(buf.p, 50, dtFloat32, 0, w.comm, w.stream))
	}
	w.out.Texts["err"] = w.lastError()
	w.e.nccl.CommDestroy(w.comm)
}

func scenarioCollMismatch(w *worker) {
	w.initComm()
	count := 10 + 2*w.rank
	buf := w.malloc(count * 4)
	w.out.Codes["rc"] = int(w.e.nccl.AllReduce(buf.p, buf.p, uintptr(count), dtFloat32, opSum, w.comm, w.stream))
	w.out.Texts["err"] = w.lastError()
	var async int32
	w.ok("ncclCommGetAsyncError", w.e.nccl.CommGetAsyncError(w.comm, &async))
	w.out.Codes["async"] = int(async)
	// the communicator is unusable now
	w.out.Codes["after"] = int(w.e.nccl.AllReduce(buf.p, buf.p, 1, dtFloat32, opSum, w.comm, w.stream))
	w.ok("ncclCommAbort", w.e.nccl.CommAbort(w.comm))
}

func scenarioNranksMismatch(w *worker) {
	var comm uintptr
	w.out.Codes["rc"] = int(w.e.nccl.CommInitRank(&comm, int32(2+w.rank), w.id, int32(w.rank)))
	w.out.Texts["err"] = w.e.nccl.GetLastError(0)
	w.out.Numbers["comm"] = float64(comm)
}

// Rank 1 leaves right after init, as VSIM_TEST_HOW says: "exit" (the
// process ends without destroying anything), "abort" or "destroy".
func scenarioEarlyExit(w *worker) {
	w.initComm()
	if w.rank == 1 {
		switch os.Getenv("VSIM_TEST_HOW") {
		case "abort":
			w.ok("ncclCommAbort", w.e.nccl.CommAbort(w.comm))
		case "destroy":
			w.ok("ncclCommDestroy", w.e.nccl.CommDestroy(w.comm))
		default:
			w.save()
			os.Exit(0)
		}
		return
	}
	time.Sleep(100 * time.Millisecond)
	buf := w.malloc(64)
	start := time.Now()
	w.out.Codes["rc"] = int(w.e.nccl.AllReduce(buf.p, buf.p, 16, dtFloat32, opSum, w.comm, w.stream))
	w.out.Numbers["seconds"] = time.Since(start).Seconds()
	w.out.Texts["err"] = w.lastError()
	w.ok("ncclCommAbort", w.e.nccl.CommAbort(w.comm))
}

// Rank 1 is alive but does not call the collective until rank 0 has timed
// out; rank 0 must time out naming rank 1. Rank 1's collective then still
// completes (rank 0 had published its input before giving up), and its
// next one, which needs rank 0 again, fails at once.
func scenarioStalledPeer(w *worker) {
	w.initComm()
	in := encodeN(dtFloat32, 16, func(i int) float64 { return float64(w.rank + i) })
	buf := w.upload(in)
	if w.rank == 1 {
		time.Sleep(3500 * time.Millisecond)
	}
	start := time.Now()
	w.out.Codes["rc"] = int(w.e.nccl.AllReduce(buf.p, buf.p, 16, dtFloat32, opSum, w.comm, w.stream))
	w.out.Numbers["seconds"] = time.Since(start).Seconds()
	w.out.Texts["err"] = w.lastError()
	if w.rank == 1 {
		w.keep("result", buf)
		buf = w.malloc(64)
		start = time.Now()
		w.out.Codes["rc2"] = int(w.e.nccl.AllReduce(buf.p, buf.p, 16, dtFloat32, opSum, w.comm, w.stream))
		w.out.Numbers["seconds2"] = time.Since(start).Seconds()
		w.out.Texts["err2"] = w.lastError()
	}
	w.ok("ncclCommAbort", w.e.nccl.CommAbort(w.comm))
}

// Only some ranks are started; init must fail with a deadline.
func scenarioInitOnly(w *worker) {
	var comm uintptr
	start := time.Now()
	w.out.Codes["rc"] = int(w.e.nccl.CommInitRank(&comm, int32(w.nranks), w.id, int32(w.rank)))
	w.out.Numbers["seconds"] = time.Since(start).Seconds()
	w.out.Texts["err"] = w.e.nccl.GetLastError(0)
	w.out.Numbers["comm"] = float64(comm)
}

// NVML and CUDA under non-default FLAGCX_VENDORSIM_DEVICES / _TOPOLOGY.
func scenarioNVML(w *worker) {
	m := w.e.nvml
	var count int32
	w.out.Codes["cudaCount"] = int(w.e.cuda.GetDeviceCount(&count))
	w.out.Numbers["cudaCount"] = float64(count)
	w.ok("nvmlInit_v2", m.Init())
	var n uint32
	w.ok("nvmlDeviceGetCount_v2", m.GetCount(&n))
	w.out.Numbers["nvmlCount"] = float64(n)
	if n >= 2 {
		var d0, d1 uintptr
		w.ok("handle 0", m.GetHandleByIndex(0, &d0))
		w.ok("handle 1", m.GetHandleByIndex(1, &d1))
		for idx := int32(0); idx < 5; idx++ {
			var st int32
			w.ok("nvmlDeviceGetP2PStatus", m.GetP2PStatus(d0, d1, idx, &st))
			w.out.Codes[fmt.Sprintf("p2p/%d", idx)] = int(st)
		}
		var state int32
		w.out.Codes["nvlink"] = int(m.GetNvLinkState(d0, 0, &state))
		var level int32
		w.ok("nvmlDeviceGetTopologyCommonAncestor", m.GetTopologyCommonAncestor(d0, d1, &level))
		w.out.Codes["level01"] = int(level)
	}
	w.ok("nvmlShutdown", m.Shutdown())
}
