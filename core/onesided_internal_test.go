package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// TestOneSidedLinks: the links a Comm hands its one-sided machinery
// (osComm.Split) are the pair's transport of the world communicator's
// table, FLAGCX_SHM_DISABLE included. Which windows the machinery then
// reaches straight is core/internal/onesided's TestPaths.
func TestOneSidedLinks(t *testing.T) {
	for _, tc := range []struct {
		shmDisable, link string
	}{
		{"", "shm"},
		{"1", "tcp"},
	} {
		t.Run(tc.link, func(t *testing.T) {
			if tc.link == "shm" && hostnet.BootID() == "" {
				t.Skip("no shared memory here")
			}
			t.Setenv(hostnet.EnvShmDisable, tc.shmDisable)
			comms := startComms(t, 2, testNet(10*time.Second))
			errs := onAll(comms, func(c *Comm) error {
				_, err := c.AllocWindow(100)
				return err
			})
			require.NoError(t, errors.Join(errs...))
			for r, c := range comms {
				p := 1 - r
				require.Equal(t, tc.link, c.world.Transport(p), fmt.Sprint("rank ", r))
				require.Equal(t, tc.link, c.os.Links().Link(p).Transport(), fmt.Sprint("rank ", r))
			}
		})
	}
}
