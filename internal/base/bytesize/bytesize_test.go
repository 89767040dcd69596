package bytesize

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHuman(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1 KiB"},
		{1536, "1.5 KiB"},
		{64 << 10, "64 KiB"},
		{1<<20 - 1, "1024 KiB"},
		{1 << 20, "1 MiB"},
		{1234 << 10, "1.205 MiB"},
		{8<<20 + 4096, "8.004 MiB"},
		{3 << 29, "1.5 GiB"},
		{24 << 30, "24 GiB"},
		{1 << 40, "1 TiB"},
		{5 << 50, "5 PiB"},
		{1 << 60, "1 EiB"},
		{1<<63 - 1, "8 EiB"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Human(tc.n), "Human(%d)", tc.n)
	}
}

func TestCompact(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0"},
		{8, "8"},
		{1536, "1536"},
		{64 << 10, "64K"},
		{3 << 19, "1536K"},
		{32 << 20, "32M"},
		{1 << 30, "1G"},
		{1<<30 + 1, "1073741825"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Compact(tc.n), "Compact(%d)", tc.n)
	}
}
