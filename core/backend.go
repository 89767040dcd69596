package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Where a rank runs (Backend) and the memory it passes (Buffer).

// Backend is where a rank runs (its placement): the built-in host backend
// (Plugin nil) or device Device of an initialized plugin. Ranks on one
// vendor's devices form a cluster; host ranks form the host cluster.
type Backend struct {
	Plugin *loader.Plugin // nil: the host
	Device int            // the plugin's device index, from 0
}

// HostBackend is the host (the CPU) as a rank's device: its buffers are
// host memory, and it needs no plugin.
func HostBackend() Backend { return Backend{} }

// DeviceBackend is device dev of plugin p, which must be initialized
// (p.Init; loader.LoadAll does it) and have a collective library.
func DeviceBackend(p *loader.Plugin, dev int) Backend { return Backend{Plugin: p, Device: dev} }

// OnDevice reports whether the backend is a plugin's device.
func (b Backend) OnDevice() bool { return b.Plugin != nil }

// Vendor is the backend's cluster key: the plugin's vendor, or "host".
func (b Backend) Vendor() string {
	if b.Plugin == nil {
		return sched.HostVendor
	}
	return b.Plugin.Vendor
}

// String is "host" or "<plugin>:<device>".
func (b Backend) String() string {
	if b.Plugin == nil {
		return "host"
	}
	return fmt.Sprintf("%s:%d", b.Plugin.Name, b.Device)
}

// Buffer is one rank's memory for a collective: host memory on a host
// rank, device memory of the rank's plugin on a device rank (a pointer
// from DeviceMalloc, or pinned memory from HostMalloc, with its length).
// One API then serves every rank of a heterogeneous communicator.
type Buffer struct {
	host []byte
	ptr  uintptr
	n    int
	dev  bool
}

// HostBuffer wraps host memory: the buffers of a host rank.
func HostBuffer(b []byte) Buffer { return Buffer{host: b, n: len(b)} }

// DeviceBuffer wraps n bytes of device memory at ptr (from the rank's
// plugin's DeviceMalloc): the buffers of a device rank.
func DeviceBuffer(ptr uintptr, n int) Buffer { return Buffer{ptr: ptr, n: n, dev: true} }

// Len is the buffer's size in bytes.
func (b Buffer) Len() int { return b.n }

// OnDevice reports whether the buffer is device memory.
func (b Buffer) OnDevice() bool { return b.dev }

// Host is a host buffer's memory (nil for device memory).
func (b Buffer) Host() []byte { return b.host }

// Ptr is a device buffer's address (0 for host memory).
func (b Buffer) Ptr() uintptr { return b.ptr }

// Slice is the n bytes at off, for NCCL's in-place layouts (AllGather's
// send = recv.Slice(rank*bytes, bytes), and so on).
func (b Buffer) Slice(off, n int) (Buffer, error) {
	if off < 0 || n < 0 || off > b.n || n > b.n-off {
		return Buffer{}, fmt.Errorf("%w: slice [%d, %d+%d) of a %d-byte buffer: keep it inside the buffer", sdk.ErrInvalidArgument, off, off, n, b.n)
	}
	if b.dev {
		return Buffer{ptr: b.ptr + uintptr(off), n: n, dev: true}, nil
	}
	return Buffer{host: b.host[off : off+n], n: n}, nil
}
