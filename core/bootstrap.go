package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// Bootstrap has two stages.
//
//  1. Rendezvous: every rank dials the id's address and announces itself
//     (rank, count, the address of its own listener, host, pid). Once all
//     ranks have announced, the rendezvous answers each with the whole table
//     and ends. Ranks that disagree on the count, or claim a rank twice, get
//     an error instead of the table.
//  2. Mesh: for every pair of ranks the higher dials the lower Streams
//     times; the sockets to one peer form a hostnet.Link. Ranks of one host
//     (same host name and kernel boot id) then move to shared memory: over
//     the pair's first socket the lower rank offers a segment, the higher
//     maps it, and both close the sockets of that pair (nothing else reads
//     them: the hostnet.ShmLink notices a dead peer by its pid). When either
//     side cannot or will not (FLAGCX_SHM_DISABLE=1) share memory, the pair
//     keeps its TCP link.
//
// Both stages use hostnet's authenticated handshake, so a process without the
// id's secret is refused at the door and the communicator carries on.

// PeerInfo is what a rank tells the others about itself at bootstrap.
type PeerInfo struct {
	Rank int    `json:"rank"`
	Addr string `json:"addr"` // its mesh listener
	Host string `json:"host"`
	Pid  int    `json:"pid"`
	// BootID is the kernel's boot id (hostnet.BootID): with Host it tells
	// whether two ranks can share memory.
	BootID string `json:"boot_id,omitempty"`
}

type announce struct {
	PeerInfo
	NRanks int `json:"nranks"`
}

// rendezvousReply is the table, or the reason there is none.
type rendezvousReply struct {
	Peers []PeerInfo `json:"peers,omitempty"`
	Error string     `json:"error,omitempty"`
}

const maxBootstrapMsg = 16 << 20

// startRendezvous listens on addr (or on this host's chosen interface) and
// serves one communicator's rendezvous in the background.
func startRendezvous(addr string, cfg hostnet.Config, secret hostnet.Secret) (string, error) {
	var l *hostnet.Listener
	var err error
	if addr != "" {
		l, err = hostnet.ListenAddr(addr, cfg, secret)
	} else {
		l, err = hostnet.Listen(cfg, secret)
	}
	if err != nil {
		return "", fmt.Errorf("%w: starting the rendezvous: %v", sdk.ErrSystemError, err)
	}
	go serveRendezvous(l)
	return l.Addr(), nil
}

type arrival struct {
	conn *hostnet.Conn
	ann  announce
}

// serveRendezvous collects announcements until every rank has come, then
// answers them all. Each Accept waits at most the configured deadline, so a
// rendezvous whose ranks never all come ends with an error sent to those
// that did, naming the missing ranks.
func serveRendezvous(l *hostnet.Listener) {
	defer l.Close()
	var arrived []arrival
	defer func() {
		for _, a := range arrived {
			a.conn.Close()
		}
	}()
	nranks := -1
	reject := func(c *hostnet.Conn, format string, args ...any) {
		reply(c, rendezvousReply{Error: fmt.Sprintf(format, args...)})
		c.Close()
	}
	for nranks < 0 || len(arrived) < nranks {
		conn, hello, err := l.Accept()
		if err != nil {
			if nranks > 0 {
				why := fmt.Sprintf("ranks %s of %d did not join the rendezvous: %v", missingRanks(arrived, nranks), nranks, err)
				for _, a := range arrived {
					reply(a.conn, rendezvousReply{Error: why})
				}
			}
			return
		}
		var ann announce
		if err := json.Unmarshal(hello, &ann); err != nil {
			reject(conn, "malformed announcement: %v", err)
			continue
		}
		switch {
		case nranks < 0 && (ann.NRanks < 1 || ann.Rank < 0 || ann.Rank >= ann.NRanks):
			reject(conn, "rank %d of %d is out of range", ann.Rank, ann.NRanks)
			continue
		case nranks > 0 && ann.NRanks != nranks:
			reject(conn, "rank %d says the communicator has %d ranks, but earlier ranks said %d: give every rank the same count", ann.Rank, ann.NRanks, nranks)
			continue
		case nranks > 0 && (ann.Rank < 0 || ann.Rank >= nranks):
			reject(conn, "rank %d is out of range for %d ranks", ann.Rank, nranks)
			continue
		case hasRank(arrived, ann.Rank):
			reject(conn, "rank %d joined twice: give every process its own rank", ann.Rank)
			continue
		}
		nranks = ann.NRanks
		arrived = append(arrived, arrival{conn, ann})
	}
	table := make([]PeerInfo, nranks)
	for _, a := range arrived {
		table[a.ann.Rank] = a.ann.PeerInfo
	}
	for _, a := range arrived {
		reply(a.conn, rendezvousReply{Peers: table})
	}
}

func reply(c *hostnet.Conn, r rendezvousReply) {
	b, _ := json.Marshal(r)
	_ = c.Send(b)
}

func hasRank(arrived []arrival, rank int) bool {
	for _, a := range arrived {
		if a.ann.Rank == rank {
			return true
		}
	}
	return false
}

func missingRanks(arrived []arrival, nranks int) string {
	var missing []string
	for r := 0; r < nranks; r++ {
		if !hasRank(arrived, r) {
			missing = append(missing, fmt.Sprint(r))
		}
	}
	return strings.Join(missing, ",")
}

// joinRendezvous announces this rank and waits for the table.
func joinRendezvous(id UniqueID, cfg hostnet.Config, self announce) ([]PeerInfo, error) {
	hello, _ := json.Marshal(self)
	// Wait longer than the rendezvous does, so that when ranks are missing
	// its answer naming them arrives before our own deadline.
	if cfg.Timeout > 0 {
		cfg.Timeout = 2*cfg.Timeout + time.Second
	}
	conn, err := hostnet.Dial(id.Addr, cfg, id.Secret, hello)
	if err != nil {
		if errors.Is(err, hostnet.ErrAuth) {
			return nil, fmt.Errorf("%w: the rendezvous at %s refused rank %d: the unique id belongs to another communicator (its secret does not match)", sdk.ErrInvalidUsage, id.Addr, self.Rank)
		}
		return nil, fmt.Errorf("%w: rank %d could not reach the rendezvous at %s: %v", sdk.ErrRemoteError, self.Rank, id.Addr, err)
	}
	defer conn.Close()
	msg, err := conn.RecvMsg(maxBootstrapMsg)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d waiting for the other ranks at the rendezvous %s: %v", sdk.ErrRemoteError, self.Rank, id.Addr, err)
	}
	var r rendezvousReply
	if err := json.Unmarshal(msg, &r); err != nil {
		return nil, fmt.Errorf("%w: malformed rendezvous reply: %v", sdk.ErrInternalError, err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("%w: rendezvous %s: %s", sdk.ErrInvalidUsage, id.Addr, r.Error)
	}
	if len(r.Peers) != self.NRanks {
		return nil, fmt.Errorf("%w: rendezvous table has %d ranks, expected %d", sdk.ErrInternalError, len(r.Peers), self.NRanks)
	}
	return r.Peers, nil
}

// meshHello identifies one socket of a link.
type meshHello struct {
	Rank   int `json:"rank"`
	Stream int `json:"stream"`
}

// peerLink is how this rank reaches one peer: a *hostnet.Link (TCP) or a
// *hostnet.ShmLink (same host). Both report errors wrapping
// hostnet.ErrTimeout, hostnet.ErrClosed or *hostnet.LengthError.
type peerLink interface {
	Send(p []byte) error
	Recv(p []byte) error
	Close() error
}

// sameHost: a and b run on one machine, under one kernel.
func sameHost(a, b PeerInfo) bool {
	return a.BootID != "" && a.BootID == b.BootID && a.Host == b.Host
}

// buildMesh connects this rank to every other: it dials lower ranks and
// accepts higher ones, Streams sockets per pair, then turns the pairs on
// this host into shared-memory links.
func buildMesh(l *hostnet.Listener, cfg hostnet.Config, secret hostnet.Secret, peers []PeerInfo, rank int) ([]peerLink, error) {
	sc, err := hostnet.ShmConfigFromEnv()
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: %v", sdk.ErrInvalidArgument, rank, err)
	}
	n := len(peers)
	streams := max(cfg.Streams, 1)
	conns := make([][]*hostnet.Conn, n)
	for p := range conns {
		conns[p] = make([]*hostnet.Conn, streams)
	}
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}

	var wg sync.WaitGroup
	// Accept from every higher rank. Connections arrive in any order; each
	// hello says which rank and stream it carries.
	expected := (n - 1 - rank) * streams
	wg.Add(1)
	go func() {
		defer wg.Done()
		for got := 0; got < expected; got++ {
			c, hello, err := l.Accept()
			if err != nil {
				fail(fmt.Errorf("%w: rank %d waiting for connections from ranks %s: %v", sdk.ErrRemoteError, rank, missingPeers(conns, rank+1, n, &mu), err))
				return
			}
			var h meshHello
			if json.Unmarshal(hello, &h) != nil || h.Rank <= rank || h.Rank >= n || h.Stream < 0 || h.Stream >= streams {
				c.Close()
				got--
				continue
			}
			mu.Lock()
			dup := conns[h.Rank][h.Stream] != nil
			if !dup {
				conns[h.Rank][h.Stream] = c
			}
			mu.Unlock()
			if dup {
				c.Close()
				got--
			}
		}
	}()
	for p := 0; p < rank; p++ {
		for s := 0; s < streams; s++ {
			wg.Add(1)
			go func(p, s int) {
				defer wg.Done()
				hello, _ := json.Marshal(meshHello{Rank: rank, Stream: s})
				c, err := hostnet.Dial(peers[p].Addr, cfg, secret, hello)
				if err != nil {
					fail(fmt.Errorf("%w: rank %d connecting to rank %d at %s: %v", sdk.ErrRemoteError, rank, p, peers[p].Addr, err))
					return
				}
				mu.Lock()
				conns[p][s] = c
				mu.Unlock()
			}(p, s)
		}
	}
	wg.Wait()
	if firstErr != nil {
		for _, cs := range conns {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
		return nil, firstErr
	}
	links := make([]peerLink, n)
	var noShm []int
	var noShmWhy error
	for p := range links {
		if p == rank {
			continue
		}
		if !sameHost(peers[rank], peers[p]) {
			links[p] = hostnet.NewLink(conns[p], cfg)
			continue
		}
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			// The lower rank creates the segment, over the first socket.
			sl, err := hostnet.SetupShmLink(conns[p][0], rank < p, cfg, sc)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				links[p] = sl
				for _, c := range conns[p] {
					c.Close()
				}
			case errors.Is(err, hostnet.ErrShmUnavailable):
				links[p] = hostnet.NewLink(conns[p], cfg)
				noShm = append(noShm, p)
				if noShmWhy == nil {
					noShmWhy = err
				}
			default:
				if firstErr == nil {
					firstErr = fmt.Errorf("%w: rank %d setting up shared memory with rank %d: %v", sdk.ErrRemoteError, rank, p, err)
				}
			}
		}(p)
	}
	wg.Wait()
	if firstErr != nil {
		for p, cs := range conns {
			if links[p] != nil {
				links[p].Close()
			}
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
		return nil, firstErr
	}
	if len(noShm) > 0 && !sc.Disable {
		sort.Ints(noShm)
		fmt.Fprintf(os.Stderr, "flagcx: warning: rank %d talks TCP to ranks %s of its own host: %v (set %s=1 to choose TCP quietly)\n",
			rank, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(noShm)), ","), "[]"), noShmWhy, hostnet.EnvShmDisable)
	}
	return links, nil
}

func missingPeers(conns [][]*hostnet.Conn, from, to int, mu *sync.Mutex) string {
	mu.Lock()
	defer mu.Unlock()
	var missing []int
	for p := from; p < to; p++ {
		for _, c := range conns[p] {
			if c == nil {
				missing = append(missing, p)
				break
			}
		}
	}
	sort.Ints(missing)
	return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(missing)), ","), "[]")
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
