package launch

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/sdk/loader"
)

// A rank that a fatal signal kills in C code (a vendor plugin that
// dereferences NULL in allReduce, say) does not die of the signal: the Go
// runtime prints "SIGSEGV: segmentation violation", "PC=...", a dump of
// every goroutine and the registers (hundreds of lines that name no C
// entry), then exits with status 2. The launcher keeps that report off its
// stderr, in a file, and says in one line which signal killed the rank in
// which plugin call of which plugin file: the call comes from the rank's
// call record (loader.NewCallRecord), the only trace of it that survives
// the rank.

// Crash is how a fatal signal killed a rank, as the Go runtime reported it.
type Crash struct {
	Signal string // "SIGSEGV"
	// InC is true when the signal came while the crashed goroutine was in
	// C code: a plugin call (the runtime says "signal arrived during cgo
	// execution"); false when it came on another thread (one a plugin or
	// its vendor library started) or in Go code.
	InC bool
	// Calls are the plugin calls the rank had in flight, the one whose
	// function the crashed goroutine's stack names first.
	Calls []loader.InFlight
	// Report is the file holding the runtime's whole report; "" when it
	// could not be written (then the report went to stderr, as it came).
	Report string
}

// where says where the rank was when the signal came.
func (c *Crash) where() string {
	if len(c.Calls) == 0 {
		return " (no vendor plugin call was running)"
	}
	call := fmt.Sprintf("plugin call %s (%s)", c.Calls[0].Entry, c.Calls[0].Plugin)
	var also []string
	for _, o := range c.Calls[1:] {
		also = append(also, o.Entry)
	}
	if len(also) > 0 {
		call += " (also running: " + strings.Join(also, ", ") + ")"
	}
	if !c.InC {
		return " on a thread outside Go while " + call + " was running"
	}
	return " in " + call
}

func (c *Crash) Error() string {
	s := "crashed with " + c.Signal + c.where()
	if c.Report != "" {
		s += "; the Go runtime's report is in " + c.Report
	}
	return s
}

func (c *Crash) short() string {
	if len(c.Calls) > 0 {
		return c.Signal + " in " + c.Calls[0].Entry
	}
	return c.Signal
}

// crashSignalLine is the first line of the runtime's report of a fatal
// signal; its next line starts with "PC=". SIGQUIT's report is left
// alone: users send it to get the goroutine dump.
var crashSignalLine = regexp.MustCompile(`^(SIGSEGV|SIGBUS|SIGFPE|SIGILL|SIGABRT|SIGTRAP|SIGSYS): [^\n]*\n$`)

// crashWatch stands between a rank's stderr and its prefixWriter: it
// passes everything on until the runtime's report of a fatal signal
// starts, and keeps the report, which it writes to a file instead.
type crashWatch struct {
	rank   int
	next   *prefixWriter
	record *os.File // the rank's call record; nil when none could be made

	mu     sync.Mutex
	buf    []byte   // a segment without its end (\n or \r) yet
	held   []byte   // a line that may start the report
	signal string   // set once the report started
	head   []byte   // the report's first headMax bytes
	file   *os.File // the whole report
	noFile bool     // file could not be made
}

const headMax = 64 << 10

// watchCrashes makes cmd's stderr go through a crashWatch to next, and
// hands the rank a call record as descriptor loader.CallRecordFD (a rank
// without one still gets its crash in one line, the call unnamed).
func watchCrashes(cmd *exec.Cmd, rank int, next *prefixWriter) *crashWatch {
	w := &crashWatch{rank: rank, next: next}
	if f, err := loader.NewCallRecord(); err == nil {
		w.record = f
		cmd.ExtraFiles = []*os.File{f}
	}
	cmd.Stderr = w
	return w
}

func (w *crashWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.signal != "" {
		w.keep(b)
		return len(b), nil
	}
	w.buf = append(w.buf, b...)
	for w.signal == "" {
		i := bytes.IndexAny(w.buf, "\n\r")
		if i < 0 {
			break
		}
		seg := w.buf[:i+1]
		w.buf = w.buf[i+1:]
		w.segment(seg)
	}
	switch {
	case w.signal != "":
		rest := w.buf
		w.buf = nil
		w.keep(rest)
	case len(w.buf) > 64<<10: // a very long line: prefixWriter passes it on in pieces
		_, _ = w.next.Write(w.buf)
		w.buf = nil
	}
	return len(b), nil
}

// segment passes one line (or \r-ended segment) on, unless it may start
// the report (held until the next line tells) or does.
func (w *crashWatch) segment(seg []byte) {
	if w.held != nil {
		if bytes.HasPrefix(seg, []byte("PC=")) {
			w.signal = string(w.held[:bytes.IndexByte(w.held, ':')])
			held := w.held
			w.held = nil
			w.keep(held)
			w.keep(seg)
			return
		}
		_, _ = w.next.Write(w.held)
		w.held = nil
	}
	if crashSignalLine.Match(seg) {
		w.held = append([]byte(nil), seg...)
		return
	}
	_, _ = w.next.Write(seg)
}

// keep adds b to the report: its head in memory, all of it in a file,
// or, when no file can be made, on stderr as before.
func (w *crashWatch) keep(b []byte) {
	if room := headMax - len(w.head); room > 0 {
		w.head = append(w.head, b[:min(len(b), room)]...)
	}
	if w.file == nil && !w.noFile {
		f, err := os.CreateTemp("", fmt.Sprintf("flagcx-rank%d-crash-*.txt", w.rank))
		w.file, w.noFile = f, err != nil
	}
	if w.file != nil {
		_, _ = w.file.Write(b)
	} else {
		_, _ = w.next.Write(b)
	}
}

// Flush passes on what is left once the rank exited.
func (w *crashWatch) Flush() {
	w.mu.Lock()
	if w.signal == "" {
		_, _ = w.next.Write(append(w.held, w.buf...))
		w.held, w.buf = nil, nil
	}
	w.mu.Unlock()
	w.next.Flush()
}

// result is the rank's crash (nil when no report started) once it exited,
// and releases the call record.
func (w *crashWatch) result() *Crash {
	w.mu.Lock()
	defer w.mu.Unlock()
	var c *Crash
	if w.signal != "" {
		c = &Crash{Signal: w.signal, InC: bytes.Contains(w.head, []byte("\nsignal arrived during cgo execution\n"))}
		if w.record != nil {
			calls, _ := loader.ReadCallRecord(w.record)
			c.Calls = crashedFirst(calls, w.head)
		}
		if w.file != nil {
			c.Report = w.file.Name()
			_ = w.file.Close()
			w.file = nil
		}
	}
	w.close()
	return c
}

// close releases the call record (also of a rank that never started).
func (w *crashWatch) close() {
	if w.record != nil {
		_ = w.record.Close()
		w.record = nil
	}
}

// crashedFirst puts first the call whose C function the crashed
// goroutine's stack names: the runtime's first goroutine in report, which
// shows the function's address among the arguments of its frames (of
// purego and the loader). Other goroutines may be in plugin calls too.
func crashedFirst(calls []loader.InFlight, report []byte) []loader.InFlight {
	if len(calls) < 2 {
		return calls
	}
	g := bytes.Index(report, []byte("\ngoroutine "))
	if g < 0 {
		return calls
	}
	stack := report[g+1:]
	if end := bytes.Index(stack, []byte("\n\n")); end >= 0 {
		stack = stack[:end]
	}
	for i, c := range calls {
		if regexp.MustCompile(fmt.Sprintf(`\b0x%x\b`, c.Addr)).Match(stack) {
			out := append([]loader.InFlight{c}, calls[:i]...)
			return append(out, calls[i+1:]...)
		}
	}
	return calls
}
