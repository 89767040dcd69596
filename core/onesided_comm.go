package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/core/internal/onesided"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// What core/internal/onesided asks of a Comm (its interface Comm), and
// the start, stop and checks of a Comm's one-sided machinery.

// osState is the one-sided machinery of a Comm (its field os, declared in
// comm.go with the other fields).
type osState = onesided.State

// startOneSided starts c's one-sided machinery: every rank calls it at the
// same registration.
func (c *Comm) startOneSided(name string) (*osState, error) {
	if c.os != nil {
		return c.os, nil
	}
	o, err := onesided.Start(name, osComm{c}, c.osStaging)
	if err != nil {
		return nil, err
	}
	c.os = o
	return o, nil
}

// stopOneSided stops the progress goroutines (closing the one-sided
// links ends their waits), then releases the windows. abort: the
// goroutines are not waited for longer than a moment, nor after the
// watchdog gave up on a plugin call (one may be inside it).
func (c *Comm) stopOneSided(abort bool) error {
	if c.os == nil {
		return nil
	}
	return c.os.Stop(abort, abort || c.wd.Err() != nil)
}

// osBegin checks what every one-sided call needs: a usable communicator,
// outside a group.
func (c *Comm) osBegin(name string) error {
	if err := c.usable(name); err != nil {
		return err
	}
	if c.group > 0 {
		return fmt.Errorf("%w: %s on rank %d inside a group: one-sided calls are not grouped (call GroupEnd first)", sdk.ErrInvalidUsage, name, c.rank)
	}
	return nil
}

// osNeed is c's machinery for a call that needs a registered window.
func (c *Comm) osNeed(name string) (*osState, error) {
	if err := c.osBegin(name); err != nil {
		return nil, err
	}
	if c.os == nil {
		return nil, fmt.Errorf("%w: %s on rank %d: no window is registered (RegisterWindow or AllocWindow first, on every rank)", sdk.ErrInvalidUsage, name, c.rank)
	}
	if err := c.os.Stopped(); err != nil {
		return nil, fmt.Errorf("%s on rank %d: %w", name, c.rank, err)
	}
	return c.os, nil
}

// rma hands Put, PutBatch, Get, PutSignal and Signal to the machinery.
func (c *Comm) rma(name string, peer int, ops []RMA, k onesided.Kind, s Stream) error {
	o, err := c.osNeed(name)
	if err != nil {
		return err
	}
	// One operation (all but PutBatch) needs no allocation.
	var one [1]onesided.Op
	in := one[:0]
	if len(ops) > 1 {
		in = make([]onesided.Op, 0, len(ops))
	}
	for _, op := range ops {
		in = append(in, onesided.Op{Local: op.Local.state(), LocalOff: op.LocalOff, Remote: op.Remote.state(), RemoteOff: op.RemoteOff, Bytes: op.Bytes})
	}
	return o.RMA(name, peer, in, k, s)
}

// state is the machinery's window behind the handle (nil for none).
func (w *Window) state() *onesided.Window {
	if w == nil {
		return nil
	}
	return w.os
}

// handle is the user's handle of a window the machinery registered.
func (c *Comm) handle(w *onesided.Window, err error) (*Window, error) {
	if err != nil {
		return nil, err
	}
	m := w.Mem()
	return &Window{c: c, buf: Buffer{host: m.Host, ptr: m.Ptr, n: m.Len, dev: m.Dev}, os: w}, nil
}

func memOf(b Buffer) onesided.Mem {
	return onesided.Mem{Host: b.host, Ptr: b.ptr, Len: b.n, Dev: b.dev}
}

// osComm is a Comm as core/internal/onesided sees it.
type osComm struct{ c *Comm }

func (u osComm) Rank() int              { return u.c.rank }
func (u osComm) Size() int              { return u.c.n }
func (u osComm) Timeout() time.Duration { return u.c.world.Config().Timeout }

func (u osComm) CallError(name string, err error) error { return u.c.callError(name, err) }

// AllGather runs on the world communicator's host engine (an empty send:
// its barrier), as the collectives of the host placement do.
func (u osComm) AllGather(send, recv []byte) error {
	call := sdk.Call{Coll: sdk.AllGather, Count: len(send), DType: sdk.Uint8}
	if len(send) == 0 {
		call = sdk.Call{Coll: sdk.Barrier}
	}
	return u.c.world.Run(&call, send, recv)
}

// Split makes the one-sided links a communicator of their own, split from
// the world one: the same rendezvous and mesh builder, so the same table
// picks each pair's transport (shared memory on a host, TCP or the net
// plugin between hosts).
func (u osComm) Split() (onesided.Links, error) {
	rma, err := u.c.world.Split(0, u.c.rank)
	if err != nil {
		return nil, err
	}
	rma.SetInner(fmt.Sprintf("rank %d", u.c.rank))
	return osLinks{rma}, nil
}

func (u osComm) Device() onesided.Device {
	if !u.c.be.OnDevice() {
		return nil
	}
	return osDevice{u.c.dev, u.c.be.Device}
}

// osLinks are the one-sided links: a host communicator on which no
// collective runs.
type osLinks struct{ h *hostcomm.Comm }

func (l osLinks) Link(peer int) hostnet.Link { return l.h.Mesh().Links[peer] }
func (l osLinks) Node() *hostnet.ShmNode     { return l.h.Mesh().Node }
func (l osLinks) HostOf(peer int) string     { return l.h.HostOf(peer) }

func (l osLinks) LinkError(err error, doing string, peer int) error {
	return l.h.LinkError(err, doing, peer)
}

func (l osLinks) Close(abort bool) error {
	if abort {
		return l.h.Abort()
	}
	return l.h.Destroy()
}

// osDevice is a device rank's plugin for the machinery: its copies and
// stream waits are the watchdog's (watchedPlugin), its allocation and the
// device binding are not (they do not wait for the device's work).
type osDevice struct {
	*watchedPlugin
	dev int
}

func (d osDevice) Bind() error            { return d.Plugin.SetDevice(d.dev) }
func (d osDevice) Free(ptr uintptr) error { return d.Plugin.DeviceFree(ptr) }

// Alloc is n zeroed bytes of the device (AllocWindow's memory).
func (d osDevice) Alloc(n int) (uintptr, error) {
	p := d.Plugin
	ptr, err := p.DeviceMalloc(d.dev, max(n, 1))
	if err != nil {
		return 0, fmt.Errorf("%w: allocating %d bytes on %s device %d: %w", sdk.ErrSystemError, n, p.Name, d.dev, err)
	}
	if err := zeroDevice(p, ptr, n); err != nil {
		p.DeviceFree(ptr)
		return 0, fmt.Errorf("%w: zeroing the window on %s device %d: %w", sdk.ErrSystemError, p.Name, d.dev, err)
	}
	return ptr, nil
}

// zeroDevice zeroes n bytes at ptr: memSet where the plugin has it, else
// copies of zeros, 4 MiB at a time.
func zeroDevice(p *loader.Plugin, ptr uintptr, n int) error {
	err := p.Memset(ptr, 0, n, 0)
	if !errors.Is(err, sdk.ErrNotSupported) {
		return err
	}
	zeros := make([]byte, min(n, 4<<20))
	for off := 0; off < n; off += len(zeros) {
		if err := p.CopyToDevice(ptr+uintptr(off), zeros[:min(len(zeros), n-off)]); err != nil {
			return err
		}
	}
	return nil
}
