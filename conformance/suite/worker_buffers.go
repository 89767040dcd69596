package suite

// Guarded device buffers, the scratch that owns a case's allocations, and
// the element-wise verification of results against the reference.

import (
	"bytes"
	"math"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Every device buffer of a case has guard bytes before and after its data;
// they must come back unchanged. Receive buffers start filled with fillByte
// (in every floating type a value that is not an integer, so an element
// the plugin forgot to write never equals a reference value).
const (
	guard     = 256
	guardByte = 0x5a
	fillByte  = 0x3c
)

// devBuf is a device allocation with guards: data lives at base+lead,
// lead = guard bytes plus the case's shift (Spec.Shift), and guard bytes
// follow it.
type devBuf struct {
	base uintptr
	n    int // data bytes
	lead int
}

func (b devBuf) ptr() uintptr { return b.base + uintptr(b.lead) }

// checked is a buffer to verify after a case ran: its expected content and,
// where exactness is impossible, a per-element tolerance.
type checked struct {
	name string
	buf  devBuf
	want []byte
	dt   sdk.DataType
	tol  func(elem int) float64 // nil: exact
}

// job is a prepared operation: buffers filled, an issue function that
// enqueues it, and the buffers to verify.
type job struct {
	issue  func(s loader.Stream) error
	checks []checked
}

// scratch owns what a case allocated; free releases it all. shift moves
// the data of every buffer it allocates that many bytes off the 256-byte
// alignment of the allocation.
type scratch struct {
	w      *worker
	bufs   []devBuf
	pinned []uintptr
	shift  int
}

func (sc *scratch) free() {
	for _, b := range sc.bufs {
		_ = sc.w.p.DeviceFree(b.base)
	}
	for _, h := range sc.pinned {
		_ = sc.w.p.HostFree(h)
	}
	sc.bufs, sc.pinned = nil, nil
}

// hostAlloc allocates n bytes of the plugin's pinned host memory, freed
// with the case, and returns it as a pointer and a slice.
func (sc *scratch) hostAlloc(n int) (uintptr, []byte, error) {
	h, err := sc.w.p.HostMalloc(n)
	if err != nil {
		return 0, nil, err
	}
	sc.pinned = append(sc.pinned, h)
	return h, loader.HostSlice(h, n), nil
}

// alloc makes a guarded device buffer holding content.
func (sc *scratch) alloc(content []byte) (devBuf, error) {
	n, lead := len(content), guard+sc.shift
	base, err := sc.w.p.DeviceMalloc(sc.w.dev, lead+n+guard)
	if err != nil {
		return devBuf{}, err
	}
	b := devBuf{base: base, n: n, lead: lead}
	sc.bufs = append(sc.bufs, b)
	img := make([]byte, lead+n+guard)
	fillBytes(img[:lead], guardByte)
	copy(img[lead:], content)
	fillBytes(img[lead+n:], guardByte)
	return b, sc.w.p.CopyToDevice(base, img)
}

func fillBytes(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func filled(n int, v byte) []byte {
	b := make([]byte, n)
	fillBytes(b, v)
	return b
}

// verify reads a checked buffer back and compares it with its reference.
func (w *worker) verify(c checked) error {
	lead := c.buf.lead
	got := make([]byte, lead+c.buf.n+guard)
	if err := w.p.CopyFromDevice(got, c.buf.base); err != nil {
		return err
	}
	for i := 0; i < lead; i++ {
		if got[i] != guardByte {
			return wrongf("%s: the plugin wrote %d bytes before the start of the buffer", c.name, lead-i)
		}
	}
	for i := lead + c.buf.n; i < len(got); i++ {
		if got[i] != guardByte {
			return wrongf("%s: the plugin wrote past the end of the buffer (byte %d after it)", c.name, i-lead-c.buf.n)
		}
	}
	return compareElems(c.name, c.dt, got[lead:lead+c.buf.n], c.want, c.tol)
}

// compareElems compares element by element: integers bitwise, floating
// point by value (reference.Compare's rules), within tol where given.
func compareElems(name string, dt sdk.DataType, got, want []byte, tol func(int) float64) error {
	// got may be pinned memory that stray work of a broken plugin still
	// writes: compare a snapshot, so the message shows what was compared.
	got = append([]byte(nil), got...)
	if bytes.Equal(got, want) {
		return nil
	}
	sz := dt.Size()
	n := len(want) / sz
	wrong, first := 0, -1
	for i := 0; i < n; i++ {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if reference.Compare(dt, g, w) == 0 {
			continue
		}
		if tol != nil {
			if t := tol(i); t > 0 {
				gv, wv := reference.Decode(dt, g), reference.Decode(dt, w)
				if !math.IsNaN(gv) && math.Abs(gv-wv) <= t {
					continue
				}
			}
		}
		wrong++
		if first < 0 {
			first = i
		}
	}
	if wrong == 0 {
		return nil
	}
	o := first * sz
	return wrongf("%s: %d of %d %s elements differ; first at element %d: got %s, want %s", name, wrong, n, dt, first,
		reference.Format(dt, got[o:o+sz]), reference.Format(dt, want[o:o+sz]))
}

// unitRoundoff is u of a floating type: half the spacing of its numbers at 1.
func unitRoundoff(dt sdk.DataType) float64 {
	switch dt {
	case sdk.Float16:
		return 0x1p-11
	case sdk.Bfloat16:
		return 0x1p-8
	case sdk.Float32:
		return 0x1p-24
	}
	return 0x1p-53
}

// avgTolerance is the one inexact case (README: Tolerances). An average of
// a floating type over a rank count that is not a power of two may be
// computed, as NCCL does, by pre-multiplying every input with 1/n, which
// rounds: allow 2*n*u*max|input|. elemOf maps a buffer element to the
// reduced element it holds (-1: none, exact).
func avgTolerance(c reference.Case, elemOf func(int) int) func(int) float64 {
	n := c.NRanks
	if c.Op != sdk.Avg || !c.Type.IsFloat() || n&(n-1) == 0 {
		return nil
	}
	u := unitRoundoff(c.Type)
	return func(i int) float64 {
		e := elemOf(i)
		if e < 0 {
			return 0
		}
		m := 0.0
		for r := 0; r < n; r++ {
			m = max(m, math.Abs(float64(c.Input(r, e))))
		}
		return 2 * float64(n) * u * m
	}
}
