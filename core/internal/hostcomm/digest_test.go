package hostcomm

import (
	"fmt"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// TestDigestDescribes: the digest keeps the collective, type and op
// exactly, whatever the count and root.
func TestDigestDescribes(t *testing.T) {
	for _, tc := range []struct {
		d    callDigest
		want string
	}{
		{digestOf(sdk.AllReduce, 1<<40, sdk.Bfloat16, sdk.Avg, 7), "AllReduce bfloat16 avg"},
		{digestOf(sdk.Broadcast, 3, sdk.Int8, sdk.Max, 2), "Broadcast int8"},
		{digestOf(sdk.Barrier, 0, 0, 0, 0), "Barrier"},
		{digestOf(sdk.SendRecv, 0, 0, 0, 0), "SendRecv"},
	} {
		require.Equal(t, tc.want, tc.d.describe())
		require.NotZero(t, tc.d)
	}
	require.NotEqual(t, digestOf(sdk.Reduce, 8, sdk.Float32, sdk.Sum, 0), digestOf(sdk.Reduce, 8, sdk.Float32, sdk.Sum, 1))
	require.Equal(t, digestOf(sdk.AllReduce, 8, sdk.Float32, sdk.Sum, 0), digestOf(sdk.AllReduce, 8, sdk.Float32, sdk.Sum, 5), "a collective without a root ignores it")
}

// BenchmarkCallDigest: an 8-byte AllReduce of 2 ranks over TCP with and
// without the call's digest in its frames (go test -bench CallDigest
// -run '^$' ./core): the digest should cost nothing measurable.
func BenchmarkCallDigest(b *testing.B) {
	b.Setenv(hostnet.EnvShmDisable, "1")
	comms := startHosts(b, 2, testNet(10*time.Second))
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("digest=%v", on), func(b *testing.B) {
			labelCalls = on
			defer func() { labelCalls = true }()
			bufs := make([][]byte, 2)
			for r := range bufs {
				bufs[r] = make([]byte, 8)
			}
			b.ResetTimer()
			errs := onAllHosts(comms, func(c *Comm) error {
				buf := bufs[c.Rank()]
				call := sdk.Call{Coll: sdk.AllReduce, Count: 2, DType: sdk.Float32, Op: sdk.Sum}
				for i := 0; i < b.N; i++ {
					if err := c.Run(&call, buf, buf); err != nil {
						return err
					}
				}
				return nil
			})
			for _, err := range errs {
				require.NoError(b, err)
			}
		})
	}
}
