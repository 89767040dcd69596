package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Emulated hosts: the tests' side of tools/hosts/hosts.sh, which does the
// work (one implementation for users and tests). Each host has its own
// network namespace (eth0 on a bridge, 10.199.0.<i+1>), host name, pid
// namespace and /dev/shm; Hosts makes a set and removes it when the test
// ends.

// Namespaces: root with network, pid, mount and UTS namespaces, iproute2
// and util-linux, for the emulated hosts. CI runs as root and has them.
var Namespaces = Need{
	What: "root with network, pid and mount namespaces (ip, unshare, nsenter)",
	InCI: true,
	Fix:  "run the test as root on Linux with iproute2 and util-linux installed",
}

// EnvHostsPrefix starts the names of the tests' namespaces (default
// "fxt"), so that test runs sharing a machine can tell theirs apart.
const EnvHostsPrefix = "FLAGCX_TEST_HOSTS_PREFIX"

// HostOption changes how Hosts builds the set.
type HostOption string

// Decoy gives every host an up interface ahead of eth0 by index, with an
// address (10.198.0.<i+1>/24) that reaches no other host: a multi-NIC
// host's unreachable interface.
const Decoy HostOption = "--decoy"

// HostSet is a set of emulated hosts.
type HostSet struct {
	Prefix string // namespace and host name prefix: host i is Prefix+i
	Hosts  []Host
	script string
	state  string
}

// Host is one emulated host.
type Host struct {
	Index int
	Name  string // host name and network namespace
	Addr  string // IPv4 address of its eth0
	set   *HostSet
}

var hostSets atomic.Int32

// Hosts makes n emulated hosts, removed (namespaces, links, processes,
// mounts) when the test ends. Without root or the tools it skips (fails
// under CI).
func Hosts(t testing.TB, n int, opts ...HostOption) *HostSet {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, Namespaces, "running as uid %d", os.Geteuid())
	}
	for _, tool := range []string{"ip", "unshare", "nsenter", "mount", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			Skip(t, Namespaces, "%s not found", tool)
		}
	}
	base := os.Getenv(EnvHostsPrefix)
	if base == "" {
		base = "fxt"
	}
	s := &HostSet{
		Prefix: fmt.Sprintf("%s-%d-%d-", base, os.Getpid(), hostSets.Add(1)),
		script: filepath.Join(RepoRoot(t), "tools", "hosts", "hosts.sh"),
		state:  t.TempDir(),
	}
	s.removeOrphans(base)
	args := []string{"up"}
	for _, o := range opts {
		args = append(args, string(o))
	}
	out, err := s.do(append(args, strconv.Itoa(n))...)
	t.Cleanup(func() {
		if out, err := s.do("down"); err != nil {
			t.Errorf("emulated hosts %s*: down: %v: %s", s.Prefix, err, out)
		}
		if left := s.namespacesLeft(); left != "" {
			t.Errorf("emulated hosts %s*: namespaces left after down: %s", s.Prefix, left)
		}
	})
	if err != nil {
		Skip(t, Namespaces, "making %d emulated hosts: %v: %s", n, err, out)
	}
	for i := 0; i < n; i++ {
		s.Hosts = append(s.Hosts, Host{Index: i, Name: s.Prefix + strconv.Itoa(i), Addr: fmt.Sprintf("10.199.0.%d", i+1), set: s})
	}
	return s
}

// script runs hosts.sh on this set with args.
func (s *HostSet) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, s.script, append([]string{"-p", s.Prefix, "-s", s.state}, args...)...)
}

// do runs a short hosts.sh command (up, down, kill...), at most a minute.
func (s *HostSet) do(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.command(ctx, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// removeOrphans removes the sets of test processes that died before their
// cleanup (killed by go test's timeout, say): their namespaces carry the
// dead process's id.
func (s *HostSet) removeOrphans(base string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	re := regexp.MustCompile(`^(` + regexp.QuoteMeta(base) + `-(\d+)-\d+-)(sw|\d+)$`)
	done := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := re.FindStringSubmatch(f[0])
		if m == nil || done[m[1]] {
			continue
		}
		if pid, _ := strconv.Atoi(m[2]); pid > 0 && syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		done[m[1]] = true
		orphan := &HostSet{Prefix: m[1], script: s.script, state: s.state}
		_, _ = orphan.do("down")
	}
}

func (s *HostSet) namespacesLeft() string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return ""
	}
	var left []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], s.Prefix) {
			left = append(left, f[0])
		}
	}
	return strings.Join(left, ", ")
}

// Command is name with args run inside h, in the caller's working
// directory (cmd.Dir is ignored: set the directory in the command). The
// command's exit status is the process's; ctx kills the command's nsenter,
// not what runs in the host: Kill the host for that.
func (h Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return h.set.command(ctx, append([]string{"exec", strconv.Itoa(h.Index), name}, args...)...)
}

// Ranks starts perHost ranks of args on every host as hosts.sh run does
// (FLAGCX_COMM_ID on host 0, FLAGCX_NRANKS, FLAGCX_RANK, FLAGCX_LOCAL_RANK,
// FLAGCX_LOCAL_SIZE, one FLAGCX_COMM_SECRET); rank r's stdout goes to
// out/rank<r>.log, its stderr to out/rank<r>.err and its exit status to
// out/rank<r>.rc (RankResult).
func (s *HostSet) Ranks(ctx context.Context, perHost int, out string, args ...string) *exec.Cmd {
	return s.command(ctx, append([]string{"run", "-n", strconv.Itoa(perHost), "--out", out, "--"}, args...)...)
}

// RankOutcome is how one rank of a Ranks run ended.
type RankOutcome struct {
	Stdout, Stderr string
	Code           int
	Ended          bool // false while the rank runs: Code means nothing yet
}

// RankResult reads rank r's outcome from a Ranks run in out.
func RankResult(out string, r int) RankOutcome {
	var o RankOutcome
	b, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank%d.log", r)))
	e, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank%d.err", r)))
	o.Stdout, o.Stderr = string(b), string(e)
	c, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank%d.rc", r)))
	if err != nil {
		return o
	}
	o.Code, err = strconv.Atoi(strings.TrimSpace(string(c)))
	o.Ended = err == nil
	return o
}

// Kill crashes h: every process in it is killed at once, its /dev/shm
// goes with it.
func (h Host) Kill() error { return h.run("kill") }

// Stop freezes every process of h (SIGSTOP); Cont resumes them.
func (h Host) Stop() error { return h.run("stop") }

// Cont resumes the processes Stop froze.
func (h Host) Cont() error { return h.run("cont") }

// Link pulls (up false) or plugs back (up true) h's cable: its port on the
// bridge goes down, its eth0 keeps its address.
func (h Host) Link(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return h.run("link", state)
}

// Leftovers is an error naming the processes (but the host's init) and
// /dev/shm entries left in h; nil when it is clean.
func (h Host) Leftovers() error { return h.run("check") }

func (h Host) run(verb string, args ...string) error {
	out, err := h.set.do(append([]string{verb, strconv.Itoa(h.Index)}, args...)...)
	if err != nil {
		return fmt.Errorf("emulated host %s: %s: %w: %s", h.Name, verb, err, out)
	}
	return nil
}
