package core

import (
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// A Comm and the vendor library adapter are sdk.Collectives as they are
// (sdk.Dispatch drives them).
var (
	_ sdk.Collectives[Buffer, loader.Stream]  = (*Comm)(nil)
	_ sdk.Grouper                             = (*Comm)(nil)
	_ sdk.Collectives[uintptr, loader.Stream] = watchedComm{}
)
