// Command copybw measures what bounds the inter-cluster path of a
// heterogeneous schedule: pinned host <-> device copy bandwidth each way
// and both ways at once, through the plugin ABI (the same calls the
// schedules make), timed with the runtime's events, on one device or on
// several copying at once (-devices, the bound of layouts whose devices
// all copy together); with -host-workers, also the host memory's copy
// bandwidth (hostbw.go), which bounds layouts with host ranks.
//
//	make copybw   # bin/copybw; plain `make` builds it too
//	bin/copybw -plugin-dir build/plugins -plugin nvidia -devices 0 -size 256M
//	bin/copybw -devices all -size 256M,1G  # every device copying at once
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

func main() {
	dir := flag.String("plugin-dir", "build/plugins", "plugin directory")
	name := flag.String("plugin", "nvidia", "plugin name")
	devs := flag.String("devices", "0", "device indices that copy, all at once (as 0,1), or all")
	sizes := flag.String("size", "64M,256M", "comma-separated copy sizes (K/M/G, 1024-based)")
	iters := flag.Int("n", 20, "timed copies per size and direction")
	emulated := flag.Bool("emulated", false, "use the emulated vendor runtime")
	hostWorkers := flag.String("host-workers", "", "also measure host memory copies of the first size with these goroutine counts (e.g. 8,16,32)")
	flag.Parse()
	err := run(*dir, *name, *devs, *sizes, *iters, *emulated)
	if err == nil && *hostWorkers != "" {
		var n int
		if n, err = parseSize(strings.TrimSpace(strings.Split(*sizes, ",")[0])); err == nil {
			err = hostCopyBound(n, *hostWorkers, *iters)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "copybw: error:", err)
		os.Exit(1)
	}
}

// parseSize reads a copy size as every size in flagcx is read
// (env.ParseBytes: K/M/G 1024-based, 1.5M allowed); a copy of 0 bytes
// measures nothing.
func parseSize(s string) (int, error) {
	n, err := env.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: %w", s, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("bad size %q: a copy of 0 bytes measures nothing", s)
	}
	return int(n), nil
}

func run(dir, name, devList string, sizeList string, iters int, emulated bool) error {
	p, err := load(dir, name, emulated)
	if err != nil {
		return err
	}
	devs, err := parseDevices(p, devList)
	if err != nil {
		return err
	}
	meters := make([]*meter, len(devs))
	for i, dev := range devs {
		if meters[i], err = newMeter(p, dev, iters); err != nil {
			return err
		}
	}
	emu := ""
	if p.Emulated() {
		emu = " (EMULATED runtime: numbers mean nothing)"
	}
	kinds := []string{"pinned"}
	if p.CanRegisterHost() {
		kinds = append(kinds, "registered")
	}
	if len(devs) == 1 {
		fmt.Printf("# %s device %d, %d copies per size%s\n", name, devs[0], iters, emu)
	} else {
		fmt.Printf("# %s devices %s at once: each measurement starts on every device together (%d copies per size)%s\n", name, devList, iters, emu)
	}
	fmt.Println("# pinned: the runtime's host allocation; registered: shared memory (mmap) registered with hostRegister, as c2c-shm's windows")
	fmt.Println("| size | host memory | host->device GB/s | device->host GB/s | both at once, each way GB/s |")
	fmt.Println("|---|---|---|---|---|")
	for _, f := range strings.Split(sizeList, ",") {
		n, err := parseSize(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		for _, kind := range kinds {
			rates, err := measureAll(meters, kind, n)
			if err != nil {
				return err
			}
			for i, r := range rates {
				label := kind
				if len(devs) > 1 {
					label = fmt.Sprintf("%s, device %d", kind, devs[i])
				}
				fmt.Printf("| %d MiB | %s | %.1f | %.1f | %.1f |\n", n>>20, label, r[0], r[1], r[2])
			}
		}
	}
	return nil
}

// load is the named plugin of dir, loaded.
func load(dir, name string, emulated bool) (*loader.Plugin, error) {
	all, err := loader.LoadAll(loader.Options{Dir: dir, Emulated: emulated})
	if err != nil {
		return nil, err
	}
	for _, l := range all {
		if l.Name == name {
			if !l.OK() {
				return nil, l.Err
			}
			return l.Plugin, nil
		}
	}
	return nil, fmt.Errorf("no plugin %s in %s", name, dir)
}

// parseDevices reads -devices: "all", or device indices as 0,1.
func parseDevices(p *loader.Plugin, list string) ([]int, error) {
	if list == "all" {
		n, err := p.DeviceCount()
		if err != nil {
			return nil, err
		}
		devs := make([]int, n)
		for i := range devs {
			devs[i] = i
		}
		return devs, nil
	}
	var devs []int
	for _, f := range strings.Split(list, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("bad device %q in -devices: give all, or indices as 0,1", f)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// measureAll measures each direction of n-byte copies on every meter's
// device at once (host memory of the kind on each), and returns each
// device's host->device, device->host and both-at-once rates. Every
// device starts each of the three measurements together.
func measureAll(meters []*meter, kind string, n int) (rates [][3]float64, err error) {
	type bufs struct {
		devp, host uintptr
		free       func() error
	}
	b := make([]bufs, len(meters))
	defer func() {
		err = errors.Join(err, everyDevice(meters, func(i int, m *meter) error {
			var err error
			if b[i].free != nil {
				err = b[i].free()
			}
			if b[i].devp != 0 {
				err = errors.Join(err, m.p.DeviceFree(b[i].devp))
			}
			return err
		}))
	}()
	err = everyDevice(meters, func(i int, m *meter) (err error) {
		if b[i].devp, err = m.p.DeviceMalloc(m.dev, 2*n); err != nil {
			return err
		}
		b[i].host, b[i].free, err = hostBuffer(m.p, kind, 2*n)
		return err
	})
	rates = make([][3]float64, len(meters))
	for ph := 0; ph < 3 && err == nil; ph++ {
		err = everyDevice(meters, func(i int, m *meter) (err error) {
			devp, host := b[i].devp, b[i].host
			dirs := [][]copyDir{
				{{devp, host, loader.HostToDevice}},
				{{host, devp, loader.DeviceToHost}},
				{{devp, host, loader.HostToDevice}, {host + uintptr(n), devp + uintptr(n), loader.DeviceToHost}},
			}[ph]
			rates[i][ph], err = m.run(n, dirs)
			return err
		})
	}
	return rates, err
}

// everyDevice runs fn for every meter at once, each on a thread bound to
// its device, and waits for them all.
func everyDevice(meters []*meter, fn func(i int, m *meter) error) error {
	errs := make([]error, len(meters))
	var wg sync.WaitGroup
	for i, m := range meters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.onDevice(func() error { return fn(i, m) })
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// hostBuffer allocates n bytes of host memory of the kind: the runtime's
// pinned allocation, or shared memory registered with the runtime.
func hostBuffer(p *loader.Plugin, kind string, n int) (uintptr, func() error, error) {
	if kind == "pinned" {
		h, err := p.HostMalloc(n)
		return h, func() error { return p.HostFree(h) }, err
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		return 0, nil, fmt.Errorf("mapping %d bytes of shared memory: %w", n, err)
	}
	for i := 0; i < n; i += 4096 {
		b[i] = 1 // fault the pages in before registering
	}
	h := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if err := p.HostRegister(h, n); err != nil {
		_ = syscall.Munmap(b)
		return 0, nil, err
	}
	return h, func() error { return errors.Join(p.HostUnregister(h), syscall.Munmap(b)) }, nil
}

type copyDir struct {
	dst, src uintptr
	kind     loader.MemcpyKind
}

// meter times copies on one device with the runtime's events.
type meter struct {
	p           *loader.Plugin
	dev         int
	s           [2]loader.Stream
	start, stop loader.Event
	iters       int
}

func newMeter(p *loader.Plugin, dev, iters int) (*meter, error) {
	m := &meter{p: p, dev: dev, iters: iters}
	err := m.onDevice(func() (err error) {
		for i := range m.s {
			if m.s[i], err = p.StreamCreate(dev); err != nil {
				return err
			}
		}
		if m.start, err = p.EventCreate(dev); err != nil {
			return err
		}
		m.stop, err = p.EventCreate(dev)
		return err
	})
	return m, err
}

// onDevice runs fn on a thread bound to the meter's device, so that the
// runtime's allocations and copies of several devices at once each belong
// to their own device.
func (m *meter) onDevice(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = m.p.SetDevice(m.dev) // a plugin without setDevice binds devices itself
	return fn()
}

// run returns GB/s of each direction of dirs, copied at once (one stream
// each; the second waits for the start of the first so both are timed
// from one event).
func (m *meter) run(n int, dirs []copyDir) (float64, error) {
	p := m.p
	for i, d := range dirs { // warm up
		if err := p.Memcpy(d.dst, d.src, n, d.kind, m.s[i]); err != nil {
			return 0, err
		}
	}
	for i := range dirs {
		if err := p.StreamSynchronize(m.s[i]); err != nil {
			return 0, err
		}
	}
	if err := p.EventRecord(m.start, m.s[0]); err != nil {
		return 0, err
	}
	if len(dirs) > 1 {
		if err := p.StreamWaitEvent(m.s[1], m.start); err != nil {
			return 0, err
		}
	}
	for j := 0; j < m.iters; j++ {
		for i, d := range dirs {
			if err := p.Memcpy(d.dst, d.src, n, d.kind, m.s[i]); err != nil {
				return 0, err
			}
		}
	}
	if len(dirs) > 1 {
		if err := p.EventRecord(m.stop, m.s[1]); err != nil {
			return 0, err
		}
		if err := p.StreamWaitEvent(m.s[0], m.stop); err != nil {
			return 0, err
		}
	}
	if err := p.EventRecord(m.stop, m.s[0]); err != nil {
		return 0, err
	}
	if err := p.EventSynchronize(m.stop); err != nil {
		return 0, err
	}
	d, err := p.EventElapsed(m.start, m.stop)
	if err != nil {
		return 0, err
	}
	return float64(n) * float64(m.iters) / d.Seconds() / 1e9, nil
}
