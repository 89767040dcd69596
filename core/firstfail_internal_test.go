package core

import (
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// TestFirstFailureOverTheControlPlane: a rank whose failure notice could
// not travel (its links closed mid-frame) still names the first failure
// to the peer that sees only the closed link, through the control plane's
// answer to that peer's probe; a symptom (a lost peer) is not kept as a
// cause.
func TestFirstFailureOverTheControlPlane(t *testing.T) {
	t.Setenv(hostnet.EnvShmDisable, "1")
	comms := startComms(t, 2, testNet(10*time.Second))
	cause := "rank 0 (host test, pid 1): AllReduce on rank 0: a cause"

	// Rank 0 caused a failure but its links closed with no notice on
	// them (mid-frame): rank 1 sees only the closed link.
	comms[0].world.Keep(cause)
	done := make(chan error, 1)
	go func() {
		n := 1 << 20
		done <- comms[1].AllReduce(HostBuffer(make([]byte, n)), HostBuffer(make([]byte, n)), n/4, sdk.Float32, sdk.Sum, 0)
	}()
	require.NoError(t, comms[0].world.Abort())
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("rank 1's AllReduce did not end after rank 0's links closed")
	}
	require.ErrorIs(t, err, sdk.ErrRemoteError)
	require.ErrorContains(t, err, "first failure: "+cause)
	var re *RevokedError
	require.ErrorAs(t, err, &re)
	require.Empty(t, re.Failed, "rank 0 answered its probe")
	require.Contains(t, re.Cause, "first failure: "+cause, "the verdict the other ranks get names it too")
}
