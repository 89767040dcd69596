// Package core is flagcx-go's communicator: unique ids, bootstrap, split,
// abort, and the collectives, sends and receives that ranks on the host and
// on vendors' devices run together.
//
// One type, Comm, serves every placement. A rank runs on a backend: the
// host (the default) or a device of a vendor plugin (WithBackend). Ranks of
// one vendor form a cluster; with several clusters each collective runs a
// schedule over the clusters' libraries and the host network.
//
//	id, err := core.GetUniqueID()              // on one process; hosts the rendezvous
//	s := id.String()                           // hand to every rank
//	id, err := core.ParseUniqueID(s)           // on every rank
//	c, err := core.InitRank(id, nranks, rank)  // all ranks, concurrently: the host placement
//	defer c.Destroy()
//	err = c.AllReduce(core.HostBuffer(send), core.HostBuffer(recv), count, sdk.Float32, sdk.Sum, 0)
//
// A device rank passes its device and its buffers and stream:
//
//	c, err := core.InitRank(id, nranks, rank, core.WithBackend(core.DeviceBackend(plugin, dev)))
//	err = c.AllReduce(core.DeviceBuffer(sendPtr, n), core.DeviceBuffer(recvPtr, n), count, sdk.Float32, sdk.Sum, stream)
//
// Counts are in elements of the data type. In place means NCCL's layouts
// (for AllGather: send is the rank's block of recv; Buffer.Slice makes
// them). On a host rank the stream is 0 and every call returns when its
// result is in place. The calls that say they are collective must be made
// by every rank, in the same order. Errors match the sdk.Err* sentinels
// (errors.Is) and name the rank, the operation and, for a failed peer, that
// peer.
package core

import (
	"fmt"

	"github.com/flagcx/flagcx-go/core/internal/host/reduce"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// Version is the flagcx-go release, set by the Makefile from git.
var Version = "dev"

// NetConfig tunes the host network between the ranks (interfaces, address
// family, sockets per peer, deadline). Start from NetConfigFromEnv.
type NetConfig = hostnet.Config

// NetConfigFromEnv is the default NetConfig with the FLAGCX_SOCKET_*,
// FLAGCX_NSOCKS_PERTHREAD and FLAGCX_TIMEOUT settings of the environment;
// it fails on a malformed one with sdk.ErrInvalidArgument (and
// hostnet's ErrConfig), naming each bad variable and what it takes.
func NetConfigFromEnv() (NetConfig, error) {
	cfg, err := hostnet.ConfigFromEnv()
	if err != nil {
		return cfg, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}
	return cfg, nil
}

// Secret is the 16 bytes a communicator's ranks prove to each other (part
// of the UniqueID).
type Secret = hostnet.Secret

// HostReduce sets dst = a op b element by element over len(dst) bytes of
// dt, by the host engine's rules (those of the plugins' reduceLocal, so a
// host result has a device's bits). dst may be exactly a or b. It fails
// with sdk.ErrInvalidArgument on an invalid type or op, or on a dst that
// is not whole elements or longer than a or b.
func HostReduce(dst, a, b []byte, dt sdk.DataType, op sdk.RedOp) error {
	if !dt.Valid() || !op.Valid() || len(dst)%dt.Size() != 0 || len(a) < len(dst) || len(b) < len(dst) {
		return fmt.Errorf("%w: HostReduce of %d bytes of %v with %v from %d and %d bytes", sdk.ErrInvalidArgument, len(dst), dt, op, len(a), len(b))
	}
	reduce.Into(dst, a, b, dt, op)
	return nil
}

// SplitNoColor is the color of a rank that joins no communicator in Split.
const SplitNoColor = hostcomm.SplitNoColor
