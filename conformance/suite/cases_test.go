package suite

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
)

func byID(cases []Case) map[string]Case {
	m := map[string]Case{}
	for _, c := range cases {
		m[c.ID] = c
	}
	return m
}

// TestMatrixShape: ids are unique and well formed, every case is described
// and grouped, and the quick matrix is a subset of the full one.
func TestMatrixShape(t *testing.T) {
	np := []int{2, 3, 4}
	full := Matrix(MatrixOptions{NP: np, Seed: 1})
	quick := Matrix(MatrixOptions{NP: np, Quick: true, Seed: 1})
	nSuffix := regexp.MustCompile(`\.n(\d+)(\.|$)`)
	for _, m := range [][]Case{full, quick} {
		ids := map[string]bool{}
		for _, c := range m {
			require.False(t, ids[c.ID], "duplicate id %s", c.ID)
			ids[c.ID] = true
			require.NotEmpty(t, c.Description, c.ID)
			require.Contains(t, areaOrder, c.Area, c.ID)
			require.NotEmpty(t, c.Spec.Kind, c.ID)
			_, byWorker := workerKinds[c.Spec.Kind]
			require.True(t, byWorker || runnerKinds[c.Spec.Kind], "%s: kind %q is not registered", c.ID, c.Spec.Kind)
			if c.NRanks >= 2 {
				sm := nSuffix.FindStringSubmatch(c.ID)
				require.NotNil(t, sm, "%s: a communicator case names its size", c.ID)
				require.Equal(t, fmt.Sprint(c.NRanks), sm[1], c.ID)
			}
			if c.Spec.Kind == "coll" {
				require.NoError(t, reference.Case{Coll: c.Spec.Coll, Type: c.Spec.Type, Op: c.Spec.Op, NRanks: c.NRanks,
					Root: c.Spec.Root, Count: c.Spec.Count}.Validate(), c.ID)
			}
		}
		require.Equal(t, "plugin.load", m[0].ID, "plugin.load runs first")
	}
	fullIDs := byID(full)
	for _, c := range quick {
		_, ok := fullIDs[c.ID]
		require.True(t, ok, "quick case %s is not in the full matrix", c.ID)
	}
	require.Greater(t, len(full), 2*len(quick))
	// The last case of each communicator size destroys it.
	last := map[int]string{}
	for _, c := range full {
		if c.NRanks >= 2 {
			last[c.NRanks] = c.ID
		}
	}
	for _, n := range np {
		require.Equal(t, fmt.Sprintf("comm.destroy.n%d", n), last[n])
	}
}

// TestMatrixCoverage: every collective, data type, op, count class, root
// and in-place form appears.
func TestMatrixCoverage(t *testing.T) {
	m := Matrix(MatrixOptions{NP: []int{3}})
	type key struct {
		coll sdk.Collective
		dt   sdk.DataType
		op   sdk.RedOp
	}
	seen := map[key]bool{}
	counts := map[int]bool{}
	roots := map[int]bool{}
	inPlace := map[sdk.Collective]bool{}
	for _, c := range m {
		if c.Spec.Kind != "coll" {
			continue
		}
		seen[key{c.Spec.Coll, c.Spec.Type, c.Spec.Op}] = true
		counts[c.Spec.Count] = true
		if c.Spec.Coll.Rooted() {
			roots[c.Spec.Root] = true
		}
		if c.Spec.InPlace {
			inPlace[c.Spec.Coll] = true
		}
	}
	for _, coll := range sdk.AllCollectives() {
		if coll == sdk.SendRecv {
			continue
		}
		for _, dt := range sdk.AllDataTypes() {
			ops := []sdk.RedOp{reference.NoOp}
			if coll.Reduces() {
				ops = sdk.AllRedOps()
			}
			for _, op := range ops {
				require.True(t, seen[key{coll, dt, op}], "%s %s %s missing", coll, dt, op)
			}
		}
	}
	for _, n := range []int{0, 1, 7, 1031, 65537, countLarge} {
		require.True(t, counts[n], "count %d missing", n)
	}
	require.True(t, roots[0] && roots[2], "roots 0 and n-1")
	for _, coll := range []sdk.Collective{sdk.AllReduce, sdk.Reduce, sdk.Broadcast, sdk.AllGather, sdk.ReduceScatter} {
		require.True(t, inPlace[coll], "%s in place", coll)
	}
	ids := byID(m)
	for _, id := range []string{"coll.allreduce.float16.sum.n3.count1031.inplace", "p2p.ring.bfloat16.n3.count7",
		"p2p.exchange.uint8.n3.count65537", "p2p.pair.float32.n3.count1", "p2p.self.float32.n3.count1031",
		"group.nested.float32.n3.count1031", "group.collectives.float32.n3.count1031", "comm.initdestroy.n3",
		"comm.multi.n3", "comm.abort.n3", "comm.asyncerror.n3", "device.event.elapsed", "device.memcpy.async"} {
		_, ok := ids[id]
		require.True(t, ok, id)
	}
}

// TestLevels pins the documented levels (conformance/README.md, Levels).
func TestLevels(t *testing.T) {
	m := byID(Matrix(MatrixOptions{NP: []int{3}}))
	cases := []struct {
		id    string
		level Level
	}{
		{"plugin.load", MUST},
		{"plugin.datatype.float32", MUST},
		{"plugin.datatype.bfloat16", SHOULD},
		{"plugin.datatype.uint64", MAY},
		{"plugin.redop.sum", MUST},
		{"plugin.redop.max", SHOULD},
		{"plugin.redop.avg", MAY},
		{"device.malloc", MUST},
		{"device.memcpy.async", MUST},
		{"device.stream.waitevent", MUST},
		{"device.event.elapsed", SHOULD},
		{"device.pointerkind", MAY},
		{"comm.init.n3", MUST},
		{"comm.initdestroy.n3", MUST},
		{"comm.abort.n3", SHOULD},
		{"comm.asyncerror.n3", SHOULD},
		{"comm.destroy.n3", MUST},
		{"coll.allreduce.float16.sum.n3.count1031.inplace", MUST},
		{"coll.allreduce.int32.sum.n3.count1031.outofplace", MUST},
		{"coll.allreduce.int8.sum.n3.count1031.outofplace", SHOULD},
		{"coll.allreduce.float32.prod.n3.count1031.outofplace", SHOULD},
		{"coll.allreduce.float32.avg.n3.count1031.outofplace", MAY},
		{"coll.reduce.bfloat16.sum.n3.root0.count7.outofplace", MUST},
		{"coll.broadcast.int8.n3.root2.count1031.inplace", MUST},
		{"coll.allgather.uint64.n3.count1.outofplace", MUST},
		{"coll.reducescatter.float32.min.n3.count1031.inplace", SHOULD},
		{"coll.alltoall.float32.n3.count1031.outofplace", SHOULD},
		{"coll.gather.float32.n3.root2.count1031.outofplace", SHOULD},
		{"coll.scatter.float32.n3.root0.count1031.outofplace", SHOULD},
		{"coll.alltoallv.float32.n3.count1031.outofplace", MAY},
		{"p2p.ring.int64.n3.count1031", MUST},
		{"p2p.exchange.float32.n3.count1031", MUST},
		{"p2p.pair.float32.n3.count1031", MUST},
		{"p2p.self.float32.n3.count1031", SHOULD},
		{"group.collectives.float32.n3.count1031", SHOULD},
	}
	for _, c := range cases {
		got, ok := m[c.id]
		require.True(t, ok, "no case %s", c.id)
		require.Equal(t, c.level, got.Level, c.id)
	}
	// The optional entries a case needs.
	require.Equal(t, []string{"alltoAll"}, m["coll.alltoall.float32.n3.count1031.outofplace"].Needs)
	require.Equal(t, []string{"eventElapsedTime"}, m["device.event.elapsed"].Needs)
	require.Empty(t, m["coll.allreduce.float32.sum.n3.count1031.outofplace"].Needs)
}

// TestSeeds: the same options give the same inputs; cases differ from one
// another and with the base seed.
func TestSeeds(t *testing.T) {
	a := byID(Matrix(MatrixOptions{NP: []int{2}, Quick: true, Seed: 1}))
	b := byID(Matrix(MatrixOptions{NP: []int{2}, Quick: true, Seed: 1}))
	c := byID(Matrix(MatrixOptions{NP: []int{2}, Quick: true, Seed: 2}))
	seeds := map[uint64]string{}
	for id, k := range a {
		require.Equal(t, k.Spec.Seed, b[id].Spec.Seed)
		require.NotEqual(t, k.Spec.Seed, c[id].Spec.Seed)
		prev, dup := seeds[k.Spec.Seed]
		require.False(t, dup, "%s and %s share a seed", id, prev)
		seeds[k.Spec.Seed] = id
	}
}

// TestLevelText: levels print and marshal as their RFC 2119 names.
func TestLevelText(t *testing.T) {
	for l, want := range map[Level]string{MUST: "MUST", SHOULD: "SHOULD", MAY: "MAY", Level(7): "level(7)"} {
		require.Equal(t, want, l.String())
		b, err := l.MarshalText()
		require.NoError(t, err)
		require.Equal(t, want, string(b))
	}
	require.Equal(t, MAY, weaker(MUST, MAY))
	require.Equal(t, SHOULD, weaker(SHOULD, MUST))
}

// TestUnknownKindFailsAtStart: a case naming a kind nothing executes is
// an error of the run, found before any worker starts.
func TestUnknownKindFailsAtStart(t *testing.T) {
	cases := Matrix(MatrixOptions{NP: []int{2}, Quick: true})
	require.NoError(t, checkKinds(cases))
	cases = append(cases, Case{ID: "device.typo", Spec: Spec{Kind: "device.tpyo"}})
	require.ErrorContains(t, checkKinds(cases), `case device.typo names kind "device.tpyo", which no worker or runner executes`)
}
