package hostcomm

import (
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// callDigest labels everything one call sends: each TCP frame carries it
// in its header (hostnet's tag.go) and each shared-memory step in its
// label (sharedNode), so a receiver whose own call differs (another
// collective, data type, op, count or root) fails with both calls named
// instead of reducing bytes it reads otherwise (float32 sum against int32
// max moves the same bytes). It costs nothing on the wire: the TCP
// header's reserved word and the step label existed already.
//
// Layout, so that a mismatch can say what the peer runs:
//
//	bits 0-3   collective + 1 (never 0: 0 is "untagged")
//	bits 4-7   data type
//	bits 8-10  reduction op
//	bits 11-31 a hash of count and root
type callDigest uint32

const (
	digestCollBits  = 4
	digestTypeShift = 4
	digestOpShift   = 8
	digestRestShift = 11
)

// digestOf is the digest of a call; the op and root are ignored where the
// collective has none, so that every rank computes the same value.
func digestOf(coll sdk.Collective, count int, dt sdk.DataType, op sdk.RedOp, root int) callDigest {
	if !coll.Reduces() {
		op = 0
	}
	if !coll.Rooted() {
		root = 0
	}
	h := uint64(14695981039346656037) // FNV-1a over count and root
	for _, v := range [2]uint64{uint64(count), uint64(root)} {
		h = (h ^ v) * 1099511628211
		h ^= h >> 29
	}
	d := uint32(coll+1)&(1<<digestCollBits-1) | uint32(dt&15)<<digestTypeShift | uint32(op&7)<<digestOpShift
	return callDigest(d | uint32(h)<<digestRestShift)
}

// DigestOfCall is digestOf of a schedule's call.
func DigestOfCall(c sched.Call) callDigest {
	return digestOf(c.Coll, c.Count, c.DType, c.Op, c.Root)
}

func (d callDigest) coll() sdk.Collective { return sdk.Collective(d&(1<<digestCollBits-1)) - 1 }
func (d callDigest) dtype() sdk.DataType  { return sdk.DataType(d >> digestTypeShift & 15) }
func (d callDigest) op() sdk.RedOp        { return sdk.RedOp(d >> digestOpShift & 7) }

// describe is what a digest tells of its call: the collective, data type
// and op (the count and root only hash into it).
func (d callDigest) describe() string {
	c := d.coll()
	if c < 0 || c >= sdk.NumCollectives {
		return fmt.Sprintf("an unknown operation (digest %#08x)", uint32(d))
	}
	s := c.Title()
	if c != sdk.Barrier && c != sdk.SendRecv {
		s += " " + d.dtype().String()
	}
	if c.Reduces() {
		s += " " + d.op().String()
	}
	return s
}

// mismatchText says how this rank's call (mine, with its count and root)
// and a peer's differ.
func mismatchText(mine callDigest, count, root int, theirs callDigest) string {
	me := mine.describe()
	if mine&(1<<digestRestShift-1) != theirs&(1<<digestRestShift-1) {
		return fmt.Sprintf("it runs %s where this rank runs %s", theirs.describe(), me)
	}
	what := fmt.Sprintf("count %d", count)
	if mine.coll().Rooted() {
		what += fmt.Sprintf(", root %d", root)
	}
	return fmt.Sprintf("it runs %s with another count or root than this rank's (%s)", me, what)
}

// callMismatch turns hostnet's mismatch of digests with peer into the
// error every rank reports: both calls named, and what to do.
func (c *Comm) callMismatch(err error, peer int) (error, bool) {
	return c.mismatchIn(c.running(), err, peer)
}

// running is the call whose digest labels this communicator's steps now:
// the user's (outer) inside a heterogeneous call, else cur.
func (c *Comm) running() Call {
	if c.outer.digest != 0 {
		return c.outer
	}
	return c.cur
}

// mismatchIn is callMismatch for call cur: a step that another goroutine
// finishes (core's relay proxy) names its own call, not the one running.
func (c *Comm) mismatchIn(cur Call, err error, peer int) (error, bool) {
	var me *hostnet.MismatchError
	if !errors.As(err, &me) {
		return nil, false
	}
	got, want := callDigest(me.Got), callDigest(me.Want)
	if got == 0 || want == 0 || got == want {
		return nil, false
	}
	who := "a rank of this host"
	if peer >= 0 {
		who = fmt.Sprintf("rank %d%s", peer, c.HostOf(peer))
	}
	return fmt.Errorf("%w: %w: %s: %s: every rank must make the same calls in the same order, with the same count, data type, op and root",
		sdk.ErrInvalidUsage, hostnet.ErrMismatch, who, mismatchText(want, cur.count, cur.root, got)), true
}

// HostOf is " (host NAME)" for peer, or "" when unknown.
func (c *Comm) HostOf(peer int) string {
	if peer < 0 || peer >= len(c.peers) || c.peers[peer].Host == "" {
		return ""
	}
	return " (host " + c.peers[peer].Host + ")"
}

// labelCalls is off only in BenchmarkCallDigest, to measure what the
// labels cost.
var labelCalls = true

// Call is the call a Comm runs now, as its digest and the numbers
// the digest only hashes (for the mismatch error).
type Call struct {
	digest      callDigest
	count, root int
}

// Begin makes coll the call whose digest labels this communicator's
// messages and steps until the next begin. Inside a heterogeneous call
// the user's call (outer, set by Comm.do) labels them instead: its steps
// on several communicators are all parts of that call.
func (c *Comm) Begin(coll sdk.Collective, count int, dt sdk.DataType, op sdk.RedOp, root int) {
	if !labelCalls {
		return
	}
	if c.outer.digest != 0 {
		c.cur = c.outer
		return
	}
	c.cur = Call{digest: digestOf(coll, count, dt, op, root), count: count, root: root}
}

// CallOf is call as a Call.
func CallOf(call sched.Call) Call {
	return Call{digest: DigestOfCall(call), count: call.Count, root: call.Root}
}

// Describe names the call (collective, type, op) as mismatch errors do.
func (c Call) Describe() string { return c.digest.describe() }
