package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestP2PBufferErrorsNameTheBufferOnce: Send's and Recv's one buffer is
// named "buffer" in their argument errors, once, on a device rank
// (emulated nvidia) and on the host placement ("buffer buffer holds 0
// bytes" before).
func TestP2PBufferErrorsNameTheBufferOnce(t *testing.T) {
	dev, _, streams := startMixed(t, "dd")
	host := startHetero(t, 1)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"device Send of an empty buffer", func() error { return dev[0].Send(core.DeviceBuffer(0, 0), 1, sdk.Float32, 1, streams[0]) },
			"Send on rank 0: invalid argument: buffer holds 0 bytes but 4 are needed"},
		{"device Recv of a short buffer", func() error { return dev[0].Recv(core.DeviceBuffer(0x1000, 2), 1, sdk.Float32, 1, streams[0]) },
			"Recv on rank 0: invalid argument: buffer holds 2 bytes but 4 are needed"},
		{"device Recv of a negative length", func() error { return dev[0].Recv(core.DeviceBuffer(0x1000, -1), 1, sdk.Float32, 1, streams[0]) },
			"Recv: buffer has a negative length"},
		{"device Send of host memory", func() error { return dev[0].Send(core.HostBuffer(make([]byte, 4)), 1, sdk.Float32, 1, streams[0]) },
			"but the buffer is host memory"},
		{"host Send of device memory", func() error { return host[0].Send(core.DeviceBuffer(0x1000, 4), 1, sdk.Float32, 0, 0) },
			"but the buffer is device memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "buffer buffer")
		})
	}
}
