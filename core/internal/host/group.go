package host

import (
	"cmp"
	"slices"
	"sort"
	"sync"

	"github.com/flagcx/flagcx-go/sdk"
)

// P2P is one send (Recv false) or receive (Recv true) of a Group: all of
// Buf goes to, or comes from, rank Peer.
type P2P struct {
	Peer int
	Buf  []byte
	Recv bool
}

// Group runs all the sends and receives of ops together, so that any
// pattern completes without deadlock (everyone sending to the next rank
// before receiving, say). Per peer, sends keep their order and receives
// keep theirs; different peers and the two directions run concurrently.
// Sends to this rank itself are matched in order with its receives from
// itself and done by copying; their numbers and lengths must agree.
// Buffers must not be touched until Group returns.
func (e *Engine) Group(ops []P2P) error {
	const name = "Group"
	var selfSends, selfRecvs [][]byte
	others := 0
	for i, o := range ops {
		if o.Peer < 0 || o.Peer >= e.n {
			return argErr(name, "operation %d: peer %d is out of range for %d ranks: use a rank in 0..%d", i, o.Peer, e.n, e.n-1)
		}
		switch {
		case o.Peer != e.rank:
			others++
		case o.Recv:
			selfRecvs = append(selfRecvs, o.Buf)
		default:
			selfSends = append(selfSends, o.Buf)
		}
	}
	if len(selfSends) != len(selfRecvs) {
		return argErr(name, "rank %d sends %d messages to itself but receives %d from itself: pair every send to self with a receive from self in the same group",
			e.rank, len(selfSends), len(selfRecvs))
	}
	for i := range selfSends {
		if len(selfSends[i]) != len(selfRecvs[i]) {
			return argErr(name, "send %d to self has %d bytes but receive %d from self has %d: make the lengths agree",
				i, len(selfSends[i]), i, len(selfRecvs[i]))
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range selfSends {
		copy(selfRecvs[i], selfSends[i])
	}
	if others == len(ops) {
		return e.run(name, ops)
	}
	rest := make([]P2P, 0, others)
	for _, o := range ops {
		if o.Peer != e.rank {
			rest = append(rest, o)
		}
	}
	return e.run(name, rest)
}

// run performs ops (none to self) concurrently: one goroutine per peer and
// direction, which keeps that peer's sends (or receives) in order and never
// has two Sends (or two Recvs) to one peer in flight.
func (e *Engine) run(name string, ops []P2P) error {
	switch len(ops) {
	case 0:
		return nil
	case 1:
		return e.do(name, ops[0])
	}
	// Stable sort by (peer, direction): each run of equal keys is one
	// goroutine's list, in the caller's order.
	key := func(o P2P) int {
		if o.Recv {
			return 2*o.Peer + 1
		}
		return 2 * o.Peer
	}
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b P2P) int { return cmp.Compare(key(a), key(b)) })
	var lists [][]P2P
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && key(sorted[j]) == key(sorted[i]) {
			j++
		}
		lists = append(lists, sorted[i:j])
		i = j
	}
	errs := make([]error, len(lists))
	var wg sync.WaitGroup
	wg.Add(len(lists) - 1)
	for i := 1; i < len(lists); i++ {
		go func() {
			defer wg.Done()
			errs[i] = e.doAll(name, lists[i])
		}()
	}
	errs[0] = e.doAll(name, lists[0])
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) doAll(name string, ops []P2P) error {
	for _, o := range ops {
		if err := e.do(name, o); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) do(name string, o P2P) error {
	if o.Recv {
		return e.recv(name, o.Peer, o.Buf)
	}
	return e.send(name, o.Peer, o.Buf)
}

// Barrier returns once every rank has entered it: dissemination, in which
// round k (1, 2, 4, ...) sends one byte to rank+k and waits for one from
// rank-k; ceil(log2(n)) rounds for any n.
func (e *Engine) Barrier() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shared() {
		e.sig = StepSig("Barrier", 0, 0, 0, 0)
		if err := e.sh.Enter(); err != nil {
			return e.stepErr("Barrier", err)
		}
		defer e.sh.Exit()
		return e.sync("Barrier")
	}
	var out, in [1]byte
	for k := 1; k < e.n; k <<= 1 {
		if err := e.sendrecv("Barrier", (e.rank+k)%e.n, out[:], mod(e.rank-k, e.n), in[:]); err != nil {
			return err
		}
	}
	return nil
}

// AlltoAll sends block p of send (count elements) to rank p, which stores
// it as block rank of its recv. All pairs exchange at once. send and recv
// may be the same buffer (send is then copied aside first).
func (e *Engine) AlltoAll(send, recv []byte, count int, dt sdk.DataType) error {
	const name = "AlltoAll"
	total, _, err := e.check(sdk.Call{Coll: sdk.AlltoAll, Count: count, DType: dt}, send, recv)
	if err != nil || count == 0 {
		return err
	}
	bytes := count * dt.Size()
	e.mu.Lock()
	defer e.mu.Unlock()
	send, recv = send[:total], recv[:total]
	if e.shared() {
		return e.alltoAllShm(name, send, recv, bytes)
	}
	if Overlap(send, recv) { // the checker allows only recv == send
		return e.alltoAllInPlace(name, recv, bytes)
	}
	ops := make([]P2P, 0, 2*(e.n-1))
	for p := 0; p < e.n; p++ {
		if p != e.rank {
			blk := func(b []byte) []byte { return b[p*bytes : (p+1)*bytes] }
			ops = append(ops, P2P{Peer: p, Buf: blk(send)}, P2P{Peer: p, Buf: blk(recv), Recv: true})
		}
	}
	r := e.rank
	copy(recv[r*bytes:(r+1)*bytes], send[r*bytes:(r+1)*bytes])
	return e.run(name, ops)
}

// alltoAllInPlace is AlltoAll where recv is send: every block is both
// what goes to its rank and where that rank's data lands, so the blocks
// swap with one peer a round (swapInPlace). Copying the whole buffer
// aside instead, allocated per call beyond maxRetained, made a 64 MiB
// AlltoAll of 4 ranks over loopback TCP several times slower
// (docs/performance.md, "No buffer-sized scratch per call").
func (e *Engine) alltoAllInPlace(name string, buf []byte, bytes int) error {
	blocks := make([][2]int, e.n)
	for q := range blocks {
		blocks[q] = [2]int{q * bytes, (q + 1) * bytes}
	}
	return e.swapInPlace(name, buf, blocks, blocks)
}

// AlltoAllv sends sendcounts[p] elements from send at element sdispls[p]
// to rank p, and receives recvcounts[p] elements from rank p into recv at
// element rdispls[p]. Counts must agree pairwise across ranks
// (sendcounts[q] on p == recvcounts[p] on q). Every pair exchanges a
// message, empty ones included, so a disagreement is reported rather than
// waited on. The receive regions must not overlap each other; send may
// overlap recv (it is copied aside first).
func (e *Engine) AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType) error {
	call := sdk.Call{Coll: sdk.AlltoAllv, DType: dt, SendCounts: sendcounts, SDispls: sdispls, RecvCounts: recvcounts, RDispls: rdispls}
	if err := e.Check(&call, send, recv); err != nil {
		return err
	}
	size := dt.Size()
	sends, recvs := regions(sendcounts, sdispls, size), regions(recvcounts, rdispls, size)
	r := e.rank
	e.mu.Lock()
	defer e.mu.Unlock()
	lo, hi := len(send), 0 // the part of send in use
	for _, s := range sends {
		if s[1] > s[0] {
			lo, hi = min(lo, s[0]), max(hi, s[1])
		}
	}
	if lo < hi && Overlap(send[lo:hi], recv) {
		if same(send, recv) && swappable(sends, recvs) {
			return e.swapInPlace("AlltoAllv", recv, sends, recvs)
		}
		tmp := e.buf(scratchA, hi-lo)
		copy(tmp, send[lo:hi])
		send, sends = tmp, shift(sends, lo)
	}
	ops := make([]P2P, 0, 2*(e.n-1))
	for p := 0; p < e.n; p++ {
		if p != r {
			ops = append(ops, P2P{Peer: p, Buf: send[sends[p][0]:sends[p][1]]},
				P2P{Peer: p, Buf: recv[recvs[p][0]:recvs[p][1]], Recv: true})
		}
	}
	copy(recv[recvs[r][0]:recvs[r][1]], send[sends[r][0]:sends[r][1]])
	return e.run("AlltoAllv", ops)
}

// swapInPlace is an in-place AlltoAll(v) of buf whose data from each
// peer lands only over the data for that same peer (sends[q] and
// recvs[q] are q's regions out and in; swappable): in round k (0..n-1)
// this rank swaps with q = k-r mod n, whose partner in that round is this
// rank, so no rank waits on one that is not waiting for it. Each swap is
// one message each way, as out of place and as a plan's grouped sends
// (ranks in place, out of place and in plans exchange alike); where q's
// regions meet, q's data lands in a scratch (one per call) and is copied
// into place once this rank's data for q went out. Other in-place
// AlltoAllv layouts copy the whole of send aside, which beyond
// maxRetained is allocated on every call: a 64 MiB AlltoAllv of 4 ranks
// over loopback was several times slower that way than by swaps, on 16
// cores and on 2 (docs/performance.md, "In-place AlltoAllv by swaps; the
// same-host targets on 16 cores").
func (e *Engine) swapInPlace(name string, buf []byte, sends, recvs [][2]int) error {
	part := func(reg [2]int) []byte { return buf[reg[0]:reg[1]] }
	r := e.rank
	copyIn(part(recvs[r]), part(sends[r])) // no other peer's data meets either
	// One scratch for every round: beyond maxRetained it is allocated on
	// every call, and its page faults are what the swaps save.
	need := 0
	for q := range e.n {
		if q != r && Overlap(part(sends[q]), part(recvs[q])) {
			need = max(need, len(part(recvs[q])))
		}
	}
	scratch := e.buf(scratchA, need)
	for k := 0; k < e.n; k++ {
		q := mod(k-r, e.n)
		if q == r {
			continue
		}
		out, in := part(sends[q]), part(recvs[q])
		if !Overlap(out, in) {
			if err := e.sendrecv(name, q, out, q, in); err != nil {
				return err
			}
			continue
		}
		tmp := scratch[:len(in)]
		if err := e.sendrecv(name, q, out, q, tmp); err != nil {
			return err
		}
		copy(in, tmp)
	}
	return nil
}

// swappable reports whether the data arriving from each peer meets no
// data going to another peer (regions in bytes; the receive regions do
// not overlap each other: checkVector).
func swappable(sends, recvs [][2]int) bool {
	order := make([]int, 0, len(recvs))
	for p, reg := range recvs {
		if reg[1] > reg[0] {
			order = append(order, p)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(recvs[a][0], recvs[b][0]) })
	for p, reg := range sends {
		if reg[1] <= reg[0] {
			continue
		}
		// The receive regions are disjoint, so sorted by start they are
		// sorted by end: the first that ends past reg's start, and those
		// after it that start before reg's end, are all that meet reg.
		i := sort.Search(len(order), func(i int) bool { return recvs[order[i]][1] > reg[0] })
		for ; i < len(order) && recvs[order[i]][0] < reg[1]; i++ {
			if order[i] != p {
				return false
			}
		}
	}
	return true
}

// checkVector is what the engine's AlltoAllv needs beyond sdk's checker:
// as many elements to itself as from itself, and receive regions that do
// not overlap (every pair's message lands in its own place).
func (e *Engine) checkVector(call *sdk.Call) error {
	const name = "AlltoAllv"
	r, size := e.rank, call.DType.Size()
	if call.SendCounts[r] != call.RecvCounts[r] {
		return argErr(name, "rank %d sends %d elements to itself but expects %d: make sendcounts[%d] and recvcounts[%d] agree",
			r, call.SendCounts[r], call.RecvCounts[r], r, r)
	}
	recvs := regions(call.RecvCounts, call.RDispls, size)
	order := make([]int, 0, e.n)
	for p := range recvs {
		if recvs[p][1] > recvs[p][0] {
			order = append(order, p)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(recvs[a][0], recvs[b][0]) })
	for i := 1; i < len(order); i++ {
		a, b := order[i-1], order[i]
		if recvs[a][1] > recvs[b][0] {
			return argErr(name, "receive regions of ranks %d and %d overlap (bytes %d..%d and %d..%d): give every rank its own part of recv",
				a, b, recvs[a][0], recvs[a][1], recvs[b][0], recvs[b][1])
		}
	}
	return nil
}

// regions is each peer's byte range of a buffer, from counts and
// displacements in elements (checked by sdk's checker).
func regions(counts, displs []int, size int) [][2]int {
	out := make([][2]int, len(counts))
	for p := range counts {
		out[p] = [2]int{displs[p] * size, (displs[p] + counts[p]) * size}
	}
	return out
}

func shift(rs [][2]int, lo int) [][2]int {
	out := make([][2]int, len(rs))
	for i, r := range rs {
		if r[1] > r[0] {
			out[i] = [2]int{r[0] - lo, r[1] - lo}
		}
	}
	return out
}
