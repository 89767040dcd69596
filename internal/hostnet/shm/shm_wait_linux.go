//go:build linux

package shm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Waiting on a word another process advances (a ring counter, a step
// counter). Three phases, so that a small message costs no system call
// while both ranks run and an oversubscribed host still makes progress:
//
//  1. poll the word for spin (long when every rank of the host has a core
//     of its own, short when ranks outnumber cores: then the waiter holds
//     the very core its peer needs);
//  2. give the core away (sched_yield and runtime.Gosched) for yield;
//  3. announce the sleep in the word's sleeper count and sleep on it with
//     a shared futex, at most shmNap at a time, rechecking between naps
//     whether the wait is pointless (closed, peer process gone) and the
//     deadline.
//
// The side that advances a word wakes sleepers only when the count says
// there are any (shmPost), so a steady stream makes no system call.
var shmNap = 50 * time.Millisecond // longest futex sleep between checks

// shmPolicy is how long the first two phases last.
type shmPolicy struct {
	spin, yield time.Duration
}

// Spin policies: one core per rank, and more ranks than cores. Variables so
// that tests and benchmarks can tune them.
var (
	shmDedicated      = shmPolicy{spin: 100 * time.Microsecond, yield: 2 * time.Millisecond}
	shmOversubscribed = shmPolicy{spin: 2 * time.Microsecond, yield: 50 * time.Microsecond}
	// shmPassive is the wait of a link that is idle until a peer has work
	// for it (ShmLink.RecvIdle): it sleeps almost at once.
	shmPassive = shmPolicy{spin: 0, yield: 20 * time.Microsecond}
)

// policyFor picks the policy for ranks processes of this host.
func policyFor(ranks int) shmPolicy {
	if ranks > runtime.NumCPU() {
		return shmOversubscribed
	}
	return shmDedicated
}

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared (no FUTEX_PRIVATE_FLAG): the word lives in several processes
	futexWakeOp = 1 // FUTEX_WAKE
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32) {
	_, _, _ = syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}

func osYield() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// reached: the wrapping counter v is at target or past it.
func reached(v, target uint32) bool { return int32(v-target) >= 0 }

// shmPost stores v into word and wakes its sleepers, if any.
func shmPost(word, sleepers *uint32, v uint32) {
	atomic.StoreUint32(word, v)
	if atomic.LoadUint32(sleepers) != 0 {
		futexWake(word)
	}
}

// shmWatch is what a waiter checks between naps: why waiting is pointless
// (nil while it is not), and how to describe the wait in a timeout.
type shmWatch interface {
	stopped() error
	timeoutErr(d time.Duration) error
}

// shmAwait waits until *word reaches target (wrapping) and returns the
// value it saw.
func shmAwait(word, sleepers *uint32, target uint32, pol shmPolicy, timeout time.Duration, w shmWatch) (uint32, error) {
	if v := atomic.LoadUint32(word); reached(v, target) {
		return v, nil
	}
	start := time.Now()
	// Phase 1: poll, reading the clock every 64 polls.
	for i := 1; ; i++ {
		if v := atomic.LoadUint32(word); reached(v, target) {
			return v, nil
		}
		if i&63 == 0 && time.Since(start) >= pol.spin {
			break
		}
	}
	// Phase 2: let others run.
	for i := 1; ; i++ {
		if v := atomic.LoadUint32(word); reached(v, target) {
			return v, nil
		}
		if i&1 == 0 {
			osYield()
		} else {
			runtime.Gosched()
		}
		if i&7 == 0 && time.Since(start) >= pol.spin+pol.yield {
			break
		}
	}
	// Phase 3: sleep, checking after every nap (so within shmNap) whether
	// the peer still runs.
	for {
		atomic.AddUint32(sleepers, 1)
		v := atomic.LoadUint32(word)
		if reached(v, target) {
			atomic.AddUint32(sleepers, ^uint32(0))
			return v, nil
		}
		nap := shmNap
		if timeout > 0 {
			left := timeout - time.Since(start)
			if left <= 0 {
				atomic.AddUint32(sleepers, ^uint32(0))
				return 0, w.timeoutErr(timeout)
			}
			nap = min(nap, left)
		}
		futexWait(word, v, nap)
		atomic.AddUint32(sleepers, ^uint32(0))
		if v := atomic.LoadUint32(word); reached(v, target) {
			return v, nil
		}
		if err := w.stopped(); err != nil {
			return 0, err
		}
	}
}

// processGone says why pid no longer runs ("" while it does, or when that
// cannot be told).
func processGone(pid int) string {
	if pid <= 0 || pid == os.Getpid() {
		return ""
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return "died (it was killed or crashed)"
	}
	// A dead child that its parent has not reaped yet still answers kill.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return "died (it was killed or crashed; a zombie now)"
	}
	return ""
}

// ProcessStalled says why process pid of this host cannot take part in a
// collective: "is gone" when it no longer runs (it exited, was killed or
// crashed; a zombie, or a process in the middle of exiting, counts), "is
// stopped" when a signal (SIGSTOP, SIGTSTP) or a debugger holds it; ""
// while it runs, or when that cannot be told. A rank whose wait failed
// asks it of all its peers on this host: the peer it waited for may only
// have been waiting, or have given up, on another.
func ProcessStalled(pid int) string {
	const gone = "is gone (it exited, was killed or crashed)"
	if processGone(pid) != "" {
		return gone
	}
	f := procStat(pid)
	if f == nil {
		return ""
	}
	if exitingFlags(f) {
		return gone
	}
	switch f[0] {
	case "T", "t":
		return "is stopped (by a signal such as SIGSTOP, or by a debugger)"
	}
	return ""
}

// ProcessEnded reports whether process pid is dead or on its way out: gone,
// a zombie, or still exiting (see exitingFlags).
func ProcessEnded(pid int) bool {
	if processGone(pid) != "" {
		return true
	}
	f := procStat(pid)
	return f != nil && exitingFlags(f)
}

// procStat is the fields of /proc/<pid>/stat after the command's name
// (which may hold anything): state, ppid, pgrp, session, tty_nr, tpgid,
// flags, ...; nil for this process, or when they cannot be read.
func procStat(pid int) []string {
	if pid <= 0 || pid == os.Getpid() {
		return nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return nil
	}
	return f
}

// exitingFlags: a killed process closes its sockets on its way out, before
// it is a zombie, so a peer that saw them close may look while it is still
// exiting, which PF_EXITING in its flags tells.
func exitingFlags(f []string) bool {
	const pfExiting = 0x4
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// peerGoneErr is the error of a wait whose peer process died.
func peerGoneErr(what string, pid int, why string) error {
	return fmt.Errorf("%s: %w: process %d %s", what, wire.ErrClosed, pid, why)
}
