// Package heterotest checks heterogeneous communicators against the exact
// results of conformance/reference, one rank's side of a case at a time: a
// collective out of place or in place (Run), a group of mixed calls
// (RunGroup over GroupSets), the matrix of every collective, type, op and
// root (Matrix), and one-sided windows, puts, gets and signals (OneSided,
// onesided.go). A rank's buffers are host memory, device memory or the
// communicator's registered MemAlloc memory (HostMem, DeviceMem,
// RegisteredMem; MemFor is a rank's device or the host). Its own tests run
// ranks as processes on the emulated vendor plugins, through allocation,
// groups and revokes; core's tests use it with host ranks as goroutines.
package heterotest

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Mem allocates a rank's buffers and moves bytes in and out of them.
type Mem interface {
	Alloc(n int) (core.Buffer, error)
	Write(b core.Buffer, off int, src []byte) error
	Read(b core.Buffer, off int, dst []byte) error
	Free(b core.Buffer) error
}

// HostMem is Go memory.
type HostMem struct{}

func (HostMem) Alloc(n int) (core.Buffer, error) { return core.HostBuffer(make([]byte, n)), nil }
func (HostMem) Write(b core.Buffer, off int, src []byte) error {
	copy(b.Host()[off:], src)
	return nil
}
func (HostMem) Read(b core.Buffer, off int, dst []byte) error {
	copy(dst, b.Host()[off:])
	return nil
}
func (HostMem) Free(core.Buffer) error { return nil }

// DeviceMem is device memory of a plugin.
type DeviceMem struct {
	P   *loader.Plugin
	Dev int
}

func (d DeviceMem) Alloc(n int) (core.Buffer, error) {
	ptr, err := d.P.DeviceMalloc(d.Dev, max(n, 1))
	if err != nil {
		return core.Buffer{}, err
	}
	// Device memory starts as garbage (the emulators fill it with 0xCB):
	// zero it as the host's is.
	if err := d.P.CopyToDevice(ptr, make([]byte, max(n, 1))); err != nil {
		return core.Buffer{}, err
	}
	return core.DeviceBuffer(ptr, n), nil
}

func (d DeviceMem) Write(b core.Buffer, off int, src []byte) error {
	return d.P.CopyToDevice(b.Ptr()+uintptr(off), src)
}

func (d DeviceMem) Read(b core.Buffer, off int, dst []byte) error {
	return d.P.CopyFromDevice(dst, b.Ptr()+uintptr(off))
}

func (d DeviceMem) Free(b core.Buffer) error { return d.P.DeviceFree(b.Ptr()) }

// MemFor is the memory of comm's rank: its plugin's device, or the host.
func MemFor(comm *core.Comm) Mem {
	if be := comm.Backend(); be.OnDevice() {
		return DeviceMem{P: be.Plugin, Dev: be.Device}
	}
	return HostMem{}
}

// InPlaceChecked reports whether c has an in-place form to check (as in
// nccl-tests: not AlltoAll, AlltoAllv, SendRecv).
func InPlaceChecked(c sdk.Collective) bool {
	return c != sdk.AlltoAll && c != sdk.AlltoAllv && c != sdk.SendRecv
}

// offsets are the element offsets of send and recv inside an in-place
// buffer (nccl-tests' layouts, sdk's table of collectives).
func offsets(coll sdk.Collective, rank, count int) (send, recv int) {
	return coll.Info().InPlace.Offsets(rank, count)
}

// Run runs case c on this rank (out of place, or in place) and returns how
// many elements of its receive buffer differ from the reference. Every
// rank of comm must call it with the same case.
func Run(comm *core.Comm, m Mem, c reference.Case, inPlace bool, s loader.Stream) (wrong int, err error) {
	rank, ts := comm.Rank(), c.Type.Size()
	sendN, recvN := c.SendCount()*ts, c.RecvCount()*ts
	input := make([]byte, sendN)
	reference.FillInput(c, rank, input)
	var send, recv, whole core.Buffer
	recvOff := 0
	if inPlace {
		so, ro := offsets(c.Coll, rank, c.Count)
		total := max(so*ts+sendN, ro*ts+recvN)
		if whole, err = m.Alloc(total); err != nil {
			return 0, err
		}
		defer m.Free(whole)
		if err = m.Write(whole, so*ts, input); err != nil {
			return 0, err
		}
		if send, err = whole.Slice(so*ts, sendN); err == nil {
			recv, err = whole.Slice(ro*ts, recvN)
		}
		if err != nil {
			return 0, err
		}
		recvOff = ro * ts
	} else {
		if send, err = m.Alloc(sendN); err != nil {
			return 0, err
		}
		defer m.Free(send)
		if recv, err = m.Alloc(recvN); err != nil {
			return 0, err
		}
		defer m.Free(recv)
		whole = recv
		if err = m.Write(send, 0, input); err != nil {
			return 0, err
		}
	}
	strm := s
	if be := comm.Backend(); be.OnDevice() && strm == 0 {
		if strm, err = be.Plugin.StreamCreate(be.Device); err != nil {
			return 0, err
		}
		defer be.Plugin.StreamDestroy(strm)
	}
	if err := sdk.Dispatch(comm, c.Call(rank), send, recv, strm); err != nil {
		return 0, err
	}
	if be := comm.Backend(); be.OnDevice() {
		if err := be.Plugin.StreamSynchronize(strm); err != nil {
			return 0, err
		}
	}
	got := make([]byte, recvN)
	if err := m.Read(whole, recvOff, got); err != nil {
		return 0, err
	}
	// The expected image starts as the receive region did: zeros, with the
	// input where an in-place input overlaps it.
	exp := make([]byte, recvN)
	if inPlace {
		so, ro := offsets(c.Coll, rank, c.Count)
		lo, hi := max(so, ro)*ts, min(so*ts+sendN, ro*ts+recvN)
		if lo < hi {
			copy(exp[lo-ro*ts:hi-ro*ts], input[lo-so*ts:hi-so*ts])
		}
	}
	reference.ExpectedInto(c, rank, exp)
	return reference.Compare(c.Type, got, exp), nil
}

// RunGroup runs cases as one group on this rank: GroupStart, each case's
// call out of place on buffers of its own (a SendRecv case is its ring of
// a Send and a Recv, a group nested in this one), GroupEnd. It returns
// how many elements of each case's receive buffer differ from the
// reference. Every rank of comm must call it with the same cases.
func RunGroup(comm *core.Comm, m Mem, cases []reference.Case, s loader.Stream) (wrong []int, err error) {
	rank := comm.Rank()
	sends, recvs := make([]core.Buffer, len(cases)), make([]core.Buffer, len(cases))
	var held []core.Buffer
	defer func() {
		for _, b := range held {
			_ = m.Free(b)
		}
	}()
	for i, c := range cases {
		ts := c.Type.Size()
		if sends[i], err = m.Alloc(c.SendCount() * ts); err != nil {
			return nil, err
		}
		held = append(held, sends[i])
		if recvs[i], err = m.Alloc(c.RecvCount() * ts); err != nil {
			return nil, err
		}
		held = append(held, recvs[i])
		input := make([]byte, c.SendCount()*ts)
		reference.FillInput(c, rank, input)
		if err = m.Write(sends[i], 0, input); err != nil {
			return nil, err
		}
	}
	strm := s
	be := comm.Backend()
	if be.OnDevice() && strm == 0 {
		if strm, err = be.Plugin.StreamCreate(be.Device); err != nil {
			return nil, err
		}
		defer be.Plugin.StreamDestroy(strm)
	}
	comm.GroupStart()
	for i, c := range cases {
		if err = sdk.Dispatch(comm, c.Call(rank), sends[i], recvs[i], strm); err != nil {
			break
		}
	}
	if gerr := comm.GroupEnd(); err == nil {
		err = gerr
	}
	if err == nil && be.OnDevice() {
		err = be.Plugin.StreamSynchronize(strm)
	}
	if err != nil {
		return nil, err
	}
	wrong = make([]int, len(cases))
	for i, c := range cases {
		got := make([]byte, c.RecvCount()*c.Type.Size())
		if err := m.Read(recvs[i], 0, got); err != nil {
			return nil, err
		}
		wrong[i] = reference.Compare(c.Type, got, reference.Expected(c, rank))
	}
	return wrong, nil
}

// GroupSet is a group of calls that RunGroup runs together.
type GroupSet struct {
	Name  string
	Cases []reference.Case
}

// GroupSets are the groups a check of grouped collectives on n ranks runs:
// 2 to 8 calls each, of mixed kinds, types and sizes, with runs of small
// AllReduces that the host engine fuses (and sizes that end a run), a
// ring of sends and receives among them, and types and ops that some
// vendor libraries lack (those calls leave the vendor's group).
func GroupSets(n int) []GroupSet {
	seed := uint64(100)
	c := func(coll sdk.Collective, dt sdk.DataType, op sdk.RedOp, root, count int) reference.Case {
		seed++
		if !coll.Reduces() {
			op = reference.NoOp
		}
		return reference.Case{Coll: coll, Type: dt, Op: op, NRanks: n, Root: root, Count: count, Seed: seed}
	}
	f32, i32 := sdk.Float32, sdk.Int32
	return []GroupSet{
		{"coalesced allreduces", []reference.Case{
			c(sdk.AllReduce, f32, sdk.Sum, 0, 1), c(sdk.AllReduce, f32, sdk.Sum, 0, 7), c(sdk.AllReduce, f32, sdk.Sum, 0, 250),
			c(sdk.AllReduce, f32, sdk.Sum, 0, 1000), c(sdk.AllReduce, f32, sdk.Sum, 0, 0), c(sdk.AllReduce, i32, sdk.Max, 0, 37),
			c(sdk.AllReduce, i32, sdk.Max, 0, 5), c(sdk.AllReduce, sdk.Float64, sdk.Avg, 0, 9)}},
		{"every kind", []reference.Case{
			c(sdk.AllReduce, i32, sdk.Sum, 0, 11), c(sdk.Reduce, f32, sdk.Min, n-1, 13), c(sdk.Broadcast, sdk.Int8, 0, 0, 17),
			c(sdk.AllGather, sdk.Bfloat16, 0, 0, 19), c(sdk.ReduceScatter, f32, sdk.Prod, 0, 23), c(sdk.AlltoAll, sdk.Uint8, 0, 0, 29),
			c(sdk.AlltoAllv, i32, 0, 0, 31), c(sdk.Gather, sdk.Float16, 0, n/2, 37)}},
		{"scatter and sends between allreduces", []reference.Case{
			c(sdk.AllReduce, sdk.Bfloat16, sdk.Sum, 0, 64), c(sdk.SendRecv, i32, 0, 0, 33),
			c(sdk.Scatter, sdk.Uint8, 0, n-1, 10), c(sdk.AllReduce, sdk.Bfloat16, sdk.Sum, 0, 64)}},
		{"a large allreduce between small ones", []reference.Case{
			c(sdk.AllReduce, f32, sdk.Sum, 0, 3), c(sdk.AllReduce, f32, sdk.Sum, 0, 20000),
			c(sdk.AllReduce, f32, sdk.Sum, 0, 5), c(sdk.AllReduce, f32, sdk.Sum, 0, 16000)}},
	}
}

// Matrix lists the cases of a full check on n ranks: every collective,
// data type and (for reducing ones) op, every root for rooted ones, at the
// given counts.
func Matrix(n int, counts []int, types []sdk.DataType, seed uint64) []reference.Case {
	var out []reference.Case
	for _, coll := range sdk.AllCollectives() {
		ops := []sdk.RedOp{reference.NoOp}
		if coll.Reduces() {
			ops = sdk.AllRedOps()
		}
		roots := []int{0}
		if coll.Rooted() {
			roots = roots[:0]
			for r := 0; r < n; r++ {
				roots = append(roots, r)
			}
		}
		for _, dt := range types {
			for _, op := range ops {
				for _, root := range roots {
					for _, count := range counts {
						seed++
						out = append(out, reference.Case{Coll: coll, Type: dt, Op: op, NRanks: n, Root: root, Count: count, Seed: seed})
					}
				}
			}
		}
	}
	return out
}

// Name is a case's short name for reports.
func Name(c reference.Case, inPlace bool) string {
	s := fmt.Sprintf("%v %v", c.Coll, c.Type)
	if c.Coll.Reduces() {
		s += " " + c.Op.String()
	}
	if c.Coll.Rooted() {
		s += fmt.Sprintf(" root %d", c.Root)
	}
	s += fmt.Sprintf(" count %d", c.Count)
	if inPlace {
		s += " in place"
	}
	return s
}

// RegisteredMem takes a rank's buffers with the communicator's MemAlloc,
// which is collective: every rank allocates the same sizes in the same
// order (Run's buffers of an AllReduce are). A host rank's buffers are
// the registered memory itself; a device rank's are its own memory (Own),
// beside its share of the allocation, which it keeps until Free. With
// Unused, a host rank does the same: it takes its share but uses Own's
// memory (a rank whose buffers are not registered).
type RegisteredMem struct {
	Comm   *core.Comm
	Own    Mem
	Unused bool
	shares map[uintptr][]byte // by the address of the buffer Own gave
}

func (m *RegisteredMem) Alloc(n int) (core.Buffer, error) {
	reg, err := m.Comm.MemAlloc(n)
	if err != nil {
		return core.Buffer{}, err
	}
	if !m.Comm.Backend().OnDevice() && !m.Unused {
		return core.HostBuffer(reg), nil
	}
	b, err := m.Own.Alloc(n)
	if err != nil {
		_ = m.Comm.MemFree(reg)
		return core.Buffer{}, err
	}
	if m.shares == nil {
		m.shares = map[uintptr][]byte{}
	}
	m.shares[first(b)] = reg
	return b, nil
}

// first is the address of b's first byte, on the host or the device.
func first(b core.Buffer) uintptr {
	if b.OnDevice() {
		return b.Ptr()
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b.Host())))
}

func (m *RegisteredMem) Write(b core.Buffer, off int, src []byte) error {
	return m.Own.Write(b, off, src)
}

func (m *RegisteredMem) Read(b core.Buffer, off int, dst []byte) error {
	return m.Own.Read(b, off, dst)
}

func (m *RegisteredMem) Free(b core.Buffer) error {
	share, ok := m.shares[first(b)]
	if !ok {
		return m.Comm.MemFree(b.Host())
	}
	delete(m.shares, first(b))
	return errors.Join(m.Own.Free(b), m.Comm.MemFree(share))
}
