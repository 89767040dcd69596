package core

import (
	"fmt"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOneSidedPaths: the one-sided links are the pair's transport of the
// world communicator's table, AllocWindow's memory is mapped by the peers
// of the host (the zero-copy path) and RegisterWindow's is not.
func TestOneSidedPaths(t *testing.T) {
	for _, tc := range []struct {
		shmDisable, link string
		direct           bool
	}{
		{"", "shm", true},
		{"1", "tcp", false},
	} {
		t.Run(tc.link, func(t *testing.T) {
			if tc.link == "shm" && hostnet.BootID() == "" {
				t.Skip("no shared memory here")
			}
			t.Setenv(hostnet.EnvShmDisable, tc.shmDisable)
			comms := startComms(t, 2, testNet(10*time.Second))
			alloc, reg := make([]*Window, 2), make([]*Window, 2)
			errs := onAll(comms, func(c *Comm) error {
				var err error
				if alloc[c.rank], err = c.AllocWindow(100); err == nil {
					reg[c.rank], err = c.RegisterWindow(HostBuffer(make([]byte, 100)))
				}
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r, c := range comms {
				p := 1 - r
				require.Equal(t, tc.link, c.os.rma.Transport(p))
				require.Equal(t, tc.direct, c.os.direct(alloc[r], p), fmt.Sprint("rank ", r))
				require.False(t, c.os.direct(reg[r], p))
			}
		})
	}
}
