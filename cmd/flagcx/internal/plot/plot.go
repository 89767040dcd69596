// Package plot is `flagcx plot`: bus bandwidth and time against message
// size from the JSON files that `flagcx bench --json` writes, as one SVG
// with two panels (bus bandwidth above, time below) and one line per file,
// so that a run can be put beside a baseline.
//
// The SVG is written by hand: a few dozen elements, no dependency.
package plot

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/bench"
)

// Options choose which rows of a file make its line. Empty filters match
// everything; a file must then hold a single (collective, type, reduction).
type Options struct {
	Collective string
	Datatype   string
	RedOp      string
	InPlace    bool // the in-place half of each row instead of the out-of-place one
}

// Point is one message size of a line.
type Point struct {
	Size   int64   // bytes
	BusBW  float64 // GB/s
	TimeUS float64 // microseconds per iteration
}

// Series is one file's line.
type Series struct {
	Label  string // the legend: the file name, or LABEL of LABEL=FILE
	File   string
	Desc   string // "allreduce float32 sum"
	NRanks int
	Points []Point // by size, sizes above 0 (a log axis has no 0)
}

// document is the part of bench's JSON that plot reads.
type document struct {
	NRanks  int             `json:"nranks"`
	Results *[]bench.Result `json:"results"`
}

// SplitArg reads a command-line argument: FILE, or LABEL=FILE. An argument
// that names an existing file is a file even when it holds "=".
func SplitArg(arg string) (label, file string) {
	if _, err := os.Stat(arg); err == nil {
		return arg, arg
	}
	if l, f, ok := strings.Cut(arg, "="); ok && l != "" && f != "" {
		return l, f
	}
	return arg, arg
}

// Load reads one argument's file and picks its line. Every error names the
// file.
func Load(arg string, o Options) (Series, error) {
	label, file := SplitArg(arg)
	s := Series{Label: label, File: file}
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return s, fmt.Errorf("%s: %w: give a file that flagcx bench --json FILE wrote", file, err)
	}
	var doc document
	if err := json.Unmarshal(b, &doc); err != nil {
		return s, fmt.Errorf("%s is not the JSON of flagcx bench --json (%w): give a file that it wrote", file, err)
	}
	if doc.Results == nil {
		return s, fmt.Errorf("%s has no \"results\": it is not the JSON of flagcx bench --json; give a file that it wrote", file)
	}
	s.NRanks = doc.NRanks
	var keys []string
	rows := map[string][]bench.Result{}
	for _, r := range *doc.Results {
		if !match(o.Collective, r.Collective) || !match(o.Datatype, r.Datatype) || !match(o.RedOp, r.RedOp) {
			continue
		}
		k := describe(r)
		if _, ok := rows[k]; !ok {
			keys = append(keys, k)
		}
		rows[k] = append(rows[k], r)
	}
	switch {
	case len(keys) == 0 && len(*doc.Results) == 0:
		return s, fmt.Errorf("%s has no results (the run stopped before its first size): run the benchmark again", file)
	case len(keys) == 0:
		return s, fmt.Errorf("%s has no results for %s (it has: %s): change --collective, --datatype or --redop",
			file, filterString(o), strings.Join(allSeries(*doc.Results), "; "))
	case len(keys) > 1:
		return s, fmt.Errorf("%s holds %d series (%s): choose one with --collective, --datatype and --redop",
			file, len(keys), strings.Join(keys, "; "))
	}
	s.Desc = keys[0]
	for _, r := range rows[keys[0]] {
		if r.Size <= 0 {
			continue
		}
		h := r.OutOfPlace
		if o.InPlace {
			h = r.InPlace
		}
		s.Points = append(s.Points, Point{Size: r.Size, BusBW: h.BusBW, TimeUS: h.TimeUS})
	}
	if len(s.Points) == 0 {
		return s, fmt.Errorf("%s: %s has no size above 0 bytes to plot: run the benchmark with -b 1 or more", file, s.Desc)
	}
	sort.Slice(s.Points, func(i, j int) bool { return s.Points[i].Size < s.Points[j].Size })
	return s, nil
}

func match(want, got string) bool {
	return want == "" || strings.EqualFold(strings.TrimSpace(want), got)
}

// describe names a row's series: "allreduce float32 sum", "broadcast int8".
func describe(r bench.Result) string {
	d := r.Collective + " " + r.Datatype
	if r.RedOp != "" && r.RedOp != "none" {
		d += " " + r.RedOp
	}
	return d
}

func allSeries(rs []bench.Result) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rs {
		if d := describe(r); !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func filterString(o Options) string {
	var parts []string
	for _, p := range [][2]string{{"--collective", o.Collective}, {"--datatype", o.Datatype}, {"--redop", o.RedOp}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	return strings.Join(parts, " ")
}

// Geometry of the drawing, in SVG user units (pixels). The margins hold the
// tick labels and axis titles; the gap between the panels holds the upper
// panel's size labels.
const (
	width      = 860
	panelH     = 280
	left       = 80
	right      = 30
	top        = 50
	gap        = 70
	bottom     = 60
	legendLine = 20
	plotW      = width - left - right
	tickLen    = 5
	maxXTicks  = 12 // more labels than this overlap at this width
	maxYTicks  = 6.0
)

// Line colors, told apart in print and by most color-blind readers; a
// dash pattern tells the lines apart once the colors repeat.
var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteSVG draws the series: bus bandwidth against size above, time (log
// scale) against size below, sizes on a log2 axis, legend underneath.
func WriteSVG(w io.Writer, series []Series, inPlace bool) error {
	if len(series) == 0 {
		return errors.New("nothing to plot: give one or more JSON files from flagcx bench --json")
	}
	minS, maxS := int64(math.MaxInt64), int64(0)
	maxBW, minT, maxT := 0.0, math.Inf(1), 0.0
	for _, s := range series {
		for _, p := range s.Points {
			minS, maxS = min(minS, p.Size), max(maxS, p.Size)
			maxBW = max(maxBW, p.BusBW)
			if p.TimeUS > 0 {
				minT, maxT = min(minT, p.TimeUS), max(maxT, p.TimeUS)
			}
		}
	}
	x := newLog2Axis(minS, maxS)
	bw := newLinearAxis(maxBW)
	tm := newLog10Axis(minT, maxT)

	height := top + 2*panelH + gap + bottom + legendLine*len(series) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	half := "out of place"
	if inPlace {
		half = "in place"
	}
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" text-anchor="middle">%s</text>`+"\n", width/2, esc(title(series)+", "+half))

	panel(&b, "busbw", top, "bus bandwidth (GB/s)", x, bw, series, func(p Point) (float64, bool) { return p.BusBW, true })
	panel(&b, "time", top+panelH+gap, "time (µs, log scale)", x, tm, series, func(p Point) (float64, bool) { return p.TimeUS, p.TimeUS > 0 })

	ly := top + 2*panelH + gap + bottom
	b.WriteString(`<g id="legend">` + "\n")
	for i, s := range series {
		y := ly + i*legendLine
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/>`+"\n", left, y, left+30, y, stroke(i))
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", left+40, y, esc(legend(s, series)))
	}
	b.WriteString("</g>\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// title is what every series shows, or a general one when they differ.
func title(series []Series) string {
	for _, s := range series[1:] {
		if s.Desc != series[0].Desc {
			return "flagcx bench"
		}
	}
	return series[0].Desc
}

// legend is a series' label, with what it shows when the files differ in
// that (the title then cannot say it).
func legend(s Series, all []Series) string {
	if title(all) == "flagcx bench" {
		return s.Label + " (" + s.Desc + ")"
	}
	return s.Label
}

func stroke(i int) string {
	s := fmt.Sprintf(`stroke="%s" stroke-width="2" fill="none"`, colors[i%len(colors)])
	if i >= len(colors) {
		s += ` stroke-dasharray="6 3"`
	}
	return s
}

// axis maps values to [0, 1] and lists its ticks.
type axis struct {
	pos   func(v float64) float64
	ticks []tick
}

type tick struct {
	v     float64
	label string
}

// newLog2Axis spans whole powers of two around the sizes, with ticks at
// powers of two every step octaves, labeled as bench writes sizes (4K, 1M).
// Steps divide 10, so that 1K, 1M and 1G are ticks wherever they fall.
func newLog2Axis(lo, hi int64) axis {
	a, b := math.Floor(math.Log2(float64(lo))), math.Ceil(math.Log2(float64(hi)))
	if a == b {
		a, b = a-1, b+1
	}
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10} {
		step = s
		if (b-a)/s < maxXTicks {
			break
		}
	}
	ax := axis{pos: func(v float64) float64 { return (math.Log2(v) - a) / (b - a) }}
	for k := math.Ceil(a/step) * step; k <= b; k += step {
		ax.ticks = append(ax.ticks, tick{math.Exp2(k), bench.Size(int64(1) << int(k)).String()})
	}
	return ax
}

// newLinearAxis runs from 0 to a round number at or above hi, with ticks
// at steps of 1, 2 or 5 times a power of ten.
func newLinearAxis(hi float64) axis {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		hi = 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(hi/maxYTicks)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if hi/(m*mag) <= maxYTicks {
			step = m * mag
			break
		}
	}
	n := math.Ceil(hi / step)
	end := n * step
	ax := axis{pos: func(v float64) float64 { return v / end }}
	digits := max(0, -int(math.Floor(math.Log10(step))))
	for i := 0.0; i <= n; i++ {
		ax.ticks = append(ax.ticks, tick{i * step, strconv.FormatFloat(i*step, 'f', digits, 64)})
	}
	return ax
}

// newLog10Axis spans whole powers of ten around lo..hi, a tick at each.
func newLog10Axis(lo, hi float64) axis {
	if hi <= 0 || math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if a == b {
		b++
	}
	ax := axis{pos: func(v float64) float64 { return (math.Log10(v) - a) / (b - a) }}
	for k := a; k <= b; k++ {
		v := math.Pow(10, k)
		ax.ticks = append(ax.ticks, tick{v, strconv.FormatFloat(v, 'g', -1, 64)})
	}
	return ax
}

// panel draws one chart: frame, grid, ticks, axis titles, and a polyline
// (with a dot per point, so that a single size shows) for each series.
func panel(b *strings.Builder, id string, y0 int, ytitle string, x, y axis, series []Series, val func(Point) (float64, bool)) {
	px := func(v float64) float64 { return left + x.pos(v)*plotW }
	py := func(v float64) float64 { return float64(y0) + (1-y.pos(v))*panelH }
	fmt.Fprintf(b, `<g id="%s">`+"\n", id)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>`+"\n", left, y0, plotW, panelH)
	for _, t := range x.ticks {
		xx := px(t.v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xx, y0, xx, y0+panelH)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xx, y0+panelH+tickLen+14, esc(t.label))
	}
	for _, t := range y.ticks {
		yy := py(t.v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, left+plotW, yy)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-tickLen-3, yy, esc(t.label))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">message size (bytes, log2 scale)</text>`+"\n", left+plotW/2, y0+panelH+40)
	fmt.Fprintf(b, `<text transform="translate(20 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", y0+panelH/2, esc(ytitle))
	for i, s := range series {
		var pts []string
		for _, p := range s.Points {
			if v, ok := val(p); ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(p.Size)), py(v)))
			}
		}
		fmt.Fprintf(b, `<polyline points="%s" %s/>`+"\n", strings.Join(pts, " "), stroke(i))
		for _, pt := range pts {
			cx, cy, _ := strings.Cut(pt, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", cx, cy, colors[i%len(colors)])
		}
	}
	b.WriteString("</g>\n")
}

// esc makes text safe inside an SVG element.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
