package core

import (
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"

	"github.com/flagcx/flagcx-go/internal/sched"
)

// label makes call's digest label every host transfer and step of the
// plan that runs it, on all of this rank's host communicators (steps of
// one call run on several), until the returned func.
func (c *Comm) label(call sched.Call) func() {
	cur := hostcomm.CallOf(call)
	comms := []*hostcomm.Comm{c.world, c.intra, c.inter}
	for _, h := range comms {
		if h != nil {
			h.SetOuter(cur)
		}
	}
	return func() {
		for _, h := range comms {
			if h != nil {
				h.SetOuter(hostcomm.Call{})
			}
		}
	}
}

// leadersTalkTCP reports whether two cluster leaders are linked by TCP:
// the staged schedules then cut calls into fewer, larger chunks
// (sched.TCPMinChunk). Every rank reads the same table (start), so every
// rank decides alike.
func (c *Comm) leadersTalkTCP() bool {
	n, rec := c.n, c.n+1
	if len(c.world.Links()) != n*rec {
		return false
	}
	for _, a := range c.layout.Clusters {
		for _, b := range c.layout.Clusters {
			if a.Leader != b.Leader && c.world.Links()[a.Leader*rec+1+b.Leader] == hostcomm.LinkTCP {
				return true
			}
		}
	}
	return false
}

// notifyAll tells the peers on every host communicator of c what failed
// first: a heterogeneous call fails on one of them, while its peers may
// wait on another (a leader on the leaders' links, say).
func (c *Comm) notifyAll(err error) {
	for _, h := range []*hostcomm.Comm{c.world, c.intra, c.inter} {
		if h != nil {
			h.NotifyPeers(err)
		}
	}
}

// firstReported is the first failure this rank told its peers of, on any
// of its host communicators, or "".
func (c *Comm) firstReported() string {
	for _, h := range []*hostcomm.Comm{c.world, c.intra, c.inter} {
		if h != nil {
			if w := h.Reported(); w != "" {
				return w
			}
		}
	}
	return ""
}
