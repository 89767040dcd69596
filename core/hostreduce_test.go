package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestHostReduce: core.HostReduce (capi's host scaling of pre-multiplied
// sums) multiplies exactly, in place too, and refuses bad input with
// sdk.ErrInvalidArgument instead of panicking.
func TestHostReduce(t *testing.T) {
	i32 := func(vs ...int32) []byte { return int32Bytes(vs) }
	cases := []struct {
		name      string
		dst, a, b []byte
		dt        sdk.DataType
		op        sdk.RedOp
		want      []byte
	}{
		{"prod", make([]byte, 12), i32(1, -2, 3), i32(5, 5, 5), sdk.Int32, sdk.Prod, i32(5, -10, 15)},
		{"sum", make([]byte, 8), i32(1, 2), i32(10, 20), sdk.Int32, sdk.Sum, i32(11, 22)},
		{"bad type", make([]byte, 4), i32(1), i32(1), sdk.NumDataTypes, sdk.Prod, nil},
		{"bad op", make([]byte, 4), i32(1), i32(1), sdk.Int32, sdk.NumRedOps, nil},
		{"short source", make([]byte, 8), i32(1), i32(1, 2), sdk.Int32, sdk.Prod, nil},
		{"part of an element", make([]byte, 3), i32(1), i32(1), sdk.Int32, sdk.Prod, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := core.HostReduce(tc.dst, tc.a, tc.b, tc.dt, tc.op)
			if tc.want == nil {
				require.ErrorIs(t, err, sdk.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, tc.dst)
		})
	}
	b := i32(3, 4)
	require.NoError(t, core.HostReduce(b, i32(2, 2), b, sdk.Int32, sdk.Prod), "dst may be b")
	require.Equal(t, i32(6, 8), b)
}
