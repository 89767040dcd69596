package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/launch"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// flagcxBin builds the command once per test run (go build -o).
func flagcxBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "flagcx-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "flagcx")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// cleanEnv is this process's environment without anything that would make
// the command think a launcher started it.
func cleanEnv(extra ...string) []string {
	drop := map[string]bool{}
	for _, v := range launch.LauncherVars() {
		drop[v] = true
	}
	drop[launch.EnvProgress] = true
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] && !strings.HasPrefix(name, "FLAGCX_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func runFlagcx(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, flagcxBin(t), args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	require.NoError(t, ctx.Err(), "flagcx %s did not finish within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), limit, r.stdout, r.stderr)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return r
}

func errorLines(stderr string) []string {
	var ls []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "flagcx: error:") {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestBadInputs: every mistake ends quickly with exit status 1 and exactly
// one error line, never a panic.
func TestBadInputs(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		args []string
		want []string // substrings of the error line
	}{
		{"unknown op", nil, []string{"bench", "allreducex"}, []string{`unknown collective "allreducex"`}},
		{"unknown dtype", nil, []string{"bench", "allreduce", "-d", "float8"}, []string{"-d/--datatype", "float8"}},
		{"unknown redop", nil, []string{"bench", "allreduce", "-o", "xor"}, []string{"-o/--op"}},
		{"malformed size", nil, []string{"bench", "allreduce", "-b", "12Q"}, []string{"--minbytes", "12Q"}},
		{"min above max", nil, []string{"bench", "allreduce", "-b", "1M", "-e", "64K"}, []string{"-b/--minbytes 1M is above -e/--maxbytes 64K"}},
		{"step factor 1", nil, []string{"bench", "allreduce", "-f", "1"}, []string{"-f/--stepfactor 1"}},
		{"root out of range", nil, []string{"bench", "reduce", "-r", "2", "--np", "2"}, []string{"-r/--root 2", "ranks 0..1"}},
		{"overflowing size", nil, []string{"bench", "allreduce", "-e", "99999999999G"}, []string{"--maxbytes", "larger than the largest size"}},
		{"more memory than the host has", nil, []string{"bench", "allreduce", "-e", "1048576G"}, []string{"lower -e/--maxbytes"}},
		{"garbage unique id", []string{"FLAGCX_UNIQUE_ID=garbage", "FLAGCX_RANK=0", "FLAGCX_NRANKS=2"},
			[]string{"bench", "allreduce"}, []string{"FLAGCX_UNIQUE_ID"}},
		{"rank beyond size", []string{"FLAGCX_RANK=2", "FLAGCX_NRANKS=2"}, []string{"bench", "allreduce"}, []string{"FLAGCX_RANK=2"}},
		{"np under mpirun", []string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "FLAGCX_COMM_ID=127.0.0.1:1"},
			[]string{"bench", "allreduce", "--np", "2"}, []string{"--np 2", "mpirun", "drop --np"}},
		{"unknown flag", nil, []string{"bench", "allreduce", "--bogus"}, []string{"unknown flag --bogus"}},
		{"missing op", nil, []string{"bench"}, []string{"<collective>"}},
		{"unknown command", nil, []string{"benchmark"}, []string{"unexpected argument benchmark"}},
		{"bad format", nil, []string{"bench", "allreduce", "--format", "csv"}, []string{"--format"}},
		{"bad json path", nil, []string{"bench", "allreduce", "--np", "2", "--json", "/nonexistent/dir/r.json"}, []string{"--json"}},
		{"bad timeout", []string{"FLAGCX_TIMEOUT=soon", "PMI_RANK=0", "PMI_SIZE=1"}, []string{"bench", "allreduce"}, []string{"FLAGCX_TIMEOUT"}},
		{"malformed placement", nil, []string{"bench", "allreduce", "--ranks", "nvidia"}, []string{"--ranks", "backend:count"}},
		{"placement and np disagree", nil, []string{"bench", "allreduce", "--ranks", "nvidia:2", "--np", "3"}, []string{"disagree"}},
		{"split list across vendors", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2"}, []string{"bench", "allreduce", "--ranks", "nvidia:1,host:1"}, []string{"FLAGCX_CLUSTER_SPLIT_LIST", "one vendor"}},
		{"split list of another size", []string{"FLAGCX_CLUSTER_SPLIT_LIST=2,2"}, []string{"bench", "allreduce", "--np", "3"}, []string{"FLAGCX_CLUSTER_SPLIT_LIST", "add up to 4", "3 ranks"}},
		{"malformed split list", []string{"FLAGCX_CLUSTER_SPLIT_LIST=two"}, []string{"bench", "allreduce", "--np", "2"}, []string{"FLAGCX_CLUSTER_SPLIT_LIST", "not a cluster size"}},
		{"unknown backend", nil, []string{"--plugin-dir", ".", "bench", "allreduce", "--backend", "nosuch"}, []string{"no plugin libflagcx-nosuch.so"}},
		{"negative warmup", nil, []string{"bench", "allreduce", "-w", "-1"}, []string{"-w/--warmup_iters -1", "give 0 or more"}},
		{"negative iterations", nil, []string{"bench", "allreduce", "--iters", "-5"}, []string{"-n/--iters -5", "at least 1"}},
		{"negative factor", nil, []string{"bench", "allreduce", "-f", "-2"}, []string{"-f/--stepfactor -2", "at least 2"}},
		{"negative root", nil, []string{"bench", "reduce", "-r", "-1"}, []string{"-r/--root -1", "0 or more"}},
		{"negative np", nil, []string{"bench", "allreduce", "--np", "-2"}, []string{"--np -2", "1 or more"}},
		{"negative min size", nil, []string{"bench", "allreduce", "-b", "-1"}, []string{"--minbytes", `"-1": negative`, "from 0 to 1048576G"}},
		{"negative max size", nil, []string{"bench", "allreduce", "-e", "-4K"}, []string{"--maxbytes", `"-4K": negative`, "from 0 to 1048576G"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runFlagcx(t, 10*time.Second, cleanEnv(c.env...), c.args...)
			all := r.stdout + r.stderr
			require.NotZero(t, r.code, all)
			lines := errorLines(r.stderr)
			require.Len(t, lines, 1, "stderr:\n%s", r.stderr)
			for _, w := range c.want {
				require.Contains(t, lines[0], w)
			}
			require.NotContains(t, all, "panic")
			require.NotContains(t, all, "goroutine")
			require.NotContains(t, all, "perhaps try", "kong's advice to quote a value is not an answer")
			require.Less(t, r.took, 5*time.Second)
		})
	}
}

func TestNegativeValues(t *testing.T) {
	cases := []struct{ in, want []string }{
		{[]string{"bench", "allreduce", "-w", "-1"}, []string{"bench", "allreduce", "-w-1"}},
		{[]string{"bench", "--root", "-1", "-n", "5"}, []string{"bench", "--root=-1", "-n", "5"}},
		{[]string{"bench", "-e", "-4K", "-f", "-.5"}, []string{"bench", "-e-4K", "-f-.5"}},
		{[]string{"conformance", "--np", "-1,2"}, []string{"conformance", "--np=-1,2"}},
		{[]string{"bench", "--np=3", "-1"}, []string{"bench", "--np=3", "-1"}},     // the flag has its value
		{[]string{"bench", "-w", "-x"}, []string{"bench", "-w", "-x"}},             // not a number: kong's to judge
		{[]string{"bench", "--", "-w", "-1"}, []string{"bench", "--", "-w", "-1"}}, // after --, nothing is a flag
		{[]string{"bench", "-w"}, []string{"bench", "-w"}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, negativeValues(c.in), "%q", c.in)
	}
}

// TestConfigErrorsOnce: a setting every rank reads, wrong, is refused once
// by the launcher before any rank starts, not once per rank.
func TestConfigErrorsOnce(t *testing.T) {
	empty := t.TempDir()
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"shm ring size", []string{"FLAGCX_SHM_P2P_SIZE=abc"}, []string{"bench", "allreduce", "--np", "3"}, `FLAGCX_SHM_P2P_SIZE="abc": allowed is a byte count from 64K to 1G`},
		{"shm window size", []string{"FLAGCX_SHM_WINDOW_SIZE=1"}, []string{"bench", "allreduce", "--np", "3"}, `FLAGCX_SHM_WINDOW_SIZE="1"`},
		{"shm switch", []string{"FLAGCX_SHM_DISABLE=maybe"}, []string{"bench", "allreduce", "--np", "3"}, `FLAGCX_SHM_DISABLE="maybe"`},
		{"host path switch", []string{"FLAGCX_USE_HOST_COMM=maybe"}, []string{"bench", "allreduce", "--np", "3"}, `FLAGCX_USE_HOST_COMM="maybe"`},
		{"chunk size", []string{"FLAGCX_NET_CHUNK_SIZE=-3"}, []string{"bench", "allreduce", "--ranks", "host:3"}, `FLAGCX_NET_CHUNK_SIZE="-3"`},
		{"unknown backend", nil, []string{"--plugin-dir", empty, "bench", "allreduce", "--np", "3", "--backend", "nosuch"}, "no plugin libflagcx-nosuch.so"},
		{"unknown backend in --ranks", nil, []string{"--plugin-dir", empty, "bench", "allreduce", "--ranks", "nosuch:2,host:1"}, "no plugin libflagcx-nosuch.so"},
		{"plugin dir missing", nil, []string{"--plugin-dir", filepath.Join(empty, "gone"), "bench", "allreduce", "--ranks", "nvidia:3"}, "does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runFlagcx(t, 30*time.Second, cleanEnv(c.env...), append(c.args, "-e", "1K")...)
			require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Equal(t, 1, strings.Count(r.stderr, c.want), "printed once:\n%s", r.stderr)
			require.Equal(t, []string{"flagcx: error: "}, regexp.MustCompile(`(?m)^.*?error: `).FindAllString(r.stderr, -1),
				"one line from the launcher, none from ranks:\n%s", r.stderr)
			require.Empty(t, r.stdout, "no rank started")
		})
	}
}

func TestVersion(t *testing.T) {
	for _, alias := range [][]string{{"--version"}, {"-V"}} {
		r := runFlagcx(t, 10*time.Second, cleanEnv(), alias...)
		require.Zero(t, r.code, "%v: %s", alias, r.stderr)
		require.Regexp(t, `^flagcx version \S+\n`, r.stdout, "%v", alias)
	}
	for _, help := range [][]string{{"help"}, {"help", "bench"}} {
		r := runFlagcx(t, 10*time.Second, cleanEnv(), help...)
		require.Zero(t, r.code, "%v: %s", help, r.stderr)
		require.Contains(t, r.stdout, "Usage: flagcx "+strings.Join(help[1:], " "), "%v", help)
	}
	r := runFlagcx(t, 10*time.Second, cleanEnv(), "version")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `^flagcx version \S+\ngo version go\S+ \S+/\S+\nplugin ABI version \d+\n$`, r.stdout)
}

func TestHelp(t *testing.T) {
	r := runFlagcx(t, 10*time.Second, cleanEnv(), "bench", "--help")
	require.Zero(t, r.code)
	for _, f := range []string{"--minbytes", "--maxbytes", "--stepfactor", "--warmup_iters", "--iters", "--check",
		"--datatype", "--op", "--root", "--print", "--np", "--format", "--json", "--plugin-dir", "--debug"} {
		require.Contains(t, r.stdout, f)
	}
	// Every default shows, as "(default: X)" at the end of its flag's help.
	help := strings.Join(strings.Fields(r.stdout), " ")
	for flag, def := range map[string]string{"--minbytes": "8", "--maxbytes": "8M", "--stepfactor": "2", "--warmup_iters": "5",
		"--iters": "20", "--check": "1", "--datatype": "float32", "--op": "sum", "--root": "0", "--print": "0",
		"--backend": "host", "--format": "table"} {
		require.Regexp(t, regexp.QuoteMeta(flag)+`=\S+ (?:[^(]|\([^d])*\(default: `+regexp.QuoteMeta(def)+`\)`, help, flag)
	}
	require.NotContains(t, help, "(default: false)", "switches need no default")
	r = runFlagcx(t, 10*time.Second, cleanEnv(), "plot", "--help")
	require.Zero(t, r.code)
	require.Contains(t, strings.Join(strings.Fields(r.stdout), " "), "(default: plot.svg)")
}

var rowRE = regexp.MustCompile(`^ +(\d+) +(\d+) +(\S+) +(\S+) +(-?\d+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)$`)

// tableRows checks every data row of a table and returns them.
func tableRows(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		m := rowRE.FindStringSubmatch(l)
		require.NotNil(t, m, "not a table row: %q", l)
		require.Equal(t, "0", m[9], "wrong elements out of place: %q", l)
		require.Contains(t, []string{"0", "N/A"}, m[13], "wrong elements in place: %q", l)
		rows = append(rows, m[1:])
	}
	require.Contains(t, out, "# Out of bounds values : 0 OK\n")
	return rows
}

func TestBenchAllTypesAndOps(t *testing.T) {
	r := runFlagcx(t, 3*time.Minute, cleanEnv(), "bench", "allreduce", "--np", "3", "-b", "1", "-e", "64K", "-f", "4", "-d", "all", "-o", "all")
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	rows := tableRows(t, r.stdout)
	require.Len(t, rows, 10*5*9)
	require.Equal(t, "1", rows[0][0])
	require.Equal(t, "1", rows[0][1], "1 byte of int8 is one element")
	require.Equal(t, "int8", rows[0][2])
	require.Equal(t, "sum", rows[0][3])
	require.Equal(t, 3, strings.Count(r.stdout, "backend host (cpu)"))
}

func TestBenchEveryCollective(t *testing.T) {
	r := runFlagcx(t, 3*time.Minute, cleanEnv(), "bench", "all", "--np", "3", "-b", "0", "-e", "8K", "-f", "8", "-r", "1", "-d", "all", "-w", "1", "-n", "2")
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	rows := tableRows(t, r.stdout)
	require.Len(t, rows, 10*6*(3+7)) // 0,1,8,64,512,4K... sizes: 0 1 8 64 512 4096
}

func TestBenchSingleRank(t *testing.T) {
	r := runFlagcx(t, time.Minute, cleanEnv(), "bench", "all", "-b", "8", "-e", "1K", "-f", "4")
	require.Zero(t, r.code, r.stderr)
	tableRows(t, r.stdout)
	require.Equal(t, 1, strings.Count(r.stdout, "backend host (cpu)"))
}

func TestBenchFlagcxFormatAndJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	r := runFlagcx(t, time.Minute, cleanEnv(), "bench", "broadcast", "--np", "2", "-b", "1K", "-e", "4K", "--format", "flagcx", "-p", "1", "-r", "1", "--json", path)
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 6)
	require.Regexp(t, `^Comm size: 1024 bytes; Elapsed time: \d+\.\d{6} sec; Algo bandwidth: \d+\.\d{6} GB/s; Bus bandwidth: \d+\.\d{6} GB/s$`, lines[0])
	require.Regexp(t, `^rank 0 recvbuff = `, lines[1])
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		NRanks   int    `json:"nranks"`
		Launcher string `json:"launcher"`
		Results  []struct {
			Root       int `json:"root"`
			OutOfPlace struct {
				Wrong *int64 `json:"wrong"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, 2, doc.NRanks)
	require.Equal(t, "flagcx", doc.Launcher)
	require.Len(t, doc.Results, 3)
	require.Equal(t, 1, doc.Results[0].Root)
	require.NotNil(t, doc.Results[0].OutOfPlace.Wrong)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestExternalLaunchers starts the ranks as an external launcher would:
// with its variables and no --np.
func TestExternalLaunchers(t *testing.T) {
	job := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	cases := []struct {
		name string
		env  func(rank int) []string
	}{
		{"mpirun on one host (file rendezvous)", func(r int) []string {
			return []string{fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r), "OMPI_COMM_WORLD_SIZE=2",
				"OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_MCA_ess_base_jobid=" + job}
		}},
		{"torchrun (MASTER_ADDR)", func() func(int) []string {
			port := freePort(t)
			return func(r int) []string {
				return []string{fmt.Sprintf("RANK=%d", r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
					fmt.Sprintf("MASTER_PORT=%d", port), "TORCHELASTIC_RUN_ID=" + job}
			}
		}()},
		{"by hand (FLAGCX_COMM_ID)", func() func(int) []string {
			port := freePort(t)
			return func(r int) []string {
				return []string{fmt.Sprintf("FLAGCX_RANK=%d", r), "FLAGCX_NRANKS=2",
					fmt.Sprintf("FLAGCX_COMM_ID=127.0.0.1:%d", port), "FLAGCX_COMM_SECRET=" + strings.Repeat("5a", 16)}
			}
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			res := make([]result, 2)
			for r := 0; r < 2; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					res[r] = runFlagcx(t, time.Minute, cleanEnv(c.env(r)...), "bench", "sendrecv", "-b", "1K", "-e", "64K", "-f", "8")
				}(r)
			}
			wg.Wait()
			for r := range res {
				require.Zero(t, res[r].code, "rank %d stderr:\n%s", r, res[r].stderr)
			}
			tableRows(t, res[0].stdout)
			require.Empty(t, res[1].stdout, "only rank 0 prints")
		})
	}
}

// pluginDir is the repository's build/plugins (made by make).
func pluginDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "build", "plugins"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "libflagcx-nvidia.so"))
	require.NoError(t, err, "run make first: the plugins are built by make")
	return dir
}

// TestBenchVendorsEmulated runs every collective, type and op through each
// vendor plugin on its emulated runtime, 2 and 3 ranks, checked exactly;
// what a vendor's library lacks goes the host path, never a wrong answer.
// The output must say it was emulated.
func TestBenchVendorsEmulated(t *testing.T) {
	dir := pluginDir(t)
	for _, tc := range []struct{ vendor, timing string }{
		{"nvidia", "Timing: device events"},
		{"kunlunxin", "Timing: host clock around stream synchronize (the runtime has no event timing)"},
		{"cambricon", "Timing: device events"},
		{"metax", "Timing: device events"},
	} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s:%d", tc.vendor, n), func(t *testing.T) {
				require.FileExists(t, filepath.Join(dir, "libflagcx-"+tc.vendor+".so"), "make builds every plugin")
				r := runFlagcx(t, 5*time.Minute, cleanEnv(), "--plugin-dir", dir, "bench", "all", "--ranks", fmt.Sprintf("%s:%d", tc.vendor, n),
					"--emulated", "-c", "1", "-d", "all", "-o", "all", "-b", "0", "-e", "4K", "-f", "8", "-w", "1", "-n", "2")
				require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				rows := tableRows(t, r.stdout)
				require.Len(t, rows, 6*(3*10*5+7*10)) // 6 sizes (0 1 8 64 512 4096) x (3 reducing collectives x 10 types x 5 ops + 7 others x 10 types)
				require.Contains(t, r.stdout, "EMULATED vendor runtime libraries")
				require.Contains(t, r.stdout, tc.timing)
				require.Equal(t, n, strings.Count(r.stdout, "(emulated)\n"), "every rank's device line says emulated")
			})
		}
	}
}

// optionalPlugins skips when one of the optional vendors' plugins is not
// built (nvidia's always is: make builds it).
func optionalPlugins(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		path := filepath.Join(dir, "libflagcx-"+n+".so")
		if _, err := os.Stat(path); err != nil {
			t.Skipf("%s is not built (the %s plugin is optional here)", path, n)
		}
	}
}

// TestBenchHeterogeneousEmulated: GPUs (emulated NVIDIA) and CPUs in one
// communicator, every collective, type and op checked exactly.
func TestBenchHeterogeneousEmulated(t *testing.T) {
	r := runFlagcx(t, 5*time.Minute, cleanEnv(), "--plugin-dir", pluginDir(t), "bench", "all", "--ranks", "nvidia:2,host:2",
		"--emulated", "-c", "1", "-d", "all", "-o", "all", "-b", "0", "-e", "64K", "-f", "8")
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	rows := tableRows(t, r.stdout)
	require.Len(t, rows, 7*(3*10*5+7*10)) // 7 sizes (0 1 8 64 512 4K 32K) x (3 reducing collectives x 10 types x 5 ops + 7 others x 10 types)
	for _, want := range []string{
		"# Communicator: heterogeneous, 2 cluster(s)",
		"#   cluster 0: NVIDIA (nvidia plugin, EMULATED), ranks 0,1, leader 0\n",
		"#   cluster 1: host (cpu), ranks 2,3, leader 2\n",
		"# Timing: per rank",
		"backend host (cpu)",
	} {
		require.Contains(t, r.stdout, want)
	}
	require.Equal(t, 2, strings.Count(r.stdout, "(emulated)\n"), "the two nvidia ranks' device lines say emulated")
}

// TestBenchHeterogeneousLayouts: three vendors and the host (2+1+2), a
// split list on one vendor with the plans printed, and the forced host path.
func TestBenchHeterogeneousLayouts(t *testing.T) {
	dir := pluginDir(t)
	cases := []struct {
		name   string
		env    []string
		ranks  string
		plugin []string
		args   []string
		want   []string
	}{
		{"three vendors and host", nil, "kunlunxin:2,metax:1,host:2", []string{"kunlunxin", "metax"}, []string{"all", "-d", "all", "-o", "all"},
			[]string{"heterogeneous, 3 cluster(s)", "cluster 0: Kunlunxin (kunlunxin plugin, EMULATED), ranks 0,1, leader 0", "cluster 1: MetaX (metax plugin, EMULATED), ranks 2, leader 2", "cluster 2: host (cpu), ranks 3,4, leader 3"}},
		{"split list on one vendor", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1", "FLAGCX_DEBUG_SUBSYS=COLL"}, "nvidia:2", nil, []string{"allreduce", "-o", "all", "--print-plan"},
			[]string{"heterogeneous, 2 cluster(s); schedules: c2c-shm", "cluster 1: NVIDIA (nvidia plugin, EMULATED), ranks 1, leader 1", "# Plans of allreduce float32 sum at 4096 bytes", "plan rank 1: AllReduce float32 sum count 1024: path c2c-shm", "relay (one launch", "on the device, fold float32 sum: win0[0:4K] + send[0:4K] -> recv[0:4K]"}},
		{"split list, staged (no shared memory)", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1", "FLAGCX_SHM_DISABLE=1"}, "nvidia:2", nil, []string{"allreduce", "-o", "all", "--print-plan"},
			[]string{"schedules: c2c for allreduce", "plan rank 1: AllReduce float32 sum count 1024: path c2c", "inter AllReduce float32 sum stage[0:4K] in place"}},
		{"forced host path", []string{"FLAGCX_USE_HOST_COMM=1"}, "nvidia:2,host:2", nil, []string{"all", "-d", "all", "--print-plan"},
			[]string{"schedules: host path (FLAGCX_USE_HOST_COMM=1)", "path host", "world AllReduce"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			optionalPlugins(t, dir, c.plugin...)
			args := append([]string{"--plugin-dir", dir, "--emulated", "bench"}, c.args...)
			args = append(args, "--ranks", c.ranks, "-b", "0", "-e", "4K", "-f", "8", "-w", "1", "-n", "2")
			r := runFlagcx(t, 3*time.Minute, cleanEnv(c.env...), args...)
			require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			tableRows(t, r.stdout)
			for _, w := range c.want {
				require.Contains(t, r.stdout, w)
			}
			if strings.Contains(strings.Join(c.env, " "), "COLL") {
				require.Regexp(t, `\[1\] COLL plan rank 1: AllReduce float32 \w+ count \d+: path c2c`, r.stderr, "FLAGCX_DEBUG_SUBSYS=COLL prints each rank's plans")
			}
		})
	}
}

// TestBenchNvidiaEmulatedDefaults is the plugin issue's own command:
// `bench all --ranks nvidia:2 --emulated -c 1` at the default sizes.
// Its JSON says the run was emulated.
func TestBenchNvidiaEmulatedDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	r := runFlagcx(t, 5*time.Minute, cleanEnv(), "--plugin-dir", pluginDir(t), "bench", "all", "--ranks", "nvidia:2", "--emulated", "-c", "1", "--json", path)
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Len(t, tableRows(t, r.stdout), 10*21) // 10 collectives x sizes 8 B..8 MiB
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		Emulated *bool `json:"emulated"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.NotNil(t, doc.Emulated)
	require.True(t, *doc.Emulated)
}

// TestInterrupt: SIGINT (Ctrl-C) or SIGTERM to a local launch stops every
// rank, then the launcher exits 128 + the signal (as the shell reports a
// program the signal ended) with one short line.
// progressLineRE matches the progress lines bench writes to stderr off a
// terminal.
var progressLineRE = regexp.MustCompile(`^rank \d+: flagcx bench: `)

func TestInterrupt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	for _, c := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			cmd := exec.Command(flagcxBin(t), "bench", "allreduce", "--np", "2", "-b", "64K", "-e", "64K", "-w", "0", "-n", "1000000000", "-c", "0")
			cmd.Env = cleanEnv()
			cmd.Dir = t.TempDir()
			out, errb, done := startBackground(t, cmd)
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
			})
			// The header means both ranks joined and the timed loop, which
			// would run for hours, has begun.
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "# Using devices") }, time.Minute, 20*time.Millisecond,
				"stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			rankPids := ranks(cmd.Process.Pid)
			require.Len(t, rankPids, 2, "the launcher's rank processes")

			require.NoError(t, cmd.Process.Signal(c.sig))
			var err error
			select {
			case err = <-done:
				done <- err // for the cleanup
			case <-time.After(30 * time.Second):
				t.Fatalf("flagcx did not exit within 30s of %v\nstderr:\n%s", c.sig, errb.String())
			}
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, c.code, ee.ExitCode(), "stderr:\n%s", errb.String())
			for _, pid := range rankPids {
				_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
				require.True(t, os.IsNotExist(err), "rank process %d is still there", pid)
			}
			// Off a terminal rank 0 shows a progress line per size; the
			// interruption itself is one line.
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
				if !progressLineRE.MatchString(l) {
					lines = append(lines, l)
				}
			}
			require.Len(t, lines, 1, "one short line:\n%s", errb.String())
			require.Regexp(t, `^flagcx: error: interrupted \(`+c.sig.String()+`, passed on to every rank\)$`, lines[0])
		})
	}
}
