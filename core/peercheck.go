package core

import (
	"encoding/json"
	"fmt"
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
