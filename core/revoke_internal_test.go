package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestDetectTellsOnlyItsOwnVerdict: a rank tells its peers a verdict only
// when it adopts it. A rank its user aborted while its failed call was
// detecting is lost itself (it no longer answers the control plane), so
// it tells nobody: the verdict it would make names only the ranks lost
// before it, and TestRevokeAndShrink's two victims were once named one
// (rank 2, aborted 0.6 ms after rank 3, had begun detecting rank 3's
// loss and told the survivors "rank 3 failed" first).
func TestDetectTellsOnlyItsOwnVerdict(t *testing.T) {
	cases := []struct {
		name    string
		aborted bool // rank 2's user aborted it before its detection told
	}{
		{"a live rank tells every peer", false},
		{"an aborted rank tells nobody", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(hostnet.EnvShmDisable, "1")
			comms := startComms(t, 3, testNet(10*time.Second))
			if tc.aborted {
				require.NoError(t, comms[2].Abort())
			}
			re, _ := comms[2].detect(fmt.Errorf("%w: a closed link", sdk.ErrRemoteError))
			for r := range 2 {
				got := comms[r].Revocation()
				if tc.aborted {
					require.Nil(t, re)
					require.Nil(t, got, "rank %d adopted the aborted rank's verdict", r)
					continue
				}
				require.NotNil(t, re)
				require.NotNil(t, got, "rank %d", r)
				require.Equal(t, 2, got.By)
				require.Empty(t, got.Failed, "every rank answered")
			}
		})
	}
}
