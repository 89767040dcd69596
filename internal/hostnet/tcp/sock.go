package tcp

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// sockConn is what a Conn needs of its socket: a *net.TCPConn, which waits
// in the Go runtime's netpoller, or a *sock, which waits in its own system
// calls (polled connections, Conn.SetSpin).
type sockConn interface {
	io.ReadWriter
	SetDeadline(time.Time) error
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	Close() error
}

// sock is a connected TCP socket outside the Go runtime's netpoller: reads
// and writes are this package's system calls on a non-blocking descriptor,
// and a call that must wait sleeps in ppoll(2) on that one socket.
//
// Why: a socket in the netpoller wakes the runtime's idle thread, asleep in
// epoll_wait for the whole process, for every segment that arrives, even
// while the goroutine that will read it is polling the socket itself
// (Conn.readPolled). Where ranks share few cores (emulated hosts on one
// machine, a busy host) that thread takes the core the peer's poll needs:
// on 2 emulated hosts of 2 cores an 8-byte AllReduce polled for 1 ms took
// far longer at the median with GOMAXPROCS=2 than with GOMAXPROCS=1 (no
// idle thread), and strace counted several epoll_wait returns per call
// (docs/performance.md, "Sockets out of the netpoller, the every-GPU copy
// bound, host folds on 16 goroutines").
//
// Deadlines are absolute times read by every wait, which sleeps at most
// waitSlice at a time, so that a deadline moved earlier (Conn.abort) is
// seen; Close shuts the socket down, which wakes every wait at once.
type sock struct {
	fd int
	// refs is 1 while the socket is open plus one per call using fd;
	// whoever drops it to 0 closes fd, so that no call ever uses a
	// descriptor number the process has reused.
	refs     atomic.Int64
	closing  atomic.Bool
	rdl, wdl atomic.Int64 // deadlines as UnixNano; 0 is none
}

// waitSlice is the longest one ppoll sleeps before it looks at the deadline
// again.
const waitSlice = 50 * time.Millisecond

// newSock takes nc's socket out of the netpoller: it keeps a duplicate of
// the descriptor and closes nc, whose close removes the original from the
// runtime's epoll set (the duplicate was never in it). The socket stays
// non-blocking (the flag belongs to the socket, shared by both
// descriptors). On failure nc is left as it was.
func newSock(nc *net.TCPConn) (*sock, error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(orig uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, orig, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			dupErr = os.NewSyscallError("fcntl", e)
			return
		}
		fd = int(r)
	}); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, dupErr
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	_ = nc.Close()
	s := &sock{fd: fd}
	s.refs.Store(1)
	return s, nil
}

func (s *sock) acquire() bool {
	for {
		r := s.refs.Load()
		if r == 0 || s.closing.Load() {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (s *sock) release() {
	if s.refs.Add(-1) == 0 {
		_ = syscall.Close(s.fd)
	}
}

// Close shuts the socket down, which wakes every call waiting on it, and
// closes the descriptor once the last of them has returned.
func (s *sock) Close() error {
	if s.closing.Swap(true) {
		return nil
	}
	_ = syscall.Shutdown(s.fd, syscall.SHUT_RDWR)
	s.release()
	return nil
}

// wakeReaders makes a read waiting on the socket return at once (with EOF,
// which Conn reports as its abort); it leaves the peer's side untouched.
func (s *sock) wakeReaders() {
	if s.acquire() {
		_ = syscall.Shutdown(s.fd, syscall.SHUT_RD)
		s.release()
	}
}

func setDeadline(d *atomic.Int64, t time.Time) {
	if t.IsZero() {
		d.Store(0)
		return
	}
	d.Store(t.UnixNano())
}

func (s *sock) SetReadDeadline(t time.Time) error  { setDeadline(&s.rdl, t); return nil }
func (s *sock) SetWriteDeadline(t time.Time) error { setDeadline(&s.wdl, t); return nil }
func (s *sock) SetDeadline(t time.Time) error {
	setDeadline(&s.rdl, t)
	setDeadline(&s.wdl, t)
	return nil
}

// Read reads what is there, up to len(b) bytes, waiting for the first byte
// until the read deadline.
func (s *sock) Read(b []byte) (int, error) {
	if !s.acquire() {
		return 0, net.ErrClosed
	}
	defer s.release()
	for {
		n, e := rawRead(s.fd, b)
		switch e {
		case 0:
			if n == 0 && len(b) > 0 {
				return 0, io.EOF
			}
			return n, nil
		case syscall.EINTR:
		case syscall.EAGAIN:
			if err := s.wait(pollIn, &s.rdl); err != nil {
				return 0, err
			}
		default:
			return 0, os.NewSyscallError("read", e)
		}
	}
}

// readSpin is Read that first polls the socket for up to spin when nothing
// is there yet, yielding the core between polls once the wait is past
// pollYieldAfter (a core shared with the peer's sender goes to it first).
// polled says the data came while polling.
func (s *sock) readSpin(b []byte, spin time.Duration) (n int, polled bool, err error) {
	if len(b) == 0 {
		return 0, true, nil
	}
	if !s.acquire() {
		return 0, false, net.ErrClosed
	}
	var start time.Time
	for {
		m, e := rawRead(s.fd, b)
		if e == syscall.EINTR {
			continue
		}
		if e != syscall.EAGAIN {
			s.release()
			if e != 0 {
				return 0, true, os.NewSyscallError("read", e)
			}
			if m == 0 {
				return 0, true, io.EOF
			}
			return m, true, nil
		}
		now := time.Now()
		if start.IsZero() {
			start = now
			continue
		}
		waited := now.Sub(start)
		if waited >= spin {
			break
		}
		if waited >= pollYieldAfter {
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
	s.release()
	n, err = s.Read(b)
	return n, false, err
}

// Write writes all of b, waiting for room until the write deadline; n is
// what was written.
func (s *sock) Write(b []byte) (int, error) {
	return s.writev([][]byte{b})
}

// writev writes all of bufs in order, as few system calls as the kernel's
// buffer allows (one writev(2) when it takes everything).
func (s *sock) writev(bufs [][]byte) (int, error) {
	if !s.acquire() {
		return 0, net.ErrClosed
	}
	defer s.release()
	total := 0
	for {
		n, err := s.writevNow(bufs)
		if err != nil {
			return total, err
		}
		total += n
		if bufs = consumed(bufs, n); len(bufs) == 0 {
			return total, nil
		}
		if n == 0 {
			if err := s.wait(pollOut, &s.wdl); err != nil {
				return total, err
			}
		}
	}
}

// writevNow writes what the socket takes of bufs now, in one writev(2),
// and returns how much that was (0 when its buffer is full); it never
// waits. The caller holds a reference (acquire).
func (s *sock) writevNow(bufs [][]byte) (int, error) {
	var iov [4]syscall.Iovec
	k := 0
	for _, b := range bufs {
		if len(b) > 0 && k < len(iov) {
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
		}
	}
	if k == 0 {
		return 0, nil
	}
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(s.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
		switch e {
		case 0:
			return int(r), nil
		case syscall.EINTR:
		case syscall.EAGAIN:
			return 0, nil
		default:
			return 0, os.NewSyscallError("writev", e)
		}
	}
}

// readNow reads what is there now, up to len(b) bytes (0 when nothing is),
// without waiting; the peer's close is io.EOF. The caller holds a
// reference (acquire).
func (s *sock) readNow(b []byte) (int, error) {
	for {
		n, e := rawRead(s.fd, b)
		switch {
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return 0, nil
		case e != 0:
			return 0, os.NewSyscallError("read", e)
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		default:
			return n, nil
		}
	}
}

// consumed is bufs without their first n bytes, emptied slices dropped.
func consumed(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		m := min(n, len(bufs[0]))
		bufs[0] = bufs[0][m:]
		n -= m
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}

const (
	pollIn  = 0x1 // POLLIN
	pollOut = 0x4 // POLLOUT
)

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// wait sleeps in ppoll until the socket is ready for events (or has failed:
// the call that follows reports how), the deadline passes
// (os.ErrDeadlineExceeded) or the socket is closed (net.ErrClosed). It is
// a blocking system call the Go scheduler knows of, so the processor goes
// to other goroutines meanwhile.
func (s *sock) wait(events int16, deadline *atomic.Int64) error {
	for {
		if s.closing.Load() {
			return net.ErrClosed
		}
		slice := waitSlice
		if d := deadline.Load(); d != 0 {
			left := time.Duration(d - time.Now().UnixNano())
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		ts := syscall.NsecToTimespec(int64(slice))
		pfd := pollFd{fd: int32(s.fd), events: events}
		r, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case e == syscall.EINTR, e == 0 && r == 0:
			// interrupted or the slice ran out: look again
		case e != 0:
			return os.NewSyscallError("ppoll", e)
		default:
			return nil
		}
	}
}

// rawRead is read(2) on a non-blocking socket as a raw system call: it
// never blocks, so it need not tell the Go scheduler, whose bookkeeping of
// a system call (and the wake-up of its monitor thread) cost more than the
// read itself when a poll repeats it.
func rawRead(fd int, b []byte) (int, syscall.Errno) {
	if len(b) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
