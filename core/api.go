// Package core manages communicators: unique ids, bootstrap, split, abort,
// and the collectives a communicator runs on its backend.
//
// API sketch (the bodies live in the other files of this package):
//
//	id, err := core.GetUniqueID()                 // on one process; hosts the rendezvous
//	s := id.String()                              // hand to every rank
//	id, err := core.ParseUniqueID(s)              // on every rank
//	c, err := core.InitRank(id, nranks, rank)     // all ranks, concurrently
//	defer c.Destroy()
//	err = c.AllReduce(send, recv, count, sdk.Float32, sdk.Sum)
//
// Buffers are host memory ([]byte); counts are in elements of the data type.
// In place means the same backing array at the offsets NCCL defines (for
// AllGather: send == recv[rank*sendcount*size:], and so on).
package core

// Version is the flagcx-go release, set by the Makefile from git.
var Version = "dev"
