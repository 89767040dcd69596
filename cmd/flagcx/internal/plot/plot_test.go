package plot

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/bench"
)

// writeResults writes a file shaped as bench --json writes it, with one row
// per size of each (collective, datatype, redop).
func writeResults(t *testing.T, dir, name string, series [][3]string, sizes []int64) string {
	t.Helper()
	var rows []bench.Result
	for _, s := range series {
		for i, size := range sizes {
			rows = append(rows, bench.Result{
				Collective: s[0], Datatype: s[1], RedOp: s[2], Size: size, Count: int(size / 4),
				OutOfPlace: bench.Half{TimeUS: 10 * float64(i+1), BusBW: float64(i)},
				InPlace:    bench.Half{TimeUS: 20 * float64(i+1), BusBW: float64(i) / 2},
			})
		}
	}
	b, err := json.Marshal(map[string]any{"nranks": 2, "results": rows})
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// node is any SVG element, parsed generically.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Nodes   []node     `xml:",any"`
}

func (n node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// find lists the elements named name under n, at any depth.
func (n node) find(name string) []node {
	var out []node
	for _, c := range n.Nodes {
		if c.XMLName.Local == name {
			out = append(out, c)
		}
		out = append(out, c.find(name)...)
	}
	return out
}

func (n node) texts() []string {
	var out []string
	for _, t := range n.find("text") {
		out = append(out, strings.TrimSpace(t.Text))
	}
	return out
}

func (n node) group(t *testing.T, id string) node {
	t.Helper()
	for _, g := range n.find("g") {
		if g.attr("id") == id {
			return g
		}
	}
	t.Fatalf("no <g id=%q> in the SVG", id)
	return node{}
}

func TestWriteSVG(t *testing.T) {
	dir := t.TempDir()
	sizes := []int64{0, 8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20}
	cases := []struct {
		name    string
		files   []string // LABEL=FILE or FILE, relative to dir
		opts    Options
		legend  []string
		title   string
		xTicks  []string
		maxTime string // the top decade of the time axis
	}{
		{"one file", []string{"a.json"}, Options{}, []string{"a.json"}, "allreduce float32 sum, out of place",
			[]string{"16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M"}, "100"},
		{"labels, three files", []string{"base=a.json", "new=b.json", "c.json"}, Options{}, []string{"base", "new", "c.json"}, "allreduce float32 sum, out of place",
			[]string{"16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M"}, "100"},
		{"in place", []string{"a.json"}, Options{InPlace: true}, []string{"a.json"}, "allreduce float32 sum, in place",
			[]string{"16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M"}, "1000"},
		{"one of several series, beside another collective", []string{"all.json", "a.json"}, Options{Datatype: "float32"},
			[]string{"all.json (broadcast float32)", "a.json (allreduce float32 sum)"}, "flagcx bench, out of place",
			[]string{"16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M"}, "100"},
	}
	writeResults(t, dir, "a.json", [][3]string{{"allreduce", "float32", "sum"}}, sizes)
	writeResults(t, dir, "b.json", [][3]string{{"allreduce", "float32", "sum"}}, sizes)
	writeResults(t, dir, "c.json", [][3]string{{"allreduce", "float32", "sum"}}, sizes[:4])
	writeResults(t, dir, "all.json", [][3]string{{"broadcast", "float32", "none"}, {"broadcast", "int8", "none"}}, sizes)
	t.Chdir(dir)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var series []Series
			for _, f := range c.files {
				s, err := Load(f, c.opts)
				require.NoError(t, err)
				series = append(series, s)
			}
			var b bytes.Buffer
			require.NoError(t, WriteSVG(&b, series, c.opts.InPlace))
			var svg node
			require.NoError(t, xml.Unmarshal(b.Bytes(), &svg), "not well-formed XML:\n%s", b.String())
			require.Equal(t, "svg", svg.XMLName.Local)
			require.Equal(t, "http://www.w3.org/2000/svg", svg.XMLName.Space)
			require.Contains(t, svg.texts(), c.title)
			for _, id := range []string{"busbw", "time"} {
				g := svg.group(t, id)
				lines := g.find("polyline")
				require.Len(t, lines, len(c.files), "one line per file in %s", id)
				for i, l := range lines {
					// Size 0 has no place on a log axis; every other size is a point.
					require.Len(t, strings.Fields(l.attr("points")), len(series[i].Points), "%s line %d", id, i)
				}
				texts := g.texts()
				require.Contains(t, texts, "message size (bytes, log2 scale)")
				require.Subset(t, texts, c.xTicks)
			}
			require.Contains(t, svg.group(t, "busbw").texts(), "bus bandwidth (GB/s)")
			require.Contains(t, svg.group(t, "busbw").texts(), "0")
			require.Contains(t, svg.group(t, "time").texts(), "time (µs, log scale)")
			require.Contains(t, svg.group(t, "time").texts(), c.maxTime)
			require.Equal(t, c.legend, svg.group(t, "legend").texts())
		})
	}
}

func TestLog2Ticks(t *testing.T) {
	cases := []struct {
		lo, hi int64
		want   []string
	}{
		{1, 1 << 30, []string{"1", "32", "1K", "32K", "1M", "32M", "1G"}},
		{8, 8 << 20, []string{"16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "4M"}},
		{1 << 10, 1 << 20, []string{"1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M"}},
		{4096, 4096, []string{"2K", "4K", "8K"}}, // one size: an octave either side
		{1000, 3000, []string{"512", "1K", "2K", "4K"}},
	}
	for _, c := range cases {
		var got []string
		for _, tk := range newLog2Axis(c.lo, c.hi).ticks {
			got = append(got, tk.label)
		}
		require.Equal(t, c.want, got, "%d..%d", c.lo, c.hi)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	sizes := []int64{8, 64}
	all := writeResults(t, dir, "all.json", [][3]string{{"allreduce", "float32", "sum"}, {"allreduce", "float32", "max"}}, sizes)
	cases := []struct {
		name string
		arg  string
		opts Options
		want []string
	}{
		{"missing", filepath.Join(dir, "missing.json"), Options{}, []string{"missing.json", "no such file", "flagcx bench --json"}},
		{"missing, labeled", "base=" + filepath.Join(dir, "gone.json"), Options{}, []string{"gone.json", "no such file"}},
		{"not JSON", write("table.txt", "# nThread 1 nGpus 1\n"), Options{}, []string{"table.txt", "is not the JSON of flagcx bench --json"}},
		{"truncated", write("cut.json", `{"results": [{"op": "allre`), Options{}, []string{"cut.json", "is not the JSON"}},
		{"other JSON", write("other.json", `{"name": "x"}`), Options{}, []string{"other.json", `no "results"`}},
		{"wrong shape", write("shape.json", `{"results": {"op": 1}}`), Options{}, []string{"shape.json", "is not the JSON"}},
		{"no results", write("empty.json", `{"results": []}`), Options{}, []string{"empty.json", "has no results"}},
		{"only size 0", write("zero.json", `{"results": [{"op": "allreduce", "datatype": "float32", "redop": "sum", "size": 0}]}`), Options{},
			[]string{"zero.json", "no size above 0", "-b 1"}},
		{"several series", all, Options{}, []string{"all.json", "2 series", "allreduce float32 sum; allreduce float32 max", "--redop"}},
		{"no match", all, Options{Collective: "broadcast"}, []string{"all.json", "no results for --collective broadcast", "it has: allreduce float32 sum"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.arg, c.opts)
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	s, err := Load(all, Options{RedOp: "MAX"})
	require.NoError(t, err)
	require.Equal(t, "allreduce float32 max", s.Desc)
	require.Error(t, WriteSVG(&bytes.Buffer{}, nil, false))
}

func TestSplitArg(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "a=b.json")
	require.NoError(t, os.WriteFile(odd, []byte("{}"), 0o644))
	cases := []struct{ arg, label, file string }{
		{"r.json", "r.json", "r.json"},
		{"base=r.json", "base", "r.json"},
		{"a b=dir/r=1.json", "a b", "dir/r=1.json"},
		{odd, odd, odd}, // an existing file keeps its "="
		{"=r.json", "=r.json", "=r.json"},
	}
	for _, c := range cases {
		l, f := SplitArg(c.arg)
		require.Equal(t, c.label, l, c.arg)
		require.Equal(t, c.file, f, c.arg)
	}
}
