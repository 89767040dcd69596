package executor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestResolve: a plan's refs resolve to the call's buffers as core hands
// them over (Buf, converted from core.Buffer) and to the executor's own
// staging and scratch, with the errors a bad plan gets.
func TestResolve(t *testing.T) {
	send, recv, user := []byte("0123456789"), make([]byte, 8), []byte("abcd")
	hostBufs := &Bufs{Send: Buf{Host: send, N: len(send)}, Recv: Buf{Host: recv, N: len(recv)}, User: []Buf{{Host: user, N: len(user)}}}
	devBufs := &Bufs{Send: Buf{Ptr: 0x1000, N: 64, Dev: true}, Recv: Buf{Ptr: 0x2000, N: 64, Dev: true}}
	host := &Executor{stage: make([]byte, 32), hscratch: make([]byte, 16)}
	for _, tc := range []struct {
		name    string
		b       *Bufs
		ref     sched.Ref
		host    []byte  // want: host memory (nil: none)
		ptr     uintptr // want: device memory at ptr (dev)
		dev     bool
		wantErr string
	}{
		{name: "none", b: hostBufs, ref: sched.Ref{Buf: sched.BufNone}},
		{name: "send slice", b: hostBufs, ref: sched.Ref{Buf: sched.BufSend, Off: 2, Len: 3}, host: send[2:5]},
		{name: "user", b: hostBufs, ref: sched.Ref{Buf: sched.BufUser, Idx: 0, Off: 1, Len: 2}, host: user[1:3]},
		{name: "user out of range", b: hostBufs, ref: sched.Ref{Buf: sched.BufUser, Idx: 1, Len: 1}, wantErr: "plan refers to group operation 1 of 1"},
		{name: "beyond", b: hostBufs, ref: sched.Ref{Buf: sched.BufRecv, Off: 4, Len: 8}, wantErr: "beyond its 8 bytes"},
		{name: "stage", b: hostBufs, ref: sched.Ref{Buf: sched.BufStage, Off: 8, Len: 8}, host: host.stage[8:16]},
		{name: "host scratch", b: hostBufs, ref: sched.Ref{Buf: sched.BufScratch, Len: 16}, host: host.hscratch},
		{name: "device slice", b: devBufs, ref: sched.Ref{Buf: sched.BufRecv, Off: 8, Len: 4}, ptr: 0x2008, dev: true},
		{name: "device placeholder", b: devBufs, ref: sched.Ref{Buf: sched.BufSend, Off: 16}, ptr: 0x1010, dev: true},
		{name: "placeholder beyond keeps the base", b: devBufs, ref: sched.Ref{Buf: sched.BufSend, Off: 128}, ptr: 0x1000, dev: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := host.resolve(tc.b, tc.ref)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, sdk.ErrInternalError)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.dev, m.dev)
			require.Equal(t, tc.ptr, m.ptr)
			require.Equal(t, tc.host, m.host)
			if tc.host != nil {
				require.Same(t, &tc.host[0], &m.host[0], "the call's memory itself, not a copy")
			}
		})
	}
}
