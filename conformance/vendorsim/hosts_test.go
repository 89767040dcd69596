package vendorsim

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// Ranks of one communicator on several hosts. A host is emulated with
// `unshare --mount --pid --fork --mount-proc` and a private tmpfs on
// /dev/shm: its ranks share memory and pids with each other and with no
// other host, so the emulators must meet across hosts over TCP (the
// network stays this machine's). Each host's shell lists what its ranks
// left in its /dev/shm after they exited.

// needHosts is what emulating a host takes; CI runs as root.
var needHosts = testkit.Need{What: "unshare(1) and root (mount and pid namespaces)", InCI: true,
	Fix: "run as root on Linux with util-linux"}

// hostsRun is the outcome of runHosts.
type hostsRun struct {
	runs    []rankRun
	shmLeft map[int]string // host -> what `ls -A /dev/shm` printed there after its ranks exited
	logs    map[int]string
}

var shmLeftRe = regexp.MustCompile(`(?m)^SHM-LEFT:(.*)$`)

// onHosts runs n rank commands on `hosts` emulated hosts, rank r on host
// r % hosts; rankEnv gives rank r's extra environment and argv its
// command. Each rank's output goes to dir/rank<r>.log.
func onHosts(t *testing.T, dir string, n, hosts int, env []string, rankEnv func(r int) []string, argv func(r int) []string) hostsRun {
	t.Helper()
	if os.Geteuid() != 0 {
		testkit.Skip(t, needHosts, "not root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testkit.Skip(t, needHosts, "%v", err)
	}
	quote := func(args []string) string {
		q := make([]string, len(args))
		for i, a := range args {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		return strings.Join(q, " ")
	}
	res := hostsRun{runs: make([]rankRun, n), shmLeft: map[int]string{}, logs: map[int]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for h := range hosts {
		var script strings.Builder
		script.WriteString("mount -t tmpfs -o size=256m span-shm /dev/shm || exit 97\n")
		for r := h; r < n; r += hosts {
			fmt.Fprintf(&script, "env %s %s > %s 2>&1 &\npid%d=$!\n", strings.Join(rankEnv(r), " "),
				quote(argv(r)), filepath.Join(dir, fmt.Sprintf("rank%d.log", r)), r)
		}
		for r := h; r < n; r += hosts {
			fmt.Fprintf(&script, "wait $pid%d || echo \"rank %d exited with status $?\"\n", r, r)
		}
		script.WriteString("echo \"SHM-LEFT:$(ls -A /dev/shm | tr '\\n' ' ')\"\n")
		cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", script.String())
		cmd.Env = append(os.Environ(), env...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			mu.Lock()
			defer mu.Unlock()
			res.logs[h] = fmt.Sprintf("%s(err %v)", out, err)
			if m := shmLeftRe.FindSubmatch(out); m != nil {
				res.shmLeft[h] = strings.TrimSpace(string(m[1]))
			} else {
				res.shmLeft[h] = "(no listing: " + res.logs[h] + ")"
			}
		}()
	}
	wg.Wait()
	for h := range hosts {
		if strings.Contains(res.logs[h], "exit status 97") || strings.Contains(res.logs[h], "unshare: ") {
			testkit.Skip(t, needHosts, "cannot emulate a host: %s", res.logs[h])
		}
	}
	for r := range n {
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.log", r)))
		res.runs[r].stderr = string(log)
	}
	return res
}

// runHosts starts the n ranks of scenario on `hosts` emulated hosts, rank
// r on host r % hosts, and waits for all of them.
func runHosts(t *testing.T, scenario string, n, hosts int, env []string) hostsRun {
	t.Helper()
	e := testEmulators(t)
	var id uniqueID
	require.Equal(t, int32(ncclSuccess), e.nccl.GetUniqueID(&id))
	dir := t.TempDir()
	env = append([]string{testkit.EnvWorker + "=" + ncclWorker, testkit.EnvNranks + "=" + fmt.Sprint(n),
		testkit.EnvID + "=" + hex.EncodeToString(id.Internal[:]), envScenario + "=" + scenario,
		envLibRoot + "=" + testkit.RepoRoot(t)}, env...)
	res := onHosts(t, dir, n, hosts, env, func(r int) []string {
		return []string{fmt.Sprintf("%s=%d", testkit.EnvRank, r), testkit.EnvOut + "=" + filepath.Join(dir, fmt.Sprintf("rank%d.json", r))}
	}, func(int) []string { return []string{os.Args[0], "-test.run=^$"} })
	for r := range n {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.json", r)))
		require.NoError(t, err, "rank %d wrote no report; host %d:\n%s\nrank log:\n%s", r, r%hosts, res.logs[r%hosts], res.runs[r].stderr)
		require.NoError(t, json.Unmarshal(data, &res.runs[r].out))
	}
	return res
}

func TestCommunicatorAcrossHosts(t *testing.T) {
	for _, c := range []struct {
		scenario string
		n, hosts int
		env      []string
		check    func(*testing.T, []rankRun)
	}{
		{"allreduce", 3, 2, chunkyEnv, checkAllReduce},
		{"allreduce", 2, 2, chunkyEnv, checkAllReduce},
		{"gather", 3, 2, chunkyEnv, checkGather},
		{"rooted", 3, 3, chunkyEnv, checkRooted},
		{"p2p", 3, 2, []string{EnvMailboxBytes + "=4096", EnvTimeout + "=30"}, checkP2P},
		{"p2p", 4, 2, []string{EnvTimeout + "=30"}, checkP2P},
	} {
		t.Run(fmt.Sprintf("%s/%dranks/%dhosts", c.scenario, c.n, c.hosts), func(t *testing.T) {
			res := runHosts(t, c.scenario, c.n, c.hosts, c.env)
			for r, run := range res.runs {
				require.Empty(t, run.out.Fail, "rank %d failed; its output:\n%s", r, run.stderr)
			}
			c.check(t, res.runs)
			for h := range c.hosts {
				require.Empty(t, res.shmLeft[h], "host %d's /dev/shm after its ranks exited", h)
			}
		})
	}
}

// A rank on another host that leaves ends its peers' wait with its rank
// named, by its connection (its pid means nothing across hosts).
func TestDepartedRankAcrossHosts(t *testing.T) {
	for how, text := range map[string]string{
		"exit":    "rank 1 (pid",
		"abort":   "rank 1 aborted",
		"destroy": "rank 1 (pid",
	} {
		t.Run(how, func(t *testing.T) {
			res := runHosts(t, "early-exit", 2, 2, []string{EnvTimeout + "=5", "VSIM_TEST_HOW=" + how})
			o := res.runs[0].out
			t.Log(o.Texts["err"])
			require.Contains(t, []int{ncclRemoteError, ncclSystemError}, o.Codes["rc"], o.Texts["err"])
			require.Contains(t, o.Texts["err"], text)
			require.Less(t, o.Numbers["seconds"], 10.0, "the error must come near the 5 s deadline, not hang")
			require.Empty(t, res.shmLeft[0])
			require.Empty(t, res.shmLeft[1])
		})
	}
}

// benchRowRe matches a data row of bench's table; it captures the #wrong
// columns (out of place, in place).
var benchRowRe = regexp.MustCompile(`(?m)^\s+\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s+\S+\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\S+\s+\S+\s+(\S+)\s*$`)

// An emulated NVIDIA cluster spanning two hosts, ranks started per host
// as a launcher would: the emulated NCCL meets across the hosts, links
// between the hosts take TCP or (FLAGCX_NET=IB) the emulated verbs, inside
// a host shared memory; and a heterogeneous job whose NVIDIA and Kunlunxin
// clusters both span the hosts. Every result exact, nothing left in any
// /dev/shm.
func TestBenchAcrossHosts(t *testing.T) {
	bin := filepath.Join(testkit.RepoRoot(t), "bin", "flagcx")
	if _, err := os.Stat(bin); err != nil {
		testkit.Skip(t, testkit.Built, "%s is missing", bin)
	}
	plugins := testkit.BuiltFile(t, "plugins")
	for _, c := range []struct {
		name     string
		env      []string
		backends []string // by local rank
		network  string
	}{
		{"tcp", []string{"FLAGCX_NET=Socket"}, []string{"nvidia", "nvidia"}, "1 link shm (shared memory), 2 links tcp"},
		{"ib", []string{"FLAGCX_NET=IB"}, []string{"nvidia", "nvidia"}, "2 links ib (emulated IB"},
		// Two clusters, each spanning both hosts.
		{"hetero", nil, []string{"nvidia", "kunlunxin"}, "3 links ib (emulated IB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			const hosts, perHost = 2, 2
			l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for rank 0's rendezvous
			require.NoError(t, err)
			addr := l.Addr().String()
			require.NoError(t, l.Close())
			env := append([]string{"FLAGCX_TIMEOUT=60", "FLAGCX_COMM_ID=" + addr,
				fmt.Sprintf("FLAGCX_NRANKS=%d", hosts*perHost), fmt.Sprintf("FLAGCX_LOCAL_SIZE=%d", perHost)}, c.env...)
			res := onHosts(t, t.TempDir(), hosts*perHost, hosts, env, func(r int) []string {
				return []string{fmt.Sprintf("FLAGCX_RANK=%d", r), fmt.Sprintf("FLAGCX_LOCAL_RANK=%d", r/hosts)}
			}, func(r int) []string {
				return []string{bin, "--plugin-dir", plugins, "--emulated", "bench", "all", "--backend", c.backends[r/hosts],
					"-e", "64K", "-n", "2", "-w", "1", "-c", "1"}
			})
			out := res.runs[0].stderr
			for h := range hosts {
				require.NotContains(t, res.logs[h], "exited with status", "host %d", h)
				require.Empty(t, res.shmLeft[h], "host %d's /dev/shm after its ranks exited", h)
			}
			require.Contains(t, out, c.network, out)
			rows := benchRowRe.FindAllStringSubmatch(out, -1)
			require.Greater(t, len(rows), 50, out)
			for _, row := range rows {
				require.Equal(t, "0", row[1], "out of place: %s", row[0])
				require.Contains(t, []string{"0", "N/A"}, row[2], "in place: %s", row[0])
			}
		})
	}
}

// Segments of a rendezvous whose ranks all died before mapping them carry
// rank 0's boot id, pid namespace and pid in their names; the next
// rendezvous on the host removes those of dead processes, and only those.
func TestStaleSegmentsReclaimed(t *testing.T) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	tag := regexp.MustCompile(`[^0-9a-f]`).ReplaceAllString(string(boot), "")
	if len(tag) > 12 {
		tag = tag[:12]
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	require.NoError(t, err)
	nsID := regexp.MustCompile(`\[(\d+)\]`).FindStringSubmatch(ns)
	require.NotNil(t, nsID, ns)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	seg := func(pid int) string {
		return filepath.Join("/dev/shm", fmt.Sprintf("fxvs-%s-%s-%d-%016x", tag, nsID[1], pid, 0x5ba4))
	}
	for _, p := range []string{seg(dead.Process.Pid), seg(dead.Process.Pid) + "d", seg(os.Getpid())} {
		require.NoError(t, os.WriteFile(p, []byte("stale"), 0o600))
		t.Cleanup(func() { os.Remove(p) })
	}
	n := testEmulators(t).nccl
	var id uniqueID
	var comm uintptr
	require.Equal(t, int32(ncclSuccess), n.GetUniqueID(&id))
	require.Equal(t, int32(ncclSuccess), n.CommInitRank(&comm, 1, id, 0), n.GetLastError(0))
	require.Equal(t, int32(ncclSuccess), n.CommDestroy(comm))
	require.NoFileExists(t, seg(dead.Process.Pid), "a dead rank 0's header segment")
	require.NoFileExists(t, seg(dead.Process.Pid)+"d", "a dead rank 0's data segment")
	require.FileExists(t, seg(os.Getpid()), "a live process's segment stays")
}
