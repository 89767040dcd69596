package core

import (
	"encoding/json"
	"fmt"
	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// What core decodes from peers, each message in one function that returns
// a checked value (see internal/hostnet/peercheck.go for why, and for the
// peer table's own checks): the announcement a rank sends the rendezvous,
// the rendezvous's reply, and the init record of every rank (agree). The
// unique id's two forms are read by ParseUniqueID and UniqueIDFromBytes.

// Bounds of an init record's fields.
const (
	maxRecordName = 256     // vendor and plugin names
	maxDevices    = 1 << 16 // a device index
)

// decodeInitRecord reads rank r's init record (agree): NUL-padded JSON of
// initRecordBytes, describing rank r itself, with a split list that parses
// and a positive chunk.
func decodeInitRecord(b []byte, r int, peer string) (initRecord, error) {
	var rec initRecord
	bad := func(format string, args ...any) (initRecord, error) {
		return initRecord{}, fmt.Errorf("%w: the init record of %s %s", sdk.ErrRemoteError, peer, fmt.Sprintf(format, args...))
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return bad("is malformed: %v", err)
	}
	m := rec.Member
	switch {
	case m.Rank != r:
		return bad("says it is rank %d", m.Rank)
	case m.Vendor == "" || len(m.Vendor) > maxRecordName || len(m.Plugin) > maxRecordName:
		return bad("names a vendor or plugin of %d/%d bytes (1..%d)", len(m.Vendor), len(m.Plugin), maxRecordName)
	case m.Device < -1 || m.Device >= maxDevices:
		return bad("names device %d (-1..%d)", m.Device, maxDevices-1)
	case rec.Chunk < 1 || int64(rec.Chunk) > env.MaxBytes:
		return bad("has a chunk of %d bytes (1..%d)", rec.Chunk, env.MaxBytes)
	case len(rec.Split) > initRecordBytes:
		return bad("has a split list of %d bytes", len(rec.Split))
	}
	if _, err := sched.ParseSplitList(rec.Split); err != nil {
		return bad("has a split list that does not parse: %v", err)
	}
	if rec.Ctl != "" {
		if err := hostnet.CheckAddr(rec.Ctl); err != nil {
			return bad("names a control address that is not one: %v", err)
		}
	}
	return rec, nil
}

// decodeCtl reads a message of a peer's control plane (revoke.go) in a
// communicator of n ranks: a hello, or the verdict of a reply.
func decodeCtl(b []byte, n int) (ctlMsg, error) {
	var m ctlMsg
	bad := func(format string, args ...any) (ctlMsg, error) {
		return ctlMsg{}, fmt.Errorf("%w: a control message %s", sdk.ErrRemoteError, fmt.Sprintf(format, args...))
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return bad("is malformed: %v", err)
	}
	switch {
	case m.Kind != ctlProbe && m.Kind != ctlRevoke && m.Kind != ctlShrink:
		return bad("is of kind %q", m.Kind)
	case m.From < 0 || m.From >= n || m.By < 0 || m.By >= n:
		return bad("names rank %d or %d of %d", m.From, m.By, n)
	case !ascendingRanks(m.Failed, n) || !ascendingRanks(m.Exclude, n):
		return bad("lists ranks out of order or of range (0..%d)", n-1)
	case len(m.Hosts) != len(m.Failed):
		return bad("names %d hosts for %d ranks", len(m.Hosts), len(m.Failed))
	case len(m.ID) > 2*UniqueIDBytes+hostnet.MaxHello/16:
		return bad("carries an id of %d bytes", len(m.ID))
	}
	for i, h := range m.Hosts {
		if len(h) > maxRecordName {
			h = h[:maxRecordName]
		}
		m.Hosts[i] = strings.ToValidUTF8(h, "?")
	}
	if len(m.Cause) > hostcomm.MaxReplyError {
		m.Cause = m.Cause[:hostcomm.MaxReplyError] + "..."
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
