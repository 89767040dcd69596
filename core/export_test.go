package core

import "github.com/flagcx/flagcx-go/internal/sched"

// SchedPlan is rank's plan for call as the schedules build it, for the
// external tests that check a plan's fields beside its results.
func SchedPlan(c *Comm, rank int, call sched.Call) (*sched.Plan, error) {
	return sched.Build(c.layout, rank, call, c.opts)
}
