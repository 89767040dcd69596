//go:build linux

package shm

import (
	"fmt"
	"time"
)

// HostRank is what mapping needs of one rank of the host: its rank, the
// name of its segment and its pid (the Peer it announced).
type HostRank struct {
	Rank int
	Shm  string
	Pid  int
}

// Host is what MapHost builds for this rank: a link to every other rank
// of the host (Links[i] for local[i], nil at this rank), the ShmNode
// between them all, and the other ranks' segments it mapped (the caller
// closes them after the node).
type Host struct {
	Links []*ShmLink
	Node  *ShmNode
	Segs  []*ShmSegment
}

// MapHost maps the segments of the ranks in local (this host's ranks that
// share memory, ascending by rank, this rank at index me with its own
// segment own) and builds the shm links and the ShmNode between them.
// On error the segments mapped so far are in the returned Host's Segs, so
// the caller can close them.
func MapHost(sc ShmConfig, own *ShmSegment, local []HostRank, me int, timeout time.Duration) (*Host, error) {
	h := &Host{Links: make([]*ShmLink, len(local))}
	if err := CheckShmCapacity(len(local), sc, ReadHostMemory(sc)); err != nil {
		return h, err
	}
	// Every rank checks its own rings before mapping anything, so that with
	// equal settings all fail alike rather than some finding the others'
	// segments already gone.
	if _, err := inboundRing(own, 0, len(local)-1); err != nil {
		return h, err
	}
	segs := make([]*ShmSegment, len(local))
	for i, p := range local {
		if i == me {
			segs[i] = own
			continue
		}
		s, err := openShmSegment(sc.Path(), p.Shm, p.Pid)
		if err != nil {
			return h, fmt.Errorf("%w: mapping the shared memory of rank %d: %w (set %s=1 to use TCP)", ErrShmUnavailable, p.Rank, err, EnvShmDisable)
		}
		segs[i] = s
		h.Segs = append(h.Segs, s)
	}
	peers := len(local) - 1
	pol := policyFor(len(local))
	// ringIndex is the inbound ring that rank index `from` uses in the
	// segment of rank index `owner`.
	ringIndex := func(owner, from int) int {
		if from > owner {
			return from - 1
		}
		return from
	}
	ranks := make([]int, len(local))
	for i, p := range local {
		ranks[i] = p.Rank
		if i == me {
			continue
		}
		tx, err := inboundRing(segs[i], ringIndex(i, me), peers)
		if err != nil {
			return h, err
		}
		rx, err := inboundRing(segs[me], ringIndex(me, i), peers)
		if err != nil {
			return h, err
		}
		l := &ShmLink{peerRank: p.Rank, peerPid: segs[i].pid, timeout: timeout, pol: pol, tx: tx, rx: rx}
		l.sendWatch, l.recvWatch = &shmLinkWatch{l, "send to"}, &shmLinkWatch{l, "recv from"}
		h.Links[i] = l
	}
	h.Node = &ShmNode{ranks: ranks, me: me, segs: segs, timeout: timeout, pol: pol}
	for i := range local {
		h.Node.watch = append(h.Node.watch, &nodeWatch{h.Node, i})
	}
	return h, nil
}
