// Package shm is the host transport between the ranks of one host: each
// rank's segment in the shm directory (/dev/shm), the rings of an ShmLink
// between two ranks, the ShmNode whose windows a host's collectives read
// directly, and futex waits that notice a dead peer. It knows nothing of
// the mesh that picks it (internal/hostnet/mesh.go) or of the other
// transports; the peer names a segment by are checked in names.go.
package shm

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// Shared memory between the ranks of one host.
//
// Every rank that shares memory creates ONE segment (a file in /dev/shm,
// named flagcx-<boot>-<pidns>-<pid>-<token>) before the rendezvous, and
// maps the segments of its same-host peers after it. A segment holds
//
//	header page   magic, geometry, owner pid and token, the owner's
//	              collective step counter and its sleeper count
//	p2p area      the inbound rings of point-to-point links: one ring per
//	              same-host peer (peer -> owner), the area divided evenly
//	window        the owner's collective staging window, read by every
//	              same-host rank (ShmNode)
//
// so /dev/shm grows by one constant-size segment per rank, never per pair.
// Each segment is unlinked as soon as every same-host peer has mapped it
// (or the setup failed); a segment whose creator died before that is
// removed by the next flagcx process of the host that starts (CleanStaleShm:
// the creator's pid, pid namespace and boot id are in the name).
//
// Waiting for a peer (a ring slot, a collective step) polls the shared word
// for a bounded time, then yields the CPU, then sleeps on it with a futex
// (see shmWaiter), so a small message costs no system call while both ranks
// run, and an oversubscribed host (more ranks than cores) still makes
// progress. Every wait has the Config.Timeout deadline and notices within a
// fraction of a second that the peer process died.

// Defaults and bounds of ShmConfig.
const (
	DefaultShmP2PBytes = 8 << 20
	MinShmAreaBytes    = 64 << 10
	MaxShmAreaBytes    = 1 << 30

	// Without FLAGCX_SHM_WINDOW_SIZE a rank's window is the share of
	// shmWindowBudget of a communicator of its size, within these bounds:
	// large windows mean few steps per collective (each a wait for the
	// slowest rank), but /dev/shm must hold one per rank.
	shmWindowBudget = 256 << 20
	shmWindowMin    = 4 << 20
	shmWindowMax    = 32 << 20
)

// Environment variables read by ShmConfigFromEnv (declared in
// internal/base/env).
var (
	EnvShmDisable     = env.ShmDisable.Name
	EnvShmP2PSize     = env.ShmP2PSize.Name
	EnvShmWindowSize  = env.ShmWindowSize.Name
	EnvShmCopyThreads = env.ShmCopyThreads.Name
)

// shmPage is the granule of segment areas.
const shmPage = 4096

// DefaultShmDir is where segments are created.
const DefaultShmDir = "/dev/shm"

// ShmConfig tunes shared memory. Each rank sizes its own segment; peers read
// the geometry from the segment's header, so ranks with different settings
// still interoperate.
type ShmConfig struct {
	// Disable makes this rank use TCP to the ranks of its own host
	// (FLAGCX_SHM_DISABLE=1).
	Disable bool
	// P2PBytes is the rank's inbound point-to-point area, divided among
	// its same-host peers (FLAGCX_SHM_P2P_SIZE).
	P2PBytes int
	// WindowBytes is the rank's collective staging window
	// (FLAGCX_SHM_WINDOW_SIZE); 0 sizes it from the communicator's rank
	// count (ForRanks).
	WindowBytes int
	// Dir is the tmpfs directory for segments (default /dev/shm).
	Dir string
}

// DefaultShmConfig: 8 MiB of inbound rings per rank and a window sized
// from the rank count, enabled, in /dev/shm.
func DefaultShmConfig() ShmConfig {
	return ShmConfig{P2PBytes: DefaultShmP2PBytes, Dir: DefaultShmDir}
}

// ForRanks fixes an automatic window for a communicator of nranks: 256 MiB
// shared by the ranks, at least 4 MiB and at most 32 MiB each (so 8 ranks
// get 32 MiB, 32 ranks 8 MiB, 64 or more 4 MiB).
func (sc ShmConfig) ForRanks(nranks int) ShmConfig {
	if sc.WindowBytes == 0 {
		sc.WindowBytes = min(max(shmWindowBudget/max(nranks, 1), shmWindowMin), shmWindowMax) &^ (shmPage - 1)
	}
	return sc
}

// ShmConfigFromEnv reads FLAGCX_SHM_DISABLE, FLAGCX_SHM_P2P_SIZE and
// FLAGCX_SHM_WINDOW_SIZE on top of DefaultShmConfig, and checks
// FLAGCX_SHM_COPY_THREADS.
func ShmConfigFromEnv() (ShmConfig, error) { return ShmConfigFromLookup(os.LookupEnv) }

// ShmConfigFromLookup is ShmConfigFromEnv with the variables read through
// lookup. Unset or empty variables keep their defaults; malformed ones give
// one error wrapping ErrConfig that lists them all.
//
//	FLAGCX_SHM_DISABLE      1 (or true) makes this rank use TCP to its own host
//	FLAGCX_SHM_P2P_SIZE     inbound ring bytes per rank, K/M/G suffix (64K..1G, default 8M)
//	FLAGCX_SHM_WINDOW_SIZE  collective window bytes per rank (64K..1G; default
//	                        256M / ranks, within 4M..32M)
//	FLAGCX_SHM_COPY_THREADS goroutines copying a large batch (1..64, default 4)
func ShmConfigFromLookup(lookup func(string) (string, bool)) (ShmConfig, error) {
	sc := DefaultShmConfig()
	l := env.Lookup(lookup)
	var errs []error
	bad := func(err error) { errs = append(errs, fmt.Errorf("%w: %w", wire.ErrConfig, err)) }
	if n, err := env.ShmP2PSize.Get(l); err != nil {
		bad(err)
	} else {
		sc.P2PBytes = n
	}
	if n, err := env.ShmWindowSize.Get(l); err != nil {
		bad(err)
	} else {
		sc.WindowBytes = n
	}
	for _, old := range []*env.Setting[struct{}]{env.ShmSlotSize, env.ShmSlots} {
		if _, err := old.Get(l); err != nil {
			bad(err)
		}
	}
	if on, err := env.ShmDisable.Get(l); err != nil {
		bad(err)
	} else {
		sc.Disable = on
	}
	// Read where the copies run (copyThreads), checked here so that a
	// malformed value fails the rank's setup, and the local launcher's
	// check before any rank starts, instead of passing unnoticed.
	if _, err := env.ShmCopyThreads.Get(l); err != nil {
		bad(err)
	}
	if len(errs) > 0 {
		return DefaultShmConfig(), errors.Join(errs...)
	}
	return sc, nil
}

// Path is the shm directory: Dir, or DefaultShmDir where Dir is unset.
func (sc ShmConfig) Path() string {
	if sc.Dir == "" {
		return DefaultShmDir
	}
	return sc.Dir
}

// SegmentBytes is the size of one rank's segment: what each rank adds to
// /dev/shm (and to RAM) on a host where ranks share memory. With an
// automatic window it counts the largest (use ForRanks first for the
// exact figure).
func (sc ShmConfig) SegmentBytes() int {
	win := sc.WindowBytes
	if win == 0 {
		win = shmWindowMax
	}
	return shmPage + roundUp(max(sc.P2PBytes, MinShmAreaBytes), shmPage) + roundUp(max(win, MinShmAreaBytes), shmPage)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// ErrShmCapacity: the ranks of this host would need more shared memory than
// the host has. The message names both limits and what to change.
var ErrShmCapacity = errors.New("not enough shared memory")

// HostMemory is what bounds shared memory on this host.
type HostMemory struct {
	ShmDir       string
	ShmSizeBytes int64 // size of the tmpfs holding ShmDir
	ShmFreeBytes int64 // free bytes in it now
	RAMBytes     int64 // MemTotal
	AvailBytes   int64 // MemAvailable
}

// ReadHostMemory reads the tmpfs of sc's directory and /proc/meminfo. The
// fields it cannot read are 0.
func ReadHostMemory(sc ShmConfig) HostMemory {
	hm := HostMemory{ShmDir: sc.Path()}
	hm.ShmSizeBytes, hm.ShmFreeBytes = fsSpace(hm.ShmDir)
	hm.RAMBytes, hm.AvailBytes = memInfo()
	return hm
}

// CheckShmCapacity says whether ranks ranks of this host, each with a
// segment of sc.SegmentBytes(), fit in the tmpfs of sc's directory and in
// the RAM. It compares with the sizes (not the free space) so that every
// rank of a job, checking at slightly different times, reaches the same
// verdict; use CheckShmFree before creating anything.
func CheckShmCapacity(ranks int, sc ShmConfig, hm HostMemory) error {
	if sc.Disable || ranks < 2 {
		return nil
	}
	need := int64(ranks) * int64(sc.SegmentBytes())
	if (hm.ShmSizeBytes > 0 && need > hm.ShmSizeBytes) || (hm.RAMBytes > 0 && need > hm.RAMBytes/2) {
		return fmt.Errorf("%w: %d ranks on this host need %s of shared memory (%s each), but %s holds %s and the RAM is %s (shared memory may take at most half of it): "+
			"run fewer ranks per host, enlarge %s (e.g. docker --shm-size), shrink %s / %s, or set %s=1 to use TCP between the ranks",
			ErrShmCapacity, ranks, bytesize.Human(need), bytesize.Human(int64(sc.SegmentBytes())), hm.ShmDir, bytesize.Human(hm.ShmSizeBytes), bytesize.Human(hm.RAMBytes),
			hm.ShmDir, EnvShmP2PSize, EnvShmWindowSize, EnvShmDisable)
	}
	return nil
}

// CheckShmFree says whether ranks more segments fit in what is free now
// (tmpfs and available RAM).
func CheckShmFree(ranks int, sc ShmConfig, hm HostMemory) error {
	if sc.Disable || ranks < 1 {
		return nil
	}
	need := int64(ranks) * int64(sc.SegmentBytes())
	if (hm.ShmSizeBytes > 0 && need > hm.ShmFreeBytes) || (hm.AvailBytes > 0 && need > hm.AvailBytes) {
		return fmt.Errorf("%w: %d segments of %s need %s, but %s has %s free and %s of RAM is available: "+
			"free some, enlarge %s (e.g. docker --shm-size), shrink %s / %s, or set %s=1 to use TCP between the ranks",
			ErrShmCapacity, ranks, bytesize.Human(int64(sc.SegmentBytes())), bytesize.Human(need), hm.ShmDir, bytesize.Human(hm.ShmFreeBytes), bytesize.Human(hm.AvailBytes),
			hm.ShmDir, EnvShmP2PSize, EnvShmWindowSize, EnvShmDisable)
	}
	return nil
}

// ErrShmUnavailable: this rank cannot share memory with a peer (one of them
// disabled it, or no segment could be made); the pair talks TCP.
var ErrShmUnavailable = errors.New("shared memory unavailable")

// BootID identifies the running kernel (/proc/sys/kernel/random/boot_id);
// "" where it cannot be read. Two processes share memory only when their
// host names, boot ids and pid namespaces are equal.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// PidNamespace names this process's pid namespace ("" if unknown): telling
// whether a peer process lives (kill(pid, 0)) is only meaningful inside one.
func PidNamespace() string {
	s, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return s
}
