package suite

// Device-runtime cases: allocation, copies, memset, streams, events,
// pointer kinds and ABI v4's reduceLocal.

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"unsafe"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

var pciBusID = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// pattern is n bytes of reference data (uint8 movement values).
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	reference.FillInput(reference.Case{Coll: sdk.Broadcast, Type: sdk.Uint8, NRanks: 1, Count: n, Seed: seed}, 0, b)
	return b
}

// devCtx is what a device-runtime case works with: the plugin, the
// worker's device and stream, and a scratch that frees the case's
// allocations.
type devCtx struct {
	w    *worker
	p    *loader.Plugin
	dev  int
	ndev int
	sc   *scratch
}

// deviceCase adapts a device-runtime case to the registry.
func deviceCase(fn func(*devCtx, Spec) error) caseFunc {
	return func(w *worker, s Spec) error {
		ndev, err := w.p.DeviceCount()
		if err != nil {
			return err
		}
		dc := &devCtx{w: w, p: w.p, dev: w.dev, ndev: ndev, sc: &scratch{w: w}}
		defer dc.sc.free()
		return fn(dc, s)
	}
}

// raw allocates n device bytes without guards, freed with the case.
func (dc *devCtx) raw(n int) (uintptr, error) {
	ptr, err := dc.p.DeviceMalloc(dc.dev, n)
	if err == nil {
		dc.sc.bufs = append(dc.sc.bufs, devBuf{base: ptr})
	}
	return ptr, err
}

// readBack copies n bytes at ptr to the host.
func (dc *devCtx) readBack(ptr uintptr, n int) ([]byte, error) {
	b := make([]byte, n)
	return b, dc.p.CopyFromDevice(b, ptr)
}

// pinned allocates pinned host memory freed with the case.
func (dc *devCtx) pinned(n int) (uintptr, []byte, error) { return dc.sc.hostAlloc(n) }

// bigBytes is the large transfer of the device cases: 8 MiB and an odd tail.
const bigBytes = 8<<20 + 3

func (dc *devCtx) count(s Spec) error {
	if dc.ndev < 1 {
		return wrongf("getDeviceCount reports %d devices", dc.ndev)
	}
	return nil
}

func (dc *devCtx) info(s Spec) error {
	seen := map[string]int{}
	for d := 0; d < min(dc.ndev, 64); d++ {
		info, err := dc.p.DeviceInfo(d)
		if err != nil {
			return err
		}
		if s.Kind == KindDeviceInfo {
			if info.Name == "" {
				return wrongf("device %d has no name", d)
			}
			continue
		}
		if !pciBusID.MatchString(info.PCIBusID) {
			return wrongf("device %d: PCI bus id %q is not dddd:bb:dd.f in lower case", d, info.PCIBusID)
		}
		if prev, dup := seen[info.PCIBusID]; dup {
			return wrongf("devices %d and %d have the same PCI bus id %s", prev, d, info.PCIBusID)
		}
		seen[info.PCIBusID] = d
	}
	return nil
}

func (dc *devCtx) linkSelf(s Spec) error {
	l, err := dc.p.Link(dc.dev, dc.dev)
	if err != nil {
		return err
	}
	if l.Type != loader.LinkSelf {
		return wrongf("getLinkInfo(%d, %d) says %s, want self", dc.dev, dc.dev, l.Type)
	}
	return nil
}

func (dc *devCtx) malloc(s Spec) error {
	seen := map[uintptr]bool{}
	for _, n := range []int{1, 4099, bigBytes} {
		ptr, err := dc.raw(n)
		if err != nil {
			return err
		}
		if ptr == 0 || seen[ptr] {
			return wrongf("deviceMalloc(%d) returned %#x (NULL or already in use)", n, ptr)
		}
		seen[ptr] = true
	}
	for _, b := range dc.sc.bufs {
		if err := dc.p.DeviceFree(b.base); err != nil {
			return err
		}
	}
	dc.sc.bufs = nil
	return nil
}

func (dc *devCtx) hostMalloc(s Spec) error {
	h, mem, err := dc.pinned(4099)
	if err != nil {
		return err
	}
	if h == 0 {
		return wrongf("hostMalloc returned NULL")
	}
	want := pattern(4099, s.Seed)
	copy(mem, want)
	if !bytes.Equal(mem, want) {
		return wrongf("pinned host memory does not keep what the host wrote")
	}
	return nil
}

func (dc *devCtx) memcpySync(s Spec) error {
	for _, n := range []int{1, 4099, bigBytes} {
		ptr, err := dc.raw(n + 16)
		if err != nil {
			return err
		}
		if err := dc.p.CopyToDevice(ptr, make([]byte, n+16)); err != nil {
			return err
		}
		data := pattern(n, s.Seed+uint64(n))
		if err := dc.p.CopyToDevice(ptr+3, data); err != nil {
			return err
		}
		got, err := dc.readBack(ptr, n+16)
		if err != nil {
			return err
		}
		want := make([]byte, n+16)
		copy(want[3:], data)
		if err := compareElems(fmt.Sprintf("%d bytes copied to device offset 3 and back", n), sdk.Uint8, got, want, nil); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) memcpyD2D(s Spec) error {
	const n = 1<<20 + 5
	a, err := dc.raw(n)
	if err != nil {
		return err
	}
	b, err := dc.raw(n)
	if err != nil {
		return err
	}
	data := pattern(n, s.Seed)
	if err := dc.p.CopyToDevice(a, data); err != nil {
		return err
	}
	if err := dc.p.CopyToDevice(b, make([]byte, n)); err != nil {
		return err
	}
	if err := dc.p.Memcpy(b+1, a+3, n-3, loader.DeviceToDevice, 0); err != nil {
		return err
	}
	got, err := dc.readBack(b, n)
	if err != nil {
		return err
	}
	want := make([]byte, n)
	copy(want[1:], data[3:])
	if err := compareElems("device-to-device copy between allocations", sdk.Uint8, got, want, nil); err != nil {
		return err
	}
	if err := dc.p.Memcpy(a+n/2, a+7, 4099, loader.DeviceToDevice, 0); err != nil {
		return err
	}
	got, err = dc.readBack(a, n)
	if err != nil {
		return err
	}
	copy(data[n/2:], data[7:7+4099])
	return compareElems("device-to-device copy within an allocation", sdk.Uint8, got, data, nil)
}

// roundTrip is what a copy case moves: pattern data in pinned memory
// (src), two device buffers (a, b) and a zeroed pinned destination (dst,
// seen by the host as out).
type roundTrip struct {
	src, a, b, dst uintptr
	data, out      []byte
}

func (dc *devCtx) roundTrip(n int, seed uint64) (*roundTrip, error) {
	var rt roundTrip
	var in []byte
	var err error
	if rt.src, in, err = dc.pinned(n); err != nil {
		return nil, err
	}
	if rt.dst, rt.out, err = dc.pinned(n); err != nil {
		return nil, err
	}
	if rt.a, err = dc.raw(n); err != nil {
		return nil, err
	}
	if rt.b, err = dc.raw(n); err != nil {
		return nil, err
	}
	rt.data = pattern(n, seed)
	copy(in, rt.data)
	fillBytes(rt.out, 0)
	return &rt, nil
}

// inOrder makes the calls one after the other until one fails.
func inOrder(calls ...func() error) error {
	for _, call := range calls {
		if err := call(); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) memcpyAsync(s Spec) error {
	const n = 1<<20 + 7
	rt, err := dc.roundTrip(n, s.Seed)
	if err != nil {
		return err
	}
	st := dc.w.stream
	if err := inOrder(
		func() error { return dc.p.Memcpy(rt.a, rt.src, n, loader.HostToDevice, st) },
		func() error { return dc.p.Memcpy(rt.b, rt.a, n, loader.DeviceToDevice, st) },
		func() error { return dc.p.Memcpy(rt.dst, rt.b, n, loader.DeviceToHost, st) },
		func() error { return dc.p.StreamSynchronize(st) },
	); err != nil {
		return err
	}
	return compareElems("host to device to device to host on a stream", sdk.Uint8, rt.out, rt.data, nil)
}

func (dc *devCtx) memset(s Spec) error {
	const n = 4099
	ptr, err := dc.raw(n + 16)
	if err != nil {
		return err
	}
	if err := dc.p.CopyToDevice(ptr, make([]byte, n+16)); err != nil {
		return err
	}
	var st loader.Stream
	if s.Kind == KindDeviceMemsetAsync {
		st = dc.w.stream
	}
	if err := dc.p.Memset(ptr+5, 0xa7, n, st); err != nil {
		return err
	}
	if st != 0 {
		if err := dc.p.StreamSynchronize(st); err != nil {
			return err
		}
	}
	got, err := dc.readBack(ptr, n+16)
	if err != nil {
		return err
	}
	want := make([]byte, n+16)
	fillBytes(want[5:5+n], 0xa7)
	return compareElems("memSet of 4099 bytes at offset 5", sdk.Uint8, got, want, nil)
}

func (dc *devCtx) streams(s Spec) error {
	var streams []loader.Stream
	for i := 0; i < 16; i++ {
		st, err := dc.p.StreamCreate(dc.dev)
		if err != nil {
			return err
		}
		streams = append(streams, st)
	}
	for _, st := range streams {
		if err := dc.p.StreamSynchronize(st); err != nil {
			return err
		}
	}
	for _, st := range streams {
		if err := dc.p.StreamDestroy(st); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) streamQuery(s Spec) error {
	if err := dc.p.StreamSynchronize(dc.w.stream); err != nil {
		return err
	}
	done, err := dc.p.StreamQuery(dc.w.stream)
	if err != nil {
		return err
	}
	if !done {
		return wrongf("streamQuery says an idle, synchronized stream is still busy")
	}
	return nil
}

func (dc *devCtx) event(s Spec) error {
	const n = 8 << 20
	h, hm, err := dc.pinned(n)
	if err != nil {
		return err
	}
	a, err := dc.raw(n)
	if err != nil {
		return err
	}
	data := pattern(4099, s.Seed)
	copy(hm, data)
	e0, err := dc.p.EventCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.EventDestroy(e0) }()
	e1, err := dc.p.EventCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.EventDestroy(e1) }()
	if err := inOrder(
		func() error { return dc.p.EventRecord(e0, dc.w.stream) },
		func() error { return dc.p.Memcpy(a, h, n, loader.HostToDevice, dc.w.stream) },
		func() error { return dc.p.EventRecord(e1, dc.w.stream) },
		func() error { return dc.p.EventSynchronize(e1) },
	); err != nil {
		return err
	}
	switch s.Kind {
	case KindDeviceEvent:
		got, err := dc.readBack(a, 4099)
		if err != nil {
			return err
		}
		return compareElems("copy before the synchronized event", sdk.Uint8, got, data, nil)
	case KindDeviceEventQuery:
		done, err := dc.p.EventQuery(e1)
		if err != nil {
			return err
		}
		if !done {
			return wrongf("eventQuery says a synchronized event was not reached")
		}
	case KindDeviceEventElapsed:
		d, err := dc.p.EventElapsed(e0, e1)
		if err != nil {
			return err
		}
		if d < 0 || d.Seconds() > 60 {
			return wrongf("eventElapsedTime around an 8 MiB copy is %v", d)
		}
	}
	return nil
}

func (dc *devCtx) streamWaitEvent(s Spec) error {
	const n = 4 << 20
	rt, err := dc.roundTrip(n, s.Seed)
	if err != nil {
		return err
	}
	s2, err := dc.p.StreamCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.StreamDestroy(s2) }()
	e, err := dc.p.EventCreate(dc.dev)
	if err != nil {
		return err
	}
	defer func() { _ = dc.p.EventDestroy(e) }()
	st := dc.w.stream
	if err := inOrder(
		func() error { return dc.p.Memcpy(rt.a, rt.src, n, loader.HostToDevice, st) },
		func() error { return dc.p.EventRecord(e, st) },
		func() error { return dc.p.StreamWaitEvent(s2, e) },
		func() error { return dc.p.Memcpy(rt.b, rt.a, n, loader.DeviceToDevice, s2) },
		func() error { return dc.p.Memcpy(rt.dst, rt.b, n, loader.DeviceToHost, s2) },
		func() error { return dc.p.StreamSynchronize(s2) },
	); err != nil {
		return err
	}
	err = compareElems("copies on a second stream that waited for an event of the first", sdk.Uint8, rt.out, rt.data, nil)
	return errors.Join(err, dc.p.StreamSynchronize(st))
}

func (dc *devCtx) pointerKind(s Spec) error {
	d, err := dc.raw(4096)
	if err != nil {
		return err
	}
	h, _, err := dc.pinned(4096)
	if err != nil {
		return err
	}
	goMem := make([]byte, 4096)
	kinds := []struct {
		what string
		ptr  uintptr
		ok   []loader.MemoryKind
	}{
		{"deviceMalloc memory", d, []loader.MemoryKind{loader.MemDevice, loader.MemManaged}},
		{"hostMalloc memory", h, []loader.MemoryKind{loader.MemHostPinned}},
		{"pageable host memory", uintptr(unsafe.Pointer(&goMem[0])), []loader.MemoryKind{loader.MemHost, loader.MemUnknown}},
	}
	for _, k := range kinds {
		got, err := dc.p.PointerKind(k.ptr)
		if err != nil {
			return err
		}
		good := false
		for _, ok := range k.ok {
			good = good || got == ok
		}
		if !good {
			return wrongf("pointerKind of %s says %s, want %v", k.what, got, k.ok)
		}
	}
	runtime.KeepAlive(goMem)
	return nil
}

func (dc *devCtx) everyDevice(s Spec) error {
	for d := 0; d < min(dc.ndev, 16); d++ {
		ptr, err := dc.p.DeviceMalloc(d, 4099)
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		dc.sc.bufs = append(dc.sc.bufs, devBuf{base: ptr})
		data := pattern(4099, s.Seed+uint64(d))
		if err := dc.p.CopyToDevice(ptr, data); err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		st, err := dc.p.StreamCreate(d)
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		got := make([]byte, 4099)
		err = dc.p.CopyFromDevice(got, ptr)
		err = errors.Join(err, dc.p.StreamSynchronize(st), dc.p.StreamDestroy(st))
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		if err := compareElems(fmt.Sprintf("device %d: copy to the device and back", d), sdk.Uint8, got, data, nil); err != nil {
			return err
		}
	}
	return nil
}

func (dc *devCtx) badDevice(s Spec) error {
	ptr, err := dc.p.DeviceMalloc(dc.ndev, 64)
	if err == nil {
		_ = dc.p.DeviceFree(ptr)
		return wrongf("deviceMalloc on device %d succeeded, but the plugin reports %d devices", dc.ndev, dc.ndev)
	}
	var ce *loader.CallError
	if !errors.As(err, &ce) || ce.Message == "" {
		return wrongf("deviceMalloc on device %d failed without a getLastError message (%v)", dc.ndev, err)
	}
	return nil
}

// reduceLocal checks ABI v4's reduceLocal: for every data type and op the
// plugin declares, 1, 2, 3 and 8 sources of 1 and 4099 elements, out of
// place and in place (the result over the last source, then the first).
// The sources are the reference inputs of an AllReduce over as many ranks,
// so the fold must equal that AllReduce's result, bit for bit (avg: the
// sum divided by the source count, which the reference keeps exact).
func (dc *devCtx) reduceLocal(s Spec) error {
	rule := foldRule{entry: "reduceLocal", did: "reduced"}
	return dc.declaredFolds(func(dt sdk.DataType, op sdk.RedOp, n int) error {
		for _, count := range []int{1, 4099} {
			for _, dstAt := range []int{-1, n - 1, 0} {
				c := reference.Case{Coll: sdk.AllReduce, Type: dt, Op: op, NRanks: n, Count: count, Seed: s.Seed}
				if err := rule.check(dt, op, dc.reduceLocalOnce(c, dstAt)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// declaredFolds calls each for every data type and op the plugin
// declares, with 1, 2, 3 and 8 sources: what an optional fold entry
// (reduceLocal, relayReduce) must serve.
func (dc *devCtx) declaredFolds(each func(dt sdk.DataType, op sdk.RedOp, n int) error) error {
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			if !dc.p.SupportsDataType(dt) || !dc.p.SupportsRedOp(op) {
				continue
			}
			for _, n := range []int{1, 2, 3, loader.MaxReduceSrcs} {
				if err := each(dt, op, n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// foldRule is the ABI's rule for an optional fold entry: every declared
// type and op, or none. A refusal (flagcxNotSupported) of the first call
// returns as it is (the case is skipped); after a call went through it is
// wrong.
type foldRule struct {
	entry, did string // the entry, and what it did ("reduced")
	done       int
}

func (f *foldRule) check(dt sdk.DataType, op sdk.RedOp, err error) error {
	if errors.Is(err, sdk.ErrNotSupported) && f.done > 0 {
		return wrongf("%s refused %s %s after it %s other types and ops: %v", f.entry, dt, op, f.did, err)
	}
	if err != nil {
		return err
	}
	f.done++
	return nil
}

// reduceLocalOnce folds c's n rank inputs into a fresh buffer (dstAt < 0)
// or over source dstAt, on the worker's stream.
func (dc *devCtx) reduceLocalOnce(c reference.Case, dstAt int) error {
	bytes := c.Count * c.Type.Size()
	srcs := make([]uintptr, c.NRanks)
	bufs := make([]devBuf, c.NRanks)
	for r := range srcs {
		in := make([]byte, bytes)
		reference.FillInput(c, r, in)
		b, err := dc.sc.alloc(in)
		if err != nil {
			return err
		}
		bufs[r], srcs[r] = b, b.ptr()
	}
	where := "out of place"
	var dst devBuf
	if dstAt >= 0 {
		dst, where = bufs[dstAt], fmt.Sprintf("in place over source %d", dstAt)
	} else {
		var err error
		if dst, err = dc.sc.alloc(filled(bytes, 0x5a)); err != nil {
			return err
		}
	}
	st := dc.w.stream
	if err := dc.p.ReduceLocal(dc.dev, dst.ptr(), srcs, c.Count, c.Type, c.Op, c.NRanks, st); err != nil {
		return err
	}
	if err := dc.p.StreamSynchronize(st); err != nil {
		return err
	}
	name := fmt.Sprintf("reduceLocal of %d %s sources, %s, %d elements, %s", c.NRanks, c.Type, c.Op, c.Count, where)
	return dc.w.verify(checked{name: name, buf: dst, want: reference.Expected(c, 0), dt: c.Type})
}

// reduceLocalStream checks that reduceLocal keeps the stream's order: two
// sources copied in on the worker's stream, folded, and copied out on it,
// with one synchronise at the end. The emulators hold back work nobody
// waits for, so a fold that does not wait for the copies before it (or
// that the copy after it does not wait for) reads or yields stale data.
func (dc *devCtx) reduceLocalStream(s Spec) error {
	c := reference.Case{Coll: sdk.AllReduce, Type: sdk.Float32, Op: sdk.Sum, NRanks: 2, Count: 4097, Seed: s.Seed}
	n := c.Count * c.Type.Size()
	var ins [2]uintptr
	var srcs [2]uintptr
	for r := range ins {
		h, in, err := dc.pinned(n)
		if err != nil {
			return err
		}
		reference.FillInput(c, r, in)
		if srcs[r], err = dc.raw(n); err != nil {
			return err
		}
		ins[r] = h
	}
	dst, err := dc.raw(n)
	if err != nil {
		return err
	}
	out, got, err := dc.pinned(n)
	if err != nil {
		return err
	}
	fillBytes(got, 0)
	st := dc.w.stream
	if err := inOrder(
		func() error { return dc.p.Memcpy(srcs[0], ins[0], n, loader.HostToDevice, st) },
		func() error { return dc.p.Memcpy(srcs[1], ins[1], n, loader.HostToDevice, st) },
		func() error { return dc.p.ReduceLocal(dc.dev, dst, srcs[:], c.Count, c.Type, c.Op, 1, st) },
		func() error { return dc.p.Memcpy(out, dst, n, loader.DeviceToHost, st) },
		func() error { return dc.p.StreamSynchronize(st) },
	); err != nil {
		return err
	}
	return compareElems("copies in, reduceLocal and a copy out on one stream", c.Type, got, reference.Expected(c, 0), nil)
}
