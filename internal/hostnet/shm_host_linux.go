//go:build linux

package hostnet

import "fmt"

// mapHost maps the segments of the ranks in local (this host's ranks that
// share memory, ascending, this rank among them) and builds the shm links
// and the ShmNode between them.
func (m *Mesh) mapHost(mc MeshConfig, local []int) error {
	if err := CheckShmCapacity(len(local), mc.Shm, ReadHostMemory(mc.Shm)); err != nil {
		return err
	}
	// Every rank checks its own rings before mapping anything, so that with
	// equal settings all fail alike rather than some finding the others'
	// segments already gone.
	if _, err := inboundRing(mc.Segment, 0, len(local)-1); err != nil {
		return err
	}
	me := 0
	segs := make([]*ShmSegment, len(local))
	for i, r := range local {
		if r == mc.Rank {
			me, segs[i] = i, mc.Segment
			continue
		}
		p := mc.Peers[r]
		s, err := openShmSegment(mc.Shm.dir(), p.Shm, p.Pid)
		if err != nil {
			return fmt.Errorf("%w: mapping the shared memory of rank %d: %w (set %s=1 to use TCP)", ErrShmUnavailable, r, err, EnvShmDisable)
		}
		segs[i] = s
		m.segs = append(m.segs, s)
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
	for i, r := range local {
		if i == me {
			continue
		}
		tx, err := inboundRing(segs[i], ringIndex(i, me), peers)
		if err != nil {
			return err
		}
		rx, err := inboundRing(segs[me], ringIndex(me, i), peers)
		if err != nil {
			return err
		}
		l := &ShmLink{peerRank: r, peerPid: segs[i].pid, timeout: mc.Net.Timeout, pol: pol, tx: tx, rx: rx}
		l.sendWatch, l.recvWatch = &shmLinkWatch{l, "send to"}, &shmLinkWatch{l, "recv from"}
		m.Links[r] = l
	}
	m.Node = &ShmNode{ranks: local, me: me, segs: segs, timeout: mc.Net.Timeout, pol: pol}
	for i := range local {
		m.Node.watch = append(m.Node.watch, &nodeWatch{m.Node, i})
	}
	return nil
}
