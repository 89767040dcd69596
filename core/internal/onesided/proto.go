package onesided

import "encoding/binary"

// The message transport of one-sided calls: every peer that is not reached
// straight through shared memory (shm.go) is served by its own
// progress goroutines over the one-sided links (shared-memory rings on a
// host, TCP or the net plugin between hosts: whatever hostnet's table
// picked for the pair). Per pair and direction the protocol is
//
//	initiator                         target (serve)            target (answer)
//	put/putSignal hdr, payload  ->    write window, signal ->   ack (cumulative) / nak
//	signal hdr                  ->    signal               ->   ack
//	get hdr                     ->    queue                ->   data hdr, payload
//
// Every message starts with a fixed header; a payload follows as messages
// of at most the header's chunk bytes, cut alike on both sides. The
// target applies operations in the order they came (one goroutine reads
// the link), numbered 1, 2, ... per pair: an acknowledgement of n
// completes the first n. Answers go out on a goroutine of their own, so
// that a serving goroutine never waits for its peer's (two ranks answering
// each other with full links would wait forever). pair.go has the
// initiator's side of a pair, serve.go the target's.

// Message kinds.
const (
	msgPut uint8 = iota + 1
	msgPutSignal
	msgSignal
	msgGet
	msgAck
	msgNak
	msgData
)

// chunkBytes is the most payload bytes one message carries: large enough
// that a TCP link stripes it over its sockets, small enough that a
// device's staging and a refused payload's discard buffer stay small.
const chunkBytes = 4 << 20

const headerBytes = 40

// header is a message's header: kind, status (answers), window, sequence
// number, offset and length of the bytes, and the payload's chunk.
type header struct {
	kind, status uint8
	win          uint32
	seq          uint64
	off, n       uint64
	chunk        uint64
}

func (h *header) put(b []byte) {
	clear(b[:headerBytes])
	b[0], b[1] = h.kind, h.status
	binary.LittleEndian.PutUint32(b[4:], h.win)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.off)
	binary.LittleEndian.PutUint64(b[24:], h.n)
	binary.LittleEndian.PutUint64(b[32:], h.chunk)
}

func parseHeader(b []byte) header {
	return header{kind: b[0], status: b[1], win: binary.LittleEndian.Uint32(b[4:]), seq: binary.LittleEndian.Uint64(b[8:]),
		off: binary.LittleEndian.Uint64(b[16:]), n: binary.LittleEndian.Uint64(b[24:]), chunk: binary.LittleEndian.Uint64(b[32:])}
}

// frameTag labels every frame of the one-sided links. Its low 4 bits are
// 0, which no collective's digest has (core/internal/hostcomm/digest.go:
// they hold the collective + 1), so one-sided traffic and a collective's
// can never be taken for each other, even on a link that carried both.
const frameTag = 0x4f530000 // "OS"
