package core

import (
	"errors"

	"github.com/flagcx/flagcx-go/core/internal/hostcomm"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// shareVendorID makes the vendor's unique id on rank 0 and hands it to
// every rank. The first byte carries rank 0's outcome, so a failure there
// reaches every rank instead of leaving them waiting.
func shareVendorID(host *hostcomm.Comm, p *loader.Plugin) ([]byte, error) {
	n, err := p.UniqueIDBytes()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1+n)
	var idErr error
	if host.Rank() == 0 {
		var id []byte
		if id, idErr = p.UniqueID(); idErr != nil {
			buf[0] = 1
		} else {
			copy(buf[1:], id)
		}
	}
	if err := host.Run(&sdk.Call{Coll: sdk.Broadcast, Count: len(buf), DType: sdk.Uint8}, buf, buf); err != nil {
		return nil, err
	}
	if idErr != nil {
		return nil, idErr
	}
	if buf[0] != 0 {
		return nil, errors.New("rank 0 could not create the vendor unique id (see rank 0's error)")
	}
	return buf[1:], nil
}
