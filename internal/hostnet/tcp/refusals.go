package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// refusalLogInterval is the shortest time between two summary lines of one
// Listener. A flood of strangers (a port scanner, another job on the same
// port) costs one line when it starts and one line per interval after
// that, so the lines that matter (the ranks' own errors) stay readable.
const refusalLogInterval = 5 * time.Second

// maxTrackedAddrs caps the set of distinct addresses a Listener remembers
// for its counts, so that a flood from many addresses cannot grow memory
// without bound; beyond it the count reads "at least".
const maxTrackedAddrs = 4096

// refusalKind sorts refused connections by what they tell the user.
type refusalKind int

const (
	refusedSilent   refusalKind = iota // sent nothing after the challenge
	refusedEvicted                     // dropped to make room for newer connections
	refusedSlow                        // started answering, then stalled
	refusedAuth                        // wrong secret
	refusedProtocol                    // not a flagcx peer, or another version
	refusedHungUp                      // closed the connection mid-handshake
	refusedOther
	refusedAccept // accept(2) itself failed: not a stranger, this host is short of something
	nRefusalKinds
)

func (k refusalKind) describe(n int, firstByte time.Duration) string {
	switch k {
	case refusedSilent:
		return fmt.Sprintf("%d sent nothing within %v", n, firstByte)
	case refusedEvicted:
		return fmt.Sprintf("%d dropped unanswered to make room for newer connections", n)
	case refusedSlow:
		return fmt.Sprintf("%d too slow", n)
	case refusedAuth:
		return fmt.Sprintf("%d wrong secret", n)
	case refusedProtocol:
		return fmt.Sprintf("%d not a flagcx peer of this version", n)
	case refusedHungUp:
		return fmt.Sprintf("%d hung up", n)
	case refusedAccept:
		return fmt.Sprintf("%d failed accepts", n)
	}
	return fmt.Sprintf("%d other errors", n)
}

// evictedError: the listener dropped this connection, still unanswered, to
// stay under its bound of unauthenticated connections.
type evictedError struct{ bound int }

func (e *evictedError) Error() string {
	return fmt.Sprintf("dropped unanswered: more than %d connections were waiting to prove the secret, and this was the oldest", e.bound)
}

func (e *evictedError) Is(target error) bool { return target == wire.ErrTimeout }

func classifyRefusal(err error) refusalKind {
	var se *silentError
	var ee *evictedError
	switch {
	case errors.As(err, &ee):
		return refusedEvicted
	case errors.As(err, &se):
		return refusedSilent
	case errors.Is(err, wire.ErrAuth):
		return refusedAuth
	case errors.Is(err, wire.ErrProtocol):
		return refusedProtocol
	case errors.Is(err, wire.ErrTimeout):
		return refusedSlow
	case errors.Is(err, wire.ErrClosed):
		return refusedHungUp
	}
	return refusedOther
}

// refusalCounts is a tally of refused connections by kind and address.
type refusalCounts struct {
	n      int
	kinds  [nRefusalKinds]int
	addrs  map[string]struct{}
	capped bool
}

func (c *refusalCounts) add(host string, k refusalKind) {
	c.n++
	c.kinds[k]++
	if k == refusedAccept {
		return
	}
	if c.addrs == nil {
		c.addrs = make(map[string]struct{})
	}
	if _, ok := c.addrs[host]; !ok {
		if len(c.addrs) < maxTrackedAddrs {
			c.addrs[host] = struct{}{}
		} else {
			c.capped = true
		}
	}
}

// strangers counts the refused connections that came from somebody else
// (everything but this host's own accept failures).
func (c *refusalCounts) strangers() int { return c.n - c.kinds[refusedAccept] }

func (c *refusalCounts) addrCount() string {
	s := fmt.Sprintf("%d address", len(c.addrs))
	if len(c.addrs) != 1 {
		s += "es"
	}
	if c.capped {
		s = "at least " + s
	}
	return s
}

func (c *refusalCounts) breakdown(firstByte time.Duration) string {
	var parts []string
	for k := refusalKind(0); k < nRefusalKinds; k++ {
		if c.kinds[k] > 0 {
			parts = append(parts, k.describe(c.kinds[k], firstByte))
		}
	}
	return strings.Join(parts, ", ")
}

// refusalLog counts a Listener's refused connections and logs them (on
// stderr) without flooding it: the first refusal in full, then at most one
// summary line per refusalLogInterval, and a last one when the Listener
// closes. The totals also go into Accept's timeout error, so that a rank
// that waited in vain learns that strangers were knocking meanwhile.
type refusalLog struct {
	addr      string // the listener's
	firstByte time.Duration

	mu       sync.Mutex
	out      io.Writer
	total    refusalCounts
	window   refusalCounts // since the last line
	first    bool          // the first refusal was written
	lastLine time.Time
	timer    *time.Timer
	closed   bool
}

// record counts one refusal; quiet is true when SetOnRefused's function
// took over the reporting.
func (r *refusalLog) record(remote string, err error, quiet bool) {
	k := refusedAccept
	host := "(this host)"
	if remote != "" {
		k = classifyRefusal(err)
		host = remote
		if h, _, e := net.SplitHostPort(remote); e == nil {
			host = h
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.add(host, k)
	if quiet || r.closed {
		return
	}
	if !r.first {
		r.first = true
		r.lastLine = time.Now()
		from := "from " + remote
		if remote == "" {
			from = "(accept failed)"
		}
		r.say(fmt.Sprintf("refused connection %s to %s: %v (further refusals are summed up every %v)",
			from, r.addr, err, refusalLogInterval))
		return
	}
	r.window.add(host, k)
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Until(r.lastLine.Add(refusalLogInterval)), r.flush)
	}
}

// say writes one line, "flagcx hostnet: msg", through the process's
// logger (to out instead when a test set it).
func (r *refusalLog) say(msg string) {
	log := flog.Default()
	if r.out != nil {
		log = flog.To(r.out)
	}
	log.Info(msg, flog.KeyComponent, "hostnet")
}

func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	r.flushLocked()
}

func (r *refusalLog) flushLocked() {
	w := r.window
	if w.n == 0 {
		return
	}
	s := "s"
	if w.n == 1 {
		s = ""
	}
	since := "in under a second"
	if d := time.Since(r.lastLine); d >= time.Second {
		since = fmt.Sprintf("in the last %v", d.Round(100*time.Millisecond))
	}
	r.say(fmt.Sprintf("refused %d more connection%s to %s from %s %s (%s)",
		w.n, s, r.addr, w.addrCount(), since, w.breakdown(r.firstByte)))
	r.window = refusalCounts{}
	r.lastLine = time.Now()
}

// close writes what the summary has not said yet; later refusals (cut
// handshakes of a closing listener) are not news.
func (r *refusalLog) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.flushLocked()
}

// strangerNote describes the strangers refused so far, for an error that
// would otherwise blame the ranks alone; "" when there were none.
func (r *refusalLog) strangerNote() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.total
	n := t.strangers()
	if n == 0 {
		return ""
	}
	what := fmt.Sprintf("%d connections from strangers (%s) were", n, t.addrCount())
	if n == 1 {
		what = fmt.Sprintf("1 connection from a stranger (%s) was", t.addrCount())
	}
	t.kinds[refusedAccept] = 0
	return fmt.Sprintf("meanwhile %s refused (%s). Is another job, or a port scanner, connecting to this port?",
		what, t.breakdown(r.firstByte))
}

// SetRefusalLog sends l's refusal lines to w instead of stderr (tests
// that count what a flood of strangers costs: tcp's and the mesh's).
func (l *Listener) SetRefusalLog(w io.Writer) {
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	l.log.out = w
}

// Refused is how many connections l has refused so far.
func (l *Listener) Refused() int {
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	return l.log.total.n
}
