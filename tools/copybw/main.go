// Command copybw measures what bounds the inter-cluster path of a
// heterogeneous schedule on one device: pinned host <-> device copy
// bandwidth each way, through the plugin ABI (the same calls the schedules
// make), timed with the runtime's events.
//
//	go build -o bin/copybw ./tools/copybw
//	bin/copybw -plugin-dir build/plugins -plugin nvidia -device 0 -size 256M
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/sdk/loader"
)

func main() {
	dir := flag.String("plugin-dir", "build/plugins", "plugin directory")
	name := flag.String("plugin", "nvidia", "plugin name")
	dev := flag.Int("device", 0, "device index")
	sizes := flag.String("size", "64M,256M", "comma-separated copy sizes (K/M/G, 1024-based)")
	iters := flag.Int("n", 20, "timed copies per size and direction")
	emulated := flag.Bool("emulated", false, "use the emulated vendor runtime")
	flag.Parse()
	if err := run(*dir, *name, *dev, *sizes, *iters, *emulated); err != nil {
		fmt.Fprintln(os.Stderr, "copybw: error:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
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
	emu := ""
	if p.Emulated() {
		emu = " (EMULATED runtime: numbers mean nothing)"
	}
	fmt.Printf("# %s device %d, pinned host memory, %d copies per size%s\n", name, dev, iters, emu)
	fmt.Println("| size | host->device GB/s | device->host GB/s |")
	fmt.Println("|---|---|---|")
	for _, f := range strings.Split(sizeList, ",") {
		n, err := parseSize(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		host, err := p.HostMalloc(n)
		if err != nil {
			return err
		}
		devp, err := p.DeviceMalloc(dev, n)
		if err != nil {
			return err
		}
		var bw [2]float64
		for i, kind := range []loader.MemcpyKind{loader.HostToDevice, loader.DeviceToHost} {
			dst, src := devp, host
			if kind == loader.DeviceToHost {
				dst, src = host, devp
			}
			if err := p.Memcpy(dst, src, n, kind, s); err != nil { // warm up
				return err
			}
			if err := p.EventRecord(start, s); err != nil {
				return err
			}
			for j := 0; j < iters; j++ {
				if err := p.Memcpy(dst, src, n, kind, s); err != nil {
					return err
				}
			}
			if err := p.EventRecord(stop, s); err != nil {
				return err
			}
			if err := p.EventSynchronize(stop); err != nil {
				return err
			}
			d, err := p.EventElapsed(start, stop)
			if err != nil {
				return err
			}
			bw[i] = float64(n) * float64(iters) / d.Seconds() / 1e9
		}
		fmt.Printf("| %d MiB | %.1f | %.1f |\n", n>>20, bw[0], bw[1])
		_ = p.HostFree(host)
		_ = p.DeviceFree(devp)
	}
	return nil
}
