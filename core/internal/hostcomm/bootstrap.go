package hostcomm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// Bootstrap has two stages.
//
//  1. Rendezvous: every rank dials the id's address and announces itself
//     (rank, count, the address of its own listener, host, pid). Once all
//     ranks have announced, the rendezvous answers each with the whole table
//     and ends. Ranks that disagree on the count, or claim a rank twice, get
//     an error instead of the table.
//  2. Mesh: hostnet.Connect builds this rank's links from the table: shared
//     memory to the ranks of its host (each rank announced the segment it
//     made before the rendezvous), TCP to the others.
//
// Both stages use hostnet's authenticated handshake, so a process without the
// id's secret is refused at the door and the communicator carries on; a
// connection that never answers is dropped within hostnet.FirstByteTimeout
// and cannot take a place a rank needs, so idle connections to the
// rendezvous port (a scanner, another job on that port) do not keep the
// ranks out, and a wait that fails anyway names the strangers refused.

// peerInfo is what a rank tells the others about itself at bootstrap
// (hostnet chooses the transport between two ranks from theirs).
type peerInfo = hostnet.Peer

type announce struct {
	peerInfo
	NRanks int `json:"nranks"`
}

// rendezvousReply is the table, or the reason there is none.
type rendezvousReply struct {
	Peers []peerInfo `json:"peers,omitempty"`
	Error string     `json:"error,omitempty"`
	// Timeout says that Error names ranks that never joined before the
	// deadline: a remote failure, not a mistake of the ranks that came.
	Timeout bool `json:"timeout,omitempty"`
}

// rendezvousTimeout is a rendezvous that ended with ranks missing: a remote
// error that errors.Is matches to ErrTimeout, worded by the rendezvous
// (whose text already says which ranks and which deadline).
type rendezvousTimeout struct{ msg string }

func (e *rendezvousTimeout) Error() string   { return e.msg }
func (e *rendezvousTimeout) Unwrap() []error { return []error{sdk.ErrRemoteError, hostnet.ErrTimeout} }

const maxBootstrapMsg = 16 << 20

// firstRankWait bounds the rendezvous's wait for its first rank. Nobody
// waits on that one yet (GetUniqueID has returned, and the id travels
// through the user's launcher first), so a slow start under load is no
// failure; FLAGCX_TIMEOUT bounds each wait after it, which ranks do feel.
const firstRankWait = 10 * time.Minute

// startRendezvous listens on addr (or on this host's chosen interface) and
// serves one communicator's rendezvous in the background.
func startRendezvous(addr string, cfg hostnet.Config, secret hostnet.Secret) (string, error) {
	var l *hostnet.Listener
	var err error
	if addr != "" {
		cfg.Rendezvous = addr // its errors name the interface routed to it
		l, err = hostnet.ListenAddr(addr, cfg, secret)
	} else {
		l, err = hostnet.Listen(cfg, secret)
	}
	if err != nil {
		return "", fmt.Errorf("%w: starting the rendezvous: %w", sdk.ErrSystemError, err)
	}
	go serveRendezvous(l)
	return l.Addr(), nil
}

type arrival struct {
	conn *hostnet.Conn
	ann  announce
}

// serveRendezvous collects announcements until every rank has come, then
// answers them all. Each Accept after the first arrival waits at most the
// configured deadline, so a rendezvous whose ranks never all come ends with
// a timeout sent to those that did, naming the missing ranks.
func serveRendezvous(l *hostnet.Listener) {
	defer l.Close()
	var arrived []arrival
	defer func() {
		for _, a := range arrived {
			a.conn.Close()
		}
	}()
	nranks := -1
	start := time.Now()
	reject := func(c *hostnet.Conn, format string, args ...any) {
		reply(c, rendezvousReply{Error: fmt.Sprintf(format, args...)})
		c.Close()
	}
	for nranks < 0 || len(arrived) < nranks {
		conn, hello, err := l.Accept()
		if err != nil && nranks < 0 && errors.Is(err, hostnet.ErrTimeout) && time.Since(start) < firstRankWait {
			continue
		}
		if err != nil {
			if nranks > 0 {
				why := fmt.Sprintf("ranks %s of %d did not join the rendezvous: %v", missingRanks(arrived, nranks), nranks, err)
				for _, a := range arrived {
					reply(a.conn, rendezvousReply{Error: why, Timeout: errors.Is(err, hostnet.ErrTimeout)})
				}
			}
			return
		}
		ann, err := decodeAnnounce(hello, conn.RemoteAddr())
		if err != nil {
			reject(conn, "%v", err)
			continue
		}
		switch {
		case nranks > 0 && ann.NRanks != nranks:
			reject(conn, "rank %d says the communicator has %d ranks, but earlier ranks said %d: give every rank the same count", ann.Rank, ann.NRanks, nranks)
			continue
		case hasRank(arrived, ann.Rank):
			reject(conn, "rank %d joined twice: give every process its own rank", ann.Rank)
			continue
		}
		nranks = ann.NRanks
		arrived = append(arrived, arrival{conn, ann})
	}
	table := make([]peerInfo, nranks)
	for _, a := range arrived {
		table[a.ann.Rank] = a.ann.peerInfo
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
func joinRendezvous(id ID, cfg hostnet.Config, self announce) ([]peerInfo, error) {
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
		return nil, fmt.Errorf("%w: rank %d could not reach the rendezvous at %s: %w", sdk.ErrRemoteError, self.Rank, id.Addr, err)
	}
	defer conn.Close()
	msg, err := conn.RecvMsg(maxBootstrapMsg)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d waiting for the other ranks at the rendezvous %s: %w", sdk.ErrRemoteError, self.Rank, id.Addr, err)
	}
	return decodeReply(msg, self, id.Addr)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
