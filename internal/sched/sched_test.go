package sched

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

const all = ^uint32(0)

// noAvg is a library without avg (Kunlunxin's, Cambricon's); noF64 one
// without float64 (Cambricon's).
var (
	noAvg = all &^ (1 << uint(sdk.Avg))
	noF64 = all &^ (1 << uint(sdk.Float64))
)

// members makes a layout's members from "nvidia,nvidia,host,...".
func members(spec string) []Member {
	var out []Member
	devs := map[string]int{}
	for r, name := range strings.Split(spec, ",") {
		m := Member{Rank: r, Vendor: HostVendor, Device: -1, Types: all, Ops: all}
		if name != "host" {
			m.Device = devs[name]
			devs[name]++
		}
		switch name {
		case "host":
		case "kunlunxin":
			m.Vendor, m.Plugin, m.Ops = "Kunlunxin", name, noAvg
		case "cambricon":
			m.Vendor, m.Plugin, m.Ops, m.Types = "Cambricon", name, noAvg, noF64
		default:
			m.Vendor, m.Plugin = strings.ToUpper(name), name
		}
		out = append(out, m)
	}
	return out
}

func layout(t *testing.T, spec string, split ...int) *Layout {
	t.Helper()
	l, err := NewLayout(members(spec), split)
	require.NoError(t, err)
	return l
}

func TestNewLayout(t *testing.T) {
	cases := []struct {
		spec     string
		split    []int
		clusters []string // FormatRanks of each cluster
		leaders  []int
	}{
		{"nvidia,nvidia,host,host", nil, []string{"0,1", "2,3"}, []int{0, 2}},
		{"nvidia,host,nvidia", nil, []string{"0,2", "1"}, []int{0, 1}},
		{"nvidia,nvidia,nvidia,nvidia", nil, []string{"0-3"}, []int{0}},
		{"nvidia,nvidia,nvidia,nvidia", []int{2, 2}, []string{"0,1", "2,3"}, []int{0, 2}},
		{"nvidia,nvidia", []int{1, 1}, []string{"0", "1"}, []int{0, 1}},
		{"nvidia,nvidia,host,nvidia,nvidia", []int{2, 1, 2}, []string{"0,1", "2", "3,4"}, []int{0, 2, 3}},
		{"kunlunxin,kunlunxin,metax,host,host", nil, []string{"0,1", "2", "3,4"}, []int{0, 2, 3}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.spec, c.split), func(t *testing.T) {
			l := layout(t, c.spec, c.split...)
			require.Len(t, l.Clusters, len(c.clusters))
			require.Equal(t, len(c.clusters) == 1, l.IsHomogeneous())
			for i, cl := range l.Clusters {
				require.Equal(t, i, cl.Index)
				require.Equal(t, c.clusters[i], FormatRanks(cl.Ranks))
				require.Equal(t, c.leaders[i], cl.Leader)
				for j, r := range cl.Ranks {
					require.Equal(t, i, l.ClusterOf(r).Index)
					require.Equal(t, j, l.LocalRank(r))
				}
			}
		})
	}
}

func TestLayoutErrors(t *testing.T) {
	cases := []struct {
		spec  string
		split []int
		want  []string
	}{
		{"nvidia,nvidia,nvidia", []int{2, 2}, []string{EnvSplitList, "add up to 4", "3 ranks"}},
		{"nvidia,host", []int{2}, []string{EnvSplitList, "rank 0 is NVIDIA and rank 1 is host", "one vendor"}},
		{"nvidia,nvidia", []int{0, 2}, []string{"not positive"}},
	}
	for _, c := range cases {
		_, err := NewLayout(members(c.spec), c.split)
		require.Error(t, err)
		require.ErrorIs(t, err, ErrSplitList)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w)
		}
	}
	ms := members("nvidia,nvidia")
	ms[1].Plugin = "other"
	_, err := NewLayout(ms, nil)
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.Contains(t, err.Error(), "different plugins")
	_, err = NewLayout(nil, nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
}

func TestParseSplitList(t *testing.T) {
	for in, want := range map[string][]int{"": nil, " ": nil, "2,2": {2, 2}, "1, 3": {1, 3}, "8": {8}} {
		got, err := ParseSplitList(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"a", "2,,2", "0", "-1,2", "2;2"} {
		_, err := ParseSplitList(bad)
		require.ErrorIs(t, err, ErrSplitList, bad)
		require.Contains(t, err.Error(), "positive sizes", bad)
	}
}

func TestFormatRanks(t *testing.T) {
	require.Equal(t, "0-2,5", FormatRanks([]int{0, 1, 2, 5}))
	require.Equal(t, "0,1,3", FormatRanks([]int{0, 1, 3}))
	require.Equal(t, "", FormatRanks(nil))
}

func TestSpans(t *testing.T) {
	cases := []struct {
		bytes, size, chunk int
		n                  int
		minChunk           int
	}{
		{0, 4, 0, 0, 0},
		{4, 4, 0, 1, 0},
		{64 << 10, 4, 0, 1, 0},
		{512 << 10, 4, 0, 2, 0},              // at least 256K a chunk
		{4 << 20, 4, 0, 4, 0},                // within one default chunk, cut in 4 for overlap
		{64 << 20, 4, 0, 4, 0},               // 16M default chunks
		{64 << 20, 4, 4 << 20, 16, 0},        // 4M chunks
		{37 * 8, 8, 64, 5, 0},                // small chunks: 8 elements each, the last 5
		{10, 2, 1, 5, 0},                     // chunk below an element: one element each
		{3 * 1 << 20, 2, 1 << 20, 4, 0},      // 3 chunks by size, 4 for overlap
		{(1 << 20) + 2, 2, 1 << 30, 4, 0},    // not a multiple of 4
		{100 << 20, 8, 1 << 20, 100, 0},      // many chunks
		{6, 2, 0, 1, 0},                      // tiny
		{MinPipeChunk * 3, 1, 1 << 30, 3, 0}, // 3 chunks of the minimum
		{1 << 20, 4, 0, 1, TCPMinChunk},      // over TCP: one chunk below 8M
		{8 << 20, 4, 0, 2, TCPMinChunk},
		{16 << 20, 4, 0, 4, TCPMinChunk},
		{64 << 20, 4, 0, 4, TCPMinChunk},
	}
	for _, c := range cases {
		sp := Spans(c.bytes, c.size, c.chunk, c.minChunk)
		require.Len(t, sp, c.n, "%+v", c)
		off := 0
		for _, s := range sp {
			require.Equal(t, off, s.Off)
			require.Zero(t, s.Len%c.size, "whole elements")
			require.Positive(t, s.Len)
			off += s.Len
		}
		require.Equal(t, c.bytes, off, "the chunks cover the call")
	}
}

func plan(t *testing.T, l *Layout, rank int, call Call, o Options) *Plan {
	t.Helper()
	p, err := Build(l, rank, call, o)
	require.NoError(t, err)
	return p
}

func TestPathChoice(t *testing.T) {
	f32 := func(coll sdk.Collective, op sdk.RedOp) Call {
		return Call{Coll: coll, Count: 100, DType: sdk.Float32, Op: op}
	}
	cases := []struct {
		name  string
		spec  string
		split []int
		call  Call
		o     Options
		path  Path
		why   string
		async bool
	}{
		{"host alone", "host,host", nil, f32(sdk.AllReduce, sdk.Sum), Options{}, PathHostComm, "", false},
		{"vendor alone", "nvidia,nvidia", nil, f32(sdk.AllReduce, sdk.Avg), Options{}, PathVendor, "", true},
		{"vendor without avg", "kunlunxin,kunlunxin", nil, f32(sdk.AllReduce, sdk.Avg), Options{}, PathHost, "no float32 avg", false},
		{"vendor without float64 moves bytes", "cambricon,cambricon", nil, Call{Coll: sdk.Broadcast, Count: 3, DType: sdk.Float64}, Options{}, PathVendor, "moves as bytes", true},
		{"two clusters", "nvidia,nvidia,host,host", nil, f32(sdk.AllReduce, sdk.Prod), Options{}, PathC2C, "", false},
		{"split vendor", "nvidia,nvidia", []int{1, 1}, f32(sdk.ReduceScatter, sdk.Max), Options{}, PathC2C, "", false},
		{"avg is a sum inside clusters", "kunlunxin,kunlunxin,host", nil, f32(sdk.AllReduce, sdk.Avg), Options{}, PathC2C, "", false},
		{"cluster lacks the type", "cambricon,cambricon,host", nil, Call{Coll: sdk.Reduce, Count: 4, DType: sdk.Float64, Op: sdk.Min}, Options{}, PathHost, "cluster 0's library (cambricon) has no float64 min", false},
		{"a cluster of one needs no library", "cambricon,host", nil, Call{Coll: sdk.AllReduce, Count: 4, DType: sdk.Float64, Op: sdk.Sum}, Options{}, PathC2C, "", false},
		{"forced host path", "nvidia,host", nil, f32(sdk.AllGather, 0), Options{HostPath: true}, PathHost, "FLAGCX_USE_HOST_COMM=1", false},
		{"alltoall across clusters", "nvidia,host", nil, f32(sdk.AlltoAll, 0), Options{}, PathP2P, "", false},
		{"gather across clusters", "nvidia,host,nvidia", nil, Call{Coll: sdk.Gather, Count: 5, DType: sdk.Int8, Root: 1}, Options{}, PathP2P, "", false},
		{"barrier", "nvidia,host", nil, Call{Coll: sdk.Barrier}, Options{}, PathHost, "host barrier", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := layout(t, c.spec, c.split...)
			for r := 0; r < l.NRanks(); r++ {
				p := plan(t, l, r, c.call, c.o)
				require.Equal(t, c.path, p.Path, "rank %d", r)
				require.Contains(t, p.Why, c.why)
				require.Equal(t, c.async, p.Async)
			}
		})
	}
}

// kinds summarises a plan as "lane:kind coll" per step.
func kinds(p *Plan) []string {
	var out []string
	for _, s := range p.Steps {
		k := s.Lane.String() + ":" + s.Kind.String()
		if s.Kind == KindIntra || s.Kind == KindInter || s.Kind == KindWorld {
			k += " " + s.Coll.Title()
		}
		out = append(out, k)
	}
	return out
}

func repeat(k int, s ...string) []string {
	var out []string
	for i := 0; i < k; i++ {
		out = append(out, s...)
	}
	return out
}

func TestAllReducePlan(t *testing.T) {
	l := layout(t, "nvidia,nvidia,host,host")
	call := Call{Coll: sdk.AllReduce, Count: 1 << 20, DType: sdk.Float32, Op: sdk.Avg} // 4 MiB: 4 chunks
	lead := plan(t, l, 0, call, Options{})
	require.Equal(t, 4, lead.Chunks)
	want := repeat(4, "intra:intra Reduce")
	want = append(want, repeat(4, "d2h:copy", "net:inter AllReduce", "net:scale", "h2d:copy")...)
	want = append(want, repeat(4, "intra:intra Broadcast")...)
	require.Equal(t, want, kinds(lead))
	for _, s := range lead.Steps {
		if s.Kind == KindIntra && s.Coll == sdk.Reduce || s.Kind == KindInter {
			require.Equal(t, sdk.Sum, s.Op, "avg is a sum until the one division")
		}
		if s.Kind == KindScale {
			require.Equal(t, 4, s.N, "divided once by the rank count")
		}
	}
	// The pipeline: chunk k's network step waits for its own copy only.
	net1 := lead.Steps[4+4*1+1]
	require.Equal(t, 1, net1.Chunk)
	require.Equal(t, []int{4 + 4*1}, net1.Deps)
	require.Equal(t, 4<<20, lead.StageBytes())

	member := plan(t, l, 1, call, Options{})
	require.Equal(t, append(repeat(4, "intra:intra Reduce"), repeat(4, "intra:intra Broadcast")...), kinds(member))

	hostLead := plan(t, l, 2, call, Options{})
	require.Equal(t, append(append(repeat(4, "intra:intra Reduce"), repeat(4, "net:inter AllReduce", "net:scale")...), repeat(4, "intra:intra Broadcast")...), kinds(hostLead))
	require.Zero(t, hostLead.StageBytes(), "a host leader works in its own buffers")
}

func TestRootedPlansEveryRoot(t *testing.T) {
	l := layout(t, "nvidia,nvidia,host,nvidia,nvidia", 2, 1, 2)
	for _, coll := range []sdk.Collective{sdk.Reduce, sdk.Broadcast, sdk.Gather, sdk.Scatter} {
		for root := 0; root < l.NRanks(); root++ {
			call := Call{Coll: coll, Count: 10, DType: sdk.Int32, Op: sdk.Sum, Root: root}
			c0 := l.ClusterOf(root)
			for r := 0; r < l.NRanks(); r++ {
				p := plan(t, l, r, call, Options{})
				switch coll {
				case sdk.Reduce:
					// The root's leader hands the result to a root that does not lead.
					if r == c0.Leader && root != r {
						require.Equal(t, 1, p.Count(KindIntra, sdk.SendRecv), "%v root %d rank %d", coll, root, r)
					}
					if r == root && root != c0.Leader {
						require.Equal(t, 1, p.Count(KindIntra, sdk.SendRecv))
						require.Equal(t, BufRecv, p.Steps[len(p.Steps)-1].Xfers[0].Ref.Buf)
					}
					if r != root {
						for _, s := range p.Steps {
							require.NotEqual(t, BufRecv, s.Dst.Buf, "a non-root's receive buffer stays untouched (%v rank %d)", coll, r)
						}
					}
				case sdk.Gather:
					// Every rank's block reaches the root directly: nothing dropped for other clusters.
					if r == root {
						n := 0
						for _, s := range p.Steps {
							for _, x := range s.Xfers {
								if x.Recv {
									n++
								}
							}
							n += len(s.Copies)
						}
						require.GreaterOrEqual(t, n, l.NRanks(), "root %d receives or copies a block per rank", root)
					}
				}
			}
		}
	}
}

// TestPlansAgree builds plans on many layouts and checks what keeps ranks
// from deadlocking or reading wrong data: steps only wait on earlier steps;
// ranks of a cluster issue the same intra collectives in the same order,
// leaders the same inter collectives, every rank the same world ones;
// every send has its receive, in order and of the same size; and every
// ref stays inside its buffer.
func TestPlansAgree(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	vendors := []string{"host", "nvidia", "kunlunxin", "metax"}
	for iter := 0; iter < 300; iter++ {
		n := 2 + rng.Intn(5)
		var spec []string
		for r := 0; r < n; r++ {
			spec = append(spec, vendors[rng.Intn(len(vendors))])
		}
		l, err := NewLayout(members(strings.Join(spec, ",")), nil)
		require.NoError(t, err)
		o := Options{Chunk: []int{0, 16, 1000}[rng.Intn(3)], HostPath: rng.Intn(6) == 0}
		for coll := sdk.AllReduce; coll <= sdk.Barrier; coll++ {
			call := Call{Coll: coll, Count: rng.Intn(50), DType: sdk.DataType(rng.Intn(int(sdk.NumDataTypes))), Op: sdk.RedOp(rng.Intn(int(sdk.NumRedOps))), Root: rng.Intn(n)}
			plans := make([]*Plan, n)
			for r := 0; r < n; r++ {
				c := call
				switch coll {
				case sdk.AlltoAllv:
					c.SendCounts, c.SDispls, c.RecvCounts, c.RDispls = vcounts(n, call.Count, r)
				case sdk.SendRecv:
					b := call.Count * 4
					c.Ops = []Xfer{{Peer: (r + 1) % n, Bytes: b}, {Peer: (r + n - 1) % n, Recv: true, Bytes: b}, {Peer: r, Bytes: 8}, {Peer: r, Recv: true, Bytes: 8}}
				}
				plans[r], err = Build(l, r, c, o)
				require.NoError(t, err)
			}
			checkAgree(t, l, plans, fmt.Sprintf("%s %v %v", strings.Join(spec, ","), o, call))
		}
	}
}

// vcounts is an uneven AlltoAllv pattern (as the reference's).
func vcounts(n, count, rank int) (sc, sd, rc, rd []int) {
	f := func(src, dst int) int { return count * ((src + 2*dst + 1) % (n + 1)) / n }
	sc, sd, rc, rd = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for p := 0; p < n; p++ {
		sc[p], rc[p] = f(rank, p), f(p, rank)
		sd[p], rd[p] = p*count, p*count
	}
	return
}

type sig struct {
	coll        sdk.Collective
	count, root int
	dtype       sdk.DataType
	op          sdk.RedOp
}

func checkAgree(t *testing.T, l *Layout, plans []*Plan, what string) {
	t.Helper()
	n := l.NRanks()
	// Per communicator ("intra c", "inter", "world"): each member's
	// collective signatures in lane order, and per ordered pair the sizes
	// sent and received.
	colls := map[string]map[int][]sig{}
	sends := map[string][]int{}
	recvs := map[string][]int{}
	for r, p := range plans {
		send, recv, err := Needs(p.Call, r, n)
		require.NoError(t, err)
		bound := map[Buf]int{BufSend: send, BufRecv: recv, BufStage: p.StageBytes(), BufScratch: p.ScratchBytes()}
		inRange := func(ref Ref) {
			if ref.Buf == BufNone || ref.Len == 0 {
				return
			}
			require.GreaterOrEqual(t, ref.Off, 0, what)
			if ref.Buf == BufUser {
				require.LessOrEqual(t, ref.Off+ref.Len, p.Call.Ops[ref.Idx].Bytes, "%s: rank %d: %s", what, r, ref)
				return
			}
			if ref.Buf == BufSend || ref.Buf == BufRecv {
				require.LessOrEqual(t, ref.Off+ref.Len, bound[ref.Buf], "%s: rank %d: %s outside the call's buffer", what, r, ref)
			}
		}
		dev := l.ClusterOf(r).OnDevice()
		for i, s := range p.Steps {
			for _, d := range s.Deps {
				require.Less(t, d, i, "%s: rank %d step %d waits on a later step", what, r, i)
			}
			require.True(t, s.Lane >= 0 && s.Lane < NumLanes)
			for _, ref := range []Ref{s.Src, s.Dst} {
				inRange(ref)
			}
			for _, c := range s.Copies {
				inRange(c.Src)
				inRange(c.Dst)
				require.Equal(t, c.Src.Len, c.Dst.Len, "%s: copy sizes", what)
			}
			for _, x := range s.Xfers {
				inRange(x.Ref)
			}
			var comm string
			peer := func(p int) int { return p }
			switch s.Kind {
			case KindIntra:
				c := l.ClusterOf(r)
				comm = fmt.Sprintf("intra %d", c.Index)
				peer = func(p int) int { return c.Ranks[p] }
				if dev {
					for _, ref := range []Ref{s.Src, s.Dst} {
						require.NotEqual(t, BufStage, ref.Buf, "%s: a vendor step on staging", what)
					}
				}
			case KindInter:
				require.Equal(t, r, l.ClusterOf(r).Leader, "%s: only leaders run inter steps", what)
				comm = "inter"
				peer = func(p int) int { return l.Clusters[p].Leader }
			case KindWorld:
				comm = "world"
			default:
				if s.Kind == KindScale || s.Kind == KindReduce {
					require.NotEqual(t, dev && s.Dst.Buf != BufStage, true, "%s: host reductions only on host memory", what)
				}
				continue
			}
			if s.Coll == sdk.SendRecv {
				for _, x := range s.Xfers {
					g := peer(x.Peer)
					if x.Recv {
						k := fmt.Sprintf("%s %d>%d", comm, g, r)
						recvs[k] = append(recvs[k], x.Ref.Len)
					} else {
						k := fmt.Sprintf("%s %d>%d", comm, r, g)
						sends[k] = append(sends[k], x.Ref.Len)
					}
				}
				continue
			}
			if colls[comm] == nil {
				colls[comm] = map[int][]sig{}
			}
			colls[comm][r] = append(colls[comm][r], sig{s.Coll, s.Count, s.Root, s.DType, s.Op})
		}
	}
	for comm, byRank := range colls {
		var ref []sig
		first := -1
		for r := 0; r < n; r++ {
			if seq, ok := byRank[r]; ok && first < 0 {
				first, ref = r, seq
			}
		}
		members := membersOf(l, comm)
		for _, r := range members {
			if comm == "world" || len(ref) > 0 {
				require.Equal(t, ref, byRank[r], "%s: %s: rank %d and rank %d disagree", what, comm, first, r)
			}
		}
	}
	for k, s := range sends {
		require.Equal(t, s, recvs[k], "%s: %s: sends and receives do not match", what, k)
	}
	for k, rv := range recvs {
		require.Equal(t, sends[k], rv, "%s: %s: a receive without its send", what, k)
	}
}

func membersOf(l *Layout, comm string) []int {
	switch {
	case comm == "world":
		out := make([]int, l.NRanks())
		for i := range out {
			out[i] = i
		}
		return out
	case comm == "inter":
		var out []int
		for _, c := range l.Clusters {
			out = append(out, c.Leader)
		}
		return out
	}
	var c int
	fmt.Sscanf(comm, "intra %d", &c)
	return l.Clusters[c].Ranks
}

func TestValidate(t *testing.T) {
	cases := []struct {
		call Call
		want string
	}{
		{Call{Coll: sdk.AllReduce, Count: 1, DType: 42}, "data type 42"},
		{Call{Coll: sdk.AllReduce, Count: 1, DType: sdk.Float32, Op: 9}, "reduction op 9"},
		{Call{Coll: sdk.Reduce, Count: 1, DType: sdk.Float32, Root: 3}, "root 3 is out of range for 3 ranks"},
		{Call{Coll: sdk.Broadcast, Count: -1, DType: sdk.Float32}, "count -1"},
		{Call{Coll: sdk.AlltoAllv, DType: sdk.Float32, SendCounts: []int{1}}, "there are 3 ranks: pass one count"},
		{Call{Coll: sdk.SendRecv, Ops: []Xfer{{Peer: 5}}}, "peer 5 is out of range"},
		{Call{Coll: 99}, "unknown collective"},
	}
	l := layout(t, "nvidia,host,host")
	for _, c := range cases {
		_, err := Build(l, 0, c.call, Options{})
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, c.want)
		require.Contains(t, err.Error(), c.want)
	}
	_, err := Build(l, 0, Call{Coll: sdk.SendRecv, Ops: []Xfer{{Peer: 0, Bytes: 4}}}, Options{})
	require.ErrorContains(t, err, "sends 1 messages to itself but receives 0")
	_, err = Build(l, 7, Call{Coll: sdk.Barrier}, Options{})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
}

func TestPlanFormat(t *testing.T) {
	l := layout(t, "nvidia,nvidia,host")
	p := plan(t, l, 0, Call{Coll: sdk.AllReduce, Count: 16 << 20, DType: sdk.Float32, Op: sdk.Sum}, Options{Chunk: 4 << 20})
	require.Equal(t, 16, p.Chunks)
	out := p.String()
	for _, w := range []string{
		"plan rank 0: AllReduce float32 sum count 16777216: path c2c, 16 chunks of 4M",
		"rank 0: leader of cluster 0 (NVIDIA, ranks 0,1), nvidia device 0",
		"intra c0  intra Reduce float32 sum send[0:4M] -> recv[0:4M] count 1048576 root 0",
		"d2h   c1  copy recv[4M:8M] -> stage[4M:8M]  (after 1)",
		"net   c1  inter AllReduce float32 sum stage[4M:8M] in place count 1048576  (after ",
		"... 13 steps of chunks 2-14, alike",
		"intra c15 intra Broadcast uint8 recv[60M:64M] in place count 4194304 root 0",
	} {
		require.Contains(t, out, w)
	}
	var full strings.Builder
	p.Format(&full, 0)
	require.Equal(t, len(p.Steps)+2, strings.Count(full.String(), "\n"), "0 lists every step")
	require.Contains(t, plan(t, l, 2, Call{Coll: sdk.Barrier}, Options{}).String(), "net       world Barrier")
}
