package hostnet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// maxHandshakes bounds the handshakes a Listener runs at once; further
	// connections wait in the kernel's backlog.
	maxHandshakes = 64
	// readyQueue is how many authenticated connections may wait for Accept.
	readyQueue = 256
)

// Listener accepts authenticated connections. It starts accepting and
// handshaking at once (in the background), so a Dial completes even before
// Accept is called; Accept hands out the peers that passed, in the order
// their handshakes completed. Several goroutines may call Accept.
//
// Peers that fail the handshake (wrong secret, not a hostnet peer, another
// protocol version, too slow) are closed and reported to the function set
// with SetOnRefused (default: one line on stderr prefixed "flagcx
// hostnet:"); they never reach Accept.
type Listener struct {
	ln     net.Listener
	cfg    Config
	secret Secret
	addr   string

	onRefused atomic.Pointer[func(remote string, err error)]

	closed    chan struct{}
	closeOnce sync.Once
	ready     chan accepted
	ackMu     sync.Mutex // orders verdicts and queueing: dial order = accept order
	sem       chan struct{}
	wg        sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{}
}

type accepted struct {
	conn  *Conn
	hello []byte
}

// Listen listens on a free port of the address LocalAddr(cfg) picks.
func Listen(cfg Config, secret Secret) (*Listener, error) {
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
func ListenAddr(addr string, cfg Config, secret Secret) (*Listener, error) {
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

func newListener(ln net.Listener, cfg Config, secret Secret) *Listener {
	l := &Listener{
		ln:      ln,
		cfg:     cfg,
		secret:  secret,
		closed:  make(chan struct{}),
		ready:   make(chan accepted, readyQueue),
		sem:     make(chan struct{}, maxHandshakes),
		pending: make(map[net.Conn]struct{}),
	}
	l.addr = dialableAddr(ln.Addr().(*net.TCPAddr), cfg)
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
// handshake (nil restores the default, a line on stderr). It may be called
// at any time; the function may be called from several goroutines at once.
func (l *Listener) SetOnRefused(f func(remote string, err error)) {
	if f == nil {
		l.onRefused.Store(nil)
		return
	}
	l.onRefused.Store(&f)
}

func (l *Listener) refused(remote string, err error) {
	select {
	case <-l.closed:
		return // handshakes cut short by Close are not news
	default:
	}
	if f := l.onRefused.Load(); f != nil {
		(*f)(remote, err)
		return
	}
	fmt.Fprintf(os.Stderr, "flagcx hostnet: refused connection from %s to %s: %v\n", remote, l.addr, err)
}

// Accept waits up to cfg.Timeout (forever if not positive) for a peer that
// passed the handshake and returns its connection and the hello it sent.
// It returns an error wrapping ErrTimeout when none came in time (the
// Listener stays usable), and one wrapping ErrClosed after Close.
func (l *Listener) Accept() (*Conn, []byte, error) {
	select {
	case <-l.closed:
		return nil, nil, fmt.Errorf("hostnet: accept on %s: %w (listener closed)", l.addr, ErrClosed)
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
		return nil, nil, fmt.Errorf("hostnet: accept on %s: %w (listener closed)", l.addr, ErrClosed)
	case <-timeout:
		return nil, nil, fmt.Errorf("hostnet: accept on %s: no peer completed the handshake within %v (are the other ranks running, with the same unique id? %s sets the limit): %w",
			l.addr, l.cfg.Timeout, EnvTimeout, ErrTimeout)
	}
}

// Close stops listening, cuts handshakes in progress and closes the
// connections nobody accepted yet; a blocked Accept returns ErrClosed.
// Connections already returned by Accept stay open.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
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
			l.refused("(accept)", fmt.Errorf("accept failed, retrying in %v: %w", backoff, err))
			select {
			case <-time.After(backoff):
			case <-l.closed:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		select {
		case l.sem <- struct{}{}:
		case <-l.closed:
			nc.Close()
			return
		}
		l.mu.Lock()
		select {
		case <-l.closed:
			l.mu.Unlock()
			nc.Close()
			<-l.sem
			return
		default:
		}
		l.pending[nc] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(nc.(*net.TCPConn))
	}
}

func (l *Listener) handshake(nc *net.TCPConn) {
	defer l.wg.Done()
	defer func() { <-l.sem }()
	remote := nc.RemoteAddr().String()
	drop := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, ok := l.pending[nc]
		delete(l.pending, nc)
		return ok
	}
	p, err := acceptHandshake(nc, l.cfg, l.secret)
	if err != nil {
		drop()
		nc.Close()
		l.refused(remote, err)
		return
	}
	// Verdict and queueing under one lock: a dialer that dials again after
	// its Dial returned is queued after its previous connection.
	l.ackMu.Lock()
	defer l.ackMu.Unlock()
	if err := acceptVerdict(nc, l.cfg, l.secret, p); err != nil {
		drop()
		nc.Close()
		l.refused(remote, err)
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

// Dial connects to a Listener at addr ("ip:port", "[ip6]:port",
// "host:port"), proves the secret and sends hello (at most MaxHello bytes)
// which the acceptor's Accept returns. A refused connection (no listener
// yet) is retried with a short backoff until cfg.Timeout; then Dial fails
// with an error naming addr and wrapping ErrTimeout. A listener holding
// another secret gives an error wrapping ErrAuth.
func Dial(addr string, cfg Config, secret Secret, hello []byte) (*Conn, error) {
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
	var nc net.Conn
	for {
		d := net.Dialer{Deadline: deadline}
		var err error
		nc, err = d.Dial(network, addr)
		if err == nil {
			break
		}
		var ne net.Error
		refused := errors.Is(err, syscall.ECONNREFUSED)
		timedOut := errors.As(err, &ne) && ne.Timeout()
		if refused && (deadline.IsZero() || time.Until(deadline) > 0) {
			wait := backoff
			if !deadline.IsZero() {
				wait = min(wait, time.Until(deadline))
			}
			time.Sleep(wait)
			backoff = min(2*backoff, 100*time.Millisecond)
			continue
		}
		if refused || timedOut {
			return nil, fmt.Errorf("hostnet: dial %s: no listener accepted the connection within %v (last error: %v); check that the peer is running and that %s picks an interface both hosts can reach: %w",
				addr, cfg.Timeout, err, EnvSocketIfName, ErrTimeout)
		}
		return nil, fmt.Errorf("hostnet: dial %s: %w", addr, err)
	}
	tc := nc.(*net.TCPConn)
	if err := dialHandshake(tc, addr, cfg, secret, hello); err != nil {
		tc.Close()
		return nil, err
	}
	return newConn(tc, cfg.Timeout), nil
}
