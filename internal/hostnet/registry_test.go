package hostnet

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
)

// TestDefaultsAreTheRegistrys keeps hostnet's exported defaults and the
// ones internal/base/env documents and returns for unset variables the same.
func TestDefaultsAreTheRegistrys(t *testing.T) {
	def := tcp.DefaultConfig()
	require.Equal(t, env.SocketIfName.Default(), def.IfName)
	require.Equal(t, env.SocketNThreads.Default()*env.NSocksPerThread.Default(), def.Streams)
	require.Equal(t, env.NetStripeMin.Default(), def.StripeMin)
	require.Equal(t, env.Timeout.Default(), def.Timeout)
	require.Equal(t, env.ShmP2PSize.Default(), shm.DefaultShmConfig().P2PBytes)
	require.Equal(t, env.ShmWindowSize.Default(), shm.DefaultShmConfig().WindowBytes)
	// The registry's bounds of the areas are hostnet's.
	for n, ok := range map[int]bool{shm.MinShmAreaBytes - 1: false, shm.MinShmAreaBytes: true, shm.MaxShmAreaBytes: true, shm.MaxShmAreaBytes + 1: false} {
		for _, s := range []*env.Setting[int]{env.ShmP2PSize, env.ShmWindowSize} {
			_, err := s.Get(func(k string) (string, bool) { return strconv.Itoa(n), k == s.Name })
			require.Equal(t, ok, err == nil, "%s=%d: %v", s.Name, n, err)
		}
	}
}

func TestShmCopyThreads(t *testing.T) {
	for _, v := range []string{"0", "65", "four"} {
		_, err := shm.ShmConfigFromLookup(func(k string) (string, bool) { return v, k == shm.EnvShmCopyThreads })
		require.ErrorIs(t, err, ErrConfig, v)
		require.ErrorContains(t, err, shm.EnvShmCopyThreads+`="`+v+`": allowed is a whole number from 1 to 64`)
	}
	_, err := shm.ShmConfigFromLookup(func(k string) (string, bool) { return "8", k == shm.EnvShmCopyThreads })
	require.NoError(t, err)
}
