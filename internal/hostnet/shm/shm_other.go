//go:build !linux

package shm

import (
	"errors"
	"fmt"
)

// Shared memory needs Linux (futexes); elsewhere no segment is made and
// ranks of one host talk TCP.

// ErrNotLinux: shared memory needs Linux.
var ErrNotLinux = errors.New("shared memory needs Linux")

// ShmSegment is one rank's segment; only available on Linux.
type ShmSegment struct{}

func (s *ShmSegment) Name() string { return "" }
func (s *ShmSegment) Close() error { return nil }
func (s *ShmSegment) Unlink()      {}
func (s *ShmSegment) Abandon()     {}

// CreateShmSegment reports ErrShmUnavailable off Linux.
func CreateShmSegment(ShmConfig) (*ShmSegment, error) {
	return nil, fmt.Errorf("%w: %w", ErrShmUnavailable, ErrNotLinux)
}

// CleanStaleShm does nothing off Linux.
func CleanStaleShm(ShmConfig) int { return 0 }

// ShmNode is the shared memory of a host's ranks; only available on Linux.
type ShmNode struct{}

func (n *ShmNode) Size() int                               { return 0 }
func (n *ShmNode) Index() int                              { return 0 }
func (n *ShmNode) Ranks() []int                            { return nil }
func (n *ShmNode) Window(int) []byte                       { return nil }
func (n *ShmNode) Step() uint32                            { return 0 }
func (n *ShmNode) Cores() int                              { return 1 }
func (n *ShmNode) Enter() error                            { return ErrNotLinux }
func (n *ShmNode) EnterUngated() error                     { return ErrNotLinux }
func (n *ShmNode) Hold() error                             { return ErrNotLinux }
func (n *ShmNode) Exit()                                   {}
func (n *ShmNode) Post(uint64) error                       { return ErrNotLinux }
func (n *ShmNode) SetGate(func() error)                    {}
func (n *ShmNode) Wait(int) error                          { return ErrNotLinux }
func (n *ShmNode) Sync(uint64) error                       { return ErrNotLinux }
func (n *ShmNode) Shut()                                   {}
func (n *ShmNode) Close() bool                             { return true }
func (n *ShmNode) Closing() bool                           { return false }
func (n *ShmNode) NewMem(int) ([]byte, string, error)      { return nil, "", ErrNotLinux }
func (n *ShmNode) MapMem(int, string, int) ([]byte, error) { return nil, ErrNotLinux }
func (n *ShmNode) UnlinkMem(string)                        {}
func (n *ShmNode) FreeMem([]byte) error                    { return ErrNotLinux }

func processGone(int) string        { return "" }
func ProcessEnded(int) bool         { return false }
func fsSpace(string) (int64, int64) { return 0, 0 }
func memInfo() (int64, int64)       { return 0, 0 }

// ProcessStalled cannot tell off Linux: it always says "".
func ProcessStalled(int) string { return "" }
