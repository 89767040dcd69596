package core

import (
	"encoding/json"
	"testing"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

func TestDecodeInitRecord(t *testing.T) {
	good := initRecord{Member: sched.Member{Rank: 1, Vendor: sched.HostVendor, Device: -1}, Chunk: 1 << 20}
	for _, tc := range []struct {
		name string
		edit func(r *initRecord)
		want string
	}{
		{"valid", func(r *initRecord) {}, ""},
		{"another rank", func(r *initRecord) { r.Member.Rank = 0 }, "the init record of rank 1 (10.0.0.2:5000) says it is rank 0"},
		{"no vendor", func(r *initRecord) { r.Member.Vendor = "" }, "names a vendor or plugin of 0/0 bytes"},
		{"device", func(r *initRecord) { r.Member.Device = -5 }, "names device -5"},
		{"chunk", func(r *initRecord) { r.Chunk = 0 }, "has a chunk of 0 bytes"},
		{"split", func(r *initRecord) { r.Split = "1,x" }, "split list that does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.edit(&r)
			js, err := json.Marshal(r)
			require.NoError(t, err)
			b := make([]byte, initRecordBytes)
			copy(b, js)
			got, err := decodeInitRecord(b, 1, hostnet.PeerName(1, "10.0.0.2:5000"))
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, r, got)
				return
			}
			require.ErrorIs(t, err, sdk.ErrRemoteError)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
