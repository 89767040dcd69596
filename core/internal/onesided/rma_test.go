package onesided

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestTransfers: two ranks swap halves of a window one chunk and a bit
// long (a Get of the peer's first half, a PutSignal of the second half),
// on every path: host windows straight through shared memory (Alloc on
// one host) and through the links (Register, or TCP), device windows
// staged through host memory. Both ranks end with the same bytes.
func TestTransfers(t *testing.T) {
	const size = chunkBytes + 4097
	const half = size / 2
	for _, tc := range []struct {
		name                  string
		shared, device, alloc bool
	}{
		{"shm/alloc", true, false, true},
		{"shm/register", true, false, false},
		{"tcp/alloc", false, false, true},
		{"tcp/register", false, false, false},
		{"shm/device alloc", true, true, true},
		{"tcp/device register", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeComms(t, 2, tc.shared, tc.device)
			states := startAll(t, fs)
			mems := make([][]byte, 2) // each rank's bytes of the window
			errs := onAll(2, func(r int) error {
				o := states[r]
				w, err := window(o, fs[r], tc.alloc, size)
				if err != nil {
					return err
				}
				m := w.Mem()
				mems[r] = m.Host
				if m.Dev {
					mems[r] = at(m.Ptr, m.Len)
				}
				copy(mems[r], pattern(r, size))
				if err := o.c.AllGather(nil, nil); err != nil {
					return err
				}
				if r == 1 {
					return o.WaitSignal("WaitSignal", []Wait{{Peer: 0, Value: 1}}, 0)
				}
				if err := o.RMA("Get", 1, []Op{{Local: w, Remote: w, Bytes: half}}, Get, 1); err != nil {
					return err
				}
				if err := o.RMA("PutSignal", 1, []Op{{Local: w, LocalOff: half, Remote: w, RemoteOff: half, Bytes: size - half}}, PutSignal, 1); err != nil {
					return err
				}
				return o.WaitCounter(2)
			})
			require.NoError(t, errors.Join(errs...))
			want := append(pattern(1, size)[:half], pattern(0, size)[half:]...)
			for r := range 2 {
				require.True(t, bytes.Equal(want, mems[r]), "rank %d's window", r)
			}
			if tc.device {
				require.Equal(t, 2, fs[0].dev.(*fakeDevice).syncs, "rank 0 waited for its stream before each call on one")
			}
		})
	}
}

// window registers a window of size bytes on rank f: Alloc's, or memory
// of the rank's kind that Register takes.
func window(o *State, f *fakeComm, alloc bool, size int) (*Window, error) {
	if alloc {
		return o.Alloc("AllocWindow", size)
	}
	if f.dev == nil {
		return o.Register("RegisterWindow", Mem{Host: make([]byte, size), Len: size})
	}
	ptr, err := f.dev.Alloc(size)
	if err != nil {
		return nil, err
	}
	return o.Register("RegisterWindow", Mem{Ptr: ptr, Len: size, Dev: true})
}

// pattern is rank r's bytes: no two ranks, and no two nearby offsets,
// alike.
func pattern(r, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + r*131 + i>>11)
	}
	return b
}

// TestCheck: a bad operation fails on the calling rank with one error
// saying what is wrong, before anything is sent.
func TestCheck(t *testing.T) {
	o := &State{rank: 0, n: 2}
	w := &Window{o: o, index: 0, sizes: []int{100, 101}}
	freed := &Window{o: o, index: 1, sizes: []int{100, 101}, freed: true}
	other := &Window{o: &State{rank: 0, n: 2}, index: 2, sizes: []int{100, 101}}
	for _, tc := range []struct {
		name string
		op   Op
		want error
		text string
	}{
		{"nothing at all", Op{}, nil, ""},
		{"one window missing", Op{Local: w, Bytes: 1}, sdk.ErrInvalidArgument, "the RMA needs both windows"},
		{"another communicator's", Op{Local: w, Remote: other, Bytes: 1}, sdk.ErrInvalidArgument, "window 2 belongs to another communicator"},
		{"freed here", Op{Local: freed, Remote: w, Bytes: 1}, sdk.ErrInvalidUsage, "window 1 was freed on this rank"},
		{"negative length", Op{Local: w, Remote: w, Bytes: -1}, sdk.ErrInvalidArgument, "negative offset or length"},
		{"beyond the local window", Op{Local: w, LocalOff: 99, Remote: w, Bytes: 2}, sdk.ErrInvalidArgument, "bytes [99, 101) lie outside this rank's 100 bytes of window 0"},
		{"beyond the peer's window", Op{Local: w, Remote: w, RemoteOff: 100, Bytes: 2}, sdk.ErrInvalidArgument, "bytes [100, 102) lie outside rank 1's 101 bytes of window 0"},
		{"the peer's last byte", Op{Local: w, Remote: w, RemoteOff: 100, Bytes: 1}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := o.check("Put", 1, tc.op)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, "Put on rank 0: "+tc.text)
		})
	}
}
