package main

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// C holds communicators by number (Go pointers may not live in C memory):
// struct flagcxComm carries the number, the registry the *comm.
var registry struct {
	mu    sync.Mutex
	next  uint64
	comms map[uint64]*comm
	// lastErr is the process's last failure, flagcxGetLastError(NULL).
	lastErr string
	// nullGroups are the open flagcxGroupStart(NULL) groups, by calling C
	// thread (a key shim.c hands over): groups are per thread, as NCCL's.
	nullGroups map[uintptr]*nullGroup
}

// nullGroup is one thread's flagcxGroupStart(NULL): its depth, and the
// communicators used inside it, whose groups its GroupEnd runs.
type nullGroup struct {
	depth  int
	joined []*comm
}

func register(c *comm) uint64 {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.comms == nil {
		registry.comms = map[uint64]*comm{}
	}
	registry.next++
	registry.comms[registry.next] = c
	return registry.next
}

func lookupComm(id uint64) (*comm, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if c := registry.comms[id]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w: the communicator was destroyed or never made: pass one from flagcxCommInitRank", sdk.ErrInvalidArgument)
}

func unregister(id uint64) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	delete(registry.comms, id)
}

// fail records err as the last error of c (nil: of the process) and of the
// process, and returns its result code. entry names the C function.
func fail(c *comm, entry string, err error) sdk.Result {
	if err == nil {
		return sdk.Success
	}
	msg := entry + ": " + err.Error()
	registry.mu.Lock()
	registry.lastErr = msg
	if c != nil {
		c.lastErr = msg
	}
	registry.mu.Unlock()
	r := sdk.ResultOf(err)
	if r == sdk.Success { // an error without a code of its own
		r = sdk.InternalError
	}
	return r
}

// lastError is flagcxGetLastError's text for communicator id (0: the
// process's).
func lastError(id uint64) string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if c := registry.comms[id]; c != nil && c.lastErr != "" {
		return c.lastErr
	}
	if registry.lastErr == "" {
		return "no error"
	}
	return registry.lastErr
}

// notSupported is the error of an entry flagcx-go does not serve.
func notSupported(what string) error {
	return fmt.Errorf("%w: %s is not supported by flagcx-go's libflagcx.so (docs/c-api.md lists what is)", sdk.ErrNotSupported, what)
}

// joinGlobalGroup opens c's group when the calling thread (key; 0 when
// it has no flagcxGroupStart(NULL) open) has one open and c is not yet in
// it.
func joinGlobalGroup(c *comm, key uintptr) {
	if key == 0 {
		return
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	g := registry.nullGroups[key]
	if g == nil || g.depth == 0 {
		return
	}
	for _, j := range g.joined {
		if j == c {
			return
		}
	}
	g.joined = append(g.joined, c)
	c.groupStart()
}

// globalGroup opens (start) or closes the calling thread's (key)
// flagcxGroupStart(NULL) group; the outermost close runs the groups of
// every communicator used inside.
func globalGroup(key uintptr, start bool) error {
	registry.mu.Lock()
	if registry.nullGroups == nil {
		registry.nullGroups = map[uintptr]*nullGroup{}
	}
	g := registry.nullGroups[key]
	if start {
		if g == nil {
			g = &nullGroup{}
			registry.nullGroups[key] = g
		}
		g.depth++
		registry.mu.Unlock()
		return nil
	}
	if g == nil || g.depth == 0 {
		registry.mu.Unlock()
		return fmt.Errorf("%w: flagcxGroupEnd(NULL) without flagcxGroupStart(NULL) on this thread", sdk.ErrInvalidUsage)
	}
	g.depth--
	var run []*comm
	if g.depth == 0 {
		run = g.joined
		delete(registry.nullGroups, key)
	}
	registry.mu.Unlock()
	if len(run) == 1 {
		c := run[0]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.groupEnd()
	}
	return endGroups(run)
}

// endGroups runs the groups of several communicators at once, each on a
// goroutine of its own bound to its device: the ranks of one communicator
// that one process drives (nccl-tests -g 2: an AllReduce on comm0 and on
// comm1 in one group) wait for each other inside their groups, so one
// after the other would deadlock. Every wait inside has core's deadline
// (FLAGCX_TIMEOUT); this one, for the lot, is groupWait.
func endGroups(run []*comm) error {
	errs := make([]error, len(run))
	left := make(chan int, len(run))
	for i, c := range run {
		go func() {
			defer func() { left <- i }()
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("%w: a bug of flagcx-go's libflagcx.so (please report it): %v", sdk.ErrInternalError, p)
				}
			}()
			// The device set stays with the goroutine while it runs.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// c.mu is held across the group's device waits, as in every
			// call of the communicator: flagcxCommAbort takes no lock
			// (capiCommFree), so the hold cannot keep it from ending
			// the waits.
			c.mu.Lock()
			defer c.mu.Unlock()
			if err := c.bindDevice(); err != nil {
				errs[i] = err
				return
			}
			errs[i] = c.groupEnd()
		}()
	}
	wait := groupWait()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	done := make([]bool, len(run))
	for range run {
		select {
		case i := <-left:
			done[i] = true
		case <-deadline.C:
			var late []string
			for i, c := range run {
				if !done[i] {
					late = append(late, fmt.Sprintf("rank %d", c.rank()))
				}
			}
			return fmt.Errorf("%w: the groups of %s of this thread's group did not end within %v (10 x FLAGCX_TIMEOUT): abort those communicators",
				sdk.ErrRemoteError, strings.Join(late, ", "), wait)
		}
	}
	return errors.Join(errs...)
}

// streams are the live streams streamCreate made, which
// deviceSynchronize waits for.
var streams streamSet

type streamSet struct {
	mu sync.Mutex
	m  map[loader.Stream]struct{}
}

func (s *streamSet) add(st loader.Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[loader.Stream]struct{}{}
	}
	s.m[st] = struct{}{}
}

func (s *streamSet) remove(st loader.Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, st)
}

func (s *streamSet) all() []loader.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]loader.Stream, 0, len(s.m))
	for st := range s.m {
		out = append(out, st)
	}
	return out
}
