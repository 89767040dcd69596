package netplugin

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// What a peer sends over the negotiation and the plugin is read here, one
// decoder per message (internal/hostnet/peercheck.go says why).

// Bounds of a network offer's text (netOffer).
const maxOfferName = 128

// decodeNetOffer reads the network offer of rank peer (at addr).
func decodeNetOffer(b []byte, peer int, addr string) (netOffer, error) {
	var o netOffer
	bad := func(format string, args ...any) (netOffer, error) {
		return netOffer{}, fmt.Errorf("hostnet: %s's network offer %s: %w", wire.PeerName(peer, addr), fmt.Sprintf(format, args...), wire.ErrProtocol)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return bad("is malformed (%v)", err)
	}
	switch {
	case o.Want != "IB" && o.Want != "auto" && o.Want != "no":
		return bad("wants %s (IB, auto or no)", wire.QuoteIfOdd(o.Want, 16))
	case !wire.FreeText(o.Why, negotiationMax):
		return bad("gives a reason that is not text of at most %d bytes", negotiationMax)
	case !wire.Printable(o.Device, maxOfferName), !wire.Printable(o.Fabric, maxOfferName):
		return bad("names a device or fabric that is not text of at most %d bytes", maxOfferName)
	}
	return o, nil
}

// decodeNegotiation reads one negotiation message (sendSmall's framing: a
// 4-byte length, then negotiationMax bytes).
func decodeNegotiation(msg []byte) ([]byte, error) {
	if len(msg) != 4+negotiationMax {
		return nil, fmt.Errorf("hostnet: a %d-byte negotiation message (always %d): %w", len(msg), 4+negotiationMax, wire.ErrProtocol)
	}
	n := int(getU32(msg))
	if n > negotiationMax {
		return nil, fmt.Errorf("hostnet: negotiation message says %d bytes (at most %d): %w", n, negotiationMax, wire.ErrProtocol)
	}
	return msg[4 : 4+n], nil
}

// decodeChunk checks chunk i of n of a NetLink message of want bytes, of
// which off are in place: the plugin says got bytes of slot arrived. It
// returns the chunk's payload. A first chunk announcing another length is
// a *LengthError (the ranks disagree on a count); anything else that does
// not fit is a protocol error naming the peer at remote.
func decodeChunk(slot []byte, got, i, n, off, want int, remote string) ([]byte, error) {
	if got < 0 || got > len(slot) {
		return nil, fmt.Errorf("hostnet: ib recv from %s: chunk %d of %d bytes in a %d-byte slot: %w", remote, i, got, len(slot), wire.ErrProtocol)
	}
	buf := slot[:got]
	if i == 0 {
		if got < netHeader {
			return nil, fmt.Errorf("hostnet: ib recv from %s: a %d-byte first chunk: %w", remote, got, wire.ErrProtocol)
		}
		if total := binary.LittleEndian.Uint64(buf); total != uint64(want) {
			return nil, &wire.LengthError{Got: int(min(total, uint64(math.MaxInt))), Want: want}
		}
		buf = buf[netHeader:]
	}
	if off < 0 || off > want || len(buf) > want-off || (i < n-1 && len(buf) == 0) {
		return nil, fmt.Errorf("hostnet: ib recv from %s: chunk %d of %d bytes does not fit the message: %w", remote, i, len(buf), wire.ErrProtocol)
	}
	return buf, nil
}
