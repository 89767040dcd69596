package vendorsim

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
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

// runHosts starts the n ranks of scenario on `hosts` emulated hosts, rank
// r on host r % hosts, and waits for all of them.
func runHosts(t *testing.T, scenario string, n, hosts int, env []string) hostsRun {
	t.Helper()
	if os.Geteuid() != 0 {
		testkit.Skip(t, needHosts, "not root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testkit.Skip(t, needHosts, "%v", err)
	}
	e := testEmulators(t)
	var id uniqueID
	require.Equal(t, int32(ncclSuccess), e.nccl.GetUniqueID(&id))
	dir := t.TempDir()
	base := append(os.Environ(), testkit.EnvWorker+"="+ncclWorker, testkit.EnvNranks+"="+fmt.Sprint(n),
		testkit.EnvID+"="+hex.EncodeToString(id.Internal[:]), envScenario+"="+scenario,
		envLibRoot+"="+testkit.RepoRoot(t), "VSIM_TEST_BIN="+os.Args[0])
	base = append(base, env...)
	res := hostsRun{runs: make([]rankRun, n), shmLeft: map[int]string{}, logs: map[int]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for h := range hosts {
		var script strings.Builder
		script.WriteString("mount -t tmpfs -o size=256m span-shm /dev/shm || exit 97\n")
		for r := h; r < n; r += hosts {
			fmt.Fprintf(&script, "%s=%d %s=%s \"$VSIM_TEST_BIN\" -test.run='^$' > %s 2>&1 &\npid%d=$!\n",
				testkit.EnvRank, r, testkit.EnvOut, filepath.Join(dir, fmt.Sprintf("rank%d.json", r)),
				filepath.Join(dir, fmt.Sprintf("rank%d.log", r)), r)
		}
		for r := h; r < n; r += hosts {
			fmt.Fprintf(&script, "wait $pid%d || echo \"rank %d exited with status $?\"\n", r, r)
		}
		script.WriteString("echo \"SHM-LEFT:$(ls -A /dev/shm | tr '\\n' ' ')\"\n")
		cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", script.String())
		cmd.Env = base
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
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.json", r)))
		require.NoError(t, err, "rank %d wrote no report; host %d:\n%s\nrank log:\n%s", r, r%hosts, res.logs[r%hosts], log)
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
