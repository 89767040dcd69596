package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/core/internal/ctl"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
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
// The news travels on a control plane beside the data links
// (core/internal/ctl): every rank
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

// ctlPlane is this rank's side of the control plane: the network half
// (ctl.Plane: the listener, the asks) and the state of the policy here.
type ctlPlane struct {
	*ctl.Plane
	detect  sync.Mutex    // one detection at a time
	revoked chan struct{} // closed when this rank adopts a verdict (record)
}

// listenCtl opens c's control plane on the interface of its data links.
func (c *Comm) listenCtl() (*ctlPlane, error) {
	p, err := ctl.Listen(c.world.Config(), c.world.Secret(), c.rank, c.n)
	if err != nil {
		return nil, err
	}
	return &ctlPlane{Plane: p, revoked: make(chan struct{})}, nil
}

// serveCtl answers the control plane for c until it is closed (stop).
func (c *Comm) serveCtl() { c.ctl.Serve(ctlAnswerer{c}) }

func (p *ctlPlane) close() {
	if p != nil {
		p.Close()
	}
}

// ctlAnswerer answers the control plane for c (ctl.Answerer); a type of
// its own, since Answer as a method of Comm would be public.
type ctlAnswerer struct{ c *Comm }

// Answer adopts a peer's verdict and answers with c's own verdict and the
// first failure c told its peers of (firstReported).
func (a ctlAnswerer) Answer(m ctl.Msg) (ctl.Answer, bool) {
	c := a.c
	if c.isAbortedByUser() {
		// Destroyed or aborted here: lost to the peers that probe, though
		// the plane answers until the release is over (stop), which can
		// outlast lossGrace on a loaded host.
		return ctl.Answer{}, false
	}
	if m.Kind == ctl.Revoke {
		c.adopt(revokedError(m.Verdict()))
	}
	ans := ctl.Answer{Failure: c.firstReported()}
	if re := c.revocation(); re != nil {
		v := re.verdict()
		ans.Verdict = &v
	}
	return ans, true
}

// revokedError is the RevokedError of verdict v (Rank and Op still to
// fill in).
func revokedError(v ctl.Verdict) *RevokedError {
	return &RevokedError{Failed: v.Failed, Hosts: v.Hosts, By: v.By, Cause: v.Cause, At: v.At}
}

// verdict is re as it travels to the peers.
func (re *RevokedError) verdict() ctl.Verdict {
	return ctl.Verdict{Failed: re.Failed, Hosts: re.Hosts, By: re.By, Cause: re.Cause, At: re.At}
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
	if in := c.insp; in != nil && in.m != nil {
		in.m.Revoked(in.commID, c.rank) // FLAGCX_METRICS (inspect.go)
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
		ctl.Answer
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
			v, err := c.ctl.Ask(r, ctl.Msg{Kind: ctl.Probe}, probeWait)
			answers <- answer{r: r, Answer: v, lost: err != nil}
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
		case a.Verdict != nil && theirs == nil:
			theirs = revokedError(*a.Verdict)
		}
		if a.Failure != "" && a.r < firstBy {
			first, firstBy = a.Failure, a.r
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
// error is settled into the verdict instead: AsyncError.) A rank that
// does not adopt re tells nothing: one whose user destroyed or aborted it
// meanwhile is lost itself, and its verdict would name only the ranks
// lost before it (TestDetectTellsOnlyItsOwnVerdict); one that adopted
// another verdict meanwhile leaves that verdict's rank to tell it, so
// that every survivor ends with the same one.
func (c *Comm) tell(re *RevokedError) {
	if !c.record(re) {
		return
	}
	_ = c.abortAll()
	msg := ctl.RevokeMsg(re.verdict())
	var wg sync.WaitGroup
	for r := range c.n {
		if r != c.rank && !slices.Contains(re.Failed, r) {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = c.ctl.Ask(r, msg, probeWait) }()
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
