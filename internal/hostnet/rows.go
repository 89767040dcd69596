package hostnet

import (
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// The transport table. Each row is a transport: whether it can connect a
// pair of ranks, how it connects the pairs it gets, and the network plugin
// it needs, if any. Connect gives each pair to the first row that can
// connect it (as in NCCL's table); a row whose network plugin either end
// refuses leaves the pair to the next row that can connect it. The rows
// matter while Connect runs only: the links they build are the
// transports' own types, which every message then reaches directly.

// row is one transport of the table.
type row struct {
	// name is what the row's links report (Link.Transport): for people and
	// link tables; the connect path never reads it.
	name string
	// canConnect says from the peer table alone whether the row may carry
	// the pair of a and b. Every rank holds the same table, so both ends of
	// a pair decide alike, whichever of them is a.
	canConnect func(a, b Peer) bool
	// sockets: the row's pairs get TCP sockets before it connects them
	// (setup.dialSockets): its own links run over them, or its network
	// plugin's offers, handshake and liveness watch do. The rows without
	// sockets come first and connect every pair they get (shm fails
	// rather than leave one), so that every pair that reaches a row with
	// sockets has them, dialed once for all such pairs.
	sockets bool
	// net is the network plugin the row's links go over (nil: none):
	// Connect checks it first (netTransport.Check), and the pair takes the
	// row only where both ends' offers agree (netTransport.Negotiate).
	net netTransport
	// connect builds the links of pairs (peer ranks, ascending; maybe
	// none), all at once, into s.m.Links. A pair it leaves without a link
	// goes on to the next row that can connect it.
	connect func(s *setup, r *row, pairs []int) error
}

// rows is the transport table, in the order pairs try it.
var rows = []row{
	{name: "shm", canConnect: shareMemory, connect: connectShm},
	{name: "ib", canConnect: anyPair, sockets: true, net: ibNet{}, connect: connectNet},
	{name: "tcp", canConnect: anyPair, sockets: true, connect: connectSockets},
}

// shareMemory: a and b share a host, boot id and pid namespace, and both
// have a segment.
func shareMemory(a, b Peer) bool { return a.Shm != "" && b.Shm != "" && SameHost(a, b) }

// anyPair: the row can carry any pair (TCP; the network plugin's offers
// decide the rest when Connect runs, netplugin/net.go).
func anyPair(a, b Peer) bool { return true }

// TransportFor names the transport that the peer table alone gives a and
// b: the first row without a network plugin that can connect them ("shm"
// or "tcp"). Connect may still carry a "tcp" pair over the network plugin,
// which both ends then chose together (netplugin/net.go).
func TransportFor(a, b Peer) string {
	for _, r := range rows {
		if r.net == nil && r.canConnect(a, b) {
			return r.name
		}
	}
	return ""
}

// nextRow is the index of the first row from the index from on that can
// connect a and b, or -1.
func nextRow(a, b Peer, from int) int {
	for i := from; i < len(rows); i++ {
		if rows[i].canConnect(a, b) {
			return i
		}
	}
	return -1
}

// checkRows fails at once where cfg requires a network plugin that this
// process cannot have (FLAGCX_NET=IB without an RDMA device).
func checkRows(cfg Config) error {
	for _, r := range rows {
		if r.net != nil {
			if err := r.net.Check(cfg); err != nil {
				return err
			}
		}
	}
	return nil
}

// setup is one Connect under way: what the rows read and fill.
type setup struct {
	mc   MeshConfig
	m    *Mesh
	self Peer
	// socks holds each pair's TCP sockets from dialSockets until a row
	// takes them (its link then owns them); Connect closes what is left
	// when it fails.
	socks []*tcp.TCPLink
}

// connectRows connects every pair through the first row that can, in
// table order: each row connects all its pairs at once.
func (s *setup) connectRows() error {
	peers, rank := s.mc.Peers, s.mc.Rank
	at := make([]int, len(peers)) // the row each pair is at
	for p := range peers {
		if p != rank {
			if at[p] = nextRow(s.self, peers[p], 0); at[p] < 0 {
				return fmt.Errorf("hostnet: rank %d: no transport can connect rank %d: %w", rank, p, ErrConfig)
			}
		}
	}
	dialed := false
	for i := range rows {
		r := &rows[i]
		if r.sockets && !dialed {
			if err := s.dialSockets(at); err != nil {
				return err
			}
			dialed = true
		}
		var pairs []int
		for p := range peers {
			if p != rank && at[p] == i {
				pairs = append(pairs, p)
			}
		}
		if err := r.connect(s, r, pairs); err != nil {
			return err
		}
		for _, p := range pairs {
			if s.m.Links[p] != nil {
				continue
			}
			at[p] = nextRow(s.self, peers[p], i+1)
			if at[p] < 0 || (rows[at[p]].sockets && s.socks[p] == nil) {
				return fmt.Errorf("hostnet: rank %d: no transport after %s can connect rank %d: %w", rank, r.name, p, ErrConfig)
			}
		}
	}
	return nil
}

// closeSockets closes the sockets no row took.
func (s *setup) closeSockets() {
	for p, tl := range s.socks {
		if tl != nil {
			tl.Close()
			s.socks[p] = nil
		}
	}
}

// connectShm maps the segments of this host's ranks that share memory
// (pairs and this rank) and builds their links and the host's ShmNode
// (mapHost); with no pair, nobody will map this rank's segment, which
// goes at once.
func connectShm(s *setup, _ *row, pairs []int) error {
	mc := s.mc
	local := slices.Clone(pairs)
	if s.self.Shm != "" && mc.Segment != nil {
		local = append(local, mc.Rank)
		slices.Sort(local)
	}
	if len(local) < 2 {
		if mc.Segment != nil {
			mc.Segment.Unlink()
		}
		return nil
	}
	if err := s.m.mapHost(mc, local); err != nil {
		return fmt.Errorf("rank %d: %w", mc.Rank, err)
	}
	return nil
}

// connectNet offers the row's network plugin to the peer of each pair on
// their sockets, all pairs at once; the pairs whose both ends agree get a
// link over the plugin (which takes over their sockets), the others keep
// their sockets for the next row.
func connectNet(s *setup, r *row, pairs []int) error {
	var g errgroup.Group
	for _, p := range pairs {
		same := SameHost(s.self, s.mc.Peers[p])
		g.Go(func() error {
			l, err := r.net.Negotiate(s.socks[p], s.mc.Net, same, s.mc.Rank, p)
			if err != nil {
				return fmt.Errorf("rank %d choosing the network to rank %d: %w", s.mc.Rank, p, err)
			}
			if l != nil {
				s.socks[p], s.m.Links[p] = nil, l
			}
			return nil
		})
	}
	return g.Wait()
}

// connectSockets makes each pair's sockets its link, polling where
// pollsLink says.
func connectSockets(s *setup, _ *row, pairs []int) error {
	onHost := ranksOnHost(s.mc.Peers)
	for _, p := range pairs {
		tl := s.socks[p]
		s.socks[p] = nil
		pollSockets(s.mc, onHost, p, tl)
		s.m.Links[p] = tl
	}
	return nil
}

// pollSockets lets the reads of the TCP link to rank p poll for Net.Spin
// before they sleep (tcp.Conn.readPolled) where pollsLink says, and makes
// it lean where linkIsLean says.
func pollSockets(mc MeshConfig, onHost map[string]int, p int, tl *tcp.TCPLink) {
	if mc.Net.Spin <= 0 || !pollsLink(mc.Peers, onHost, mc.Rank, p) {
		return
	}
	for _, c := range tl.Conns() {
		c.SetSpin(mc.Net.Spin)
	}
	tl.SetLean(linkIsLean(mc.Peers, onHost, mc.Rank, p))
}
