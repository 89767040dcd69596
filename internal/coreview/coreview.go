// Package coreview gives the module's own tools (the benchmark, the
// conformance worker and heterotest) what package core keeps from its
// users: a communicator's cluster layout and agreed settings, from which
// they build and print plans, and its host communicator over all ranks,
// on which they exchange timings and records out of band.
//
// Core fills the view in (Register, from its init); this package cannot
// import core, which imports it, so Of takes the communicator as an any.
package coreview

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// View is what core shows of one rank's communicator to this module.
type View struct {
	// Layout is the communicator's clusters (the same on every rank).
	Layout *sched.Layout
	// Options are the schedule settings every rank agreed on at init;
	// sched.Build(Layout, rank, call, Options) is any rank's plan.
	Options sched.Options
	// Host is the host communicator over all ranks, on host memory. It
	// must not be used while a collective of the communicator runs.
	Host HostComm
}

// HostCalls is a host communicator's collectives, sends and receives on
// Go memory. They take no stream: they return when the result is in
// place.
type HostCalls interface {
	AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error
	Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error
	Broadcast(send, recv []byte, count int, dt sdk.DataType, root int) error
	AllGather(send, recv []byte, sendcount int, dt sdk.DataType) error
	ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error
	AlltoAll(send, recv []byte, count int, dt sdk.DataType) error
	AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType) error
	Gather(send, recv []byte, count int, dt sdk.DataType, root int) error
	Scatter(send, recv []byte, count int, dt sdk.DataType, root int) error
	Send(buf []byte, count int, dt sdk.DataType, peer int) error
	Recv(buf []byte, count int, dt sdk.DataType, peer int) error
	GroupStart()
	GroupEnd() error
}

// HostComm is the host communicator of View.Host: HostCalls, the rank
// and size, a barrier, and registered host memory (core.Comm.MemAlloc's
// semantics).
type HostComm interface {
	HostCalls
	Rank() int
	Count() int
	Barrier() error
	CanMemAlloc() bool
	MemAlloc(n int) ([]byte, error)
	MemFree(b []byte) error
}

var of func(comm any) (*View, bool)

// Register installs core's function behind Of; core calls it in its init.
func Register(f func(comm any) (*View, bool)) { of = f }

// Of is the view of comm, a *core.Comm. Anything else is a bug in the
// caller, and panics.
func Of(comm any) *View {
	if of != nil {
		if v, ok := of(comm); ok {
			return v
		}
	}
	panic(fmt.Sprintf("coreview.Of: %T is not a *core.Comm", comm))
}

// Plan is rank's plan for call on this communicator (any rank's: plans
// are pure data).
func (v *View) Plan(rank int, call sched.Call) (*sched.Plan, error) {
	return sched.Build(v.Layout, rank, call, v.Options)
}
