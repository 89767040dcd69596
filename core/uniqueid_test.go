package core

import (
	"testing"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

func TestUniqueIDRoundTrips(t *testing.T) {
	secret := hostnet.Secret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0xff}
	for _, addr := range []string{"10.1.2.3:29500", "[fe80::1%eth0]:1234", "[::1]:7", "node-17.cluster:40000"} {
		id := NewUniqueID(addr, secret)
		got, err := ParseUniqueID(id.String())
		require.NoError(t, err, addr)
		require.Equal(t, id, got)
		b := id.Bytes()
		got, err = UniqueIDFromBytes(b[:])
		require.NoError(t, err, addr)
		require.Equal(t, id, got)
	}
}

func TestUniqueIDRejectsMalformed(t *testing.T) {
	good := NewUniqueID("127.0.0.1:5000", hostnet.Secret{1}).String()
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no '#'"},
		{"no secret", "127.0.0.1:5000", "no '#'"},
		{"short secret", "127.0.0.1:5000#abcd", "32 hex digits"},
		{"not hex", "127.0.0.1:5000#" + "zz" + good[len(good)-30:], "not hexadecimal"},
		{"no port", "127.0.0.1#" + good[len(good)-32:], "not host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseUniqueID(tc.in)
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
	var zeros [UniqueIDBytes]byte
	_, err := UniqueIDFromBytes(zeros[:])
	require.ErrorContains(t, err, "wrong magic")
	_, err = UniqueIDFromBytes(make([]byte, 128))
	require.ErrorContains(t, err, "got 128 bytes")
}
