package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/sched"
)

// TestChunkDefault keeps the chunk internal/base/env documents for an unset
// FLAGCX_NET_CHUNK_SIZE the one the schedules use.
func TestChunkDefault(t *testing.T) {
	require.Equal(t, sched.DefaultChunk, env.NetChunkSize.Default())
	r, err := settings(&options{lookup: func(string) (string, bool) { return "", false }})
	require.NoError(t, err)
	require.Equal(t, sched.DefaultChunk, r.Chunk)
	r, err = settings(&options{lookup: func(k string) (string, bool) { return "1.5M", k == EnvNetChunkSize }})
	require.NoError(t, err)
	require.Equal(t, 3<<19, r.Chunk, "a chunk reads as bench's sizes do")
}
