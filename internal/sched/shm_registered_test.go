package sched

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestShmRegisteredPlan: which calls have a registered plan, and what it
// does on each rank: a host rank only steps in and out; a device rank
// touches no window, copies every host rank's part of each chunk in
// (alternating two scratch areas), folds it on the caller's stream with
// its own in rank order, and copies the result out to every host rank;
// a cluster of two reduces and gathers inside, each rank its part.
func TestShmRegisteredPlan(t *testing.T) {
	on := Options{ShmWindow: 64 << 20, ShmDeviceReduce: true}
	for _, tc := range []struct {
		name  string
		spec  string
		split []int
		coll  sdk.Collective
		count int
		o     Options
		want  bool
	}{
		{"nvidia:1,host:2", "nvidia,host,host", nil, sdk.AllReduce, 16 << 20, on, true},
		{"host ranks first", "host,nvidia,host", nil, sdk.AllReduce, 16 << 20, on, true},
		{"nvidia:2,host:2", "nvidia,nvidia,host,host", nil, sdk.AllReduce, 16 << 20, on, true},
		{"one step", "nvidia,host,host", nil, sdk.AllReduce, 1 << 10, on, false},
		{"no device folds", "nvidia,host,host", nil, sdk.AllReduce, 16 << 20, Options{ShmWindow: 64 << 20}, false},
		{"no host ranks", "nvidia,nvidia", []int{1, 1}, sdk.AllReduce, 16 << 20, on, false},
		{"two device clusters", "nvidia,nvidia,host", []int{1, 1, 1}, sdk.AllReduce, 16 << 20, on, false},
		{"Reduce", "nvidia,host,host", nil, sdk.Reduce, 16 << 20, on, false},
		{"too many inputs for one fold", "nvidia,host,host,host,host,host,host,host,host", nil, sdk.AllReduce, 16 << 20, on, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := layout(t, tc.spec, tc.split...)
			require.Equal(t, tc.want, RegisteredFolds(l, tc.o, tc.coll) && tc.count*4*l.NRanks() > ShmOneShot)
			hosts := HostRanks(l)
			for r := 0; r < l.NRanks(); r++ {
				call := Call{Coll: tc.coll, Count: tc.count, DType: sdk.Float32, Op: sdk.Sum}
				p := plan(t, l, r, call, tc.o)
				require.Equal(t, PathShm, p.Path)
				if !tc.want {
					require.Nil(t, p.Registered)
					continue
				}
				rp := p.Registered
				require.NotNil(t, rp)
				require.True(t, rp.Shm.Registered)
				require.Equal(t, PathShm, rp.Path)
				K := rp.Chunks
				require.Greater(t, K, 1, "pipelined")
				if !l.Members[r].OnDevice() {
					require.Equal(t, []string{"net:step", "net:step"}, kinds(rp), "rank %d: a host rank steps in and out", r)
					continue
				}
				m := len(l.ClusterOf(r).Ranks)
				require.Equal(t, K, rp.Count(KindDevFold, -1))
				require.Zero(t, rp.Count(KindFold, -1), "the host folds nothing")
				if m > 1 {
					require.Equal(t, K, rp.Count(KindIntra, sdk.ReduceScatter))
					require.Equal(t, K, rp.Count(KindIntra, sdk.AllGather))
				}
				scratch := map[int]bool{}
				for _, st := range rp.Steps {
					for _, cp := range st.Copies {
						require.NotEqual(t, BufWindow, cp.Src.Buf, "rank %d: %s", r, st)
						require.NotEqual(t, BufWindow, cp.Dst.Buf, "rank %d: %s", r, st)
					}
					switch {
					case st.Kind == KindCopy && st.Lane == LaneH2D:
						require.Len(t, st.Copies, len(hosts))
						for i, cp := range st.Copies {
							require.Equal(t, Ref{Buf: BufPeerSend, Idx: hosts[i], Off: cp.Src.Off, Len: cp.Src.Len}, cp.Src)
							require.Equal(t, BufScratch, cp.Dst.Buf)
							scratch[cp.Dst.Off] = true
						}
					case st.Kind == KindCopy && st.Lane == LaneD2H:
						require.Len(t, st.Copies, len(hosts))
						for i, cp := range st.Copies {
							require.Equal(t, BufRecv, cp.Src.Buf)
							require.Equal(t, BufPeerRecv, cp.Dst.Buf)
							require.Equal(t, hosts[i], cp.Dst.Idx)
							require.Equal(t, cp.Src.Off, cp.Dst.Off, "the result lands where it sits in recv")
						}
					case st.Kind == KindDevFold:
						require.Equal(t, LaneIntra, st.Lane, "the fold holds up neither link")
						f := st.Folds[0]
						require.Len(t, f.Srcs, 1+len(hosts))
						// The cluster's contribution sits at this rank's place in rank order.
						at := 0
						for _, q := range hosts {
							if q < r {
								at++
							}
						}
						own := f.Srcs[at]
						require.Equal(t, f.Dst.Off, own.Off)
						require.Equal(t, map[bool]Buf{true: BufRecv, false: BufSend}[m > 1], own.Buf)
					}
				}
				require.Len(t, scratch, 2*len(hosts), "two scratch areas a host rank")
			}
		})
	}
}
