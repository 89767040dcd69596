// Package netsuite is the conformance suite of network plugins
// (sdk/include/flagcx_net.h): what every plugin must do, checked through
// sdk/netplugin. CI runs it against plugins/net-ib on the emulated verbs
// (conformance/vendorsim/ibverbs); a plugin's author runs it against their
// own file:
//
//	FLAGCX_NET_PLUGIN=/path/libflagcx-net-foo.so go test ./conformance/netsuite
//
// The cases are this package's tests; they connect a plugin to itself
// within one process (both ends of each connection), except TestPeerDies,
// which needs a second process. The package itself holds what they share:
// mmap'ed buffers Go never moves (Buffer), both ends of a connection (Pair:
// Connect, ConnectDevs), waits under one Deadline (Wait, WaitBoth) and
// payloads in which a misplaced or stale byte shows (Pattern).
package netsuite

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/flagcx/flagcx-go/sdk/netplugin"
)

// Deadline bounds every wait of the suite.
const Deadline = 20 * time.Second

// Buffer is host memory Go never moves (mmap'ed), registered per comm.
type Buffer struct {
	Mem []byte
}

// NewBuffer maps n bytes (at least one page).
func NewBuffer(n int) (*Buffer, error) {
	m, err := syscall.Mmap(-1, 0, max(n, 4096), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	return &Buffer{Mem: m}, nil
}

// Addr is the address of byte off.
func (b *Buffer) Addr(off int) uintptr { return netplugin.AddrOf(b.Mem[off:]) }

// Free unmaps the buffer.
func (b *Buffer) Free() { syscall.Munmap(b.Mem) }

// Pair is both ends of one connection made within this process.
type Pair struct {
	Send *netplugin.SendComm
	Recv *netplugin.RecvComm
}

// Connect makes a connection on dev: listen, connect with the handle,
// accept with the reply (what two processes do over their bootstrap).
func Connect(p *netplugin.Plugin, dev int) (*Pair, error) { return ConnectDevs(p, dev, dev) }

// ConnectDevs is Connect with the receiving end on device recvDev and the
// sending end on sendDev (two NICs of one fabric).
func ConnectDevs(p *netplugin.Plugin, recvDev, sendDev int) (*Pair, error) {
	lc, handle, err := p.Listen(recvDev)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	sc, reply, err := p.Connect(sendDev, handle)
	if err != nil {
		lc.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	rc, err := lc.Accept(reply)
	if err != nil {
		lc.Close()
		sc.Close()
		return nil, fmt.Errorf("accept: %w", err)
	}
	return &Pair{Send: sc, Recv: rc}, nil
}

// Close closes both ends.
func (c *Pair) Close() error { return errors.Join(c.Send.Close(), c.Recv.Close()) }

// Wait tests q until it finishes or Deadline passes.
func Wait(q netplugin.Request) (int, error) {
	start := time.Now()
	for {
		done, n, err := q.Test()
		if err != nil || done {
			return n, err
		}
		if time.Since(start) > Deadline {
			return 0, fmt.Errorf("request not finished after %v", Deadline)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// WaitBoth tests a and b until both finish, so that neither side's
// progress waits on the other's test calls; it returns their sizes and
// errors.
func WaitBoth(a, b netplugin.Request) (na, nb int, ea, eb error) {
	start := time.Now()
	adone, bdone := false, false
	for !(adone && bdone) {
		if !adone {
			var d bool
			d, na, ea = a.Test()
			adone = d || ea != nil
		}
		if !bdone {
			var d bool
			d, nb, eb = b.Test()
			bdone = d || eb != nil
		}
		if time.Since(start) > Deadline {
			if !adone {
				ea = fmt.Errorf("request not finished after %v", Deadline)
			}
			if !bdone {
				eb = fmt.Errorf("request not finished after %v", Deadline)
			}
			return
		}
	}
	return
}

// Pattern is the content of message i of n bytes: every byte depends on
// the message and its position, so a misplaced or stale byte shows.
func Pattern(i, n int) []byte {
	b := make([]byte, n)
	x := uint32(i)*2654435761 + 1
	for k := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[k] = byte(x)
	}
	return b
}
