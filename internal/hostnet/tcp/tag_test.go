package tcp

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// TestTaggedLink: a message labelled otherwise than the receiver expects
// fails with *MismatchError carrying both labels (plain and striped), an
// untagged side is never checked, and a notice fails the receive with the
// sender's text, also where a striped message was expected.
func TestTaggedLink(t *testing.T) {
	cfg := testConfig(10 * time.Second)
	big := cfg.StripeMin * 4
	for _, tc := range []struct {
		name             string
		sendTag, wantTag uint32
		size             int
		notice           string
		mismatch         bool
	}{
		{"same tag", 7, 7, 8, "", false},
		{"untagged sender", 0, 7, 8, "", false},
		{"untagged receiver", 7, 0, 8, "", false},
		{"other tag", 7, 9, 8, "", true},
		{"other tag, striped", 7, 9, big, "", true},
		{"notice", 0, 7, 8, "rank 3 (host b): it broke", false},
		{"notice, striped receive", 0, 7, big, "rank 3 (host b): it broke", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := linkPair(t, cfg, 3)
			msg := make([]byte, tc.size)
			errc := make(chan error, 1)
			go func() {
				if tc.notice != "" {
					a.Notify(tc.notice)
					errc <- nil
					return
				}
				errc <- a.SendTagged(msg, tc.sendTag)
			}()
			err := b.RecvTagged(make([]byte, tc.size), tc.wantTag)
			var me *wire.MismatchError
			var pf *wire.PeerFailure
			switch {
			case tc.notice != "":
				require.True(t, errors.As(err, &pf), "got %v", err)
				require.Equal(t, tc.notice, pf.What)
			case tc.mismatch:
				require.True(t, errors.As(err, &me), "got %v", err)
				require.ErrorIs(t, err, wire.ErrMismatch)
				require.Equal(t, wire.MismatchError{Got: uint64(tc.sendTag), Want: uint64(tc.wantTag)}, *me)
			default:
				require.NoError(t, err)
			}
			if !tc.mismatch {
				require.NoError(t, <-errc)
			}
		})
	}
}

// TestNoticeAfterData: a notice waits for the frame being written, and
// a sender that sent a notice sends no data after it.
func TestNoticeAfterData(t *testing.T) {
	a, b := linkPair(t, testConfig(10*time.Second), 1)
	require.NoError(t, a.SendTagged([]byte("data"), 1))
	a.Notify("failed")
	buf := make([]byte, 4)
	require.NoError(t, b.RecvTagged(buf, 1))
	require.Equal(t, "data", string(buf))
	var pf *wire.PeerFailure
	require.True(t, errors.As(b.RecvTagged(buf, 1), &pf))
	require.ErrorIs(t, a.SendTagged(buf, 1), wire.ErrClosed)
	require.Equal(t, "failed", fmt.Sprint(pf.What))
}
