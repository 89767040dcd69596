package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/flagcx/flagcx-go/internal/base/env"
)

// The workers are go-plugin plugins over net/rpc. The handshake's cookie
// only keeps `flagcx conformance --worker` from being run by hand.
var handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   env.ConformanceWorker.Name,
	MagicCookieValue: "2f1c6b0e-rank-worker",
}

const pluginKey = "rank"

// IsWorker reports whether this process was started by the suite as a
// worker (the handshake cookie is set).
func IsWorker() bool {
	v, _ := env.ConformanceWorker.Raw(nil)
	return v == handshake.MagicCookieValue
}

// ServeWorker serves one rank worker over go-plugin and returns when the
// runner closes it. Call it from the process the runner started (see
// Options.Worker); it exits the process when done.
func ServeWorker() {
	// A worker outlives nothing: when the runner is gone (killed, crashed,
	// interrupted), its parent changes and the worker exits, even while a
	// plugin entry holds one of its threads.
	ppid := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != ppid {
				os.Exit(3)
			}
		}
	}()
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins:         goplugin.PluginSet{pluginKey: &rankPlugin{}},
		Logger:          hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: os.Stderr}),
	})
	os.Exit(0)
}

// rankPlugin is go-plugin's factory for both sides: the worker serves a
// WorkerRPC, the runner gets a rankClient.
type rankPlugin struct{}

func (*rankPlugin) Server(*goplugin.MuxBroker) (any, error) { return &WorkerRPC{w: &worker{}}, nil }
func (*rankPlugin) Client(_ *goplugin.MuxBroker, c *rpc.Client) (any, error) {
	return &rankClient{c: c}, nil
}

// rankClient is the runner's typed client of one worker: one method per
// WorkerRPC method, each bounded by its context.
type rankClient struct{ c *rpc.Client }

func (r *rankClient) Open(ctx context.Context, a OpenArgs) (OpenReply, error) {
	return call[OpenReply](ctx, r.c, "Open", a)
}

func (r *rankClient) UniqueIDs(ctx context.Context, n int) ([][]byte, error) {
	return call[[][]byte](ctx, r.c, "UniqueIDs", n)
}

func (r *rankClient) Join(ctx context.Context, a JoinArgs) (RankResult, error) {
	return call[RankResult](ctx, r.c, "Join", a)
}

func (r *rankClient) Run(ctx context.Context, a RunArgs) (RankResult, error) {
	return call[RankResult](ctx, r.c, "Run", a)
}

func (r *rankClient) Leave(ctx context.Context) (RankResult, error) {
	return call[RankResult](ctx, r.c, "Leave", true)
}

// call runs one RPC, giving up when ctx ends. The answer is decoded into a
// value of its own, returned only when it arrived in time, so an abandoned
// call never writes into the caller's memory later.
func call[T any](ctx context.Context, c *rpc.Client, method string, args any) (T, error) {
	reply := new(T)
	done := c.Go("Plugin."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-done.Done:
		return *reply, done.Error
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// ---- Messages ----------------------------------------------------------------

// OpenArgs tell a worker which plugin to load.
type OpenArgs struct {
	Path         string
	Emulated     bool
	VendorsimDir string
}

// LibraryInfo is one vendor library as init reported it.
type LibraryInfo struct {
	Role     string `json:"role"`
	Path     string `json:"path,omitempty"`
	Version  string `json:"version,omitempty"`
	Loaded   bool   `json:"loaded"`
	Emulated bool   `json:"emulated"`
	Error    string `json:"error,omitempty"`
}

// PluginInfo is what a worker found out about the plugin.
type PluginInfo struct {
	Name      string          `json:"name"`
	Vendor    string          `json:"vendor,omitempty"`
	Version   string          `json:"version,omitempty"`
	Path      string          `json:"path"`
	ABI       int             `json:"abi,omitempty"`
	Caps      string          `json:"caps,omitempty"`
	HasDevice bool            `json:"-"`
	HasCCL    bool            `json:"-"`
	Emulated  bool            `json:"emulated"`
	DataTypes []string        `json:"dataTypes,omitempty"`
	RedOps    []string        `json:"redOps,omitempty"`
	Devices   int             `json:"devices"`
	Entries   map[string]bool `json:"-"`
	NullOpt   []string        `json:"nullEntries,omitempty"` // OPTIONAL entries left NULL
	Libraries []LibraryInfo   `json:"libraries,omitempty"`
}

// OpenReply is the answer to Open. Problem is set when the plugin cannot be
// used; Kind classifies it ("unknown ABI", "bad table", "init failed", ...).
type OpenReply struct {
	Info    PluginInfo
	Kind    string
	Problem string
}

// JoinArgs make a worker a rank of a communicator.
type JoinArgs struct {
	NRanks, Rank, Dev int
	ID                []byte
}

// RunArgs run one case on a worker.
type RunArgs struct {
	Case string // its id, for messages
	Spec Spec
}

// Rank outcomes.
const (
	rankOK          = "ok"
	rankWrong       = "wrong"       // a wrong result: always a failure
	rankError       = "error"       // an entry failed
	rankUnsupported = "unsupported" // an entry said flagcxNotSupported
)

// RankResult is one rank's outcome of a case.
type RankResult struct {
	Status string
	Detail string
	Note   string // what the case measured on this rank, whatever its verdict (Result.Detail)
}

// ---- Runner side: one worker process -------------------------------------------

// workerProc is one running worker: the go-plugin client, the typed
// client of its calls and the process underneath (exit status, last lines
// of stderr).
type workerProc struct {
	rank   int
	client *goplugin.Client
	rpc    *rankClient
	proc   *procRunner
}

// startWorker starts the worker command and connects to it.
func startWorker(cmdline []string, rank int, timeout time.Duration, passStderr io.Writer) (*workerProc, error) {
	pr := &procRunner{stderr: &tailBuffer{max: 16 << 10}, done: make(chan struct{})}
	var stderr io.Writer = pr.stderr
	if passStderr != nil {
		stderr = io.MultiWriter(pr.stderr, passStderr)
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          goplugin.PluginSet{pluginKey: &rankPlugin{}},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolNetRPC},
		Logger:           hclog.NewNullLogger(),
		StartTimeout:     timeout,
		Stderr:           stderr,
		SyncStderr:       stderr,
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
			cmd := exec.Command(cmdline[0], cmdline[1:]...)
			cmd.Env = spec.Env
			cmd.Stdin = nil
			pr.socketDir = socketDir
			return pr.init(cmd)
		},
	})
	w := &workerProc{rank: rank, client: client, proc: pr}
	proto, err := client.Client()
	if err == nil {
		var raw any
		if raw, err = proto.Dispense(pluginKey); err == nil {
			w.rpc = raw.(*rankClient)
			return w, nil
		}
	}
	reason := w.deathReason(2 * time.Second)
	w.kill()
	if reason != "" {
		return nil, fmt.Errorf("worker for rank %d did not start: %s (%w)", rank, reason, err)
	}
	return nil, fmt.Errorf("worker for rank %d did not start: %w", rank, err)
}

// kill ends the worker at once (it may be stuck in a plugin entry). Once
// the process is gone there is nothing to say goodbye to: go-plugin's Kill
// then only cleans up (it would otherwise write to the dead connection).
func (w *workerProc) kill() {
	_ = w.proc.Kill(context.Background())
	if w.proc.cmd != nil && w.proc.cmd.Process != nil { // it started: go-plugin waits for it
		select {
		case <-w.proc.done:
		case <-time.After(10 * time.Second):
		}
	}
	w.client.Kill()
	if w.proc.socketDir != "" {
		_ = os.RemoveAll(w.proc.socketDir)
	}
}

// close asks the worker to leave gracefully (go-plugin's Kill closes the
// connection; the worker exits), killing it if it does not.
func (w *workerProc) close() {
	done := make(chan struct{})
	go func() { w.client.Kill(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = w.proc.Kill(context.Background())
		<-done
	}
}

// exited reports whether the process has ended.
func (w *workerProc) exited() bool {
	select {
	case <-w.proc.done:
		return true
	default:
		return false
	}
}

// deathReason waits up to wait for the process to end and says how it
// ended: "signal SIGSEGV (segmentation violation)", "exit status 3", ...
// It is "" when the process is still running.
func (w *workerProc) deathReason(wait time.Duration) string {
	if w.proc.cmd != nil && w.proc.cmd.Process == nil {
		return "" // never started: the error says why
	}
	select {
	case <-w.proc.done:
	case <-time.After(wait):
		return ""
	}
	return w.proc.reason()
}

// ---- procRunner: go-plugin's runner.Runner over exec.Cmd, keeping the exit state

type procRunner struct {
	cmd            *exec.Cmd
	stdout, errOut io.ReadCloser
	stderr         *tailBuffer
	socketDir      string
	done           chan struct{}
	waitOnce       sync.Once
	waitErr        error
	state          *os.ProcessState
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) init(cmd *exec.Cmd) (*procRunner, error) {
	var err error
	r.cmd = cmd
	if r.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if r.errOut, err = cmd.StderrPipe(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *procRunner) Start(context.Context) error { return r.cmd.Start() }

// Wait is called once by go-plugin (after the pipes are drained).
func (r *procRunner) Wait(context.Context) error {
	r.waitOnce.Do(func() {
		r.waitErr = r.cmd.Wait()
		r.state = r.cmd.ProcessState
		close(r.done)
	})
	<-r.done
	return r.waitErr
}

func (r *procRunner) Kill(context.Context) error {
	if r.cmd == nil || r.cmd.Process == nil {
		return nil
	}
	err := r.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.errOut }
func (r *procRunner) Name() string          { return r.cmd.Path }

// ID is the pid while the process runs, "" once it ended (go-plugin's
// Kill then has nothing to do).
func (r *procRunner) ID() string {
	select {
	case <-r.done:
		return ""
	default:
	}
	if r.cmd.Process == nil {
		return ""
	}
	return fmt.Sprint(r.cmd.Process.Pid)
}
func (r *procRunner) Diagnose(context.Context) string { return r.stderr.String() }
func (r *procRunner) PluginToHost(n, a string) (string, string, error) {
	return n, a, nil
}
func (r *procRunner) HostToPlugin(n, a string) (string, string, error) {
	return n, a, nil
}

// The Go runtime reports a fault in C code ("signal SIGSEGV: segmentation
// violation") and exits with status 2 instead of dying of the signal.
var (
	goSignalLine = regexp.MustCompile(`\[?signal (SIG[A-Z0-9]+)(: [^\]\n]*)?`)
	goFatalLine  = regexp.MustCompile(`(?m)^(SIG[A-Z0-9]+): (.*)$`)
)

// reason describes how the process ended.
func (r *procRunner) reason() string {
	tail := r.stderr.String()
	if r.state != nil {
		if ws, ok := r.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s := fmt.Sprintf("signal %s (%s)", signalName(ws.Signal()), ws.Signal())
			return s + stderrHint(tail)
		}
	}
	if m := goSignalLine.FindStringSubmatch(tail); m != nil {
		desc := strings.TrimPrefix(m[2], ": ")
		if i := strings.Index(desc, " code="); i >= 0 {
			desc = desc[:i]
		}
		s := "signal " + m[1]
		if desc != "" {
			s += " (" + desc + ")"
		}
		return s + ", reported by the Go runtime of the worker (" + r.exitText() + ")"
	}
	if m := goFatalLine.FindStringSubmatch(tail); m != nil {
		return fmt.Sprintf("signal %s (%s), reported by the Go runtime of the worker (%s)", m[1], m[2], r.exitText())
	}
	return r.exitText() + stderrHint(tail)
}

func (r *procRunner) exitText() string {
	if r.state == nil {
		if r.waitErr != nil {
			return r.waitErr.Error()
		}
		return "ended"
	}
	return r.state.String()
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGSEGV: "SIGSEGV", syscall.SIGBUS: "SIGBUS", syscall.SIGABRT: "SIGABRT",
		syscall.SIGILL: "SIGILL", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// stderrHint is the last meaningful line the worker wrote, if any.
func stderrHint(tail string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "{") {
			if len(l) > 200 {
				l = l[:200] + "..."
			}
			return "; last stderr line: " + l
		}
	}
	return ""
}

// tailBuffer keeps the first and the last max/2 bytes written to it: a Go
// crash report starts with the signal and ends with pages of goroutines.
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	head []byte
	tail []byte
	cut  bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := t.max/2 - len(t.head); room > 0 {
		k := min(room, len(p))
		t.head = append(t.head, p[:k]...)
		p = p[k:]
	}
	t.tail = append(t.tail, p...)
	if len(t.tail) > t.max/2 {
		t.tail = append([]byte(nil), t.tail[len(t.tail)-t.max/2:]...)
		t.cut = true
	}
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	sep := ""
	if t.cut {
		sep = "\n...\n"
	}
	return string(t.head) + sep + string(t.tail)
}
