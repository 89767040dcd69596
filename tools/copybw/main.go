// Command copybw measures what bounds the inter-cluster path of a
// heterogeneous schedule on one device: pinned host <-> device copy
// bandwidth each way, through the plugin ABI (the same calls the schedules
// make), timed with the runtime's events; with -host-workers, also the
// host memory's copy bandwidth (hostbw.go), which bounds layouts with host
// ranks.
//
//	go build -o bin/copybw ./tools/copybw
//	bin/copybw -plugin-dir build/plugins -plugin nvidia -device 0 -size 256M
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/env"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

func main() {
	dir := flag.String("plugin-dir", "build/plugins", "plugin directory")
	name := flag.String("plugin", "nvidia", "plugin name")
	dev := flag.Int("device", 0, "device index")
	sizes := flag.String("size", "64M,256M", "comma-separated copy sizes (K/M/G, 1024-based)")
	iters := flag.Int("n", 20, "timed copies per size and direction")
	emulated := flag.Bool("emulated", false, "use the emulated vendor runtime")
	hostWorkers := flag.String("host-workers", "", "also measure host memory copies of the first size with these goroutine counts (e.g. 8,16,32)")
	flag.Parse()
	err := run(*dir, *name, *dev, *sizes, *iters, *emulated)
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

func run(dir, name string, dev int, sizeList string, iters int, emulated bool) error {
	all, err := loader.LoadAll(loader.Options{Dir: dir, Emulated: emulated})
	if err != nil {
		return err
	}
	var p *loader.Plugin
	for _, l := range all {
		if l.Name == name {
			if !l.OK() {
				return l.Err
			}
			p = l.Plugin
		}
	}
	if p == nil {
		return fmt.Errorf("no plugin %s in %s", name, dir)
	}
	s, err := p.StreamCreate(dev)
	if err != nil {
		return err
	}
	start, err := p.EventCreate(dev)
	if err != nil {
		return err
	}
	stop, err := p.EventCreate(dev)
	if err != nil {
		return err
	}
	s2, err := p.StreamCreate(dev)
	if err != nil {
		return err
	}
	emu := ""
	if p.Emulated() {
		emu = " (EMULATED runtime: numbers mean nothing)"
	}
	kinds := []string{"pinned"}
	if p.CanRegisterHost() {
		kinds = append(kinds, "registered")
	}
	fmt.Printf("# %s device %d, %d copies per size%s\n", name, dev, iters, emu)
	fmt.Println("# pinned: the runtime's host allocation; registered: shared memory (mmap) registered with hostRegister, as c2c-shm's windows")
	fmt.Println("| size | host memory | host->device GB/s | device->host GB/s | both at once, each way GB/s |")
	fmt.Println("|---|---|---|---|---|")
	for _, f := range strings.Split(sizeList, ",") {
		n, err := parseSize(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		devp, err := p.DeviceMalloc(dev, 2*n)
		if err != nil {
			return err
		}
		for _, kind := range kinds {
			host, free, err := hostBuffer(p, kind, 2*n)
			if err != nil {
				return err
			}
			m := meter{p: p, s: [2]loader.Stream{s, s2}, start: start, stop: stop, iters: iters}
			h2d, err := m.run(n, []copyDir{{devp, host, loader.HostToDevice}})
			if err == nil {
				var d2h, both float64
				if d2h, err = m.run(n, []copyDir{{host, devp, loader.DeviceToHost}}); err == nil {
					both, err = m.run(n, []copyDir{{devp, host, loader.HostToDevice}, {host + uintptr(n), devp + uintptr(n), loader.DeviceToHost}})
					fmt.Printf("| %d MiB | %s | %.1f | %.1f | %.1f |\n", n>>20, kind, h2d, d2h, both)
				}
			}
			if ferr := free(); err == nil {
				err = ferr
			}
			if err != nil {
				return err
			}
		}
		_ = p.DeviceFree(devp)
	}
	return nil
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

// meter times copies with the runtime's events.
type meter struct {
	p           *loader.Plugin
	s           [2]loader.Stream
	start, stop loader.Event
	iters       int
}

// run returns GB/s of each direction of dirs, copied at once (one stream
// each; the second waits for the start of the first so both are timed
// from one event).
func (m meter) run(n int, dirs []copyDir) (float64, error) {
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
