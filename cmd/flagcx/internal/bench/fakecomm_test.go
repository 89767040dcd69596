package bench

import (
	"fmt"
	"sync"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// fakeWorld is an in-memory communicator for testing the benchmark's
// plumbing (buffers, in-place layouts, checks, reports) without core: ranks
// are goroutines; every collective first snapshots every rank's input, then
// each rank computes its own output from the snapshots, so in-place calls
// behave as NCCL defines them.
type fakeWorld struct {
	n     int
	mu    sync.Mutex
	cond  *sync.Cond
	count int
	gen   int
	slots []fakeSlot
	p2p   [][]chan []byte // [src][dst]
	// corrupt, when set, may damage a rank's output after a collective.
	corrupt func(op string, rank int, recv []byte)
}

type fakeSlot struct {
	data               []byte
	sendcounts, sdispl []int
}

func newFakeWorld(n int) *fakeWorld {
	w := &fakeWorld{n: n, slots: make([]fakeSlot, n), p2p: make([][]chan []byte, n)}
	w.cond = sync.NewCond(&w.mu)
	for i := range w.p2p {
		w.p2p[i] = make([]chan []byte, n)
		for j := range w.p2p[i] {
			w.p2p[i][j] = make(chan []byte, 64)
		}
	}
	return w
}

func (w *fakeWorld) comm(rank int) *fakeComm { return &fakeComm{w: w, rank: rank} }

func (w *fakeWorld) barrier() {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gen
	w.count++
	if w.count == w.n {
		w.count = 0
		w.gen++
		w.cond.Broadcast()
		return
	}
	for g == w.gen {
		w.cond.Wait()
	}
}

type fakeComm struct {
	w     *fakeWorld
	rank  int
	group bool
	recvs []func()
}

func (c *fakeComm) Rank() int  { return c.rank }
func (c *fakeComm) Count() int { return c.w.n }

// exchange publishes this rank's input, lets compute write the output from
// every rank's input, and waits for all ranks.
func (c *fakeComm) exchange(op string, in []byte, sc, sd []int, recv []byte, compute func(slots []fakeSlot)) error {
	c.w.slots[c.rank] = fakeSlot{data: append([]byte(nil), in...), sendcounts: sc, sdispl: sd}
	c.w.barrier()
	compute(c.w.slots)
	if c.w.corrupt != nil {
		c.w.corrupt(op, c.rank, recv)
	}
	c.w.barrier()
	return nil
}

func reduceElem(dt sdk.DataType, op sdk.RedOp, n int, elems [][]byte, dst []byte) {
	if dt.IsFloat() {
		acc := reference.Decode(dt, elems[0])
		for _, e := range elems[1:] {
			v := reference.Decode(dt, e)
			switch op {
			case sdk.Sum, sdk.Avg:
				acc += v
			case sdk.Prod:
				acc *= v
			case sdk.Max:
				acc = max(acc, v)
			case sdk.Min:
				acc = min(acc, v)
			}
		}
		if op == sdk.Avg {
			acc /= float64(n)
		}
		reference.EncodeFloat(dt, acc, dst)
		return
	}
	acc := reference.DecodeInt(dt, elems[0])
	for _, e := range elems[1:] {
		v := reference.DecodeInt(dt, e)
		switch op {
		case sdk.Sum, sdk.Avg:
			acc += v
		case sdk.Prod:
			acc *= v
		case sdk.Max:
			acc = max(acc, v)
		case sdk.Min:
			acc = min(acc, v)
		}
	}
	if op == sdk.Avg {
		acc /= int64(n)
	}
	reference.Encode(dt, acc, dst)
}

func (c *fakeComm) reduceInto(slots []fakeSlot, from, count int, dt sdk.DataType, op sdk.RedOp, recv []byte) {
	ts := dt.Size()
	elems := make([][]byte, len(slots))
	for i := 0; i < count; i++ {
		for r := range slots {
			o := (from + i) * ts
			elems[r] = slots[r].data[o : o+ts]
		}
		reduceElem(dt, op, len(slots), elems, recv[i*ts:])
	}
}

func (c *fakeComm) AllReduce(sb, rb core.Buffer, count int, dt sdk.DataType, op sdk.RedOp, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	return c.exchange("allreduce", send[:count*dt.Size()], nil, nil, recv, func(s []fakeSlot) {
		c.reduceInto(s, 0, count, dt, op, recv)
	})
}

func (c *fakeComm) Reduce(sb, rb core.Buffer, count int, dt sdk.DataType, op sdk.RedOp, root int, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	return c.exchange("reduce", send[:count*dt.Size()], nil, nil, recv, func(s []fakeSlot) {
		if c.rank == root {
			c.reduceInto(s, 0, count, dt, op, recv)
		}
	})
}

func (c *fakeComm) Broadcast(sb, rb core.Buffer, count int, dt sdk.DataType, root int, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	return c.exchange("broadcast", send[:count*dt.Size()], nil, nil, recv, func(s []fakeSlot) {
		copy(recv, s[root].data)
	})
}

func (c *fakeComm) AllGather(sb, rb core.Buffer, count int, dt sdk.DataType, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	ts := dt.Size()
	return c.exchange("allgather", send[:count*ts], nil, nil, recv, func(s []fakeSlot) {
		for p := range s {
			copy(recv[p*count*ts:], s[p].data)
		}
	})
}

func (c *fakeComm) ReduceScatter(sb, rb core.Buffer, count int, dt sdk.DataType, op sdk.RedOp, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	return c.exchange("reducescatter", send[:c.w.n*count*dt.Size()], nil, nil, recv, func(s []fakeSlot) {
		c.reduceInto(s, c.rank*count, count, dt, op, recv)
	})
}

func (c *fakeComm) AlltoAll(sb, rb core.Buffer, count int, dt sdk.DataType, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	ts := dt.Size()
	return c.exchange("alltoall", send[:c.w.n*count*ts], nil, nil, recv, func(s []fakeSlot) {
		for p := range s {
			copy(recv[p*count*ts:(p+1)*count*ts], s[p].data[c.rank*count*ts:])
		}
	})
}

func (c *fakeComm) AlltoAllv(sb core.Buffer, sendcounts, sdispls []int, rb core.Buffer, recvcounts, rdispls []int, dt sdk.DataType, _ core.Stream) error {
	send := sb.Host()
	recv := rb.Host()
	ts := dt.Size()
	return c.exchange("alltoallv", send, sendcounts, sdispls, recv, func(s []fakeSlot) {
		for p := range s {
			if s[p].sendcounts[c.rank] != recvcounts[p] {
				panic(fmt.Sprintf("alltoallv: rank %d sends %d to %d, which expects %d", p, s[p].sendcounts[c.rank], c.rank, recvcounts[p]))
			}
			from := s[p].sdispl[c.rank] * ts
			copy(recv[rdispls[p]*ts:(rdispls[p]+recvcounts[p])*ts], s[p].data[from:])
		}
	})
}

func (c *fakeComm) Gather(sb, rb core.Buffer, count int, dt sdk.DataType, root int, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	ts := dt.Size()
	return c.exchange("gather", send[:count*ts], nil, nil, recv, func(s []fakeSlot) {
		if c.rank == root {
			for p := range s {
				copy(recv[p*count*ts:], s[p].data)
			}
		}
	})
}

func (c *fakeComm) Scatter(sb, rb core.Buffer, count int, dt sdk.DataType, root int, _ core.Stream) error {
	send, recv := sb.Host(), rb.Host()
	ts := dt.Size()
	var in []byte
	if c.rank == root {
		in = send[:c.w.n*count*ts]
	}
	return c.exchange("scatter", in, nil, nil, recv, func(s []fakeSlot) {
		copy(recv[:count*ts], s[root].data[c.rank*count*ts:])
	})
}

func (c *fakeComm) Send(bb core.Buffer, count int, dt sdk.DataType, peer int, _ core.Stream) error {
	buf := bb.Host()
	c.w.p2p[c.rank][peer] <- append([]byte(nil), buf[:count*dt.Size()]...)
	return nil
}

func (c *fakeComm) Recv(bb core.Buffer, count int, dt sdk.DataType, peer int, _ core.Stream) error {
	buf := bb.Host()
	do := func() {
		b := <-c.w.p2p[peer][c.rank]
		copy(buf[:count*dt.Size()], b)
		if c.w.corrupt != nil {
			c.w.corrupt("recv", c.rank, buf[:count*dt.Size()])
		}
	}
	if c.group {
		c.recvs = append(c.recvs, do)
		return nil
	}
	do()
	return nil
}

func (c *fakeComm) GroupStart() { c.group = true }

func (c *fakeComm) GroupEnd() error {
	for _, r := range c.recvs {
		r()
	}
	c.recvs, c.group = nil, false
	return nil
}

// HostAllGather is bench.Comm's exchange (a barrier when send is empty).
func (c *fakeComm) HostAllGather(send, recv []byte) error {
	if len(send) == 0 {
		c.w.barrier()
		return nil
	}
	return c.AllGather(core.HostBuffer(send), core.HostBuffer(recv), len(send), sdk.Uint8, 0)
}
