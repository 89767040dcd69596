package core

import "github.com/flagcx/flagcx-go/internal/sched"

// SetStepRan tells f of every step an executor runs (nil: nobody); the
// tests of core_test see through it that the plans that print are the
// plans that run.
func SetStepRan(f func(p *sched.Plan, i int)) { stepRan = f }

// PlanFor is rank's plan for call as a printer builds it (bench
// --print-plan): afresh, from the communicator's layout and options.
func (c *Comm) PlanFor(rank int, call sched.Call) (*sched.Plan, error) {
	return sched.Build(c.layout, rank, call, c.opts)
}
