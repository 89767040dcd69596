package sdk

// The table of collectives: one descriptor per Collective, the one place
// that says what a collective's buffers hold, how it is laid out in place,
// whether it reduces or takes a root, how its bus bandwidth is counted and
// which entry of the plugin table runs it. The schedules, the checker
// below, the C API, the exact references, the benchmark and the
// conformance suite read it instead of switching on the collective.

// Extent is how many count-element blocks one of a collective's buffers
// holds, and on which ranks.
type Extent uint8

const (
	// ExtentNone: the buffer is not used (Barrier, SendRecv's ring has
	// its own).
	ExtentNone Extent = iota
	// ExtentOne: count elements on every rank.
	ExtentOne
	// ExtentRanks: one block of count elements per rank, on every rank.
	ExtentRanks
	// ExtentRootOne: count elements, used at the root only.
	ExtentRootOne
	// ExtentRootRanks: one block per rank, used at the root only.
	ExtentRootRanks
	// ExtentVector: AlltoAllv's, the end of the furthest of the per-rank
	// regions its counts and displacements name.
	ExtentVector
)

// Blocks is the number of count-element blocks a buffer of extent e holds
// on n ranks, on any rank (roots and non-roots alike, as nccl-tests and
// FlagCX's flagcx.h allocate them). A vector extent counts n blocks (its
// count is the slot per peer).
func (e Extent) Blocks(n int) int {
	switch e {
	case ExtentOne, ExtentRootOne:
		return 1
	case ExtentRanks, ExtentRootRanks, ExtentVector:
		return n
	}
	return 0
}

// PerRank reports whether a buffer of extent e holds a block per rank.
func (e Extent) PerRank() bool { return e == ExtentRanks || e == ExtentRootRanks || e == ExtentVector }

// RootOnly reports whether only the root uses a buffer of extent e.
func (e Extent) RootOnly() bool { return e == ExtentRootOne || e == ExtentRootRanks }

// InPlace is where NCCL puts the send and receive buffers of an in-place
// call inside the one larger buffer.
type InPlace uint8

const (
	// InPlaceNone: the collective has no in-place form (AlltoAll,
	// AlltoAllv, SendRecv, Barrier).
	InPlaceNone InPlace = iota
	// InPlaceSame: send == recv (AllReduce, Reduce, Broadcast).
	InPlaceSame
	// InPlaceSendInRecv: send = recv + rank*count elements (AllGather;
	// Gather at the root).
	InPlaceSendInRecv
	// InPlaceRecvInSend: recv = send + rank*count elements
	// (ReduceScatter; Scatter at the root).
	InPlaceRecvInSend
)

// Offsets are the element offsets of send and recv inside the in-place
// buffer for rank with count count (0, 0 where the two are the same).
func (p InPlace) Offsets(rank, count int) (send, recv int) {
	switch p {
	case InPlaceSendInRecv:
		return rank * count, 0
	case InPlaceRecvInSend:
		return 0, rank * count
	}
	return 0, 0
}

// Bus is how a collective's bus bandwidth follows from its algorithm
// bandwidth on n ranks (nccl-tests' definitions).
type Bus uint8

const (
	// BusNone: no data moves (Barrier).
	BusNone Bus = iota
	// BusOne: factor 1 (Reduce, Broadcast, SendRecv).
	BusOne
	// BusPart: (n-1)/n, the size being the whole buffer.
	BusPart
	// BusTwice: 2(n-1)/n (AllReduce).
	BusTwice
)

func (b Bus) factor(n int) float64 {
	switch b {
	case BusOne:
		return 1
	case BusPart:
		return float64(n-1) / float64(n)
	case BusTwice:
		return 2 * float64(n-1) / float64(n)
	}
	return 0
}

// CollInfo describes one collective.
type CollInfo struct {
	Coll Collective
	// Name is the command line's and reports' name ("allreduce"); Title
	// the API's spelling ("AllReduce").
	Name, Title string
	// Reduces: takes a reduction op; Rooted: takes a root rank.
	Reduces, Rooted bool
	// CountName is the count argument's name in the API and in errors
	// ("count", "sendcount", "recvcount").
	CountName string
	// Send and Recv are the extents of the send and receive buffers.
	Send, Recv Extent
	InPlace    InPlace
	Bus        Bus
	// Same: every rank that receives gets the same buffer (AllReduce,
	// Reduce, Broadcast, AllGather, Gather), which lets a checker split
	// the work of computing it between the ranks.
	Same bool
	// Entry is the plugin table's entry (sdk/include/flagcx_plugin.h)
	// that runs the collective ("" for Barrier, which a plugin has no
	// entry for, and SendRecv, which is send and recv); Optional marks an
	// entry a plugin may leave NULL.
	Entry    string
	Optional bool
}

// collectives is the table, indexed by Collective.
var collectives = [NumCollectives]CollInfo{
	AllReduce: {Same: true, Name: "allreduce", Title: "AllReduce", Reduces: true, CountName: "count",
		Send: ExtentOne, Recv: ExtentOne, InPlace: InPlaceSame, Bus: BusTwice, Entry: "allReduce"},
	Reduce: {Same: true, Name: "reduce", Title: "Reduce", Reduces: true, Rooted: true, CountName: "count",
		Send: ExtentOne, Recv: ExtentRootOne, InPlace: InPlaceSame, Bus: BusOne, Entry: "reduce"},
	Broadcast: {Same: true, Name: "broadcast", Title: "Broadcast", Rooted: true, CountName: "count",
		Send: ExtentRootOne, Recv: ExtentOne, InPlace: InPlaceSame, Bus: BusOne, Entry: "broadcast"},
	AllGather: {Same: true, Name: "allgather", Title: "AllGather", CountName: "sendcount",
		Send: ExtentOne, Recv: ExtentRanks, InPlace: InPlaceSendInRecv, Bus: BusPart, Entry: "allGather"},
	ReduceScatter: {Name: "reducescatter", Title: "ReduceScatter", Reduces: true, CountName: "recvcount",
		Send: ExtentRanks, Recv: ExtentOne, InPlace: InPlaceRecvInSend, Bus: BusPart, Entry: "reduceScatter"},
	AlltoAll: {Name: "alltoall", Title: "AlltoAll", CountName: "count",
		Send: ExtentRanks, Recv: ExtentRanks, Bus: BusPart, Entry: "alltoAll", Optional: true},
	AlltoAllv: {Name: "alltoallv", Title: "AlltoAllv", CountName: "count",
		Send: ExtentVector, Recv: ExtentVector, Bus: BusPart, Entry: "alltoAllv", Optional: true},
	Gather: {Same: true, Name: "gather", Title: "Gather", Rooted: true, CountName: "count",
		Send: ExtentOne, Recv: ExtentRootRanks, InPlace: InPlaceSendInRecv, Bus: BusPart, Entry: "gather", Optional: true},
	Scatter: {Name: "scatter", Title: "Scatter", Rooted: true, CountName: "count",
		Send: ExtentRootRanks, Recv: ExtentOne, InPlace: InPlaceRecvInSend, Bus: BusPart, Entry: "scatter", Optional: true},
	SendRecv: {Name: "sendrecv", Title: "SendRecv", CountName: "count",
		Send: ExtentOne, Recv: ExtentOne, Bus: BusOne},
	Barrier: {Name: "barrier", Title: "Barrier"},
}

func init() {
	for i := range collectives {
		collectives[i].Coll = Collective(i)
	}
}

// Info is c's descriptor (nil for a value that is not a collective).
func (c Collective) Info() *CollInfo {
	if !c.Valid() {
		return nil
	}
	return &collectives[c]
}

// BufElems is how many elements the send and receive buffers of c hold
// for count on n ranks, on every rank alike (a root-only buffer counted
// as the root's), as nccl-tests and FlagCX's flagcx.h allocate them.
// AlltoAllv's are n slots of count.
func (c Collective) BufElems(count, n int) (send, recv int) {
	d := c.Info()
	if d == nil {
		return 0, 0
	}
	return d.Send.Blocks(n) * count, d.Recv.Blocks(n) * count
}
