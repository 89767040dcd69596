package sched

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

func TestPartCoversEveryElementOnce(t *testing.T) {
	for _, tc := range []struct{ bytes, size, m int }{
		{40, 4, 3}, {4, 4, 3}, {0, 2, 2}, {1 << 20, 8, 5}, {7, 1, 7}, {12, 2, 4},
	} {
		next := 0
		for j := 0; j < tc.m; j++ {
			p := Part(tc.bytes, tc.size, tc.m, j)
			require.Equal(t, next, p.Off, "%+v part %d", tc, j)
			require.Zero(t, p.Len%tc.size, "%+v part %d: whole elements", tc, j)
			require.LessOrEqual(t, p.Len, Part(tc.bytes, tc.size, tc.m, 0).Len)
			if p.Len > 0 {
				require.Equal(t, j, carrier(tc.bytes, tc.size, tc.m, p.Off))
				require.Equal(t, j, carrier(tc.bytes, tc.size, tc.m, p.End()-1))
			}
			next = p.End()
		}
		require.Equal(t, tc.bytes, next, "%+v", tc)
	}
}

// TestSourcesNameEveryContributor: for every byte of a chunk, the sources
// name exactly one carrier per device cluster (the rank whose part holds
// the byte) and every host rank.
func TestSourcesNameEveryContributor(t *testing.T) {
	members := []Member{
		{Rank: 0, Vendor: "A", Plugin: "a"}, {Rank: 1, Vendor: "A", Plugin: "a"}, {Rank: 2, Vendor: "A", Plugin: "a"},
		{Rank: 3, Vendor: HostVendor}, {Rank: 4, Vendor: HostVendor},
		{Rank: 5, Vendor: "B", Plugin: "b"}, {Rank: 6, Vendor: "B", Plugin: "b"},
	}
	l, err := NewLayout(members, nil)
	require.NoError(t, err)
	for _, chunk := range []int{4, 28, 40, 4096 + 12} {
		for q := 0; q < 7; q++ {
			piece := Part(chunk, 4, 7, q)
			covered := 0
			for _, s := range Sources(l, chunk, 4, piece) {
				require.Equal(t, piece.Off+covered, s.Off)
				covered += s.Len
				for x := s.Off; x < s.End(); x += 4 {
					a := []int{0, 1, 2}[carrier(chunk, 4, 3, x)]
					b := []int{5, 6}[carrier(chunk, 4, 2, x)]
					want := []int{a, 3, 4, b}
					require.Equal(t, want, s.Ranks, "chunk %d byte %d", chunk, x)
				}
			}
			require.Equal(t, piece.Len, covered)
		}
	}
}

func TestHoldersTileTheRange(t *testing.T) {
	for _, reducers := range [][]int{{0, 1, 2}, {3, 4}, {1}} {
		g := &ShmPlan{Reducers: reducers}
		for _, r := range []Range{{0, 40}, {12, 16}, {36, 4}, {8, 0}} {
			at := r.Off
			for _, h := range g.Holders(40, 4, r) {
				i := g.ReducerIndex(h.Rank)
				require.GreaterOrEqual(t, i, 0)
				p := g.Piece(40, 4, i)
				require.Equal(t, at, h.Off)
				require.True(t, h.Off >= p.Off && h.End() <= p.End(), "%+v inside piece %+v", h, p)
				require.Equal(t, h.Off-p.Off, h.At, "offset in the holder's output area")
				at = h.End()
			}
			require.Equal(t, r.End(), at)
		}
	}
}

// TestShmReducers: the host ranks reduce when there are any (their data
// is private, so they save a copy in and out), else every rank.
func TestShmReducers(t *testing.T) {
	dev := func(r int) Member { return Member{Rank: r, Vendor: "A", Plugin: "a"} }
	host := func(r int) Member { return Member{Rank: r, Vendor: HostVendor} }
	for _, tc := range []struct {
		members []Member
		split   []int
		want    []int
	}{
		{[]Member{dev(0), dev(1)}, []int{1, 1}, []int{0, 1}},
		{[]Member{dev(0), host(1)}, nil, []int{1}},
		{[]Member{dev(0), dev(1), host(2), host(3)}, nil, []int{2, 3}},
		{[]Member{host(0), dev(1), host(2)}, nil, []int{0, 2}},
	} {
		l, err := NewLayout(tc.members, tc.split)
		require.NoError(t, err)
		require.Equal(t, tc.want, ShmReducers(l))
	}
}

func TestShmPlanGeometry(t *testing.T) {
	cases := []struct {
		name                 string
		bytes, size, n, win  int
		oneShot              bool
		minChunks, maxChunks int
	}{
		{"700 bytes on 5 ranks", 700, 4, 5, 4 << 20, true, 1, 1},
		{"256 MiB on 2 ranks", 256 << 20, 4, 2, 32 << 20, false, 36, 40},
		{"1 MiB pipelines", 1 << 20, 4, 2, 32 << 20, false, 4, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewShmPlan(sdk.AllReduce, tc.bytes, tc.size, tc.n, nil, tc.win, DefaultChunk, false)
			require.NoError(t, err)
			require.Equal(t, tc.oneShot, g.OneShot)
			require.GreaterOrEqual(t, g.Chunks(), tc.minChunks)
			require.LessOrEqual(t, g.Chunks(), tc.maxChunks)
			total := 0
			for k := 0; k < g.Chunks(); k++ {
				off, n := g.Span(k)
				require.Equal(t, total, off)
				total += n
				if !g.OneShot {
					require.LessOrEqual(t, n, g.In, "chunk %d fits the input area", k)
					require.LessOrEqual(t, Part(n, tc.size, tc.n, 0).Len, g.SlotBytes-g.In, "piece fits the output area")
					require.LessOrEqual(t, g.OutArea(k)+g.SlotBytes-g.In, tc.win, "slot %d fits the window", k%g.Slots)
				}
			}
			require.Equal(t, tc.bytes, total)
		})
	}
	_, err := NewShmPlan(sdk.AllReduce, 64<<20, 4, 2, nil, 8<<10, 0, false)
	require.ErrorContains(t, err, "FLAGCX_SHM_WINDOW_SIZE")
}

// TestShmDeviceChunks: a device-reduced pipeline cuts a call into chunks of
// sqrt(bytes * ShmDeviceChunkScale) (deviceChunk), under
// FLAGCX_NET_CHUNK_SIZE and what the window's slots hold; host folds keep
// the chunks the window allows.
func TestShmDeviceChunks(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		bytes, win, chunkMax  int
		deviceReduce          bool
		wantChunk, wantChunks int
	}{
		{"64 MiB in 4 MiB chunks", 64 << 20, 128 << 20, DefaultChunk, true, 4 << 20, 16},
		{"256 MiB in 8 MiB chunks", 256 << 20, 128 << 20, DefaultChunk, true, 8 << 20, 32},
		{"1 GiB in 16 MiB chunks", 1 << 30, 128 << 20, DefaultChunk, true, 16 << 20, 64},
		{"no chunk size set", 1 << 30, 128 << 20, 0, true, 16 << 20, 64},
		{"FLAGCX_NET_CHUNK_SIZE caps it", 1 << 30, 128 << 20, 2 << 20, true, 2 << 20, 512},
		{"the window's slots cap it (8 MiB - 8 KiB)", 1 << 30, 32 << 20, DefaultChunk, true, 8323584, 129},
		{"host folds fill the window", 64 << 20, 128 << 20, DefaultChunk, false, 16 << 20, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewShmPlan(sdk.AllReduce, tc.bytes, 4, 2, nil, tc.win, tc.chunkMax, tc.deviceReduce)
			require.NoError(t, err)
			require.Equal(t, tc.deviceReduce, g.DeviceReduce)
			require.Equal(t, tc.wantChunk, g.Spans[0].Len)
			require.Equal(t, tc.wantChunks, g.Chunks())
		})
	}
}

// TestShmDeviceReducePlan: with every plugin able to reduce on its device,
// an AllReduce over device clusters only takes one step a chunk, without
// reducers or output areas, and keeps ShmDeviceLag chunks of copies in
// flight, and so do a Reduce and a ReduceScatter where one fold takes
// every rank's input; a layout with host ranks, a plugin that cannot, or
// more inputs than one fold takes keeps the host reductions.
func TestShmDeviceReducePlan(t *testing.T) {
	dev := func(r int, v string) Member {
		return Member{Rank: r, Vendor: v, Plugin: strings.ToLower(v), Types: ^uint32(0), Ops: ^uint32(0)}
	}
	host := func(r int) Member { return Member{Rank: r, Vendor: HostVendor} }
	many := make([]Member, MaxDeviceReduceClusters+1)
	for r := range many {
		many[r] = dev(r, "A")
	}
	for _, tc := range []struct {
		name    string
		members []Member
		split   []int
		coll    sdk.Collective
		on      bool
		want    bool
	}{
		{"split 1,1", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, sdk.AllReduce, true, true},
		{"two vendors of two", []Member{dev(0, "A"), dev(1, "A"), dev(2, "B"), dev(3, "B")}, nil, sdk.AllReduce, true, true},
		{"a plugin without reduceLocal", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, sdk.AllReduce, false, false},
		{"host ranks reduce", []Member{dev(0, "A"), host(1)}, nil, sdk.AllReduce, true, false},
		{"Reduce, split 1,1", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, sdk.Reduce, true, true},
		{"ReduceScatter, split 1,1", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, sdk.ReduceScatter, true, true},
		{"ReduceScatter, two vendors of two", []Member{dev(0, "A"), dev(1, "A"), dev(2, "B"), dev(3, "B")}, nil, sdk.ReduceScatter, true, true},
		{"Reduce with host ranks keeps its reducers", []Member{dev(0, "A"), host(1)}, nil, sdk.Reduce, true, false},
		{"ReduceScatter without reduceLocal", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, sdk.ReduceScatter, false, false},
		{"too many clusters for one fold", many, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, sdk.AllReduce, true, false},
		{"3 clusters, AllReduce folds one a cluster", many, []int{3, 3, 3}, sdk.AllReduce, true, true},
		{"3 clusters, Reduce folds one a rank: too many", many, []int{3, 3, 3}, sdk.Reduce, true, false},
		{"3 clusters, ReduceScatter folds one a rank: too many", many, []int{3, 3, 3}, sdk.ReduceScatter, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLayout(tc.members, tc.split)
			require.NoError(t, err)
			call := Call{Coll: tc.coll, Count: 16 << 20, DType: sdk.Float32, Op: sdk.Sum}
			p, err := Build(l, 0, call, Options{ShmWindow: 64 << 20, ShmDeviceReduce: tc.on})
			require.NoError(t, err)
			require.Equal(t, PathShm, p.Path)
			g := p.Shm
			require.Equal(t, tc.want, g.DeviceReduce)
			if !tc.want {
				if tc.coll != sdk.ReduceScatter {
					require.NotEmpty(t, g.Reducers)
				}
				require.Zero(t, p.Count(KindDevFold, -1))
				return
			}
			require.Equal(t, 1, g.Steps())
			require.Empty(t, g.Reducers)
			require.Equal(t, g.In, g.SlotBytes, "no output area")
			require.Equal(t, ShmDeviceSlots, g.Slots)
			require.Equal(t, ShmDeviceLag, g.Lag)
			require.LessOrEqual(t, g.Slots*g.SlotBytes, 64<<20)
			require.Equal(t, g.Chunks(), p.Count(KindDevFold, -1), "one device fold a chunk (one carrier each; rank 0 is Reduce's root)")
			require.Zero(t, p.Count(KindFold, -1), "the host folds nothing")
			var desc strings.Builder
			p.Format(&desc, 4)
			require.Contains(t, desc.String(), "devfold float32 sum")
		})
	}
}

// TestStagedReduceScatterDeviceFold: a device leader of a staged
// ReduceScatter folds what the other leaders send on its device where
// every plugin can and there are at most three clusters: it copies in
// only the other clusters' blocks, the host reduces nothing, and the plan
// says so; otherwise, and on a host leader, the host reduces.
func TestStagedReduceScatterDeviceFold(t *testing.T) {
	dev := func(r int, v string) Member {
		return Member{Rank: r, Vendor: v, Plugin: strings.ToLower(v), Types: ^uint32(0), Ops: ^uint32(0)}
	}
	host := func(r int) Member { return Member{Rank: r, Vendor: HostVendor} }
	four := []Member{dev(0, "A"), dev(1, "A"), dev(2, "A"), dev(3, "A")}
	for _, tc := range []struct {
		name    string
		members []Member
		split   []int
		rank    int
		on      bool
		want    bool
	}{
		{"split 1,1", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, 0, true, true},
		{"split 2,1,1, a leader of two", four, []int{2, 1, 1}, 0, true, true},
		{"split 2,2 beside nothing else", four, []int{2, 2}, 2, true, true},
		{"a plugin without reduceLocal", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, 0, false, false},
		{"four clusters: the link would carry more", four, []int{1, 1, 1, 1}, 0, true, false},
		{"a host leader reduces on the host", []Member{dev(0, "A"), host(1)}, nil, 1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLayout(tc.members, tc.split)
			require.NoError(t, err)
			call := Call{Coll: sdk.ReduceScatter, Count: 1 << 20, DType: sdk.Float32, Op: sdk.Avg}
			p, err := Build(l, tc.rank, call, Options{Chunk: 1 << 20, StagedDeviceReduce: tc.on})
			require.NoError(t, err)
			require.Equal(t, PathC2C, p.Path)
			if !tc.want {
				require.Zero(t, p.Count(KindDevFold, -1))
				require.NotZero(t, p.Count(KindReduce, -1))
				return
			}
			require.Equal(t, p.Chunks, p.Count(KindDevFold, -1), "one device fold a chunk")
			require.Zero(t, p.Count(KindReduce, -1), "the host reduces nothing")
			require.Zero(t, p.Count(KindScale, -1), "Avg divides in the fold")
			require.Contains(t, p.Why, "on their devices")
			c := l.ClusterOf(tc.rank)
			in := 0
			for _, st := range p.Steps {
				if st.Lane == LaneD2H {
					for _, cp := range st.Copies {
						in += cp.Src.Len
					}
				}
				if st.Kind == KindDevFold {
					require.Len(t, st.Folds, len(c.Ranks), "one fold per block of its cluster")
					for _, f := range st.Folds {
						require.Len(t, f.Srcs, len(l.Clusters), "one input per cluster")
					}
				}
			}
			require.Equal(t, (l.NRanks()-len(c.Ranks))*call.Count*4, in, "only the other clusters' blocks go to the host")
		})
	}
}

// TestStagedReduceDeviceFold: the device leader of a staged Reduce's
// root's cluster receives the other leaders' partials and folds them on
// its device (the host reduces nothing, no inter Reduce runs), the other
// leaders send theirs; with a host leader at the root, or a plugin that
// cannot, the leaders' host Reduce runs.
func TestStagedReduceDeviceFold(t *testing.T) {
	dev := func(r int, v string) Member {
		return Member{Rank: r, Vendor: v, Plugin: strings.ToLower(v), Types: ^uint32(0), Ops: ^uint32(0)}
	}
	host := func(r int) Member { return Member{Rank: r, Vendor: HostVendor} }
	mixed := []Member{dev(0, "A"), dev(1, "A"), host(2)}
	for _, tc := range []struct {
		name       string
		members    []Member
		split      []int
		root, rank int
		on         bool
		folds      bool // rank folds on its device
		inter      bool // rank runs the leaders' host Reduce
	}{
		{"split 1,1, the root", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, 0, 0, true, true, false},
		{"split 1,1, the other leader sends", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, 0, 1, true, false, false},
		{"a device cluster's root not its leader: the leader folds", mixed, nil, 1, 0, true, true, false},
		{"the host leader sends", mixed, nil, 1, 2, true, false, false},
		{"a host root: the host reduces", mixed, nil, 2, 0, true, false, true},
		{"a plugin without reduceLocal", []Member{dev(0, "A"), dev(1, "A")}, []int{1, 1}, 0, 0, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLayout(tc.members, tc.split)
			require.NoError(t, err)
			call := Call{Coll: sdk.Reduce, Count: 1 << 20, DType: sdk.Float32, Op: sdk.Avg, Root: tc.root}
			p, err := Build(l, tc.rank, call, Options{Chunk: 1 << 20, StagedDeviceReduce: tc.on})
			require.NoError(t, err)
			require.Equal(t, PathC2C, p.Path)
			require.Equal(t, tc.inter, p.Count(KindInter, sdk.Reduce) > 0, "%s", p)
			if !tc.folds {
				require.Zero(t, p.Count(KindDevFold, -1))
				return
			}
			require.Equal(t, p.Chunks, p.Count(KindDevFold, -1), "one device fold a chunk")
			require.Zero(t, p.Count(KindScale, -1), "Avg divides in the fold")
			require.Contains(t, p.Why, "on its device")
		})
	}
}

// TestStagedAllReduceDeviceFold: two device leaders of a staged AllReduce
// whose chunks are beyond StagedFusedMax exchange their partials and fold
// them on their devices, in cluster order on both (the same bits); within
// it, with a host leader, more clusters or a plugin that cannot, the
// leaders' host AllReduce runs.
func TestStagedAllReduceDeviceFold(t *testing.T) {
	dev := func(r int, v string) Member {
		return Member{Rank: r, Vendor: v, Plugin: strings.ToLower(v), Types: ^uint32(0), Ops: ^uint32(0)}
	}
	host := func(r int) Member { return Member{Rank: r, Vendor: HostVendor} }
	two := []Member{dev(0, "A"), dev(1, "A")}
	for _, tc := range []struct {
		name    string
		members []Member
		split   []int
		count   int
		on      bool
		want    bool
	}{
		{"split 1,1, 8 MiB", two, []int{1, 1}, 2 << 20, true, true},
		{"split 1,1, 1 MiB: the fused exchange", two, []int{1, 1}, 1 << 18, true, false},
		{"a plugin without reduceLocal", two, []int{1, 1}, 2 << 20, false, false},
		{"a host leader", []Member{dev(0, "A"), host(1)}, nil, 2 << 20, true, false},
		{"three clusters", []Member{dev(0, "A"), dev(1, "A"), dev(2, "A")}, []int{1, 1, 1}, 2 << 20, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLayout(tc.members, tc.split)
			require.NoError(t, err)
			call := Call{Coll: sdk.AllReduce, Count: tc.count, DType: sdk.Float32, Op: sdk.Avg}
			var srcs [2][]Ref
			for r := 0; r < 2; r++ {
				p, err := Build(l, r, call, Options{Chunk: 4 << 20, StagedDeviceReduce: tc.on})
				require.NoError(t, err)
				require.Equal(t, PathC2C, p.Path)
				if !tc.want {
					require.Zero(t, p.Count(KindDevFold, -1))
					require.NotZero(t, p.Count(KindInter, sdk.AllReduce))
					return
				}
				require.Equal(t, p.Chunks, p.Count(KindDevFold, -1))
				require.Zero(t, p.Count(KindInter, sdk.AllReduce))
				require.Zero(t, p.Count(KindScale, -1), "Avg divides in the fold")
				require.Contains(t, p.Why, "(reduceLocal)")
				for _, st := range p.Steps {
					if st.Kind == KindDevFold {
						srcs[r] = st.Folds[0].Srcs
						break
					}
				}
			}
			require.Equal(t, BufScratch, srcs[0][1].Buf, "rank 0: its own partial first")
			require.Equal(t, BufScratch, srcs[1][0].Buf, "rank 1: the other's (cluster 0's) first")
		})
	}
}

// TestShmRelayPlan: on a device rank beside host ranks, a small one-step
// AllReduce, Reduce or the Broadcast it roots is one relay step: the put
// of this rank's input where another rank reads it, and the fold of what
// it takes, in rank order with its own input from the send buffer (the
// Broadcast's a fold of its own alone); host ranks keep their steps;
// larger calls, another rank's Broadcast, AllGather, ReduceScatter and
// too many inputs keep the copies.
func TestShmRelayPlan(t *testing.T) {
	dev := Member{Rank: 0, Vendor: "A", Plugin: "a", Types: ^uint32(0), Ops: ^uint32(0)}
	members := func(n int) []Member {
		ms := []Member{dev}
		for r := 1; r < n; r++ {
			ms = append(ms, Member{Rank: r, Vendor: HostVendor})
		}
		return ms
	}
	for _, tc := range []struct {
		name      string
		n, rank   int
		call      Call
		relay     bool
		wantKinds []Kind
		// A relay's put (or none) and its fold's sources (nil: no fold).
		wantPut    bool
		wantSource []Buf
	}{
		{"700 B AllReduce on nvidia:1,host:3", 4, 0, Call{Coll: sdk.AllReduce, Count: 175, DType: sdk.Float32, Op: sdk.Sum}, true,
			[]Kind{KindRelay}, true, []Buf{BufSend, BufWindow, BufWindow, BufWindow}},
		{"the host ranks keep their steps", 4, 2, Call{Coll: sdk.AllReduce, Count: 175, DType: sdk.Float32, Op: sdk.Sum}, true,
			[]Kind{KindCopy, KindPost, KindFoldPosted}, false, nil},
		{"a plugin that does not relay", 4, 0, Call{Coll: sdk.AllReduce, Count: 175, DType: sdk.Float32, Op: sdk.Sum}, false,
			[]Kind{KindCopy, KindDrain, KindPost, KindFoldPosted, KindCopy, KindDrain}, false, nil},
		{"Reduce at its root", 3, 0, Call{Coll: sdk.Reduce, Count: 16, DType: sdk.Int32, Op: sdk.Max, Root: 0}, true,
			[]Kind{KindRelay}, true, []Buf{BufSend, BufWindow, BufWindow}},
		{"Reduce elsewhere: the put alone", 3, 0, Call{Coll: sdk.Reduce, Count: 16, DType: sdk.Int32, Op: sdk.Max, Root: 1}, true,
			[]Kind{KindRelay}, true, nil},
		{"Reduce elsewhere, no relay", 3, 0, Call{Coll: sdk.Reduce, Count: 16, DType: sdk.Int32, Op: sdk.Max, Root: 1}, false,
			[]Kind{KindCopy, KindDrain, KindSync}, false, nil},
		{"Broadcast from this rank", 3, 0, Call{Coll: sdk.Broadcast, Count: 16, DType: sdk.Float64, Root: 0}, true,
			[]Kind{KindRelay}, true, []Buf{BufSend}},
		{"Broadcast from a host rank copies", 3, 0, Call{Coll: sdk.Broadcast, Count: 16, DType: sdk.Float64, Root: 2}, true,
			[]Kind{KindSync, KindCopy, KindDrain}, false, nil},
		{"beyond ShmRelayMax", 2, 0, Call{Coll: sdk.AllReduce, Count: ShmRelayMax/4 + 1, DType: sdk.Float32, Op: sdk.Sum}, true,
			[]Kind{KindCopy, KindDrain, KindPost, KindFoldPosted, KindCopy, KindDrain}, false, nil},
		{"more inputs than one fold takes", MaxDeviceReduceClusters + 1, 0, Call{Coll: sdk.AllReduce, Count: 4, DType: sdk.Float32, Op: sdk.Sum}, true,
			[]Kind{KindCopy, KindDrain, KindPost, KindFoldPosted, KindCopy, KindDrain}, false, nil},
		{"AllGather copies", 2, 0, Call{Coll: sdk.AllGather, Count: 16, DType: sdk.Float32}, true,
			[]Kind{KindCopy, KindDrain, KindSync, KindCopy, KindDrain}, false, nil},
		{"ReduceScatter copies", 3, 0, Call{Coll: sdk.ReduceScatter, Count: 16, DType: sdk.Float32, Op: sdk.Sum}, true,
			[]Kind{KindCopy, KindDrain, KindPost, KindFoldPosted, KindCopy, KindDrain}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLayout(members(tc.n), nil)
			require.NoError(t, err)
			p, err := Build(l, tc.rank, tc.call, Options{ShmWindow: 4 << 20, ShmRelay: tc.relay})
			require.NoError(t, err)
			require.Equal(t, PathShm, p.Path)
			require.True(t, p.Shm.OneShot)
			var kinds []Kind
			for _, st := range p.Steps {
				kinds = append(kinds, st.Kind)
			}
			require.Equal(t, tc.wantKinds, kinds)
			if kinds[0] != KindRelay {
				return
			}
			st := p.Steps[0]
			B := tc.call.Count * tc.call.DType.Size()
			require.Equal(t, Ref{Buf: BufWindow, Idx: tc.rank, Off: p.Shm.In, Len: relayWords}, st.Dst, "the words after the input area")
			require.Contains(t, st.String(), "relay (one launch")
			if tc.wantPut {
				require.Equal(t, []CopyPair{{Src: Ref{Buf: BufSend, Len: B}, Dst: Ref{Buf: BufWindow, Idx: tc.rank, Len: B}}}, st.Copies)
			} else {
				require.Empty(t, st.Copies)
			}
			if tc.wantSource == nil {
				require.Empty(t, st.Folds)
				return
			}
			require.Len(t, st.Folds, 1)
			f := st.Folds[0]
			require.Equal(t, Ref{Buf: BufRecv, Len: B}, f.Dst)
			require.Len(t, f.Srcs, len(tc.wantSource))
			for q, src := range f.Srcs {
				require.Equal(t, tc.wantSource[q], src.Buf, "source %d", q)
				require.Equal(t, B, src.Len)
				if src.Buf == BufWindow && tc.call.Coll != sdk.Broadcast {
					require.Equal(t, q, src.Idx, "rank order")
				}
			}
			if tc.call.Coll == sdk.Broadcast {
				require.Equal(t, sdk.Sum, st.Op, "a fold of one is a copy")
				require.Equal(t, 1, st.N)
				return
			}
			require.Equal(t, tc.call.Op, st.Op)
			require.Equal(t, tc.n, st.N)
		})
	}
}

// TestShmHostCopiesJoin: a host rank's copies out of the windows for
// chunk k and its copies in for a later chunk, with nothing between them,
// are one step (its executor splits them over its cores at once); a
// device rank's copies stay steps of their own lanes. Every copy is still
// there: the pairs of the host rank's copy steps add up to the chunks'
// copies in and out.
func TestShmHostCopiesJoin(t *testing.T) {
	dev := Member{Rank: 0, Vendor: "A", Plugin: "a", Types: ^uint32(0), Ops: ^uint32(0)}
	l, err := NewLayout([]Member{dev, {Rank: 1, Vendor: HostVendor}, {Rank: 2, Vendor: HostVendor}}, nil)
	require.NoError(t, err)
	call := Call{Coll: sdk.AllReduce, Count: 16 << 20, DType: sdk.Float32, Op: sdk.Sum}
	p, err := Build(l, 1, call, Options{ShmWindow: 8 << 20})
	require.NoError(t, err)
	require.Equal(t, PathShm, p.Path)
	K := p.Shm.Chunks()
	require.Greater(t, K, p.Shm.Slots, "more chunks than slots: copies in follow copies out")
	pairs := 0
	for i, st := range p.Steps {
		if st.Kind != KindCopy {
			continue
		}
		pairs += len(st.Copies)
		require.False(t, i > 0 && p.Steps[i-1].Kind == KindCopy, "step %d: two copy steps in a row: %s and %s", i, p.Steps[i-1], st)
	}
	// Per chunk: the rest of the chunk beside its own piece in (one pair,
	// rank 1 reduces the first piece) and the other reducer's piece out.
	require.Equal(t, 2*K, pairs)
}

// TestShmAllGatherOwnBlock: an AllGather on PathShm, pipelined or in one
// step, takes every other rank's block from its window and its own from
// its send, never from its own window: on a device rank on the caller's
// stream (it crosses no link), on a host rank on the host; every byte of
// recv is written once.
func TestShmAllGatherOwnBlock(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		split []int
	}{
		{"nvidia,nvidia", []int{1, 1}},
		{"nvidia,host,host", nil},
		{"host,nvidia,nvidia,host", []int{1, 1, 1, 1}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			l := layout(t, tc.spec, tc.split...)
			for _, count := range []int{8 << 20, 1000} { // elements a rank
				call := Call{Coll: sdk.AllGather, Count: count, DType: sdk.Float32}
				for r := 0; r < l.NRanks(); r++ {
					p := plan(t, l, r, call, Options{ShmWindow: 32 << 20, ShmDeviceReduce: true})
					require.Equal(t, PathShm, p.Path)
					require.Equal(t, count < 1<<20, p.Shm.OneShot)
					own := LaneNet
					if l.Members[r].OnDevice() {
						own = LaneIntra
					}
					var got []Range
					for _, st := range p.Steps {
						for _, cp := range st.Copies {
							if cp.Dst.Buf != BufRecv {
								continue
							}
							got = append(got, Range{cp.Dst.Off, cp.Dst.Len})
							mine := cp.Dst.Off >= r*count*4 && cp.Dst.Off < (r+1)*count*4
							require.NotEqual(t, Ref{Buf: BufWindow, Idx: r}, Ref{Buf: cp.Src.Buf, Idx: cp.Src.Idx}, "rank %d: %s", r, st)
							if mine {
								require.Equal(t, BufSend, cp.Src.Buf, "rank %d: its own block from its send: %s", r, st)
								require.Equal(t, own, st.Lane, "rank %d: %s", r, st)
								require.Equal(t, cp.Dst.Off-r*count*4, cp.Src.Off)
							} else {
								require.Equal(t, BufWindow, cp.Src.Buf, "rank %d: %s", r, st)
							}
						}
					}
					slices.SortFunc(got, func(a, b Range) int { return a.Off - b.Off })
					at := 0
					for _, g := range got {
						require.Equal(t, at, g.Off, "rank %d: recv written once, no gap", r)
						at = g.End()
					}
					require.Equal(t, l.NRanks()*count*4, at, "rank %d: all of recv", r)
				}
			}
		})
	}
}
