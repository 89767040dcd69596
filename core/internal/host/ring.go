package host

import (
	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// AllGather leaves in every rank's recv the concatenation, in rank order,
// of all ranks' send (sendcount elements each). In place: send is
// recv[rank*sendcount*size:].
func (e *Engine) AllGather(send, recv []byte, sendcount int, dt sdk.DataType) error {
	const name = "AllGather"
	bytes, total, err := e.check(sdk.Call{Coll: sdk.AllGather, Count: sendcount, DType: dt}, send, recv)
	if err != nil || sendcount == 0 {
		return err
	}
	r := e.rank
	e.mu.Lock()
	defer e.mu.Unlock()
	send, recv = send[:bytes], recv[:total]
	own := recv[r*bytes : (r+1)*bytes]
	copyIn(own, send)
	if e.n == 1 {
		return nil
	}
	if e.shared() {
		return e.allGatherShm(name, send, recv)
	}
	if total <= e.smallLimit {
		// Direct: one round, every rank sends its block to all others.
		ops := make([]P2P, 0, 2*(e.n-1))
		for p := 0; p < e.n; p++ {
			if p != r {
				ops = append(ops, P2P{Peer: p, Buf: send}, P2P{Peer: p, Buf: recv[p*bytes : (p+1)*bytes], Recv: true})
			}
		}
		return e.run(name, ops)
	}
	return e.allGatherRing(name, send, recv, sendcount, dt)
}

// allGatherRing: in step s (0..n-2) rank r sends block r-s to r+1 and
// receives block r-s-1 from r-1, straight into recv, in C chunks each, a
// chunk being forwarded as soon as it has arrived.
func (e *Engine) allGatherRing(name string, send, recv []byte, count int, dt sdk.DataType) error {
	n, r, size := e.n, e.rank, dt.Size()
	bytes := count * size
	C := e.nchunks(count, size)
	span := func(c int) (lo, hi int) {
		s, k := split(count, C, c)
		return s * size, (s + k) * size
	}
	return e.runPipe(&pipe{
		name:  name,
		total: (n - 1) * C,
		to:    (r + 1) % n,
		from:  mod(r-1, n),
		sendMsg: func(j int) ([]byte, int) {
			s, c := j/C, j%C
			lo, hi := span(c)
			if s == 0 {
				return send[lo:hi], -1
			}
			b := mod(r-s, n) * bytes
			return recv[b+lo : b+hi], j - C
		},
		recvMsg: func(j int) ([]byte, int, int) {
			s, c := j/C, j%C
			lo, hi := span(c)
			b := mod(r-s-1, n) * bytes
			return recv[b+lo : b+hi], -1, -1
		},
	})
}

// ReduceScatter leaves in rank r's recv block r (recvcount elements) of the
// elementwise reduction of all ranks' send (n*recvcount elements). In
// place: recv is send[rank*recvcount*size:].
func (e *Engine) ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error {
	const name = "ReduceScatter"
	total, bytes, err := e.check(sdk.Call{Coll: sdk.ReduceScatter, Count: recvcount, DType: dt, Op: op}, send, recv)
	if err != nil || recvcount == 0 {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	send, recv = send[:total], recv[:bytes]
	block := func(p int) []byte { return send[p*bytes : (p+1)*bytes] }
	switch {
	case e.n == 1:
		copyIn(recv, send)
		return nil
	case e.shared():
		return e.reduceScatterShm(name, send, recv, recvcount, dt, op)
	case total <= e.smallLimit:
		return e.reduceScatterDirect(name, send, recv, bytes, dt, op, block)
	default:
		return e.reduceScatterRing(name, send, recv, recvcount, dt, op)
	}
}

// reduceScatterDirect: one round in which every rank sends block p to rank
// p and receives its own block from everyone, then reduces them in rank
// order after its own.
func (e *Engine) reduceScatterDirect(name string, send, recv []byte, bytes int, dt sdk.DataType, op sdk.RedOp, block func(int) []byte) error {
	n, r := e.n, e.rank
	tmp := e.buf(scratchA, n*bytes)
	ops := make([]P2P, 0, 2*(n-1))
	for p := 0; p < n; p++ {
		if p != r {
			ops = append(ops, P2P{Peer: p, Buf: block(p)}, P2P{Peer: p, Buf: tmp[p*bytes : (p+1)*bytes], Recv: true})
		}
	}
	if err := e.run(name, ops); err != nil {
		return err
	}
	acc := block(r)
	for p := 0; p < n; p++ {
		if p != r {
			reduce.Into(recv, acc, tmp[p*bytes:(p+1)*bytes], dt, op)
			acc = recv
		}
	}
	if op == sdk.Avg {
		reduce.Scale(recv, dt, n)
	}
	return nil
}

// reduceScatterRing: in step s (0..n-2) rank r sends block r-s-1 to r+1 and
// receives block r-s-2 from r-1, in C chunks each. A received chunk lands
// in a slot, gets this rank's data reduced into it, and is forwarded from
// the slot in the next step; in the last step it is reduced into recv
// instead (block r-n = r).
//
// The chunks go in rounds of G (as NCCL's ring loops over slices): a round
// runs its G chunks through every step before the next round starts, so a
// slot is forwarded G messages after it was filled and G+2 slots serve any
// buffer (two spare so that receiving overlaps sending). Ordered step by
// step over the whole buffer, a slot would wait C messages, about a block
// of slots would be needed, and beyond maxRetained they were allocated on
// every call: their page faults made a 64 MiB ReduceScatter of 4 ranks
// over loopback TCP several times slower (docs/performance.md, "No
// buffer-sized scratch per call").
func (e *Engine) reduceScatterRing(name string, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	n, r, size := e.n, e.rank, dt.Size()
	bytes := count * size
	C := e.nchunks(count, size)
	G := min(C, pipeSlots)
	// msg is message j's step s and chunk c, and g, the chunks of its
	// round (the last round may have fewer than G).
	msg := func(j int) (s, c, g int) {
		round := j / (G * (n - 1))
		rel := j - round*G*(n-1)
		g = min(G, C-round*G)
		return rel / g, round*G + rel%g, g
	}
	K := G + 2
	slotBytes := ((count + C - 1) / C) * size
	slots := e.buf(scratchA, K*slotBytes)
	slot := func(j, length int) []byte { return slots[(j%K)*slotBytes:][:length] }
	span := func(c int) (lo, hi int) {
		s, k := split(count, C, c)
		return s * size, (s + k) * size
	}
	return e.runPipe(&pipe{
		name:  name,
		total: (n - 1) * C,
		to:    (r + 1) % n,
		from:  mod(r-1, n),
		sendMsg: func(j int) ([]byte, int) {
			s, c, g := msg(j)
			lo, hi := span(c)
			if s == 0 {
				b := mod(r-1, n) * bytes
				return send[b+lo : b+hi], -1
			}
			return slot(j-g, hi-lo), j - g
		},
		recvMsg: func(j int) ([]byte, int, int) {
			_, c, _ := msg(j)
			lo, hi := span(c)
			prev := j - K // the slot's previous message
			if prev < 0 {
				return slot(j, hi-lo), -1, -1
			}
			if ps, _, pg := msg(prev); ps < n-2 {
				return slot(j, hi-lo), prev, prev + pg // forwarded as prev+pg
			}
			return slot(j, hi-lo), prev, -1
		},
		process: func(j int, data []byte) {
			s, c, _ := msg(j)
			lo, hi := span(c)
			b := mod(r-s-2, n) * bytes
			if s < n-2 {
				e.reduceInto(data, send[b+lo:b+hi], data, dt, op)
				return
			}
			e.reduceInto(recv[lo:hi], send[b+lo:b+hi], data, dt, op)
			if op == sdk.Avg {
				e.scale(recv[lo:hi], dt)
			}
		},
	})
}
