package executor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/sched"
)

// TestInOrder: a plan of one chunk whose steps depend only on earlier
// ones runs on the calling goroutine; a pipeline or a step that waits on
// a later one keeps its lanes.
func TestInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    sched.Plan
		want bool
	}{
		{name: "one chunk, deps back", p: sched.Plan{Chunks: 1, Steps: []sched.Step{{}, {Deps: []int{0}}}}, want: true},
		{name: "pipeline", p: sched.Plan{Chunks: 2, Steps: []sched.Step{{}, {Deps: []int{0}}}}},
		{name: "dep ahead", p: sched.Plan{Chunks: 1, Steps: []sched.Step{{Deps: []int{1}}, {}}}},
		{name: "no chunks", p: sched.Plan{Steps: []sched.Step{{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, inOrder(&tc.p))
		})
	}
}
