package host

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// The data-movement collectives move bytes, so one element size per test
// suffices; patterns differ by rank and position.

func TestBroadcast(t *testing.T) {
	dt := sdk.Float32
	for _, m := range modes {
		for _, n := range rankCounts {
			for _, count := range elemCounts {
				for root := 0; root < n; root++ {
					if count > 60000 && root != 0 && root != n-1 {
						continue
					}
					inPlace := (root+count+n)%2 == 0
					t.Run(fmt.Sprintf("%s/n=%d/count=%d/root=%d/inplace=%v", m.name, n, count, root, inPlace), func(t *testing.T) {
						bytes := count * dt.Size()
						want := pattern(root, 1, bytes)
						got := make([][]byte, n)
						errs := runRanks(t, n, m.opts, func(e *Engine) error {
							r := e.Rank()
							var send []byte
							recv := garbage(bytes)
							if r == root {
								send = pattern(root, 1, bytes)
								if inPlace {
									recv = send
								}
							}
							got[r] = recv
							return e.Broadcast(send, recv, count, dt, root)
						})
						requireNoErrors(t, errs)
						for r := range got {
							requireElems(t, dt, want, got[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

func TestAllGather(t *testing.T) {
	dt := sdk.Int32
	for _, m := range modes {
		for _, n := range rankCounts {
			for _, count := range elemCounts {
				if count > 60000 && n > 4 {
					count = 8<<10 + 13
				}
				for _, inPlace := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/n=%d/count=%d/inplace=%v", m.name, n, count, inPlace), func(t *testing.T) {
						bytes := count * dt.Size()
						var want []byte
						for r := 0; r < n; r++ {
							want = append(want, pattern(r, 2, bytes)...)
						}
						got := make([][]byte, n)
						errs := runRanks(t, n, m.opts, func(e *Engine) error {
							r := e.Rank()
							recv := garbage(n * bytes)
							send := pattern(r, 2, bytes)
							if inPlace {
								copy(recv[r*bytes:], send)
								send = recv[r*bytes : (r+1)*bytes]
							}
							got[r] = recv
							return e.AllGather(send, recv, count, dt)
						})
						requireNoErrors(t, errs)
						for r := range got {
							requireElems(t, dt, want, got[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

func TestGather(t *testing.T) {
	dt := sdk.Float16
	for _, n := range rankCounts {
		for _, count := range []int{0, 1, 3, 1000, 64<<10 + 13} {
			for root := 0; root < n; root++ {
				if count > 60000 && root != n/2 {
					continue
				}
				inPlace := (root+n)%2 == 0
				t.Run(fmt.Sprintf("n=%d/count=%d/root=%d/inplace=%v", n, count, root, inPlace), func(t *testing.T) {
					bytes := count * dt.Size()
					var want []byte
					for r := 0; r < n; r++ {
						want = append(want, pattern(r, 3, bytes)...)
					}
					var got []byte
					errs := runRanks(t, n, nil, func(e *Engine) error {
						r := e.Rank()
						send := pattern(r, 3, bytes)
						var recv []byte
						if r == root {
							recv = garbage(n * bytes)
							if inPlace {
								copy(recv[r*bytes:], send)
								send = recv[r*bytes : (r+1)*bytes]
							}
							got = recv
						}
						return e.Gather(send, recv, count, dt, root)
					})
					requireNoErrors(t, errs)
					requireElems(t, dt, want, got, "root %d", root)
				})
			}
		}
	}
}

func TestScatter(t *testing.T) {
	dt := sdk.Uint8
	for _, n := range rankCounts {
		for _, count := range []int{0, 1, 3, 1000, 64<<10 + 13} {
			for root := 0; root < n; root++ {
				if count > 60000 && root != n/2 {
					continue
				}
				inPlace := (root+n)%2 == 1
				t.Run(fmt.Sprintf("n=%d/count=%d/root=%d/inplace=%v", n, count, root, inPlace), func(t *testing.T) {
					bytes := count * dt.Size()
					var all []byte
					for r := 0; r < n; r++ {
						all = append(all, pattern(r, 4, bytes)...)
					}
					got := make([][]byte, n)
					errs := runRanks(t, n, nil, func(e *Engine) error {
						r := e.Rank()
						var send []byte
						recv := garbage(bytes)
						if r == root {
							send = append([]byte(nil), all...)
							if inPlace {
								recv = send[r*bytes : (r+1)*bytes]
							}
						}
						got[r] = recv
						return e.Scatter(send, recv, count, dt, root)
					})
					requireNoErrors(t, errs)
					for r := range got {
						requireElems(t, dt, pattern(r, 4, bytes), got[r], "rank %d", r)
					}
				})
			}
		}
	}
}

func TestAlltoAll(t *testing.T) {
	dt := sdk.Bfloat16
	for _, n := range rankCounts {
		for _, count := range []int{0, 1, 3, 1000, 16<<10 + 13} {
			for _, m := range modes[:2] { // the chunk and small-message options change nothing
				// in place on every rank, on none, or on the even ranks
				// only (both kinds must exchange alike)
				for _, placed := range []string{"none", "all", "even"} {
					t.Run(fmt.Sprintf("n=%d/count=%d/%s/inplace=%s", n, count, m.name, placed), func(t *testing.T) {
						bytes := count * dt.Size()
						// Block q of rank p's send is pattern(p, 10+q).
						got := make([][]byte, n)
						errs := runRanks(t, n, m.opts, func(e *Engine) error {
							r := e.Rank()
							var send []byte
							for q := 0; q < n; q++ {
								send = append(send, pattern(r, 10+q, bytes)...)
							}
							recv := garbage(n * bytes)
							if placed == "all" || placed == "even" && r%2 == 0 {
								recv = send
							}
							got[r] = recv
							return e.AlltoAll(send, recv, count, dt)
						})
						requireNoErrors(t, errs)
						for r := range got {
							var want []byte
							for p := 0; p < n; p++ {
								want = append(want, pattern(p, 10+r, bytes)...)
							}
							requireElems(t, dt, want, got[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

// AlltoAllv with uneven counts, zeros included, and displacements that
// leave gaps and reorder the blocks.
func TestAlltoAllv(t *testing.T) {
	dt := sdk.Int64
	size := dt.Size()
	// count[p][q]: elements rank p sends to rank q.
	count := func(p, q int) int { return (p*3 + q*5) % 4 * (1 + (p+q)%3) }
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, sendInPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/overlapping=%v", n, sendInPlace), func(t *testing.T) {
				got := make([][]byte, n)
				rdisplsOf := make([][]int, n)
				errs := runRanks(t, n, nil, func(e *Engine) error {
					r := e.Rank()
					sendcounts, sdispls := make([]int, n), make([]int, n)
					recvcounts, rdispls := make([]int, n), make([]int, n)
					// Send blocks in reverse rank order with a gap of one
					// element between them.
					off := 0
					for q := n - 1; q >= 0; q-- {
						sendcounts[q], sdispls[q] = count(r, q), off
						off += count(r, q) + 1
					}
					send := garbage(off * size)
					for q := 0; q < n; q++ {
						copy(send[sdispls[q]*size:], pattern(r, 20+q, sendcounts[q]*size))
					}
					roff := 2
					for p := 0; p < n; p++ {
						recvcounts[p], rdispls[p] = count(p, r), roff
						roff += count(p, r) + 2
					}
					recv := garbage(roff * size)
					if sendInPlace && len(send) <= len(recv) {
						// Put the send data in recv's own memory: AlltoAllv must
						// copy it aside before receiving over it.
						copy(recv, send)
						send = recv[:len(send)]
					}
					got[r], rdisplsOf[r] = recv, rdispls
					return e.AlltoAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, dt)
				})
				requireNoErrors(t, errs)
				for r := 0; r < n; r++ {
					for p := 0; p < n; p++ {
						c := count(p, r)
						d := rdisplsOf[r][p]
						requireElems(t, dt, pattern(p, 20+r, c*size), got[r][d*size:(d+c)*size], "rank %d block from %d", r, p)
					}
				}
			})
		}
	}
}

// In-place AlltoAllv whose data from each peer lands only over the data
// for that peer swaps pairwise (swapInPlace); its ranks must exchange
// alike with ranks that run the same layout out of place.
func TestAlltoAllvSwaps(t *testing.T) {
	dt := sdk.Int32
	size := dt.Size()
	// count(p, q): elements rank p sends to rank q.
	count := func(p, q int) int { return (p + 2*q + 1) % 3 * (7 + p*q) }
	type layout func(r, n int) (sc, sd, rc, rd []int, elems int)
	layouts := map[string]layout{
		// MPI_IN_PLACE's: one layout both ways (count(r,q) = count(q,r)
		// taken as their sum), regions reversed with gaps.
		"one layout": func(r, n int) (sc, sd, rc, rd []int, elems int) {
			c, d := make([]int, n), make([]int, n)
			off := 1
			for q := n - 1; q >= 0; q-- {
				c[q], d[q] = count(r, q)+count(q, r), off
				off += c[q] + 1
			}
			return c, d, slices.Clone(c), slices.Clone(d), off
		},
		// FlagCX's tests': a slot per peer holds what goes to it and what
		// comes from it, each from the slot's start.
		"slots": func(r, n int) (sc, sd, rc, rd []int, elems int) {
			const slot = 48
			sc, sd, rc, rd = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
			for q := 0; q < n; q++ {
				sc[q], rc[q], sd[q], rd[q] = count(r, q), count(q, r), q*slot, q*slot
			}
			return sc, sd, rc, rd, n * slot
		},
		// The same slots with the arriving data one element in: this
		// rank's own data moves too.
		"slots, arriving one in": func(r, n int) (sc, sd, rc, rd []int, elems int) {
			const slot = 48
			sc, sd, rc, rd = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
			for q := 0; q < n; q++ {
				sc[q], rc[q], sd[q], rd[q] = count(r, q), count(q, r), q*slot, q*slot+1
			}
			return sc, sd, rc, rd, n * slot
		},
	}
	for lname, lay := range layouts {
		for _, n := range []int{2, 3, 5} {
			for _, placed := range []string{"all", "even"} {
				t.Run(fmt.Sprintf("%s/n=%d/inplace=%s", lname, n, placed), func(t *testing.T) {
					got := make([][]byte, n)
					rdispls := make([][]int, n)
					errs := runRanks(t, n, nil, func(e *Engine) error {
						r := e.Rank()
						sc, sd, rc, rd, elems := lay(r, n)
						send := garbage(elems * size)
						for q := 0; q < n; q++ {
							copy(send[sd[q]*size:], pattern(r, 40+q, sc[q]*size))
						}
						recv := garbage(elems * size)
						if placed == "all" || r%2 == 0 {
							recv = send
						}
						got[r], rdispls[r] = recv, rd
						return e.AlltoAllv(send, sc, sd, recv, rc, rd, dt)
					})
					requireNoErrors(t, errs)
					for r := 0; r < n; r++ {
						for p := 0; p < n; p++ {
							sc, _, _, _, _ := lay(p, n)
							c, d := sc[r], rdispls[r][p]
							requireElems(t, dt, pattern(p, 40+r, c*size), got[r][d*size:(d+c)*size], "rank %d region from %d", r, p)
						}
					}
				})
			}
		}
	}
}

// Which in-place AlltoAllv layouts swap pairwise: those where no peer's
// arriving data meets another peer's outgoing data (byte regions).
func TestSwappable(t *testing.T) {
	type regs = [][2]int
	for _, tc := range []struct {
		name         string
		sends, recvs regs
		want         bool
	}{
		{"one layout", regs{{0, 8}, {8, 16}, {16, 24}}, regs{{0, 8}, {8, 16}, {16, 24}}, true},
		{"slots, uneven", regs{{0, 4}, {10, 18}, {20, 20}}, regs{{0, 9}, {10, 12}, {20, 25}}, true},
		{"empty regions anywhere", regs{{5, 5}, {0, 8}}, regs{{3, 3}, {0, 8}}, true},
		{"arriving over another's outgoing", regs{{0, 8}, {8, 16}}, regs{{4, 12}, {12, 16}}, false},
		{"reversed blocks", regs{{8, 16}, {0, 8}}, regs{{0, 8}, {8, 16}}, false},
		{"touching, not meeting", regs{{0, 8}, {8, 16}}, regs{{0, 8}, {8, 16}}, true},
		{"outgoing spans two arrivals", regs{{0, 16}, {16, 16}}, regs{{0, 8}, {8, 16}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, swappable(tc.sends, tc.recvs))
		})
	}
}

func TestGroup(t *testing.T) {
	t.Run("ring, everyone sends before receiving", func(t *testing.T) {
		for _, n := range []int{1, 2, 3, 5} {
			got := make([][]byte, n)
			errs := runRanks(t, n, nil, func(e *Engine) error {
				r := e.Rank()
				out := pattern(r, 30, 100000)
				in := garbage(100000)
				got[r] = in
				return e.Group([]P2P{{Peer: (r + 1) % n, Buf: out}, {Peer: (r + n - 1) % n, Buf: in, Recv: true}})
			})
			requireNoErrors(t, errs)
			for r := range got {
				require.True(t, bytes.Equal(pattern((r+n-1)%n, 30, 100000), got[r]), "n=%d rank %d", n, r)
			}
		}
	})
	t.Run("several to the same and different peers, and to self", func(t *testing.T) {
		const n = 4
		// Every rank sends three messages of different lengths to each
		// rank, itself included, and receives three from each, listing the
		// receives first and in an order interleaved across peers.
		length := func(from, to, k int) int { return 10 + from*7 + to*3 + k*1000 }
		got := make([][][3][]byte, n)
		errs := runRanks(t, n, nil, func(e *Engine) error {
			r := e.Rank()
			var ops []P2P
			in := make([][3][]byte, n)
			for k := 0; k < 3; k++ {
				for p := n - 1; p >= 0; p-- {
					in[p][k] = garbage(length(p, r, k))
					ops = append(ops, P2P{Peer: p, Buf: in[p][k], Recv: true})
				}
			}
			for k := 0; k < 3; k++ {
				for p := 0; p < n; p++ {
					ops = append(ops, P2P{Peer: p, Buf: pattern(r, 40+k+10*p, length(r, p, k))})
				}
			}
			got[r] = in
			return e.Group(ops)
		})
		requireNoErrors(t, errs)
		for r := 0; r < n; r++ {
			for p := 0; p < n; p++ {
				for k := 0; k < 3; k++ {
					require.True(t, bytes.Equal(pattern(p, 40+k+10*r, length(p, r, k)), got[r][p][k]), "rank %d message %d from %d", r, k, p)
				}
			}
		}
	})
	t.Run("empty group and empty messages", func(t *testing.T) {
		errs := runRanks(t, 2, nil, func(e *Engine) error {
			if err := e.Group(nil); err != nil {
				return err
			}
			return e.Group([]P2P{{Peer: 1 - e.Rank()}, {Peer: 1 - e.Rank(), Recv: true}})
		})
		requireNoErrors(t, errs)
	})
}

func TestBarrier(t *testing.T) {
	for _, n := range rankCounts {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// Nobody may leave a barrier before everyone has entered it.
			var mu sync.Mutex
			entered := 0
			errs := runRanks(t, n, nil, func(e *Engine) error {
				for round := 1; round <= 3; round++ {
					mu.Lock()
					entered++
					mu.Unlock()
					if err := e.Barrier(); err != nil {
						return err
					}
					mu.Lock()
					seen := entered
					mu.Unlock()
					if seen < round*n {
						return fmt.Errorf("rank %d left barrier %d after %d entries", e.Rank(), round, seen)
					}
					if err := e.Barrier(); err != nil { // keep rounds apart
						return err
					}
				}
				return nil
			})
			requireNoErrors(t, errs)
		})
	}
}

// Many different collectives back to back on the same engines: messages
// of one call must never be taken by the next.
func TestSequence(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const n = 5
			dt, size := sdk.Int32, 4
			errs := runRanks(t, n, m.opts, func(e *Engine) error {
				r := e.Rank()
				for iter := 0; iter < 3; iter++ {
					count := 100 + 37*iter
					send := redInput(dt, sdk.Sum, r, 0, count)
					recv := make([]byte, count*size)
					if err := e.AllReduce(send, recv, count, dt, sdk.Sum); err != nil {
						return err
					}
					if !bytes.Equal(redExpect(dt, sdk.Sum, n, 0, count), recv) {
						return fmt.Errorf("allreduce %d wrong on rank %d", iter, r)
					}
					if err := e.Broadcast(recv, recv, count, dt, iter%n); err != nil {
						return err
					}
					all := make([]byte, n*count*size)
					if err := e.AllGather(recv, all, count, dt); err != nil {
						return err
					}
					if err := e.Barrier(); err != nil {
						return err
					}
					part := make([]byte, count*size)
					if err := e.ReduceScatter(all, part, count, dt, sdk.Max); err != nil {
						return err
					}
					if !bytes.Equal(redExpect(dt, sdk.Sum, n, 0, count), part) {
						return fmt.Errorf("reducescatter %d wrong on rank %d", iter, r)
					}
					if err := e.Reduce(part, part, count, dt, sdk.Min, (iter+1)%n); err != nil {
						return err
					}
				}
				return nil
			})
			requireNoErrors(t, errs)
		})
	}
}
