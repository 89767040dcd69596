package onesided

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// The same-host transport of one-sided calls: AllocWindow's memory of a
// host rank is a shared-memory segment of its host (hostnet's registered
// memory, made on the one-sided links' node), and the ranks of that host
// map it at registration. A Put or Get of such a window copies straight
// into or out of the peer's memory on the caller's goroutine: no message,
// no copy through a ring, nothing for the peer to do. A signal still
// travels as a message (pair.go), behind the bytes.
//
// Each segment starts with a header whose state word says whether the
// owner still has the window: Free sets it before unmapping, and a peer
// checks it before and after each copy, so that a Put into a window freed
// under it fails with an error instead of writing into memory nobody owns
// any more (its own mapping stays valid until it frees the window too: no
// fault either way).

const (
	segHdr   = 64 // the header before the window's bytes (keeps them 64-byte aligned)
	segLive  = 1
	segFreed = 2
)

// node is this host's shared memory on the one-sided links, or nil.
func (o *State) node() *hostnet.ShmNode { return o.links.Node() }

// allocate makes AllocWindow's memory of n bytes: device memory on a
// device rank, shared memory on a host rank with peers on its host, plain
// host memory otherwise.
func (o *State) allocate(w *Window, n int) error {
	if o.dev != nil {
		return o.allocDevice(w, n)
	}
	nd := o.node()
	if nd == nil {
		w.mem = Mem{Host: make([]byte, n), Len: n}
		return nil
	}
	mem, name, err := nd.NewMem(segHdr + n)
	if err != nil {
		return fmt.Errorf("%w: allocating %d bytes of shared memory: %w", sdk.ErrSystemError, n, err)
	}
	if len(name) > nameMax {
		nd.UnlinkMem(name)
		nd.FreeMem(mem)
		return fmt.Errorf("%w: shared memory name %q is longer than %d bytes", sdk.ErrInternalError, name, nameMax)
	}
	atomic.StoreUint32(segState(mem), segLive)
	w.shared, w.shmName = mem, name
	w.mem = Mem{Host: mem[segHdr : segHdr+n : segHdr+n], Len: n}
	return nil
}

func segState(seg []byte) *uint32 { return (*uint32)(unsafe.Pointer(&seg[0])) }

// sharedName is the name peers map w's shared memory by ("" when it has
// none).
func (o *State) sharedName(w *Window) string { return w.shmName }

// mapPeers maps the shared memory of the window's same-host peers.
func (o *State) mapPeers(w *Window, all []byte) error {
	nd := o.node()
	if nd == nil {
		return nil
	}
	for i, r := range nd.Ranks() {
		rec := all[r*recBytes : (r+1)*recBytes]
		if r == o.rank || rec[0]&recShared == 0 {
			continue
		}
		m, err := nd.MapMem(i, string(rec[17:17+int(rec[16])]), segHdr+w.sizes[r])
		if err != nil {
			return fmt.Errorf("%w: mapping rank %d's memory of the window: %w", sdk.ErrSystemError, r, err)
		}
		w.peer[r] = m
	}
	return nil
}

// unlinkShared removes the file of this rank's segment once every peer
// mapped it (the mappings stay): nothing is left in /dev/shm.
func (o *State) unlinkShared(w *Window) {
	if w.shmName != "" {
		o.node().UnlinkMem(w.shmName)
	}
}

// releaseShared marks this rank's segment freed for its peers and unmaps
// it and the peers' (with w.mu held).
func (w *Window) releaseShared() error {
	var errs []error
	nd := w.o.node()
	if w.shared != nil {
		atomic.StoreUint32(segState(w.shared), segFreed)
		errs = append(errs, nd.FreeMem(w.shared))
		w.shared, w.mem.Host = nil, nil
	}
	for r, m := range w.peer {
		if m != nil {
			errs = append(errs, nd.FreeMem(m))
			w.peer[r] = nil
		}
	}
	return errors.Join(errs...)
}

// direct reports whether an operation on peer's memory of window w goes
// straight through shared memory.
func (o *State) direct(w *Window, peer int) bool { return w.peer[peer] != nil }

// copyDirect runs a Put (put) or Get of op with peer's shared memory of
// op.Remote. The caller counts the operation complete: a PutSignal's
// signal still goes over the link, and its acknowledgement counts it.
func (o *State) copyDirect(name string, peer int, op Op, put bool) error {
	seg := op.Remote.peer[peer]
	state := segState(seg)
	freed := func() error {
		if atomic.LoadUint32(state) == segLive {
			return nil
		}
		return fmt.Errorf("%w: %s on rank %d: rank %d%s freed its memory of window %d (Window.Free) while this rank still used it",
			sdk.ErrInvalidUsage, name, o.rank, peer, o.links.HostOf(peer), op.Remote.index)
	}
	if err := freed(); err != nil {
		return err
	}
	remote := seg[segHdr+op.RemoteOff : segHdr+op.RemoteOff+op.Bytes]
	local := op.Local.mem
	var err error
	if put {
		err = o.memRead(local, op.LocalOff, remote)
	} else {
		err = o.memWrite(local, op.LocalOff, remote)
	}
	if err != nil {
		return o.c.CallError(name, err)
	}
	return freed()
}
