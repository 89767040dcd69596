// Package executor runs a rank's plans (internal/sched): the executor of
// core.Comm's schedules across clusters and of the shared-memory plane.
// It holds
//
//   - the plan executor: lanes, steps, the call's buffers, staging and
//     scratch, and the events that chain a plan's device work (exec.go,
//     step.go, mem.go, chain.go), with the staged AllReduce in pieces
//     (staged.go);
//   - the shared-memory plane of a communicator whose ranks share one
//     host: the host's windows registered with the device ranks'
//     runtimes, the executor of sched.PathShm plans, and the host ranks'
//     MemAlloc memory a device rank registered (shm.go, shm_exec.go,
//     shm_registered.go);
//   - a device rank's relays and their proxy, the host half of a small
//     call in one launch (relay.go, relay_proxy.go).
//
// What it asks of core (Config): the rank's place (rank, ranks, plugin
// and device or the host, layout), its three host communicators
// (core/internal/hostcomm), and through interfaces declared here the
// plugin's calls that wait for the device, bounded by core's watchdog
// (Device: core/guard.go's watchedPlugin), the vendor communicator's
// collectives under the same watchdog (Vendor: core/guard.go's
// watchedComm), and the communicator's failure handling (Owner), which
// keeps docs/resilience.md's abort order: a failed call tells the
// peers, shuts the host side and aborts the vendor (Owner.FailStart)
// before it waits for its device.
//
// core builds an Executor once the host communicators are up (core's
// start), sets up the plane there in the order it always had (streams,
// windows, probes) and releases it in stop; between the two, core's
// runners (core/runners.go) hand it checked calls with their buffers as
// Buf, converted without an allocation.
package executor
