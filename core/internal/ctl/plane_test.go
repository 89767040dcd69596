package ctl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// answerer is a rank's communicator as the plane sees it: it answers ans
// (or nothing, unless ok) and hands on what it was asked.
type answerer struct {
	ans  Answer
	ok   bool
	seen chan Msg
}

func (a *answerer) Answer(m Msg) (Answer, bool) {
	a.seen <- m
	return a.ans, a.ok
}

// planes opens the control planes of n ranks on loopback, rank r answered
// by as[r], each serving until the test ends.
func planes(t *testing.T, as ...Answerer) []*Plane {
	t.Helper()
	cfg := hostnet.DefaultConfig()
	cfg.IfName, cfg.Streams, cfg.Timeout = "lo", 1, 5*time.Second
	secret := hostnet.Secret{1, 2, 3}
	ps := make([]*Plane, len(as))
	addrs := make([]string, len(as))
	for r, a := range as {
		p, err := Listen(cfg, secret, r, len(as))
		require.NoError(t, err)
		t.Cleanup(p.Close)
		go p.Serve(a)
		ps[r], addrs[r] = p, p.Addr()
	}
	for _, p := range ps {
		p.SetAddrs(addrs)
	}
	return ps
}

// TestAsk: rank 0 asks rank 1; rank 1's communicator sees the message,
// stamped with the asker, and its answer comes back whole; a shrink
// message waits on Shrinks; a rank that answers nothing, a message of no
// kind and a verdict naming no rank of the communicator are errors of the
// asker, within its wait.
func TestAsk(t *testing.T) {
	at := time.Unix(0, 1_700_000_000_123_456_789)
	verdict := &Verdict{Failed: []int{2}, Hosts: []string{"h2"}, By: 1, Cause: "rank 2 is gone", At: at}
	cases := []struct {
		name    string
		msg     Msg
		ans     Answer
		refuse  bool   // rank 1 answers nothing
		want    Answer // rank 0's answer
		seen    bool   // rank 1's communicator sees the message
		shrink  bool   // it waits on rank 1's Shrinks
		wantErr string
		is      error
	}{
		{name: "probe, nothing to tell", msg: Msg{Kind: Probe}, seen: true},
		{name: "probe, a verdict and a first failure", msg: Msg{Kind: Probe, From: 3},
			ans: Answer{Verdict: verdict, Failure: "rank 2 (host h2): boom"}, want: Answer{Verdict: verdict, Failure: "rank 2 (host h2): boom"}, seen: true},
		{name: "revoke", msg: RevokeMsg(*verdict), seen: true},
		{name: "shrink", msg: Msg{Kind: Shrink, ID: "id", Exclude: []int{2}}, seen: true, shrink: true},
		{name: "refused", msg: Msg{Kind: Shrink, ID: "id"}, refuse: true, seen: true, wantErr: "connection closed by the peer"},
		{name: "no kind", msg: Msg{Kind: "hello"}, wantErr: "connection closed by the peer"},
		{name: "a verdict of no rank", msg: Msg{Kind: Probe}, ans: Answer{Verdict: &Verdict{Failed: []int{7}, Hosts: []string{"h"}}},
			seen: true, wantErr: "rank 1's verdict: remote error: a control message lists ranks out of order or of range (0..2)", is: sdk.ErrRemoteError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &answerer{ans: tc.ans, ok: !tc.refuse, seen: make(chan Msg, 1)}
			ps := planes(t, &answerer{seen: make(chan Msg, 1)}, a, &answerer{seen: make(chan Msg, 1)})
			start := time.Now()
			got, err := ps[0].Ask(1, tc.msg, 2*time.Second)
			require.Less(t, time.Since(start), 4*time.Second)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.is != nil {
					require.ErrorIs(t, err, tc.is)
				}
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.want.Failure, got.Failure)
				if tc.want.Verdict == nil {
					require.Nil(t, got.Verdict)
				} else {
					require.True(t, got.Verdict.At.Equal(at), "At %v", got.Verdict.At)
					got.Verdict.At = at
					require.Equal(t, *tc.want.Verdict, *got.Verdict)
				}
			}
			sent := tc.msg
			sent.From = 0 // Ask stamps the asker
			if tc.seen {
				require.Equal(t, sent, <-a.seen)
			} else {
				require.Empty(t, a.seen)
			}
			if tc.shrink {
				require.Equal(t, sent, <-ps[1].Shrinks())
			} else {
				require.Empty(t, ps[1].Shrinks())
			}
		})
	}
}

// TestAskRankWithoutAddress: a rank the plane has no address of is the
// caller's mistake, told at once.
func TestAskRankWithoutAddress(t *testing.T) {
	ps := planes(t, &answerer{seen: make(chan Msg, 1)})
	for _, r := range []int{-1, 1} {
		_, err := ps[0].Ask(r, Msg{Kind: Probe}, time.Second)
		require.ErrorIs(t, err, sdk.ErrInvalidUsage)
		require.ErrorContains(t, err, "the control plane knows no address of rank")
	}
}
