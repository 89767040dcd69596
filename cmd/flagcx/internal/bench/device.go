package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// HostBackendName is the built-in backend: the CPU as a device.
const HostBackendName = "host"

// Placement says which backend each rank runs on, in rank order, as
// --ranks nvidia:2,host:2 writes it.
type Placement []string

// ParsePlacement reads "name:count,name:count,...".
func ParsePlacement(s string) (Placement, error) {
	var p Placement
	for _, part := range strings.Split(s, ",") {
		name, count, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(count)
		if !ok || name == "" || err != nil || n < 1 {
			return nil, fmt.Errorf("--ranks %q: write backend:count pairs separated by commas, e.g. nvidia:2 or nvidia:2,host:2", s)
		}
		for i := 0; i < n; i++ {
			p = append(p, strings.ToLower(name))
		}
	}
	return p, nil
}

// backends lists the distinct backends in placement order.
func (p Placement) backends() []string {
	var out []string
	for _, b := range p {
		if len(out) == 0 || out[len(out)-1] != b {
			seen := false
			for _, o := range out {
				seen = seen || o == b
			}
			if !seen {
				out = append(out, b)
			}
		}
	}
	return out
}

// localIndex is rank's position among the earlier ranks of its backend: the
// device it takes when all ranks run on this host.
func (p Placement) localIndex(rank int) int {
	n := 0
	for r := 0; r < rank; r++ {
		if p[r] == p[rank] {
			n++
		}
	}
	return n
}

// openPlugin opens and initializes the named plugin from dir (only that
// one: each rank loads only its own vendor's runtime).
func openPlugin(name, dir string, emulated bool) (*loader.Plugin, error) {
	path, dir, err := pluginFile(name, dir)
	if err != nil {
		return nil, err
	}
	p, err := loader.Open(path)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	simDir := ""
	if !env.VendorsimDir.IsSet(nil) {
		simDir = filepath.Join(dir, "..", "vendorsim")
	}
	if err := p.Init(loader.InitOptions{Emulated: emulated || loader.EmulatedFromEnv(), VendorsimDir: simDir}); err != nil {
		return nil, fmt.Errorf("backend %s: %s: vendor runtime does not load: %w", name, path, err)
	}
	return p, nil
}

// deviceBackend is a device rank's side of the benchmark: a plugin's
// device memory, one stream the collectives are enqueued on, and the
// runtime's events to time them (or host timers around a stream
// synchronize where the runtime has no event timing). Its calls that wait
// for the device are bounded by the communicator's watchdog wd.
type deviceBackend struct {
	p           *loader.Plugin
	wd          *core.Watchdog
	dev         int
	stream      loader.Stream
	start, stop loader.Event
}

// watched makes a plugin call that waits for the device under the
// watchdog: past the deadline it aborts the communicator and the call
// fails with a *core.TimeoutError.
func watched(wd *core.Watchdog, call string, fn func() error) error {
	c := wd.Begin(call)
	return c.End(fn())
}

func newDeviceBackend(p *loader.Plugin, dev int, wd *core.Watchdog) (*deviceBackend, error) {
	d := &deviceBackend{p: p, wd: wd, dev: dev}
	var err error
	if d.stream, err = d.p.StreamCreate(d.dev); err != nil {
		return nil, err
	}
	if d.p.HasEventTiming() {
		if d.start, err = d.p.EventCreate(d.dev); err == nil {
			d.stop, err = d.p.EventCreate(d.dev)
		}
		if err != nil {
			d.close()
			return nil, err
		}
	}
	// The benchmark's buffers are device memory by construction (Alloc);
	// checking every call's pointers would only add to the latency measured.
	d.p.SetPointerChecks(false)
	return d, nil
}

func (d *deviceBackend) Name() string {
	name := fmt.Sprintf("%s device %d", d.p.Name, d.dev)
	if info, err := d.p.DeviceInfo(d.dev); err == nil && info.Name != "" {
		name += " " + info.Name
	}
	if d.p.Emulated() {
		name += " (emulated)"
	}
	return name
}

func (d *deviceBackend) Alloc(n int) (Buf, error) {
	ptr, err := d.p.DeviceMalloc(d.dev, max(n, 1))
	if err != nil {
		return nil, fmt.Errorf("allocating %s on %s device %d: %w", bytesize.Human(int64(n)), d.p.Name, d.dev, err)
	}
	b := &deviceBuf{p: d.p, wd: d.wd, ptr: ptr, n: n}
	if err := b.Zero(n); err != nil {
		_ = b.Free()
		return nil, err
	}
	return b, nil
}

func (d *deviceBackend) sync() error {
	return watched(d.wd, "streamSynchronize", func() error { return d.p.StreamSynchronize(d.stream) })
}

func (d *deviceBackend) startTimer() (func() (time.Duration, error), error) {
	if d.start != 0 {
		if err := d.p.EventRecord(d.start, d.stream); err != nil {
			return nil, err
		}
		return func() (time.Duration, error) {
			if err := d.p.EventRecord(d.stop, d.stream); err != nil {
				return 0, err
			}
			if err := watched(d.wd, "eventSynchronize", func() error { return d.p.EventSynchronize(d.stop) }); err != nil {
				return 0, err
			}
			return d.p.EventElapsed(d.start, d.stop)
		}, nil
	}
	// No event timing in this runtime: host time around a synchronize.
	if err := d.sync(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	return func() (time.Duration, error) {
		err := d.sync()
		return time.Since(t0), err
	}, nil
}

func (d *deviceBackend) describe() []string {
	runtime := "the vendor's own runtime libraries"
	if d.p.Emulated() {
		runtime = "EMULATED vendor runtime libraries (vendorsim), not the vendor's"
	}
	timing := "device events"
	if d.start == 0 {
		timing = "host clock around stream synchronize (the runtime has no event timing)"
	}
	lines := []string{
		fmt.Sprintf("Plugin %s (%s) %s, ABI v%d, %s: %s", d.p.Name, d.p.Vendor, d.p.Version, d.p.ABIVersion, d.p.Path, runtime),
		"Timing: " + timing,
	}
	for _, l := range d.p.Info().Libraries {
		if !l.Loaded {
			continue
		}
		v := l.Version
		if v == "" {
			v = "version unknown"
		}
		lines = append(lines, fmt.Sprintf("  %-10s %s %s", l.Role, v, l.Path))
	}
	return lines
}

func (d *deviceBackend) close() error {
	for _, e := range []loader.Event{d.start, d.stop} {
		if e != 0 {
			_ = d.p.EventDestroy(e)
		}
	}
	return d.p.StreamDestroy(d.stream)
}

// deviceBuf is device memory of a plugin; the host reaches it by copies.
type deviceBuf struct {
	p   *loader.Plugin
	wd  *core.Watchdog
	ptr uintptr
	n   int
	// partner frees the rank's share of a registered allocation made
	// beside the buffer (heteroBackend.Alloc), if any.
	partner func() error
}

func (b *deviceBuf) Len() int     { return b.n }
func (b *deviceBuf) Host() []byte { return nil }

func (b *deviceBuf) Write(off int, src []byte) error {
	if off < 0 || off+len(src) > b.n {
		return fmt.Errorf("write of %d bytes at %d outside a %d-byte buffer", len(src), off, b.n)
	}
	if len(src) == 0 {
		return nil
	}
	return watched(b.wd, "memCopy", func() error { return b.p.CopyToDevice(b.ptr+uintptr(off), src) })
}

func (b *deviceBuf) Read(off int, dst []byte) error {
	if off < 0 || off+len(dst) > b.n {
		return fmt.Errorf("read of %d bytes at %d outside a %d-byte buffer", len(dst), off, b.n)
	}
	if len(dst) == 0 {
		return nil
	}
	return watched(b.wd, "memCopy", func() error { return b.p.CopyFromDevice(dst, b.ptr+uintptr(off)) })
}

func (b *deviceBuf) Zero(n int) error {
	if n = min(n, b.n); n == 0 {
		return nil
	}
	return watched(b.wd, "memSet", func() error { return b.p.Memset(b.ptr, 0, n, 0) })
}

func (b *deviceBuf) Free() error {
	if b.ptr == 0 {
		return nil
	}
	err := b.p.DeviceFree(b.ptr)
	b.ptr = 0
	if b.partner != nil {
		err = errors.Join(err, b.partner())
		b.partner = nil
	}
	return err
}

// ptr is the region's device address.
func (r region) ptr() uintptr { return r.buf.(*deviceBuf).ptr + uintptr(r.off) }
