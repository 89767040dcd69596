package suite

// ABI v5's relayReduce (device.relayreduce): one enqueue that puts a
// device buffer into a shared-memory window, raises landed, waits on the
// device for the host's go (or abort) and folds the window and other
// ranks' host memory into device memory (sdk/include/flagcx_plugin.h).

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// relayCounts are the element counts of every relay: one element, and a
// count whose bytes are a multiple of 8 only for the 8-byte types (the
// nvidia kernel copies in words there and in bytes elsewhere).
var relayCounts = []int{1, 4099}

// landedWithin bounds the wait for *landed: the device stores it once the
// stream reaches the relay and the window's copy is done, microseconds on
// a device, milliseconds on a busy emulator.
const landedWithin = 5 * time.Second

// relayRegion is host memory laid out as a relay's shared memory: the
// landed and go words, the window and a slot per host source, each
// page-aligned in one shared anonymous mapping, as the shared-memory
// windows of internal/hostnet/shm are, and registered with the plugin's
// hostRegister.
type relayRegion struct {
	mem  []byte
	slot int // bytes between the window and the host sources (page multiple)
}

const relayPage = 4096

// newRelayRegion maps and registers a region whose window and host source
// slots hold maxBytes each; release unregisters and unmaps it.
func (dc *devCtx) newRelayRegion(maxBytes int) (*relayRegion, func(), error) {
	slot := (maxBytes + relayPage - 1) / relayPage * relayPage
	n := relayPage + (1+loader.MaxReduceSrcs)*slot
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap of the relay's %d bytes: %w", n, err)
	}
	rr := &relayRegion{mem: mem, slot: slot}
	if err := dc.p.HostRegister(rr.addr(0), n); err != nil {
		_ = syscall.Munmap(mem)
		return nil, nil, err
	}
	return rr, func() {
		_ = dc.p.HostUnregister(rr.addr(0))
		_ = syscall.Munmap(mem)
	}, nil
}

func (rr *relayRegion) addr(off int) uintptr { return uintptr(unsafe.Pointer(&rr.mem[off])) }
func (rr *relayRegion) landed() *uint64      { return (*uint64)(unsafe.Pointer(&rr.mem[0])) }
func (rr *relayRegion) goWord() *uint64      { return (*uint64)(unsafe.Pointer(&rr.mem[8])) }

// window and host are the offsets of the window and of host source r.
func (rr *relayRegion) window() int    { return relayPage }
func (rr *relayRegion) host(r int) int { return relayPage + (1+r)*rr.slot }

// relayShape is where a relay's sources and output are. Source 0 is the
// relay's own data (rank 0's input): the window, or src itself; source r
// >= 1 is device memory where r is odd and registered host memory where r
// is even, so 3 and 8 sources mix both and 2 sources add a device one.
type relayShape struct {
	name    string
	fromSrc bool // source 0 is src, not the window
	dstAt   int  // -1: a fresh buffer; 0: src itself; r >= 1: device source r
	minSrcs int
}

var relayShapes = []relayShape{
	{name: "out of place, the window as source 0", dstAt: -1, minSrcs: 1},
	{name: "in place over src, the window as source 0", dstAt: 0, minSrcs: 1},
	{name: "in place over src, src as source 0", fromSrc: true, dstAt: 0, minSrcs: 1},
	{name: "in place over device source 1, the window as source 0", dstAt: 1, minSrcs: 2},
}

// relayCase is what the case keeps across its relays: the region, the
// pinned staging of src and of the copy after the relay, a second stream
// to read dst on while the relay waits, and the last value used.
type relayCase struct {
	dc      *devCtx
	rr      *relayRegion
	staging []byte
	stage   uintptr
	out     []byte
	outPtr  uintptr
	peek    []byte
	peekPtr uintptr
	peekS   loader.Stream
	value   uint64
	// aborts counts the aborted relays; later is 1 where the current one
	// is aborted by the next call's value (every other one).
	aborts int
	later  uint64
}

// relayReduce checks ABI v5's relayReduce: for every data type and op the
// plugin declares, 1, 2, 3 and 8 sources (relayShapes), 1 and 4099
// elements, against the reference AllReduce of as many ranks, as
// reduceLocal's case does; then one abort per data type. Each relay runs
// between a copy in of src and a copy out of dst on the same stream.
func (dc *devCtx) relayReduce(s Spec) error {
	if err := dc.relayProbe(); err != nil {
		return err // not supported: the case is skipped, as reduceLocal's
	}
	maxBytes := relayCounts[len(relayCounts)-1] * 8
	rr, release, err := dc.newRelayRegion(maxBytes)
	if err != nil {
		return err
	}
	defer release()
	rc := &relayCase{dc: dc, rr: rr}
	if rc.stage, rc.staging, err = dc.pinned(maxBytes); err != nil {
		return err
	}
	if rc.outPtr, rc.out, err = dc.pinned(maxBytes); err != nil {
		return err
	}
	if rc.peekPtr, rc.peek, err = dc.pinned(maxBytes); err != nil {
		return err
	}
	if rc.peekS, err = dc.p.StreamCreate(dc.dev); err != nil {
		return err
	}
	defer func() { _ = dc.p.StreamDestroy(rc.peekS) }()
	if err := rc.everyTypeAndOp(s); err != nil {
		return err
	}
	for _, dt := range sdk.AllDataTypes() {
		if dc.p.SupportsDataType(dt) {
			c := reference.Case{Coll: sdk.AllReduce, Type: dt, Op: sdk.Sum, NRanks: 3, Count: 4099, Seed: s.Seed}
			if err := rc.once(c, relayShapes[0], true); err != nil {
				return err
			}
		}
	}
	return nil
}

// relayProbe asks whether the plugin relays: an empty relay of its first
// declared type and op, which enqueues nothing.
func (dc *devCtx) relayProbe() error {
	probe := loader.Relay{Srcs: []uintptr{0}, AvgDivisor: 1}
	for _, dt := range sdk.AllDataTypes() {
		if dc.p.SupportsDataType(dt) {
			probe.DType = dt
			break
		}
	}
	for _, op := range sdk.AllRedOps() {
		if dc.p.SupportsRedOp(op) {
			probe.Op = op
			break
		}
	}
	return dc.p.RelayReduce(dc.dev, &probe, dc.w.stream)
}

func (rc *relayCase) everyTypeAndOp(s Spec) error {
	rule := foldRule{entry: "relayReduce", did: "relayed"}
	return rc.dc.declaredFolds(func(dt sdk.DataType, op sdk.RedOp, n int) error {
		for _, count := range relayCounts {
			for _, sh := range relayShapes {
				if n < sh.minSrcs {
					continue
				}
				c := reference.Case{Coll: sdk.AllReduce, Type: dt, Op: op, NRanks: n, Count: count, Seed: s.Seed}
				if err := rule.check(dt, op, rc.once(c, sh, false)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// relayBufs are one relay's device buffers and what dst holds before the go.
type relayBufs struct {
	src, dst devBuf
	srcs     []uintptr
	before   []byte
}

// prepare fills the relay's buffers: src (rank 0's input arrives by the
// copy in), the device sources, the window (a pattern src's bytes must
// replace) and dst.
func (rc *relayCase) prepare(sc *scratch, c reference.Case, sh relayShape, ins [][]byte) (*relayBufs, error) {
	bytes := c.Count * c.Type.Size()
	b := &relayBufs{srcs: make([]uintptr, c.NRanks)}
	var err error
	if b.src, err = sc.alloc(filled(bytes, fillByte)); err != nil {
		return nil, err
	}
	b.srcs[0] = rc.rr.addr(rc.rr.window())
	if sh.fromSrc {
		b.srcs[0] = b.src.ptr()
	}
	devs := map[int]devBuf{0: b.src}
	for r := 1; r < c.NRanks; r++ {
		if r%2 == 0 {
			b.srcs[r] = rc.rr.addr(rc.rr.host(r))
			continue
		}
		if devs[r], err = sc.alloc(ins[r]); err != nil {
			return nil, err
		}
		b.srcs[r] = devs[r].ptr()
	}
	switch {
	case sh.dstAt < 0:
		b.before = filled(bytes, fillByte)
		b.dst, err = sc.alloc(b.before)
	case sh.dstAt == 0:
		b.dst, b.before = b.src, ins[0] // src holds rank 0's input once the copy in ran
	default:
		b.dst, b.before = devs[sh.dstAt], ins[sh.dstAt]
	}
	fillBytes(rc.rr.mem[rc.rr.window():rc.rr.window()+bytes], 0xa5)
	copy(rc.staging, ins[0])
	fillBytes(rc.out[:bytes], 0)
	return b, err
}

// once runs one relay of c's inputs in shape sh, with the go (or, abort,
// the abort) given once the checks before it passed.
func (rc *relayCase) once(c reference.Case, sh relayShape, abort bool) error {
	dc := rc.dc
	sc := &scratch{w: dc.w}
	defer sc.free()
	bytes := c.Count * c.Type.Size()
	ins := make([][]byte, c.NRanks)
	for r := range ins {
		ins[r] = make([]byte, bytes)
		reference.FillInput(c, r, ins[r])
	}
	b, err := rc.prepare(sc, c, sh, ins)
	if err != nil {
		return err
	}
	rc.value++
	r := &loader.Relay{Src: b.src.ptr(), Window: rc.rr.addr(rc.rr.window()), Bytes: bytes, Landed: rc.rr.addr(0),
		Go: rc.rr.addr(8), Value: rc.value, Srcs: b.srcs, Dst: b.dst.ptr(), Count: c.Count, DType: c.Type, Op: c.Op,
		AvgDivisor: c.NRanks}
	name := fmt.Sprintf("relayReduce of %d %s sources, %s, %d elements, %s", c.NRanks, c.Type, c.Op, c.Count, sh.name)
	if abort {
		// Every other abort is the next call's (value+1), which stops this
		// one too: a host that gives up answers its relays in order
		// without waiting for the device to read each answer.
		rc.aborts++
		rc.later = uint64(rc.aborts % 2)
		name = fmt.Sprintf("relayReduce of %d %s sources, %d elements, aborted", c.NRanks, c.Type, c.Count)
		if rc.later != 0 {
			name += " by the next call's abort"
		}
	}
	st := dc.w.stream
	if err := dc.p.Memcpy(b.src.ptr(), rc.stage, bytes, loader.HostToDevice, st); err != nil {
		return err
	}
	if err := dc.p.RelayReduce(dc.dev, r, st); err != nil {
		return errors.Join(err, dc.p.StreamSynchronize(st))
	}
	err = dc.p.Memcpy(rc.outPtr, b.dst.ptr(), bytes, loader.DeviceToHost, st)
	if err == nil {
		err = rc.beforeGo(name, c, b, ins[0])
	}
	if err != nil {
		// Free the device from its wait, so that the stream drains before
		// the buffers are freed and the next case starts.
		atomic.StoreUint64(rc.rr.goWord(), rc.value|loader.RelayAbort)
		return errors.Join(err, dc.p.StreamSynchronize(st))
	}
	return rc.afterGo(name, c, b, ins, abort)
}

// beforeGo checks what must hold while the relay waits: landed raised,
// the window holding src's bytes, the stream not done, dst untouched.
func (rc *relayCase) beforeGo(name string, c reference.Case, b *relayBufs, src []byte) error {
	dc, bytes := rc.dc, len(src)
	if !waitWord(rc.rr.landed(), rc.value, landedWithin) {
		return wrongf("%s: *landed holds %d, not the call's value %d, %v after the enqueue", name,
			atomic.LoadUint64(rc.rr.landed()), rc.value, landedWithin)
	}
	window := rc.rr.mem[rc.rr.window() : rc.rr.window()+bytes]
	if err := compareElems(name+": the window once landed", sdk.Uint8, window, src, nil); err != nil {
		return err
	}
	done, err := dc.p.StreamQuery(dc.w.stream)
	switch {
	case errors.Is(err, sdk.ErrNotSupported): // an OPTIONAL entry: nothing to ask
	case err != nil:
		return err
	case done:
		return wrongf("%s: streamQuery says the stream is done before the go (the relay and the copy after it must wait for it)", name)
	}
	// On a second stream: the worker's waits for the relay.
	if err := inOrder(
		func() error { return dc.p.Memcpy(rc.peekPtr, b.dst.ptr(), bytes, loader.DeviceToHost, rc.peekS) },
		func() error { return dc.p.StreamSynchronize(rc.peekS) },
	); err != nil {
		return err
	}
	if err := compareElems(name+": dst before the go", c.Type, rc.peek[:bytes], b.before, nil); err != nil {
		return err
	}
	return compareElems(name+": the copy after the relay, before the go", sdk.Uint8, rc.out[:bytes], make([]byte, bytes), nil)
}

// afterGo writes the host sources, as the other ranks do just before the
// go, gives the go (or the abort) and checks the result: the done mark in
// the landed word, dst, and the copy of dst after the relay on the same
// stream.
func (rc *relayCase) afterGo(name string, c reference.Case, b *relayBufs, ins [][]byte, abort bool) error {
	dc, bytes := rc.dc, c.Count*c.Type.Size()
	for r := 2; r < c.NRanks; r += 2 {
		copy(rc.rr.mem[rc.rr.host(r):rc.rr.host(r)+bytes], ins[r])
	}
	value := rc.value
	word := value
	want := reference.Expected(c, 0)
	if abort {
		// The next call's value is then above the abort's (once).
		word, want = (value+rc.later)|loader.RelayAbort, b.before
		rc.value += rc.later
	}
	atomic.StoreUint64(rc.rr.goWord(), word)
	if err := dc.p.StreamSynchronize(dc.w.stream); err != nil {
		return err
	}
	if got := atomic.LoadUint64(rc.rr.landed()); got != value|loader.RelayDone {
		return wrongf("%s: *landed holds %#x once the stream is done, not the call's value with the done bit, %#x", name, got, value|loader.RelayDone)
	}
	if err := compareElems(name+": dst copied out on the stream after the relay", c.Type, rc.out[:bytes], want, nil); err != nil {
		return err
	}
	return dc.w.verify(checked{name: name, buf: b.dst, want: want, dt: c.Type})
}

// waitWord polls *w until it holds want, at most limit: true when it did.
func waitWord(w *uint64, want uint64, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		if atomic.LoadUint64(w) == want {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}
