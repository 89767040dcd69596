//go:build linux

package hostnet

import "github.com/flagcx/flagcx-go/internal/hostnet/shm"

// mapHost maps the segments of the ranks in local (this host's ranks that
// share memory, ascending, this rank among them) and builds the shm links
// and the shm.ShmNode between them (shm.MapHost).
func (m *Mesh) mapHost(mc MeshConfig, local []int) error {
	ranks := make([]shm.HostRank, len(local))
	me := 0
	for i, r := range local {
		if r == mc.Rank {
			me = i
		}
		ranks[i] = shm.HostRank{Rank: r, Shm: mc.Peers[r].Shm, Pid: mc.Peers[r].Pid}
	}
	h, err := shm.MapHost(mc.Shm, mc.Segment, ranks, me, mc.Net.Timeout)
	if h != nil {
		m.segs = append(m.segs, h.Segs...)
	}
	if err != nil {
		return err
	}
	for i, r := range local {
		if i != me {
			m.Links[r] = h.Links[i]
		}
	}
	m.Node = h.Node
	return nil
}
