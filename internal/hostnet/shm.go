package hostnet

import "github.com/flagcx/flagcx-go/internal/hostnet/shm"

// Shared memory between the ranks of one host is its own transport
// (internal/hostnet/shm); these names keep hostnet's callers unchanged.

// Defaults and bounds of ShmConfig.
const (
	DefaultShmDir      = shm.DefaultShmDir
	DefaultShmP2PBytes = shm.DefaultShmP2PBytes
	MinShmAreaBytes    = shm.MinShmAreaBytes
	MaxShmAreaBytes    = shm.MaxShmAreaBytes
)

// Environment variables read by ShmConfigFromEnv.
var (
	EnvShmDisable     = shm.EnvShmDisable
	EnvShmP2PSize     = shm.EnvShmP2PSize
	EnvShmWindowSize  = shm.EnvShmWindowSize
	EnvShmCopyThreads = shm.EnvShmCopyThreads
)

// Errors of shared memory.
var (
	ErrShmCapacity    = shm.ErrShmCapacity
	ErrShmUnavailable = shm.ErrShmUnavailable
)

type (
	ShmConfig  = shm.ShmConfig
	ShmSegment = shm.ShmSegment
	ShmNode    = shm.ShmNode
	HostMemory = shm.HostMemory
)

// The functions of shm that hostnet's callers use.
var (
	BootID              = shm.BootID
	PidNamespace        = shm.PidNamespace
	CheckShmCapacity    = shm.CheckShmCapacity
	CheckShmFree        = shm.CheckShmFree
	CleanStaleShm       = shm.CleanStaleShm
	CreateShmSegment    = shm.CreateShmSegment
	DefaultShmConfig    = shm.DefaultShmConfig
	ShmConfigFromEnv    = shm.ShmConfigFromEnv
	ShmConfigFromLookup = shm.ShmConfigFromLookup
	ReadHostMemory      = shm.ReadHostMemory
	ProcessStalled      = shm.ProcessStalled
)
