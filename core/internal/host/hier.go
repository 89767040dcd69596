package host

import (
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
)

// WithHosts tells the engine which ranks share a host: hostOf[r] is rank
// r's host (any number; equal numbers, one host). When the ranks span
// several hosts with the same number (at least two) on each, AllReduce is
// hierarchical (allReduceHier); otherwise, or when len(hostOf) is not the
// rank count, the option changes nothing. Every rank must pass the same
// table.
func WithHosts(hostOf []int) Option {
	return func(e *Engine) { e.hostOf = append([]int(nil), hostOf...) }
}

// hierarchy is the two levels of a communicator that spans hosts: the
// ranks of this rank's host, and the ranks of the same local index on
// every host, each an Engine over the communicator's own links.
type hierarchy struct {
	intra, inter *Engine
	local        int // this rank's index on its host (rank of intra)
	perHost      int
}

// hier is the engine's hierarchy, built on first use; nil when the ranks
// do not span several hosts of equal size (at least two ranks each).
func (e *Engine) hier() *hierarchy {
	if e.hierDone {
		return e.hierarchy
	}
	e.hierDone = true
	if len(e.hostOf) != e.n {
		return nil
	}
	var hosts [][]int
	index := map[int]int{}
	for r, h := range e.hostOf {
		i, ok := index[h]
		if !ok {
			i = len(hosts)
			index[h] = i
			hosts = append(hosts, nil)
		}
		hosts[i] = append(hosts[i], r)
	}
	L := len(hosts[0])
	for _, h := range hosts {
		if len(h) != L {
			return nil
		}
	}
	if len(hosts) < 2 || L < 2 {
		return nil
	}
	mine := hosts[index[e.hostOf[e.rank]]]
	local := 0
	for i, r := range mine {
		if r == e.rank {
			local = i
		}
	}
	across := make([]int, len(hosts))
	for i, h := range hosts {
		across[i] = h[local]
	}
	sub := func(ranks []int, me int) *Engine {
		s := New(subPeers{p: e.p, ranks: ranks, me: me}, WithWorkers(e.workers), WithSmallLimit(e.smallLimit), WithChunk(e.chunk))
		return s
	}
	e.hierarchy = &hierarchy{intra: sub(mine, local), inter: sub(across, index[e.hostOf[e.rank]]), local: local, perHost: L}
	return e.hierarchy
}

// subPeers is a subset of a communicator's ranks as a communicator of its
// own: its rank i is ranks[i].
type subPeers struct {
	p     Peers
	ranks []int
	me    int
}

func (s subPeers) Rank() int                       { return s.me }
func (s subPeers) Size() int                       { return len(s.ranks) }
func (s subPeers) Send(peer int, buf []byte) error { return s.p.Send(s.ranks[peer], buf) }
func (s subPeers) Recv(peer int, buf []byte) error { return s.p.Recv(s.ranks[peer], buf) }
func (s subPeers) SendBuffered(peer, n int) bool {
	b, ok := s.p.(Buffered)
	return ok && b.SendBuffered(s.ranks[peer], n)
}

// allReduceHier is the AllReduce of ranks on several hosts: inside a host
// over its own links (shared memory between the ranks of a host), between
// hosts every local rank drives its own share, so that no single leader's
// link carries the host's traffic. A large buffer that the ranks of a host
// divide evenly is reduce-scattered on the host, each local rank
// allreduces its block with the ranks of the same local index on the other
// hosts, and the host allgathers the blocks; otherwise the host allreduces
// and then every local rank allreduces the whole buffer with its
// counterparts (the same bits everywhere: they all hold the same input),
// one small exchange per rank across hosts. Avg sums and scales once.
func (e *Engine) allReduceHier(name string, h *hierarchy, send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	sop := op
	if op == sdk.Avg {
		sop = sdk.Sum
	}
	size := dt.Size()
	wrap := func(level string, err error) error {
		if err != nil {
			return fmt.Errorf("host %s on rank %d, %s: %w", name, e.rank, level, err)
		}
		return nil
	}
	const within, across = "within its host (ranks numbered from 0 on the host)", "across hosts (ranks numbered by host)"
	if count%h.perHost == 0 && count*size > e.smallLimit {
		blk := count / h.perHost
		// The shard is this rank's block of recv (in-place ReduceScatter
		// and AllGather): no scratch as large as the buffer per call.
		shard := recv[h.local*blk*size : (h.local+1)*blk*size]
		if err := wrap(within, h.intra.ReduceScatter(send, shard, blk, dt, sop)); err != nil {
			return err
		}
		if err := wrap(across, h.inter.AllReduce(shard, shard, blk, dt, sop)); err != nil {
			return err
		}
		if err := wrap(within, h.intra.AllGather(shard, recv, blk, dt)); err != nil {
			return err
		}
	} else {
		if err := wrap(within, h.intra.AllReduce(send, recv, count, dt, sop)); err != nil {
			return err
		}
		if err := wrap(across, h.inter.AllReduce(recv, recv, count, dt, sop)); err != nil {
			return err
		}
	}
	if op == sdk.Avg {
		e.scale(recv, dt)
	}
	return nil
}
