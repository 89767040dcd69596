package cmem

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestStrings(t *testing.T) {
	c := []byte("plugin\x00rest")
	require.Equal(t, "plugin", GoString(uintptr(unsafe.Pointer(&c[0]))))
	require.Equal(t, "", GoString(0))
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{[]byte("name\x00\x00junk"), "name"},
		{[]byte("\x00"), ""},
		{[]byte("full"), "full"},
		{nil, ""},
	} {
		require.Equal(t, tc.want, String(tc.in))
	}
}
