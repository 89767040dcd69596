// Package nettest is what the tests of internal/hostnet and of its
// transports share: a listener's refusal log captured and counted, idle
// connections, seeded random payloads, and a streaming benchmark. It
// imports no package of hostnet (a listener is the two methods it uses),
// so that the transports' own in-package tests can import it too.
package nettest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
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

// LogBuffer collects log lines written from a listener's goroutines.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Lines is what was written, line by line.
func (s *LogBuffer) Lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimRight(s.b.String(), "\n"), "\n")
}

// Refuser is the part of a listener (tcp.Listener) the refusal helpers use.
type Refuser interface {
	SetRefusalLog(w io.Writer)
	Refused() int
}

// CaptureRefusals sends l's refusal log to a buffer instead of stderr.
func CaptureRefusals(l Refuser) *LogBuffer {
	buf := &LogBuffer{}
	l.SetRefusalLog(buf)
	return buf
}

// WaitRefused waits (at most 15 s) until l has refused n connections.
func WaitRefused(t *testing.T, l Refuser, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for l.Refused() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the listener refused %d connections, want %d", l.Refused(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// OpenIdle opens n connections to addr that never send a byte, closed
// when the test ends.
func OpenIdle(t *testing.T, addr string, n int) {
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

// LoggedRefusals adds up the refusals the log lines account for.
func LoggedRefusals(t *testing.T, lines []string) int {
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

// RandomBytes is n bytes of a ChaCha8 stream seeded with seed.
func RandomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

// SizeName names a benchmark's message size (64KiB, 1MiB).
func SizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Messenger is what BenchStream needs of a link (TCP or shm).
type Messenger interface {
	Send(p []byte) error
	Recv(p []byte) error
}

// BenchStream sends b.N messages of size bytes from tx to rx, receiving
// concurrently, and reports the bandwidth.
func BenchStream(b *testing.B, tx, rx Messenger, size int) {
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

// BenchPingPong measures the round trip of an 8-byte message from d to a
// and back, b.N times (latency, not bandwidth).
func BenchPingPong(b *testing.B, d, a Messenger) {
	msg, buf := make([]byte, 8), make([]byte, 8)
	done := make(chan error, 1)
	go func() {
		echo := make([]byte, 8)
		for i := 0; i < b.N; i++ {
			if err := a.Recv(echo); err != nil {
				done <- err
				return
			}
			if err := a.Send(echo); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := d.Send(msg); err != nil {
			b.Fatal(err)
		}
		if err := d.Recv(buf); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, <-done)
}
