package core

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

type callBufs struct {
	send, recv Buffer
	user       []Buffer
}

// mem is a resolved Ref: device memory or host memory.
type mem struct {
	dev  bool
	ptr  uintptr
	host []byte
}

func (m mem) same(o mem) bool {
	if m.dev != o.dev {
		return false
	}
	if m.dev {
		return m.ptr == o.ptr
	}
	return len(m.host) > 0 && len(o.host) > 0 && &m.host[0] == &o.host[0]
}

func hostAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

func (c *Comm) resolve(b *callBufs, r sched.Ref) (mem, error) {
	var base Buffer
	switch r.Buf {
	case sched.BufNone:
		return mem{}, nil
	case sched.BufSend:
		base = b.send
	case sched.BufRecv:
		base = b.recv
	case sched.BufUser:
		if r.Idx < 0 || r.Idx >= len(b.user) {
			return mem{}, fmt.Errorf("%w: plan refers to group operation %d of %d", sdk.ErrInternalError, r.Idx, len(b.user))
		}
		base = b.user[r.Idx]
	case sched.BufScratch:
		if c.be.OnDevice() {
			base = DeviceBuffer(c.scratchPtr, c.scratchLen)
		} else {
			base = HostBuffer(c.hscratch)
		}
	case sched.BufStage:
		base = HostBuffer(c.stage)
	default:
		return mem{}, fmt.Errorf("%w: plan refers to buffer kind %d", sdk.ErrInternalError, r.Buf)
	}
	if r.Len == 0 {
		// Placeholders (a non-root's unused buffer): the address only.
		m := mem{dev: base.dev, ptr: base.ptr}
		if base.dev && r.Off <= base.n {
			m.ptr += uintptr(r.Off)
		}
		return m, nil
	}
	sub, err := base.Slice(r.Off, r.Len)
	if err != nil {
		return mem{}, fmt.Errorf("%w: plan refers to %s beyond its %d bytes", sdk.ErrInternalError, r, base.n)
	}
	return mem{dev: sub.dev, ptr: sub.ptr, host: sub.host}, nil
}

// roundUp grows allocations in powers of two (from 64 KiB), so that a
// sweep over sizes reallocates a few times, not every call.
func roundUp(n int) int {
	if n <= 64<<10 {
		return 64 << 10
	}
	return 1 << bits.Len(uint(n-1))
}

// ensure makes staging and scratch as large as the plan needs.
func (c *Comm) ensure(p *sched.Plan) error {
	stage, scratch := p.StageBytes(), p.ScratchBytes()
	pl := c.be.Plugin
	if stage > len(c.stage) {
		n := roundUp(stage)
		if pl == nil {
			c.stage = make([]byte, n)
		} else {
			if c.stagePtr != 0 {
				_ = pl.HostFree(c.stagePtr)
				c.stagePtr, c.stage = 0, nil
			}
			ptr, err := pl.HostMalloc(n)
			if err != nil {
				return fmt.Errorf("allocating %d bytes of pinned staging: %w", n, err)
			}
			c.stagePtr, c.stage = ptr, loader.HostSlice(ptr, n)
		}
	}
	if pl == nil {
		if scratch > len(c.hscratch) {
			c.hscratch = make([]byte, roundUp(scratch))
		}
		return nil
	}
	if scratch > c.scratchLen {
		if c.scratchPtr != 0 {
			_ = pl.DeviceFree(c.scratchPtr)
			c.scratchPtr, c.scratchLen = 0, 0
		}
		n := roundUp(scratch)
		ptr, err := pl.DeviceMalloc(c.be.Device, n)
		if err != nil {
			return fmt.Errorf("allocating %d bytes of device scratch on %s device %d: %w", n, pl.Name, c.be.Device, err)
		}
		c.scratchPtr, c.scratchLen = ptr, n
	}
	return nil
}
