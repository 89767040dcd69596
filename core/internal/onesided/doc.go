// Package onesided is the machinery behind core.Comm's one-sided calls
// (RegisterWindow, AllocWindow, Put, PutBatch, Get, PutSignal, Signal,
// WaitSignal, ReadCounter, WaitCounter; docs/onesided.md has the design,
// the transports and the limits). core/onesided.go keeps the public API
// and hands each call to a State here.
//
// What it holds, one file each:
//
//   - state.go: a communicator's State (started by its first
//     registration, stopped by Destroy and Abort) and the one wait every
//     call that waits goes through;
//   - window.go: the window table and the collective registration;
//   - rma.go: the checks and dispatch of Put, PutBatch, Get, PutSignal and
//     Signal, and the operations of a rank on itself;
//   - signals.go and counter.go: the signal slots and the completion
//     counter, and their waits;
//   - proto.go, pair.go and serve.go: the message protocol on the one-sided
//     links, the initiator's side of a pair and the target's (the progress
//     goroutines that serve a passive peer);
//   - shm.go: same-host windows in shared memory, copied straight;
//   - device.go: a device rank's memory, staged through host memory.
//
// What it asks of its user is the interface Comm (comm.go): the rank and
// size, the communicator's deadline, a host all-gather for the
// registration's records, links of their own (Links: the one-sided
// traffic never shares a collective's links), the device's calls (Device,
// nil on a host rank) and the communicator's naming of a failed call. The
// user checks the rest (a usable communicator, outside a group, memory of
// the rank's kind) before it calls in, and uses a State from one goroutine
// at a time, as a communicator is used.
package onesided
