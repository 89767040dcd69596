package hostcomm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// decodeAnnounce reads a rank's announcement to the rendezvous; from is
// the connection's remote address, for errors.
func decodeAnnounce(b []byte, from string) (announce, error) {
	var a announce
	if err := json.Unmarshal(b, &a); err != nil {
		return announce{}, fmt.Errorf("malformed announcement from %s: %v", from, err)
	}
	if a.NRanks < 1 || a.NRanks > hostnet.MaxRanks {
		return announce{}, fmt.Errorf("%s says the communicator has %d ranks (1..%d)", hostnet.PeerName(a.Rank, a.Addr), a.NRanks, hostnet.MaxRanks)
	}
	if err := a.peerInfo.Check(a.NRanks); err != nil {
		return announce{}, err
	}
	return a, nil
}

// MaxReplyError bounds the rendezvous's error text that a rank repeats.
const MaxReplyError = 4096

// decodeReply reads the rendezvous's answer to self: the table (checked
// whole, and with self's own entry as self announced it) or the error the
// rendezvous sent.
func decodeReply(b []byte, self announce, rendezvous string) ([]peerInfo, error) {
	var r rendezvousReply
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: rank %d: malformed reply of the rendezvous %s: %v", sdk.ErrRemoteError, self.Rank, rendezvous, err)
	}
	if r.Error != "" {
		if len(r.Error) > MaxReplyError {
			r.Error = r.Error[:MaxReplyError] + "..."
		}
		msg := strings.ToValidUTF8(r.Error, "?")
		if r.Timeout {
			// Ranks never came: a remote failure, not a mistake of this one.
			return nil, &rendezvousTimeout{fmt.Sprintf("%v: rank %d: rendezvous %s: %s", sdk.ErrRemoteError, self.Rank, rendezvous, msg)}
		}
		return nil, fmt.Errorf("%w: rendezvous %s: %s", sdk.ErrInvalidUsage, rendezvous, msg)
	}
	if len(r.Peers) != self.NRanks {
		return nil, fmt.Errorf("%w: rank %d: the rendezvous %s sent a table of %d ranks, expected %d", sdk.ErrRemoteError, self.Rank, rendezvous, len(r.Peers), self.NRanks)
	}
	if err := hostnet.CheckPeers(r.Peers); err != nil {
		return nil, fmt.Errorf("%w: rank %d: the table of the rendezvous %s: %w", sdk.ErrRemoteError, self.Rank, rendezvous, err)
	}
	if got := r.Peers[self.Rank]; got != self.peerInfo {
		return nil, fmt.Errorf("%w: rank %d: the rendezvous %s's table says this rank is %s (pid %d, shm %q), not what it announced",
			sdk.ErrRemoteError, self.Rank, rendezvous, hostnet.PeerName(got.Rank, got.Addr), got.Pid, got.Shm)
	}
	return r.Peers, nil
}

// PeerName names rank r of the communicator for errors: "rank 3
// (10.0.0.7:5000)".
func (c *Comm) PeerName(r int) string {
	if r < 0 || r >= len(c.peers) {
		return fmt.Sprintf("rank %d", r)
	}
	return hostnet.PeerName(r, c.peers[r].Addr)
}
