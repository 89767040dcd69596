package sched

import (
	"slices"
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

// TestShmRegisteredClustersPlan: beside two device clusters or more, the
// registered plan gives each chunk one host-facing cluster, the clusters
// in turn as often as they have ranks; only that cluster's ranks touch the
// host ranks' buffers for the chunk (each its part, reading every host
// rank's input into its partial sum on the caller's stream and writing
// the result to every host rank), so every byte of every host rank's
// recv is written exactly once; every device rank folds one contribution
// a device cluster, in rank order; a host rank only steps.
func TestShmRegisteredClustersPlan(t *testing.T) {
	on := Options{ShmWindow: 64 << 20, ShmDeviceReduce: true}
	for _, tc := range []struct {
		name  string
		spec  string
		split []int
		count int
	}{
		{"split 1,1 + 1 host rank", "nvidia,nvidia,host", []int{1, 1, 1}, 4 << 20},
		{"split 1,1 + 2 host ranks", "nvidia,nvidia,host,host", []int{1, 1, 2}, 16 << 20},
		{"split 2,1 + 2 host ranks, uneven", "nvidia,nvidia,nvidia,host,host", []int{2, 1, 2}, 16<<20 + 3},
		{"host ranks first", "host,nvidia,host,nvidia", []int{1, 1, 1, 1}, 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := layout(t, tc.spec, tc.split...)
			require.True(t, RegisteredFolds(l, on, sdk.AllReduce))
			hosts := HostRanks(l)
			call := Call{Coll: sdk.AllReduce, Count: tc.count, DType: sdk.Float32, Op: sdk.Avg}
			// written[k][q] are the bytes of host rank q's recv written in chunk k.
			var K int
			written := map[int]map[int][]Range{}
			faced := map[int]int{} // chunks each cluster faced (counted on its rank 0)
			facer := map[int]int{} // chunk -> its host-facing cluster
			var spans []Range
			for r := 0; r < l.NRanks(); r++ {
				rp := plan(t, l, r, call, on).Registered
				require.NotNil(t, rp)
				require.True(t, rp.Shm.Registered)
				K = rp.Chunks
				require.Greater(t, K, 2, "pipelined")
				if !l.Members[r].OnDevice() {
					require.Equal(t, repeat(K+2, "net:step"), kinds(rp), "rank %d: a host rank only steps", r)
					continue
				}
				c := l.ClusterOf(r)
				facing := map[int]bool{}
				for _, st := range rp.Steps {
					for _, cp := range st.Copies {
						if cp.Src.Buf == BufPeerSend {
							require.Equal(t, LaneIntra, st.Lane, "rank %d: %s", r, st)
							facing[st.Chunk] = true
						}
						if cp.Dst.Buf == BufPeerRecv {
							require.Equal(t, LaneD2H, st.Lane, "rank %d: %s", r, st)
							require.Equal(t, BufRecv, cp.Src.Buf)
							require.Equal(t, cp.Src.Off, cp.Dst.Off, "the result lands where it sits in recv")
							if written[st.Chunk] == nil {
								written[st.Chunk] = map[int][]Range{}
							}
							written[st.Chunk][cp.Dst.Idx] = append(written[st.Chunk][cp.Dst.Idx], Range{cp.Dst.Off, cp.Dst.Len})
						}
					}
					if st.Kind != KindDevFold {
						continue
					}
					f := st.Folds[0]
					if st.Lane == LaneIntra {
						// The partial sum: the cluster's part and every host rank's, in rank order.
						require.True(t, facing[st.Chunk], "rank %d: %s folds host inputs it did not read", r, st)
						require.Len(t, f.Srcs, 1+len(hosts))
						at := 0
						for _, q := range hosts {
							if q < r {
								at++
							}
						}
						require.Equal(t, BufRecv, f.Dst.Buf)
						require.Equal(t, sdk.Sum, st.Op, "rank %d: a partial sum divides nothing", r)
						for i, src := range f.Srcs {
							require.Equal(t, i != at, src.Buf == BufScratch, "rank %d: %s", r, st)
						}
						continue
					}
					require.Equal(t, LaneH2D, st.Lane)
					require.Equal(t, sdk.Avg, st.Op, "rank %d: the fold of the sums divides", r)
					require.Len(t, f.Srcs, deviceClusters(l), "rank %d: one contribution a device cluster: %s", r, st)
				}
				for k := range facing {
					if q, ok := facer[k]; ok {
						require.Equal(t, q, c.Index, "chunk %d: one host-facing cluster", k)
					}
					facer[k] = c.Index
				}
				if l.LocalRank(r) == 0 {
					faced[c.Index] = len(facing)
				}
				spans = rp.Shm.Spans
			}
			total := 0
			for _, c := range l.Clusters {
				if c.OnDevice() {
					total += len(c.Ranks)
				}
			}
			for _, c := range l.Clusters {
				if c.OnDevice() {
					require.InDelta(t, float64(K*len(c.Ranks))/float64(total), faced[c.Index], 1, "cluster %d faces its share of the chunks", c.Index)
				}
			}
			require.Len(t, facer, K, "every chunk has a host-facing cluster")
			for k, span := range spans {
				for _, q := range hosts {
					rs := written[k][q]
					slices.SortFunc(rs, func(a, b Range) int { return a.Off - b.Off })
					at := span.Off
					for _, r := range rs {
						require.Equal(t, at, r.Off, "chunk %d, host rank %d: written once, no gap", k, q)
						at = r.End()
					}
					require.Equal(t, span.End(), at, "chunk %d, host rank %d: the whole chunk written", k, q)
				}
			}
		})
	}
}
