package hostcomm

import (
	"context"
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// Link codes: what carries each pair of ranks, as every rank tells the
// others at start (Comm.start) so that any rank can print the whole table.
const (
	linkSelf byte = iota
	linkShm
	LinkTCP
	linkIB
)

var linkNames = [...]string{linkSelf: "self", linkShm: "shm", LinkTCP: "tcp", linkIB: "ib"}

// LinkCodes is this rank's link to each rank.
func (c *Comm) LinkCodes() []byte {
	codes := make([]byte, c.nranks)
	for p, l := range c.mesh.Links {
		switch {
		case l == nil:
			codes[p] = linkSelf
		case l.Transport() == "shm":
			codes[p] = linkShm
		case l.Transport() == "ib":
			codes[p] = linkIB
		default:
			codes[p] = LinkTCP
		}
	}
	return codes
}

// logLinks writes, with FLAGCX_DEBUG=INFO (subsystem NET), one line per
// link: the peer, its host, and what carries it (interface, addresses and
// sockets for TCP).
func (c *Comm) logLinks() {
	if !flog.Enabled(flog.LevelInfo, flog.Net) {
		return
	}
	for p, l := range c.mesh.Links {
		if l == nil {
			continue
		}
		msg := fmt.Sprintf("link to rank %d%s: %s (%s)", p, c.HostOf(p), hostnet.DescribeLink(l), c.linkWhy(c.rank, p, c.LinkCodes()[p]))
		flog.Default().Log(context.Background(), flog.LevelInfo, msg, flog.KeySubsys, flog.Net, flog.KeyRank, c.rank)
	}
}

// linkWhy says why the pair a, b uses the link of code: the rule of
// hostnet's transport table and net.go.
func (c *Comm) linkWhy(a, b int, code byte) string {
	same := hostnet.SameHost(c.peers[a], c.peers[b])
	switch code {
	case linkShm:
		return "same host"
	case linkIB:
		if c.cfg.Net == hostnet.NetIB {
			return env.Net.Name + "=IB"
		}
		return "other host, both have RDMA devices"
	case LinkTCP:
		switch {
		case same:
			return "same host without shared memory"
		case c.cfg.Net == hostnet.NetSocket:
			return "other host, " + env.Net.Name + "=Socket"
		}
		return "other host, no RDMA device on both"
	}
	return "this rank"
}

// LinkTable is the bench header's and --print-plan's account of the links:
// which link each pair of ranks uses and why, pairs grouped by both
// ("Links: shm (same host): 0-1 2-3; tcp (other host, ...): 0-2 ...").
// Nil before the ranks exchanged their links.
func (c *Comm) LinkTable() []string {
	n, rec := c.nranks, c.nranks+1
	if len(c.links) != n*rec {
		return nil
	}
	var order []string
	groups := map[string][]string{}
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			code := c.links[a*rec+1+b]
			key := fmt.Sprintf("%s (%s)", linkNames[code], c.linkWhy(a, b, code))
			if back := c.links[b*rec+1+a]; back != code {
				key = fmt.Sprintf("%s one way, %s the other", linkNames[code], linkNames[back])
			}
			if _, ok := groups[key]; !ok {
				order = append(order, key)
			}
			groups[key] = append(groups[key], fmt.Sprintf("%d-%d", a, b))
		}
	}
	const maxPairs = 16
	lines := []string{"Links (pairs of ranks):"}
	for _, k := range order {
		pairs := groups[k]
		more := ""
		if len(pairs) > maxPairs {
			more = fmt.Sprintf(" ... (%d pairs)", len(pairs))
			pairs = pairs[:maxPairs]
		}
		lines = append(lines, fmt.Sprintf("  %s: %s%s", k, strings.Join(pairs, " "), more))
	}
	return lines
}
