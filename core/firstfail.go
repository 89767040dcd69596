package core

import (
	"errors"
	"fmt"
	"os"

	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// firstFailure is what a peer reported as the job's first failure (a
// failure notice, hostnet's tag.go): the rank, its host and what failed.
// A rank that fails because of it passes the same text on, so that every
// rank's error names the first failure rather than the neighbour that
// failed after it.
type firstFailure struct{ what string }

func (f *firstFailure) Error() string { return "first failure: " + f.what }

// maxReported bounds the failure a control-plane reply carries, as a
// notice's text is bounded (internal/hostnet/tcp/tag.go).
const maxReported = 4 << 10

// notifyPeers tells every peer on a transport that carries notices what
// failed first: a notice this rank received, else err itself, with this
// rank and its host. It is best effort and bounded (hostnet.Notify); a
// failure this rank caused or learned of is also kept (reported) for the
// peers that ask the control plane instead (firstReported), since a link
// mid-frame carries no notice.
func (c *hostComm) notifyPeers(err error) {
	var ff *firstFailure
	what := ""
	if errors.As(err, &ff) {
		what = ff.what
	} else {
		who := c.who
		if who == "" {
			who = fmt.Sprintf("rank %d", c.rank)
		}
		what = fmt.Sprintf("%s (host %s, pid %d): %v", who, hostname(), os.Getpid(), err)
	}
	if ff != nil || !lostPeer(err) {
		// A cause, not a symptom: a lost peer is what the revoke's probe
		// finds out by itself.
		kept := what
		if len(kept) > maxReported {
			kept = kept[:maxReported]
		}
		c.reported.CompareAndSwap(nil, &kept)
	}
	for _, l := range c.mesh.Links {
		if l != nil {
			hostnet.Notify(l, what)
		}
	}
}

// notifyAll tells the peers on every host communicator of c what failed
// first: a heterogeneous call fails on one of them, while its peers may
// wait on another (a leader on the leaders' links, say).
func (c *Comm) notifyAll(err error) {
	for _, h := range []*hostComm{c.world, c.intra, c.inter} {
		if h != nil {
			h.notifyPeers(err)
		}
	}
}

// firstReported is the first failure this rank told its peers of, on any
// of its host communicators, or "".
func (c *Comm) firstReported() string {
	for _, h := range []*hostComm{c.world, c.intra, c.inter} {
		if h != nil {
			if w := h.reported.Load(); w != nil {
				return *w
			}
		}
	}
	return ""
}
