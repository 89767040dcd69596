// Package bench is `flagcx bench`: nccl-tests' performance and correctness
// benchmark of one collective (or all of them) over a communicator, with
// results checked against conformance/reference.
package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/launch"
	"github.com/flagcx/flagcx-go/sdk"
)

// Env is what a benchmark takes from its process.
type Env struct {
	// Args are the program's arguments after its name: the local launcher
	// starts its ranks with them.
	Args    []string
	Lookup  func(string) (string, bool)
	Environ []string
	Stdout  io.Writer
	Stderr  io.Writer
	// StderrTTY enables the progress line.
	StderrTTY bool
	// Probe starts a probe process (flagcx: plugins --probe), in which the
	// plugins a run will load are loaded first (probe.go); nil loads them
	// in-process only.
	Probe []string
}

// ProcessEnv is this process's Env.
func ProcessEnv() Env {
	return Env{
		Args: os.Args[1:], Lookup: os.LookupEnv, Environ: os.Environ(),
		Stdout: os.Stdout, Stderr: os.Stderr, StderrTTY: isTerminal(os.Stderr),
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// WrongError reports results that differ from the reference.
type WrongError struct {
	Results, Checked int   // results (out-of-place or in-place rows) with wrong elements, of those checked
	Elements         int64 // wrong elements in all
}

func (e *WrongError) Error() string {
	return fmt.Sprintf("%d of %d checked results were wrong (%d wrong elements in all): the collectives returned data that differs from the exact reference",
		e.Results, e.Checked, e.Elements)
}

// Run runs the benchmark as this process's part of the job: it starts the
// ranks itself for --np, joins the job of an external launcher, or runs a
// single rank. Only rank 0 writes results; only rank 0 reports wrong
// results as an error (a *WrongError).
func Run(f *Flags, e Env) error {
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	job, launched, err := launch.FromEnv(e.Lookup)
	if err != nil {
		return err
	}
	if cfg.NP > 0 {
		switch {
		case !launched:
			return startRanks(cfg, e)
		case job.Launcher != "flagcx" || job.NRanks != cfg.NP:
			return fmt.Errorf("--np %d starts ranks itself, but %s already started this process as rank %d of %d: drop --np", cfg.NP, job.Launcher, job.Rank, job.NRanks)
		}
	}
	rank, nranks, local := 0, 1, 1
	if launched {
		rank, nranks = job.Rank, job.NRanks
		if job.LocalSize > 0 {
			local = job.LocalSize
		}
	}
	if err := cfg.CheckRanks(nranks); err != nil {
		return err
	}
	if err := checkMemory(cfg.MaxBytes, cfg.Check, local); err != nil {
		return err
	}
	if err := probeOwnBackend(cfg, e); err != nil {
		return err
	}
	comm, be, err := join(cfg, e, job, launched, nranks, rank)
	if err != nil {
		return err
	}
	launcher := "none"
	if launched {
		launcher = job.Launcher
	}
	for {
		r := newRankRun(cfg, comm, be, io.Discard)
		r.launcher = launcher
		if r.rank == 0 {
			r.showOn(e)
		}
		err := runRank(e, comm, be, r)
		if !revokedToShrink(cfg, err) {
			return err
		}
		var re *core.RevokedError
		errors.As(err, &re)
		if comm, be, err = shrink(cfg, e, comm, be, re); err != nil {
			return err
		}
	}
}

// revokedToShrink: err is a lost rank's revoke, and --on-failure shrink
// asks to go on without it. A revoke that lost no rank (a deadline that
// the ranks' own queued work overran, every rank still answering) is not
// one: a communicator of the same ranks would meet the same deadline, and
// the run would start again for ever.
func revokedToShrink(cfg *Config, err error) bool {
	var re *core.RevokedError
	return cfg.Shrink && errors.As(err, &re) && len(re.Failed) > 0
}

// shrink is --on-failure shrink after a rank was lost: the survivors make
// a communicator of themselves (core.Comm.Shrink) and the old one goes;
// the new rank 0 says what failed and how many ranks go on.
func shrink(cfg *Config, e Env, comm communicator, be backend, re *core.RevokedError) (communicator, backend, error) {
	old := comm.Comm.(*core.Comm) // runRank returns a *core.RevokedError only from one
	hc, err := old.Shrink(re.Failed)
	be.close()
	_ = comm.abort()
	if err != nil {
		return communicator{}, nil, fmt.Errorf("--on-failure shrink: %w (after: %w)", err, re)
	}
	if cfg.Placement != nil {
		var kept Placement
		for r, p := range cfg.Placement {
			if !slices.Contains(re.Failed, r) {
				kept = append(kept, p)
			}
		}
		cfg.Placement = kept
	}
	if cfg.Root >= hc.Count() {
		cfg.Root = 0
	}
	if hc.Rank() == 0 {
		fmt.Fprintf(e.Stdout, "# %v\n# --on-failure shrink: the run goes on with %d of %d ranks, without %s\n",
			re, hc.Count(), old.Count(), sched.FormatRanks(re.Failed))
	}
	return wrapComm(cfg, old.Backend(), hc)
}

// startRanks is --np without a launcher: it checks what every rank would
// refuse (once, before any starts), then starts the ranks on this machine.
func startRanks(cfg *Config, e Env) error {
	if err := cfg.CheckRanks(cfg.NP); err != nil {
		return err
	}
	if err := checkSplitList(e.Lookup, cfg.Placement, cfg.NP); err != nil {
		return err
	}
	if err := preflight(cfg, e.Lookup); err != nil {
		return err
	}
	if err := launchChecks(cfg, e); err != nil {
		return err
	}
	if err := checkMemory(cfg.MaxBytes, cfg.Check, cfg.NP); err != nil {
		return err
	}
	if cfg.JSON != "" {
		if err := touch(cfg.JSON); err != nil {
			return err
		}
	}
	opts := []launch.LocalOption{launch.RankBytes(hostBytesPerRank(cfg.MaxBytes, cfg.Check))}
	if cfg.Shrink {
		opts = append(opts, launch.KeepGoing())
	}
	return launch.Local(cfg.NP, e.Args, e.Environ, e.Stdout, e.Stderr, opts...)
}

// join finds the unique id (the launcher's job's, or a new one for a
// single rank) and joins this rank to the communicator on its backend.
func join(cfg *Config, e Env, job launch.Job, launched bool, nranks, rank int) (communicator, backend, error) {
	var id core.UniqueID
	var err error
	if launched {
		id, err = job.ID()
	} else {
		id, err = core.GetUniqueID()
	}
	if err != nil {
		return communicator{}, nil, err
	}
	cfg.Hetero = cfg.hetero(e.Lookup)
	hostnet.UseEmulatedNet(cfg.Emulated) // --emulated: the network plugin runs on the emulated verbs
	comm, be, err := joinBackend(cfg, job, launched, id, nranks, rank)
	job.Joined()
	if err != nil {
		err = fmt.Errorf("rank %d of %d could not join the communicator: %w", rank, nranks, err)
		reportStuck(e, err)
		return communicator{}, nil, err
	}
	return comm, be, nil
}

// showOn sends rank 0's results to e's stdout, and its progress to e's
// stderr: a line redrawn in place when that is a terminal (or
// FLAGCX_PROGRESS_TTY says the local launcher's is), else a line per step.
func (r *rankRun) showOn(e Env) {
	r.out = e.Stdout
	tty := e.StderrTTY
	if on, _ := env.ProgressTTY.Get(e.Lookup); on {
		tty = true
	}
	r.prog = &progress{w: e.Stderr, total: r.cfg.steps(), lines: !tty}
}

// runRank runs the benchmark r on comm and be, then tears them down.
func runRank(e Env, comm communicator, be backend, r *rankRun) error {
	runErr := comm.run(r.run)
	if revokedToShrink(r.cfg, runErr) {
		return runErr // the caller shrinks before the old communicator goes
	}
	if reportStuck(e, runErr) {
		// The watchdog aborted the communicator, and a plugin call may
		// still be inside the plugin, holding what the cleanup would call
		// into: leave the rest to this process's exit.
		return runErr
	}
	defer be.close()
	if runErr != nil {
		_ = comm.abort()
		return runErr
	}
	if err := comm.destroy(); err != nil {
		err = fmt.Errorf("destroying the communicator: %w", err)
		reportStuck(e, err)
		return err
	}
	return r.verdict()
}

// reportStuck reports err to the local launcher when a plugin call timed
// out in it (this process may then be unable to exit: see
// core.Watchdog), and says whether it did.
func reportStuck(e Env, err error) bool {
	var te *core.TimeoutError
	if !errors.As(err, &te) {
		return false
	}
	launch.ReportFatal(e.Lookup, e.Stderr, err)
	return true
}

// checkSplitList refuses, before any rank starts, a
// FLAGCX_CLUSTER_SPLIT_LIST that cannot fit the ranks this run starts
// (the ranks would all refuse it, each with the same error).
func checkSplitList(lookup func(string) (string, bool), placement Placement, np int) error {
	v, ok := env.ClusterSplitList.Raw(lookup)
	if !ok {
		return nil
	}
	split, err := sched.ParseSplitList(v)
	if err != nil {
		return err
	}
	members := make([]sched.Member, np)
	for r := range members {
		vendor := HostBackendName
		if placement != nil {
			vendor = placement[r]
		}
		members[r] = sched.Member{Rank: r, Vendor: vendor}
	}
	if _, err := sched.NewLayout(members, split); err != nil {
		return err
	}
	return nil
}

// communicator is the rank's core.Comm as the run uses it beside the
// backend, and what Run tears down at the end. guard, when set,
// runs the benchmark so that a plugin call stuck for good strands only the
// benchmark's goroutine (core.Comm.Guard).
type communicator struct {
	Comm
	destroy, abort func() error
	guard          func(func() error) error
}

func (c communicator) run(fn func() error) error {
	if c.guard == nil {
		return fn()
	}
	return c.guard(fn)
}

// joinBackend joins this rank to the communicator on its backend: the host
// backend, or the device of a plugin that this rank's place (or local rank)
// picks.
func joinBackend(cfg *Config, job launch.Job, launched bool, id core.UniqueID, nranks, rank int) (communicator, backend, error) {
	name, dev := cfg.Backend, rank
	switch {
	case cfg.Placement != nil:
		name, dev = cfg.Placement[rank], cfg.Placement.localIndex(rank)
	case launched && job.LocalRank >= 0:
		dev = job.LocalRank
	}
	// A host rank runs the communicator's own calls too unless the
	// communicator, once joined, is the host placement: only the layout
	// the ranks agreed on at init says so alike on every rank (a host rank
	// started without --backend cannot tell from its own flags that device
	// ranks of the same job make it heterogeneous).
	be := core.HostBackend()
	if name != HostBackendName {
		// A vendor runtime keeps per-thread state (the current device and
		// context); the first call on a thread that never touched it pays
		// to set it up (about 1.5 ms seen on H200s), and Go moves goroutines
		// between threads. Pinning the rank to one thread for its life keeps
		// that out of the timings. The pin ends with the rank's process; the
		// benchmark itself runs on a goroutine that core.Comm.Guard
		// pins in the same way.
		runtime.LockOSThread()
		p, err := openPlugin(name, cfg.PluginDir, cfg.Emulated)
		if err != nil {
			return communicator{}, nil, err
		}
		if n, err := p.DeviceCount(); err != nil {
			return communicator{}, nil, err
		} else if dev >= n {
			return communicator{}, nil, fmt.Errorf("rank %d needs %s device %d, but the plugin sees %d device(s): start fewer ranks per host", rank, name, dev, n)
		}
		be = core.DeviceBackend(p, dev)
	}
	hc, err := core.InitRank(id, nranks, rank, core.WithBackend(be))
	if err != nil {
		return communicator{}, nil, err
	}
	return wrapComm(cfg, be, hc)
}

// wrapComm is hc, this rank's communicator on be, as the run uses it,
// with the backend that runs the measured collectives.
func wrapComm(cfg *Config, be core.Backend, hc *core.Comm) (communicator, backend, error) {
	if !be.OnDevice() && !cfg.Hetero && hc.IsHomogeneous() {
		// The host placement with no cluster settings: the benchmark
		// times the communicator's calls on host memory from MemAlloc.
		return communicator{hc, hc.Destroy, hc.Abort, nil}, newHostBackend(hc), nil
	}
	hb, err := newHeteroBackend(hc)
	if err != nil {
		_ = hc.Abort()
		return communicator{}, nil, err
	}
	return communicator{hc, hc.Destroy, hc.Abort, hc.Guard}, hb, nil
}

// printPlans writes, on rank 0 with --print-plan, every rank's plan of
// op at the largest size (first data type and op), before its rows.
func (r *rankRun) printPlans(op *opSpec) error {
	if !r.cfg.PrintPlan || r.rank != 0 {
		return nil
	}
	if r.cfg.Format == "flagcx" {
		// FlagCX's format has no header, where the table is otherwise.
		for _, l := range r.linkTable() {
			fmt.Fprintf(r.out, "# %s\n", l)
		}
	}
	h, ok := r.be.(*heteroBackend)
	if !ok {
		fmt.Fprintf(r.out, "# Plans: this run uses a plain host communicator (host collectives directly, no schedule)\n")
		return nil
	}
	root := 0
	if op.coll.Rooted() {
		root = r.cfg.Root
	}
	return h.printPlans(r.out, op, r.cfg.Types[0], r.cfg.redOpsFor(op)[0], root, int(r.cfg.MaxBytes))
}

// linkTable is which link each pair of ranks uses and why, from the
// communicator (every rank knows every rank's links after init).
func (r *rankRun) linkTable() []string {
	c := r.comm
	if w, ok := c.(communicator); ok {
		c = w.Comm
	}
	if lt, ok := c.(interface{ LinkTable() []string }); ok {
		return lt.LinkTable()
	}
	return nil
}

// verdict is how a finished run ends: rank 0 reports wrong results (every
// rank knows them; one report is enough, and a launcher that sees rank 0
// fail reports the job as failed).
func (r *rankRun) verdict() error {
	if r.wrong != nil && r.rank == 0 {
		return r.wrong
	}
	return nil
}

// touch makes sure the JSON file can be written before the run starts.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return f.Close()
}

// newRankRun prepares one rank's benchmark: comm is the host communicator
// (for agreeing on timings and errors), be runs the measured collectives.
func newRankRun(cfg *Config, comm Comm, be backend, out io.Writer) *rankRun {
	return &rankRun{cfg: cfg, comm: comm, rank: comm.Rank(), n: comm.Count(), be: be, out: out}
}

// rankRun is one rank's benchmark.
type rankRun struct {
	cfg      *Config
	comm     Comm
	rank, n  int
	be       backend
	launcher string
	out      io.Writer // rank 0: stdout; others: nowhere
	prog     *progress

	send, recv       Buf
	inputImg, expImg []byte
	scratch          []byte
	shares           [2][]byte // the check's scratch (check.go)
	devices          []device
	results          []Result
	rep              reporter
	wrong            *WrongError
	busSum           float64
	busCount         int
	checked, badRows int
	wrongEls         int64
	done             int
	start            time.Time
}

func (r *rankRun) run() (err error) {
	r.start = time.Now()
	if r.devices, err = r.gatherDevices(); err != nil {
		return err
	}
	bufBytes := int(r.cfg.MaxBytes)
	if r.cfg.OneSided == nil { // put and get make windows of their own
		if r.send, err = r.be.Alloc(bufBytes); err != nil {
			return err
		}
		defer r.send.Free()
		if r.recv, err = r.be.Alloc(bufBytes); err != nil {
			return err
		}
		defer r.recv.Free()
		if r.cfg.Check {
			r.inputImg = make([]byte, bufBytes)
			r.expImg = make([]byte, bufBytes)
		}
	}

	if r.cfg.Format == "flagcx" {
		r.rep = &flagcxReporter{w: r.out, multi: len(r.cfg.Ops)*len(r.cfg.Types)*len(r.cfg.RedOps) > 1}
	} else {
		r.rep = &tableReporter{w: r.out, multi: len(r.cfg.Ops) > 1}
	}
	backend := r.be.describe()
	// The transports of this rank's links; FlagCX's own format has no
	// header to put them in.
	if net := hostnet.NetworkSummary(); net != "" && r.cfg.Format != "flagcx" {
		backend = append(backend, net)
	}
	if r.cfg.Format != "flagcx" {
		backend = append(backend, r.linkTable()...)
	}
	r.rep.header(r.cfg, r.devices, backend)
	defer func() {
		if r.rank == 0 && r.cfg.JSON != "" {
			if jerr := r.writeJSON(err); jerr != nil && err == nil {
				err = jerr
			}
		}
	}()
	if r.cfg.OneSided != nil {
		if err := r.runOneSided(); err != nil {
			return err
		}
	}
	for _, op := range r.cfg.Ops {
		r.prog.clear()
		if err := r.printPlans(op); err != nil {
			return err
		}
		r.rep.section(op.name(), false)
		for _, dt := range r.cfg.Types {
			for _, redop := range r.cfg.redOpsFor(op) {
				for i, size := range r.cfg.Sizes {
					r.prog.show(op.name(), dt, redop, size, r.done)
					res, err := r.bench(op, dt, redop, i, size)
					r.prog.clear()
					if err != nil {
						return err
					}
					r.rep.row(res)
					if r.cfg.Print {
						r.rep.print(res.printed)
					}
					r.done++
				}
			}
		}
	}
	r.prog.clear()
	avg := 0.0
	if r.busCount > 0 {
		avg = r.busSum / float64(r.busCount)
	}
	r.rep.footer(r.badRows, avg)
	if r.badRows > 0 {
		r.wrong = &WrongError{Results: r.badRows, Checked: r.checked, Elements: r.wrongEls}
	}
	return nil
}

// bench runs one size: timing and checking out of place, then in place.
func (r *rankRun) bench(op *opSpec, dt sdk.DataType, redop sdk.RedOp, sizeIdx int, size Size) (*Result, error) {
	ts := dt.Size()
	c := reference.Case{
		Coll: op.coll, Type: dt, Op: redop, NRanks: r.n, Root: r.cfg.Root,
		Count: op.callCount(int(size)/ts, r.n),
	}
	if !op.coll.Rooted() {
		c.Root = 0
	}
	sendN, recvN := c.SendCount()*ts, c.RecvCount()*ts
	so, ro := op.inPlace.Offsets(r.rank, c.Count)
	args := c.Call(r.rank)
	oop := &call{args: args, send: region{r.send, 0, sendN}, recv: region{r.recv, 0, recvN}}
	ip := &call{args: args, send: region{r.recv, so * ts, sendN}, recv: region{r.recv, ro * ts, recvN}}
	seed := uint64(op.coll)<<48 ^ uint64(dt)<<40 ^ uint64(uint8(redop+1))<<32 ^ uint64(sizeIdx)<<8
	res := &Result{
		Collective: op.name(), Datatype: dt.String(), RedOp: "none", Root: -1,
		Size: int64(max(sendN, recvN)), Count: c.Count,
	}
	if op.coll.Reduces() {
		res.RedOp = redop.String()
	}
	if op.coll.Rooted() {
		res.Root = c.Root
	}

	var times [2]float64
	var wrong [2]int64
	var spent sizeTimes
	for phase, inPlace := range []bool{false, true} {
		x, off := oop, 0
		if inPlace {
			x, off = ip, ro*ts
		}
		var err error
		// Inputs for timing, then (with -c) inputs to check.
		c.Seed = seed | uint64(2*phase)
		t0 := time.Now()
		if times[phase], err = r.timeHalf(op, c, x, inPlace); err != nil {
			return nil, err
		}
		spent.coll += time.Since(t0)
		if r.cfg.Check {
			c.Seed = seed | uint64(2*phase+1)
			t0 = time.Now()
			if wrong[phase], err = r.checkHalf(op, c, x, inPlace, off, recvN); err != nil {
				return nil, err
			}
			spent.check += time.Since(t0)
		}
		if !inPlace && r.cfg.Print && r.rank == 0 {
			got, err := view(r.recv, 0, recvN, &r.scratch)
			if err != nil {
				return nil, err
			}
			res.printed = formatElements(dt, got, 10)
		}
	}
	if err := r.agree(op, res, times, wrong); err != nil {
		return nil, err
	}
	r.debugTimes(op, res, spent)
	r.results = append(r.results, *res)
	return res, nil
}

// timeHalf runs x on the inputs of c (out of place or in place) for the
// warmup, then times r.cfg.Iters of it; it returns the seconds per call.
func (r *rankRun) timeHalf(op *opSpec, c reference.Case, x *call, inPlace bool) (float64, error) {
	if err := r.prepare(op, c, inPlace, false); err != nil {
		return 0, err
	}
	// Each half warms up on its own buffers: the in-place half
	// follows host copies that leave the device idle, and its first
	// collectives on new addresses cost once what 20 timed
	// iterations then average in (in place ran 12-25% behind NCCL's
	// in-place figures at 8 MiB when only the out-of-place half
	// warmed up).
	for i := 0; i < r.cfg.Warmup; i++ {
		if err := r.be.issue(x); err != nil {
			return 0, r.collError(op, c, inPlace, err)
		}
	}
	if err := r.be.sync(); err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	if err := r.comm.HostAllGather(nil, nil); err != nil {
		return 0, fmt.Errorf("barrier before timing: %w", err)
	}
	stop, err := r.be.startTimer()
	if err != nil {
		return 0, err
	}
	for i := 0; i < r.cfg.Iters; i++ {
		if err := r.be.issue(x); err != nil {
			return 0, r.collError(op, c, inPlace, err)
		}
		if r.cfg.Blocking {
			if err := r.be.sync(); err != nil {
				return 0, r.collError(op, c, inPlace, err)
			}
		}
	}
	elapsed, err := stop()
	if err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	return elapsed.Seconds() / float64(r.cfg.Iters), nil
}

// checkHalf runs x once on the check inputs of c and counts the elements of
// its result (recvN bytes at off of the receive buffer) that differ from
// the reference (countWrong).
func (r *rankRun) checkHalf(op *opSpec, c reference.Case, x *call, inPlace bool, off, recvN int) (int64, error) {
	if err := r.prepare(op, c, inPlace, true); err != nil {
		return 0, err
	}
	if err := r.be.issue(x); err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	if err := r.be.sync(); err != nil {
		return 0, r.collError(op, c, inPlace, err)
	}
	got, err := view(r.recv, off, recvN, &r.scratch)
	if err != nil {
		return 0, err
	}
	return r.countWrong(c, got, r.expImg[:recvN])
}

// agree fills res's halves with what the ranks agree on (the slowest
// rank's time, every rank's wrong elements) and adds them to the run's
// totals.
func (r *rankRun) agree(op *opSpec, res *Result, times [2]float64, wrong [2]int64) error {
	t, w, err := r.agreeOn(times, wrong)
	if err != nil {
		return err
	}
	for phase, h := range []*Half{&res.OutOfPlace, &res.InPlace} {
		r.tally(h, res.Size, t[phase], op.coll.BusFactor(r.n), w[phase], r.cfg.Check && (phase == 0 || op.inPlaceChecked))
	}
	return nil
}

// tally fills half h of a row of size bytes from the time the ranks agree
// on (seconds) and, when checked, their wrong elements, and adds it to the
// run's totals (the summary's average bus bandwidth and verdict).
func (r *rankRun) tally(h *Half, size int64, secs, busFactor float64, wrong int64, checked bool) {
	h.TimeUS = secs * 1e6
	if secs > 0 {
		h.AlgBW = float64(size) / 1e9 / secs
	}
	h.BusBW = h.AlgBW * busFactor
	if checked {
		n := wrong
		h.Wrong = &n
		r.checked++
		if n != 0 {
			r.badRows++
			r.wrongEls += n
		}
	}
	r.busSum += h.BusBW
	r.busCount++
}

// prepare writes the inputs of one call (and, for a check, the image of
// its receive region before the call into expImg, which countWrong
// completes): zeroed receive buffer, this rank's input in the send
// buffer or at its in-place offset.
func (r *rankRun) prepare(op *opSpec, c reference.Case, inPlace, forCheck bool) error {
	ts := c.Type.Size()
	sendN, recvN := c.SendCount()*ts, c.RecvCount()*ts
	var input []byte
	if forCheck {
		input = r.inputImg[:sendN]
	} else {
		// Timing inputs go straight into the buffer when the host can
		// address it.
		if inPlace {
			if h := r.recv.Host(); h != nil {
				so, _ := op.inPlace.Offsets(r.rank, c.Count)
				input = h[so*ts : so*ts+sendN]
			}
		} else if h := r.send.Host(); h != nil {
			input = h[:sendN]
		}
		if input == nil {
			if cap(r.scratch) < sendN {
				r.scratch = make([]byte, sendN)
			}
			input = r.scratch[:sendN]
		}
	}
	reference.FillInput(c, r.rank, input)
	so, ro := op.inPlace.Offsets(r.rank, c.Count)
	if inPlace {
		// The receive buffer holds both: zero it, put the input in place.
		if forCheck {
			if err := r.recv.Zero(max(so*ts+sendN, ro*ts+recvN)); err != nil {
				return err
			}
		}
		if err := r.recv.Write(so*ts, input); err != nil {
			return err
		}
	} else {
		if err := r.send.Write(0, input); err != nil {
			return err
		}
		if err := r.recv.Zero(recvN); err != nil {
			return err
		}
	}
	if !forCheck {
		return nil
	}
	// The expected image starts as the receive region does: zeros, with
	// the input where an in-place input overlaps it.
	exp := r.expImg[:recvN]
	clear(exp)
	if inPlace {
		lo, hi := max(so, ro)*ts, min(so*ts+sendN, ro*ts+recvN)
		if lo < hi {
			copy(exp[lo-ro*ts:hi-ro*ts], input[lo-so*ts:hi-so*ts])
		}
	}
	return nil
}

func (r *rankRun) collError(op *opSpec, c reference.Case, inPlace bool, err error) error {
	where := "out of place"
	if inPlace {
		where = "in place"
	}
	what := op.name() + " " + c.Type.String()
	if op.coll.Reduces() {
		what += " " + c.Op.String()
	}
	return fmt.Errorf("rank %d: %s %s with count %d failed: %w", r.rank, what, where, c.Count, err)
}

// agreeOn exchanges every rank's timings and wrong-element counts of both
// halves in one exchange of host bytes, and returns the slowest rank's
// times and the counts summed over the ranks.
func (r *rankRun) agreeOn(times [2]float64, wrong [2]int64) ([2]float64, [2]int64, error) {
	const rec = 4 * 8
	send := make([]byte, 0, rec)
	for i := range times {
		send = binary.LittleEndian.AppendUint64(send, math.Float64bits(times[i]))
		send = binary.LittleEndian.AppendUint64(send, uint64(wrong[i]))
	}
	all := make([]byte, rec*r.n)
	if err := r.comm.HostAllGather(send, all); err != nil {
		return times, wrong, fmt.Errorf("rank %d: agreeing on the timings and error counts: %w", r.rank, err)
	}
	var t [2]float64
	var w [2]int64
	for k := 0; k < r.n; k++ {
		b := all[k*rec:]
		for i := range t {
			t[i] = max(t[i], math.Float64frombits(binary.LittleEndian.Uint64(b[16*i:])))
			w[i] += int64(binary.LittleEndian.Uint64(b[16*i+8:]))
		}
	}
	return t, w, nil
}

// device is one rank's line of the "# Using devices" block.
type device struct {
	Rank    int    `json:"rank"`
	Pid     int    `json:"pid"`
	Host    string `json:"host"`
	Backend string `json:"backend"`
}

const (
	deviceRecord = 256
	hostField    = 120
	nameField    = 128
)

// gatherDevices collects every rank's device with one AllGather of a
// fixed-size record: rank, pid, host name, backend.
func (r *rankRun) gatherDevices() ([]device, error) {
	host, _ := os.Hostname()
	rec := make([]byte, deviceRecord)
	binary.LittleEndian.PutUint32(rec[0:], uint32(r.rank))
	binary.LittleEndian.PutUint32(rec[4:], uint32(os.Getpid()))
	copy(rec[8:8+hostField-1], host)
	copy(rec[8+hostField:8+hostField+nameField-1], r.be.Name())
	all := make([]byte, deviceRecord*r.n)
	if err := r.comm.HostAllGather(rec, all); err != nil {
		return nil, fmt.Errorf("rank %d: gathering the ranks' devices: %w", r.rank, err)
	}
	devs := make([]device, r.n)
	for i := range devs {
		b := all[i*deviceRecord:]
		devs[i] = device{
			Rank:    int(binary.LittleEndian.Uint32(b[0:])),
			Pid:     int(binary.LittleEndian.Uint32(b[4:])),
			Host:    cstring(b[8 : 8+hostField]),
			Backend: cstring(b[8+hostField : 8+hostField+nameField]),
		}
	}
	return devs, nil
}

func cstring(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// formatElements renders the first n elements of buf, FlagCX style.
func formatElements(dt sdk.DataType, buf []byte, n int) string {
	sz := dt.Size()
	var parts []string
	for i := 0; i < n && (i+1)*sz <= len(buf); i++ {
		parts = append(parts, reference.Format(dt, buf[i*sz:(i+1)*sz]))
	}
	return strings.Join(parts, " ")
}

// IsWrong reports whether err is a wrong-results error.
func IsWrong(err error) bool {
	var w *WrongError
	return errors.As(err, &w)
}
