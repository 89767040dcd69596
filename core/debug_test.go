package core

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

func TestCollDebugFromEnv(t *testing.T) {
	cases := []struct {
		level, subsys     string
		init, coll, every bool
	}{
		{"", "", false, false, false},
		{"", "COLL", false, true, false},
		{"INFO", "", true, false, false},
		{"INFO", "INIT,COLL", true, true, false},
		{"TRACE", "COLL", false, true, true},
		{"WARN", "COLL", false, false, false},
		{"INFO", "ALL", true, true, false},
		{"INFO", "^COLL", true, false, false},
		{"", "^NET", false, false, false}, // COLL is on, but not asked for by name
		{"INFO", "^NET", true, true, false},
	}
	for _, c := range cases {
		env := map[string]string{EnvDebug: c.level, EnvDebugSubsys: c.subsys}
		d := collDebugFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		require.Equal(t, c.init, d.init, "%+v", c)
		require.Equal(t, c.coll, d.coll, "%+v", c)
		require.Equal(t, c.every, d.every, "%+v", c)
	}
}

func TestTracePlanOncePerCall(t *testing.T) {
	l, err := sched.NewLayout([]sched.Member{
		{Rank: 0, Vendor: "NVIDIA", Plugin: "nvidia", Types: ^uint32(0), Ops: ^uint32(0)},
		{Rank: 1, Vendor: sched.HostVendor, Device: -1, Types: ^uint32(0), Ops: ^uint32(0)},
	}, nil)
	require.NoError(t, err)
	var out strings.Builder
	c := &Comm{rank: 0, layout: l, printed: map[string]bool{}, debug: collDebug{coll: true, w: &out}}
	call := sched.Call{Coll: sdk.AllReduce, Count: 8, DType: sdk.Float32, Op: sdk.Avg}
	p, err := sched.Build(c.layout, 0, call, c.opts)
	require.NoError(t, err)
	c.tracePlan(p)
	c.tracePlan(p)
	require.Equal(t, 1, strings.Count(out.String(), "COLL plan rank 0: AllReduce float32 avg count 8: path c2c"), out.String())
	require.Contains(t, out.String(), "[0] COLL     0 d2h   c0  copy send[0:32] -> stage[0:32]")
	require.Contains(t, out.String(), "scale float32 stage[0:32] by 1/2")
	c.debug.every = true
	c.tracePlan(p)
	require.Equal(t, 2, strings.Count(out.String(), "COLL plan rank 0"))
}

// TestFirstCollectiveSaysItsPath: at INFO (INIT) the first collective of a
// communicator logs which runner and path run it, once; later ones do not.
func TestFirstCollectiveSaysItsPath(t *testing.T) {
	comms := startComms(t, 2, testNet(10*time.Second))
	outs := make([]*strings.Builder, 2)
	for r, c := range comms {
		outs[r] = &strings.Builder{}
		c.debug = collDebug{init: true, w: outs[r]}
	}
	errs := onAll(comms, func(c *Comm) error {
		b := make([]byte, 64)
		for i := 0; i < 3; i++ {
			if err := c.AllReduce(HostBuffer(b), HostBuffer(b), 16, sdk.Float32, sdk.Sum, 0); err != nil {
				return err
			}
		}
		return nil
	})
	for r := range comms {
		require.NoError(t, errs[r])
		require.Equal(t, 1, strings.Count(outs[r].String(), "first collective"), outs[r].String())
		require.Contains(t, outs[r].String(), `INIT first collective AllReduce: runner "host engine"`)
	}
}
