package loader

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// The kunlunxin plugin on the make-built emulators (build/vendorsim/
// kunlunxin): one process per rank, as with real BKCL, through the loader's
// API, every collective checked exactly against values computed here.

// klxCount elements per rank (odd, so nothing divides evenly).
const klxCount = 13

func klxSigned(dt sdk.DataType) bool {
	switch dt {
	case sdk.Int8, sdk.Int32, sdk.Int64, sdk.Float16, sdk.Float32, sdk.Float64, sdk.Bfloat16:
		return true
	}
	return false
}

// klxIn is rank r's element i of a reduction: 1..5, negated now and then
// for signed types, so every sum, product, max and min over 3 ranks is
// exact in every type.
func klxIn(dt sdk.DataType, r, i int) float64 {
	v := float64((i+2*r)%5 + 1)
	if klxSigned(dt) && (i+r)%3 == 0 {
		v = -v
	}
	return v
}

// klxA2A is element j of what rank src sends rank dst (below 128 for 3 ranks).
func klxA2A(src, dst, j int) float64 { return float64(src*40 + dst*12 + j%12) }

// klxVC is the alltoallv count from rank src to rank dst.
func klxVC(src, dst int) int { return (src+2*dst)%3 + 1 }

func klxEncode(dt sdk.DataType, count int, f func(i int) float64) []byte {
	le := binary.LittleEndian
	out := make([]byte, 0, count*dt.Size())
	for i := 0; i < count; i++ {
		v := f(i)
		switch dt {
		case sdk.Int8, sdk.Uint8:
			out = append(out, byte(int64(v)))
		case sdk.Int32, sdk.Uint32:
			out = le.AppendUint32(out, uint32(int64(v)))
		case sdk.Int64, sdk.Uint64:
			out = le.AppendUint64(out, uint64(int64(v)))
		case sdk.Float32:
			out = le.AppendUint32(out, math.Float32bits(float32(v)))
		case sdk.Float64:
			out = le.AppendUint64(out, math.Float64bits(v))
		case sdk.Bfloat16:
			out = le.AppendUint16(out, uint16(math.Float32bits(float32(v))>>16)) // small integers: exact
		case sdk.Float16:
			out = le.AppendUint16(out, klxHalf(v))
		}
	}
	return out
}

// klxHalf encodes a small integer (|v| < 2048) as IEEE binary16.
func klxHalf(v float64) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	frac, exp := math.Frexp(v) // v = frac * 2^exp, frac in [0.5, 1)
	return sign | uint16(exp-1+15)<<10 | uint16((frac*2-1)*1024)
}

func klxFold(op sdk.RedOp, vals []float64) float64 {
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case sdk.Sum:
			acc += v
		case sdk.Prod:
			acc *= v
		case sdk.Max:
			acc = math.Max(acc, v)
		case sdk.Min:
			acc = math.Min(acc, v)
		}
	}
	return acc
}

func klxReduced(dt sdk.DataType, op sdk.RedOp, n, count, offset int) []byte {
	return klxEncode(dt, count, func(i int) float64 {
		vals := make([]float64, n)
		for r := range vals {
			vals[r] = klxIn(dt, r, offset+i)
		}
		return klxFold(op, vals)
	})
}

// klxOut is what one rank got: buffers by operation, and the errors of the
// operations that were refused (expected: not supported).
type klxOut struct {
	Buffers map[string][]byte `json:"buffers"`
	Errors  map[string]string `json:"errors"`
}

type klxRank struct {
	p         *Plugin
	c         *Comm
	s         Stream
	dev, rank int
	n         int
	out       klxOut
}

type klxAbort struct{ err error }

func (k *klxRank) must(err error, what string) {
	if err != nil {
		panic(klxAbort{fmt.Errorf("rank %d: %s: %w", k.rank, what, err)})
	}
}

func (k *klxRank) alloc(n int) uintptr {
	ptr, err := k.p.DeviceMalloc(k.dev, max(n, 1))
	k.must(err, "deviceMalloc")
	return ptr
}

// up copies data to new device memory, through pinned host memory and the
// stream (xpu_memcpy_async, XPU_HOST_TO_DEVICE).
func (k *klxRank) up(data []byte) uintptr {
	ptr := k.alloc(len(data))
	h, err := k.p.HostMalloc(len(data))
	k.must(err, "hostMalloc")
	copy(HostSlice(h, len(data)), data)
	k.must(k.p.Memcpy(ptr, h, len(data), HostToDevice, k.s), "memCopy H2D")
	k.must(k.p.StreamSynchronize(k.s), "streamSynchronize")
	k.must(k.p.HostFree(h), "hostFree")
	return ptr
}

// keep records n bytes of device memory under key (a synchronous
// XPU_DEVICE_TO_HOST copy after the stream) and frees it.
func (k *klxRank) keep(key string, ptr uintptr, n int) {
	k.must(k.p.StreamSynchronize(k.s), "streamSynchronize")
	buf := make([]byte, n)
	k.must(k.p.CopyFromDevice(buf, ptr), "memCopy D2H")
	k.out.Buffers[key] = buf
	k.must(k.p.DeviceFree(ptr), "deviceFree")
}

// refused records an operation's error when it is "not supported".
func (k *klxRank) refused(key string, err error) bool {
	if err == nil {
		return false
	}
	if !errors.Is(err, sdk.ErrNotSupported) {
		k.must(err, key)
	}
	k.out.Errors[key] = err.Error()
	return true
}

func (k *klxRank) free(ptrs ...uintptr) {
	for _, p := range ptrs {
		k.must(k.p.DeviceFree(p), "deviceFree")
	}
}

// klxScenario runs every collective for each data type on one rank.
func klxScenario(p *Plugin, dev, rank, n int, id []byte, dts []sdk.DataType) (out klxOut, err error) {
	k := &klxRank{p: p, dev: dev, rank: rank, n: n, out: klxOut{Buffers: map[string][]byte{}, Errors: map[string]string{}}}
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(klxAbort)
			if !ok {
				panic(r)
			}
			err = a.err
		}
	}()
	k.c, err = p.CommInitRank(dev, n, id, rank)
	k.must(err, "commInitRank")
	defer k.c.Destroy()
	k.s, err = p.StreamCreate(dev)
	k.must(err, "streamCreate")
	defer p.StreamDestroy(k.s)
	c, me, cnt := k.c, rank, klxCount
	for _, dt := range dts {
		if !p.SupportsDataType(dt) { // the host's business: bytes, or another path
			b := k.alloc(n * cnt * dt.Size())
			k.refused("ag/"+dt.String(), c.AllGather(b, b, cnt, dt, k.s))
			k.free(b)
			continue
		}
		es := dt.Size()
		ops := []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min, sdk.Avg}
		in := klxEncode(dt, cnt, func(i int) float64 { return klxIn(dt, me, i) })
		for _, op := range ops {
			key := fmt.Sprintf("ar/%s/%s", dt, op)
			send, recv := k.up(in), k.alloc(len(in))
			if !k.refused(key, c.AllReduce(send, recv, cnt, dt, op, k.s)) {
				k.keep(key, recv, len(in))
			} else {
				k.free(recv)
			}
			k.free(send)
		}
		buf := k.up(in)
		if !k.refused("arip/"+dt.String(), c.AllReduce(buf, buf, cnt, dt, sdk.Sum, k.s)) {
			k.keep("arip/"+dt.String(), buf, len(in))
		} else {
			k.free(buf)
		}

		// reduce (max) at the last rank; the others' recvbuff stays as set
		send, recv := k.up(in), k.alloc(len(in))
		k.must(p.Memset(recv, 0x5a, len(in), k.s), "memSet")
		if !k.refused("red/"+dt.String(), c.Reduce(send, recv, cnt, dt, sdk.Max, n-1, k.s)) {
			k.keep("red/"+dt.String(), recv, len(in))
		} else {
			k.free(recv)
		}
		k.free(send)

		// broadcast from rank 1; the others pass no send buffer
		root := 1 % n
		var bsend uintptr
		if me == root {
			bsend = k.up(klxEncode(dt, cnt, func(i int) float64 { return klxA2A(root, 0, i) }))
		}
		recv = k.alloc(cnt * es)
		k.must(c.Broadcast(bsend, recv, cnt, dt, root, k.s), "broadcast")
		k.keep("bc/"+dt.String(), recv, cnt*es)
		if bsend != 0 {
			k.free(bsend)
		}

		// allgather
		send, recv = k.up(klxEncode(dt, cnt, func(i int) float64 { return klxA2A(me, 0, i) })), k.alloc(n*cnt*es)
		k.must(c.AllGather(send, recv, cnt, dt, k.s), "allGather")
		k.keep("ag/"+dt.String(), recv, n*cnt*es)
		k.free(send)

		// reducescatter (sum)
		send, recv = k.up(klxEncode(dt, n*cnt, func(i int) float64 { return klxIn(dt, me, i) })), k.alloc(cnt*es)
		if !k.refused("rs/"+dt.String(), c.ReduceScatter(send, recv, cnt, dt, sdk.Sum, k.s)) {
			k.keep("rs/"+dt.String(), recv, cnt*es)
		} else {
			k.free(recv)
		}
		k.free(send)

		// alltoall, then a device-to-device copy on the stream
		send = k.up(klxEncode(dt, n*cnt, func(i int) float64 { return klxA2A(me, i/cnt, i%cnt) }))
		recv = k.alloc(n * cnt * es)
		k.must(c.AlltoAll(send, recv, cnt, dt, k.s), "alltoAll")
		cp := k.alloc(n * cnt * es)
		k.must(p.Memcpy(cp, recv, n*cnt*es, DeviceToDevice, k.s), "memCopy D2D")
		k.keep("a2a/"+dt.String(), cp, n*cnt*es)
		k.free(send, recv)

		// alltoallv: klxVC(me, p) elements to p, klxVC(p, me) from p
		sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		var sdata []float64
		stot, rtot := 0, 0
		for q := 0; q < n; q++ {
			sc[q], sd[q], rc[q], rd[q] = klxVC(me, q), stot, klxVC(q, me), rtot
			stot += sc[q]
			rtot += rc[q]
			for j := 0; j < sc[q]; j++ {
				sdata = append(sdata, klxA2A(me, q, j))
			}
		}
		send, recv = k.up(klxEncode(dt, stot, func(i int) float64 { return sdata[i] })), k.alloc(rtot*es)
		k.must(c.AlltoAllv(send, sc, sd, recv, rc, rd, dt, k.s), "alltoAllv")
		k.keep("a2av/"+dt.String(), recv, rtot*es)
		k.free(send)

		// gather at rank 0 (grouped send/recv in the plugin)
		send = k.up(klxEncode(dt, cnt, func(i int) float64 { return klxA2A(me, 0, i) }))
		recv = 0
		if me == 0 {
			recv = k.alloc(n * cnt * es)
		}
		k.must(c.Gather(send, recv, cnt, dt, 0, k.s), "gather")
		if me == 0 {
			k.keep("ga/"+dt.String(), recv, n*cnt*es)
		}
		k.free(send)

		// scatter from the last rank
		send = 0
		if me == n-1 {
			send = k.up(klxEncode(dt, n*cnt, func(i int) float64 { return klxA2A(n-1, i/cnt, i%cnt) }))
		}
		recv = k.alloc(cnt * es)
		k.must(c.Scatter(send, recv, cnt, dt, n-1, k.s), "scatter")
		k.keep("sc/"+dt.String(), recv, cnt*es)
		if send != 0 {
			k.free(send)
		}

		// a ring of send/recv in one group
		next, prev := (me+1)%n, (me+n-1)%n
		send, recv = k.up(klxEncode(dt, cnt, func(i int) float64 { return klxA2A(me, next, i) })), k.alloc(cnt*es)
		k.must(p.GroupStart(), "groupStart")
		err1 := c.Send(send, cnt, dt, next, k.s)
		err2 := c.Recv(recv, cnt, dt, prev, k.s)
		k.must(p.GroupEnd(), "groupEnd")
		k.must(errors.Join(err1, err2), "send/recv")
		k.keep("ring/"+dt.String(), recv, cnt*es)
		k.free(send)
	}
	e, err := p.EventCreate(dev)
	k.must(err, "eventCreate")
	k.must(p.EventRecord(e, k.s), "eventRecord")
	k.must(p.EventSynchronize(e), "eventSynchronize")
	k.must(p.EventDestroy(e), "eventDestroy")
	return k.out, nil
}

// klxMismatches compares every rank's results with the exact expectations
// and returns what differs ("" entries never).
func klxMismatches(n int, runs []klxOut, dts []sdk.DataType) []string {
	var bad []string
	check := func(r int, key string, want []byte) {
		if got, ok := runs[r].Buffers[key]; !ok || string(got) != string(want) {
			bad = append(bad, fmt.Sprintf("rank %d %s: got %x, want %x (error: %s)", r, key, got, want, runs[r].Errors[key]))
		}
	}
	refused := func(r int, key string) {
		if !strings.Contains(runs[r].Errors[key], "not supported") {
			bad = append(bad, fmt.Sprintf("rank %d %s: want not supported, got error %q, buffer %x", r, key, runs[r].Errors[key], runs[r].Buffers[key]))
		}
	}
	cnt := klxCount
	for _, dt := range dts {
		if !klxTypes[dt].native {
			for r := 0; r < n; r++ {
				refused(r, "ag/"+dt.String())
			}
			continue
		}
		for r := 0; r < n; r++ {
			for _, op := range []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min, sdk.Avg} {
				key := fmt.Sprintf("ar/%s/%s", dt, op)
				if op == sdk.Avg {
					refused(r, key)
				} else {
					check(r, key, klxReduced(dt, op, n, cnt, 0))
				}
			}
			check(r, "arip/"+dt.String(), klxReduced(dt, sdk.Sum, n, cnt, 0))
			if r == n-1 {
				check(r, "red/"+dt.String(), klxReduced(dt, sdk.Max, n, cnt, 0))
			} else {
				check(r, "red/"+dt.String(), []byte(strings.Repeat("\x5a", cnt*dt.Size())))
			}
			check(r, "rs/"+dt.String(), klxReduced(dt, sdk.Sum, n, cnt, r*cnt))
			check(r, "bc/"+dt.String(), klxEncode(dt, cnt, func(i int) float64 { return klxA2A(1%n, 0, i) }))
			check(r, "ag/"+dt.String(), klxEncode(dt, n*cnt, func(i int) float64 { return klxA2A(i/cnt, 0, i%cnt) }))
			check(r, "a2a/"+dt.String(), klxEncode(dt, n*cnt, func(i int) float64 { return klxA2A(i/cnt, r, i%cnt) }))
			var v []float64
			for q := 0; q < n; q++ {
				for j := 0; j < klxVC(q, r); j++ {
					v = append(v, klxA2A(q, r, j))
				}
			}
			check(r, "a2av/"+dt.String(), klxEncode(dt, len(v), func(i int) float64 { return v[i] }))
			if r == 0 {
				check(r, "ga/"+dt.String(), klxEncode(dt, n*cnt, func(i int) float64 { return klxA2A(i/cnt, 0, i%cnt) }))
			}
			check(r, "sc/"+dt.String(), klxEncode(dt, cnt, func(i int) float64 { return klxA2A(n-1, r, i) }))
			prev := (r + n - 1) % n
			check(r, "ring/"+dt.String(), klxEncode(dt, cnt, func(i int) float64 { return klxA2A(prev, r, i) }))
		}
	}
	return bad
}

// Worker side of TestKunlunxinEmulatedRanks: the test binary re-executed
// with KLX_WORKER_* set runs one rank and writes what it got as JSON.
func TestKunlunxinRankWorker(t *testing.T) {
	rank, n, id, outFile, err := workerRank(klxEnvPrefix)
	if outFile == "" {
		t.Skip("a rank of TestKunlunxinEmulatedRanks, run in its own process")
	}
	require.NoError(t, err)
	p, err := Open(os.Getenv("KLX_WORKER_PLUGIN"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: os.Getenv("KLX_WORKER_SIM")}))
	require.True(t, p.Emulated())
	out, err := klxScenario(p, rank, rank, n, id, sdk.AllDataTypes())
	require.NoError(t, err)
	data, err := json.Marshal(out)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(outFile, data, 0o600))
}

// klxEnvPrefix is rankEnv's prefix for TestKunlunxinRankWorker.
const klxEnvPrefix = "KLX_WORKER"

// TestKunlunxinEmulatedRanks: Init with Emulated, then 2 and 3 processes
// join one communicator and run every collective for every data type; the
// results are exact, and what BKCL cannot do is "not supported".
func TestKunlunxinEmulatedRanks(t *testing.T) {
	sim := builtVendorsim(t, "kunlunxin", "libxpurt.so.1", "libbkcl.so", "cxx/libbkcl.so")
	plugin := builtPlugin(t, "kunlunxin")
	p, err := Open(plugin)
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
	require.True(t, p.Emulated())
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			id, err := p.UniqueID()
			require.NoError(t, err)
			runs, errs := runRankWorkers[klxOut](t, klxEnvPrefix, n, id,
				[]string{"-test.run=^TestKunlunxinRankWorker$", "-test.count=1"},
				"KLX_WORKER_PLUGIN="+plugin, "KLX_WORKER_SIM="+sim,
				"FLAGCX_VENDORSIM_SLOT_BYTES=256", // many chunk rounds
				"FLAGCX_VENDORSIM_MAILBOX_BYTES=4096",
				"FLAGCX_VENDORSIM_TIMEOUT=30")
			require.NoError(t, errors.Join(errs...))
			require.Empty(t, klxMismatches(n, runs, sdk.AllDataTypes()))
			require.Contains(t, runs[0].Errors["ag/uint64"], "data type uint64 is not supported by kunlunxin's collective library")
			require.Contains(t, runs[0].Errors["ar/float32/avg"], "reduction op avg is not supported")
		})
	}
}

// klxGoroutineRanks runs klxScenario for n ranks as goroutines of this
// process (the emulator serves several ranks per process as well).
func klxGoroutineRanks(t *testing.T, p *Plugin, n int, dts []sdk.DataType) []klxOut {
	t.Helper()
	id, err := p.UniqueID()
	require.NoError(t, err)
	runs := make([]klxOut, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			runs[r], errs[r] = klxScenario(p, r, r, n, id, dts)
		}(r)
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return runs
}

// TestKunlunxinEmulatedCxxNames: the plugin on the emulated BKCL that
// exports only C++-mangled names (build/vendorsim/kunlunxin/cxx).
func TestKunlunxinEmulatedCxxNames(t *testing.T) {
	sim := builtVendorsim(t, "kunlunxin", "libxpurt.so.1", "libbkcl.so", "cxx/libbkcl.so")
	t.Setenv("FLAGCX_KUNLUNXIN_XPURT", filepath.Join(sim, "kunlunxin", "libxpurt.so.1"))
	t.Setenv("FLAGCX_KUNLUNXIN_BKCL", filepath.Join(sim, "kunlunxin", "cxx", "libbkcl.so"))
	p, err := Open(builtPlugin(t, "kunlunxin"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{}))
	require.True(t, p.Emulated(), "the marker is reported even when emulation was not requested")
	require.Equal(t, "C++ symbols", p.Info().Libraries[1].Version)
	dts := []sdk.DataType{sdk.Float32, sdk.Int8, sdk.Bfloat16}
	require.Empty(t, klxMismatches(2, klxGoroutineRanks(t, p, 2, dts), dts))
}

// TestKunlunxinEmulatorDisagreementIsCaught: the plugin's BKCL table and
// the emulator's model are independent; an emulator built with a model
// that disagrees (float<->int32, add<->max swapped) makes the exact checks
// above fail instead of passing silently.
func TestKunlunxinEmulatorDisagreementIsCaught(t *testing.T) {
	sim := builtVendorsim(t, "kunlunxin", "libxpurt.so.1", "libbkcl.so", "cxx/libbkcl.so")
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
	dts := []sdk.DataType{sdk.Float32, sdk.Int32}
	bad := strings.Join(klxMismatches(2, klxGoroutineRanks(t, p, 2, dts), dts), "\n")
	require.Contains(t, bad, "rank 0 ar/float32/sum:", "float32 summed as int32 by the disagreeing model")
	require.Contains(t, bad, "rank 1 ar/int32/max:", "max computed as add by the disagreeing model")
	require.NotContains(t, bad, "ag/float32", "data movement does not depend on the type's number")
}
