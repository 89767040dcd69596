package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// svgCounts counts, in a well-formed SVG, the polylines in each group with
// an id, and collects every text.
func svgCounts(t *testing.T, b []byte) (polylines map[string]int, texts []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	polylines = map[string]int{}
	var group, root string
	for {
		tok, err := d.Token()
		if err != nil {
			require.ErrorContains(t, err, "EOF", "not well-formed XML:\n%s", b)
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Space + " " + e.Name.Local
			}
			for _, a := range e.Attr {
				if e.Name.Local == "g" && a.Name.Local == "id" {
					group = a.Value
				}
			}
			if e.Name.Local == "polyline" {
				polylines[group]++
			}
			if e.Name.Local == "text" {
				var s string
				require.NoError(t, d.DecodeElement(&s, &e))
				texts = append(texts, s)
			}
		case xml.EndElement:
			if e.Name.Local == "g" {
				group = ""
			}
		}
	}
	require.Equal(t, "http://www.w3.org/2000/svg svg", root)
	return polylines, texts
}

// TestPlot: two runs of flagcx bench --json, one labeled, drawn side by
// side; then the mistakes a user makes with the files.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	for _, f := range []string{a, b} {
		r := runFlagcx(t, time.Minute, cleanEnv(), "bench", "allreduce", "--np", "2", "-b", "1K", "-e", "64K", "-f", "4", "-w", "1", "-n", "2", "--json", f)
		require.Zero(t, r.code, r.stderr)
	}
	svg := filepath.Join(dir, "out.svg")
	r := runFlagcx(t, 30*time.Second, cleanEnv(), "plot", "baseline="+a, b, "-o", svg)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "wrote "+svg)
	body, err := os.ReadFile(svg)
	require.NoError(t, err)
	lines, texts := svgCounts(t, body)
	require.Equal(t, map[string]int{"busbw": 2, "time": 2}, lines, "one line per file in each panel")
	for _, want := range []string{"allreduce float32 sum, out of place", "message size (bytes, log2 scale)",
		"bus bandwidth (GB/s)", "time (µs, log scale)", "1K", "4K", "16K", "64K", "baseline", b} {
		require.Contains(t, texts, want)
	}

	// The default output is plot.svg in the working directory.
	r = runFlagcx(t, 30*time.Second, cleanEnv(), "plot", a)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "wrote plot.svg")

	notJSON := filepath.Join(dir, "table.txt")
	require.NoError(t, os.WriteFile(notJSON, []byte("# nThread 1 nGpus 1\n"), 0o644))
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"missing file", []string{"plot", a, filepath.Join(dir, "missing.json")}, []string{"missing.json", "no such file or directory"}},
		{"not JSON", []string{"plot", "base=" + notJSON}, []string{"table.txt is not the JSON of flagcx bench --json"}},
		{"no files", []string{"plot"}, []string{"<results>"}},
		{"unwritable output", []string{"plot", a, "-o", filepath.Join(dir, "no", "such", "dir.svg")}, []string{"-o/--output", "dir.svg"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runFlagcx(t, 30*time.Second, cleanEnv(), c.args...)
			require.Equal(t, 1, r.code, r.stderr)
			lines := errorLines(r.stderr)
			require.Len(t, lines, 1, r.stderr)
			for _, w := range c.want {
				require.Contains(t, lines[0], w)
			}
		})
	}
}
