package host

import (
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// Broadcast copies root's send (count elements) into every rank's recv,
// root's included. send is read on root only (may be nil elsewhere); in
// place on root: send == recv.
func (e *Engine) Broadcast(send, recv []byte, count int, dt sdk.DataType, root int) error {
	const name = "Broadcast"
	_, bytes, err := e.check(sdk.Call{Coll: sdk.Broadcast, Count: count, DType: dt, Root: root}, send, recv)
	if err != nil || count == 0 {
		return err
	}
	isRoot := e.rank == root
	e.mu.Lock()
	defer e.mu.Unlock()
	recv = recv[:bytes]
	if isRoot {
		send = send[:bytes]
	}
	if e.n == 1 {
		copyIn(recv, send)
		return nil
	}
	if e.shared() {
		if isRoot {
			copyIn(recv, send)
		}
		return e.broadcastShm(name, send, recv, root)
	}
	if bytes <= e.smallLimit {
		return e.broadcastTree(name, send, recv, root)
	}
	return e.broadcastChain(name, send, recv, count, dt, root)
}

// broadcastTree is a binomial tree over ranks renumbered from root
// (v = rank-root mod n): v receives from v minus its lowest set bit, then
// sends to v+m for every power of two m below that bit, all at once.
// ceil(log2(n)) rounds.
func (e *Engine) broadcastTree(name string, send, recv []byte, root int) error {
	n := e.n
	v := mod(e.rank-root, n)
	real := func(v int) int { return (v + root) % n }
	data := recv
	top := 1
	for top < n {
		top <<= 1
	}
	if v == 0 {
		data = send
	} else {
		low := v & -v
		if err := e.recv(name, real(v-low), recv); err != nil {
			return err
		}
		top = low
	}
	var ops []P2P
	for m := top >> 1; m >= 1; m >>= 1 {
		if v+m < n {
			ops = append(ops, P2P{Peer: real(v + m), Buf: data})
		}
	}
	if v == 0 {
		copyIn(recv, send) // while nothing else touches recv
	}
	return e.run(name, ops)
}

// broadcastChain pipelines chunks along root -> root+1 -> ... -> root-1:
// every rank receives chunk c into recv and forwards it while receiving
// chunk c+1. (n-1 + C-1) chunk times; every link carries the data once.
func (e *Engine) broadcastChain(name string, send, recv []byte, count int, dt sdk.DataType, root int) error {
	n, size := e.n, dt.Size()
	v := mod(e.rank-root, n)
	C := e.nchunks(count, size)
	chunk := func(c int) []byte {
		s, k := split(count, C, c)
		return recv[s*size : (s+k)*size]
	}
	p := &pipe{name: name, total: C, to: -1, from: -1}
	if v < n-1 {
		p.to = (e.rank + 1) % n
	}
	if v == 0 {
		p.sendMsg = func(j int) ([]byte, int) {
			s, k := split(count, C, j)
			return send[s*size : (s+k)*size], -1
		}
		errc := make(chan error, 1)
		go func() { errc <- e.runPipe(p) }()
		copyIn(recv, send)
		return <-errc
	}
	p.from = mod(e.rank-1, n)
	p.recvMsg = func(j int) ([]byte, int, int) { return chunk(j), -1, -1 }
	p.sendMsg = func(j int) ([]byte, int) { return chunk(j), j }
	return e.runPipe(p)
}

// Reduce leaves the elementwise reduction of all ranks' send in root's
// recv. recv is used on root only (may be nil elsewhere); in place on root:
// send == recv. Other ranks' buffers are not modified.
func (e *Engine) Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	const name = "Reduce"
	bytes, _, err := e.check(sdk.Call{Coll: sdk.Reduce, Count: count, DType: dt, Op: op, Root: root}, send, recv)
	if err != nil || count == 0 {
		return err
	}
	isRoot := e.rank == root
	e.mu.Lock()
	defer e.mu.Unlock()
	send = send[:bytes]
	if isRoot {
		recv = recv[:bytes]
	}
	if e.n == 1 {
		copyIn(recv, send)
		return nil
	}
	if e.shared() {
		return e.reduceShm(name, send, recv, count, dt, op, root)
	}
	if bytes <= e.smallLimit {
		return e.reduceTree(name, send, recv, dt, op, root)
	}
	return e.reduceChain(name, send, recv, count, dt, op, root)
}

// reduceTree is a binomial tree toward root over ranks renumbered from
// root: in round m (1, 2, 4, ...) a rank with bit m set sends its partial
// result to v-m and leaves; the others add what v+m sends. Partial results
// live in recv on root and in scratch elsewhere (send is never written).
func (e *Engine) reduceTree(name string, send, recv []byte, dt sdk.DataType, op sdk.RedOp, root int) error {
	n := e.n
	v := mod(e.rank-root, n)
	real := func(v int) int { return (v + root) % n }
	acc := send // until the first child's data arrives
	tmp := e.buf(scratchA, len(send))
	for m := 1; m < n; m <<= 1 {
		if v&m != 0 {
			return e.send(name, real(v-m), acc)
		}
		if v+m >= n {
			continue
		}
		if err := e.recv(name, real(v+m), tmp); err != nil {
			return err
		}
		dst := recv
		if v != 0 {
			dst = e.buf(scratchB, len(send))
		}
		reduce.Into(dst, acc, tmp, dt, op)
		acc = dst
	}
	// Only root gets here.
	copyIn(recv, acc)
	if op == sdk.Avg {
		reduce.Scale(recv, dt, n)
	}
	return nil
}

// reduceChain pipelines chunks along root+n-1 -> ... -> root+1 -> root:
// the far end sends its chunks, every middle rank receives chunk c into a
// slot, reduces its own data into it and forwards it, and root reduces into
// recv. Every link carries the data once and every rank reduces it once;
// (n-1 + C-1) chunk times.
func (e *Engine) reduceChain(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	n, size := e.n, dt.Size()
	v := mod(e.rank-root, n)
	C := e.nchunks(count, size)
	span := func(c int) (lo, hi int) {
		s, k := split(count, C, c)
		return s * size, (s + k) * size
	}
	slotBytes := ((count + C - 1) / C) * size
	const K = pipeSlots
	p := &pipe{name: name, total: C, to: -1, from: -1}
	if v > 0 {
		p.to = mod(e.rank-1, n)
	}
	if v == n-1 { // the far end only sends its own data
		p.sendMsg = func(j int) ([]byte, int) {
			lo, hi := span(j)
			return send[lo:hi], -1
		}
		return e.runPipe(p)
	}
	p.from = (e.rank + 1) % n
	slots := e.buf(scratchA, K*slotBytes)
	slot := func(j, length int) []byte { return slots[(j%K)*slotBytes:][:length] }
	if v == 0 {
		p.recvMsg = func(j int) ([]byte, int, int) {
			lo, hi := span(j)
			return slot(j, hi-lo), j - K, -1
		}
		p.process = func(j int, data []byte) {
			lo, hi := span(j)
			e.reduceInto(recv[lo:hi], send[lo:hi], data, dt, op)
			if op == sdk.Avg {
				e.scale(recv[lo:hi], dt)
			}
		}
		return e.runPipe(p)
	}
	// A slot is free again once its chunk has been forwarded.
	p.recvMsg = func(j int) ([]byte, int, int) {
		lo, hi := span(j)
		return slot(j, hi-lo), j - K, j - K
	}
	p.process = func(j int, data []byte) {
		lo, hi := span(j)
		e.reduceInto(data, send[lo:hi], data, dt, op)
	}
	p.sendMsg = func(j int) ([]byte, int) {
		lo, hi := span(j)
		return slot(j, hi-lo), j
	}
	return e.runPipe(p)
}

// Gather collects every rank's send (count elements) into root's recv,
// rank by rank. recv is used on root only; in place on root: send is
// recv[root*count*size:].
func (e *Engine) Gather(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return e.rootBlocks(sdk.Call{Coll: sdk.Gather, Count: count, DType: dt, Root: root}, send, recv)
}

// Scatter sends block p of root's send (count elements each) to rank p's
// recv. send is read on root only; in place on root: recv is
// send[root*count*size:].
func (e *Engine) Scatter(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return e.rootBlocks(sdk.Call{Coll: sdk.Scatter, Count: count, DType: dt, Root: root}, send, recv)
}

// rootBlocks runs Gather and Scatter, one the other reversed: root's
// buffer of n blocks (Gather's recv, Scatter's send) exchanges block p
// with rank p's own buffer, and root copies its own block itself.
func (e *Engine) rootBlocks(call sdk.Call, send, recv []byte) error {
	name := call.Coll.Title()
	sendN, recvN, err := e.check(call, send, recv)
	if err != nil || call.Count == 0 {
		return err
	}
	gather := call.Coll == sdk.Gather
	blocks, own, bytes := recv, send[:sendN], sendN // Gather: root's recv holds the blocks
	if !gather {
		blocks, own, bytes = send, recv[:recvN], recvN
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rank != call.Root {
		if gather {
			return e.send(name, call.Root, own)
		}
		return e.recv(name, call.Root, own)
	}
	ops := make([]P2P, 0, e.n-1)
	for p := 0; p < e.n; p++ {
		if p != call.Root {
			ops = append(ops, P2P{Peer: p, Buf: blocks[p*bytes : (p+1)*bytes], Recv: gather})
		}
	}
	mine := blocks[call.Root*bytes : (call.Root+1)*bytes]
	if gather {
		copyIn(mine, own)
	} else {
		copyIn(own, mine)
	}
	return e.run(name, ops)
}
