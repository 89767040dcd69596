package core

import (
	"errors"
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

// devRead copies len(dst) bytes of device memory at src into dst.
func (o *osState) devRead(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return o.c.dev.Memcpy(uintptr(unsafe.Pointer(unsafe.SliceData(dst))), src, len(dst), loader.DeviceToHost, 0)
}

// devWrite copies src into device memory at dst.
func (o *osState) devWrite(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return o.c.dev.Memcpy(dst, uintptr(unsafe.Pointer(unsafe.SliceData(src))), len(src), loader.HostToDevice, 0)
}

// memRead copies len(dst) bytes of m at off into dst (host memory).
func (o *osState) memRead(m osMem, off int, dst []byte) error {
	if !m.dev {
		copy(dst, m.host[off:off+len(dst)])
		return nil
	}
	return o.devRead(dst, m.ptr+uintptr(off))
}

// memWrite copies src (host memory) into m at off.
func (o *osState) memWrite(m osMem, off int, src []byte) error {
	if !m.dev {
		copy(m.host[off:off+len(src)], src)
		return nil
	}
	return o.devWrite(m.ptr+uintptr(off), src)
}

// copyLocal copies n bytes between two windows of this rank (a Put or Get
// to itself).
func (o *osState) copyLocal(dst osMem, doff int, src osMem, soff, n int) error {
	switch {
	case n == 0:
		return nil
	case !dst.dev && !src.dev:
		copy(dst.host[doff:doff+n], src.host[soff:soff+n])
		return nil
	case !dst.dev:
		return o.devRead(dst.host[doff:doff+n], src.ptr+uintptr(soff))
	case !src.dev:
		return o.devWrite(dst.ptr+uintptr(doff), src.host[soff:soff+n])
	}
	return o.c.dev.Memcpy(dst.ptr+uintptr(doff), src.ptr+uintptr(soff), n, loader.DeviceToDevice, 0)
}

// syncStream waits for the work on s (a device rank's stream): a Put's
// source may be the output of a kernel queued there.
func (o *osState) syncStream(s Stream) error {
	if !o.c.be.OnDevice() || s == 0 {
		return nil
	}
	return o.c.dev.StreamSynchronize(s)
}

// deviceThread pins a progress goroutine of a device rank to an OS thread
// on which the rank's device is current (vendor runtimes keep it per
// thread); it returns what undoes it.
func (o *osState) deviceThread() func() {
	be := o.c.be
	if !be.OnDevice() {
		return func() {}
	}
	runtime.LockOSThread()
	_ = be.Plugin.SetDevice(be.Device) // a copy that needs it fails, and says so
	return runtime.UnlockOSThread
}

// allocDevice is AllocWindow's memory on a device rank: n zeroed bytes of
// its device.
func (o *osState) allocDevice(w *osWindow, n int) error {
	p, dev := o.c.be.Plugin, o.c.be.Device
	ptr, err := p.DeviceMalloc(dev, max(n, 1))
	if err != nil {
		return fmt.Errorf("%w: allocating %d bytes on %s device %d: %w", sdk.ErrSystemError, n, p.Name, dev, err)
	}
	if err := zeroDevice(p, ptr, n); err != nil {
		p.DeviceFree(ptr)
		return fmt.Errorf("%w: zeroing the window on %s device %d: %w", sdk.ErrSystemError, p.Name, dev, err)
	}
	w.dev = ptr
	w.mem = osMem{ptr: ptr, n: n, dev: true}
	return nil
}

// releaseDevice frees AllocWindow's device memory (with w.mu held).
func (w *osWindow) releaseDevice() error {
	if w.dev == 0 {
		return nil
	}
	ptr := w.dev
	w.dev, w.mem.ptr = 0, 0
	return w.o.c.be.Plugin.DeviceFree(ptr)
}

// userStaging is the host staging of the user's goroutine for a device
// window's Put: RegisterStaging's, else a chunk of its own.
func (o *osState) userStaging() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.staging != nil {
		return o.staging[:min(len(o.staging), osChunk)]
	}
	if o.ownStaging == nil {
		o.ownStaging = make([]byte, osChunk)
	}
	return o.ownStaging
}

// zeroDevice zeroes n bytes at ptr: memSet where the plugin has it, else
// copies of zeros.
func zeroDevice(p *loader.Plugin, ptr uintptr, n int) error {
	err := p.Memset(ptr, 0, n, 0)
	if !errors.Is(err, sdk.ErrNotSupported) {
		return err
	}
	zeros := make([]byte, min(n, osChunk))
	for off := 0; off < n; off += len(zeros) {
		if err := p.CopyToDevice(ptr+uintptr(off), zeros[:min(len(zeros), n-off)]); err != nil {
			return err
		}
	}
	return nil
}
