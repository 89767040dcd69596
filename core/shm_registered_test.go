package core_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestRegisteredAllReduce: with every host rank's buffers in MemAlloc's
// memory, a pipelined AllReduce beside one emulated device cluster or
// several runs the registered plan (the devices read and write the host
// ranks' buffers, the host copies nothing), exact for every type and op,
// in place and out of place. One-step calls, and calls where one host rank's
// buffers are ordinary memory, run the windows' plans on every rank,
// exact too.
func TestRegisteredAllReduce(t *testing.T) {
	small := []sdk.DataType{sdk.Float32, sdk.Bfloat16, sdk.Int32}
	for _, tc := range []struct {
		ranks    string
		split    []int // FLAGCX_CLUSTER_SPLIT_LIST (nil: one cluster a vendor)
		ordinary int   // a host rank with ordinary memory (-1: none)
		chunk    int
		counts   []int
		types    []sdk.DataType
	}{
		{"dhh", nil, -1, 64 << 10, []int{37, 70001}, small},
		{"hdh", nil, -1, 64 << 10, []int{37, 70001}, small},
		{"ddhh", nil, -1, 64 << 10, []int{37, 70001}, small},
		{"dhh", nil, 2, 64 << 10, []int{37, 70001}, small},
		// Two device clusters: each chunk's host-facing cluster in turn.
		{"ddhh", []int{1, 1, 2}, -1, 64 << 10, []int{37, 70001}, small},
		{"hddh", []int{1, 1, 1, 1}, -1, 64 << 10, []int{70001}, small},
		{"dddhh", []int{2, 1, 2}, 3, 64 << 10, []int{70001}, small},
		// Messages of several MiB in 1 MiB chunks (uneven parts in the
		// cluster of two).
		{"dhh", nil, -1, 1 << 20, []int{2 << 20}, []sdk.DataType{sdk.Float32}},
		{"ddhh", nil, -1, 1 << 20, []int{2<<20 + 1}, []sdk.DataType{sdk.Float32}},
		{"dddhh", []int{2, 1, 2}, -1, 1 << 20, []int{2<<20 + 1}, []sdk.DataType{sdk.Float32}},
	} {
		name := fmt.Sprintf("%s, %s chunks", tc.ranks, bytesize.Compact(int64(tc.chunk)))
		opts := []core.Option{core.WithChunk(tc.chunk)}
		if tc.split != nil {
			name += fmt.Sprintf(", split %v", tc.split)
			opts = append(opts, core.WithSplitList(tc.split))
		}
		if tc.ordinary >= 0 {
			name += fmt.Sprintf(", rank %d in ordinary memory", tc.ordinary)
		}
		t.Run(name, func(t *testing.T) {
			comms, mems, streams := startMixed(t, tc.ranks, opts...)
			n := len(comms)
			reg := make([]heterotest.Mem, n)
			for r := range comms {
				reg[r] = &heterotest.RegisteredMem{Comm: comms[r], Own: mems[r], Unused: r == tc.ordinary}
			}
			ran := recordSteps(t)
			for _, c := range heterotest.Matrix(n, tc.counts, tc.types, 7) {
				if c.Coll != sdk.AllReduce || (c.Count > 1<<20 && c.Op != sdk.Sum) {
					continue
				}
				cname := heterotest.Name(c, false)
				runCase(t, comms, reg, streams, c)
				oneShot := c.Count*c.Type.Size()*n <= sched.ShmOneShot
				runs, _ := ran.take()
				require.NotEmpty(t, runs, cname)
				for _, run := range runs {
					want := !oneShot && tc.ordinary < 0
					require.Equal(t, want, run.p.Shm.Registered, "%s, rank %d: the registered plan ran", cname, run.p.Rank)
				}
				runCase(t, comms, reg, streams, c)
				requireRanAsPrinted(t, comms[0], ran, sched.PathShm, cname)
			}
		})
	}
}
