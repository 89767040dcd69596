package ctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// The kinds of message: a hello of one of them, answered by a reply.
const (
	Probe  = "probe"  // are you there?
	Revoke = "revoke" // the communicator is revoked: adopt this verdict
	Shrink = "shrink" // the survivors' new communicator (core/shrink.go)
)

// Msg is a hello on the control plane; Ask stamps From with the asking
// rank.
type Msg struct {
	Kind    string   `json:"kind"`
	From    int      `json:"from"`
	Failed  []int    `json:"failed,omitempty"`
	Hosts   []string `json:"hosts,omitempty"`
	By      int      `json:"by"`
	Cause   string   `json:"cause,omitempty"`
	At      int64    `json:"at,omitempty"`      // revoke: Verdict.At, Unix nanoseconds
	ID      string   `json:"id,omitempty"`      // shrink: the new unique id
	Exclude []int    `json:"exclude,omitempty"` // shrink: the ranks left out
}

// Verdict is a revocation as it travels between ranks: the lost ranks
// (Failed, ascending) and their hosts, the rank that found out (By), what
// it saw (Cause) and when (At, on its clock). core's RevokedError is a
// Verdict with what belongs to the rank whose call it ends.
type Verdict struct {
	Failed []int
	Hosts  []string
	By     int
	Cause  string
	At     time.Time
}

// RevokeMsg is the message that hands v to a peer.
func RevokeMsg(v Verdict) Msg {
	return Msg{Kind: Revoke, Failed: v.Failed, Hosts: v.Hosts, By: v.By, Cause: v.Cause, At: v.At.UnixNano()}
}

// Verdict is the verdict a revoke message carries.
func (m *Msg) Verdict() Verdict {
	return Verdict{Failed: m.Failed, Hosts: m.Hosts, By: m.By, Cause: m.Cause, At: time.Unix(0, m.At)}
}

// Answer is what a rank answers every hello with.
type Answer struct {
	Verdict *Verdict // the verdict the rank adopted; nil: it has none
	// Failure is the first failure the rank told its peers of, which a
	// peer whose link closed mid-frame never got as a notice; "" if none.
	Failure string
}

// reply is an Answer on the wire: the verdict as a revoke message (read
// by decode, as a hello is).
type reply struct {
	Revoked json.RawMessage `json:"revoked,omitempty"`
	Failure string          `json:"failure,omitempty"`
}

// Bounds of what a message carries, as core bounds what its peers send: a
// host's name (maxRecordName, core/peercheck.go), a cause (MaxReplyError,
// core/internal/hostcomm/peercheck.go), and a unique id's string form
// (twice core.UniqueIDBytes, core/uniqueid.go, with room).
const (
	maxHost  = 256
	maxCause = 4096
	maxID    = 2*256 + hostnet.MaxHello/16
)

// decode reads a message of a peer's control plane in a communicator of
// n ranks: a hello, or the verdict of a reply. What it accepts names
// ranks of n, lists Failed and Exclude ascending, and a host for each
// failed rank (see core/peercheck.go for why each decoder checks all).
func decode(b []byte, n int) (Msg, error) {
	var m Msg
	bad := func(format string, args ...any) (Msg, error) {
		return Msg{}, fmt.Errorf("%w: a control message %s", sdk.ErrRemoteError, fmt.Sprintf(format, args...))
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return bad("is malformed: %v", err)
	}
	switch {
	case m.Kind != Probe && m.Kind != Revoke && m.Kind != Shrink:
		return bad("is of kind %q", m.Kind)
	case m.From < 0 || m.From >= n || m.By < 0 || m.By >= n:
		return bad("names rank %d or %d of %d", m.From, m.By, n)
	case !ascendingRanks(m.Failed, n) || !ascendingRanks(m.Exclude, n):
		return bad("lists ranks out of order or of range (0..%d)", n-1)
	case len(m.Hosts) != len(m.Failed):
		return bad("names %d hosts for %d ranks", len(m.Hosts), len(m.Failed))
	case len(m.ID) > maxID:
		return bad("carries an id of %d bytes", len(m.ID))
	}
	for i, h := range m.Hosts {
		if len(h) > maxHost {
			h = h[:maxHost]
		}
		m.Hosts[i] = strings.ToValidUTF8(h, "?")
	}
	if len(m.Cause) > maxCause {
		m.Cause = m.Cause[:maxCause] + "..."
	}
	m.Cause = strings.ToValidUTF8(m.Cause, "?")
	return m, nil
}

// ascendingRanks: rs are ranks of n, each once, ascending.
func ascendingRanks(rs []int, n int) bool {
	for i, r := range rs {
		if r < 0 || r >= n || (i > 0 && rs[i-1] >= r) {
			return false
		}
	}
	return true
}
