package loader

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// TestRelayReduce: every field of a Relay reaches the plugin's
// relayReduce as flagcxRelay_v5_t says; bad relays are refused before C;
// an ABI v4 table loads adapted, without the entry.
func TestRelayReduce(t *testing.T) {
	path := mockPlugin(t, t.TempDir(), "acme")
	p, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{}))
	require.True(t, p.CanRelay())

	words := make([]uint64, 2)
	landed, goWord := uintptr(unsafe.Pointer(&words[0])), uintptr(unsafe.Pointer(&words[1]))
	good := Relay{Src: 0x1000, Window: 0x2000, Bytes: 700, Landed: landed, Go: goWord, Value: 7,
		Srcs: []uintptr{0x3000, 0x4000, 0x5000}, Dst: 0x6000, Count: 175, DType: sdk.Float32, Op: sdk.Avg, AvgDivisor: 3}
	before := len(cText(t, path, "mock_calls"))
	require.NoError(t, p.RelayReduce(0, &good, 0))
	require.Equal(t, "relay(0,0x1000,0x2000,700,7,3:0x3000:0x5000,7,4,3,175,0x6000);", cText(t, path, "mock_calls")[before:])
	require.Equal(t, uint64(7), words[0], "the plugin stored the value through the landed pointer")

	probe := Relay{Srcs: []uintptr{0x1000}, DType: sdk.Float32, Op: sdk.Sum, AvgDivisor: 1}
	require.NoError(t, p.RelayReduce(0, &probe, 0), "an empty relay needs no words")

	for _, tc := range []struct {
		name   string
		mutate func(r *Relay)
	}{
		{"no sources", func(r *Relay) { r.Srcs = nil }},
		{"too many sources", func(r *Relay) { r.Srcs = make([]uintptr, MaxReduceSrcs+1) }},
		{"no landed word", func(r *Relay) { r.Landed = 0 }},
		{"no go word", func(r *Relay) { r.Go = 0 }},
		{"value 0", func(r *Relay) { r.Value = 0 }},
		{"value with the abort bit", func(r *Relay) { r.Value = RelayAbort | 1 }},
		{"value with the done bit", func(r *Relay) { r.Value = RelayDone | 1 }},
		{"avg divisor 0", func(r *Relay) { r.AvgDivisor = 0 }},
		{"bad type", func(r *Relay) { r.DType = sdk.DataType(99) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.mutate(&r)
			before := len(cText(t, path, "mock_calls"))
			err := p.RelayReduce(0, &r, 0)
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.Equal(t, before, len(cText(t, path, "mock_calls")), "refused before the plugin")
		})
	}

	old, err := Open(mockPlugin(t, t.TempDir(), "acme", "-DMOCK_V4"))
	require.NoError(t, err)
	require.NoError(t, old.Init(InitOptions{}))
	require.Equal(t, 4, old.ABIVersion)
	require.False(t, old.CanRelay())
	err = old.RelayReduce(0, &good, 0)
	require.True(t, errors.Is(err, sdk.ErrNotSupported), "%v", err)
	require.ErrorContains(t, err, fmt.Sprintf("plugin ABI v%d without relayReduce", 4))
}
