//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/launch"
)

// segmentsOf lists the /dev/shm segments whose creator is one of pids
// (segment names carry the creator's pid: flagcx-<boot>-<pidns>-<pid>-<token>).
func segmentsOf(pids map[int]bool) []string {
	ents, _ := os.ReadDir("/dev/shm")
	var out []string
	for _, e := range ents {
		f := strings.Split(e.Name(), "-")
		if len(f) != 5 || f[0] != "flagcx" {
			continue
		}
		if pid, err := strconv.Atoi(f[3]); err == nil && pids[pid] {
			out = append(out, e.Name())
		}
	}
	return out
}

// ranks are the launcher's children that are ranks: processes that have
// exec'ed with FLAGCX_RANK in their environment. Other children exist:
// Go's runtime probes clone(CLONE_PIDFD) with a child that exits at once
// before the first exec, and a child between fork and exec is not a rank yet.
func ranks(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			env, _ := os.ReadFile("/proc/" + f + "/environ")
			if bytes.Contains(env, []byte("\x00"+launch.EnvRank+"=")) || bytes.HasPrefix(env, []byte(launch.EnvRank+"=")) {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestKilledRankLeavesNoSegment: a rank killed with SIGKILL while its
// segment exists on disk (during setup) or while the ranks run collectives
// leaves no segment once the job has ended, and the job ends with an error
// rather than a hang.
func TestKilledRankLeavesNoSegment(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	for _, tc := range []struct {
		name string
		// ready says when to kill victim.
		ready func(victim int, out *lockedBuffer) bool
	}{
		{"while its segment is on disk", func(victim int, _ *lockedBuffer) bool {
			return len(segmentsOf(map[int]bool{victim: true})) > 0
		}},
		{"inside collectives", func(_ int, out *lockedBuffer) bool {
			return strings.Contains(out.String(), "float32")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(flagcxBin(t), "bench", "allreduce", "--np", "4", "-b", "1K", "-e", "4M", "-f", "2", "-n", "2000", "-c", "0")
			cmd.Env = cleanEnv("FLAGCX_TIMEOUT=5")
			out, errb, done := startBackground(t, cmd)
			pids := map[int]bool{}
			victim := 0
			deadline := time.Now().Add(30 * time.Second)
			for victim == 0 || !tc.ready(victim, out) {
				require.True(t, time.Now().Before(deadline), "the moment to kill never came; stderr:\n%s", errb.String())
				for _, c := range ranks(cmd.Process.Pid) {
					pids[c] = true
					if victim == 0 {
						victim = c
					}
				}
				time.Sleep(200 * time.Microsecond)
			}
			require.NoError(t, syscall.Kill(victim, syscall.SIGKILL), "rank process %d is gone already; stdout:\n%s\nstderr:\n%s", victim, out.String(), errb.String())
			for _, c := range ranks(cmd.Process.Pid) {
				pids[c] = true
			}
			select {
			case err := <-done:
				require.Error(t, err, "the job went on without a rank")
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("the job did not end after a rank was killed; stderr:\n%s", errb.String())
			}
			require.Empty(t, segmentsOf(pids), "segments left behind; stderr:\n%s", errb.String())
		})
	}
}

// lockedBuffer is a bytes.Buffer that a child's output may fill while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBackground starts cmd with its output gathered in locked buffers as
// it comes; done receives Wait's result once.
func startBackground(t *testing.T, cmd *exec.Cmd) (out, errb *lockedBuffer, done chan error) {
	t.Helper()
	out, errb, done = &lockedBuffer{}, &lockedBuffer{}, make(chan error, 1)
	cmd.Stdout, cmd.Stderr = out, errb
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	return out, errb, done
}

// startTagged is startBackground for a job whose every process carries
// tag in its environment: when the test ends, the job and whatever it
// left running (a stopped rank included) are killed.
func startTagged(t *testing.T, cmd *exec.Cmd, tag string) (out, errb *lockedBuffer, done chan error) {
	t.Helper()
	out, errb, done = startBackground(t, cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for _, p := range processesWith(tag) {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return out, errb, done
}

// TestBenchExactOnShmAndTCP: every collective, data type and op gives exact
// results on 2..9 ranks at odd sizes (whole windows, slices that do not
// divide evenly, the one-step and two-step reductions), through shared
// memory and through TCP; and a large odd size that spans several steps.
func TestBenchExactOnShmAndTCP(t *testing.T) {
	for _, transport := range []string{"shm", "tcp"} {
		for np := 2; np <= 9; np++ {
			t.Run(fmt.Sprintf("%s/np%d", transport, np), func(t *testing.T) {
				env := cleanEnv()
				if transport == "tcp" {
					env = append(env, "FLAGCX_SHM_DISABLE=1")
				}
				r := runFlagcx(t, 3*time.Minute, env, "bench", "all", "--np", strconv.Itoa(np),
					"-b", "3", "-e", "90000", "-f", "13", "-w", "1", "-n", "1", "-c", "1", "-d", "all", "-o", "all")
				require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				require.Contains(t, r.stdout, "# Out of bounds values : 0 OK\n")
			})
		}
	}
	for _, dt := range []string{"bfloat16", "int8", "float64"} {
		t.Run("shm/np5/2300001B/"+dt, func(t *testing.T) {
			r := runFlagcx(t, 3*time.Minute, cleanEnv(), "bench", "all", "--np", "5",
				"-b", "2300001", "-e", "2300001", "-w", "0", "-n", "1", "-c", "1", "-d", dt, "-o", "all")
			require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, "# Out of bounds values : 0 OK\n")
		})
	}
}
