package suite

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/ebitengine/purego"
)

// The leak check (comm.leak): a leak grows with every call, a cache grows
// until it is full. The resident memory of a process that frees all it
// takes still moves: glibc's malloc raises its mmap threshold after the
// first free of a large block and then keeps freed chunks in the arena of
// each thread that called it (the worker calls the plugin from several OS
// threads), the Go runtime keeps heap, shared windows are touched for the
// first time. One difference before and after a loop mistakes that for a
// leak, so the check measures after a warm-up and after each of
// leakWindows equal windows, and calls it a leak only when every window
// grew by more than a floor derived from the message size, and the windows
// grew alike (linear growth).

// leakWindows is how many equal windows the measured calls are cut into;
// the warm-up is one more window of the same length.
const leakWindows = 4

// The floors, in bytes a call, as a fraction of the message: a window that
// grew by less than floor x its calls is no evidence of a leak. Resident
// memory: a quarter of the message (64 KiB a call for 256 KiB, 3.2 MiB a
// window of 50 calls), far above what allocator caches add once warm, and a
// quarter of what a plugin keeping one message per call leaks. Device
// memory counts exact bytes on the emulators and the example and moves in
// 2 MiB pages on real GPUs: a sixteenth (16 KiB a call) still catches a
// 64 KiB allocation lost per call with a margin of four.
const (
	rssFloorDiv    = 4
	deviceFloorDiv = 16
)

// growth is one quantity sampled after the warm-up and after each window.
type growth struct {
	what    string  // "resident memory", "device memory in use on device 3"
	samples []int64 // bytes: after the warm-up, then after each window
	rounds  int     // calls per window
	floor   int64   // bytes a call
}

// windows is the growth of each window in bytes.
func (g growth) windows() []int64 {
	var ws []int64
	for i := 1; i < len(g.samples); i++ {
		ws = append(ws, g.samples[i]-g.samples[i-1])
	}
	return ws
}

// slope is the growth over all windows in bytes a call.
func (g growth) slope() int64 {
	n := len(g.samples) - 1
	if n < 1 || g.rounds < 1 {
		return 0
	}
	return (g.samples[n] - g.samples[0]) / int64(n*g.rounds)
}

// verdict says whether g is a leak and why (or why not). A leak grows in
// every window by more than the floor, and no window by less than half the
// median window: growth that stops in one window is a cache filling up, and
// a single jump (a cache, a new arena) does not hide a leak that goes on
// in the other windows.
func (g growth) verdict() (leak bool, why string) {
	ws := g.windows()
	if len(ws) < 3 {
		return false, fmt.Sprintf("not measured (%d windows)", len(ws))
	}
	sorted := slices.Clone(ws)
	slices.Sort(sorted)
	least, median := sorted[0], sorted[len(sorted)/2]
	floor := g.floor * int64(g.rounds)
	switch {
	case least <= floor:
		return false, fmt.Sprintf("no leak: a window grew by %d KiB, not more than the floor of %d KiB", least>>10, floor>>10)
	case 2*least < median:
		return false, fmt.Sprintf("no leak: a window grew by %d KiB, under half the median window (%d KiB), as a cache filling up does", least>>10, median>>10)
	}
	return true, fmt.Sprintf("a leak: every window grew by more than the floor of %d bytes a call, alike", g.floor)
}

// series is the measurement: the growth of each window and the slope.
func (g growth) series() string {
	ws := g.windows()
	kib := make([]string, len(ws))
	for i, w := range ws {
		kib[i] = fmt.Sprintf("%+d", w>>10)
	}
	return fmt.Sprintf("%s KiB in %d windows of %d calls, %d bytes a call", strings.Join(kib, ", "), len(ws), g.rounds, g.slope())
}

// leakCheck runs s.Iters/leakWindows identical allReduces as a warm-up
// (caches, lazily made streams and registrations settle), then s.Iters
// more in leakWindows windows, sampling the process's resident memory and
// the device memory in use on the worker's device after each (total - free
// from the plugin's memGetInfo, ABI v3, else an emulator's counter, else
// not at all). Either growing like a leak (growth.verdict) fails the case;
// the measurements are the case's note either way.
func (w *worker) leakCheck(s Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	rounds := s.Iters / leakWindows
	msg := int64(s.Count * s.Type.Size())
	rss := growth{what: "resident memory", rounds: rounds, floor: msg / rssFloorDiv}
	dev := growth{what: fmt.Sprintf("device memory in use on device %d", w.dev), rounds: rounds, floor: msg / deviceFloorDiv}
	for win := 0; win <= leakWindows; win++ {
		for i := 0; i < rounds; i++ {
			if err := w.allReduceCheck(w.comm, s, s.Seed+uint64(i)); err != nil {
				return fmt.Errorf("round %d: %w", win*rounds+i+1, err)
			}
		}
		runtime.GC()
		debug.FreeOSMemory()
		rss.samples = append(rss.samples, residentBytes())
		if d := w.deviceBytesInUse(); d >= 0 {
			dev.samples = append(dev.samples, d)
		}
	}
	gs := []growth{rss}
	if len(dev.samples) == len(rss.samples) {
		gs = append(gs, dev)
	}
	notes := make([]string, len(gs))
	var leaks []error
	for i, g := range gs {
		leak, why := g.verdict()
		notes[i] = fmt.Sprintf("%s %s: %s", g.what, g.series(), why)
		if leak {
			leaks = append(leaks, wrongf("%s grew in every window: %s after %d warm-up allReduces of %d KiB (%s)", g.what, g.series(), rounds, msg>>10, why))
		}
	}
	w.note = strings.Join(notes, "; ")
	if len(leaks) > 0 {
		return leaks[0]
	}
	return nil
}

// deviceBytesInUse is the device memory in use on the worker's device:
// total - free from the plugin's memGetInfo, else the emulator's counter,
// else -1 (not measurable). On a real GPU free also counts other
// processes: run the check on an otherwise idle device.
func (w *worker) deviceBytesInUse() int64 {
	if free, total, err := w.p.MemInfo(w.dev); err == nil && total >= free {
		return int64(total - free)
	}
	return emulatedDeviceBytes(w.dev)
}

// residentBytes is this process's resident set (VmRSS), 0 where unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// emulatedDeviceBytes is the device memory an emulated runtime has handed
// out on dev (vendorsim's counter), or -1 on a real runtime.
func emulatedDeviceBytes(dev int) int64 {
	const rtldNoLoad = 0x4 // glibc's RTLD_NOLOAD: only a library already in the process
	h, err := purego.Dlopen("libflagcx-vendorsim-core.so", purego.RTLD_NOW|rtldNoLoad)
	if err != nil {
		return -1
	}
	fn, err := purego.Dlsym(h, "vsim_mem_used")
	if err != nil {
		return -1
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dev))
	return int64(r)
}
