package netplugin

import (
	"fmt"
	"unsafe"

	"github.com/flagcx/flagcx-go/sdk"
)

// ListenComm is a receiver's endpoint before the sender connected.
type ListenComm struct {
	p *Plugin
	h uintptr
}

// SendComm is the sending end of one connection.
type SendComm struct {
	p *Plugin
	h uintptr
}

// RecvComm is the receiving end of one connection.
type RecvComm struct {
	p *Plugin
	h uintptr
}

// MR is registered memory (an mhandle).
type MR struct {
	p    *Plugin
	h    uintptr
	comm uintptr
}

// Request is an isend or irecv in flight.
type Request struct {
	p *Plugin
	h uintptr
}

func (p *Plugin) needInit(entry string) error {
	if !p.init {
		return p.errorf(entry, sdk.InvalidUsage, "call Init first")
	}
	return nil
}

// Listen makes a listening endpoint on dev; its handle goes to the sender.
func (p *Plugin) Listen(dev int) (*ListenComm, []byte, error) {
	if err := p.needInit("listen"); err != nil {
		return nil, nil, err
	}
	handle := make([]byte, HandleMaxBytes)
	var n, lc uintptr
	if err := p.call("listen", p.t.Listen, uintptr(dev), uintptr(unsafe.Pointer(&handle[0])), uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&lc))); err != nil {
		return nil, nil, err
	}
	if n == 0 || n > HandleMaxBytes {
		return nil, nil, p.errorf("listen", sdk.InternalError, "handle of %d bytes, outside 1..%d", n, HandleMaxBytes)
	}
	return &ListenComm{p, lc}, handle[:n], nil
}

// Connect connects to the listener of handle; reply goes back to it.
func (p *Plugin) Connect(dev int, handle []byte) (*SendComm, []byte, error) {
	if err := p.needInit("connect"); err != nil {
		return nil, nil, err
	}
	if len(handle) == 0 || len(handle) > HandleMaxBytes {
		return nil, nil, p.errorf("connect", sdk.InvalidArgument, "handle of %d bytes, outside 1..%d", len(handle), HandleMaxBytes)
	}
	reply := make([]byte, HandleMaxBytes)
	var n, sc uintptr
	if err := p.call("connect", p.t.Connect, uintptr(dev), uintptr(unsafe.Pointer(&handle[0])), uintptr(len(handle)),
		uintptr(unsafe.Pointer(&reply[0])), uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&sc))); err != nil {
		return nil, nil, err
	}
	if n == 0 || n > HandleMaxBytes {
		return nil, nil, p.errorf("connect", sdk.InternalError, "reply of %d bytes, outside 1..%d", n, HandleMaxBytes)
	}
	return &SendComm{p, sc}, reply[:n], nil
}

// Accept finishes the connection with the sender's reply. The ListenComm
// becomes the RecvComm: close the RecvComm, not the ListenComm, after a
// successful Accept.
func (l *ListenComm) Accept(reply []byte) (*RecvComm, error) {
	if len(reply) == 0 || len(reply) > HandleMaxBytes {
		return nil, l.p.errorf("accept", sdk.InvalidArgument, "reply of %d bytes, outside 1..%d", len(reply), HandleMaxBytes)
	}
	var rc uintptr
	if err := l.p.call("accept", l.p.t.Accept, l.h, uintptr(unsafe.Pointer(&reply[0])), uintptr(len(reply)), uintptr(unsafe.Pointer(&rc))); err != nil {
		return nil, err
	}
	return &RecvComm{l.p, rc}, nil
}

// Close releases a listener that was never accepted.
func (l *ListenComm) Close() error { return l.p.call("closeListen", l.p.t.CloseListen, l.h) }

func (p *Plugin) regMr(comm, addr uintptr, size, typ int) (*MR, error) {
	var mh uintptr
	if err := p.call("regMr", p.t.RegMr, comm, addr, uintptr(size), uintptr(typ), uintptr(unsafe.Pointer(&mh))); err != nil {
		return nil, err
	}
	return &MR{p: p, h: mh, comm: comm}, nil
}

// RegMr registers [addr, addr+size) of memory of type typ (PtrHost) for
// the device of the comm.
func (s *SendComm) RegMr(addr uintptr, size, typ int) (*MR, error) {
	return s.p.regMr(s.h, addr, size, typ)
}

// RegMr registers memory for the device of the comm.
func (r *RecvComm) RegMr(addr uintptr, size, typ int) (*MR, error) {
	return r.p.regMr(r.h, addr, size, typ)
}

// Dereg releases the registration.
func (m *MR) Dereg() error { return m.p.call("deregMr", m.p.t.DeregMr, m.comm, m.h) }

func mrHandle(m *MR) uintptr {
	if m == nil {
		return 0
	}
	return m.h
}

// Isend sends size bytes at addr (inside mr) with tag.
func (s *SendComm) Isend(addr uintptr, size, tag int, mr *MR) (Request, error) {
	var req uintptr
	err := s.p.call("isend", s.p.t.Isend, s.h, addr, uintptr(size), uintptr(int32(tag)), mrHandle(mr), uintptr(unsafe.Pointer(&req)))
	return Request{s.p, req}, err
}

// Irecv receives at most size bytes into addr (inside mr); tag must match
// the sender's.
func (r *RecvComm) Irecv(addr uintptr, size, tag int, mr *MR) (Request, error) {
	var req uintptr
	err := r.p.call("irecv", r.p.t.Irecv, r.h, addr, uintptr(size), uintptr(int32(tag)), mrHandle(mr), uintptr(unsafe.Pointer(&req)))
	return Request{r.p, req}, err
}

// Test progresses the request's comm: done with the bytes moved, or an
// error (both finish the request).
func (q Request) Test() (done bool, size int, err error) {
	if q.h == 0 {
		return false, 0, fmt.Errorf("%w: test of a request that was never made", sdk.ErrInvalidUsage)
	}
	var d int32
	var n uintptr
	if err := q.p.call("test", q.p.t.Test, q.h, uintptr(unsafe.Pointer(&d)), uintptr(unsafe.Pointer(&n))); err != nil {
		return false, 0, err
	}
	return d != 0, int(n), nil
}

// Close releases the comm.
func (s *SendComm) Close() error { return s.p.call("closeSend", s.p.t.CloseSend, s.h) }

// Close releases the comm.
func (r *RecvComm) Close() error { return r.p.call("closeRecv", r.p.t.CloseRecv, r.h) }

// AddrOf is the address of b's first byte, for memory Go does not move
// (mmap'ed, or C memory): never pass Go heap memory to the plugin.
func AddrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
