package sdk

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckBufferNames: a buffer too short is named once, whatever name
// the caller gives it (Send's and Recv's is "buffer"), and an AlltoAllv
// region whose end overflows is reported as past the buffer.
func TestCheckBufferNames(t *testing.T) {
	f32 := Call{Coll: AllReduce, Count: 4, DType: Float32}
	gather := Call{Coll: AllGather, Count: 4, DType: Float32}
	huge := Call{Coll: AlltoAllv, DType: Int32, SendCounts: []int{1 << 62}, SDispls: []int{0}}
	for _, tc := range []struct {
		name, which string
		call        Call
		have, need  int
		want        string
	}{
		{"send", "send", f32, 0, 16, "invalid argument: send buffer holds 0 bytes but 4 elements of float32 need 16: pass a buffer of at least 16 bytes or a smaller count"},
		{"recv", "recv", f32, 8, 16, "invalid argument: recv buffer holds 8 bytes but 4 elements of float32 need 16"},
		{"Send's buffer", "buffer", f32, 0, 16, "invalid argument: buffer holds 0 bytes but 4 elements of float32 need 16"},
		{"a name ending in buffer", "staging buffer", f32, 0, 16, "invalid argument: staging buffer holds 0 bytes"},
		{"no name", "", f32, 0, 16, "invalid argument: buffer holds 0 bytes"},
		{"a block per rank", "recv", gather, 15, 48, "recv buffer holds 15 bytes but 3 ranks x 4 elements of float32 need 48"},
		{"AlltoAllv region past the end", "send", huge, 64, 128, "send region of rank 0 (displacement 0 + count 4611686018427387904 elements of 4 bytes) ends past the send buffer's 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call.CheckBuffer(tc.which, tc.have, tc.need, 3)
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "buffer buffer")
		})
	}
}

// TestCheckPlaceNearTheTop: the overlap check compares differences, not
// ends: an end past the top of the address space wraps, and the sum made
// buffers that share bytes look disjoint.
func TestCheckPlaceNearTheTop(t *testing.T) {
	const top = uintptr(math.MaxUint64)
	ar := Call{Coll: AllReduce, Count: 4, DType: Float32}
	ag := Call{Coll: AllGather, Count: 1, DType: Float32}
	for _, tc := range []struct {
		name  string
		call  Call
		rank  int
		send  uintptr
		sendN int
		recv  uintptr
		recvN int
		want  string // "" for no error
	}{
		{"disjoint", ar, 0, 0x1000, 16, 0x2000, 16, ""},
		{"adjacent", ar, 0, 0x1000, 16, 0x1010, 16, ""},
		{"in place", ar, 0, 0x1000, 16, 0x1000, 16, ""},
		{"partial overlap", ar, 0, 0x1000, 16, 0x1004, 16, "overlap without being in place"},
		{"recv's end wraps over send", ar, 0, top - 3, 4, top - 7, 16, "overlap without being in place"},
		{"send's end wraps over recv", ar, 0, top - 7, 16, top - 3, 4, "overlap without being in place"},
		{"in place AllGather near the top", ag, 1, top - 11, 4, top - 15, 16, ""},
		{"misplaced AllGather near the top", ag, 2, top - 11, 4, top - 15, 16, "in place (send == recv[rank*sendcount*size:])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call.CheckPlace(tc.rank, tc.send, tc.sendN, tc.recv, tc.recvN)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
