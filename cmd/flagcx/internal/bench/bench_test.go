package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	good := map[string]Size{
		"0": 0, "8": 8, "1K": 1024, "64k": 64 << 10, "32M": 32 << 20, "1G": 1 << 30, "2g": 2 << 30,
		"1.5K": 1536, "4KB": 4096, "4KiB": 4096, " 7 ": 7, "1e3": 1000, "4 M": 4 << 20,
		"1048576G": MaxSize,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	bad := []struct{ in, why string }{
		{"12Q", "unknown unit"},
		{"", "empty"},
		{"K", "no number"},
		{"-1", "negative"},
		{"1.3", "whole number"},
		{"abc", "not a number"},
		{"99999999999G", "larger than the largest size"},
		{"1048577G", "larger than the largest size"},
		{"1e30", "larger than the largest size"},
		{"18446744073709551616", "larger than the largest size"},
	}
	for _, c := range bad {
		_, err := ParseSize(c.in)
		require.Error(t, err, c.in)
		require.Contains(t, err.Error(), c.why, c.in)
		require.Contains(t, err.Error(), "K, M or G", "the error says what to give")
	}
	require.Equal(t, "64K", Size(65536).String())
	require.Equal(t, "1536", Size(1536).String())
	require.Equal(t, "3G", Size(3<<30).String())
}

func TestSizes(t *testing.T) {
	require.Equal(t, []Size{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536}, Sizes(1, 64<<10, 4))
	require.Equal(t, []Size{0, 1, 2, 4}, Sizes(0, 4, 2))
	require.Equal(t, []Size{8}, Sizes(8, 8, 2))
	require.Equal(t, []Size{8, 24}, Sizes(8, 70, 3))
	require.Equal(t, []Size{MaxSize/2 + 1}, Sizes(MaxSize/2+1, MaxSize, 2))
}

// parseFlags parses bench arguments as the CLI does.
func parseFlags(t *testing.T, args ...string) (*Flags, error) {
	t.Helper()
	var cli struct {
		Bench Flags `cmd:""`
	}
	p, err := kong.New(&cli, kong.Name("flagcx"), kong.Exit(func(int) { t.Fatal("kong exited") }))
	require.NoError(t, err)
	_, err = p.Parse(append([]string{"bench"}, args...))
	return &cli.Bench, err
}

func TestFlagValidation(t *testing.T) {
	cases := []struct {
		args []string
		errs []string // what the message must say: the flag, and what to give
	}{
		{[]string{"allreducex"}, []string{`unknown collective "allreducex"`, "use one of allreduce", "or all"}},
		{[]string{"allreduce", "-d", "float8"}, []string{"-d/--datatype", `"float8"`, "use one of int8", "bfloat16, or all"}},
		{[]string{"allreduce", "-o", "xor"}, []string{"-o/--op", `"xor"`, "use one of sum, prod, max, min, avg, or all"}},
		{[]string{"allreduce", "-b", "12Q"}, []string{"--minbytes", `"12Q"`, "K, M or G"}},
		{[]string{"allreduce", "-e", "99999999999G"}, []string{"--maxbytes", "larger than the largest size"}},
		{[]string{"allreduce", "-b", "1M", "-e", "64K"}, []string{"-b/--minbytes 1M is above -e/--maxbytes 64K", "no larger than"}},
		{[]string{"allreduce", "-f", "1"}, []string{"-f/--stepfactor 1", "at least 2"}},
		{[]string{"allreduce", "-f", "x"}, []string{"--stepfactor"}},
		{[]string{"allreduce", "-n", "0"}, []string{"-n/--iters 0", "at least 1"}},
		{[]string{"allreduce", "--warmup_iters=-1"}, []string{"-w/--warmup_iters -1", "0 or more"}},
		{[]string{"allreduce", "-c", "2"}, []string{"-c/--check 2", "give 1"}},
		{[]string{"allreduce", "-p", "5"}, []string{"-p/--print 5", "give 1"}},
		{[]string{"allreduce", "--root=-1"}, []string{"-r/--root -1"}},
		{[]string{"allreduce", "--np=-2"}, []string{"--np -2", "1 or more"}},
		{[]string{"allreduce", "--np", "0"}, []string{"--np 0", "1 or more"}},
		{[]string{"allreduce", "--format", "csv"}, []string{"--format", "table", "flagcx"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f, err := parseFlags(t, c.args...)
			if err == nil {
				_, err = f.Config()
			}
			require.Error(t, err)
			for _, s := range c.errs {
				require.Contains(t, err.Error(), s)
			}
		})
	}

	f, err := parseFlags(t, "all", "-d", "all", "-o", "all", "-b", "1", "-e", "64K", "-f", "4")
	require.NoError(t, err)
	cfg, err := f.Config()
	require.NoError(t, err)
	require.Len(t, cfg.Ops, 10)
	require.Len(t, cfg.Types, 10)
	require.Len(t, cfg.RedOps, 5)
	require.Len(t, cfg.Sizes, 9)
	// 3 reducing collectives x 10 types x 5 ops, 7 others x 10 types; 9 sizes each.
	require.Equal(t, (3*10*5+7*10)*9, cfg.steps())

	f, err = parseFlags(t, "reduce", "-r", "2")
	require.NoError(t, err)
	cfg, err = f.Config()
	require.NoError(t, err)
	require.ErrorContains(t, cfg.CheckRanks(2), "-r/--root 2 is not a rank of this run (ranks 0..1): give a root below 2")
	require.ErrorContains(t, cfg.CheckRanks(1), "single rank")
	require.NoError(t, cfg.CheckRanks(3))

	// Defaults, as documented.
	f, err = parseFlags(t, "allreduce")
	require.NoError(t, err)
	require.Equal(t, Size(8), f.MinBytes)
	require.Equal(t, Size(8<<20), f.MaxBytes)
	require.Equal(t, 2, f.StepFactor)
	require.Equal(t, 5, f.Warmup)
	require.Equal(t, 20, f.Iters)
	require.Equal(t, 1, f.Check)
	require.Equal(t, "float32", f.Datatype)
	require.Equal(t, "sum", f.Op)
	require.Equal(t, "table", f.Format)
}

func TestCheckMemory(t *testing.T) {
	if _, ok := availableMemory(); !ok {
		t.Skip("no /proc/meminfo")
	}
	err := checkMemory(MaxSize, true, 4)
	require.Error(t, err)
	require.Contains(t, err.Error(), "lower -e/--maxbytes")
	require.NoError(t, checkMemory(1<<20, true, 4))
}

// fakeRun runs the benchmark on n in-memory ranks and returns rank 0's
// output and every rank's error.
func fakeRun(t *testing.T, n int, corrupt func(op string, rank int, recv []byte), args ...string) (string, []error) {
	t.Helper()
	f, err := parseFlags(t, args...)
	require.NoError(t, err)
	cfg, err := f.Config()
	require.NoError(t, err)
	require.NoError(t, cfg.CheckRanks(n))
	w := newFakeWorld(n)
	w.corrupt = corrupt
	var out bytes.Buffer
	errs := make([]error, n)
	runs := make([]*rankRun, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		var o io.Writer = io.Discard
		if r == 0 {
			o = &out
		}
		runs[r] = newRankRun(cfg, w.comm(r), newHostBackend(w.comm(r)), o)
		runs[r].launcher = "test"
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = runs[r].run()
			if errs[r] == nil {
				errs[r] = runs[r].verdict()
			}
		}(r)
	}
	wg.Wait()
	return out.String(), errs
}

var rowRE = regexp.MustCompile(`^ +(\d+) +(\d+) +(\S+) +(\S+) +(-?\d+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)$`)

// rows parses the table's data rows.
func rows(t *testing.T, out string) [][]string {
	t.Helper()
	var rs [][]string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		m := rowRE.FindStringSubmatch(l)
		require.NotNil(t, m, "not a table row: %q", l)
		rs = append(rs, m[1:])
	}
	return rs
}

// TestEveryCollectiveChecksOut runs every collective, type and reduction on
// the in-memory communicator, in and out of place, including sizes whose
// per-rank count is zero: the reference and the benchmark's buffer layouts
// must agree with a straightforward implementation.
func TestEveryCollectiveChecksOut(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		root := "0"
		if n > 1 {
			root = "1"
		}
		out, errs := fakeRun(t, n, nil, "all", "-d", "all", "-o", "all", "-b", "1", "-e", "4K", "-f", "8", "-w", "1", "-n", "1", "-r", root)
		for r, err := range errs {
			require.NoError(t, err, "rank %d, n=%d\n%s", r, n, out)
		}
		rs := rows(t, out)
		require.Len(t, rs, (3*10*5+7*10)*5)
		for _, row := range rs {
			require.Equal(t, "0", row[8], "out of place: %v", row)
			require.Contains(t, []string{"0", "N/A"}, row[12], "in place: %v", row)
		}
		require.Contains(t, out, "# Out of bounds values : 0 OK\n")
	}
}

func TestWrongResultsAreReported(t *testing.T) {
	corrupt := func(op string, rank int, recv []byte) {
		// (The benchmark's own 16-byte allreduces agree on timings.)
		if op == "allreduce" && rank == 1 && len(recv) >= 64 {
			recv[4] ^= 0x40
		}
	}
	out, errs := fakeRun(t, 3, corrupt, "allreduce", "-b", "4", "-e", "1K", "-f", "16", "-w", "0", "-n", "1")
	require.NoError(t, errs[1], "only rank 0 reports wrong results")
	var w *WrongError
	require.ErrorAs(t, errs[0], &w)
	rs := rows(t, out)
	require.Len(t, rs, 3)
	require.Equal(t, "0", rs[0][8], "4 bytes: one element, not touched")
	require.Equal(t, "0", rs[0][12])
	require.Equal(t, "1", rs[1][8])
	require.Equal(t, "1", rs[2][12])
	require.Equal(t, 4, w.Results)
	require.Equal(t, int64(4), w.Elements)
	require.Contains(t, out, "# Out of bounds values : 4 FAILED\n")
	require.Contains(t, w.Error(), "4 of 6 checked results were wrong")
}

// TestSharedCheckCountsExactly: the ranks of an AllReduce check one share
// each and compare the others by digest (check.go); wrong elements in a
// rank's own share, in another rank's share, and in every share of a
// Reduce root are all counted exactly, in and out of place.
func TestSharedCheckCountsExactly(t *testing.T) {
	// 1K of float32 on 3 ranks: shares of elements [0,85), [85,170), [170,256).
	cases := []struct {
		coll  string
		rank  int
		elems []int
		args  []string
	}{
		{"allreduce", 1, []int{100}, nil},                          // its own share
		{"allreduce", 1, []int{3, 200, 255}, nil},                  // rank 0's and rank 2's
		{"reduce", 2, []int{0, 90, 171, 172}, []string{"-r", "2"}}, // the root, every share
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.coll, c.elems), func(t *testing.T) {
			corrupt := func(op string, rank int, recv []byte) {
				if op == c.coll && rank == c.rank && len(recv) == 1024 {
					for _, e := range c.elems {
						recv[4*e+1] ^= 0x40
					}
				}
			}
			out, errs := fakeRun(t, 3, corrupt, append([]string{c.coll, "-b", "1K", "-e", "1K", "-w", "0", "-n", "1"}, c.args...)...)
			var w *WrongError
			require.ErrorAs(t, errs[0], &w, out)
			rs := rows(t, out)
			require.Len(t, rs, 1)
			want := fmt.Sprint(len(c.elems))
			require.Equal(t, []string{want, want}, []string{rs[0][8], rs[0][12]}, out)
			require.Equal(t, int64(2*len(c.elems)), w.Elements)
		})
	}
}

// A non-root must not receive anything from Reduce: writing to its buffer
// counts as wrong too.
func TestUntouchedBuffersAreChecked(t *testing.T) {
	corrupt := func(op string, rank int, recv []byte) {
		if op == "reduce" && rank == 2 && len(recv) > 0 {
			recv[0] ^= 1
		}
	}
	out, errs := fakeRun(t, 3, corrupt, "reduce", "-b", "1K", "-e", "1K", "-d", "uint8")
	require.Error(t, errs[0])
	rs := rows(t, out)
	require.Equal(t, "1", rs[0][8])
	require.Equal(t, "1", rs[0][12])
}

func TestTableFormat(t *testing.T) {
	out, errs := fakeRun(t, 2, nil, "allgather", "-b", "8", "-e", "64", "-f", "8", "-d", "float", "-w", "0", "-n", "2", "-p", "1")
	require.NoError(t, errs[0])
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Equal(t, "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 8(factor) warmup iters: 0 iters: 2 agg iters: 1 validation: 1 graph: 0", lines[0])
	require.Equal(t, "#", lines[1])
	require.Equal(t, "# Using devices", lines[2])
	require.Regexp(t, `^#  Rank  0 Group  0 Pid +\d+ on +\S+ backend host \(cpu\)$`, lines[3])
	require.Regexp(t, `^#  Rank  1 Group  0 Pid +\d+ on +\S+ backend host \(cpu\)$`, lines[4])
	require.Equal(t, "#", lines[5])
	require.Equal(t, "#                                                              out-of-place                       in-place          ", lines[6])
	require.Equal(t, "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong", lines[7])
	require.Equal(t, "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ", lines[8])
	// allgather of 8 bytes on 2 ranks: 1 float per rank; redop none, root -1.
	require.Regexp(t, `^           8             1   float32    none      -1 +[\d.]+ +[\d.]+ +[\d.]+ +0 +[\d.]+ +[\d.]+ +[\d.]+ +0$`, lines[9])
	require.Regexp(t, `^# rank 0 recvbuff = -?\d+\.000000 -?\d+\.000000$`, lines[10])
	require.Regexp(t, `^          64             8   float32`, lines[11])
	require.Regexp(t, `^# rank 0 recvbuff = (-?\d+\.000000 ){9}-?\d+\.000000$`, lines[12])
	require.Equal(t, "# Out of bounds values : 0 OK", lines[13])
	require.Regexp(t, `^# Avg bus bandwidth    : [\d.e+-]+ $`, lines[14])
	require.Equal(t, "#", lines[15])
	require.Len(t, lines, 16)
}

func TestFlagcxFormat(t *testing.T) {
	out, errs := fakeRun(t, 2, nil, "allreduce", "-b", "1K", "-e", "4K", "-f", "2", "--format", "flagcx", "-p", "1", "-d", "int32")
	require.NoError(t, errs[0])
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 6)
	for i, size := range []string{"1024", "2048", "4096"} {
		require.Regexp(t, `^Comm size: `+size+` bytes; Elapsed time: \d+\.\d{6} sec; Algo bandwidth: \d+\.\d{6} GB/s; Bus bandwidth: \d+\.\d{6} GB/s$`, lines[2*i])
		require.Regexp(t, `^rank 0 recvbuff = (-?\d+ ){9}-?\d+$`, lines[2*i+1])
	}

	out, errs = fakeRun(t, 2, nil, "allreduce", "-b", "1K", "-e", "1K", "--format", "flagcx", "-o", "all")
	require.NoError(t, errs[0])
	require.Contains(t, out, "# allreduce float32 sum\nComm size: 1024 bytes;")
	require.Contains(t, out, "# allreduce float32 avg\nComm size: 1024 bytes;")
}

func TestJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	_, errs := fakeRun(t, 2, nil, "alltoall", "-b", "64", "-e", "128", "--json", path)
	require.NoError(t, errs[0])
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		NRanks  int `json:"nranks"`
		Devices []struct {
			Rank    int    `json:"rank"`
			Backend string `json:"backend"`
		} `json:"devices"`
		Params struct {
			MinBytes int64 `json:"minbytes"`
		} `json:"params"`
		Results []struct {
			Op         string `json:"op"`
			Datatype   string `json:"datatype"`
			RedOp      string `json:"redop"`
			Root       int    `json:"root"`
			Size       int64  `json:"size"`
			Count      int    `json:"count"`
			OutOfPlace struct {
				TimeUS *float64 `json:"time_us"`
				AlgBW  *float64 `json:"algbw"`
				BusBW  *float64 `json:"busbw"`
				Wrong  *int64   `json:"wrong"`
			} `json:"out_of_place"`
			InPlace struct {
				TimeUS *float64 `json:"time_us"`
				Wrong  *int64   `json:"wrong"`
			} `json:"in_place"`
		} `json:"results"`
		WrongResults int `json:"wrong_results"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, 2, doc.NRanks)
	require.Len(t, doc.Devices, 2)
	require.Equal(t, 1, doc.Devices[1].Rank)
	require.Equal(t, "host (cpu)", doc.Devices[0].Backend)
	require.Equal(t, int64(64), doc.Params.MinBytes)
	require.Len(t, doc.Results, 2)
	r := doc.Results[1]
	require.Equal(t, "alltoall", r.Op)
	require.Equal(t, "float32", r.Datatype)
	require.Equal(t, "none", r.RedOp)
	require.Equal(t, -1, r.Root)
	require.Equal(t, int64(128), r.Size)
	require.Equal(t, 16, r.Count) // per peer
	require.NotNil(t, r.OutOfPlace.TimeUS)
	require.NotNil(t, r.OutOfPlace.BusBW)
	require.NotNil(t, r.OutOfPlace.Wrong)
	require.Equal(t, int64(0), *r.OutOfPlace.Wrong)
	require.Nil(t, r.InPlace.Wrong, "in-place alltoall is not checked")
	require.Zero(t, doc.WrongResults)
}

func TestBusBandwidthFactors(t *testing.T) {
	n := 4
	want := map[string]float64{
		"allreduce": 1.5, "reduce": 1, "broadcast": 1, "allgather": 0.75, "reducescatter": 0.75,
		"alltoall": 0.75, "alltoallv": 0.75, "gather": 0.75, "scatter": 0.75, "sendrecv": 1,
	}
	for i := range opTable {
		require.InDelta(t, want[opTable[i].name()], opTable[i].coll.BusFactor(n), 1e-12, opTable[i].name())
	}
}

func TestProgressLine(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, total: 4}
	p.show("allreduce", 7, 0, 1<<20, 1)
	p.clear()
	require.Equal(t, "flagcx bench: allreduce float32 sum 1 MiB  25%\x1b[K\r\x1b[K\r", b.String())
	// Not a terminal: a line per step, nothing to clear.
	b.Reset()
	p = &progress{w: &b, total: 4, lines: true}
	p.show("allreduce", 7, 0, 1<<20, 1)
	p.clear()
	p.show("allreduce", 7, 0, 2<<20, 2)
	require.Equal(t, "flagcx bench: allreduce float32 sum 1 MiB  25%\nflagcx bench: allreduce float32 sum 2 MiB  50%\n", b.String())
	var nilp *progress
	nilp.show("x", 0, 0, 0, 0)
	nilp.clear()
}
