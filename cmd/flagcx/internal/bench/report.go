package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/sdk"
)

// Result is one row: one collective, type, reduction and size, timed and
// checked out of place and in place.
type Result struct {
	Collective string `json:"op"`
	Datatype   string `json:"datatype"`
	RedOp      string `json:"redop"`
	Root       int    `json:"root"`
	Size       int64  `json:"size"`  // bytes, as nccl-tests counts them
	Count      int    `json:"count"` // the count argument of the call
	OutOfPlace Half   `json:"out_of_place"`
	InPlace    Half   `json:"in_place"`

	printed string // -p: rank 0's first output elements
}

// Half is the out-of-place or in-place half of a row.
type Half struct {
	TimeUS float64 `json:"time_us"` // the slowest rank's mean time per iteration
	AlgBW  float64 `json:"algbw"`   // GB/s (1e9)
	BusBW  float64 `json:"busbw"`   // GB/s
	// Wrong is the number of wrong elements over all ranks; nil when the
	// result was not checked (-c 0, or in place where undefined).
	Wrong *int64 `json:"wrong"`
}

// reporter writes rank 0's output in one format.
type reporter interface {
	header(cfg *Config, devs []device, backend []string)
	// section starts the rows of one benchmark: a collective, or a
	// one-sided transfer (whose halves are one at a time and in flight).
	section(name string, oneSided bool)
	row(res *Result)
	print(elems string)
	footer(badRows int, avgBusBW float64)
}

// tableReporter writes nccl-tests' table.
type tableReporter struct {
	w     io.Writer
	multi bool // several collectives: name each section
}

func (t *tableReporter) header(cfg *Config, devs []device, backend []string) {
	check := 0
	if cfg.Check {
		check = 1
	}
	fmt.Fprintf(t.w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
		cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor, cfg.Warmup, cfg.Iters, check)
	if cfg.Blocking {
		fmt.Fprintf(t.w, "# blocking: every timed call waits for its stream before the next (-z 1)\n")
	}
	fmt.Fprintf(t.w, "#\n# Using devices\n")
	for _, d := range devs {
		fmt.Fprintf(t.w, "#  Rank %2d Group %2d Pid %6d on %10s backend %s\n", d.Rank, 0, d.Pid, d.Host, d.Backend)
	}
	writeBackend(t.w, backend)
}

// writeBackend prints the backend's description (plugin, libraries, and
// whether they are emulated) as comment lines.
func writeBackend(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(w, "# %s\n", l)
	}
}

func (t *tableReporter) section(name string, oneSided bool) {
	fmt.Fprintf(t.w, "#\n")
	if t.multi {
		fmt.Fprintf(t.w, "# %s\n#\n", name)
	}
	if oneSided {
		fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s           one at a time                      in flight         \n", "", "", "", "", "")
	} else {
		fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	}
	fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

// timeString formats microseconds as nccl-tests does.
func timeString(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

func halfString(h Half) string {
	if h.TimeUS < 0 { // not measured (a Get in flight)
		return fmt.Sprintf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A")
	}
	wrong := "N/A"
	if h.Wrong != nil {
		wrong = fmt.Sprintf("%d", *h.Wrong)
	}
	return fmt.Sprintf("  %7s  %6.2f  %6.2f  %5s", timeString(h.TimeUS), h.AlgBW, h.BusBW, wrong)
}

func (t *tableReporter) row(res *Result) {
	fmt.Fprintf(t.w, "%12d  %12d  %8s  %6s  %6d%s%s\n", res.Size, res.Count, res.Datatype, res.RedOp, res.Root,
		halfString(res.OutOfPlace), halfString(res.InPlace))
}

func (t *tableReporter) print(elems string) {
	fmt.Fprintf(t.w, "# rank 0 recvbuff = %s\n", elems)
}

func (t *tableReporter) footer(badRows int, avg float64) {
	status := "OK"
	if badRows > 0 {
		status = "FAILED"
	}
	fmt.Fprintf(t.w, "# Out of bounds values : %d %s\n", badRows, status)
	fmt.Fprintf(t.w, "# Avg bus bandwidth    : %.6g \n", avg) // C's %g
	fmt.Fprintf(t.w, "#\n")
}

// flagcxReporter writes FlagCX's test programs' line per size.
type flagcxReporter struct {
	w     io.Writer
	multi bool // several (collective, type, reduction): name each
	last  string
}

func (f *flagcxReporter) header(_ *Config, _ []device, backend []string) { writeBackend(f.w, backend) }
func (f *flagcxReporter) section(string, bool)                           {}

func (f *flagcxReporter) row(res *Result) {
	if f.multi {
		name := res.Collective + " " + res.Datatype
		if res.RedOp != "none" {
			name += " " + res.RedOp
		}
		if name != f.last {
			fmt.Fprintf(f.w, "# %s\n", name)
			f.last = name
		}
	}
	sec := res.OutOfPlace.TimeUS / 1e6
	fmt.Fprintf(f.w, "Comm size: %d bytes; Elapsed time: %f sec; Algo bandwidth: %f GB/s; Bus bandwidth: %f GB/s\n",
		res.Size, sec, res.OutOfPlace.AlgBW, res.OutOfPlace.BusBW)
}

func (f *flagcxReporter) print(elems string) {
	fmt.Fprintf(f.w, "rank 0 recvbuff = %s\n", elems)
}

func (f *flagcxReporter) footer(int, float64) {}

// jsonReport is --json's document.
type jsonReport struct {
	FlagcxVersion string  `json:"flagcx_version"`
	GoVersion     string  `json:"go_version"`
	Date          string  `json:"date"`
	ElapsedSec    float64 `json:"elapsed_sec"`
	Launcher      string  `json:"launcher"`
	// Emulated: plugin ranks ran on the emulated vendor runtimes (vendorsim),
	// so the timings say nothing about hardware.
	Emulated      bool      `json:"emulated"`
	NRanks        int       `json:"nranks"`
	Devices       []device  `json:"devices"`
	Params        jsonParam `json:"params"`
	Results       []Result  `json:"results"`
	AvgBusBW      float64   `json:"avg_busbw"`
	WrongResults  int       `json:"wrong_results"`
	WrongElements int64     `json:"wrong_elements"`
	Error         string    `json:"error,omitempty"`
}

type jsonParam struct {
	MinBytes    int64    `json:"minbytes"`
	MaxBytes    int64    `json:"maxbytes"`
	StepFactor  int      `json:"stepfactor"`
	Warmup      int      `json:"warmup_iters"`
	Iters       int      `json:"iters"`
	Check       bool     `json:"check"`
	Blocking    bool     `json:"blocking"`
	Root        int      `json:"root"`
	Collectives []string `json:"collectives"`
	Datatypes   []string `json:"datatypes"`
	RedOps      []string `json:"redops"`
}

func (r *rankRun) writeJSON(runErr error) error {
	doc := jsonReport{
		FlagcxVersion: core.Version,
		GoVersion:     runtime.Version(),
		Date:          r.start.UTC().Format(time.RFC3339),
		ElapsedSec:    time.Since(r.start).Seconds(),
		Launcher:      r.launcher,
		Emulated:      r.cfg.Emulated && r.cfg.usesPlugins(),
		NRanks:        r.n,
		Devices:       r.devices,
		Results:       r.results,
		WrongResults:  r.badRows,
		WrongElements: r.wrongEls,
		Params: jsonParam{
			MinBytes: int64(r.cfg.MinBytes), MaxBytes: int64(r.cfg.MaxBytes), StepFactor: r.cfg.StepFactor,
			Warmup: r.cfg.Warmup, Iters: r.cfg.Iters, Check: r.cfg.Check, Blocking: r.cfg.Blocking, Root: r.cfg.Root,
		},
	}
	if doc.Results == nil {
		doc.Results = []Result{}
	}
	if r.busCount > 0 {
		doc.AvgBusBW = r.busSum / float64(r.busCount)
	}
	for _, o := range r.cfg.Ops {
		doc.Params.Collectives = append(doc.Params.Collectives, o.name())
	}
	if r.cfg.OneSided != nil {
		doc.Params.Collectives = append(doc.Params.Collectives, r.cfg.OneSided.name)
	}
	for _, t := range r.cfg.Types {
		doc.Params.Datatypes = append(doc.Params.Datatypes, t.String())
	}
	for _, o := range r.cfg.RedOps {
		doc.Params.RedOps = append(doc.Params.RedOps, o.String())
	}
	if runErr != nil {
		doc.Error = runErr.Error()
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := os.WriteFile(r.cfg.JSON, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// progress draws one line on stderr while rank 0 works: a segment ending
// in a carriage return, redrawn in place (the local launcher passes such
// segments through without its "rank N: " prefix).
//
// On a stderr that is not a terminal (a log file, a CI job) a line cannot
// be redrawn: lines makes it one line per step instead, so that a long run
// still shows life there.
type progress struct {
	w     io.Writer
	total int
	shown bool
	lines bool
}

// show draws the step about to run.
func (p *progress) show(op string, dt sdk.DataType, redop sdk.RedOp, size Size, done int) {
	if p == nil {
		return
	}
	name := ""
	if redop.Valid() {
		name = redop.String()
	}
	line := progressLine(op, dt.String(), name, size, done, p.total)
	if p.lines {
		fmt.Fprintln(p.w, line)
		return
	}
	fmt.Fprint(p.w, line+"\x1b[K\r")
	p.shown = true
}

func (p *progress) clear() {
	if p == nil || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\x1b[K\r")
	p.shown = false
}

func progressLine(op string, dt, redop string, size Size, done, total int) string {
	pct := 100
	if total > 0 {
		pct = 100 * done / total
	}
	parts := []string{"flagcx bench:", op, dt}
	if redop != "" {
		parts = append(parts, redop)
	}
	parts = append(parts, bytesize.Human(int64(size)), fmt.Sprintf("%3d%%", pct))
	return strings.Join(parts, " ")
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
