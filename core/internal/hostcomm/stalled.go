package hostcomm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// When a collective fails because a peer went silent or away, the peer
// its error names is often not the cause: it may only have been waiting
// for another rank that was stopped, or have given up on one that died
// and closed its links. Every rank would then blame its neighbour. The
// ranks of one host can see each other's processes, so a failed
// operation's error also names the peers of this host whose process is
// gone or stopped at that moment, in the numbering of the communicator
// the caller knows. (Peers on other hosts cannot be looked at from here.)

// stalledError is a failed operation's error, with the peers of this host
// that were gone or stopped when it failed.
type stalledError struct {
	err     error
	stalled string // from StalledPeers
}

func (e *stalledError) Error() string { return e.err.Error() + "; on this host " + e.stalled }
func (e *stalledError) Unwrap() error { return e.err }

// NoteStalled adds to err the peers of this host that are gone or stopped
// (see StalledPeers). err is returned as it is when there are none, or
// when an inner layer noted them already.
func NoteStalled(err error, peers []peerInfo, self int) error {
	var se *stalledError
	if err == nil || errors.As(err, &se) {
		return err
	}
	s := StalledPeers(peers, self)
	if s == "" {
		return err
	}
	return &stalledError{err: err, stalled: s}
}

// StalledPeers lists the peers (by their index in peers, which is their
// rank) on the host of peers[self] whose process is gone or stopped, as
// "rank 2 (process 4242) is stopped (...)"; "" when there are none.
func StalledPeers(peers []peerInfo, self int) string {
	if self < 0 || self >= len(peers) {
		return ""
	}
	var out []string
	for r, p := range peers {
		if r == self || !hostnet.SameHost(peers[self], p) {
			continue
		}
		if why := hostnet.ProcessStalled(p.Pid); why != "" {
			out = append(out, fmt.Sprintf("rank %d (process %d) %s", r, p.Pid, why))
		}
	}
	return strings.Join(out, ", ")
}
