package host

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// checkAllReduce runs one AllReduce on n ranks and checks every rank.
func checkAllReduce(t *testing.T, n, count int, dt sdk.DataType, op sdk.RedOp, inPlace bool, opts []Option) {
	t.Helper()
	size := dt.Size()
	want := redExpect(dt, op, n, 0, count)
	got := make([][]byte, n)
	errs := runRanks(t, n, opts, func(e *Engine) error {
		r := e.Rank()
		send := redInput(dt, op, r, 0, count)
		recv := send
		if !inPlace {
			recv = garbage(count * size)
		}
		got[r] = recv
		return e.AllReduce(send, recv, count, dt, op)
	})
	requireNoErrors(t, errs)
	for r := range got {
		requireElems(t, dt, want, got[r], "rank %d", r)
	}
}

func TestAllReduceSizes(t *testing.T) {
	for _, m := range modes {
		for _, n := range rankCounts {
			for _, count := range elemCounts {
				for _, inPlace := range []bool{false, true} {
					dt := sdk.Float32
					if count > 60000 && n%2 == 1 {
						dt = sdk.Int8 // a large count in a 1-byte type too
					}
					t.Run(fmt.Sprintf("%s/n=%d/count=%d/inplace=%v", m.name, n, count, inPlace), func(t *testing.T) {
						checkAllReduce(t, n, count, dt, sdk.Sum, inPlace, m.opts)
					})
				}
			}
		}
	}
}

// Every data type and op, through both algorithms, on even, odd and
// non-power-of-two rank counts.
func TestAllReduceTypesOps(t *testing.T) {
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			for _, n := range []int{2, 3, 5, 8} {
				for _, m := range modes {
					t.Run(fmt.Sprintf("%v/%v/n=%d/%s", dt, op, n, m.name), func(t *testing.T) {
						checkAllReduce(t, n, 7, dt, op, n%2 == 0, m.opts)
						checkAllReduce(t, n, 300, dt, op, n%2 == 1, m.opts)
					})
				}
			}
			t.Run(fmt.Sprintf("%v/%v/large", dt, op), func(t *testing.T) {
				checkAllReduce(t, 3, 64<<10+13, dt, op, false, []Option{WithChunk(64 << 10)})
				// Two ranks exchange in several chunks, in place and not.
				checkAllReduce(t, 2, 64<<10+13, dt, op, true, []Option{WithChunk(64 << 10)})
				checkAllReduce(t, 2, 64<<10+13, dt, op, false, []Option{WithChunk(64 << 10)})
			})
		}
	}
}

func checkReduce(t *testing.T, n, count int, dt sdk.DataType, op sdk.RedOp, root int, inPlace bool, opts []Option) {
	t.Helper()
	size := dt.Size()
	want := redExpect(dt, op, n, 0, count)
	var got []byte
	sends := make([][]byte, n)
	errs := runRanks(t, n, opts, func(e *Engine) error {
		r := e.Rank()
		send := redInput(dt, op, r, 0, count)
		sends[r] = send
		var recv []byte
		switch {
		case inPlace:
			recv = send
		case r == root:
			recv = garbage(count * size)
		}
		if r == root {
			got = recv
		}
		return e.Reduce(send, recv, count, dt, op, root)
	})
	requireNoErrors(t, errs)
	requireElems(t, dt, want, got, "root %d", root)
	for r := range sends {
		if r != root {
			requireElems(t, dt, redInput(dt, op, r, 0, count), sends[r], "rank %d's send buffer must not change", r)
		}
	}
}

func TestReduceSizes(t *testing.T) {
	for _, m := range modes {
		for _, n := range rankCounts {
			for _, count := range elemCounts {
				for root := 0; root < n; root++ {
					if count > 60000 && root != 0 && root != n-1 {
						continue
					}
					inPlace := (root+count)%2 == 0
					t.Run(fmt.Sprintf("%s/n=%d/count=%d/root=%d/inplace=%v", m.name, n, count, root, inPlace), func(t *testing.T) {
						checkReduce(t, n, count, sdk.Int32, sdk.Sum, root, inPlace, m.opts)
					})
				}
			}
		}
	}
}

func TestReduceTypesOps(t *testing.T) {
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			for _, n := range []int{3, 4} {
				for _, m := range modes {
					t.Run(fmt.Sprintf("%v/%v/n=%d/%s", dt, op, n, m.name), func(t *testing.T) {
						for root := 0; root < n; root++ {
							checkReduce(t, n, 7, dt, op, root, root%2 == 0, m.opts)
							checkReduce(t, n, 300, dt, op, root, root%2 == 1, m.opts)
						}
					})
				}
			}
		}
	}
}

func checkReduceScatter(t *testing.T, n, count int, dt sdk.DataType, op sdk.RedOp, inPlace bool, opts []Option) {
	t.Helper()
	size := dt.Size()
	got := make([][]byte, n)
	errs := runRanks(t, n, opts, func(e *Engine) error {
		r := e.Rank()
		send := redInput(dt, op, r, 0, n*count)
		recv := send[r*count*size:]
		if !inPlace {
			recv = garbage(count * size)
		}
		got[r] = recv[:count*size]
		return e.ReduceScatter(send, recv, count, dt, op)
	})
	requireNoErrors(t, errs)
	for r := range got {
		requireElems(t, dt, redExpect(dt, op, n, r*count, count), got[r], "rank %d", r)
	}
}

func TestReduceScatterSizes(t *testing.T) {
	for _, m := range modes {
		for _, n := range rankCounts {
			for _, count := range elemCounts {
				if count > 60000 && n > 4 {
					count = 8<<10 + 13 // n*count stays moderate
				}
				for _, inPlace := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/n=%d/count=%d/inplace=%v", m.name, n, count, inPlace), func(t *testing.T) {
						checkReduceScatter(t, n, count, sdk.Float64, sdk.Sum, inPlace, m.opts)
					})
				}
			}
		}
	}
}

func TestReduceScatterTypesOps(t *testing.T) {
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			for _, n := range []int{2, 3, 5} {
				for _, m := range modes {
					t.Run(fmt.Sprintf("%v/%v/n=%d/%s", dt, op, n, m.name), func(t *testing.T) {
						checkReduceScatter(t, n, 5, dt, op, n%2 == 0, m.opts)
						checkReduceScatter(t, n, 150, dt, op, n%2 == 1, m.opts)
					})
				}
			}
		}
	}
}

// Buffers at odd offsets (misaligned for every multi-byte type) give the
// same results.
func TestMisalignedBuffers(t *testing.T) {
	for _, dt := range []sdk.DataType{sdk.Float16, sdk.Int32, sdk.Float64} {
		for _, m := range modes {
			t.Run(fmt.Sprintf("%v/%s", dt, m.name), func(t *testing.T) {
				const n, count = 3, 1001
				size := dt.Size()
				want := redExpect(dt, sdk.Sum, n, 0, count)
				got := make([][]byte, n)
				errs := runRanks(t, n, m.opts, func(e *Engine) error {
					r := e.Rank()
					send := append(make([]byte, 1, count*size+1), redInput(dt, sdk.Sum, r, 0, count)...)[1:]
					recv := make([]byte, count*size+3)[3:]
					got[r] = recv
					return e.AllReduce(send, recv, count, dt, sdk.Sum)
				})
				requireNoErrors(t, errs)
				for r := range got {
					requireElems(t, dt, want, got[r], "rank %d", r)
				}
			})
		}
	}
}

// Ranks on several hosts (WithHosts) reduce within each host, then across
// hosts with every local rank driving its own share: exact for every
// layout, in place or not, through both the reduce-scatter path (counts
// the hosts' ranks divide) and the whole-buffer path; layouts the
// hierarchy does not take (uneven hosts, one rank per host) stay flat.
func TestAllReduceAcrossHosts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hostOf []int
	}{
		{"2x2", []int{0, 0, 1, 1}},
		{"2x2 interleaved", []int{5, 9, 5, 9}},
		{"3x2", []int{0, 1, 2, 0, 1, 2}},
		{"2x3", []int{0, 0, 0, 1, 1, 1}},
		{"uneven", []int{0, 0, 1}},
		{"one rank per host", []int{0, 1, 2}},
	} {
		for _, count := range []int{1, 7, 1000, 64 << 10, 64<<10 + 13} {
			for _, op := range []sdk.RedOp{sdk.Sum, sdk.Avg, sdk.Max} {
				for _, inPlace := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/count=%d/%v/inplace=%v", tc.name, count, op, inPlace), func(t *testing.T) {
						checkAllReduce(t, len(tc.hostOf), count, sdk.Float32, op, inPlace, []Option{WithHosts(tc.hostOf), WithChunk(64 << 10)})
					})
				}
			}
		}
	}
	e := New(NewLocalPeers(4)[0], WithHosts([]int{0, 0, 1, 1}))
	require.NotNil(t, e.hier(), "2 hosts of 2 ranks")
	require.Equal(t, 2, e.hier().perHost)
	require.Nil(t, New(NewLocalPeers(3)[0], WithHosts([]int{0, 0, 1})).hier(), "uneven hosts stay flat")
}
