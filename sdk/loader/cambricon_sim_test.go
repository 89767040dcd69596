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

// The cambricon plugin on the make-built emulators (build/vendorsim/cambricon):
// the loader-level path the bench takes (Init with Emulated, CommInitRank in
// 2 and 3 processes, every collective and data type checked exactly), and
// mutants of the plugin's source that must fail there.
//
// A rank is this test binary re-executed with FLAGCX_CAMBRICON_TEST_WORKER
// set: init() below runs it before any test and exits.

const (
	cnEnvWorker = "FLAGCX_CAMBRICON_TEST_WORKER" // the plugin file to load
	cnEnvSim    = "FLAGCX_CAMBRICON_TEST_SIM"
	cnEnvPrefix = "FLAGCX_CAMBRICON_TEST" // rankEnv's
)

func init() {
	if plugin := os.Getenv(cnEnvWorker); plugin != "" {
		os.Exit(cambriconWorkerMain(plugin))
	}
}

// cnReport is what a rank found.
type cnReport struct {
	Checks   int      `json:"checks"`
	Failures []string `json:"failures"`
	Emulated bool     `json:"emulated"`
	Fatal    string   `json:"fatal"`
}

func cambriconWorkerMain(plugin string) int {
	rank, nranks, id, out, err := workerRank(cnEnvPrefix)
	var rep cnReport
	if err == nil {
		var p *Plugin
		if p, err = Open(plugin); err == nil {
			if err = p.Init(InitOptions{Emulated: true, VendorsimDir: os.Getenv(cnEnvSim)}); err == nil {
				rep.Emulated = p.Emulated()
				r := &cnRank{p: p, rank: rank, nranks: nranks}
				err = r.run(id, true)
				rep.Checks, rep.Failures = r.checks, r.failures
			}
		}
	}
	if err != nil {
		rep.Fatal = err.Error()
	}
	data, _ := json.Marshal(&rep)
	if err := os.WriteFile(out, data, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "cambricon worker:", err)
		return 2
	}
	return 0
}

// TestCambriconVendorsimRanks runs 2 and 3 ranks, each its own process, on
// the emulated CNRT and CNCL through the loader, and checks every result.
func TestCambriconVendorsimRanks(t *testing.T) {
	sim := builtVendorsim(t, "cambricon", "libcncl.so")
	plugin := builtPlugin(t, "cambricon")
	p, err := Open(plugin)
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
	require.True(t, p.Emulated())
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			id, err := p.UniqueID()
			require.NoError(t, err)
			// -test.run=^$: init() runs the rank, no test body runs
			reports, errs := runRankWorkers[cnReport](t, cnEnvPrefix, n, id, []string{"-test.run=^$"},
				cnEnvWorker+"="+plugin, cnEnvSim+"="+sim,
				"FLAGCX_VENDORSIM_TIMEOUT=30", "FLAGCX_VENDORSIM_SLOT_BYTES=256") // small slots: many chunk rounds
			for r := range n {
				require.NoError(t, errs[r])
				rep := reports[r]
				require.Empty(t, rep.Fatal, "rank %d", r)
				require.True(t, rep.Emulated, "rank %d must say it ran on emulators", r)
				require.Empty(t, rep.Failures, "rank %d: wrong results", r)
				require.Greater(t, rep.Checks, 150, "rank %d checked too little", r)
				t.Logf("rank %d: %d exact checks passed on emulated CNRT/CNCL", r, rep.Checks)
			}
		})
	}
}

// TestCambriconMutantsFailOnTheEmulator proves that the emulator catches
// the mistakes a CNCL/CNRT shim can make: each mutant is the plugin's own
// source with one mapping broken, built and run (2 ranks on goroutines)
// through the same exact checks that the real plugin passes.
func TestCambriconMutantsFailOnTheEmulator(t *testing.T) {
	sim := builtVendorsim(t, "cambricon", "libcncl.so")
	srcBytes, err := os.ReadFile(filepath.Join(repoRoot(t), "plugins", "cambricon", "cambricon.c"))
	require.NoError(t, err)
	src := string(srcBytes)
	run := func(t *testing.T, plugin string) error {
		p, err := Open(plugin)
		require.NoError(t, err)
		require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
		return cambriconTwoRanks(p)
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

// cambriconTwoRanks runs the exact checks with two ranks on goroutines of
// this process (the emulated CNCL works across threads too).
func cambriconTwoRanks(p *Plugin) error {
	id, err := p.UniqueID()
	if err != nil {
		return err
	}
	ranks := []*cnRank{{p: p, rank: 0, nranks: 2}, {p: p, rank: 1, nranks: 2}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.run(id, false)
			if errs[i] == nil && len(r.failures) > 0 {
				errs[i] = fmt.Errorf("rank %d: %d wrong results, first: %s", i, len(r.failures), r.failures[0])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ---- one rank's checks ------------------------------------------------------

const cnCount = 37

type cnRank struct {
	p            *Plugin
	c            *Comm
	s            Stream
	rank, nranks int
	checks       int
	failures     []string
}

var cnTypes = []sdk.DataType{sdk.Int8, sdk.Uint8, sdk.Int32, sdk.Uint32, sdk.Int64, sdk.Uint64, sdk.Float16, sdk.Float32, sdk.Bfloat16}
var cnOps = []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min}

// cnValue is rank r's element i for reductions: 1..5, negated now and then
// for signed types, so sums, products of 3 ranks, max and min are exact in
// every type (int8 included).
func cnValue(dt sdk.DataType, r, i int) float64 {
	v := float64((i+2*r)%5 + 1)
	if (dt == sdk.Int8 || dt == sdk.Int32 || dt == sdk.Int64 || dt.IsFloat()) && (i+r)%3 == 0 {
		v = -v
	}
	return v
}

// cnMove is what rank src sends to dst at element j (< 128 for 3 ranks).
func cnMove(src, dst, j int) float64 { return float64(src*40 + dst*12 + j%12) }

func cnReduce(op sdk.RedOp, vals []float64) float64 {
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

func cnF16(v float64) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	frac, exp := math.Frexp(v)
	return sign | uint16(exp-1+15)<<10 | uint16((frac*2-1)*1024)
}

// cnEncode lays n values out as dt (little endian).
func cnEncode(dt sdk.DataType, n int, f func(i int) float64) []byte {
	le := binary.LittleEndian
	out := make([]byte, 0, n*dt.Size())
	for i := range n {
		v := f(i)
		switch dt {
		case sdk.Int8, sdk.Uint8:
			out = append(out, byte(int64(v)))
		case sdk.Int32, sdk.Uint32:
			out = le.AppendUint32(out, uint32(int64(v)))
		case sdk.Int64, sdk.Uint64:
			out = le.AppendUint64(out, uint64(int64(v)))
		case sdk.Float16:
			out = le.AppendUint16(out, cnF16(v))
		case sdk.Float32:
			out = le.AppendUint32(out, math.Float32bits(float32(v)))
		case sdk.Float64:
			out = le.AppendUint64(out, math.Float64bits(v))
		case sdk.Bfloat16:
			out = le.AppendUint16(out, uint16(math.Float32bits(float32(v))>>16))
		}
	}
	return out
}

// upload makes device memory holding data (plus room to n bytes).
func (r *cnRank) upload(data []byte, n int) (uintptr, error) {
	ptr, err := r.p.DeviceMalloc(r.rank, max(n, len(data), 1))
	if err == nil {
		err = r.p.CopyToDevice(ptr, data)
	}
	return ptr, err
}

// expect compares n bytes of device memory at ptr with want.
func (r *cnRank) expect(what string, ptr uintptr, want []byte) error {
	got := make([]byte, len(want))
	if err := r.p.CopyFromDevice(got, ptr); err != nil {
		return err
	}
	r.checks++
	if string(got) != string(want) {
		r.failures = append(r.failures, fmt.Sprintf("rank %d: %s: got % x, want % x", r.rank, what, got, want))
	}
	return nil
}

// coll uploads send, runs op into a fresh recv buffer of recvBytes and
// compares it with want (nil: no check on this rank).
func (r *cnRank) coll(what string, send []byte, recvBytes int, want []byte, op func(send, recv uintptr) error) error {
	sp, err := r.upload(send, 0)
	if err != nil {
		return err
	}
	defer r.p.DeviceFree(sp)
	rp, err := r.p.DeviceMalloc(r.rank, max(recvBytes, 1))
	if err != nil {
		return err
	}
	defer r.p.DeviceFree(rp)
	if err := op(sp, rp); err != nil {
		return fmt.Errorf("rank %d: %s: %w", r.rank, what, err)
	}
	if err := r.p.StreamSynchronize(r.s); err != nil {
		return err
	}
	if want == nil {
		return nil
	}
	return r.expect(what, rp, want)
}

// run checks device memory and streams, then joins the communicator and
// checks every collective. all=false is the short version for mutants.
func (r *cnRank) run(id []byte, all bool) error {
	p, me, n := r.p, r.rank, r.nranks
	var err error
	if r.s, err = p.StreamCreate(me); err != nil {
		return err
	}
	defer p.StreamDestroy(r.s)
	if err := r.runtime(); err != nil {
		return err
	}
	if r.c, err = p.CommInitRank(me, n, id, me); err != nil {
		return err
	}
	defer r.c.Destroy()
	types, ops := cnTypes, cnOps
	if !all {
		types = []sdk.DataType{sdk.Int8, sdk.Float32}
	}
	for _, dt := range types {
		for _, op := range ops {
			in := cnEncode(dt, cnCount, func(i int) float64 { return cnValue(dt, me, i) })
			want := cnEncode(dt, cnCount, func(i int) float64 {
				vals := make([]float64, n)
				for q := range vals {
					vals[q] = cnValue(dt, q, i)
				}
				return cnReduce(op, vals)
			})
			if err := r.coll(fmt.Sprintf("allreduce %s %s", dt, op), in, len(in), want, func(s, d uintptr) error {
				return r.c.AllReduce(s, d, cnCount, dt, op, r.s)
			}); err != nil {
				return err
			}
			if !all {
				continue
			}
			rin := cnEncode(dt, n*cnCount, func(i int) float64 { return cnValue(dt, me, i) })
			rwant := cnEncode(dt, cnCount, func(j int) float64 {
				vals := make([]float64, n)
				for q := range vals {
					vals[q] = cnValue(dt, q, me*cnCount+j)
				}
				return cnReduce(op, vals)
			})
			if err := r.coll(fmt.Sprintf("reducescatter %s %s", dt, op), rin, len(rwant), rwant, func(s, d uintptr) error {
				return r.c.ReduceScatter(s, d, cnCount, dt, op, r.s)
			}); err != nil {
				return err
			}
		}
		if !all {
			continue
		}
		mine := cnEncode(dt, cnCount, func(j int) float64 { return cnMove(me, 0, j) })
		gathered := cnEncode(dt, n*cnCount, func(i int) float64 { return cnMove(i/cnCount, 0, i%cnCount) })
		for root := range n {
			in := cnEncode(dt, cnCount, func(i int) float64 { return cnValue(dt, me, i) })
			var want []byte
			if me == root {
				want = cnEncode(dt, cnCount, func(i int) float64 {
					vals := make([]float64, n)
					for q := range vals {
						vals[q] = cnValue(dt, q, i)
					}
					return cnReduce(sdk.Sum, vals)
				})
			}
			if err := r.coll(fmt.Sprintf("reduce %s root %d", dt, root), in, len(in), want, func(s, d uintptr) error {
				return r.c.Reduce(s, d, cnCount, dt, sdk.Sum, root, r.s)
			}); err != nil {
				return err
			}
			bc := cnEncode(dt, cnCount, func(j int) float64 { return cnMove(root, 0, j) })
			if err := r.coll(fmt.Sprintf("broadcast %s root %d", dt, root), bc, len(bc), bc, func(s, d uintptr) error {
				return r.c.Broadcast(s, d, cnCount, dt, root, r.s)
			}); err != nil {
				return err
			}
			want = nil
			if me == root {
				want = gathered
			}
			if err := r.coll(fmt.Sprintf("gather %s root %d", dt, root), mine, len(gathered), want, func(s, d uintptr) error {
				return r.c.Gather(s, d, cnCount, dt, root, r.s)
			}); err != nil {
				return err
			}
			sc := cnEncode(dt, n*cnCount, func(i int) float64 { return cnMove(root, i/cnCount, i%cnCount) })
			scWant := cnEncode(dt, cnCount, func(j int) float64 { return cnMove(root, me, j) })
			if err := r.coll(fmt.Sprintf("scatter %s root %d", dt, root), sc, len(scWant), scWant, func(s, d uintptr) error {
				return r.c.Scatter(s, d, cnCount, dt, root, r.s)
			}); err != nil {
				return err
			}
		}
		if err := r.coll("allgather "+dt.String(), mine, len(gathered), gathered, func(s, d uintptr) error {
			return r.c.AllGather(s, d, cnCount, dt, r.s)
		}); err != nil {
			return err
		}
		a2a := cnEncode(dt, n*cnCount, func(i int) float64 { return cnMove(me, i/cnCount, i%cnCount) })
		a2aWant := cnEncode(dt, n*cnCount, func(i int) float64 { return cnMove(i/cnCount, me, i%cnCount) })
		if err := r.coll("alltoall "+dt.String(), a2a, len(a2aWant), a2aWant, func(s, d uintptr) error {
			return r.c.AlltoAll(s, d, cnCount, dt, r.s)
		}); err != nil {
			return err
		}
		// alltoallv: rank a sends (a+b)%3+1 elements to rank b
		cnt := func(a, b int) int { return (a+b)%3 + 1 }
		sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		var vin, vwant []byte
		for q := range n {
			sc[q], rc[q] = cnt(me, q), cnt(q, me)
			if q > 0 {
				sd[q], rd[q] = sd[q-1]+sc[q-1], rd[q-1]+rc[q-1]
			}
			vin = append(vin, cnEncode(dt, sc[q], func(j int) float64 { return cnMove(me, q, j) })...)
			vwant = append(vwant, cnEncode(dt, rc[q], func(j int) float64 { return cnMove(q, me, j) })...)
		}
		if err := r.coll("alltoallv "+dt.String(), vin, len(vwant), vwant, func(s, d uintptr) error {
			return r.c.AlltoAllv(s, sc, sd, d, rc, rd, dt, r.s)
		}); err != nil {
			return err
		}
		next, prev := (me+1)%n, (me+n-1)%n
		ring := cnEncode(dt, cnCount, func(j int) float64 { return cnMove(me, next, j) })
		ringWant := cnEncode(dt, cnCount, func(j int) float64 { return cnMove(prev, me, j) })
		if err := r.coll("send/recv ring "+dt.String(), ring, len(ringWant), ringWant, func(s, d uintptr) error {
			if err := p.GroupStart(); err != nil {
				return err
			}
			err := errors.Join(r.c.Send(s, cnCount, dt, next, r.s), r.c.Recv(d, cnCount, dt, prev, r.s))
			return errors.Join(err, p.GroupEnd())
		}); err != nil {
			return err
		}
	}
	if all { // what CNCL cannot do is "not supported", never a wrong answer
		buf, err := p.DeviceMalloc(me, 64)
		if err != nil {
			return err
		}
		defer p.DeviceFree(buf)
		for _, e := range []error{r.c.AllReduce(buf, buf, 4, sdk.Float64, sdk.Sum, r.s), r.c.AllReduce(buf, buf, 4, sdk.Float32, sdk.Avg, r.s)} {
			r.checks++
			if !errors.Is(e, sdk.ErrNotSupported) {
				r.failures = append(r.failures, fmt.Sprintf("rank %d: float64/avg: got %v, want not supported", me, e))
			}
		}
	}
	return nil
}

// runtime checks copies in every direction (sync and on the queue, through
// pinned memory), memset, and notifiers.
func (r *cnRank) runtime() error {
	p, me := r.p, r.rank
	data := []byte(fmt.Sprintf("rank %d says hello through CNRT", me))
	n := len(data)
	a, err := r.upload(data, n)
	if err != nil {
		return err
	}
	defer p.DeviceFree(a)
	b, err := p.DeviceMalloc(me, n)
	if err != nil {
		return err
	}
	defer p.DeviceFree(b)
	h, err := p.HostMalloc(n)
	if err != nil {
		return err
	}
	defer p.HostFree(h)
	e0, err := p.EventCreate(me)
	if err != nil {
		return err
	}
	defer p.EventDestroy(e0)
	e1, err := p.EventCreate(me)
	if err != nil {
		return err
	}
	defer p.EventDestroy(e1)
	if err := p.EventRecord(e0, r.s); err != nil {
		return err
	}
	if err := p.Memcpy(b, a, n, DeviceToDevice, r.s); err != nil {
		return err
	}
	if err := p.Memcpy(h, b, n, DeviceToHost, r.s); err != nil {
		return err
	}
	if err := p.EventRecord(e1, r.s); err != nil {
		return err
	}
	if err := p.StreamWaitEvent(r.s, e1); err != nil {
		return err
	}
	if err := p.EventSynchronize(e1); err != nil {
		return err
	}
	if d, err := p.EventElapsed(e0, e1); err != nil || d < 0 {
		return fmt.Errorf("event timing: %v, %v", d, err)
	}
	r.checks++
	if got := string(HostSlice(h, n)); got != string(data) {
		r.failures = append(r.failures, fmt.Sprintf("rank %d: D2D+D2H on the queue: got %q", me, got))
	}
	copy(HostSlice(h, n), make([]byte, n))
	if err := p.Memcpy(b, h, n, HostToDevice, r.s); err != nil {
		return err
	}
	if err := p.Memset(a, 0x5a, 4, 0); err != nil {
		return err
	}
	if err := p.StreamSynchronize(r.s); err != nil {
		return err
	}
	if err := r.expect("H2D on the queue", b, make([]byte, n)); err != nil {
		return err
	}
	return r.expect("memset", a, append([]byte{0x5a, 0x5a, 0x5a, 0x5a}, data[4:]...))
}
