package tcp

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// How a Listener keeps strangers from starving its peers.
//
// Every accepted connection gets its own handshake goroutine at once: no
// fixed pool of handshake slots exists that idle connections could fill
// while the ranks wait in the kernel's backlog behind them. What is bounded
// is the number of connections that have not proven the secret yet
// (maxUnauthenticated); past it, the oldest of them is dropped. A real
// peer answers the challenge within a round trip, so among unanswered
// connections it is always one of the youngest, and the oldest are the
// strangers that connected and said nothing (or are dribbling bytes): a
// flood of them costs each at most FirstByteTimeout and can never push out
// a peer that answers promptly. Should a peer be dropped anyway (a flood
// faster than it can answer), it is told "busy" and Dial connects again.
// Connections that proved the secret are outside the bound: only holders
// of the secret can make them.
const (
	// maxUnauthenticated leaves room for the sockets a communicator's own
	// peers open at once (Streams per higher rank, each unanswered for a
	// round trip only; past it they are told "busy" and dial again) while
	// keeping a flood's file descriptors well under the common per-process
	// hard limits (4096 and up; Go raises the soft limit to the hard one).
	maxUnauthenticated = 1024
	// readyQueue is how many authenticated connections may wait for Accept.
	readyQueue = 256
)

// Listener accepts authenticated connections. It starts accepting and
// handshaking at once (in the background), so a Dial completes even before
// Accept is called; Accept hands out the peers that passed, in the order
// their handshakes completed. Several goroutines may call Accept.
//
// Peers that fail the handshake (wrong secret, not a hostnet peer, another
// protocol version, silent for FirstByteTimeout, too slow) are closed and
// never reach Accept. They are counted, and reported to the function set
// with SetOnRefused, or by default on stderr (prefixed "flagcx hostnet:")
// without flooding it: the first refusal in full, then one summary line per
// few seconds. When Accept times out, its error says how many strangers
// were refused meanwhile.
type Listener struct {
	ln     net.Listener
	cfg    Config
	secret wire.Secret
	addr   string

	onRefused atomic.Pointer[func(remote string, err error)]
	log       refusalLog

	closed    chan struct{}
	closeOnce sync.Once
	ready     chan accepted
	ackMu     sync.Mutex // orders verdicts and queueing: dial order = accept order
	wg        sync.WaitGroup

	mu       sync.Mutex
	pending  map[*net.TCPConn]*hsConn // every connection not yet handed to Accept
	unauth   list.List                // of *hsConn not yet past the secret, oldest first
	maxUnaut int                      // maxUnauthenticated; tests lower it
}

// hsConn is one connection in its handshake. Fields other than nc are
// guarded by Listener.mu.
type hsConn struct {
	nc      *net.TCPConn
	elem    *list.Element // in Listener.unauth; nil once past the secret or evicted
	evicted bool
}

type accepted struct {
	conn  *Conn
	hello []byte
}

// Listen listens on a free port of the address LocalAddr(cfg) picks.
func Listen(cfg Config, secret wire.Secret) (*Listener, error) {
	ip, ifname, err := LocalAddr(cfg)
	if err != nil {
		return nil, err
	}
	la := &net.TCPAddr{IP: ip}
	if ip.To4() == nil && ip.IsLinkLocalUnicast() {
		la.Zone = ifname
	}
	network := "tcp6"
	if ip.To4() != nil {
		network = "tcp4"
	}
	ln, err := net.ListenTCP(network, la)
	if err != nil {
		return nil, fmt.Errorf("hostnet: listen on %s (interface %s): %w", la, ifname, err)
	}
	return newListener(ln, cfg, secret), nil
}

// ListenAddr listens on an explicit "host:port": "127.0.0.1:0",
// "[::1]:29500", "node3:0", ":0". Addr reports an address peers can dial:
// an unspecified host (":0", "0.0.0.0", "[::]") is replaced by
// LocalAddr(cfg). cfg.Family restricts how a host name resolves.
func ListenAddr(addr string, cfg Config, secret wire.Secret) (*Listener, error) {
	ln, err := net.Listen(tcpNetwork(cfg.Family), addr)
	if err != nil {
		return nil, fmt.Errorf("hostnet: listen on %s: %w", addr, err)
	}
	return newListener(ln, cfg, secret), nil
}

func tcpNetwork(family int) string {
	switch family {
	case 4:
		return "tcp4"
	case 6:
		return "tcp6"
	}
	return "tcp"
}

func newListener(ln net.Listener, cfg Config, secret wire.Secret) *Listener {
	l := &Listener{
		ln:       ln,
		cfg:      cfg,
		secret:   secret,
		closed:   make(chan struct{}),
		ready:    make(chan accepted, readyQueue),
		pending:  make(map[*net.TCPConn]*hsConn),
		maxUnaut: maxUnauthenticated,
	}
	l.addr = dialableAddr(ln.Addr().(*net.TCPAddr), cfg)
	l.log.addr = l.addr
	l.log.firstByte = firstByteTimeout(cfg)
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// dialableAddr turns a listening address into one a peer can dial.
func dialableAddr(ta *net.TCPAddr, cfg Config) string {
	ip, zone := ta.IP, ta.Zone
	if ip == nil || ip.IsUnspecified() {
		c := cfg
		if ip != nil && ip.To4() != nil {
			c.Family = 4
		}
		ip, zone = nil, ""
		if lip, ifname, err := LocalAddr(c); err == nil {
			ip = lip
			if ip.To4() == nil && ip.IsLinkLocalUnicast() {
				zone = ifname
			}
		} else if c.Family == 6 {
			ip = net.IPv6loopback
		} else {
			ip = net.IPv4(127, 0, 0, 1)
		}
	}
	host := ip.String()
	if zone != "" {
		host += "%" + zone
	}
	return net.JoinHostPort(host, fmt.Sprint(ta.Port))
}

// Addr is the address peers dial: "ip:port" or "[ip6]:port", never an
// unspecified address.
func (l *Listener) Addr() string { return l.addr }

// SetOnRefused sets the function told about each peer that failed the
// handshake, instead of the default summary on stderr (nil restores it).
// It may be called at any time; the function may be called from several
// goroutines at once. Refusals are counted either way.
func (l *Listener) SetOnRefused(f func(remote string, err error)) {
	if f == nil {
		l.onRefused.Store(nil)
		return
	}
	l.onRefused.Store(&f)
}

// refused reports a failed handshake; remote is "" for a failed accept.
func (l *Listener) refused(remote string, err error) {
	select {
	case <-l.closed:
		return // handshakes cut short by Close are not news
	default:
	}
	f := l.onRefused.Load()
	l.log.record(remote, err, f != nil)
	if f != nil {
		if remote == "" {
			remote = "(accept)"
		}
		(*f)(remote, err)
	}
}

// Accept waits up to cfg.Timeout (forever if not positive) for a peer that
// passed the handshake and returns its connection and the hello it sent.
// It returns an error wrapping ErrTimeout when none came in time (the
// Listener stays usable; the error also counts the strangers refused
// meanwhile), and one wrapping ErrClosed after Close.
func (l *Listener) Accept() (*Conn, []byte, error) {
	select {
	case <-l.closed:
		return nil, nil, fmt.Errorf("hostnet: accept on %s: %w (listener closed)", l.addr, wire.ErrClosed)
	default:
	}
	var timeout <-chan time.Time
	if l.cfg.Timeout > 0 {
		t := time.NewTimer(l.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case a := <-l.ready:
		return a.conn, a.hello, nil
	case <-l.closed:
		return nil, nil, fmt.Errorf("hostnet: accept on %s: %w (listener closed)", l.addr, wire.ErrClosed)
	case <-timeout:
		if note := l.log.strangerNote(); note != "" {
			// Strangers cannot fill the listener (see above), so they are
			// not why the peers are missing; but they hint at a port shared
			// with another job, which the user should hear about first.
			return nil, nil, fmt.Errorf("hostnet: accept on %s: no flagcx peer completed the handshake within %v; %s They did not keep the ranks out: check that the other ranks are running with the same unique id, and give each job a port of its own (%s sets the limit); %s: %w",
				l.addr, l.cfg.Timeout, note, EnvTimeout, ifaceNote(l.cfg), wire.ErrTimeout)
		}
		return nil, nil, fmt.Errorf("hostnet: accept on %s: no peer completed the handshake within %v (are the other ranks running, with the same unique id, and can they reach this address? %s sets the limit); %s: %w",
			l.addr, l.cfg.Timeout, EnvTimeout, ifaceNote(l.cfg), wire.ErrTimeout)
	}
}

// Close stops listening, cuts handshakes in progress and closes the
// connections nobody accepted yet; a blocked Accept returns ErrClosed.
// Connections already returned by Accept stay open.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.log.close()
		close(l.closed)
		err = l.ln.Close()
		l.mu.Lock()
		for nc := range l.pending {
			nc.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	drain:
		for {
			select {
			case a := <-l.ready:
				a.conn.Close()
			default:
				break drain
			}
		}
	})
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: report, wait, try again (as net/http does).
			l.refused("", fmt.Errorf("accept failed, retrying in %v: %w", backoff, err))
			select {
			case <-time.After(backoff):
			case <-l.closed:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		tc := nc.(*net.TCPConn)
		h := &hsConn{nc: tc}
		l.mu.Lock()
		select {
		case <-l.closed:
			l.mu.Unlock()
			nc.Close()
			return
		default:
		}
		l.pending[tc] = h
		h.elem = l.unauth.PushBack(h)
		if l.unauth.Len() > l.maxUnaut {
			// The oldest goes: see "How a Listener keeps strangers from
			// starving its peers" above. Its handshake goroutine finds its
			// reads failing at once and tells it to dial again.
			old := l.unauth.Remove(l.unauth.Front()).(*hsConn)
			old.elem = nil
			old.evicted = true
			_ = old.nc.SetReadDeadline(time.Now())
		}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(h)
	}
}

// arm sets h's deadline d from now for its next handshake step; an evicted
// connection's reads fail at once instead. Under l.mu, so that an eviction
// cannot be undone by a step arming its deadline just after.
func (l *Listener) arm(h *hsConn, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = h.nc.SetDeadline(time.Now().Add(d))
	if h.evicted {
		_ = h.nc.SetReadDeadline(time.Now())
	}
}

func (l *Listener) handshake(h *hsConn) {
	defer l.wg.Done()
	nc := h.nc
	remote := nc.RemoteAddr().String()
	drop := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, ok := l.pending[nc]
		delete(l.pending, nc)
		if h.elem != nil {
			l.unauth.Remove(h.elem)
			h.elem = nil
		}
		return ok
	}
	refuse := func(err error) {
		drop()
		nc.Close()
		l.refused(remote, err)
	}
	p, err := acceptHandshake(nc, l.cfg, l.secret, func(d time.Duration) { l.arm(h, d) })
	if err != nil {
		l.mu.Lock()
		evicted := h.evicted
		l.mu.Unlock()
		var se *silentError
		if evicted {
			err = &evictedError{bound: l.maxUnauthBound()}
		}
		if evicted || errors.As(err, &se) {
			sendBusy(nc) // a real peer, however slow, dials again
		}
		refuse(err)
		return
	}
	l.mu.Lock()
	if h.elem != nil {
		l.unauth.Remove(h.elem)
		h.elem = nil
	}
	l.mu.Unlock()
	// Verdict and queueing under one lock: a dialer that dials again after
	// its Dial returned is queued after its previous connection.
	l.ackMu.Lock()
	defer l.ackMu.Unlock()
	if err := acceptVerdict(nc, l.cfg, l.secret, p); err != nil {
		refuse(err)
		return
	}
	if !drop() { // Close got here first and closed it
		return
	}
	c := newConn(nc, l.cfg.Timeout)
	select {
	case l.ready <- accepted{conn: c, hello: p.hello}:
	case <-l.closed:
		c.Close()
	}
}

func (l *Listener) maxUnauthBound() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxUnaut
}

// Dial connects to a Listener at addr ("ip:port", "[ip6]:port",
// "host:port"), proves the secret and sends hello (at most MaxHello bytes)
// which the acceptor's Accept returns. A refused connection (no listener
// yet), or one the listener dropped as busy, is retried with a short
// backoff until cfg.Timeout; then Dial fails with an error naming addr and
// wrapping ErrTimeout. A listener holding another secret gives an error
// wrapping ErrAuth.
func Dial(addr string, cfg Config, secret wire.Secret, hello []byte) (*Conn, error) {
	if len(hello) > MaxHello {
		return nil, fmt.Errorf("hostnet: dial %s: hello of %d bytes is above the %d-byte limit", addr, len(hello), MaxHello)
	}
	start := time.Now()
	var deadline time.Time
	if cfg.Timeout > 0 {
		deadline = start.Add(cfg.Timeout)
	}
	network := tcpNetwork(cfg.Family)
	backoff := 2 * time.Millisecond
	sleep := func() {
		wait := backoff
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		time.Sleep(wait)
		backoff = min(2*backoff, 100*time.Millisecond)
	}
	busy := 0
	for {
		d := net.Dialer{Deadline: deadline}
		nc, err := d.Dial(network, addr)
		if err != nil {
			var ne net.Error
			refused := errors.Is(err, syscall.ECONNREFUSED)
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if refused && (deadline.IsZero() || time.Until(deadline) > 0) {
				sleep()
				continue
			}
			if busy > 0 {
				return nil, fmt.Errorf("hostnet: dial %s: the listener dropped this peer's connection %d times as busy, and no attempt got through within %v (last error: %w): is something flooding that port with connections? %s sets the limit: %w",
					addr, busy, cfg.Timeout, err, EnvTimeout, wire.ErrTimeout)
			}
			if refused || timedOut {
				return nil, fmt.Errorf("hostnet: dial %s: no listener accepted the connection within %v (last error: %w); check that the peer is running and that %s picks an interface both hosts can reach; %s: %w",
					addr, cfg.Timeout, err, EnvSocketIfName, ifaceNote(cfg), wire.ErrTimeout)
			}
			return nil, fmt.Errorf("hostnet: dial %s: %w; %s", addr, err, ifaceNote(cfg))
		}
		tc := nc.(*net.TCPConn)
		err = dialHandshake(tc, addr, cfg, secret, hello)
		if err == nil {
			return newConn(tc, cfg.Timeout), nil
		}
		tc.Close()
		if !errors.Is(err, errBusy) {
			return nil, err
		}
		busy++
		if !deadline.IsZero() && time.Until(deadline) <= 0 {
			return nil, fmt.Errorf("hostnet: dial %s: the listener dropped this peer's connection %d times as busy within %v: is something flooding that port with connections? %s sets the limit: %w",
				addr, busy, cfg.Timeout, EnvTimeout, wire.ErrTimeout)
		}
		sleep()
	}
}
