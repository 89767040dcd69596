package core

import (
	"github.com/flagcx/flagcx-go/core/internal/watchdog"
	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// ErrTimeout is the sentinel of a missed deadline: errors.Is(err,
// core.ErrTimeout) holds for a peer that made no progress before
// FLAGCX_TIMEOUT and for a plugin call that the watchdog gave up on.
var ErrTimeout = hostnet.ErrTimeout

// TimeoutError is a plugin call that did not return within the
// communicator's deadline (FLAGCX_TIMEOUT). errors.Is matches ErrTimeout
// and sdk.ErrSystemError. Its fields: Rank (the rank whose call timed
// out), Plugin (the plugin's name, "nvidia"), Call (the plugin entry:
// "allReduce", "streamSynchronize"), After (the collective begun before a
// call that waits for the device, or ""), Timeout (the deadline it
// missed) and Stalled (the ranks of this host whose process was gone or
// stopped when the watchdog fired, the likely cause; "" when none were).
type TimeoutError = watchdog.TimeoutError

// Watchdog bounds the plugin calls of one rank's communicator by its
// deadline (FLAGCX_TIMEOUT). When a call is still in flight past it, the
// watchdog aborts the communicator from its own goroutine, so that a vendor
// library blocked in a collective returns where it supports that (as
// NCCL's ncclCommAbort makes it), and that call, every later one, Err and
// Fired report a *TimeoutError naming the plugin, the call and the rank.
// Its methods: Begin marks a plugin call (its PluginCall's End ends it),
// Timeout is the deadline, Fired a channel closed when it gives up, Err
// its *TimeoutError; a nil Watchdog (a host rank's) marks nothing.
//
// Marking a call costs a mutex and a clock reading, no allocation and no
// goroutine, so that the calls on the latency path can all be marked; one
// goroutine per watchdog looks at the calls in flight a few times per
// deadline.
//
// A call that does not return even after the abort cannot be taken back:
// purego runs C on the calling goroutine's own OS thread, Go cannot unwind
// a C stack, and ending that thread would end the process. The goroutine
// and its thread are abandoned. This is why Comm.Guard runs work on a
// goroutine of its own: its caller still gets the error.
type Watchdog = watchdog.Watchdog

// PluginCall is one plugin call in flight, from Watchdog.Begin. Its End
// ends the call and returns the call's error, or the watchdog's
// *TimeoutError once it has fired.
type PluginCall = watchdog.PluginCall
