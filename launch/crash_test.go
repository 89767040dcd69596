package launch

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk/loader"
)

// runtimeReport is the shape of the Go runtime's report of a fault in C
// code, shortened.
const runtimeReport = "SIGSEGV: segmentation violation\n" +
	"PC=0x7fd5d4bb412d m=3 sigcode=1 addr=0x0\n" +
	"signal arrived during cgo execution\n" +
	"\n" +
	"goroutine 5 gp=0x2243bcaa0b40 m=3 mp=0x2243bc8fb008 [syscall, locked to thread]:\n" +
	"runtime.cgocall(0x64bb20, 0x2243bc99a9a0)\n" +
	"github.com/ebitengine/purego.syscall_SyscallN(0x7fd5d4bb40ad, {0x2243bc9cac78, 0x20, 0x1413720?}, {0x2243bc9cad88, 0x20, 0x425b74?}, 0x0)\n" +
	"\n" +
	"goroutine 1 gp=0x2243bc8fa000 m=nil [select]:\n" +
	"github.com/flagcx/flagcx-go/sdk/loader.(*Plugin).syscall(0x3eec6c606a88, {0xd36be7, 0x10}, 0x7fd5d4bb5000, {0x3eec6c4ccfb0, 0x1, 0x1})\n" +
	"\n" +
	"rax    0x0\n"

// TestCrashWatchKeepsTheReport: the rank's output passes, a line that
// merely looks like the report's first is passed on once the next line
// says it is not, and the runtime's report (written in pieces, as the
// runtime does) goes to a file, whole, and not to stderr.
func TestCrashWatchKeepsTheReport(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var out bytes.Buffer
	var mu sync.Mutex
	w := &crashWatch{rank: 1, next: &prefixWriter{w: &out, mu: &mu, prefix: []byte("rank 1: ")}}
	in := "hello\nSIGBUS: not a report\nnext line\n50%\r" + runtimeReport
	for len(in) > 0 {
		n := min(len(in), 7)
		_, err := w.Write([]byte(in[:n]))
		require.NoError(t, err)
		in = in[n:]
	}
	w.Flush()
	c := w.result()
	require.Equal(t, "rank 1: hello\nrank 1: SIGBUS: not a report\nrank 1: next line\n50%\r", out.String())
	require.NotNil(t, c)
	require.Equal(t, "SIGSEGV", c.Signal)
	require.True(t, c.InC)
	require.Empty(t, c.Calls, "no call record")
	saved, err := os.ReadFile(c.Report)
	require.NoError(t, err)
	require.Equal(t, runtimeReport, string(saved))
	require.Equal(t, "crashed with SIGSEGV (no vendor plugin call was running); the Go runtime's report is in "+c.Report, c.Error())
}

// TestCrashWatchPassesEverythingElse: no report, no crash; a held line
// left at the end is passed on.
func TestCrashWatchPassesEverythingElse(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	w := &crashWatch{rank: 0, next: &prefixWriter{w: &out, mu: &mu, prefix: []byte("rank 0: ")}}
	_, _ = w.Write([]byte("a\nSIGABRT: abort\n"))
	w.Flush()
	require.Nil(t, w.result())
	require.Equal(t, "rank 0: a\nrank 0: SIGABRT: abort\n", out.String())
}

// TestCrashMessages: the call the crashed goroutine's stack names comes
// first, whichever slot it had; a signal on another thread says so.
func TestCrashMessages(t *testing.T) {
	ar := loader.InFlight{Entry: "allReduce", Plugin: "/p/libflagcx-x.so", Addr: 0x7fd5d4bb40ad}
	sq := loader.InFlight{Entry: "streamQuery", Plugin: "/p/libflagcx-x.so", Addr: 0x7fd5d4bb5000}
	calls := crashedFirst([]loader.InFlight{sq, ar}, []byte(runtimeReport))
	require.Equal(t, []loader.InFlight{ar, sq}, calls, "goroutine 5 crashed; goroutine 1 (also in a call) did not")
	require.Equal(t, []loader.InFlight{sq}, crashedFirst([]loader.InFlight{sq}, []byte(runtimeReport)))

	c := &Crash{Signal: "SIGSEGV", InC: true, Calls: calls, Report: "/tmp/r.txt"}
	require.Equal(t, "crashed with SIGSEGV in plugin call allReduce (/p/libflagcx-x.so) (also running: streamQuery); the Go runtime's report is in /tmp/r.txt", c.Error())
	require.Equal(t, "SIGSEGV in allReduce", c.short())
	c = &Crash{Signal: "SIGABRT", Calls: calls[:1]}
	require.Equal(t, "crashed with SIGABRT on a thread outside Go while plugin call allReduce (/p/libflagcx-x.so) was running", c.Error())
	re := &RankError{Rank: 2, ExitCode: 2, Crash: c}
	require.True(t, strings.HasPrefix(re.Error(), "rank 2 crashed with SIGABRT "), re.Error())
}
