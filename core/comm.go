package core

import (
	"errors"

	"github.com/flagcx/flagcx-go/sdk"
)

// SplitNoColor is the color of a rank that joins no communicator in Split.
const SplitNoColor = -1

// Comm is one rank's handle on a communicator.
type Comm struct {
	rank, nranks int
}

var errTODO = errors.New("core: not implemented yet")

// InitRank joins rank (0 <= rank < nranks) to the communicator of id. All
// ranks call it concurrently; it returns once every rank has joined and the
// links between them are up, or with an error naming the missing ranks when
// the deadline passes.
func InitRank(id UniqueID, nranks, rank int, opts ...Option) (*Comm, error) { return nil, errTODO }

func (c *Comm) Rank() int  { return c.rank }
func (c *Comm) Count() int { return c.nranks }

// Destroy releases the communicator after its operations completed.
func (c *Comm) Destroy() error { return errTODO }

// Abort tears the communicator down at once: operations in flight on this
// rank fail, and peers waiting on this rank see an error naming it.
func (c *Comm) Abort() error { return errTODO }

// Split makes a communicator of the ranks that pass the same color, ordered
// by key then by rank. A rank passing SplitNoColor gets nil.
func (c *Comm) Split(color, key int) (*Comm, error) { return nil, errTODO }

func (c *Comm) AllReduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp) error {
	return errTODO
}
func (c *Comm) Reduce(send, recv []byte, count int, dt sdk.DataType, op sdk.RedOp, root int) error {
	return errTODO
}
func (c *Comm) Broadcast(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return errTODO
}
func (c *Comm) AllGather(send, recv []byte, sendcount int, dt sdk.DataType) error { return errTODO }
func (c *Comm) ReduceScatter(send, recv []byte, recvcount int, dt sdk.DataType, op sdk.RedOp) error {
	return errTODO
}
func (c *Comm) AlltoAll(send, recv []byte, count int, dt sdk.DataType) error { return errTODO }
func (c *Comm) AlltoAllv(send []byte, sendcounts, sdispls []int, recv []byte, recvcounts, rdispls []int, dt sdk.DataType) error {
	return errTODO
}
func (c *Comm) Gather(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return errTODO
}
func (c *Comm) Scatter(send, recv []byte, count int, dt sdk.DataType, root int) error {
	return errTODO
}
func (c *Comm) Send(buf []byte, count int, dt sdk.DataType, peer int) error { return errTODO }
func (c *Comm) Recv(buf []byte, count int, dt sdk.DataType, peer int) error { return errTODO }

// GroupStart defers Send and Recv until GroupEnd, which runs them together
// so that any pattern of sends and receives completes without deadlock.
func (c *Comm) GroupStart()     {}
func (c *Comm) GroupEnd() error { return errTODO }
func (c *Comm) Barrier() error  { return errTODO }
