package loader

// Probing. Looking at a plugin runs its code: dlopen runs its ELF
// constructors, then init loads the vendor runtime. Either may crash the
// process or never return, and a listing must survive both. So listings
// (flagcx plugins, flagcx devices) probe each plugin in a child process
// under a deadline; a crash or a hang costs one line naming the file. Using
// a plugin (a benchmark, a conformance worker) still loads it in-process:
// that is the data path, and LoadAll serves it; a benchmark first probes
// the plugins it will load (ProbeOptions.Only), so that one that crashes
// or hangs while loading ends it with one error.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk"
)

// EnvProbeRequest holds a probe child's request (JSON). Its presence makes
// a process a probe child (IsProbeChild).
var EnvProbeRequest = env.ProbeRequest.Name

// DefaultProbeTimeout bounds one probe when ProbeOptions.Timeout is 0: a
// driver's start-up on a large machine takes seconds, a hang takes forever.
const DefaultProbeTimeout = 20 * time.Second

// probeFD carries a child's answers. Not stdout: a plugin may print there.
const probeFD = 3

// maxProbeOutput bounds what is kept of the start of one child's own output.
const maxProbeOutput = 256 << 10

// ProbeOptions configure ProbeAll.
type ProbeOptions struct {
	Options // Dir, Emulated, VendorsimDir as for LoadAll (Log is not used: children log per FLAGCX_DEBUG)
	// Command starts a probe child: a program that calls ServeProbe when
	// IsProbeChild (flagcx: plugins --probe). Required.
	Command []string
	// Devices also lists the devices and links of every plugin that loads.
	Devices bool
	// Timeout bounds each plugin's probe; 0 means DefaultProbeTimeout.
	Timeout time.Duration
	// TimeoutHint tells users how to change Timeout ("FLAGCX_TIMEOUT sets
	// it"); a probe that misses the deadline quotes it.
	TimeoutHint string
	// Parallel is how many children run at once; 0 picks from the CPUs.
	Parallel int
	// Only, when set, probes only the candidates of these names (a run
	// probing the plugins it is about to load); nil probes every one.
	Only []string
	// Output receives what the children print themselves (the plugins'
	// messages, FLAGCX_DEBUG log lines), one child at a time, without the Go
	// runtime's dump of a crashed child; nil discards it.
	Output io.Writer
}

// ProbeFailure says how a probe child failed.
type ProbeFailure string

const (
	ProbeCrashed ProbeFailure = "crashed" // a signal ended it (SIGSEGV, SIGABRT, ...)
	ProbeHung    ProbeFailure = "hung"    // it missed the deadline and was killed
	ProbeExited  ProbeFailure = "exited"  // it exited without an answer (the plugin called exit?)
	ProbeGarbled ProbeFailure = "garbled" // its answer was unreadable
)

// Probed is what probing found about one candidate.
type Probed struct {
	Candidate
	// Plugin is the table; nil when the file is not a usable plugin, or the
	// child failed before the table was read.
	Plugin *PluginSummary
	// Err says why the plugin cannot be used (nil: opened and initialized).
	// The errors.Is checks of LoadAll's errors hold across the process
	// boundary; a failed child is a *ProbeError.
	Err error
	// Failure is set when the child crashed, hung or answered garbage.
	Failure ProbeFailure
	// Warnings are about a usable table (its name is not the file's).
	Warnings []string
	// Devices is set with ProbeOptions.Devices for plugins that loaded and
	// have a device runtime.
	Devices *DeviceReport
}

// OK reports whether the plugin opened and initialized.
func (p Probed) OK() bool { return p.Err == nil && p.Plugin != nil }

// PluginSummary is a plugin's table and what its init reported, as data:
// it outlives the probe child that loaded the plugin.
type PluginSummary struct {
	Name       string
	Vendor     string
	Version    string
	Path       string
	ABIVersion int
	Caps       Caps
	Libraries  []LibrarySpec
	Info       Info // also after a failed init: which libraries loaded, why not the others
}

// Emulated reports whether the plugin ran on emulated vendor libraries.
func (s *PluginSummary) Emulated() bool { return s.Info.Emulated }

// Summarize describes p.
func Summarize(p *Plugin) *PluginSummary {
	return &PluginSummary{Name: p.Name, Vendor: p.Vendor, Version: p.Version, Path: p.Path,
		ABIVersion: p.ABIVersion, Caps: p.Caps, Libraries: p.Libraries, Info: p.Info()}
}

// DeviceReport is what a plugin's device runtime answered.
type DeviceReport struct {
	Count   int
	Err     string // getDeviceCount failed
	Devices []ProbedDevice
	// Links[a][b] is how device a reaches b; nil with fewer than two
	// devices or when LinksNotSupported.
	Links             [][]ProbedLink
	LinksNotSupported bool
}

// ProbedDevice is one device, or why it could not be described.
type ProbedDevice struct {
	DeviceInfo
	Err string
}

// ProbedLink is one link, or why it could not be described.
type ProbedLink struct {
	LinkInfo
	Err string
}

// Devices describes p's devices and the links between them.
func Devices(p *Plugin) *DeviceReport {
	r := &DeviceReport{}
	n, err := p.DeviceCount()
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Count = n
	for d := range n {
		di, err := p.DeviceInfo(d)
		r.Devices = append(r.Devices, ProbedDevice{DeviceInfo: di, Err: errText(err)})
	}
	if n < 2 {
		return r
	}
	if _, err := p.Link(0, 0); errors.Is(err, sdk.ErrNotSupported) {
		r.LinksNotSupported = true
		return r
	}
	r.Links = make([][]ProbedLink, n)
	for a := range n {
		r.Links[a] = make([]ProbedLink, n)
		for b := range n {
			l, err := p.Link(a, b)
			r.Links[a][b] = ProbedLink{LinkInfo: l, Err: errText(err)}
		}
	}
	return r
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ProbeError is a probe child that crashed, hung or answered garbage.
type ProbeError struct {
	Path    string
	Failure ProbeFailure
	Problem string // "the plugin crashed during init (SIGSEGV)"
	Hint    string
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("plugin file %s: %s; %s", e.Path, e.Problem, e.Hint)
}

func (e *ProbeError) Unwrap() error { return sdk.ErrSystemError }

// ---- The child --------------------------------------------------------------------

// probeRequest is what a child is asked.
type probeRequest struct {
	Candidate    Candidate
	Emulated     bool
	VendorsimDir string
	Devices      bool
}

// probeAnswer is one message of a child. Stage messages ("open", "init",
// "devices") go out before each step, with what is known so far, so that
// the parent can say where a child died; the last one has Done.
type probeAnswer struct {
	Stage    string         `json:"stage,omitempty"`
	Plugin   *PluginSummary `json:"plugin,omitempty"`
	Err      *wireError     `json:"err,omitempty"`
	Warnings []string       `json:"warnings,omitempty"`
	Devices  *DeviceReport  `json:"devices,omitempty"`
	Done     bool           `json:"done,omitempty"`
}

// wireError is an error across the process boundary: its text and the
// sentinels it wrapped, so errors.Is still holds in the parent.
type wireError struct {
	Msg   string   `json:"msg"`
	Kinds []string `json:"kinds,omitempty"`
}

// wireSentinels are the sentinels an error carries across, by name.
func wireSentinels() map[string]error {
	m := map[string]error{}
	for _, e := range []error{ErrNotSharedObject, ErrNoTable, ErrUnknownABI, ErrBadTable, ErrLoadFailed} {
		m[e.Error()] = e
	}
	for r := sdk.Result(1); r < sdk.NumResults; r++ {
		m["result:"+r.String()] = r.Err()
	}
	return m
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error()}
	for name, s := range wireSentinels() {
		if errors.Is(err, s) {
			w.Kinds = append(w.Kinds, name)
		}
	}
	return w
}

// remoteError is a child's error in the parent.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Msg}
	all := wireSentinels()
	for _, k := range w.Kinds {
		if s, ok := all[k]; ok {
			e.errs = append(e.errs, s)
		}
	}
	return e
}

// IsProbeChild reports whether this process was started to probe a plugin.
func IsProbeChild() bool {
	return env.ProbeRequest.IsSet(nil)
}

// ServeProbe answers the request of a probe child: it opens and
// initializes one plugin (and lists its devices when asked) and writes
// what it found to descriptor 3. Failures of the plugin are part of the
// answer; the error is only about the request or the descriptor.
func ServeProbe() error {
	raw, _ := env.ProbeRequest.Raw(nil)
	// What the plugin starts is not a probe child.
	os.Unsetenv(EnvProbeRequest)
	var req probeRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil || req.Candidate.Path == "" {
		return fmt.Errorf("%s does not hold a probe request: flagcx plugins and flagcx devices start probe processes themselves", EnvProbeRequest)
	}
	// Warnings travel in the answer: the listing prints them once, in place.
	warnOutput = io.Discard
	syscall.CloseOnExec(probeFD) // the answers are this process's, not its children's
	out := os.NewFile(probeFD, "probe answers")
	enc := json.NewEncoder(out)
	send := func(a probeAnswer) error {
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("writing the probe answer to descriptor %d: %w (flagcx plugins and flagcx devices start probe processes themselves)", probeFD, err)
		}
		return nil
	}
	a := probeAnswer{Stage: "open"}
	if err := send(a); err != nil {
		return err
	}
	c := req.Candidate
	p, err := Open(c.Path)
	if err != nil {
		if c.Source != "plugin dir" {
			err = fmt.Errorf("%w (named by %s)", err, c.Source)
		}
		a.Err, a.Done = toWire(err), true
		return send(a)
	}
	a.Stage, a.Plugin = "init", Summarize(p)
	if w := c.NameWarning(p); w != "" {
		a.Warnings = []string{w}
	}
	if err := send(a); err != nil {
		return err
	}
	if err := p.Init(InitOptions{Emulated: req.Emulated, VendorsimDir: req.VendorsimDir}); err != nil {
		a.Err = toWire(fmt.Errorf("%s: vendor runtime does not load: %w", c.Path, err))
	}
	a.Plugin = Summarize(p)
	if req.Devices && a.Err == nil && p.Caps&CapDevice != 0 {
		a.Stage = "devices"
		if err := send(a); err != nil {
			return err
		}
		a.Devices = Devices(p)
	}
	a.Done = true
	return send(a)
}

// ---- The parent -------------------------------------------------------------------

// ProbeAll discovers the plugins of o.Dir and probes each in a child
// process (o.Command), several at once, each under o.Timeout. A plugin
// that crashes, hangs or answers garbage is reported in its Probed and never
// stops the others; the error is only about the plugin dir itself, or
// about a missing Command.
func ProbeAll(ctx context.Context, o ProbeOptions) ([]Probed, error) {
	if len(o.Command) == 0 {
		return nil, errors.New("loader.ProbeOptions.Command is empty: the command that starts a probe process is needed")
	}
	if o.Dir == "" {
		o.Dir = DefaultDir()
	}
	o.Emulated = o.Emulated || EmulatedFromEnv()
	if o.Timeout <= 0 {
		o.Timeout = DefaultProbeTimeout
	}
	if o.Parallel <= 0 {
		// Children mostly wait (dlopen, driver start-up), so more than the
		// CPUs; a bound all the same, for directories of many plugins.
		o.Parallel = min(16, max(4, 2*runtime.NumCPU()))
	}
	cands, dirErr := Discover(o.Dir)
	if o.Only != nil {
		cands = slices.DeleteFunc(cands, func(c Candidate) bool { return !slices.Contains(o.Only, c.Name) })
	}
	out := make([]Probed, len(cands))
	var outMu sync.Mutex
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var own []byte
			out[i], own = probeOne(ctx, c, o)
			if o.Output != nil && len(own) > 0 {
				outMu.Lock()
				o.Output.Write(own)
				outMu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, dirErr
}

// probeOne runs one child and reads its answer. It returns what the child
// printed itself as well.
func probeOne(ctx context.Context, c Candidate, o ProbeOptions) (Probed, []byte) {
	res := Probed{Candidate: c}
	cmd, answers, own, perr := startProbe(c, o)
	if perr != nil {
		res.Failure, res.Err = perr.Failure, perr
		return res, nil
	}
	defer answers.Close()
	rd := readAnswers(answers)
	end := waitProbe(ctx, cmd, o.Timeout)
	// The answer pipe closes when the child exits, unless something the
	// plugin forked holds it: then give up on it.
	select {
	case <-rd.done:
	case <-time.After(time.Second):
		answers.Close()
		<-rd.done
	}
	return judgeProbe(res, o, rd, end, own.Bytes())
}

// startProbe starts the probe child of c, asking it per o. It returns the
// child, the read end of its answer pipe and its own output; or why no
// child started.
func startProbe(c Candidate, o ProbeOptions) (*exec.Cmd, *os.File, *outputBuffer, *ProbeError) {
	req, err := json.Marshal(probeRequest{Candidate: c, Emulated: o.Emulated, VendorsimDir: o.vendorsimDir(), Devices: o.Devices})
	if err != nil {
		return nil, nil, nil, &ProbeError{Path: c.Path, Failure: ProbeGarbled, Problem: "cannot write the probe request: " + err.Error(), Hint: skipHint(c)}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, &ProbeError{Path: c.Path, Failure: ProbeExited, Problem: "cannot start a probe process: " + err.Error(),
			Hint: "the plugin was not tried"}
	}
	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Env = append(os.Environ(), EnvProbeRequest+"="+string(req))
	cmd.ExtraFiles = []*os.File{w} // descriptor 3 (probeFD)
	own := &outputBuffer{}
	cmd.Stdout, cmd.Stderr = own, own
	setProbeAttr(cmd)
	// A process the plugin started may keep the output pipe open; that
	// must not hold up the listing.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, nil, &ProbeError{Path: c.Path, Failure: ProbeExited, Problem: fmt.Sprintf("cannot start a probe process (%s): %v", strings.Join(o.Command, " "), err),
			Hint: "the plugin was not tried: check that the program exists and can run"}
	}
	return cmd, r, own, nil
}

// answerReader reads a child's answers until the last one; last and err
// are set once done is closed.
type answerReader struct {
	done chan struct{}
	last probeAnswer
	err  error // an unreadable answer (not the end of the pipe)
}

// readAnswers reads r in the background.
func readAnswers(r io.Reader) *answerReader {
	rd := &answerReader{done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		dec := json.NewDecoder(r)
		for {
			var a probeAnswer
			if err := dec.Decode(&a); err != nil {
				if !errors.Is(err, io.EOF) {
					rd.err = err
				}
				return
			}
			rd.last = a
			if a.Done {
				return
			}
		}
	}()
	return rd
}

// probeEnd is how a probe child ended: its exit (cmd.Wait's error), and
// whether it was killed for missing the deadline or for ctx.
type probeEnd struct {
	err            error
	hung, canceled bool
}

// waitProbe waits for cmd to exit, killing it when it runs past timeout or
// ctx ends.
func waitProbe(ctx context.Context, cmd *exec.Cmd, timeout time.Duration) probeEnd {
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var end probeEnd
	select {
	case end.err = <-waited:
	case <-timer.C:
		end.hung = true
	case <-ctx.Done():
		end.canceled = true
	}
	if end.hung || end.canceled {
		killProbe(cmd)
		end.err = <-waited
	}
	return end
}

// judgeProbe completes res from the child's last answer and how it ended;
// it returns res and the child's output to show (without the Go runtime's
// dump of a crash).
func judgeProbe(res Probed, o ProbeOptions, rd *answerReader, end probeEnd, output []byte) (Probed, []byte) {
	last := rd.last
	fail := func(f ProbeFailure, problem string) {
		res.Failure = f
		res.Err = &ProbeError{Path: res.Path, Failure: f, Problem: problem, Hint: skipHint(res.Candidate)}
	}
	if last.Plugin != nil {
		res.Plugin = last.Plugin
		res.Warnings = last.Warnings
	}
	stage := stageText(last.Stage)
	switch {
	case last.Done:
		res.Err, res.Devices = last.Err.err(), last.Devices
	case end.canceled:
		fail(ProbeHung, "the probe was interrupted "+stage)
		output = cutRuntimeDump(output)
	case end.hung:
		// A child starved past the deadline may have crashed meanwhile:
		// its runtime dump is no more use than a crashed one's.
		output = cutRuntimeDump(output)
		problem := fmt.Sprintf("the plugin did not finish %s within %v", stageWord(last.Stage), o.Timeout)
		if o.TimeoutHint != "" {
			problem += " (" + o.TimeoutHint + ")"
		}
		fail(ProbeHung, problem)
	default:
		if sig := crashSignal(end.err, output); sig != "" {
			fail(ProbeCrashed, fmt.Sprintf("the plugin crashed %s (%s)", stage, sig))
			output = cutRuntimeDump(output)
			break
		}
		var ee *exec.ExitError
		switch {
		case rd.err != nil:
			fail(ProbeGarbled, fmt.Sprintf("the probe process answered garbage %s (%v)", stage, rd.err))
		case errors.As(end.err, &ee):
			fail(ProbeExited, fmt.Sprintf("the probe process exited with status %d %s, without an answer%s", ee.ExitCode(), stage, lastLine(output)))
			output = cutRuntimeDump(output)
		default:
			fail(ProbeGarbled, "the probe process ended without an answer "+stage+lastLine(output))
		}
	}
	return res, output
}

// stageText says where a child that died was.
func stageText(stage string) string {
	switch stage {
	case "open":
		return "while being loaded, in dlopen or an ELF constructor"
	case "init":
		return "during init"
	case "devices":
		return "while listing its devices"
	}
	return "before loading the plugin"
}

func stageWord(stage string) string {
	switch stage {
	case "open":
		return "loading (dlopen and its ELF constructors)"
	case "devices":
		return "listing its devices"
	case "":
		return "starting"
	}
	return stage
}

// skipHint tells users how to list or run without the plugin.
func skipHint(c Candidate) string {
	v := OverrideVar(c.Name)
	if c.Source != "plugin dir" {
		return fmt.Sprintf("unset %s or set it to none to skip it, and report this to the plugin's vendor", c.Source)
	}
	return fmt.Sprintf("run with %s=none to skip it (or remove the file), and report this to the plugin's vendor", v)
}

// signalNames name the signals a crash is likely to end with.
var signalNames = map[syscall.Signal]string{
	syscall.SIGSEGV: "SIGSEGV", syscall.SIGBUS: "SIGBUS", syscall.SIGABRT: "SIGABRT", syscall.SIGILL: "SIGILL",
	syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGTRAP: "SIGTRAP",
	syscall.SIGSYS: "SIGSYS", syscall.SIGQUIT: "SIGQUIT", syscall.SIGINT: "SIGINT", syscall.SIGPIPE: "SIGPIPE",
}

// runtimeSignal finds the signal in the Go runtime's report of a fault in
// C code, which exits with status 2 rather than dying of the signal.
var runtimeSignal = regexp.MustCompile(`(?m)^(?:\[signal |)(SIG[A-Z0-9]+)[: ]`)

// crashSignal names the signal that ended the child, or "". The Go
// runtime's own report comes first: it names the fault even where the
// runtime then ends the process otherwise (exit status 2, or SIGABRT
// under GOTRACEBACK=crash).
func crashSignal(waitErr error, output []byte) string {
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return ""
	}
	if m := runtimeSignal.FindSubmatch(output); m != nil {
		return string(m[1])
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if name, ok := signalNames[ws.Signal()]; ok {
			return name
		}
		return ws.Signal().String()
	}
	return ""
}

// runtimeDump finds the start of the Go runtime's report of a crash.
var runtimeDump = regexp.MustCompile(`(?m)^(?:fatal error: |panic: |SIG[A-Z0-9]+: |\[signal )`)

// cutRuntimeDump keeps what a crashed child printed before the runtime's
// report: users get one line about the crash, not a goroutine dump.
func cutRuntimeDump(b []byte) []byte {
	if loc := runtimeDump.FindIndex(b); loc != nil {
		return b[:loc[0]]
	}
	return b
}

// lastLine quotes the line of the child's output that best says what
// happened: the Go runtime's one-line verdict when it wrote a report (a
// panic), else the last line.
func lastLine(b []byte) string {
	l := ""
	if loc := runtimeDump.FindIndex(b); loc != nil {
		l, _, _ = strings.Cut(string(b[loc[0]:]), "\n")
	} else {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		l = lines[len(lines)-1]
	}
	if l = strings.TrimSpace(l); l != "" {
		return "; its last output: " + l
	}
	return ""
}

// killProbe ends a child and whatever it started.
func killProbe(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}

// outputBuffer keeps the first max bytes written to it and the last
// tailMax: plugin messages come first, a crash report last.
type outputBuffer struct {
	mu   sync.Mutex
	head bytes.Buffer
	tail []byte
	cut  int
}

const tailMax = 16 << 10

func (o *outputBuffer) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	if room := maxProbeOutput - o.head.Len(); room > 0 {
		k := min(len(p), room)
		o.head.Write(p[:k])
		p = p[k:]
	}
	if len(p) > 0 {
		o.tail = append(o.tail, p...)
		if extra := len(o.tail) - tailMax; extra > 0 {
			o.tail = append(o.tail[:0], o.tail[extra:]...)
			o.cut += extra
		}
	}
	return n, nil
}

func (o *outputBuffer) Bytes() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := append([]byte(nil), o.head.Bytes()...)
	if o.cut > 0 {
		b = fmt.Appendf(b, "\n[... %d bytes of output left out ...]\n", o.cut)
	}
	return append(b, o.tail...)
}
