package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// The one checker of the funnel (enqueue.go), NCCL's argcheck.cc: one
// check per kind of task, each on top of sdk's checker (sdk/check.go),
// which the host engine and the plugins' callers share. A task is checked
// once, before the first runner that does not check it itself.

// check validates t on this rank: a communicator still usable, the
// arguments and the buffers (this rank's kind of memory, large enough).
func (c *Comm) check(t *task) error {
	switch t.kind {
	case kindP2P:
		return c.checkP2P(t)
	case kindHostNet:
		return c.checkHostNet(t)
	}
	if err := c.usable(t.name); err != nil {
		return err
	}
	call := &t.args
	var err error
	if t.kind == kindBatch {
		err = sched.Validate(sched.Call{Coll: sdk.SendRecv, Ops: t.ops}, c.n)
	} else {
		var sendB, recvB int
		sendB, recvB, err = call.Check(c.rank, c.n)
		if err == nil {
			err = c.checkBuffer(call, "send", t.send, sendB)
		}
		if err == nil {
			err = c.checkBuffer(call, "recv", t.recv, recvB)
		}
	}
	if err != nil {
		return fmt.Errorf("%s on rank %d: %w", t.name, c.rank, err)
	}
	return nil
}

// checkP2P checks one Send or Recv: its count, peer and buffer. On the
// host placement an open communicator is known from c.down without the
// lock usable takes (the latency path).
func (c *Comm) checkP2P(t *task) error {
	if c.host == nil || c.down.Load() {
		if err := c.usable(t.name); err != nil {
			return err
		}
	}
	n, err := sdk.CheckCount("count", t.args.Count, t.args.DType, 1)
	if err == nil {
		err = sdk.CheckPeer(t.peer, c.n)
	}
	if err == nil {
		err = c.checkBuf(t.name, "buffer", t.send, n)
	}
	if err != nil {
		return fmt.Errorf("%s on rank %d: %w", t.name, c.rank, err)
	}
	return nil
}

// checkHostNet checks HostAllGather: recv holds every rank's block.
func (c *Comm) checkHostNet(t *task) error {
	if err := c.usable(t.name); err != nil {
		return err
	}
	if need := c.n * t.send.n; t.recv.n < need {
		return fmt.Errorf("%w: %s on rank %d: recv holds %d bytes but %d ranks of %d need %d: pass a larger recv", sdk.ErrInvalidArgument, t.name, c.rank, t.recv.n, c.n, t.send.n, need)
	}
	return nil
}

// checkBuf checks that b is this rank's kind of memory and holds need
// bytes (nothing is needed of a buffer the call does not use here). which
// names it as sdk.BufferName does: Send's and Recv's is "buffer".
func (c *Comm) checkBuf(name, which string, b Buffer, need int) error {
	if need == 0 {
		return nil
	}
	if err := c.checkMem(name, which, b); err != nil {
		return err
	}
	if b.n < need {
		return fmt.Errorf("%w: %s holds %d bytes but %d are needed: pass a buffer of at least %d bytes or a smaller count", sdk.ErrInvalidArgument, sdk.BufferName(which), b.n, need, need)
	}
	return nil
}

// checkBuffer is checkBuf for a collective's buffer, in sdk's checker's
// words for one that is too short.
func (c *Comm) checkBuffer(call *sdk.Call, which string, b Buffer, need int) error {
	if need == 0 {
		return nil
	}
	if err := c.checkMem(call.Coll.Title(), which, b); err != nil {
		return err
	}
	return call.CheckBuffer(which, b.n, need, c.n)
}

// checkMem checks that b is this rank's kind of memory.
func (c *Comm) checkMem(name, which string, b Buffer) error {
	if b.n < 0 {
		return fmt.Errorf("%w: %s: %s has a negative length", sdk.ErrInvalidArgument, name, sdk.BufferName(which))
	}
	if b.dev != c.be.OnDevice() {
		if c.be.OnDevice() {
			return fmt.Errorf("%w: %s: rank %d runs on %s device %d, but the %s is host memory: pass device memory of that plugin (core.DeviceBuffer of its DeviceMalloc)",
				sdk.ErrInvalidArgument, name, c.rank, c.be.Plugin.Name, c.be.Device, sdk.BufferName(which))
		}
		return fmt.Errorf("%w: %s: rank %d runs on the host backend, but the %s is device memory: pass host memory (core.HostBuffer)",
			sdk.ErrInvalidArgument, name, c.rank, sdk.BufferName(which))
	}
	return nil
}
