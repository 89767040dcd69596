//go:build linux

package shm

import "sync/atomic"

// The mesh's tests (internal/hostnet/mesh_test.go, mesh_proc_test.go)
// drive shm links that Connect built and look inside their rings: Probe is
// all they see of them. Nothing else uses it.

// RingHeader is the bytes of a ring area before its slots: a ring of
// area bytes has slots of (area-RingHeader)/8 bytes, rounded down to 64.
const RingHeader = shmPage

// Probe is a view of one ShmLink's rings for tests.
type Probe struct{ l *ShmLink }

// Probe gives tests a view of l's rings.
func (l *ShmLink) Probe() Probe { return Probe{l} }

// SlotSize is the slot size of the outbound ring (the receiver's geometry).
func (p Probe) SlotSize() int { return p.l.tx.slotSize }

// Slots is the slot count of the outbound ring.
func (p Probe) Slots() int { return p.l.tx.slots }

// SendPos is the outbound ring's counter.
func (p Probe) SendPos() uint32 { return p.l.tx.pos }

// RecvPos is the inbound ring's counter.
func (p Probe) RecvPos() uint32 { return p.l.rx.pos }

// SendSleepers counts the senders asleep on a full outbound ring.
func (p Probe) SendSleepers() *uint32 { return p.l.tx.sendSleepers }

// RecvSleepers counts the receivers asleep on an empty inbound ring.
func (p Probe) RecvSleepers() *uint32 { return p.l.rx.recvSleepers }

// StartCountersAt sets every counter of the link's outbound ring and its
// own inbound counter to start, as if start messages had passed; both
// sides of a link must be set before it is used.
func (p Probe) StartCountersAt(start uint32) {
	tx := &p.l.tx
	tx.pos, p.l.rx.pos = start, start
	atomic.StoreUint32(tx.head, start)
	atomic.StoreUint32(tx.tail, start)
}

// PublishPiece makes the outbound ring hold piece `piece` of a message of
// total bytes, as a sender that stalls after it would.
func (p Probe) PublishPiece(total, piece int) {
	r := &p.l.tx
	tp, pp := r.hdr(int(r.pos % uint32(r.slots)))
	*tp, *pp = uint64(total), uint64(piece)
	r.pos++
	shmPost(r.head, r.recvSleepers, r.pos)
}

// WatchSegment maps the segment name in dir that process pid created, for
// a test that waits until a rank sleeps on its step counter: the count of
// ranks asleep there. The caller closes the segment.
func WatchSegment(dir, name string, pid int) (*ShmSegment, *uint32, error) {
	s, err := openShmSegment(dir, name, pid)
	if err != nil {
		return nil, nil, err
	}
	return s, s.sleepers, nil
}

// NodeProbe is a view of a ShmNode for tests.
type NodeProbe struct{ n *ShmNode }

// Probe gives tests a view of n.
func (n *ShmNode) Probe() NodeProbe { return NodeProbe{n} }

// Sleepers counts the ranks asleep on the step counter of the segment of
// rank index i.
func (p NodeProbe) Sleepers(i int) *uint32 { return p.n.segs[i].sleepers }

// StartStepsAt sets this rank's step counters to first, as if first steps
// had passed; every rank of the node must be set before a step.
func (p NodeProbe) StartStepsAt(first uint32) {
	n := p.n
	n.step = first
	own := n.segs[n.me]
	atomic.StoreUint64(&own.sig[first&1], n.sig)
	atomic.StoreUint32(own.seq, first)
}

// Sleepers counts the ranks asleep on s's step counter (for tests).
func (s *ShmSegment) Sleepers() *uint32 { return s.sleepers }
