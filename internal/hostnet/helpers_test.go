package hostnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Test helpers of the mesh's tests; the TCP transport's own tests
// (internal/hostnet/tcp) have the same for its links.

// logBuffer collects log lines written from the listener's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimRight(s.b.String(), "\n"), "\n")
}

// captureRefusals sends l's refusal log to a buffer instead of stderr.
func captureRefusals(l *Listener) *logBuffer {
	buf := &logBuffer{}
	l.SetRefusalLog(buf)
	return buf
}

// waitRefused waits (at most 15 s) until l has refused n connections.
func waitRefused(t *testing.T, l *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for l.Refused() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the listener refused %d connections, want %d", l.Refused(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openIdle opens n connections to addr that never send a byte.
func openIdle(t *testing.T, addr string, n int) {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err, "idle connection %d", i)
		conns = append(conns, c)
	}
}

var moreRefused = regexp.MustCompile(`refused (\d+) more connections?`)

// loggedRefusals adds up the refusals the log lines account for.
func loggedRefusals(t *testing.T, lines []string) int {
	t.Helper()
	n := 0
	for _, line := range lines {
		switch m := moreRefused.FindStringSubmatch(line); {
		case strings.Contains(line, "refused connection from"):
			n++
		case m != nil:
			k, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			n += k
		default:
			t.Fatalf("unexpected log line %q", line)
		}
	}
	return n
}

var testSecret = Secret{0: 0xf1, 1: 0xa6, 7: 0xcc, 15: 0x42}

func testConfig(timeout time.Duration) Config {
	cfg := DefaultConfig()
	cfg.Timeout = timeout
	return cfg
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

type messenger interface {
	Send(p []byte) error
	Recv(p []byte) error
}

// benchStream sends b.N messages of size bytes from tx to rx, receiving
// concurrently, and reports the bandwidth.
func benchStream(b *testing.B, tx, rx messenger, size int) {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	done := make(chan error, 1)
	b.SetBytes(int64(size))
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if err := rx.Recv(dst); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < b.N; i++ {
		if err := tx.Send(src); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, <-done)
}
