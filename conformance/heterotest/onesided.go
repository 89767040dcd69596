package heterotest

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/flagcx/flagcx-go/core"
)

// The exact check of one-sided communication (core's RegisterWindow,
// AllocWindow, Put, PutBatch, Get, PutSignal, Signal, WaitSignal and the
// counter) on one rank; every rank of the communicator runs it at once.
// Each rank puts into, and gets from, its neighbours in a ring: the next
// rank and the previous one, and itself. Windows are of both kinds
// (AllocWindow's, shared with the ranks of the host where it can be, and
// RegisterWindow's of this rank's memory, reached through the peers'
// progress goroutines), their bytes at every offset and length of
// OneSidedCases, aligned or not, across the transports' chunk bounds.

// OneSidedWindow is the size of each window of the check: above the
// transports' 4 MiB chunk, and odd.
const OneSidedWindow = 4<<20 + 4099

// OneSidedCase is one transfer: bytes N at offset Local of this rank's
// window and Remote of the peer's.
type OneSidedCase struct{ Local, Remote, N int }

// OneSidedCases are the transfers of the check.
var OneSidedCases = []OneSidedCase{
	{0, 0, 0}, {0, 0, 1}, {1, 3, 7}, {7, 1, 8}, {5, 0, 4093}, {4095, 1, 4097}, {3, 11, 65537},
	{13, 2, 4<<20 + 1}, {0, 0, OneSidedWindow}, {OneSidedWindow - 1, OneSidedWindow - 1, 1}, {1, 0, OneSidedWindow - 1},
}

// osPattern is rank r's source bytes (seed tells rounds apart).
func osPattern(r, seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + r*17 + seed*29 + i>>9)
	}
	return b
}

// osFiller is what a destination window holds outside the bytes written.
func osFiller(r int) byte { return byte(0xA0 + r) }

// oneSided is one rank's state in the check.
type oneSided struct {
	comm       *core.Comm
	m          Mem
	rank, n    int
	next, prev int
	failures   []string
	checks     int
	// got counts the signals this rank received from each peer so far.
	got []uint64
	// issued counts the one-sided operations this rank issued: the
	// completion counter is global and completions arrive when they
	// arrive, so waits name this total, never a count read before a call.
	issued uint64
}

// settle waits until every operation this rank issued is complete and
// checks that the counter holds exactly that many.
func (s *oneSided) settle(name string) error {
	if err := s.comm.WaitCounter(s.issued); err != nil {
		return err
	}
	s.checks++
	if v := s.comm.ReadCounter(); v != s.issued {
		s.failures = append(s.failures, fmt.Sprintf("%s: the completion counter is %d, want %d", name, v, s.issued))
	}
	return nil
}

// OneSided runs the check on this rank and returns how many results it
// compared and what differed; err is a call that failed.
func OneSided(comm *core.Comm, m Mem) (checks int, failures []string, err error) {
	n, r := comm.Count(), comm.Rank()
	s := &oneSided{comm: comm, m: m, rank: r, n: n, next: (r + 1) % n, prev: (r + n - 1) % n, got: make([]uint64, n)}
	for _, kind := range []string{"AllocWindow", "RegisterWindow"} {
		if err := s.windows(kind); err != nil {
			return s.checks, s.failures, fmt.Errorf("%s windows: %w", kind, err)
		}
	}
	if err := s.signals(); err != nil {
		return s.checks, s.failures, fmt.Errorf("signal buffer: %w", err)
	}
	return s.checks, s.failures, comm.HostAllGather(nil, nil)
}

func (s *oneSided) barrier() error { return s.comm.HostAllGather(nil, nil) }

// window makes one window of kind (its registered memory too).
func (s *oneSided) window(kind string) (*core.Window, func() error, error) {
	if kind == "AllocWindow" {
		w, err := s.comm.AllocWindow(OneSidedWindow)
		if err != nil {
			return nil, nil, err
		}
		return w, w.Free, nil
	}
	b, err := s.m.Alloc(OneSidedWindow)
	if err != nil {
		return nil, nil, err
	}
	w, err := s.comm.RegisterWindow(b)
	if err != nil {
		return nil, nil, err
	}
	return w, func() error {
		if err := w.Free(); err != nil {
			return err
		}
		return s.m.Free(b)
	}, nil
}

// windows checks Put+signal, Get, PutBatch and operations on itself with
// two windows of kind.
func (s *oneSided) windows(kind string) error {
	src, freeSrc, err := s.window(kind)
	if err != nil {
		return err
	}
	dst, freeDst, err := s.window(kind)
	if err != nil {
		return err
	}
	if src.Index()+1 != dst.Index() || src.Size(s.next) != OneSidedWindow || dst.Size(s.prev) != OneSidedWindow {
		s.failures = append(s.failures, fmt.Sprintf("%s: indices %d, %d and sizes %d, %d", kind, src.Index(), dst.Index(), src.Size(s.next), dst.Size(s.prev)))
	}
	for i, tc := range OneSidedCases {
		name := fmt.Sprintf("%s case %d (%d bytes at %d -> %d)", kind, i, tc.N, tc.Local, tc.Remote)
		if err := s.putCase(name, src, dst, tc, i); err != nil {
			return fmt.Errorf("%s: Put: %w", name, err)
		}
		if err := s.getCase(name, src, dst, tc, i); err != nil {
			return fmt.Errorf("%s: Get: %w", name, err)
		}
	}
	if err := s.batchCase(kind, src, dst); err != nil {
		return fmt.Errorf("%s: PutBatch: %w", kind, err)
	}
	if err := s.selfCase(kind, src, dst); err != nil {
		return fmt.Errorf("%s: to itself: %w", kind, err)
	}
	if err := s.barrier(); err != nil { // no peer uses them any more
		return err
	}
	if err := freeSrc(); err != nil {
		return err
	}
	return freeDst()
}

// reset fills src with this rank's pattern and dst with its filler, and
// waits for every rank to have done so.
func (s *oneSided) reset(src, dst *core.Window, seed int) error {
	if err := s.m.Write(src.Buffer(), 0, osPattern(s.rank, seed, OneSidedWindow)); err != nil {
		return err
	}
	if err := s.m.Write(dst.Buffer(), 0, bytes.Repeat([]byte{osFiller(s.rank)}, OneSidedWindow)); err != nil {
		return err
	}
	return s.barrier()
}

// expect compares window w with its filler, except want at off.
func (s *oneSided) expect(name string, w *core.Window, off int, want []byte) error {
	got := make([]byte, OneSidedWindow)
	if err := s.m.Read(w.Buffer(), 0, got); err != nil {
		return err
	}
	s.checks++
	exp := bytes.Repeat([]byte{osFiller(s.rank)}, OneSidedWindow)
	copy(exp[off:], want)
	if !bytes.Equal(got, exp) {
		i := 0
		for got[i] == exp[i] {
			i++
		}
		wrong := 0
		for j := range got {
			if got[j] != exp[j] {
				wrong++
			}
		}
		s.failures = append(s.failures, fmt.Sprintf("%s: %d bytes differ, the first at %d (got %#x, want %#x)", name, wrong, i, got[i], exp[i]))
	}
	return nil
}

// waitFrom waits for one more signal of peer (and checks its count).
func (s *oneSided) waitFrom(name string, peer int) error {
	s.got[peer]++
	if err := s.comm.WaitSignal([]core.SignalWait{{Peer: peer, Value: s.got[peer]}}, 0); err != nil {
		return err
	}
	v, err := s.comm.SignalValue(peer)
	if err != nil {
		return err
	}
	s.checks++
	if v != s.got[peer] {
		s.failures = append(s.failures, fmt.Sprintf("%s: signal slot of rank %d holds %d, want %d", name, peer, v, s.got[peer]))
	}
	return nil
}

// putCase: each rank puts its pattern to the next with a signal; each
// checks what the previous one put once its signal came.
func (s *oneSided) putCase(name string, src, dst *core.Window, tc OneSidedCase, seed int) error {
	if err := s.reset(src, dst, seed); err != nil {
		return err
	}
	op := core.RMA{Local: src, LocalOff: tc.Local, Remote: dst, RemoteOff: tc.Remote, Bytes: tc.N}
	if err := s.comm.PutSignal(s.next, op, 0); err != nil {
		return err
	}
	s.issued++
	if err := s.waitFrom(name, s.prev); err != nil {
		return err
	}
	if err := s.settle(name + " put"); err != nil {
		return err
	}
	if err := s.expect(name+" put", dst, tc.Remote, osPattern(s.prev, seed, OneSidedWindow)[tc.Local:tc.Local+tc.N]); err != nil {
		return err
	}
	return s.barrier()
}

// getCase: each rank gets the next rank's pattern.
func (s *oneSided) getCase(name string, src, dst *core.Window, tc OneSidedCase, seed int) error {
	if err := s.reset(src, dst, seed+100); err != nil {
		return err
	}
	op := core.RMA{Local: dst, LocalOff: tc.Local, Remote: src, RemoteOff: tc.Remote, Bytes: tc.N}
	if err := s.comm.Get(s.next, op, 0); err != nil {
		return err
	}
	s.issued++
	if err := s.settle(name + " get"); err != nil {
		return err
	}
	if err := s.expect(name+" get", dst, tc.Local, osPattern(s.next, seed+100, OneSidedWindow)[tc.Remote:tc.Remote+tc.N]); err != nil {
		return err
	}
	return s.barrier()
}

// batchCase: three Puts of one batch, overlapping in order (the later
// wins), then a Signal behind them.
func (s *oneSided) batchCase(kind string, src, dst *core.Window) error {
	if err := s.reset(src, dst, 7); err != nil {
		return err
	}
	ops := []core.RMA{
		{Local: src, LocalOff: 0, Remote: dst, RemoteOff: 10, Bytes: 1000},
		{Local: src, LocalOff: 5000, Remote: dst, RemoteOff: 500, Bytes: 999},
		{Local: src, LocalOff: 77, Remote: dst, RemoteOff: 4 << 20, Bytes: 4099},
	}
	if err := s.comm.PutBatch(s.next, ops, 0); err != nil {
		return err
	}
	if err := s.comm.Signal(s.next, 0); err != nil {
		return err
	}
	s.issued += uint64(len(ops)) + 1
	if err := s.waitFrom(kind+" batch", s.prev); err != nil {
		return err
	}
	if err := s.settle(kind + " batch"); err != nil {
		return err
	}
	want := bytes.Repeat([]byte{osFiller(s.rank)}, OneSidedWindow)
	pat := osPattern(s.prev, 7, OneSidedWindow)
	for _, op := range ops {
		copy(want[op.RemoteOff:], pat[op.LocalOff:op.LocalOff+op.Bytes])
	}
	if err := s.expect(kind+" batch", dst, 0, want); err != nil {
		return err
	}
	return s.barrier()
}

// selfCase: a Put and a Get of this rank to itself, and its own signal.
func (s *oneSided) selfCase(kind string, src, dst *core.Window) error {
	if err := s.reset(src, dst, 9); err != nil {
		return err
	}
	op := core.RMA{Local: src, LocalOff: 3, Remote: dst, RemoteOff: 1, Bytes: 70001}
	if err := s.comm.PutSignal(s.rank, op, 0); err != nil {
		return err
	}
	s.issued++
	if err := s.waitFrom(kind+" self", s.rank); err != nil {
		return err
	}
	pat := osPattern(s.rank, 9, OneSidedWindow)
	if err := s.expect(kind+" self put", dst, 1, pat[3:3+70001]); err != nil {
		return err
	}
	// Get back over the bytes just put, further along.
	if err := s.comm.Get(s.rank, core.RMA{Local: dst, LocalOff: 100001, Remote: src, RemoteOff: 5, Bytes: 333}, 0); err != nil {
		return err
	}
	s.issued++
	if err := s.settle(kind + " self"); err != nil {
		return err
	}
	want := bytes.Repeat([]byte{osFiller(s.rank)}, OneSidedWindow)
	copy(want[1:], pat[3:3+70001])
	copy(want[100001:], pat[5:5+333])
	if err := s.expect(kind+" self get", dst, 0, want); err != nil {
		return err
	}
	return s.barrier()
}

// signals checks a signal buffer of this rank's memory (FlagCX's
// flagcxOneSideSignalRegister): the peers' signals land in its words,
// which the rank resets between rounds.
func (s *oneSided) signals() error {
	buf, err := s.m.Alloc(8 * s.n)
	if err != nil {
		return err
	}
	defer s.m.Free(buf)
	if err := s.comm.RegisterSignals(buf); err != nil {
		return err
	}
	for round := 0; round < 3; round++ {
		clear(s.got)
		if err := s.m.Write(buf, 0, make([]byte, 8*s.n)); err != nil {
			return err
		}
		if err := s.barrier(); err != nil {
			return err
		}
		// round+1 signals to the next rank, one to the previous.
		for i := 0; i <= round; i++ {
			if err := s.comm.Signal(s.next, 0); err != nil {
				return err
			}
		}
		if err := s.comm.Signal(s.prev, 0); err != nil {
			return err
		}
		s.issued += uint64(round) + 2
		want := make([]uint64, s.n)
		want[s.prev] += uint64(round + 1)
		want[s.next]++
		waits := []core.SignalWait{{Peer: s.prev, Value: want[s.prev]}, {Peer: s.next, Value: want[s.next]}}
		if err := s.comm.WaitSignal(waits, 0); err != nil {
			return err
		}
		if err := s.barrier(); err != nil {
			return err
		}
		raw := make([]byte, 8*s.n)
		if err := s.m.Read(buf, 0, raw); err != nil {
			return err
		}
		s.checks++
		for r := 0; r < s.n; r++ {
			if got := binary.LittleEndian.Uint64(raw[8*r:]); got != want[r] {
				s.failures = append(s.failures, fmt.Sprintf("signal buffer round %d: slot %d holds %d, want %d", round, r, got, want[r]))
			}
		}
	}
	if err := s.settle("signal buffer"); err != nil {
		return err
	}
	// Back to the communicator's own slots.
	return s.comm.RegisterSignals(core.Buffer{})
}
