package hostcomm

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// ID names one host communicator: where its rendezvous listens and the
// secret its ranks must prove (core.UniqueID is the same struct, which
// users hold).
type ID struct {
	Addr   string
	Secret hostnet.Secret
}

// IDBytes is the size of an ID's byte form, FlagCX's flagcxUniqueId.
const IDBytes = 256

// idMagic opens the byte form so that bytes of another origin (an NCCL
// id, zeros) are refused instead of being read as an address.
var idMagic = [4]byte{'F', 'C', 'X', '1'}

// The byte form: magic[4] | secret[16] | address length (uint16 LE) | address | zeros.
const idAddrOffset = 4 + len(hostnet.Secret{}) + 2

// NewID makes a new id and starts its rendezvous in this process, on addr
// ("": where cfg says) with secret (nil: a random one). The process must
// stay alive until every rank has joined (the rendezvous ends by itself
// then, or after the deadline when ranks are missing).
func NewID(addr string, cfg hostnet.Config, secret *hostnet.Secret) (ID, error) {
	var id ID
	if secret != nil {
		id.Secret = *secret
	} else if _, err := rand.Read(id.Secret[:]); err != nil {
		return ID{}, fmt.Errorf("%w: reading random secret: %w", sdk.ErrSystemError, err)
	}
	a, err := startRendezvous(addr, cfg, id.Secret)
	if err != nil {
		return ID{}, err
	}
	id.Addr = a
	return id, nil
}

// Bytes is the id's byte form.
func (id ID) Bytes() [IDBytes]byte {
	var b [IDBytes]byte
	copy(b[:], idMagic[:])
	copy(b[4:], id.Secret[:])
	binary.LittleEndian.PutUint16(b[idAddrOffset-2:], uint16(len(id.Addr)))
	copy(b[idAddrOffset:], id.Addr)
	return b
}

// IDFromBytes reads the byte form, which a peer may have sent: every
// field is checked.
func IDFromBytes(b []byte) (ID, error) {
	bad := func(why string) (ID, error) {
		return ID{}, fmt.Errorf("%w: malformed %d-byte unique id: %s", sdk.ErrInvalidArgument, IDBytes, why)
	}
	if len(b) != IDBytes {
		return bad(fmt.Sprintf("got %d bytes", len(b)))
	}
	if !bytes.Equal(b[:4], idMagic[:]) {
		return bad("it was not made by flagcx-go (wrong magic)")
	}
	var id ID
	copy(id.Secret[:], b[4:])
	n := int(binary.LittleEndian.Uint16(b[idAddrOffset-2:]))
	if n == 0 || idAddrOffset+n > IDBytes {
		return bad("address length out of range")
	}
	if bytes.ContainsFunc(b[idAddrOffset+n:], func(r rune) bool { return r != 0 }) {
		return bad("bytes after the address are not zero (only what Bytes wrote is a unique id)")
	}
	id.Addr = string(b[idAddrOffset : idAddrOffset+n])
	if err := hostnet.CheckAddr(id.Addr); err != nil {
		return bad(err.Error())
	}
	return id, nil
}
