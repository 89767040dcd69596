package executor

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// Buf is a call's memory as the executor sees it: host bytes (Host), or
// N bytes of device memory at Ptr (Dev). core converts its Buffer to it
// field by field (core/exec.go), allocating nothing.
type Buf struct {
	Host []byte
	Ptr  uintptr
	N    int
	Dev  bool
}

// slice is the n bytes at off, or false beyond the buffer.
func (b Buf) slice(off, n int) (Buf, bool) {
	if off < 0 || n < 0 || off > b.N || n > b.N-off {
		return Buf{}, false
	}
	if b.Dev {
		return Buf{Ptr: b.Ptr + uintptr(off), N: n, Dev: true}, true
	}
	return Buf{Host: b.Host[off : off+n], N: n}, true
}

// Bufs are a call's buffers: its send and recv, and a group's transfers'
// (sched.BufUser, by index).
type Bufs struct {
	Send, Recv Buf
	User       []Buf
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

func (e *Executor) resolve(b *Bufs, r sched.Ref) (mem, error) {
	var base Buf
	switch r.Buf {
	case sched.BufNone:
		return mem{}, nil
	case sched.BufSend:
		base = b.Send
	case sched.BufRecv:
		base = b.Recv
	case sched.BufUser:
		if r.Idx < 0 || r.Idx >= len(b.User) {
			return mem{}, fmt.Errorf("%w: plan refers to group operation %d of %d", sdk.ErrInternalError, r.Idx, len(b.User))
		}
		base = b.User[r.Idx]
	case sched.BufScratch:
		if e.plugin != nil {
			base = Buf{Ptr: e.scratchPtr, N: e.scratchLen, Dev: true}
		} else {
			base = Buf{Host: e.hscratch, N: len(e.hscratch)}
		}
	case sched.BufStage:
		base = Buf{Host: e.stage, N: len(e.stage)}
	default:
		return mem{}, fmt.Errorf("%w: plan refers to buffer kind %d", sdk.ErrInternalError, r.Buf)
	}
	if r.Len == 0 {
		// Placeholders (a non-root's unused buffer): the address only.
		m := mem{dev: base.Dev, ptr: base.Ptr}
		if base.Dev && r.Off <= base.N {
			m.ptr += uintptr(r.Off)
		}
		return m, nil
	}
	sub, ok := base.slice(r.Off, r.Len)
	if !ok {
		return mem{}, fmt.Errorf("%w: plan refers to %s beyond its %d bytes", sdk.ErrInternalError, r, base.N)
	}
	return mem{dev: sub.Dev, ptr: sub.Ptr, host: sub.Host}, nil
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
func (e *Executor) ensure(p *sched.Plan) error {
	stage, scratch := p.StageBytes(), p.ScratchBytes()
	pl := e.plugin
	if stage > len(e.stage) {
		n := roundUp(stage)
		if pl == nil {
			e.stage = make([]byte, n)
		} else {
			if e.stagePtr != 0 {
				_ = pl.HostFree(e.stagePtr)
				e.stagePtr, e.stage = 0, nil
			}
			ptr, err := pl.HostMalloc(n)
			if err != nil {
				return fmt.Errorf("allocating %d bytes of pinned staging: %w", n, err)
			}
			e.stagePtr, e.stage = ptr, loader.HostSlice(ptr, n)
		}
	}
	if pl == nil {
		if scratch > len(e.hscratch) {
			e.hscratch = make([]byte, roundUp(scratch))
		}
		return nil
	}
	if scratch > e.scratchLen {
		if e.scratchPtr != 0 {
			_ = pl.DeviceFree(e.scratchPtr)
			e.scratchPtr, e.scratchLen = 0, 0
		}
		n := roundUp(scratch)
		ptr, err := pl.DeviceMalloc(e.device, n)
		if err != nil {
			return fmt.Errorf("allocating %d bytes of device scratch on %s device %d: %w", n, pl.Name, e.device, err)
		}
		e.scratchPtr, e.scratchLen = ptr, n
	}
	return nil
}
