package core

import (
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// MemAlloc allocates n zeroed bytes of host memory that every rank of the
// communicator maps (a shared-memory segment per allocation, unlinked once
// all ranks mapped it), like NCCL's ncclMemAlloc + ncclCommRegister or
// MPI_Alloc_mem. On the host placement, an AllReduce whose send and recv
// buffers lie in such memory on every rank runs zero-copy: each rank
// reduces its slice straight from the peers' send buffers into every
// rank's recv buffer. With device ranks beside the host ranks, a device
// rank registers the host ranks' memory with its runtime, and an
// AllReduce whose host ranks' buffers all lie in it is read and written
// by the devices directly. It is collective: every rank calls it with the
// same n, in the same order relative to the other calls (a device rank
// too, though its own buffers are device memory: its share is never
// touched, so it costs no memory). It fails with sdk.ErrNotSupported
// where the ranks do not all share one host's memory (CanMemAlloc).
func (c *Comm) MemAlloc(n int) ([]byte, error) {
	// Registration is for layouts with registered plans
	// (internal/sched/shm_registered.go), on the options the ranks agreed.
	return c.exec.MemAlloc(n, sched.RegisteredFolds(c.layout, c.opts, sdk.AllReduce))
}

// MemFree releases memory from MemAlloc on this rank (and a device rank's
// registration of the host ranks' share); every rank frees the same
// allocation, after the calls that use it. The memory stays mapped until
// then, even after Destroy.
func (c *Comm) MemFree(b []byte) error { return c.exec.MemFree(b) }
