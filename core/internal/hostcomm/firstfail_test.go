package hostcomm

import (
	"fmt"
	"testing"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// TestNotifyPeersKeepsTheFirstCause: a symptom (a lost peer) is not kept
// for the control plane; the first cause is, and only the first.
func TestNotifyPeersKeepsTheFirstCause(t *testing.T) {
	h := &Comm{who: "rank 3", mesh: &hostnet.Mesh{}}
	h.NotifyPeers(fmt.Errorf("%w: rank 2 closed the connection", sdk.ErrRemoteError))
	require.Empty(t, h.Reported())
	h.NotifyPeers(fmt.Errorf("%w: a cause", sdk.ErrInvalidUsage))
	h.NotifyPeers(fmt.Errorf("%w: a later one", sdk.ErrInvalidUsage))
	require.Regexp(t, `^rank 3 \(host .*, pid \d+\): invalid usage: a cause$`, h.Reported())

}
