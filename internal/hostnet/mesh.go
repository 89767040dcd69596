package hostnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Peer is what a rank announces about itself at bootstrap: enough for
// every other rank to choose a transport to it and connect.
type Peer struct {
	Rank int    `json:"rank"`
	Addr string `json:"addr"` // its listener, for TCP
	Host string `json:"host"`
	Pid  int    `json:"pid"`
	// BootID and PidNS (shm.BootID(), shm.PidNamespace()) with Host tell whether
	// two ranks can share memory and see each other's processes.
	BootID string `json:"boot_id,omitempty"`
	PidNS  string `json:"pidns,omitempty"`
	// Shm names the rank's segment (shm.CreateShmSegment); NoShm says why it
	// has none.
	Shm   string `json:"shm,omitempty"`
	NoShm string `json:"no_shm,omitempty"`
	// Cores is how many cores the rank's process may run on (0: not
	// said): with how many ranks share its host, it bounds the sockets of
	// its links (pairStreams).
	Cores int `json:"cores,omitempty"`
}

// SameHost: a and b run on one machine, under one kernel, in one pid
// namespace.
func SameHost(a, b Peer) bool {
	return a.BootID != "" && a.BootID == b.BootID && a.Host == b.Host && a.PidNS == b.PidNS
}

// MeshConfig is what Connect needs.
type MeshConfig struct {
	Net      Config
	Shm      ShmConfig
	Secret   Secret
	Listener *Listener   // this rank's, announced in Peers[Rank].Addr
	Segment  *ShmSegment // this rank's (nil without shared memory); Connect takes it over
	Peers    []Peer      // every rank, by rank
	Rank     int
}

// Mesh is one rank's links to every other rank of a communicator.
type Mesh struct {
	// Links holds the link to each rank (nil for this rank).
	Links []Link
	// Node is the shared memory of this host's ranks (nil unless at least
	// two ranks of this host share memory).
	Node *ShmNode
	// Warnings say which ranks of this host talk TCP and why.
	Warnings []string

	segs      []*ShmSegment
	shutOnce  sync.Once
	closeOnce sync.Once
}

// meshHello identifies one socket of a TCP link.
type meshHello struct {
	Rank   int `json:"rank"`
	Stream int `json:"stream"`
}

// Connect builds this rank's links to every other rank, each pair through
// the first row of the transport table that can connect it (rows.go):
// shared memory to the ranks of its host that share memory, the network
// plugin where both ends offer it, TCP (Net.Streams sockets, the higher
// rank dialing) to the others. It returns once every link is up and
// every segment of the host is mapped by all its ranks (and unlinked), or
// with an error naming the ranks it waited for after Net.Timeout without
// progress. On error nothing stays open and this rank's segment is gone.
func Connect(mc MeshConfig) (_ *Mesh, err error) {
	if err := checkRows(mc.Net); err != nil {
		mc.Segment.Close()
		return nil, err
	}
	// The table came from peers: nothing in it is used (as a file name
	// above all, removeDeadPeers) before it is checked.
	err = CheckPeers(mc.Peers)
	if err == nil && (mc.Rank < 0 || mc.Rank >= len(mc.Peers)) {
		err = fmt.Errorf("hostnet: rank %d is not in the peer table of %d ranks: %w", mc.Rank, len(mc.Peers), ErrProtocol)
	}
	if err != nil {
		mc.Segment.Close()
		return nil, err
	}
	self := mc.Peers[mc.Rank]
	m := &Mesh{Links: make([]Link, len(mc.Peers)), Warnings: noShmWarnings(mc)}
	if mc.Segment != nil {
		m.segs = []*ShmSegment{mc.Segment}
	}
	s := &setup{mc: mc, m: m, self: self, socks: make([]*tcp.TCPLink, len(mc.Peers))}
	defer func() {
		s.closeSockets()
		if err != nil {
			// Peers that mapped this rank's segment stop waiting for it.
			mc.Segment.Abandon()
			m.removeDeadPeers(mc)
			m.Close()
		}
	}()
	if err := s.connectRows(); err != nil {
		return nil, err
	}
	defer recordLinks(m.Links)
	if m.Node != nil {
		// Step 1 is the setup's: once every rank of the host published it,
		// every segment is mapped by all, and the files can go.
		err := m.Node.Enter()
		if err == nil {
			err = m.Node.Sync(0)
			m.Node.Exit()
		}
		if err != nil {
			return nil, fmt.Errorf("rank %d waiting for the ranks of its host to map shared memory: %w", mc.Rank, err)
		}
		mc.Segment.Unlink()
	}
	return m, nil
}

// noShmWarnings say which ranks of this rank's host it cannot share memory
// with, and why (their pairs go to a later row of the transport table),
// unless this rank disabled shared memory itself.
func noShmWarnings(mc MeshConfig) []string {
	self := mc.Peers[mc.Rank]
	var warns []string
	for _, p := range mc.Peers {
		if p.Rank != mc.Rank && !shareMemory(self, p) && SameHost(self, p) && !mc.Shm.Disable {
			warns = append(warns, fmt.Sprintf("rank %d talks TCP to rank %d of its own host: %s (set %s=1 to choose TCP quietly)",
				mc.Rank, p.Rank, noShmReason(self, p), shm.EnvShmDisable))
		}
	}
	return warns
}

func noShmReason(self, p Peer) string {
	switch {
	case self.Shm == "":
		return "this rank has no shared memory (" + self.NoShm + ")"
	case p.Shm == "":
		return fmt.Sprintf("rank %d has no shared memory (%s)", p.Rank, p.NoShm)
	}
	return "shared memory is not possible between them"
}

// removeDeadPeers deletes the segments of this host's ranks whose process
// died before unlinking them: after a failed setup nobody else will. A
// peer still exiting counts as dead: the setup may have failed because its
// sockets closed, which happens before it is a zombie.
func (m *Mesh) removeDeadPeers(mc MeshConfig) {
	self := mc.Peers[mc.Rank]
	for _, p := range mc.Peers {
		if p.Rank != mc.Rank && p.Shm != "" && SameHost(self, p) && shm.ProcessEnded(p.Pid) {
			shm.RemoveShmFile(mc.Shm.Path(), p.Shm)
		}
	}
}

// leanCores is the most cores per rank a host may have for its links to
// be lean (tcp.TCPLink.SetLean): the two-rank AllReduce then reduces on
// the thread that moves both directions (host.allReduceHalves). On 2
// emulated hosts of 2 cores, one rank each, that moved 64 MiB faster; on a
// 16-core host over one loopback socket a thread per direction was faster
// (docs/performance.md, "Two ranks across hosts: the ring as halves on one
// thread").
const leanCores = 2

// linkIsLean reports whether the link between ranks a and b is lean: the
// more crowded of their hosts has at most leanCores cores per rank. Both
// ends decide from the same table.
func linkIsLean(peers []Peer, onHost map[string]int, a, b int) bool {
	for _, r := range []int{a, b} {
		if c := peers[r].Cores; c > 0 && c <= leanCores*onHost[hostKey(peers[r])] {
			return true
		}
	}
	return false
}

// pollsLink reports whether the link between ranks a and b polls: where
// both their hosts leave a core free. A polling rank holds a core while it
// waits, which ranks outnumbering the cores would take from each other
// (and from the kernel moving their bytes). Both ends decide from the same
// table (each rank's Cores), so a link polls at both ends or at neither:
// an exchange on one thread (tcp.TCPLink.Exchange, which the two-rank
// AllReduce takes where it can) needs its peer to take it too.
func pollsLink(peers []Peer, onHost map[string]int, a, b int) bool {
	for _, r := range []int{a, b} {
		cores := peers[r].Cores
		if cores <= 0 { // not said (a table made by hand): this host's
			cores = runtime.NumCPU()
		}
		if onHost[hostKey(peers[r])] >= cores {
			return false
		}
	}
	return true
}

// pairStreams is the number of sockets of the TCP link between ranks a
// and b: Net.Streams, but where the configuration chose no count
// (Net.AutoStreams), at most half the cores per rank of the more crowded
// host of the two, and at least one. Sockets beyond the cores only add
// threads that the kernel's copies and the reductions share the cores with:
// on 2 emulated hosts of 2 cores, one rank each, a 128 MiB AllReduce ran
// faster over 1 socket than over 4 (docs/performance.md, "Across 2
// emulated hosts: flagcx, the link, Gloo and OpenMPI"). Both ranks compute
// the same count from the same table.
func pairStreams(cfg Config, peers []Peer, onHost map[string]int, a, b int) int {
	streams := max(cfg.Streams, 1)
	if !cfg.AutoStreams {
		return streams
	}
	for _, r := range []int{a, b} {
		if c := peers[r].Cores; c > 0 {
			streams = min(streams, max(1, c/(2*max(onHost[hostKey(peers[r])], 1))))
		}
	}
	return streams
}

// hostKey names the host of a peer (SameHost's fields).
func hostKey(p Peer) string { return p.BootID + "\x00" + p.Host + "\x00" + p.PidNS }

// ranksOnHost counts the ranks of each host of the table.
func ranksOnHost(peers []Peer) map[string]int {
	on := make(map[string]int)
	for _, p := range peers {
		on[hostKey(p)]++
	}
	return on
}

// dialSockets gives TCP sockets to every pair whose row (at, by peer) has
// them, all at once: it dials the lower ranks and accepts the higher ones,
// pairStreams sockets per pair.
func (s *setup) dialSockets(at []int) error {
	mc := s.mc
	n, rank := len(mc.Peers), mc.Rank
	onHost := ranksOnHost(mc.Peers)
	conns := make([][]*tcp.Conn, n)
	expected := 0
	for p := range mc.Peers {
		if p != rank && rows[at[p]].sockets {
			conns[p] = make([]*tcp.Conn, pairStreams(mc.Net, mc.Peers, onHost, rank, p))
			if p > rank {
				expected += len(conns[p])
			}
		}
	}
	var mu sync.Mutex
	var g errgroup.Group
	if expected > 0 {
		g.Go(func() error {
			for got := 0; got < expected; {
				c, hello, err := mc.Listener.Accept()
				if err != nil {
					return fmt.Errorf("rank %d waiting for connections from ranks %s: %w", rank, missingPeers(conns, rank+1, n, &mu), err)
				}
				// A hello that does not check out closes its socket and
				// the wait goes on: the real rank may still come.
				h, err := decodeMeshHello(hello, c.RemoteAddr(), rank, n, tcp.MaxStreams)
				if err != nil || conns[h.Rank] == nil || h.Stream >= len(conns[h.Rank]) {
					c.Close()
					continue
				}
				mu.Lock()
				dup := conns[h.Rank][h.Stream] != nil
				if !dup {
					conns[h.Rank][h.Stream] = c
					got++
				}
				mu.Unlock()
				if dup {
					c.Close()
				}
			}
			return nil
		})
	}
	for p := 0; p < rank; p++ {
		if conns[p] == nil {
			continue
		}
		for s := range conns[p] {
			g.Go(func() error {
				hello, _ := json.Marshal(meshHello{Rank: rank, Stream: s})
				c, err := tcp.Dial(mc.Peers[p].Addr, mc.Net, mc.Secret, hello)
				if err != nil {
					return fmt.Errorf("rank %d connecting to rank %d at %s: %w", rank, p, mc.Peers[p].Addr, err)
				}
				mu.Lock()
				conns[p][s] = c
				mu.Unlock()
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		for _, cs := range conns {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
		return err
	}
	for p, cs := range conns {
		if cs != nil {
			s.socks[p] = tcp.NewTCPLink(cs, mc.Net)
		}
	}
	return nil
}

func missingPeers(conns [][]*tcp.Conn, from, to int, mu *sync.Mutex) string {
	mu.Lock()
	defer mu.Unlock()
	var missing []string
	for p := from; p < to; p++ {
		for _, c := range conns[p] {
			if c == nil {
				missing = append(missing, fmt.Sprint(p))
				break
			}
		}
	}
	return strings.Join(missing, ",")
}

// Shut is the first half of Close, and never waits for a use of the
// windows: it closes every link (each wakes its own waits, here and in
// the peer, and returns once they left) and shuts the node
// (shm.ShmNode.Shut). Every wait of this rank on the host network then
// fails, and so does every peer's wait on this rank.
func (m *Mesh) Shut() error {
	var errs []error
	m.shutOnce.Do(func() {
		for _, l := range m.Links {
			if l != nil {
				errs = append(errs, l.Close())
			}
		}
		if m.Node != nil {
			m.Node.Shut()
		}
	})
	return errors.Join(errs...)
}

// Close shuts the mesh and unmaps every segment once this rank's uses of
// the windows ended; when one did not within the deadline (shm.ShmNode.
// Close), the segments stay mapped and Close says so. Closing twice is
// harmless.
func (m *Mesh) Close() error {
	errs := []error{m.Shut()}
	m.closeOnce.Do(func() {
		if m.Node != nil && !m.Node.Close() {
			errs = append(errs, fmt.Errorf("hostnet: a use of the shared windows did not end within %s: the segments stay mapped (a device may still write them)", wire.EnvTimeout))
			return
		}
		for _, s := range m.segs {
			errs = append(errs, s.Close())
		}
	})
	return errors.Join(errs...)
}
