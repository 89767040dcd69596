package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// Revoke. When a call of a rank fails because a peer is lost (a link
// closed, a deadline passed, a plugin call the watchdog gave up on), that
// rank finds out which ranks are gone and tells every other rank, so that
// no survivor waits out its own deadline: every survivor's calls on the
// communicator, those in flight and the later ones, end with one
// *RevokedError naming the lost ranks and their hosts.
//
// The news travels on a control plane beside the data links: every rank
// listens on a socket of its own (its address travels in the init
// exchange, agree), which a revoke does not close, and which answers while
// its rank is busy in a call. The rank that detects a failure asks every
// peer there (probe): a peer that does not answer within probeWait, or
// whose process on this host is gone or stopped, is lost; a peer that
// answers that the communicator was revoked already hands over that
// verdict, so that every survivor ends with the same one. The detecting
// rank then sends its verdict to every survivor, and a rank that receives
// one revokes its own communicator (adopt): its host links and vendor
// communicator are aborted, which ends a call in flight at once. Shrink
// uses the same plane to hand the survivors the new communicator's id.

// probeWait bounds the wait for one peer's answer on the control plane: a
// rank that has not answered by then is taken for lost. It is short, so
// that every survivor hears of a failure well within 2 s of its
// detection; the control plane answers on a goroutine of its own, so a
// rank busy in a call still answers at once.
const probeWait = time.Second

// lossGrace is how long a rank that detected a failure waits before it
// probes: ranks lost together (a host's, a cluster's) die within a few
// milliseconds of each other, and one verdict should name them all.
const lossGrace = 100 * time.Millisecond

// RevokedError ends every call of a survivor on a communicator that one
// of its ranks revoked after a failure. errors.Is matches
// sdk.ErrRemoteError, and, on the rank that detected the failure, what
// its own call failed with (a *TimeoutError, say; errors.As finds it on
// every rank whose own deadline passed too). Shrink(Failed) makes a
// communicator of the survivors.
type RevokedError struct {
	Rank   int       // the rank whose call this ended
	Op     string    // the call ("AllReduce"), or "" for a Guard
	Failed []int     // the lost ranks, ascending; empty when every rank answered
	Hosts  []string  // the hosts of Failed, in its order
	By     int       // the rank that detected the failure
	Cause  string    // what failed on rank By
	At     time.Time // when rank By revoked the communicator (its clock)
	err    error     // rank By's own error, on rank By
}

// Error names the lost ranks, their hosts, the rank that found out and
// what it saw, and what to do.
func (e *RevokedError) Error() string {
	lost := "no rank was lost (every rank answered)"
	if len(e.Failed) > 0 {
		parts := make([]string, len(e.Failed))
		for i, r := range e.Failed {
			parts[i] = fmt.Sprintf("rank %d (host %s)", r, e.Hosts[i])
		}
		lost = strings.Join(parts, ", ") + " failed"
	}
	if e.err != nil {
		// This rank's own failure comes first: it is the cause here.
		return fmt.Sprintf("%v; the communicator is revoked on every rank: %s (make a communicator of the survivors with Shrink, or destroy it)", e.err, lost)
	}
	op := "a call"
	if e.Op != "" {
		op = e.Op
	}
	return fmt.Sprintf("%s on rank %d: the communicator was revoked: %s; found by rank %d: %s (make a communicator of the survivors with Shrink, or destroy it)",
		op, e.Rank, lost, e.By, e.Cause)
}

// Unwrap makes errors.Is see sdk.ErrRemoteError and, on the detecting
// rank, its own error.
func (e *RevokedError) Unwrap() []error {
	if e.err != nil {
		return []error{sdk.ErrRemoteError, e.err}
	}
	return []error{sdk.ErrRemoteError}
}

// The control plane's messages: a hello, answered by a ctlReply.
const (
	ctlProbe  = "probe"  // are you there?
	ctlRevoke = "revoke" // the communicator is revoked: adopt this verdict
	ctlShrink = "shrink" // the survivors' new communicator (Shrink)
)

type ctlMsg struct {
	Kind    string   `json:"kind"`
	From    int      `json:"from"`
	Failed  []int    `json:"failed,omitempty"`
	Hosts   []string `json:"hosts,omitempty"`
	By      int      `json:"by"`
	Cause   string   `json:"cause,omitempty"`
	At      int64    `json:"at,omitempty"`      // revoke: RevokedError.At, Unix nanoseconds
	ID      string   `json:"id,omitempty"`      // shrink: the new unique id
	Exclude []int    `json:"exclude,omitempty"` // shrink: the ranks left out
}

// verdict is the RevokedError a revoke message carries.
func (m *ctlMsg) verdict() *RevokedError {
	return &RevokedError{Failed: m.Failed, Hosts: m.Hosts, By: m.By, Cause: m.Cause, At: time.Unix(0, m.At)}
}

// verdictMsg is the revoke message of verdict re, from this rank.
func (c *Comm) verdictMsg(re *RevokedError) ctlMsg {
	return ctlMsg{Kind: ctlRevoke, From: c.rank, Failed: re.Failed, Hosts: re.Hosts, By: re.By, Cause: re.Cause, At: re.At.UnixNano()}
}

// ctlReply answers every hello: the verdict the rank adopted, if any (a
// ctlMsg, read by decodeCtl), and the first failure it told its peers of
// (firstReported), which a peer whose link closed mid-frame never got as
// a notice.
type ctlReply struct {
	Revoked json.RawMessage `json:"revoked,omitempty"`
	Failure string          `json:"failure,omitempty"`
}

// ctlAnswer is a decoded ctlReply.
type ctlAnswer struct {
	verdict *ctlMsg // nil: the rank has none
	failure string
}

// ctlPlane is one rank's side of the control plane.
type ctlPlane struct {
	l       *hostnet.Listener
	cfg     hostnet.Config
	secret  hostnet.Secret
	addrs   []string    // every rank's control address (agree)
	shrinks chan ctlMsg // shrink messages from the survivors' leader
	detect  sync.Mutex  // one detection at a time
	revoked chan struct{}
}

// listenCtl opens this rank's control plane on the interface of its data
// links.
func listenCtl(cfg hostnet.Config, secret hostnet.Secret) (*ctlPlane, error) {
	l, err := hostnet.Listen(cfg, secret)
	if err != nil {
		return nil, fmt.Errorf("%w: the control plane: %w", sdk.ErrSystemError, err)
	}
	return &ctlPlane{l: l, cfg: cfg, secret: secret, shrinks: make(chan ctlMsg, 8), revoked: make(chan struct{})}, nil
}

func (p *ctlPlane) close() {
	if p != nil {
		p.l.Close()
	}
}

// serveCtl answers the control plane until it is closed (stop).
func (c *Comm) serveCtl() {
	for {
		conn, hello, err := c.ctl.l.Accept()
		if errors.Is(err, hostnet.ErrClosed) {
			return
		}
		if err != nil {
			continue // nobody came within the deadline: keep listening
		}
		go c.answerCtl(conn, hello)
	}
}

func (c *Comm) answerCtl(conn *hostnet.Conn, hello []byte) {
	defer conn.Close()
	m, err := decodeCtl(hello, c.n)
	if err != nil {
		return // a stranger's or a broken peer's: no answer
	}
	if c.isAbortedByUser() {
		// Destroyed or aborted here: lost to the peers that probe, though
		// the plane answers until the release is over (stop), which can
		// outlast lossGrace on a loaded host.
		return
	}
	switch m.Kind {
	case ctlRevoke:
		c.adopt(m.verdict())
	case ctlShrink:
		select {
		case c.ctl.shrinks <- m:
		default: // a Shrink nobody waits for: the oldest are enough
		}
	}
	rep := ctlReply{Failure: c.firstReported()}
	if re := c.revocation(); re != nil {
		rep.Revoked, _ = json.Marshal(c.verdictMsg(re))
	}
	b, _ := json.Marshal(rep)
	_ = conn.Send(b)
}

// ask sends m to rank r's control plane, within wait, and returns r's
// answer.
func (c *Comm) ask(r int, m ctlMsg, wait time.Duration) (ctlAnswer, error) {
	cfg := c.ctl.cfg
	cfg.Timeout = wait
	hello, err := json.Marshal(m)
	if err != nil {
		return ctlAnswer{}, err
	}
	conn, err := hostnet.Dial(c.ctl.addrs[r], cfg, c.ctl.secret, hello)
	if err != nil {
		return ctlAnswer{}, err
	}
	defer conn.Close()
	b, err := conn.RecvMsg(hostnet.MaxHello)
	if err != nil {
		return ctlAnswer{}, err
	}
	var rep ctlReply
	if err := json.Unmarshal(b, &rep); err != nil {
		return ctlAnswer{}, fmt.Errorf("%w: a malformed control reply from rank %d: %v", sdk.ErrRemoteError, r, err)
	}
	a := ctlAnswer{failure: rep.Failure}
	if len(rep.Revoked) == 0 {
		return a, nil
	}
	v, err := decodeCtl(rep.Revoked, c.n)
	if err != nil {
		return ctlAnswer{}, fmt.Errorf("rank %d's verdict: %w", r, err)
	}
	a.verdict = &v
	return a, nil
}

// revocation is the verdict this rank adopted, or nil.
func (c *Comm) revocation() *RevokedError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revoked
}

// revokedFor is the verdict as the error of this rank's call op, or nil.
func (c *Comm) revokedFor(op string) *RevokedError {
	re := c.revocation()
	if re == nil {
		return nil
	}
	e := *re
	e.Rank, e.Op = c.rank, op
	return &e
}

// revokedWith is revokedFor with err, this rank's own error, kept where
// it is a *TimeoutError: this rank's deadline passed too.
func (c *Comm) revokedWith(op string, err error) *RevokedError {
	re := c.revokedFor(op)
	var te *TimeoutError
	if re != nil && errors.As(err, &te) {
		re.err = te
	}
	return re
}

// adopt revokes this rank's communicator with verdict re (the first one
// wins): later calls fail with it, and the host links and the vendor
// communicator are aborted so that a call in flight ends now.
func (c *Comm) adopt(re *RevokedError) {
	if c.record(re) {
		_ = c.abortAll()
	}
}

// record makes re this rank's verdict unless it has one (or was closed):
// true when it did.
func (c *Comm) record(re *RevokedError) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revoked != nil || c.closed {
		return false
	}
	c.revoked = re
	c.down.Store(true)
	if c.ctl != nil {
		close(c.ctl.revoked)
	}
	return true
}

// Revoked is closed once the communicator is revoked (a *RevokedError
// then ends every call); nil on a communicator of one rank.
func (c *Comm) Revoked() <-chan struct{} {
	if c.ctl == nil {
		return nil
	}
	return c.ctl.revoked
}

// Revocation is the verdict that revoked the communicator, or nil while
// it is not revoked (what a polling caller, such as the C API's
// flagcxCommGetAsyncError, reports).
func (c *Comm) Revocation() *RevokedError { return c.revokedFor("") }

// AsyncError is what ended, or ends the next call of, this communicator
// in the background (what flagcxCommGetAsyncError and
// ncclCommGetAsyncError report): the revocation, the watchdog's missed
// deadline, a call that failed and took the communicator down, a relay
// that failed after its call returned (relay_proxy.go), or the
// vendor communicator's own asynchronous error (a collective that failed
// on the device after its call returned), which revokes the communicator
// as a failed call does; nil while none did. It may be called from any
// goroutine, as often as a watchdog thread likes: while nothing failed a
// call costs one plugin call, which does not block.
func (c *Comm) AsyncError() error {
	if re := c.Revocation(); re != nil {
		return re
	}
	if c.wd != nil {
		if err := c.wd.Err(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	if failed != nil {
		return failed
	}
	if err := c.exec.RelayFailure(); err != nil {
		return err
	}
	// The vendor's error is a peer's failure seen through its library
	// (a peer that aborted, died, or revoked the communicator): as a
	// failed call's error, it is settled into the verdict every rank
	// shares, which may cost this call one detection (lossGrace and a
	// probe, about 0.1 s; a peer that does not answer, probeWait).
	return c.settle("", c.vendorAsyncError())
}

// settle is the error of call op: nil stays nil; on a revoked
// communicator the verdict; after a failure that may be a lost peer, the
// verdict of a detection (detect); else err.
func (c *Comm) settle(op string, err error) error {
	if err == nil {
		return nil
	}
	if re := c.revokedWith(op, err); re != nil {
		return re
	}
	if c.ctl == nil || !hostcomm.LostPeer(err) {
		return err
	}
	if re, cause := c.detect(err); re != nil {
		e := *re
		e.Rank, e.Op, e.err = c.rank, op, cause
		return &e
	}
	return err
}

// detect finds the lost ranks (probe), revokes this rank's communicator
// and tells every survivor. It returns the verdict, which may be another
// rank's that arrived meanwhile, or nil when the user closed the
// communicator, and cause, with the first failure a peer reported
// appended when this rank's own error does not name one yet (its notice
// could not travel: the link was mid-frame).
func (c *Comm) detect(cause error) (*RevokedError, error) {
	c.ctl.detect.Lock()
	defer c.ctl.detect.Unlock()
	if re := c.revocation(); re != nil {
		return re, cause
	}
	select {
	case <-time.After(lossGrace):
	case <-c.ctl.revoked:
	}
	failed, theirs, first := c.probe()
	if theirs != nil {
		c.adopt(theirs) // nothing when it is the verdict this rank adopted
		return c.revocation(), cause
	}
	var ff *hostcomm.FirstFailure
	if first != "" && !errors.As(cause, &ff) {
		cause = fmt.Errorf("%w; %w", cause, &hostcomm.FirstFailure{What: first})
	}
	re := &RevokedError{Failed: failed, By: c.rank, Cause: cause.Error(), At: time.Now()}
	for _, r := range failed {
		re.Hosts = append(re.Hosts, c.world.Peers()[r].Host)
	}
	c.tell(re)
	return c.revocation(), cause
}

// probe asks every peer whether it is there: it returns the ranks that
// are not (ascending), or the verdict of a peer that revoked already, and
// the first failure reported by the lowest rank that reported one.
func (c *Comm) probe() (failed []int, theirs *RevokedError, first string) {
	type answer struct {
		r int
		ctlAnswer
		lost bool
	}
	self := c.world.Peers()[c.rank]
	answers := make(chan answer, c.n)
	for r := range c.n {
		if r == c.rank {
			continue
		}
		go func() {
			// A process of this host that is gone or stopped is lost
			// without waiting for its answer.
			if p := c.world.Peers()[r]; hostnet.SameHost(self, p) && hostnet.ProcessStalled(p.Pid) != "" {
				answers <- answer{r: r, lost: true}
				return
			}
			v, err := c.ask(r, ctlMsg{Kind: ctlProbe, From: c.rank}, probeWait)
			answers <- answer{r: r, ctlAnswer: v, lost: err != nil}
		}()
	}
	firstBy := c.n
	for range c.n - 1 {
		var a answer
		select {
		case a = <-answers:
		case <-c.ctl.revoked:
			return nil, c.revocation(), "" // another rank's verdict came first
		}
		switch {
		case a.lost:
			failed = append(failed, a.r)
		case a.verdict != nil && theirs == nil:
			theirs = a.verdict.verdict()
		}
		if a.failure != "" && a.r < firstBy {
			first, firstBy = a.failure, a.r
		}
	}
	sort.Ints(failed)
	return failed, theirs, first
}

// Revoke revokes the communicator on every rank at once, as a detected
// failure does, naming no lost rank: every rank's calls on it, those in
// flight and the later ones, end with a *RevokedError whose Cause is
// reason. Every rank may then Shrink (with no exclusions: a fresh
// communicator of them all). It does nothing on a communicator revoked,
// destroyed or aborted already. A communicator of one rank has no peer to
// tell: it is revoked where it is.
func (c *Comm) Revoke(reason string) {
	if c.ctl == nil {
		c.adopt(&RevokedError{By: c.rank, Cause: reason, At: time.Now()})
		return
	}
	c.ctl.detect.Lock()
	defer c.ctl.detect.Unlock()
	if c.revocation() != nil {
		return
	}
	c.tell(&RevokedError{By: c.rank, Cause: reason, At: time.Now()})
}

// tell adopts verdict re and sends it to every rank it does not name
// lost, within probeWait. (Sending before the vendor's abort, so that
// peers hear why before their library reports the abort, made
// TestNCCLDropIn's 5-rank split case fail under load; a peer's vendor
// error is settled into the verdict instead: AsyncError.)
func (c *Comm) tell(re *RevokedError) {
	c.adopt(re)
	msg := c.verdictMsg(re)
	var wg sync.WaitGroup
	for r := range c.n {
		if r != c.rank && !slices.Contains(re.Failed, r) {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = c.ask(r, msg, probeWait) }()
		}
	}
	wg.Wait()
}

// Do runs fn, this rank's calls on c, and gives up on them when ctx is
// done first: the communicator is then revoked on every rank (Revoke),
// which ends the call in flight here and the peers' calls with it, and Do
// returns fn's *RevokedError, which errors.Is matches to ctx's error
// (context.DeadlineExceeded, say). A collective given up on one rank
// cannot complete on the others, so giving up on one call gives up on the
// communicator, not on the process: Shrink makes a fresh one.
func (c *Comm) Do(ctx context.Context, fn func() error) error {
	stop := context.AfterFunc(ctx, func() {
		c.Revoke(fmt.Sprintf("rank %d gave up on its call: %v", c.rank, context.Cause(ctx)))
	})
	err := fn()
	if stop() {
		return err // ctx was not done while fn ran
	}
	var re *RevokedError
	if errors.As(err, &re) && re.By == c.rank && re.err == nil {
		e := *re
		e.err = context.Cause(ctx)
		return &e
	}
	return err
}
