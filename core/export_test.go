package core

import (
	"testing"

	"github.com/flagcx/flagcx-go/core/internal/executor"
	"github.com/flagcx/flagcx-go/internal/sched"
)

// SchedPlan is rank's plan for call as the schedules build it (afresh,
// from the communicator's layout and options, as bench --print-plan
// does), for the external tests that check a plan's fields beside its
// results.
func SchedPlan(c *Comm, rank int, call sched.Call) (*sched.Plan, error) {
	return sched.Build(c.layout, rank, call, c.opts)
}

// SetStepRan tells f of every step an executor runs (nil: nobody); the
// tests of core_test see through it that the plans that print are the
// plans that run.
func SetStepRan(f func(p *sched.Plan, call uint64, i int)) { executor.SetStepRan(f) }

// StagedInPieces is how many staged AllReduces c ran in pieces
// (core/internal/executor/staged.go).
func StagedInPieces(c *Comm) int { return c.exec.StagedInPieces() }

// FlagcxFiles lists this process's flagcx segments in /dev/shm, for the
// external tests that require none left behind.
func FlagcxFiles(t *testing.T) []string { return flagcxFiles(t) }

// RelayWaitAfterClose closes c's shared windows, as Destroy and Abort do,
// then waits as c's relay proxy does for a landed word that never comes
// (on c's idle d2h stream): the wait's error.
func RelayWaitAfterClose(c *Comm) error { return c.exec.CloseAndAwaitRelay() }

// AbortVendor aborts c's vendor communicator alone, as a vendor library
// that failed on its own would leave it: its cluster peers' communicators
// then report an asynchronous error, while c's host side stays up.
func AbortVendor(c *Comm) error { return c.abortVendor() }
