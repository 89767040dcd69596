package core

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// UniqueID names one communicator: where its rendezvous listens and the
// secret its ranks must prove. It is created once (GetUniqueID) and handed
// to every rank, as a string or as FlagCX's 256-byte flagcxUniqueId.
type UniqueID struct {
	Addr   string // the rendezvous, host:port
	Secret Secret // what the ranks prove to it and to each other
}

// UniqueIDBytes is the size of FlagCX's flagcxUniqueId.
const UniqueIDBytes = hostcomm.IDBytes

// GetUniqueID makes a new id and starts its rendezvous in this process. The
// process must stay alive until every rank has joined (the rendezvous ends by
// itself then, or after the deadline when ranks are missing).
func GetUniqueID(opts ...IDOption) (UniqueID, error) {
	o := idOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	cfg := o.net
	if cfg == nil {
		c, err := NetConfigFromEnv()
		if err != nil {
			return UniqueID{}, err
		}
		cfg = &c
	}
	id, err := hostcomm.NewID(o.addr, *cfg, o.secret)
	return UniqueID(id), err
}

// NewUniqueID names a rendezvous hosted elsewhere, for ranks that learn the
// address and secret from their launcher rather than from a string.
func NewUniqueID(addr string, secret Secret) UniqueID {
	return UniqueID{Addr: addr, Secret: secret}
}

// String is "<host:port>#<secret in hex>"; ParseUniqueID reads it back.
func (id UniqueID) String() string {
	return id.Addr + "#" + hex.EncodeToString(id.Secret[:])
}

// ParseUniqueID reads the form String writes.
func ParseUniqueID(s string) (UniqueID, error) {
	bad := func(why string) (UniqueID, error) {
		return UniqueID{}, fmt.Errorf("%w: malformed unique id %q: %s (expected host:port#<32 hex digits>, as printed by the rank that created it)", sdk.ErrInvalidArgument, s, why)
	}
	i := strings.LastIndexByte(s, '#')
	if i < 0 {
		return bad("no '#' before the secret")
	}
	addr, secretHex := s[:i], s[i+1:]
	var id UniqueID
	if len(secretHex) != 2*len(id.Secret) {
		return bad("the secret is not 32 hex digits")
	}
	if _, err := hex.Decode(id.Secret[:], []byte(secretHex)); err != nil {
		return bad("the secret is not hexadecimal")
	}
	if err := checkAddr(addr); err != nil {
		return bad(err.Error())
	}
	id.Addr = addr
	return id, nil
}

// Bytes is FlagCX's 256-byte form of the id.
func (id UniqueID) Bytes() [UniqueIDBytes]byte { return hostcomm.ID(id).Bytes() }

// UniqueIDFromBytes reads the 256-byte form.
func UniqueIDFromBytes(b []byte) (UniqueID, error) {
	id, err := hostcomm.IDFromBytes(b)
	return UniqueID(id), err
}

// checkAddr: the id's address is checked as a peer's listener is.
func checkAddr(addr string) error { return hostnet.CheckAddr(addr) }

// IDOption configures GetUniqueID.
type IDOption func(*idOptions)

type idOptions struct {
	addr   string
	secret *hostnet.Secret
	net    *hostnet.Config
}

// WithRendezvousAddr makes the rendezvous listen on addr (host:port), as
// FLAGCX_COMM_ID or MASTER_ADDR:MASTER_PORT ask.
func WithRendezvousAddr(addr string) IDOption { return func(o *idOptions) { o.addr = addr } }

// WithSecret uses a secret the launcher shares instead of a random one.
func WithSecret(s Secret) IDOption { return func(o *idOptions) { o.secret = &s } }

// WithIDNetConfig sets the transport configuration of the rendezvous
// (default: NetConfigFromEnv).
func WithIDNetConfig(cfg NetConfig) IDOption { return func(o *idOptions) { o.net = &cfg } }
