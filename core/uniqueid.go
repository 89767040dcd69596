package core

import "github.com/flagcx/flagcx-go/hostnet"

// UniqueID names one communicator: where its rendezvous listens and the
// secret its ranks prove.
type UniqueID struct {
	Addr   string
	Secret hostnet.Secret
}

// UniqueIDBytes is the size of FlagCX's flagcxUniqueId.
const UniqueIDBytes = 256

// GetUniqueID makes a new id and starts its rendezvous in this process,
// which must live until every rank has joined.
func GetUniqueID(opts ...IDOption) (UniqueID, error) { return UniqueID{}, errTODO }

// NewUniqueID names a rendezvous hosted elsewhere (for ranks that learn the
// address and secret from their launcher rather than from a string).
func NewUniqueID(addr string, secret hostnet.Secret) UniqueID {
	return UniqueID{Addr: addr, Secret: secret}
}

// ParseUniqueID reads the form String writes.
func ParseUniqueID(s string) (UniqueID, error) { return UniqueID{}, errTODO }

func (id UniqueID) String() string { return "" }

// IDOption configures GetUniqueID.
type IDOption func(*idOptions)

type idOptions struct {
	addr   string
	secret *hostnet.Secret
}

// WithRendezvousAddr makes the rendezvous listen on addr (host:port), as
// FLAGCX_COMM_ID or MASTER_ADDR:MASTER_PORT ask.
func WithRendezvousAddr(addr string) IDOption { return func(o *idOptions) { o.addr = addr } }

// WithSecret uses a secret the launcher shares instead of a random one.
func WithSecret(s hostnet.Secret) IDOption { return func(o *idOptions) { o.secret = &s } }

// Option configures InitRank.
type Option func(*options)

type options struct{}
