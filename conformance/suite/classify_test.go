package suite

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deadWorker is a worker whose process ended with the given stderr (a
// real process: its exit status is real).
func deadWorker(t *testing.T, script, stderr string) *workerProc {
	t.Helper()
	pr := &procRunner{stderr: &tailBuffer{max: 1 << 10}, done: make(chan struct{})}
	_, _ = pr.stderr.Write([]byte(stderr))
	cmd := exec.Command("sh", "-c", script)
	_, err := pr.init(cmd)
	require.NoError(t, err)
	require.NoError(t, pr.Start(context.Background()))
	go func() { _, _ = io.Copy(io.Discard, pr.stdout) }()
	go func() { _, _ = io.Copy(io.Discard, pr.errOut) }()
	_ = pr.Wait(context.Background())
	return &workerProc{proc: pr}
}

func liveWorker() *workerProc {
	return &workerProc{proc: &procRunner{stderr: &tailBuffer{max: 1 << 10}, done: make(chan struct{})}}
}

// TestDeathReason: how a worker ended, from its exit state and stderr.
func TestDeathReason(t *testing.T) {
	cases := []struct {
		name, script, stderr, want string
	}{
		{"killed by SIGSEGV", "kill -SEGV $$", "", `^signal SIGSEGV \(segmentation fault\)$`},
		{"killed by SIGABRT", "kill -ABRT $$", "plugin: assertion failed\n", `^signal SIGABRT \(aborted\); last stderr line: plugin: assertion failed$`},
		{"Go runtime report", "exit 2", "SIGSEGV: segmentation violation\nPC=0x7f m=3 sigcode=1 addr=0x0\nsignal arrived during cgo execution\n",
			`^signal SIGSEGV \(segmentation violation\), reported by the Go runtime of the worker \(exit status 2\)$`},
		{"Go runtime bracket", "exit 2", "fatal error: unexpected signal\n[signal SIGBUS: bus error code=0x2 addr=0x1 pc=0x2]\n",
			`^signal SIGBUS \(bus error\), reported by the Go runtime`},
		{"exit status", "exit 3", "cannot open libfoo.so\n", `^exit status 3; last stderr line: cannot open libfoo.so$`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := deadWorker(t, c.script, c.stderr)
			require.True(t, w.exited())
			require.Regexp(t, c.want, w.deathReason(time.Second))
			require.Empty(t, w.proc.ID(), "an ended worker has no id, so go-plugin's Kill does not talk to it")
		})
	}
	require.Empty(t, liveWorker().deathReason(10*time.Millisecond), "a running worker has no death reason")
}

// TestTailBuffer keeps the start and the end of a long stream.
func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 20}
	_, _ = b.Write([]byte("0123456789"))
	_, _ = b.Write([]byte(strings.Repeat("x", 100)))
	_, _ = b.Write([]byte("abcdefghij"))
	require.Equal(t, "0123456789\n...\nabcdefghij", b.String())
	small := &tailBuffer{max: 100}
	_, _ = small.Write([]byte("short"))
	require.Equal(t, "short", small.String())
}

// TestClassify: the ranks' answers become one status, a reason, and
// whether the workers must be restarted.
func TestClassify(t *testing.T) {
	ok := rankOutcome{res: RankResult{Status: rankOK}}
	wrong := rankOutcome{res: RankResult{Status: rankWrong, Detail: "recv buffer: 1 of 7 int32 elements differ"}}
	failed := rankOutcome{res: RankResult{Status: rankError, Detail: "plugin x: allReduce: invalid argument"}}
	unsup := rankOutcome{res: RankResult{Status: rankUnsupported, Detail: "plugin x: alltoAll: not supported"}}
	hung := rankOutcome{err: context.DeadlineExceeded}
	stopped := rankOutcome{err: errStopped}
	crashed := rankOutcome{err: errors.New("unexpected EOF")}
	cases := []struct {
		name          string
		outs          []rankOutcome
		dead          []int // ranks whose process died of SIGSEGV
		level         Level
		declared      bool // the case's type and op are in the plugin's masks
		st            Status
		reason        string
		broken, trips bool
	}{
		{"all ok", []rankOutcome{ok, ok, ok}, nil, MUST, false, Passed, `^$`, false, false},
		{"wrong on one rank", []rankOutcome{ok, wrong}, nil, MUST, false, Failed, `^wrong result: rank 1: recv buffer: 1 of 7`, false, false},
		{"wrong on two ranks", []rankOutcome{wrong, wrong}, nil, SHOULD, false, Failed, `^wrong result: rank 0: .* \(and 1 more ranks\)$`, false, false},
		{"error", []rankOutcome{failed, ok}, nil, MUST, false, Failed, `^error: rank 0: plugin x: allReduce: invalid argument$`, true, false},
		{"error while a peer waits", []rankOutcome{failed, stopped}, nil, MUST, false, Failed, `^error: rank 0: .*; rank 1 did not finish within 3s after that$`, true, false},
		{"unsupported SHOULD", []rankOutcome{unsup, unsup}, nil, SHOULD, false, Skipped, `^not supported: rank 0: plugin x: alltoAll`, true, false},
		{"unsupported MUST", []rankOutcome{unsup, unsup}, nil, MUST, false, Failed, `^not supported, but required \(MUST\): `, true, false},
		{"unsupported although declared", []rankOutcome{unsup, unsup}, nil, MAY, true, Failed, `^not supported, although the plugin declares the data type and op in its masks: rank 0`, true, false},
		{"wrong beats error", []rankOutcome{wrong, failed}, nil, MAY, false, Failed, `^wrong result: `, true, false},
		{"hang", []rankOutcome{hung, hung}, nil, MUST, false, Failed, `^deadline: rank 0, 1 did not finish within 5s while running the case \(a hang\?\)`, true, true},
		{"crash", []rankOutcome{crashed, failed}, []int{0}, MUST, false, Failed,
			`^crash: rank 0: signal SIGSEGV \(segmentation fault\) \(while running the case\); rank 1: plugin x: allReduce`, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &session{n: len(c.outs)}
			for i := range c.outs {
				w := liveWorker()
				for _, d := range c.dead {
					if d == i {
						w = deadWorker(t, "kill -SEGV $$", "")
					}
				}
				s.workers = append(s.workers, w)
			}
			st, reason, broken, trips := s.classify(c.outs, c.level, c.declared, 5*time.Second)
			require.Equal(t, c.st, st)
			require.Regexp(t, c.reason, reason)
			require.Equal(t, c.broken, broken, "restart")
			require.Equal(t, c.trips, trips, "crashed or hung")
		})
	}
}
