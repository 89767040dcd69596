package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
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

// TestLinkStreams: each stream of a TCP link carries its own messages,
// in order, while the others carry theirs at the same time; a tag that
// differs is refused as on whole-link messages; one stream failing breaks
// them all, so that nobody waits on another stream for its deadline.
func TestLinkStreams(t *testing.T) {
	const k = 3
	a, b := linkPair(t, testConfig(10*time.Second), k)
	require.Equal(t, k, a.Streams())
	msg := func(i, j int) []byte { return bytes.Repeat([]byte{byte(i*16 + j)}, 40<<10+i) }
	var wg sync.WaitGroup
	errs := make([]error, 2*k)
	for i := 0; i < k; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 5 && errs[2*i] == nil; j++ {
				errs[2*i] = a.SendStream(i, msg(i, j), 7)
			}
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 5 && errs[2*i+1] == nil; j++ {
				got := make([]byte, len(msg(i, j)))
				if errs[2*i+1] = b.RecvStream(i, got, 7); errs[2*i+1] == nil && !bytes.Equal(msg(i, j), got) {
					errs[2*i+1] = fmt.Errorf("stream %d message %d arrived changed", i, j)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// The whole link still works after per-stream traffic.
	require.NoError(t, a.SendTagged([]byte("whole"), 8))
	got := make([]byte, 5)
	require.NoError(t, b.RecvTagged(got, 8))
	require.Equal(t, "whole", string(got))

	require.NoError(t, a.SendStream(1, []byte("tagged"), 9))
	err := b.RecvStream(1, make([]byte, 6), 10)
	var mm *wire.MismatchError
	require.ErrorAs(t, err, &mm, "a frame of another call is refused")
	start := time.Now()
	err = b.RecvStream(2, make([]byte, 6), 9)
	require.Error(t, err, "the other streams are broken with the first")
	require.Less(t, time.Since(start), 5*time.Second)
}
