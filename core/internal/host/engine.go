package host

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/sdk"
)

// Engine runs the host collectives of one rank over its Peers.
//
// Every rank of a communicator makes its own Engine (with the same options)
// and calls the same collectives in the same order with matching counts, as
// with NCCL. The Engine serialises its own calls (a mutex), so calls from
// several goroutines are safe, but their order must still agree across
// ranks. While a collective runs, the Engine is the only user of its Peers.
//
// Algorithms (n ranks, B bytes per rank; the switch point is the small
// limit, WithSmallLimit, default 64 KiB):
//
//	AllReduce      B <= limit: recursive doubling, ranks beyond the largest
//	               power of two folded into a partner first (log2(n)+2
//	               rounds at most); 2 ranks up to 1 MiB: a pipelined
//	               exchange; else a ring reduce-scatter + allgather,
//	               pipelined in chunks (WithChunk, default 1 MiB). Ranks
//	               on several hosts (WithHosts): hierarchical, hier.go
//	Reduce         B <= limit: binomial tree; else a pipelined chain to root
//	Broadcast      B <= limit: binomial tree; else a pipelined chain from root
//	AllGather      n*B <= limit: direct exchange; else a pipelined ring
//	ReduceScatter  n*B <= limit: direct exchange; else a pipelined ring
//	AlltoAll(v)    all pairs concurrently
//	Gather/Scatter root talks to every rank concurrently
//	Barrier        dissemination, 1-byte messages, ceil(log2(n)) rounds
//
// Pipelined algorithms run three goroutines per rank: one sends to the next
// rank, one receives from the previous rank into a small ring of chunk
// buffers, and the calling one reduces, spreading large chunks over
// WithWorkers goroutines, so that while chunk k is reduced chunk k+1 is
// received and chunk k-1 is sent.
type Engine struct {
	p          Peers
	rank, n    int
	workers    int
	smallLimit int
	chunk      int
	sh         Shared       // nil: message passing only
	shHalf     int          // bytes of half a shared window (computed once)
	sig        uint64       // label of the current call's shared-memory steps
	regions    []*memRegion // MemAlloc's allocations, by number (nil: freed)
	zcScratch  []byte       // scratch blocks of the zero-copy reductions
	hostOf     []int        // WithHosts
	hierarchy  *hierarchy   // hier(), once hierDone
	hierDone   bool

	mu      sync.Mutex
	scratch [numScratch][]byte
}

// Defaults of the options.
const (
	DefaultSmallLimit = 64 << 10
	DefaultChunk      = 1 << 20
)

// Scratch buffers are kept between calls up to this size; larger ones are
// allocated per call and left to the garbage collector.
const maxRetained = 16 << 20

// pipeSlots is the number of chunk buffers a pipelined receiver cycles
// through: enough to receive ahead while the previous chunks are reduced.
const pipeSlots = 4

// minPipeChunk is the smallest chunk that a block is split into only for
// the sake of overlap (explicitly small WithChunk values still apply).
const minPipeChunk = 32 << 10

const (
	scratchA = iota
	scratchB
	numScratch
)

// Option configures an Engine. All ranks must use the same options: they
// decide algorithms and message sizes.
type Option func(*Engine)

// WithWorkers sets how many goroutines share a large reduction (default
// runtime.GOMAXPROCS(0); within 1..reduce.MaxWorkers).
func WithWorkers(n int) Option {
	return func(e *Engine) { e.workers = reduce.Workers(n) }
}

// WithSmallLimit sets the message size in bytes up to which latency-bound
// algorithms (recursive doubling, trees, direct exchange) are used instead
// of pipelined rings and chains (default 64 KiB; 0 always pipelines,
// negative values mean 0).
func WithSmallLimit(bytes int) Option {
	return func(e *Engine) { e.smallLimit = max(bytes, 0) }
}

// WithChunk sets the pipeline chunk in bytes (default 1 MiB; rounded to
// whole elements, at least one).
func WithChunk(bytes int) Option {
	return func(e *Engine) {
		if bytes < 1 {
			bytes = DefaultChunk
		}
		e.chunk = bytes
	}
}

// New makes the Engine of rank p.Rank() of p.Size().
func New(p Peers, opts ...Option) *Engine {
	e := &Engine{
		p:          p,
		rank:       p.Rank(),
		n:          p.Size(),
		workers:    reduce.Workers(runtime.GOMAXPROCS(0)),
		smallLimit: DefaultSmallLimit,
		chunk:      DefaultChunk,
	}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Rank is this engine's rank; Size the number of ranks.
func (e *Engine) Rank() int { return e.rank }
func (e *Engine) Size() int { return e.n }

// buf returns scratch buffer i of n bytes (contents undefined).
func (e *Engine) buf(i, n int) []byte {
	if cap(e.scratch[i]) >= n {
		return e.scratch[i][:n]
	}
	b := make([]byte, n)
	if n <= maxRetained {
		e.scratch[i] = b
	}
	return b
}

// reduceInto is dst = a op b, over several goroutines when large.
func (e *Engine) reduceInto(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp) {
	reduce.IntoParallel(dst, a, b, dt, op, e.workers)
}

func (e *Engine) scale(buf []byte, dt sdk.DataType) {
	reduce.ScaleParallel(buf, dt, e.n, e.workers)
}

// split divides total elements into parts nearly equal pieces (the first
// total%parts one element longer) and returns piece i as [start, start+n).
func split(total, parts, i int) (start, n int) {
	base, rem := total/parts, total%parts
	start = i*base + min(i, rem)
	n = base
	if i < rem {
		n++
	}
	return start, n
}

// nchunks is how many pipeline chunks a block of blockElems elements of
// size bytes is cut into: by the chunk option, and at least four (of at
// least minPipeChunk bytes) so that receiving, reducing and sending
// overlap even when the block is not much larger than a chunk. Every rank
// computes the same value from the same count.
func (e *Engine) nchunks(blockElems, size int) int {
	if blockElems <= 0 {
		return 1
	}
	chunkElems := max(e.chunk/size, 1)
	c := (blockElems + chunkElems - 1) / chunkElems
	if c < 4 {
		c = max(c, min(4, blockElems*size/minPipeChunk))
	}
	return max(min(c, blockElems), 1)
}

func mod(a, n int) int { return ((a % n) + n) % n }

// sendrecv sends sbuf to `to` while receiving rbuf from `from`.
func (e *Engine) sendrecv(name string, to int, sbuf []byte, from int, rbuf []byte) error {
	if b, ok := e.p.(Buffered); ok && b.SendBuffered(to, len(sbuf)) {
		if err := e.send(name, to, sbuf); err != nil {
			return err
		}
		return e.recv(name, from, rbuf)
	}
	// The send goes out on this goroutine, at once; the receive waits on
	// another. The other way round, the new goroutine would sit in this
	// thread's run queue behind a receive that polls its socket
	// (hostnet's Conn.readPolled) for the peer's message, while the peer
	// waits the same way for this rank's.
	errc := make(chan error, 1)
	go func() { errc <- e.recv(name, from, rbuf) }()
	serr := e.send(name, to, sbuf)
	rerr := <-errc
	if rerr != nil {
		return rerr
	}
	return serr
}

func (e *Engine) send(name string, peer int, buf []byte) error {
	if err := e.p.Send(peer, buf); err != nil {
		return fmt.Errorf("host %s: rank %d sending %d bytes to rank %d: %w", name, e.rank, len(buf), peer, err)
	}
	return nil
}

func (e *Engine) recv(name string, peer int, buf []byte) error {
	if err := e.p.Recv(peer, buf); err != nil {
		return fmt.Errorf("host %s: rank %d receiving %d bytes from rank %d: %w", name, e.rank, len(buf), peer, err)
	}
	return nil
}

// copyIn copies src to dst unless they are the same memory (in place).
func copyIn(dst, src []byte) {
	if !same(dst, src) {
		copy(dst, src)
	}
}
