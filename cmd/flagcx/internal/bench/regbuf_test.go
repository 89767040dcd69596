package bench

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// noShmComm is a communicator whose registered allocations fail, as on a
// host whose /dev/shm is too small for the benchmark's buffers.
type noShmComm struct {
	*fakeComm
	tries int
}

func (c *noShmComm) CanMemAlloc() bool { return true }
func (c *noShmComm) MemAlloc(int) ([]byte, error) {
	c.tries++
	return nil, errors.New("/dev/shm has 64 MiB free, 128 MiB needed")
}
func (c *noShmComm) MemFree([]byte) error { return nil }

// TestRegisteredAllocFallsBack: a failed registered allocation (every rank
// fails it alike) leaves the run in ordinary memory, and the next buffers
// do not try again.
func TestRegisteredAllocFallsBack(t *testing.T) {
	t.Setenv("FLAGCX_SHM_REGISTER", "1")
	c := &noShmComm{fakeComm: newFakeWorld(1).comm(0)}
	h := newHostBackend(c)
	for i := 0; i < 2; i++ {
		b, err := h.Alloc(1 << 20)
		require.NoError(t, err)
		_, registered := b.(*regBuf)
		require.False(t, registered)
		require.NoError(t, b.Free())
	}
	require.Equal(t, 1, c.tries)
}
