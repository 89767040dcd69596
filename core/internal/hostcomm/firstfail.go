package hostcomm

import (
	"errors"
	"fmt"
	"os"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// FirstFailure is what a peer reported as the job's first failure (a
// failure notice, hostnet's tag.go): the rank, its host and what failed.
// A rank that fails because of it passes the same text on, so that every
// rank's error names the first failure rather than the neighbour that
// failed after it.
type FirstFailure struct{ What string }

func (f *FirstFailure) Error() string { return "first failure: " + f.What }

// maxReported bounds the failure a control-plane reply carries, as a
// notice's text is bounded (internal/hostnet/tcp/tag.go).
const maxReported = 4 << 10

// NotifyPeers tells every peer on a transport that carries notices what
// failed first: a notice this rank received, else err itself, with this
// rank and its host. It is best effort and bounded (hostnet.Notify); a
// failure this rank caused or learned of is also kept (reported) for the
// peers that ask the control plane instead (firstReported), since a link
// mid-frame carries no notice.
func (c *Comm) NotifyPeers(err error) {
	var ff *FirstFailure
	what := ""
	if errors.As(err, &ff) {
		what = ff.What
	} else {
		who := c.who
		if who == "" {
			who = fmt.Sprintf("rank %d", c.rank)
		}
		what = fmt.Sprintf("%s (host %s, pid %d): %v", who, hostname(), os.Getpid(), err)
	}
	if ff != nil || !LostPeer(err) {
		// A cause, not a symptom: a lost peer is what the revoke's probe
		// finds out by itself.
		c.Keep(what)
	}
	for _, l := range c.mesh.Links {
		if l != nil {
			hostnet.Notify(l, what)
		}
	}
}

// Keep keeps what as the first failure this rank reports (Reported),
// for the peers that ask the control plane, unless one is kept already.
func (c *Comm) Keep(what string) {
	if len(what) > maxReported {
		what = what[:maxReported]
	}
	c.reported.CompareAndSwap(nil, &what)
}

// LostPeer reports whether err may come from a lost peer: any error but
// this rank's own mistakes (bad arguments, misuse), since a peer's failure
// shows in many ways (a closed link, a missed deadline, a vendor library
// whose kernel failed when a peer aborted).
func LostPeer(err error) bool {
	return !errors.Is(err, sdk.ErrInvalidArgument) && !errors.Is(err, sdk.ErrInvalidUsage)
}
