package suite

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// areaOrder is the order of the summary rows.
var areaOrder = []string{"plugin", "device", "comm", "allreduce", "reduce", "broadcast", "allgather", "reducescatter",
	"alltoall", "alltoallv", "gather", "scatter", "sendrecv", "group", "stream"}

// Counts tallies results.
type Counts struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

func (c *Counts) add(st Status) {
	switch st {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	}
}

// Total is the number of cases counted.
func (c Counts) Total() int { return c.Passed + c.Failed + c.Skipped }

// Counts tallies the plugin's results, per level.
func (p *PluginReport) Counts() (all Counts, byLevel map[Level]*Counts) {
	byLevel = map[Level]*Counts{MUST: {}, SHOULD: {}, MAY: {}}
	for _, r := range p.Results {
		all.add(r.Status)
		byLevel[r.Level].add(r.Status)
	}
	return all, byLevel
}

// Failures counts the failed cases of every plugin, at every level: a
// wrong result or an unexpected error fails the run whatever the case's
// level (levels only decide what a plugin may call "not supported").
func (r *Report) Failures() (total int, perPlugin map[string]int) {
	perPlugin = map[string]int{}
	for _, p := range r.Plugins {
		for _, res := range p.Results {
			if res.Status == Failed {
				total++
				perPlugin[p.Info.Name]++
			}
		}
	}
	return total, perPlugin
}

// Passed reports whether the run finished and no case failed.
func (r *Report) Passed() bool { n, _ := r.Failures(); return n == 0 && !r.Interrupted }

// failedByLevel says how a plugin's failures split over the levels:
// "MUST 1, SHOULD 2".
func failedByLevel(byLevel map[Level]*Counts) string {
	var parts []string
	for _, l := range []Level{MUST, SHOULD, MAY} {
		if n := byLevel[l].Failed; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", l, n))
		}
	}
	return strings.Join(parts, ", ")
}

// emulatedNote is appended to every headline of an emulated run.
func emulatedNote(emulated bool) string {
	if emulated {
		return " (emulated vendor runtimes)"
	}
	return ""
}

// maxListed is how many failures the text summary lists per plugin.
const maxListed = 25

// WriteText prints the summary table of each plugin and the verdict.
func (r *Report) WriteText(w io.Writer) {
	for _, p := range r.Plugins {
		r.writePlugin(w, p)
	}
	total := Counts{}
	for _, p := range r.Plugins {
		c, _ := p.Counts()
		total.Passed += c.Passed
		total.Failed += c.Failed
		total.Skipped += c.Skipped
	}
	n, per := r.Failures()
	verdict := "PASS"
	if r.Interrupted {
		verdict = "INTERRUPTED (the results are partial)"
	} else if n > 0 {
		var parts []string
		for _, p := range r.Plugins {
			if per[p.Info.Name] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", p.Info.Name, per[p.Info.Name]))
			}
		}
		verdict = fmt.Sprintf("FAIL (%d cases failed: %s)", n, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "conformance%s: %d plugins, %d cases: %d passed, %d failed, %d skipped in %.1f s: %s\n",
		emulatedNote(r.Emulated), len(r.Plugins), total.Total(), total.Passed, total.Failed, total.Skipped, r.Seconds, verdict)
}

func (r *Report) writePlugin(w io.Writer, p *PluginReport) {
	in := p.Info
	head := in.Name
	if in.Version != "" {
		head += " " + in.Version
	}
	var meta []string
	if in.Vendor != "" {
		meta = append(meta, in.Vendor)
	}
	if in.ABI > 0 {
		meta = append(meta, fmt.Sprintf("ABI v%d", in.ABI))
	}
	meta = append(meta, in.Path)
	fmt.Fprintf(w, "\n== %s (%s)", head, strings.Join(meta, ", "))
	if in.Emulated {
		fmt.Fprint(w, ": EMULATED vendor runtimes")
	}
	fmt.Fprintln(w)
	for _, l := range in.Libraries {
		if !l.Loaded {
			continue
		}
		tag := ""
		if l.Emulated {
			tag = ", emulated"
		}
		fmt.Fprintf(w, "   %s: %s %s%s\n", l.Role, l.Path, l.Version, tag)
	}
	if len(in.NullOpt) > 0 {
		fmt.Fprintf(w, "   NULL entries (not supported): %s\n", strings.Join(in.NullOpt, ", "))
	}
	if p.Problem != "" {
		fmt.Fprintf(w, "   not tested: %s\n", p.Problem)
	}
	per := map[string]*Counts{}
	for _, res := range p.Results {
		if per[res.Area] == nil {
			per[res.Area] = &Counts{}
		}
		per[res.Area].add(res.Status)
	}
	fmt.Fprintf(w, "   %-14s %7s %7s %8s\n", "area", "passed", "failed", "skipped")
	for _, a := range areaOrder {
		if c := per[a]; c != nil {
			fmt.Fprintf(w, "   %-14s %7d %7d %8d\n", a, c.Passed, c.Failed, c.Skipped)
		}
	}
	all, byLevel := p.Counts()
	fmt.Fprintf(w, "   %-14s %7d %7d %8d\n", "total", all.Passed, all.Failed, all.Skipped)
	var lv []string
	for _, l := range []Level{MUST, SHOULD, MAY} {
		c := byLevel[l]
		lv = append(lv, fmt.Sprintf("%s %d/%d passed (%d failed, %d skipped)", l, c.Passed, c.Total(), c.Failed, c.Skipped))
	}
	fmt.Fprintf(w, "   levels: %s\n", strings.Join(lv, "; "))
	listed := 0
	var failed []Result
	for _, res := range p.Results {
		if res.Status == Failed {
			failed = append(failed, res)
		}
	}
	if len(failed) > 0 {
		fmt.Fprintln(w, "   failures:")
	}
	for _, l := range []Level{MUST, SHOULD, MAY} {
		for _, res := range failed {
			if res.Level != l {
				continue
			}
			if listed == maxListed {
				fmt.Fprintf(w, "     ... and %d more (all cases are in --json and --junit)\n", len(failed)-listed)
				listed++
			}
			if listed < maxListed {
				fmt.Fprintf(w, "     [%s] %s: %s\n", res.Level, res.ID, res.Reason)
				listed++
			}
		}
	}
	verdict := "PASS"
	if all.Failed > 0 {
		verdict = fmt.Sprintf("FAIL: %d cases failed (%s)", all.Failed, failedByLevel(byLevel))
	}
	fmt.Fprintf(w, "   result: %s%s (%.1f s)\n", verdict, emulatedNote(in.Emulated), p.Seconds)
}

// ---- JSON -------------------------------------------------------------------------

type jsonReport struct {
	Tool string `json:"tool"`
	*Report
	Passed bool     `json:"passed"`
	Counts Counts   `json:"counts"`
	Cases  []Result `json:"cases"`
}

// WriteJSON writes the report with every case.
func (r *Report) WriteJSON(w io.Writer) error {
	jr := jsonReport{Tool: "flagcx conformance", Report: r, Passed: r.Passed(), Cases: []Result{}}
	for _, p := range r.Plugins {
		c, _ := p.Counts()
		jr.Counts.Passed += c.Passed
		jr.Counts.Failed += c.Failed
		jr.Counts.Skipped += c.Skipped
		jr.Cases = append(jr.Cases, p.Results...)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(jr)
}

// ---- JUnit XML --------------------------------------------------------------------

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Errors     int             `xml:"errors,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Hostname   string          `xml:"hostname,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
	SystemOut  string          `xml:"system-out,omitempty"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure"`
	Skipped   *junitMessage `xml:"skipped"`
	SystemOut string        `xml:"system-out,omitempty"` // what the case measured (Result.Detail)
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

func secs(s float64) string { return fmt.Sprintf("%.3f", s) }

// WriteJUnit writes one testsuite per plugin, one testcase per case; a
// failed case of any level is a failure (its type is the level).
func (r *Report) WriteJUnit(w io.Writer) error {
	host, _ := os.Hostname()
	root := junitSuites{Name: "flagcx conformance" + emulatedNote(r.Emulated), Time: secs(r.Seconds)}
	for _, p := range r.Plugins {
		name := p.Info.Name
		if p.Info.Emulated {
			name += " (emulated)"
		}
		s := junitSuite{Name: name, Time: secs(p.Seconds), Timestamp: r.Started.Format(time.RFC3339), Hostname: host}
		np := make([]string, len(r.NP))
		for i, n := range r.NP {
			np[i] = fmt.Sprint(n)
		}
		s.Properties = []junitProperty{
			{"emulated", fmt.Sprint(p.Info.Emulated)},
			{"plugin.path", p.Info.Path}, {"plugin.vendor", p.Info.Vendor}, {"plugin.version", p.Info.Version},
			{"plugin.abi", fmt.Sprint(p.Info.ABI)}, {"flagcx.version", r.Version},
			{"np", strings.Join(np, ",")}, {"quick", fmt.Sprint(r.Quick)}, {"seed", fmt.Sprint(r.Seed)},
		}
		for _, l := range p.Info.Libraries {
			if l.Loaded {
				s.Properties = append(s.Properties, junitProperty{"library." + l.Role,
					strings.TrimSpace(fmt.Sprintf("%s %s emulated=%v", l.Path, l.Version, l.Emulated))})
			}
		}
		if p.Problem != "" {
			s.SystemOut = "not tested: " + p.Problem
		}
		for _, res := range p.Results {
			tc := junitCase{Name: fmt.Sprintf("%s [%s]", res.ID, res.Level), Classname: p.Info.Name + "." + res.Area,
				Time: secs(res.Seconds), SystemOut: res.Detail}
			switch res.Status {
			case Failed:
				msg := res.Reason
				if i := strings.Index(msg, ": "); i > 0 && i < 40 {
					msg = msg[:i]
				}
				tc.Failure = &junitMessage{Message: msg, Type: res.Level.String(), Text: res.Description + "\n" + res.Reason}
				s.Failures++
			case Skipped:
				tc.Skipped = &junitMessage{Message: res.Reason}
				s.Skipped++
			}
			s.Tests++
			s.Cases = append(s.Cases, tc)
		}
		root.Tests += s.Tests
		root.Failures += s.Failures
		root.Skipped += s.Skipped
		root.Suites = append(root.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", " ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
