//go:build !linux

package hostnet

import (
	"errors"
	"time"
)

// Shared-memory links need Linux (futexes); elsewhere the setup reports
// ErrShmUnavailable and ranks of one host talk TCP.

var errShmOS = errors.New("shared-memory links need Linux")

// ShmLink is a Link over shared memory; only available on Linux.
type ShmLink struct {
	peerPid  int
	path     string
	timeout  time.Duration
	slotSize int
	slots    int
}

func createShm(Config, ShmConfig) (*ShmLink, error) { return nil, errShmOS }
func openShm(string, Config, int) (*ShmLink, error) { return nil, errShmOS }
func (l *ShmLink) attachedPid() int                 { return 0 }
func (l *ShmLink) unlink()                          {}
func (l *ShmLink) PeerPid() int                     { return l.peerPid }
func (l *ShmLink) SlotSize() int                    { return l.slotSize }
func (l *ShmLink) Slots() int                       { return l.slots }
func (l *ShmLink) String() string                   { return "shm (unsupported)" }
func (l *ShmLink) Close() error                     { return nil }
func (l *ShmLink) Send([]byte) error                { return errShmOS }
func (l *ShmLink) Recv([]byte) error                { return errShmOS }
