// Package suite is flagcx conformance: it runs a matrix of cases against
// vendor plugins and checks every result against the exact values of
// conformance/reference. Each case has an id, a level (MUST, SHOULD, MAY)
// and a kind (kinds.go): the plugin's table and masks (plugin.*),
// communicators (comm.*, with the leak check of leak.go), the device
// runtime (device.*, worker_device.go; ABI v5's relay, worker_relay.go),
// streams, groups, point-to-point, and the collectives (coll.*: collective
// x dtype x op x size x ranks x root x in-place). The ranks under test run
// in worker processes started through github.com/hashicorp/go-plugin
// (protocol.go, worker*.go), so a plugin that crashes or hangs fails its
// cases with the reason and the suite goes on; the Report is written as
// text, JUnit XML or JSON (report.go).
//
//	rep, err := suite.Run(ctx, suite.Options{Dir: "build/plugins", NP: []int{2, 3}, Emulated: true})
//	rep.WriteText(os.Stdout)
//
// conformance/README.md documents the levels and what a passing
// submission looks like.
package suite

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
)

// Level is how strongly a case is required, as in RFC 2119.
type Level int

const (
	MUST   Level = iota // a failure fails the run; "not supported" is a failure
	SHOULD              // a failure is reported; "not supported" is a skip
	MAY                 // optional functionality; "not supported" is a skip
)

var levelNames = []string{"MUST", "SHOULD", "MAY"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return fmt.Sprintf("level(%d)", int(l))
	}
	return levelNames[l]
}

// MarshalText writes the level's name in reports.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// weaker is the less demanding of two levels: a case is as strong as its
// weakest ingredient (allreduce is MUST, avg is MAY: allreduce with avg is MAY).
func weaker(a, b Level) Level { return max(a, b) }

// Case is one row of the matrix.
type Case struct {
	ID          string
	Level       Level
	Area        string // report group: plugin, device, comm, a collective's name, sendrecv, group
	Description string
	// NRanks: 0 for the checks of the plugin table and init, 1 for the
	// device-runtime cases (one worker), >= 2 for a communicator of that
	// many ranks (one worker each).
	NRanks int
	// UsesType and UsesOp: the case needs Spec.Type / Spec.Op in the
	// plugin's dataTypeMask / redOpMask.
	UsesType, UsesOp bool
	// Needs lists OPTIONAL entries the case exercises; a NULL one skips it.
	Needs []string
	// NeedsCCL: the case needs the collective library (caps).
	NeedsCCL bool
	// Deadline shortens the case's deadline below Options.CaseTimeout (0:
	// not): a point-to-point mix-up hangs, and should not cost a minute.
	Deadline time.Duration
	Spec     Spec
}

// Spec is what the workers execute. It crosses the RPC boundary.
type Spec struct {
	Kind    Kind // what runs it (kinds.go)
	Coll    sdk.Collective
	Type    sdk.DataType
	Op      sdk.RedOp
	Root    int
	Count   int
	InPlace bool
	Seed    uint64
	Iters   int      // loops (comm.initdestroy) or communicators (comm.multi)
	Shift   int      // bytes every buffer's data sits off the allocation's 256-byte alignment
	NeedIDs int      // vendor unique ids the runner fetches from rank 0 for the case
	IDs     [][]byte // filled by the runner
}

// MatrixOptions choose the size of the matrix.
type MatrixOptions struct {
	NP    []int  // communicator sizes
	Quick bool   // the CI subset (see README)
	Seed  uint64 // base seed of the inputs
}

// Counts used for the collectives: 0, 1, primes (odd sizes that divide
// nothing: unaligned for every vector width and chunk size), sizes at and
// around powers of two (where vector loops, chunking and protocol switches
// change: a bug only when count % 4 == 0, or only at 4097, shows there),
// and a large prime of about 4 MiB of float32.
const (
	countLarge = 1048583
)

func baseCounts(quick bool, dt sdk.DataType) []int {
	if quick {
		if dt == sdk.Float32 {
			return []int{0, 1, 4, 1031, 4097}
		}
		return []int{1, 4, 1031}
	}
	return []int{0, 1, 4, 7, 8, 1031, 4095, 4096, 4097, 65536, 65537}
}

// rootsFor are the roots a rooted collective is run with: every root up
// to 5 ranks for the common case (sum, or no op; float32 in the quick
// matrix), so that a root other than the first and the last is tried, and
// the last rank otherwise.
func rootsFor(n int, quick bool, dt sdk.DataType, op sdk.RedOp) []int {
	common := op == sdk.Sum || op == reference.NoOp
	if quick {
		common = common && dt == sdk.Float32
	}
	if !common || n > 5 {
		if !quick && common {
			return []int{0, n / 2, n - 1}
		}
		return []int{n - 1}
	}
	roots := make([]int, n)
	for r := range roots {
		roots[r] = r
	}
	return roots
}

// largeCombos are the (collective, type, op) combinations also run with
// countLarge elements: large sizes cost time, the small sizes cover the
// type x op cross.
func largeCombos(quick bool) map[sdk.Collective][][2]int {
	t := func(dt sdk.DataType, op sdk.RedOp) [2]int { return [2]int{int(dt), int(op)} }
	if quick {
		return map[sdk.Collective][][2]int{
			sdk.AllReduce: {t(sdk.Float32, sdk.Sum)},
			sdk.AllGather: {t(sdk.Float32, reference.NoOp)},
		}
	}
	return map[sdk.Collective][][2]int{
		sdk.AllReduce:     {t(sdk.Float32, sdk.Sum), t(sdk.Bfloat16, sdk.Sum), t(sdk.Int8, sdk.Max), t(sdk.Float16, sdk.Avg)},
		sdk.Reduce:        {t(sdk.Float32, sdk.Sum)},
		sdk.Broadcast:     {t(sdk.Float32, reference.NoOp)},
		sdk.AllGather:     {t(sdk.Float32, reference.NoOp)},
		sdk.ReduceScatter: {t(sdk.Float32, sdk.Sum)},
		sdk.AlltoAll:      {t(sdk.Float32, reference.NoOp)},
	}
}

// collLevel is the level of each collective (see README: why).
func collLevel(c sdk.Collective) Level {
	if !c.Valid() {
		return MAY
	}
	return collLevels[c]
}

// collLevels lists every collective, MUST being the zero Level.
var collLevels = [sdk.NumCollectives]Level{
	sdk.AllReduce: MUST, sdk.Reduce: MUST, sdk.Broadcast: MUST, sdk.AllGather: MUST, sdk.ReduceScatter: MUST, sdk.SendRecv: MUST,
	sdk.AlltoAll: SHOULD, sdk.Gather: SHOULD, sdk.Scatter: SHOULD,
	sdk.AlltoAllv: MAY, sdk.Barrier: MAY,
}

// opLevel is the level of each reduction op.
func opLevel(op sdk.RedOp) Level {
	switch op {
	case sdk.Sum:
		return MUST
	case sdk.Prod, sdk.Max, sdk.Min:
		return SHOULD
	}
	return MAY // avg
}

// reduceTypeLevel is how strongly a reduction must work on a data type the
// plugin declares: the types of gradients and counters every vendor CCL
// reduces are MUST; the others may be declared for data movement only
// (BKCL moves int8, uint32 and uint64 but cannot reduce them), so their
// reductions are SHOULD and "not supported" at run time skips them.
func reduceTypeLevel(t sdk.DataType) Level {
	switch t {
	case sdk.Float32, sdk.Float16, sdk.Bfloat16, sdk.Int32:
		return MUST
	}
	return SHOULD
}

// typeLevel is how strongly the plugin must declare each data type.
func typeLevel(t sdk.DataType) Level {
	switch t {
	case sdk.Float32:
		return MUST
	case sdk.Uint32, sdk.Uint64:
		return MAY
	}
	return SHOULD
}

// optionalEntry is the OPTIONAL table entry a collective needs.
func optionalEntry(c sdk.Collective) string {
	if d := c.Info(); d != nil && d.Optional {
		return d.Entry
	}
	return ""
}

// inPlaceOK reports whether the suite checks the collective in place: it
// has an in-place form (sdk's table) and a required table entry. The
// optional entries' (Gather, Scatter) in-place forms are not part of the
// plugin contract: NCCL has no such calls to define them.
func inPlaceOK(c sdk.Collective) bool {
	d := c.Info()
	return d != nil && d.InPlace != sdk.InPlaceNone && !d.Optional
}

func seedFor(base uint64, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return base ^ h.Sum64()
}

// Matrix lists every case for the options, in run order: the plugin
// checks, the device runtime, then per communicator size the communicator
// lifecycle, the collectives, point-to-point and groups, and last the
// communicator's destruction.
func Matrix(o MatrixOptions) []Case {
	var out []Case
	add := func(c Case) {
		c.Spec.Seed = seedFor(o.Seed, c.ID)
		out = append(out, c)
	}
	add(Case{ID: "plugin.load", Level: MUST, Area: "plugin", Spec: Spec{Kind: KindPluginLoad},
		Description: "the file is a plugin of a known ABI version, its table passes the loader's checks and init succeeds"})
	for _, t := range sdk.AllDataTypes() {
		add(Case{ID: "plugin.datatype." + t.String(), Level: typeLevel(t), Area: "plugin", NeedsCCL: true,
			Description: "dataTypeMask declares " + t.String(), Spec: Spec{Kind: KindDataType, Type: t}})
	}
	for _, op := range sdk.AllRedOps() {
		add(Case{ID: "plugin.redop." + op.String(), Level: opLevel(op), Area: "plugin", NeedsCCL: true,
			Description: "redOpMask declares " + op.String(), Spec: Spec{Kind: KindRedOp, Op: op}})
	}
	for _, c := range deviceCases() {
		c.NRanks = 1
		add(c)
	}
	for _, n := range o.NP {
		for _, c := range commCases(n, o.Quick) {
			c.NRanks, c.NeedsCCL = n, true
			add(c)
		}
		for _, c := range collCases(n, o.Quick) {
			c.NRanks, c.NeedsCCL = n, true
			add(c)
		}
		for _, c := range p2pCases(n, o.Quick) {
			c.NRanks, c.NeedsCCL = n, true
			add(c)
		}
		add(Case{ID: fmt.Sprintf("comm.destroy.n%d", n), Level: MUST, Area: "comm", NRanks: n, NeedsCCL: true,
			Description: fmt.Sprintf("commDestroy of the %d-rank communicator after all its work", n), Spec: Spec{Kind: KindCommDestroy}})
	}
	return out
}

func deviceCases() []Case {
	d := func(kind Kind, level Level, desc string, needs ...string) Case {
		return Case{ID: string(kind), Level: level, Area: "device", Description: desc, Needs: needs, Spec: Spec{Kind: kind}}
	}
	cases := []Case{
		d(KindDeviceCount, MUST, "getDeviceCount reports at least one device"),
		d(KindDeviceInfo, MUST, "getDeviceInfo describes every device with a name"),
		d(KindDevicePCIBusID, SHOULD, "getDeviceInfo gives PCI bus ids as dddd:bb:dd.f in lower case, distinct per device"),
		d(KindDeviceLinkSelf, MAY, "getLinkInfo(d, d) reports the link type Self", "getLinkInfo"),
		d(KindDeviceMalloc, MUST, "deviceMalloc/deviceFree of 1 B, 4099 B and 8 MiB + 3 B; distinct, non-NULL pointers"),
		d(KindDeviceHostMalloc, MUST, "hostMalloc/hostFree; the memory is usable from the host"),
		d(KindDeviceMemcpySync, MUST, "synchronous copies host to device to host, sizes 1 B .. 8 MiB + 3 B, at unaligned offsets"),
		d(KindDeviceMemcpyD2D, MUST, "synchronous device-to-device copies between two allocations and within one"),
		d(KindDeviceMemcpyAsync, MUST, "copies on a stream with pinned host memory, complete at streamSynchronize"),
		d(KindDeviceMemset, MUST, "memSet without a stream sets exactly the bytes asked, at an unaligned offset"),
		d(KindDeviceMemsetAsync, MUST, "memSet on a stream, complete at streamSynchronize"),
		d(KindDeviceStreams, MUST, "streamCreate / streamSynchronize / streamDestroy, 16 streams at once"),
		d(KindDeviceStreamQuery, MAY, "streamQuery reports an idle stream as done", "streamQuery"),
		d(KindDeviceEvent, MUST, "eventRecord after a copy, eventSynchronize, the copy is visible"),
		d(KindDeviceEventQuery, MAY, "eventQuery reports a synchronized event as reached", "eventQuery"),
		d(KindDeviceStreamWaitEvent, MUST, "work on a second stream waits for an event recorded on the first"),
		d(KindDeviceEventElapsed, SHOULD, "eventElapsedTime of two recorded events is finite and not negative", "eventElapsedTime"),
		d(KindDevicePointerKind, MAY, "pointerKind tells device memory, pinned host memory and pageable host memory apart", "pointerKind"),
		d(KindDeviceAll, SHOULD, "allocation, copies and a stream on every device the plugin reports (up to 16)"),
		d(KindDeviceError, SHOULD, "an entry given a device that does not exist fails and getLastError says why"),
		d(KindDeviceReduceLocal, MAY, "reduceLocal folds 1, 2, 3 and 8 sources of every declared type and op, out of place and in place, to the reference's bits", "reduceLocal"),
		d(KindDeviceReduceStream, MAY, "reduceLocal runs in its stream's order: copies in, the fold and a copy out on one stream, one synchronise", "reduceLocal"),
		d(KindDeviceRelayReduce, MAY, "relayReduce between a copy in and a copy out on one stream: src reaches the registered window and landed is raised; "+
			"the stream waits until the go; then dst holds the fold of 1, 2, 3 or 8 sources (device memory, registered host memory, the window, src) "+
			"of every declared type and op, to the reference's bits, out of place and in place; an abort leaves dst alone", "relayReduce", "hostRegister"),
		{ID: "comm.uniqueid", Level: MUST, Area: "comm", NeedsCCL: true, Spec: Spec{Kind: KindCommUniqueID},
			Description: "getUniqueIdBytes is within 1..4096 and two unique ids differ"},
		{ID: "comm.errorstring", Level: MAY, Area: "comm", NeedsCCL: true, Needs: []string{"getErrorString"}, Spec: Spec{Kind: KindCommErrorString},
			Description: "getErrorString describes every result code"},
		{ID: "comm.init.n1", Level: SHOULD, Area: "comm", NeedsCCL: true, Spec: Spec{Kind: KindCommSingle, NeedIDs: 1, Type: sdk.Float32, Count: 1031},
			Description: "a one-rank communicator: commInitRank, allReduce sum, commDestroy"},
	}
	return cases
}

func commCases(n int, quick bool) []Case {
	loops := 10
	if quick {
		loops = 3
	}
	c := func(id string, level Level, desc string, spec Spec, needs ...string) Case {
		return Case{ID: fmt.Sprintf("%s.n%d", id, n), Level: level, Area: "comm", Description: desc, Spec: spec, Needs: needs}
	}
	return []Case{
		c("comm.init", MUST, fmt.Sprintf("commInitRank on %d ranks, one process each, device = rank", n), Spec{Kind: KindCommInit}),
		c("comm.initdestroy", MUST, fmt.Sprintf("%d rounds of commInitRank, allReduce, commDestroy", loops),
			Spec{Kind: KindCommLoop, Iters: loops, NeedIDs: loops, Type: sdk.Float32, Count: 1031}),
		c("comm.multi", SHOULD, "three communicators at once, allReduce on each, issued interleaved",
			Spec{Kind: KindCommMulti, Iters: 3, NeedIDs: 3, Type: sdk.Float32, Count: 1031}),
		c("comm.asyncerror", SHOULD, "commGetAsyncError on a healthy communicator reports success",
			Spec{Kind: KindCommAsyncError}, "commGetAsyncError"),
		c("comm.abort", SHOULD, "a second communicator runs an allReduce, then every rank aborts it; the first one still works",
			Spec{Kind: KindCommAbort, NeedIDs: 1, Type: sdk.Float32, Count: 1031}, "commAbort"),
		{ID: fmt.Sprintf("stream.allreduce.n%d", n), Level: MUST, Area: "stream", UsesType: true, Description: "allReduce float32 sum of 4097 elements ordered on the caller's stream: the input copied in and the result copied out by copies on the same stream, one streamSynchronize at the end",
			Spec: Spec{Kind: KindStreamAllReduce, Type: sdk.Float32, Count: 4097}},
		c("comm.leak", SHOULD, fmt.Sprintf("%d identical allReduces of 256 KiB after %d warm-up rounds, in %d windows: the rank's resident memory and its device memory in use (memGetInfo, or an emulator's counter) do not grow in every window alike, as a leak does", leakRounds, leakRounds/leakWindows, leakWindows),
			Spec{Kind: KindCommLeak, Iters: leakRounds, Type: sdk.Float32, Count: 65536}),
	}
}

// leakRounds is how many identical calls the leak check measures (after
// a warm-up of one window more); a plugin that keeps a buffer of the
// message's size per call grows by 12.5 MiB in each window of 50.
const leakRounds = 200

func collCases(n int, quick bool) []Case {
	var out []Case
	large := largeCombos(quick)
	colls := []sdk.Collective{sdk.AllReduce, sdk.Reduce, sdk.Broadcast, sdk.AllGather,
		sdk.ReduceScatter, sdk.AlltoAll, sdk.AlltoAllv, sdk.Gather, sdk.Scatter}
	for _, coll := range colls {
		for _, dt := range sdk.AllDataTypes() {
			ops := []sdk.RedOp{reference.NoOp}
			if coll.Reduces() {
				ops = sdk.AllRedOps()
			}
			for _, op := range ops {
				counts := baseCounts(quick, dt)
				for _, lc := range large[coll] {
					if lc == [2]int{int(dt), int(op)} {
						counts = append(counts, countLarge)
					}
				}
				roots := []int{0}
				if coll.Rooted() {
					roots = rootsFor(n, quick, dt, op)
				}
				places := []bool{false}
				if inPlaceOK(coll) {
					places = []bool{false, true}
				}
				for _, count := range counts {
					for _, root := range roots {
						for _, inPlace := range places {
							out = append(out, collCase(coll, dt, op, n, root, count, inPlace))
						}
					}
				}
				// Buffers off the 16-byte alignment an allocator gives (by
				// one element: odd addresses for the 1-byte types), where
				// vector loads that assume alignment go wrong.
				if (dt == sdk.Float32 || dt == sdk.Int8) && (op == sdk.Sum || op == reference.NoOp) {
					for _, inPlace := range places {
						c := collCase(coll, dt, op, n, roots[len(roots)-1], 1031, inPlace)
						c.ID += ".unaligned"
						c.Description += fmt.Sprintf(", every buffer %d bytes off 16-byte alignment", dt.Size())
						c.Spec.Shift = dt.Size()
						out = append(out, c)
					}
				}
			}
		}
	}
	return out
}

func collCase(coll sdk.Collective, dt sdk.DataType, op sdk.RedOp, n, root, count int, inPlace bool) Case {
	parts := []string{"coll", coll.String(), dt.String()}
	level := collLevel(coll)
	if coll.Reduces() {
		parts = append(parts, op.String())
		level = weaker(level, weaker(opLevel(op), reduceTypeLevel(dt)))
	}
	parts = append(parts, fmt.Sprintf("n%d", n))
	if coll.Rooted() {
		parts = append(parts, fmt.Sprintf("root%d", root))
	}
	parts = append(parts, fmt.Sprintf("count%d", count))
	place := "outofplace"
	if inPlace {
		place = "inplace"
	}
	parts = append(parts, place)
	desc := fmt.Sprintf("%s of %d %s elements", coll, count, dt)
	if coll.Reduces() {
		desc = fmt.Sprintf("%s %s of %d %s elements", coll, op, count, dt)
	}
	if coll.Rooted() {
		desc += fmt.Sprintf(", root %d", root)
	}
	desc += fmt.Sprintf(", %d ranks, %s", n, map[bool]string{false: "out of place", true: "in place"}[inPlace])
	c := Case{ID: strings.Join(parts, "."), Level: level, Area: coll.String(), Description: desc,
		UsesType: true, UsesOp: coll.Reduces(),
		Spec: Spec{Kind: KindColl, Coll: coll, Type: dt, Op: op, Root: root, Count: count, InPlace: inPlace}}
	if e := optionalEntry(coll); e != "" {
		c.Needs = []string{e}
	}
	return c
}

// p2pDeadline bounds the point-to-point cases: 4 MiB around a ring takes
// milliseconds, so a case still running after this is a hang.
const p2pDeadline = 15 * time.Second

func p2pCases(n int, quick bool) []Case {
	var out []Case
	p := func(kind Kind, area string, level Level, dt sdk.DataType, count int, desc string) {
		out = append(out, Case{ID: fmt.Sprintf("%s.%s.n%d.count%d", kind, dt, n, count), Level: level, Area: area,
			Description: desc, UsesType: true, Deadline: p2pDeadline, Spec: Spec{Kind: kind, Coll: sdk.SendRecv, Type: dt, Count: count}})
	}
	ringTypes := sdk.AllDataTypes()
	exTypes := []sdk.DataType{sdk.Float32, sdk.Float16, sdk.Int64, sdk.Uint8}
	if quick {
		ringTypes = []sdk.DataType{sdk.Int8, sdk.Float32}
		exTypes = []sdk.DataType{sdk.Float32}
	}
	// The exchange first: every rank sends to and receives from every
	// other, so a plugin that mixes up peers but still pairs its sends with
	// receives shows wrong data there, before the ring (where the same bug
	// may hang and, twice, stop the area's remaining cases).
	for _, dt := range exTypes {
		for _, count := range baseCounts(quick, dt) {
			p(KindP2PExchange, "sendrecv", MUST, dt, count,
				fmt.Sprintf("one group with a send and a recv for every other rank, %d %s elements each", count, dt))
		}
	}
	for _, dt := range ringTypes {
		counts := baseCounts(quick, dt)
		if dt == sdk.Float32 {
			counts = append(counts, countLarge)
		}
		for _, count := range counts {
			p(KindP2PRing, "sendrecv", MUST, dt, count,
				fmt.Sprintf("grouped send to rank+1 and recv from rank-1, %d %s elements", count, dt))
		}
	}
	for _, count := range []int{1, 1031} {
		p(KindP2PPair, "sendrecv", MUST, sdk.Float32, count,
			fmt.Sprintf("send from rank 0 to rank %d and its recv, outside any group, %d float32 elements", n-1, count))
	}
	p(KindP2PSelf, "sendrecv", SHOULD, sdk.Float32, 1031, "a send to oneself and its recv in one group")
	p(KindGroupNested, "group", SHOULD, sdk.Float32, 1031, "the ring send/recv inside two nested groups")
	p(KindGroupCollectives, "group", SHOULD, sdk.Float32, 1031,
		"allReduce float32 sum, allReduce int32 max and broadcast float64 in one group")
	out[len(out)-1].UsesType = false // its types are checked in the worker (all three must be declared)
	return out
}
