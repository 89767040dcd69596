package hostnet

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// DescribeLink says what carries l, for the per-link INFO line: the
// transport, and for sockets the local interface, both addresses and the
// socket count ("tcp via eth0 10.0.0.1:41000 -> 10.0.0.2:39000, 2
// sockets"); an ib link names its device and the TCP connection that
// watches the peer.
func DescribeLink(l Link) string {
	switch l := l.(type) {
	case *tcp.TCPLink:
		c := l.Conns()[0]
		n := len(l.Conns())
		return fmt.Sprintf("tcp via %s %s -> %s, %d socket%s", tcp.IfaceOf(c.LocalAddr()), c.LocalAddr(), c.RemoteAddr(), n, plural(n))
	case *NetLink:
		return l.Describe()
	case nil:
		return "self"
	}
	return l.Transport()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
