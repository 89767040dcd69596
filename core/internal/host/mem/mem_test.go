package mem

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStreamCopiesExactly(t *testing.T) {
	src := make([]byte, 1<<20+333)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	for _, tc := range []struct{ n, dstOff, srcOff int }{
		{0, 0, 0}, {1, 0, 0}, {StreamMin - 1, 3, 1}, {StreamMin, 0, 0}, {StreamMin + 63, 5, 9},
		{1 << 20, 1, 0}, {1<<20 + 100, 15, 7}, {300 << 10, 8, 8},
	} {
		t.Run(fmt.Sprintf("%d@%d<-%d", tc.n, tc.dstOff, tc.srcOff), func(t *testing.T) {
			dst := make([]byte, tc.n+tc.dstOff+64)
			for i := range dst {
				dst[i] = 0xEE
			}
			Stream(dst[tc.dstOff:tc.dstOff+tc.n], src[tc.srcOff:tc.srcOff+tc.n])
			require.Equal(t, src[tc.srcOff:tc.srcOff+tc.n], dst[tc.dstOff:tc.dstOff+tc.n])
			for i, b := range append(dst[:tc.dstOff:tc.dstOff], dst[tc.dstOff+tc.n:]...) {
				require.Equal(t, byte(0xEE), b, "byte %d outside the destination was written", i)
			}
		})
	}
}

func BenchmarkStream(b *testing.B) {
	for _, n := range []int{256 << 10, 4 << 20, 64 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		copy(dst, src)
		b.Run(fmt.Sprintf("stream/%dK", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				Stream(dst, src)
			}
		})
		b.Run(fmt.Sprintf("copy/%dK", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}
