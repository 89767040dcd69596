//go:build linux

package hostnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// smallShm makes multi-slot messages and ring wrap-around cheap to reach.
var smallShm = ShmConfig{SlotSize: 4 << 10, Slots: 4, Dir: DefaultShmDir}

// shmPair maps one segment twice in this process: a is the creator, b the
// opener.
func shmPair(t testing.TB, cfg Config, sc ShmConfig) (a, b *ShmLink) {
	t.Helper()
	if sc.Dir == "" {
		sc.Dir = DefaultShmDir
	}
	if _, err := os.Stat(sc.Dir); err != nil {
		t.Skipf("no %s: %v", sc.Dir, err)
	}
	a, err := createShm(cfg, sc)
	require.NoError(t, err)
	b, err = openShm(a.path, cfg, os.Getpid())
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), a.attachedPid())
	a.peerPid = os.Getpid()
	a.unlink()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// publishPiece makes l's ring hold one piece of a message of total bytes,
// as a sender that stalls after it would.
func publishPiece(l *ShmLink, total, piece int) {
	r := &l.tx
	tp, pp := r.hdr(int(r.pos % uint64(l.slots)))
	*tp, *pp = uint64(total), uint64(piece)
	r.pos++
	atomic.StoreUint32(r.head, uint32(r.pos))
	futexWake(r.head, 1)
}

func TestShmRoundTrip(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	for _, sc := range []ShmConfig{smallShm, DefaultShmConfig()} {
		a, b := shmPair(t, cfg, sc)
		S := a.SlotSize()
		sizes := []int{0, 1, S - 1, S, S + 1, 10 << 20}
		for _, n := range sizes {
			// Both directions: creator -> opener and opener -> creator.
			for _, dir := range []struct {
				name     string
				tx, recv *ShmLink
			}{{"c2o", a, b}, {"o2c", b, a}} {
				t.Run(fmt.Sprintf("slot=%d/size=%d/%s", S, n, dir.name), func(t *testing.T) {
					msg := randomBytes(uint64(n+S), n)
					errc := make(chan error, 1)
					go func() { errc <- dir.tx.Send(msg) }()
					buf := bytes.Repeat([]byte{0x5A}, n+16)
					require.NoError(t, dir.recv.Recv(buf[:n]))
					require.NoError(t, <-errc)
					require.True(t, bytes.Equal(msg, buf[:n]), "payload differs")
					require.Equal(t, bytes.Repeat([]byte{0x5A}, 16), buf[n:], "nothing past p")
				})
			}
		}
	}
}

func TestShmMessagesArriveInOrder(t *testing.T) {
	a, b := shmPair(t, testConfig(10*time.Second), smallShm)
	const count = 2000
	size := func(i int) int { return (i * 977) % (3*smallShm.SlotSize + 5) }
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < count; i++ {
			if err := a.Send(randomBytes(uint64(i), size(i))); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < count; i++ {
		buf := make([]byte, size(i))
		require.NoError(t, b.Recv(buf), "message %d", i)
		require.True(t, bytes.Equal(randomBytes(uint64(i), size(i)), buf), "message %d differs", i)
	}
	require.NoError(t, <-errc)
}

func TestShmFullDuplex(t *testing.T) {
	for _, sc := range []ShmConfig{smallShm, DefaultShmConfig()} {
		t.Run(fmt.Sprint(sc.SlotSize), func(t *testing.T) {
			a, b := shmPair(t, testConfig(20*time.Second), sc)
			sizes := []int{10 << 20, 1, 0, 3*sc.SlotSize + 1, 1 << 20}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			run := func(l *ShmLink, seed uint64, peerSeed uint64) {
				wg.Add(2)
				go func() {
					defer wg.Done()
					for i, n := range sizes {
						if err := l.Send(randomBytes(seed+uint64(i), n)); err != nil {
							errs <- err
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					for i, n := range sizes {
						buf := make([]byte, n)
						if err := l.Recv(buf); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(randomBytes(peerSeed+uint64(i), n), buf) {
							errs <- fmt.Errorf("message %d (%d bytes) differs", i, n)
							return
						}
					}
				}()
			}
			run(a, 100, 200)
			run(b, 200, 100)
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("full-duplex exchange hung")
			}
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

func TestShmLengthMismatch(t *testing.T) {
	S := smallShm.SlotSize
	tests := []struct {
		name      string
		sent, exp int
	}{
		{"small, sender longer", 9, 7},
		{"small, sender shorter", 7, 9},
		{"multi-slot, sender longer", 3*S + 1, 3 * S},
		{"multi-slot, sender shorter", 3 * S, 3*S + 1},
		{"larger than the ring, receiver expects little", 10 * S, 100},
		{"empty message, receiver expects bytes", 0, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := shmPair(t, testConfig(20*time.Second), smallShm)
			errc := make(chan error, 1)
			go func() { errc <- a.Send(randomBytes(3, tc.sent)) }()
			buf := bytes.Repeat([]byte{0xAA}, tc.exp+32)
			start := time.Now()
			err := b.Recv(buf[:tc.exp])
			var le *LengthError
			require.ErrorAs(t, err, &le)
			require.Equal(t, LengthError{Got: tc.sent, Want: tc.exp}, *le)
			require.Equal(t, bytes.Repeat([]byte{0xAA}, tc.exp+32), buf, "the receiver wrote nothing")
			// The receiver's link is broken and says so at once ...
			require.ErrorIs(t, b.Recv(make([]byte, tc.sent)), ErrClosed)
			// ... and a sender stuck on a full ring is released, not left
			// to the deadline; one that finished fails on its next send.
			select {
			case err := <-errc:
				if err == nil {
					err = a.Send([]byte("x"))
				}
				require.ErrorIs(t, err, ErrClosed)
			case <-time.After(5 * time.Second):
				t.Fatal("the sender was not released")
			}
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

func TestShmCloseUnblocks(t *testing.T) {
	tests := []struct {
		name string
		op   func(a, b *ShmLink) error // blocks on b
	}{
		{"recv", func(a, b *ShmLink) error { return b.Recv(make([]byte, 10)) }},
		{"recv mid-message", func(a, b *ShmLink) error {
			publishPiece(a, 3*smallShm.SlotSize, 0) // the first piece of three arrives
			return b.Recv(make([]byte, 3*smallShm.SlotSize))
		}},
		{"send on a full ring", func(a, b *ShmLink) error { return b.Send(make([]byte, 10*smallShm.SlotSize)) }},
	}
	for _, tc := range tests {
		for _, who := range []string{"this side", "the peer"} {
			t.Run(tc.name+"/closed by "+who, func(t *testing.T) {
				a, b := shmPair(t, testConfig(time.Minute), smallShm)
				errc := make(chan error, 1)
				go func() { errc <- tc.op(a, b) }()
				time.Sleep(100 * time.Millisecond) // asleep on the futex by now
				closer := b
				if who == "the peer" {
					closer = a
				}
				require.NoError(t, closer.Close())
				select {
				case err := <-errc:
					require.ErrorIs(t, err, ErrClosed)
					require.Contains(t, err.Error(), "closed by "+who)
				case <-time.After(2 * time.Second):
					t.Fatal("Close did not unblock the call")
				}
				require.ErrorIs(t, b.Send([]byte("x")), ErrClosed)
				require.NoError(t, closer.Close(), "closing twice is harmless")
			})
		}
	}
}

func TestShmDataSentBeforeCloseIsDelivered(t *testing.T) {
	a, b := shmPair(t, testConfig(5*time.Second), smallShm)
	msg := randomBytes(9, 2*smallShm.SlotSize+3) // fits the ring: Send returns at once
	require.NoError(t, a.Send(msg))
	require.NoError(t, a.Close())
	buf := make([]byte, len(msg))
	require.NoError(t, b.Recv(buf))
	require.Equal(t, msg, buf)
	require.ErrorIs(t, b.Recv(buf), ErrClosed)
}

func TestShmSilentPeerTimesOut(t *testing.T) {
	a, b := shmPair(t, testConfig(300*time.Millisecond), smallShm)
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"recv", func() error { return b.Recv(make([]byte, 8)) }},
		{"send on a full ring", func() error { return a.Send(make([]byte, 5*smallShm.SlotSize)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.op()
			require.ErrorIs(t, err, ErrTimeout)
			require.Contains(t, err.Error(), EnvTimeout)
			require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
			require.Less(t, time.Since(start), 3*time.Second)
		})
	}
}

func TestShmRecvTimeoutLeavesLinkUsable(t *testing.T) {
	a, b := shmPair(t, testConfig(200*time.Millisecond), smallShm)
	require.ErrorIs(t, b.Recv(make([]byte, 8)), ErrTimeout)
	require.NoError(t, a.Send([]byte("late but ok")))
	buf := make([]byte, 11)
	require.NoError(t, b.Recv(buf))
	require.Equal(t, "late but ok", string(buf))
}

// The child side of TestShmPeerProcessDies: map the segment the parent made,
// say hello through it, then exit without closing or wait to be killed.
const envShmChild = "FLAGCX_TEST_SHM_CHILD"

func TestShmChildProcess(t *testing.T) {
	spec := os.Getenv(envShmChild)
	if spec == "" {
		t.Skip("helper process of TestShmPeerProcessDies")
	}
	var path, mode string
	var parent int
	_, err := fmt.Sscanf(spec, "%s %d %s", &path, &parent, &mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad", envShmChild, spec, err)
		os.Exit(2)
	}
	l, err := openShm(path, testConfig(time.Minute), parent)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := l.Send([]byte("hello")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if mode == "exit" {
		os.Exit(0) // no Close: the closed flag stays down
	}
	time.Sleep(time.Minute)
	os.Exit(3)
}

func TestShmPeerProcessDies(t *testing.T) {
	if os.Getenv(envShmChild) != "" {
		t.Skip("in the helper process")
	}
	tests := []struct {
		name string
		mode string // what the child does after hello
		kill bool   // the parent kills it with SIGKILL
		reap bool   // the parent reaps it (else it stays a zombie)
	}{
		{"exits without Close, reaped", "exit", false, true},
		{"killed, reaped", "wait", true, true},
		{"killed, zombie", "wait", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := createShm(testConfig(time.Minute), smallShm) // the deadline is far away
			require.NoError(t, err)
			t.Cleanup(func() { a.Close() })
			cmd := exec.Command(os.Args[0], "-test.run=^TestShmChildProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", envShmChild, a.path, os.Getpid(), tc.mode))
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			waited := false
			t.Cleanup(func() {
				if !waited {
					cmd.Process.Kill()
					cmd.Wait()
				}
			})
			a.peerPid = cmd.Process.Pid
			hello := make([]byte, 5)
			require.NoError(t, a.Recv(hello), "the child never said hello")
			require.Equal(t, "hello", string(hello))
			require.Equal(t, cmd.Process.Pid, a.attachedPid())
			a.unlink()

			var died time.Time
			if tc.kill {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			}
			if tc.reap {
				cmd.Wait()
				waited = true
				died = time.Now()
			} else {
				// Wait until the kernel has made it a zombie.
				require.Eventually(t, func() bool { return processGone(cmd.Process.Pid) != "" }, 5*time.Second, time.Millisecond)
				died = time.Now()
			}
			err = a.Recv(make([]byte, 8))
			require.ErrorIs(t, err, ErrClosed)
			require.Contains(t, err.Error(), "process "+strconv.Itoa(cmd.Process.Pid)+" died")
			require.Less(t, time.Since(died), time.Second, "the dead peer was found too late")
		})
	}
}

func TestSetupShmLink(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(10 * time.Second)
	sc := smallShm
	sc.Dir = dir
	d, acc := connPair(t, cfg)
	var creator, opener *ShmLink
	var cerr, oerr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); creator, cerr = SetupShmLink(acc, true, cfg, sc) }()
	go func() { defer wg.Done(); opener, oerr = SetupShmLink(d, false, cfg, DefaultShmConfig()) }()
	wg.Wait()
	require.NoError(t, cerr)
	require.NoError(t, oerr)
	defer creator.Close()
	defer opener.Close()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "the segment is unlinked once both sides mapped it")
	require.Equal(t, os.Getpid(), creator.PeerPid())
	require.Equal(t, os.Getpid(), opener.PeerPid())
	require.Equal(t, sc.SlotSize, opener.SlotSize(), "the creator's geometry wins")
	require.Equal(t, sc.Slots, opener.Slots())
	// The TCP conns are not needed any more.
	require.NoError(t, d.Close())
	require.NoError(t, acc.Close())
	msg := randomBytes(5, 3*sc.SlotSize+7)
	go func() { _ = opener.Send(msg) }()
	buf := make([]byte, len(msg))
	require.NoError(t, creator.Recv(buf))
	require.Equal(t, msg, buf)
}

func TestSetupShmLinkFallsBack(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	on := smallShm
	on.Dir = t.TempDir()
	off := on
	off.Disable = true
	missing := on
	missing.Dir = filepath.Join(t.TempDir(), "no-such-dir")
	tests := []struct {
		name     string
		cre, opn ShmConfig
		want     string
	}{
		{"creator disabled", off, on, EnvShmDisable},
		{"opener disabled", on, off, EnvShmDisable},
		{"both disabled", off, off, EnvShmDisable},
		{"no shm directory", missing, on, "no-such-dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, acc := connPair(t, cfg)
			var cerr, oerr error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); _, cerr = SetupShmLink(acc, true, cfg, tc.cre) }()
			go func() { defer wg.Done(); _, oerr = SetupShmLink(d, false, cfg, tc.opn) }()
			wg.Wait()
			require.ErrorIs(t, cerr, ErrShmUnavailable)
			require.ErrorIs(t, oerr, ErrShmUnavailable)
			require.Contains(t, cerr.Error()+oerr.Error(), tc.want)
			entries, err := os.ReadDir(on.Dir)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing left behind")
			// The connection is still in step for TCP.
			go func() { _ = d.Send([]byte("tcp")) }()
			buf := make([]byte, 3)
			require.NoError(t, acc.Recv(buf))
			require.Equal(t, "tcp", string(buf))
		})
	}
}

func TestSetupShmLinkPeerGone(t *testing.T) {
	cfg := testConfig(2 * time.Second)
	d, acc := connPair(t, cfg)
	require.NoError(t, d.Close())
	dir := t.TempDir()
	sc := smallShm
	sc.Dir = dir
	_, err := SetupShmLink(acc, true, cfg, sc)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrShmUnavailable), "a dead connection is not a reason to fall back")
	entries, _ := os.ReadDir(dir)
	require.Empty(t, entries)
}

func TestShmConfigFromLookup(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want ShmConfig
		bad  []string
	}{
		{"defaults", nil, DefaultShmConfig(), nil},
		{"sizes", map[string]string{EnvShmSlotSize: "1M", EnvShmSlots: "16"}, ShmConfig{SlotSize: 1 << 20, Slots: 16, Dir: DefaultShmDir}, nil},
		{"disable", map[string]string{EnvShmDisable: "1"}, ShmConfig{SlotSize: DefaultShmSlotSize, Slots: DefaultShmSlots, Disable: true, Dir: DefaultShmDir}, nil},
		{"enable", map[string]string{EnvShmDisable: "0"}, DefaultShmConfig(), nil},
		{"malformed", map[string]string{EnvShmSlotSize: "12", EnvShmSlots: "zero", EnvShmDisable: "maybe"}, DefaultShmConfig(), []string{EnvShmSlotSize, EnvShmSlots, EnvShmDisable}},
		{"too much memory", map[string]string{EnvShmSlotSize: "256M", EnvShmSlots: "8"}, DefaultShmConfig(), []string{"1 GiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShmConfigFromLookup(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			require.Equal(t, tc.want, got)
			if tc.bad == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			for _, s := range tc.bad {
				require.Contains(t, err.Error(), s)
			}
		})
	}
}

// BenchmarkShmLink measures one-way ShmLink throughput between two mappings
// (in one process; both sides run as goroutines), next to
// BenchmarkLinkLoopback for TCP:
//
//	go test -run '^$' -bench 'BenchmarkShmLink|BenchmarkLinkLoopback' ./hostnet/
//
// FLAGCX_SHM_SLOT_SIZE and FLAGCX_SHM_SLOTS apply.
func BenchmarkShmLink(b *testing.B) {
	sc, err := ShmConfigFromEnv()
	require.NoError(b, err)
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20, 256 << 20} {
		b.Run("size="+sizeName(size), func(b *testing.B) {
			tx, rx := shmPair(b, testConfig(time.Minute), sc)
			benchStream(b, tx, rx, size)
		})
	}
}

// BenchmarkShmPingPong is BenchmarkConnPingPong over shared memory.
func BenchmarkShmPingPong(b *testing.B) {
	d, a := shmPair(b, testConfig(time.Minute), DefaultShmConfig())
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
