package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

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
