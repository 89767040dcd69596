package onesided

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// The device transport of one-sided calls: a device rank's windows are
// its plugin's memory, which neither peers nor the links reach. Their
// bytes are staged through host memory with the plugin's copies: a Put
// from a device window copies each chunk to host staging and sends it, a
// peer's Put into one is received into the serving goroutine's staging
// and copied to the device; Gets alike in reverse. A signal buffer in
// device memory is read and updated by copies too. A device rank and a
// host rank, or ranks of two vendors, so meet in host memory: the host
// staging of the vendor side (docs/onesided.md).

// MinStaging is the least host staging RegisterStaging takes.
const MinStaging = 64 << 10

// devRead copies len(dst) bytes of device memory at src into dst.
func (o *State) devRead(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return o.dev.Memcpy(uintptr(unsafe.Pointer(unsafe.SliceData(dst))), src, len(dst), loader.DeviceToHost, 0)
}

// devWrite copies src into device memory at dst.
func (o *State) devWrite(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return o.dev.Memcpy(dst, uintptr(unsafe.Pointer(unsafe.SliceData(src))), len(src), loader.HostToDevice, 0)
}

// memRead copies len(dst) bytes of m at off into dst (host memory).
func (o *State) memRead(m Mem, off int, dst []byte) error {
	if !m.Dev {
		copy(dst, m.Host[off:off+len(dst)])
		return nil
	}
	return o.devRead(dst, m.Ptr+uintptr(off))
}

// memWrite copies src (host memory) into m at off.
func (o *State) memWrite(m Mem, off int, src []byte) error {
	if !m.Dev {
		copy(m.Host[off:off+len(src)], src)
		return nil
	}
	return o.devWrite(m.Ptr+uintptr(off), src)
}

// copyLocal copies n bytes between two windows of this rank (a Put or Get
// to itself).
func (o *State) copyLocal(dst Mem, doff int, src Mem, soff, n int) error {
	switch {
	case n == 0:
		return nil
	case !dst.Dev && !src.Dev:
		copy(dst.Host[doff:doff+n], src.Host[soff:soff+n])
		return nil
	case !dst.Dev:
		return o.devRead(dst.Host[doff:doff+n], src.Ptr+uintptr(soff))
	case !src.Dev:
		return o.devWrite(dst.Ptr+uintptr(doff), src.Host[soff:soff+n])
	}
	return o.dev.Memcpy(dst.Ptr+uintptr(doff), src.Ptr+uintptr(soff), n, loader.DeviceToDevice, 0)
}

// syncStream waits for the work on s (a device rank's stream): a Put's
// source may be the output of a kernel queued there.
func (o *State) syncStream(s loader.Stream) error {
	if o.dev == nil || s == 0 {
		return nil
	}
	return o.dev.StreamSynchronize(s)
}

// deviceThread pins a progress goroutine of a device rank to an OS thread
// on which the rank's device is current (vendor runtimes keep it per
// thread); it returns what undoes it.
func (o *State) deviceThread() func() {
	if o.dev == nil {
		return func() {}
	}
	runtime.LockOSThread()
	_ = o.dev.Bind() // a copy that needs it fails, and says so
	return runtime.UnlockOSThread
}

// allocDevice is AllocWindow's memory on a device rank: n zeroed bytes of
// its device.
func (o *State) allocDevice(w *Window, n int) error {
	ptr, err := o.dev.Alloc(n)
	if err != nil {
		return err
	}
	w.dev = ptr
	w.mem = Mem{Ptr: ptr, Len: n, Dev: true}
	return nil
}

// releaseDevice frees AllocWindow's device memory (with w.mu held).
func (w *Window) releaseDevice() error {
	if w.dev == 0 {
		return nil
	}
	ptr := w.dev
	w.dev, w.mem.Ptr = 0, 0
	return w.o.dev.Free(ptr)
}

// CheckStaging checks buf as RegisterStaging's memory (nil: the
// machinery's own).
func CheckStaging(name string, rank int, buf []byte) error {
	if buf != nil && len(buf) < MinStaging {
		return fmt.Errorf("%w: %s on rank %d: %d bytes of staging are too few: pass at least %d", sdk.ErrInvalidArgument, name, rank, len(buf), MinStaging)
	}
	return nil
}

// SetStaging makes buf (checked by CheckStaging) the host staging of this
// rank's device windows.
func (o *State) SetStaging(buf []byte) {
	o.mu.Lock()
	o.staging = buf
	o.mu.Unlock()
}

// userStaging is the host staging of the user's goroutine for a device
// window's Put: RegisterStaging's, else a chunk of its own.
func (o *State) userStaging() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.staging != nil {
		return o.staging[:min(len(o.staging), chunkBytes)]
	}
	if o.ownStaging == nil {
		o.ownStaging = make([]byte, chunkBytes)
	}
	return o.ownStaging
}
