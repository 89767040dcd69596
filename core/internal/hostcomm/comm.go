package hostcomm

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/flagcx/flagcx-go/core/internal/host"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// SplitNoColor is the color of a rank that joins no communicator in Split.
const SplitNoColor = -1

// Comm is one rank's host communicator: the host engine over hostnet
// links to every rank. A Comm runs on one or more of them (all ranks, its
// cluster, the cluster leaders); on the host placement its collectives go
// straight to the one over all ranks. Like Comm it is used by one
// goroutine at a time; Abort alone may be called from another.
type Comm struct {
	rank, nranks int
	peers        []peerInfo
	cfg          hostnet.Config
	secret       hostnet.Secret // the id's (the control plane proves it too)
	listener     *hostnet.Listener
	mesh         *hostnet.Mesh // links to every peer (mesh.Links[rank] is nil)
	engine       *host.Engine

	closeOnce  sync.Once
	aborted    chan struct{}
	closeError error
	// cur is the call now running, whose digest labels the messages and
	// shared-memory steps (digest.go); outer, when set, is the
	// heterogeneous call whose step this communicator runs (Comm.do).
	cur, outer Call
	// links is every rank's row of link codes (links.go), with a flag
	// byte ahead of each: set by Comm.start on the world communicator.
	links []byte
	// inner: a Comm's cluster or leaders' communicator, whose ranks are
	// not the ones its user knows: the Comm names the stalled peers
	// (NoteStalled) in its own numbering instead.
	inner bool
	// who names this rank in failure notices (firstfail.go): its rank in
	// the Comm, which an inner communicator's rank is not.
	who string
	// reported is the first failure this rank told its peers of
	// (notifyPeers), which its control plane also answers with: a notice
	// cannot go out on a link whose sending side is mid-frame.
	reported atomic.Pointer[string]
}

// initHost joins rank (0 <= rank < nranks) to the host communicator of id
// over the transport cfg. All ranks call it concurrently; it returns once
// every rank has joined and the links between them are up, or with an
// error naming the missing ranks when the deadline passes.
func Init(id ID, nranks, rank int, cfg hostnet.Config) (*Comm, error) {
	if nranks < 1 {
		return nil, fmt.Errorf("%w: a communicator needs at least 1 rank, got %d", sdk.ErrInvalidArgument, nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("%w: rank %d is out of range for %d ranks (use 0..%d)", sdk.ErrInvalidArgument, rank, nranks, nranks-1)
	}
	if err := hostnet.CheckAddr(id.Addr); err != nil {
		return nil, fmt.Errorf("%w: unique id: %w", sdk.ErrInvalidArgument, err)
	}

	if cfg.Rendezvous == "" {
		// Every rank reaches the rendezvous: listen where the route to it leaves.
		cfg.Rendezvous = id.Addr
	}
	sc, err := hostnet.ShmConfigFromEnv()
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: %w", sdk.ErrInvalidArgument, rank, err)
	}
	sc = sc.ForRanks(nranks)
	l, err := hostnet.Listen(cfg, id.Secret)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: %w", sdk.ErrSystemError, rank, err)
	}
	self := announce{peerInfo: peerInfo{Rank: rank, Addr: l.Addr(), Host: hostname(), Pid: os.Getpid(),
		BootID: hostnet.BootID(), PidNS: hostnet.PidNamespace(), Cores: runtime.NumCPU()}, NRanks: nranks}
	// The segment exists before the rendezvous so that its name travels in
	// the table; it is sized independently of how many ranks share the host.
	var seg *hostnet.ShmSegment
	if nranks > 1 {
		if seg, err = hostnet.CreateShmSegment(sc); err != nil {
			if errors.Is(err, hostnet.ErrShmCapacity) {
				l.Close()
				return nil, fmt.Errorf("%w: rank %d: %w", sdk.ErrSystemError, rank, err)
			}
			self.NoShm = err.Error()
		} else {
			self.Shm = seg.Name()
		}
	}
	peers, err := joinRendezvous(id, cfg, self)
	if err != nil {
		seg.Close()
		l.Close()
		hostnet.CleanStaleShm(sc) // a peer that died in its setup may have left its segment
		return nil, err
	}
	mesh, err := hostnet.Connect(hostnet.MeshConfig{Net: cfg, Shm: sc, Secret: id.Secret, Listener: l, Segment: seg, Peers: peers, Rank: rank})
	if err != nil {
		l.Close()
		hostnet.CleanStaleShm(sc)
		return nil, meshError(rank, err)
	}
	for _, w := range mesh.Warnings {
		flog.Default().Warn(w)
	}
	c := &Comm{rank: rank, nranks: nranks, peers: peers, cfg: cfg, secret: id.Secret, listener: l, mesh: mesh, aborted: make(chan struct{})}
	var hopts []host.Option
	if node := mesh.Node; node != nil && node.Size() == nranks {
		hopts = append(hopts, host.WithShared(sharedNode{node, c}), host.WithWorkers(node.Cores()))
	}
	c.engine = host.New(meshPeers{c}, append(hopts, host.WithHosts(hostsOf(peers)))...)
	c.logLinks()
	return c, nil
}

// hostsOf numbers the ranks' hosts (a rank's number is the first rank on
// its host), which makes the host engine's AllReduce hierarchical when the
// ranks span hosts.
func hostsOf(peers []peerInfo) []int {
	hostOf := make([]int, len(peers))
	for r := range peers {
		hostOf[r] = r
		for q := range r {
			if hostnet.SameHost(peers[q], peers[r]) {
				hostOf[r] = q
				break
			}
		}
	}
	return hostOf
}

// meshError classifies a failure to connect the ranks.
func meshError(rank int, err error) error {
	switch {
	case errors.Is(err, hostnet.ErrShmCapacity), errors.Is(err, hostnet.ErrShmUnavailable):
		return fmt.Errorf("%w: rank %d: %w", sdk.ErrSystemError, rank, err)
	case errors.Is(err, hostnet.ErrConfig):
		return fmt.Errorf("%w: rank %d: %w", sdk.ErrInvalidArgument, rank, err)
	}
	return fmt.Errorf("%w: %w", sdk.ErrRemoteError, err)
}

// Config is the transport the communicator was made with.
func (c *Comm) Config() hostnet.Config { return c.cfg }

// Secret is its id's secret, which the control plane proves too.
func (c *Comm) Secret() hostnet.Secret { return c.secret }

// Peers is every rank's entry of the rendezvous table.
func (c *Comm) Peers() []hostnet.Peer { return c.peers }

// Mesh is the links to every peer (Links[rank] is nil) and, with every
// rank on one host, the shared windows (Node).
func (c *Comm) Mesh() *hostnet.Mesh { return c.mesh }

// Engine is the host engine that runs its collectives.
func (c *Comm) Engine() *host.Engine { return c.engine }

// SetInner marks a communicator whose ranks are not the ones its user
// knows (a Comm's cluster, leaders' or one-sided communicator): who names
// this rank in failure notices, and the user's communicator names stalled
// peers itself.
func (c *Comm) SetInner(who string) { c.inner, c.who = true, who }

// SetLinks keeps every rank's row of link codes (LinkCodes, each row
// after a flag byte), which the user's communicator agreed on; Links
// returns them.
func (c *Comm) SetLinks(rows []byte) { c.links = rows }

// Links: see SetLinks.
func (c *Comm) Links() []byte { return c.links }

// SetOuter makes call label every message and step of this communicator
// until SetOuter(Call{}): the steps of one heterogeneous call run on
// several communicators and are all parts of that call.
func (c *Comm) SetOuter(call Call) { c.outer = call }

// Reported is the first failure this rank told its peers of
// (NotifyPeers), or "".
func (c *Comm) Reported() string {
	if w := c.reported.Load(); w != nil {
		return *w
	}
	return ""
}

// Rank is this rank, 0 <= Rank() < Count().
func (c *Comm) Rank() int { return c.rank }

// Count is the number of ranks.
func (c *Comm) Count() int { return c.nranks }

// Destroy releases the communicator after its operations completed.
func (c *Comm) Destroy() error {
	c.close()
	return nil
}

// Abort tears the communicator down at once: operations in flight on this
// rank fail, and peers waiting on this rank see an error naming it.
func (c *Comm) Abort() error {
	c.Shut()
	c.close()
	return nil
}

// Shut is Abort's first half, which never waits for a use of the shared
// windows (hostnet.Mesh.Shut): every wait on the host network, here and
// on the peers, fails now.
func (c *Comm) Shut() {
	c.closeOnce.Do(func() { close(c.aborted) })
	_ = c.mesh.Shut()
}

func (c *Comm) close() {
	c.listener.Close()
	c.mesh.Close()
}

func (c *Comm) isAborted() bool {
	select {
	case <-c.aborted:
		return true
	default:
		return false
	}
}

// Split makes a host communicator of the ranks that pass the same color,
// ordered by key then by rank. A rank passing SplitNoColor gets nil. Every
// rank of c must call it.
func (c *Comm) Split(color, key int) (*Comm, error) {
	sp, err := c.SplitID(color, key)
	if err != nil || sp == nil {
		return nil, err
	}
	return Init(sp.ID, sp.NRanks, sp.Rank, c.cfg)
}

// Place is this rank's place in a communicator that Split makes: its
// id, size and this rank's rank there.
type Place struct {
	ID           ID
	NRanks, Rank int
}

// SplitID agrees on the groups of a Split and hands each group's new
// unique id to its members: nil for a rank passing SplitNoColor.
func (c *Comm) SplitID(color, key int) (*Place, error) {
	if color < 0 && color != SplitNoColor {
		return nil, fmt.Errorf("%w: split color %d is negative (use a color >= 0, or SplitNoColor)", sdk.ErrInvalidArgument, color)
	}
	const rec = 16
	mine := make([]byte, rec)
	putInt64(mine[0:], int64(color))
	putInt64(mine[8:], int64(key))
	all := make([]byte, rec*c.nranks)
	if err := c.Run(&sdk.Call{Coll: sdk.AllGather, Count: rec, DType: sdk.Uint8}, mine, all); err != nil {
		return nil, fmt.Errorf("split: exchanging colors: %w", err)
	}
	if color == SplitNoColor {
		return nil, nil
	}
	type member struct{ rank, key int }
	var group []member
	for r := 0; r < c.nranks; r++ {
		if int(getInt64(all[r*rec:])) == color {
			group = append(group, member{r, int(getInt64(all[r*rec+8:]))})
		}
	}
	sort.SliceStable(group, func(i, j int) bool { return group[i].key < group[j].key })
	newRank := 0
	for i, m := range group {
		if m.rank == c.rank {
			newRank = i
		}
	}
	// The first member hosts the new communicator's rendezvous and hands its
	// id to the others over the parent's links.
	leader := group[0].rank
	var idBytes [IDBytes]byte
	if c.rank == leader {
		id, err := NewID("", c.cfg, nil)
		if err != nil {
			return nil, fmt.Errorf("split: %w", err)
		}
		idBytes = id.Bytes()
		ops := make([]host.P2P, 0, len(group)-1)
		for _, m := range group[1:] {
			ops = append(ops, host.P2P{Peer: m.rank, Buf: idBytes[:]})
		}
		if err := c.engine.Group(ops); err != nil {
			return nil, c.OpError("Split", err)
		}
	} else if err := c.engine.Group([]host.P2P{{Peer: leader, Buf: idBytes[:], Recv: true}}); err != nil {
		return nil, c.OpError("Split", err)
	}
	id, err := IDFromBytes(idBytes[:])
	if err != nil {
		return nil, fmt.Errorf("split: %w", err)
	}
	return &Place{ID: id, NRanks: len(group), Rank: newRank}, nil
}

func putInt64(b []byte, v int64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func getInt64(b []byte) int64 {
	var v int64
	for i := 0; i < 8; i++ {
		v |= int64(b[i]) << (8 * i)
	}
	return v
}

// OpError puts the collective's name on an error and, after an abort,
// says so rather than reporting closed sockets. It names the peers of
// this host that are gone or stopped: the peer the error blames may only
// have waited for, or given up on, one of them (see NoteStalled).
func (c *Comm) OpError(op string, err error) error {
	if err == nil {
		return nil
	}
	if c.isAborted() {
		return fmt.Errorf("%w: %s on rank %d: the communicator was aborted", sdk.ErrInvalidUsage, op, c.rank)
	}
	err = fmt.Errorf("%s on rank %d: %w", op, c.rank, err)
	c.NotifyPeers(err)
	if c.inner {
		return err
	}
	return NoteStalled(err, c.peers, c.rank)
}

// MemAlloc allocates n zeroed bytes of host memory that every rank of the
// communicator maps (a shared-memory segment per allocation, unlinked once
// all ranks mapped it), like NCCL's ncclMemAlloc + ncclCommRegister or
// MPI_Alloc_mem. An AllReduce whose send and recv buffers lie in such
// memory on every rank runs zero-copy: each rank reduces its slice
// straight from the peers' send buffers into every rank's recv buffer.
// It is collective: every rank calls it with the same n, in the same
// order relative to the other calls. It fails with sdk.ErrNotSupported
// where the ranks do not all share one host's memory (CanMemAlloc).
func (c *Comm) MemAlloc(n int) ([]byte, error) {
	c.cur = Call{} // untagged, on every rank alike
	b, err := c.engine.MemAlloc(n)
	return b, c.OpError("MemAlloc", err)
}

// MemFree releases memory from MemAlloc on this rank; every rank frees the
// same allocation, after the calls that use it. The memory stays mapped
// until then, even after Destroy.
func (c *Comm) MemFree(b []byte) error {
	c.cur = Call{}
	return c.OpError("MemFree", c.engine.MemFree(b))
}

// CanMemAlloc says whether MemAlloc works on this communicator (every rank
// on one host, with shared memory).
func (c *Comm) CanMemAlloc() bool { return c.engine.CanMemAlloc() }

// Run runs one collective (any but SendRecv) on the host engine, which
// checks it with sdk's one checker; the call's digest labels its messages
// (begin), and its errors name it (opError).
func (c *Comm) Run(call *sdk.Call, send, recv []byte) error {
	c.Begin(call.Coll, call.Count, call.DType, call.Op, call.Root)
	return c.OpError(call.Coll.Title(), c.engine.Run(call, send, recv))
}

// SendRecv runs ops, a group's sends and receives (checked by the
// caller), together on the host engine (host.Engine.Group), so that any
// pattern of them completes without deadlock; name is the call errors
// name.
func (c *Comm) SendRecv(name string, ops []host.P2P) error {
	c.Begin(sdk.SendRecv, 0, 0, 0, 0)
	return c.OpError(name, c.engine.Group(ops))
}

// meshPeers gives the host engine this communicator's links, with errors
// that name the peer and what was being waited for.
type meshPeers struct{ c *Comm }

func (m meshPeers) Rank() int { return m.c.rank }
func (m meshPeers) Size() int { return m.c.nranks }

func (m meshPeers) Send(peer int, buf []byte) error {
	if err := hostnet.SendTagged(m.c.mesh.Links[peer], buf, uint32(m.c.cur.digest)); err != nil {
		return m.c.LinkError(err, fmt.Sprintf("sending %d bytes to rank %d", len(buf), peer), peer)
	}
	return nil
}

// SendBuffered: a TCP socket's kernel buffers take a message of up to
// hostnet.BufferedSend bytes whatever the peer does (host.Buffered).
func (m meshPeers) SendBuffered(peer, n int) bool {
	return n <= hostnet.BufferedSend && m.c.mesh.Links[peer].Transport() == "tcp"
}

// Streams, SendStream and RecvStream give the engine a TCP link's sockets
// one by one (host.Streams).
func (m meshPeers) Streams(peer int) int { return hostnet.Streams(m.c.mesh.Links[peer]) }

func (m meshPeers) SendStream(peer, i int, buf []byte) error {
	if err := hostnet.SendStream(m.c.mesh.Links[peer], i, buf, uint32(m.c.cur.digest)); err != nil {
		return m.c.LinkError(err, fmt.Sprintf("sending %d bytes to rank %d on stream %d", len(buf), peer, i), peer)
	}
	return nil
}

func (m meshPeers) RecvStream(peer, i int, buf []byte) error {
	if err := hostnet.RecvStream(m.c.mesh.Links[peer], i, buf, uint32(m.c.cur.digest)); err != nil {
		return m.c.LinkError(err, fmt.Sprintf("waiting for %d bytes from rank %d on stream %d", len(buf), peer, i), peer)
	}
	return nil
}

// Exchange moves a message each way with peer on the calling goroutine
// where the link can (host.Duplex, hostnet.Exchange).
func (m meshPeers) Exchange(peer int, out, in []byte, progress func(got, sent int)) (bool, error) {
	ok, err := hostnet.Exchange(m.c.mesh.Links[peer], out, in, uint32(m.c.cur.digest), progress)
	if err != nil {
		return true, m.c.LinkError(err, fmt.Sprintf("exchanging %d bytes with rank %d", len(out), peer), peer)
	}
	return ok, nil
}

// Lean: the link to peer joins hosts of few cores per rank (host.Duplex).
func (m meshPeers) Lean(peer int) bool { return hostnet.Lean(m.c.mesh.Links[peer]) }

func (m meshPeers) Recv(peer int, buf []byte) error {
	if err := hostnet.RecvTagged(m.c.mesh.Links[peer], buf, uint32(m.c.cur.digest)); err != nil {
		return m.c.LinkError(err, fmt.Sprintf("waiting for %d bytes from rank %d", len(buf), peer), peer)
	}
	return nil
}

// sharedNode gives the host engine this host's shared memory, with errors
// classified as the links' are. The engine's step label keeps its low 32
// bits; the call's digest takes the high ones, so that the same digest
// guards the steps as guards the TCP frames, with the same error.
type sharedNode struct {
	*hostnet.ShmNode
	c *Comm
}

func (s sharedNode) Enter() error { return s.c.StepError(s.ShmNode.Enter(), -1) }
func (s sharedNode) Post(sig uint64) error {
	return s.c.StepError(s.ShmNode.Post(uint64(s.c.cur.digest)<<32|uint64(uint32(sig^sig>>32))), -1)
}

// Wait's r is a rank of the communicator: the engine has shared memory
// only where the host's ranks are all of them (initHost).
func (s sharedNode) Wait(r int) error { return s.c.StepError(s.ShmNode.Wait(r), r) }

// StepError classifies a shared-memory step's error; peer is the rank
// waited for (-1: none).
func (c *Comm) StepError(err error, peer int) error {
	return c.StepErrorIn(c.running(), err, peer)
}

// StepErrorIn is stepError for a step of call cur (mismatchIn).
func (c *Comm) StepErrorIn(cur Call, err error, peer int) error {
	var me *hostnet.MismatchError
	if errors.As(err, &me) {
		// The high words are the calls' digests (sharedNode.Post).
		if merr, ok := c.mismatchIn(cur, &hostnet.MismatchError{Got: me.Got >> 32, Want: me.Want >> 32}, peer); ok {
			return merr
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hostnet.ErrMismatch):
		return fmt.Errorf("%w: %w", sdk.ErrInvalidUsage, err)
	case errors.Is(err, hostnet.ErrTimeout), errors.Is(err, hostnet.ErrClosed):
		return fmt.Errorf("%w: %w", sdk.ErrRemoteError, err)
	}
	return fmt.Errorf("%w: %w", sdk.ErrSystemError, err)
}

// transport names how this rank reaches peer: "self", "shm" or "tcp".
func (c *Comm) Transport(peer int) string {
	if l := c.mesh.Links[peer]; l != nil {
		return l.Transport()
	}
	return "self"
}

func (c *Comm) LinkError(err error, doing string, peer int) error {
	if merr, ok := c.callMismatch(err, peer); ok {
		return fmt.Errorf("%s: %w", doing, merr)
	}
	var pf *hostnet.PeerFailure
	var le *hostnet.LengthError
	switch {
	case errors.As(err, &pf):
		return fmt.Errorf("%w: %s: %w", sdk.ErrRemoteError, doing, &FirstFailure{What: pf.What})
	case errors.As(err, &le):
		return fmt.Errorf("%w: %s: rank %d sent %d bytes: the ranks disagree on the count or data type of this operation", sdk.ErrInvalidUsage, doing, peer, le.Got)
	case errors.Is(err, hostnet.ErrTimeout):
		return fmt.Errorf("%w: %s: no progress before the deadline (is rank %d stuck or in another operation? FLAGCX_TIMEOUT sets the deadline): %w", sdk.ErrRemoteError, doing, peer, err)
	case errors.Is(err, hostnet.ErrClosed):
		return fmt.Errorf("%w: %s: rank %d closed the connection (it died, aborted or destroyed its communicator)%s", sdk.ErrRemoteError, doing, peer, c.HostOf(peer))
	}
	return fmt.Errorf("%w: %s: %w", sdk.ErrSystemError, doing, err)
}
