package core

import (
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// DeviceComm is a communicator whose ranks all run on devices of one vendor
// plugin: the vendor's collective library does the work on device memory
// and the plugin's streams. A host communicator underneath bootstraps it
// (the vendor unique id travels over hostnet) and stays available for
// out-of-band exchanges (Host).
type DeviceComm struct {
	host   *Comm
	plugin *loader.Plugin
	dev    int
	ccl    *loader.Comm
}

// InitDeviceRank joins rank to the communicator of id on device dev of an
// initialized plugin. All ranks call it concurrently with the same plugin.
func InitDeviceRank(id UniqueID, nranks, rank int, p *loader.Plugin, dev int, opts ...Option) (*DeviceComm, error) {
	if p == nil || !p.Initialized() {
		return nil, fmt.Errorf("%w: InitDeviceRank needs an initialized plugin (loader.Plugin.Init)", sdk.ErrInvalidUsage)
	}
	host, err := InitRank(id, nranks, rank, opts...)
	if err != nil {
		return nil, err
	}
	vid, err := shareVendorID(host, p)
	if err == nil {
		var ccl *loader.Comm
		if ccl, err = p.CommInitRank(dev, nranks, vid, rank); err == nil {
			return &DeviceComm{host: host, plugin: p, dev: dev, ccl: ccl}, nil
		}
	}
	_ = host.Abort()
	return nil, fmt.Errorf("rank %d: starting %s's collective library on device %d: %w", rank, p.Name, dev, err)
}

// shareVendorID makes the vendor's unique id on rank 0 and hands it to
// every rank. The first byte carries rank 0's outcome, so a failure there
// reaches every rank instead of leaving them waiting.
func shareVendorID(host *Comm, p *loader.Plugin) ([]byte, error) {
	n, err := p.UniqueIDBytes()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1+n)
	var idErr error
	if host.Rank() == 0 {
		var id []byte
		if id, idErr = p.UniqueID(); idErr != nil {
			buf[0] = 1
		} else {
			copy(buf[1:], id)
		}
	}
	if err := host.Broadcast(buf, buf, len(buf), sdk.Uint8, 0); err != nil {
		return nil, err
	}
	if idErr != nil {
		return nil, idErr
	}
	if buf[0] != 0 {
		return nil, errors.New("rank 0 could not create the vendor unique id (see rank 0's error)")
	}
	return buf[1:], nil
}

func (c *DeviceComm) Rank() int              { return c.host.Rank() }
func (c *DeviceComm) Count() int             { return c.host.Count() }
func (c *DeviceComm) Device() int            { return c.dev }
func (c *DeviceComm) Plugin() *loader.Plugin { return c.plugin }
func (c *DeviceComm) Host() *Comm            { return c.host }
func (c *DeviceComm) Vendor() *loader.Comm   { return c.ccl }
func (c *DeviceComm) AsyncError() error      { return c.ccl.AsyncError() }
func (c *DeviceComm) Barrier() error         { return c.host.Barrier() }
func (c *DeviceComm) GroupStart() error      { return c.plugin.GroupStart() }
func (c *DeviceComm) GroupEnd() error        { return c.plugin.GroupEnd() }

// Destroy releases the vendor communicator, then the host one.
func (c *DeviceComm) Destroy() error {
	err := c.ccl.Destroy()
	return errors.Join(err, c.host.Destroy())
}

// Abort stops both at once (see Comm.Abort).
func (c *DeviceComm) Abort() error {
	err := c.ccl.Abort()
	return errors.Join(err, c.host.Abort())
}

// The collectives take device pointers (or pinned host memory) and enqueue
// on stream s; they return once enqueued, as the vendor library does.

func (c *DeviceComm) AllReduce(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, s loader.Stream) error {
	return c.ccl.AllReduce(send, recv, count, dt, op, s)
}

func (c *DeviceComm) Reduce(send, recv uintptr, count int, dt sdk.DataType, op sdk.RedOp, root int, s loader.Stream) error {
	return c.ccl.Reduce(send, recv, count, dt, op, root, s)
}

func (c *DeviceComm) Broadcast(send, recv uintptr, count int, dt sdk.DataType, root int, s loader.Stream) error {
	return c.ccl.Broadcast(send, recv, count, dt, root, s)
}

func (c *DeviceComm) AllGather(send, recv uintptr, sendcount int, dt sdk.DataType, s loader.Stream) error {
	return c.ccl.AllGather(send, recv, sendcount, dt, s)
}

func (c *DeviceComm) ReduceScatter(send, recv uintptr, recvcount int, dt sdk.DataType, op sdk.RedOp, s loader.Stream) error {
	return c.ccl.ReduceScatter(send, recv, recvcount, dt, op, s)
}

func (c *DeviceComm) AlltoAll(send, recv uintptr, count int, dt sdk.DataType, s loader.Stream) error {
	return c.ccl.AlltoAll(send, recv, count, dt, s)
}

func (c *DeviceComm) AlltoAllv(send uintptr, sendcounts, sdispls []int, recv uintptr, recvcounts, rdispls []int, dt sdk.DataType, s loader.Stream) error {
	return c.ccl.AlltoAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, dt, s)
}

func (c *DeviceComm) Gather(send, recv uintptr, count int, dt sdk.DataType, root int, s loader.Stream) error {
	return c.ccl.Gather(send, recv, count, dt, root, s)
}

func (c *DeviceComm) Scatter(send, recv uintptr, count int, dt sdk.DataType, root int, s loader.Stream) error {
	return c.ccl.Scatter(send, recv, count, dt, root, s)
}

func (c *DeviceComm) Send(buf uintptr, count int, dt sdk.DataType, peer int, s loader.Stream) error {
	return c.ccl.Send(buf, count, dt, peer, s)
}

func (c *DeviceComm) Recv(buf uintptr, count int, dt sdk.DataType, peer int, s loader.Stream) error {
	return c.ccl.Recv(buf, count, dt, peer, s)
}
