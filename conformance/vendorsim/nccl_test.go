package vendorsim

import (
	"fmt"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------
// In-process NCCL tests: single-rank communicators, and one thread driving
// two ranks through groups.
// ---------------------------------------------------------------------

func TestNCCLVersionAndErrorStrings(t *testing.T) {
	n := testEmulators(t).nccl
	var v int32
	require.Equal(t, int32(ncclSuccess), n.GetVersion(&v))
	require.Equal(t, int32(22809), v)
	require.Equal(t, "no error", n.GetErrorString(ncclSuccess))
	require.Contains(t, n.GetErrorString(ncclInvalidUsage), "invalid usage")
	require.Contains(t, n.GetErrorString(ncclRemoteError), "remote process exited")
	require.Equal(t, "unknown result code", n.GetErrorString(99))
	require.Equal(t, int32(ncclInvalidUsage), n.GroupEnd(), "ncclGroupEnd without ncclGroupStart")
	require.Contains(t, n.GetLastError(0), "without a matching group start")
}

func TestNCCLUniqueIDs(t *testing.T) {
	n := testEmulators(t).nccl
	var a, b uniqueID
	require.Equal(t, int32(ncclSuccess), n.GetUniqueID(&a))
	require.Equal(t, int32(ncclSuccess), n.GetUniqueID(&b))
	require.NotEqual(t, a, b)

	var comm uintptr = 0x1234
	var zero uniqueID
	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRank(&comm, 2, zero, 0), "an id never filled in")
	require.Contains(t, n.GetLastError(0), "bad magic")
	require.Zero(t, comm)

	garbage := a
	copy(garbage.Internal[8:], "bkcl\x00") // another vendor's tag
	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRank(&comm, 2, garbage, 0))
	require.Contains(t, n.GetLastError(0), "another vendor")
	garbage = a
	copy(garbage.Internal[24:], "/etc/passwd\x00")
	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRank(&comm, 2, garbage, 0))
	require.Contains(t, n.GetLastError(0), "corrupt")

	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRank(&comm, 2, a, 2), "rank out of range")
	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRank(&comm, 0, a, 0), "nranks 0")
	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRank(&comm, -1, a, 0))

	// NCCL_CONFIG_INITIALIZER's magic is required
	cfg := struct {
		Size     uintptr
		Magic    uint32
		Version  uint32
		Blocking int32
		_        [60]byte
	}{Size: 88, Magic: 0xdeadbeef, Version: 22800, Blocking: 1}
	require.Equal(t, int32(ncclInvalidArgument), n.CommInitRankConfig(&comm, 1, a, 0, unsafe.Pointer(&cfg)))
	require.Contains(t, n.GetLastError(0), "magic")
	cfg.Magic = 0xcafebeef
	require.Equal(t, int32(ncclSuccess), n.CommInitRankConfig(&comm, 1, a, 0, unsafe.Pointer(&cfg)))
	require.Equal(t, int32(ncclSuccess), n.CommDestroy(comm))
}

// A one-rank communicator: every collective is a copy; arguments are
// checked like NCCL's.
func TestNCCLSingleRankAndArgumentChecks(t *testing.T) {
	e := testEmulators(t)
	n, c := e.nccl, e.cuda
	require.Equal(t, int32(cudaSuccess), c.SetDevice(0))
	var id uniqueID
	var comm uintptr
	require.Equal(t, int32(ncclSuccess), n.GetUniqueID(&id))
	require.Equal(t, int32(ncclSuccess), n.CommInitRank(&comm, 1, id, 0))
	var v int32
	require.Equal(t, int32(ncclSuccess), n.CommCount(comm, &v))
	require.Equal(t, int32(1), v)
	require.Equal(t, int32(ncclSuccess), n.CommUserRank(comm, &v))
	require.Equal(t, int32(0), v)
	require.Equal(t, int32(ncclSuccess), n.CommCuDevice(comm, &v))
	require.Equal(t, int32(0), v)
	require.Equal(t, int32(ncclSuccess), n.CommGetAsyncError(comm, &v))
	require.Equal(t, int32(ncclSuccess), v)

	in := encodeN(dtFloat32, 10, func(i int) float64 { return float64(i) })
	send, err := e.upload(in)
	require.NoError(t, err)
	recv, err := e.malloc(40)
	require.NoError(t, err)
	require.Equal(t, int32(ncclSuccess), n.AllReduce(send.p, recv.p, 10, dtFloat32, opAvg, comm, 0))
	got, err := e.download(recv)
	require.NoError(t, err)
	require.Equal(t, in, got)
	require.Equal(t, int32(ncclSuccess), n.AlltoAll(send.p, recv.p, 10, dtFloat32, comm, 0))

	host := make([]byte, 40)
	var other unsafe.Pointer
	require.Equal(t, int32(cudaSuccess), c.SetDevice(1))
	require.Equal(t, int32(cudaSuccess), c.Malloc(&other, 40))
	var otherStream uintptr
	require.Equal(t, int32(cudaSuccess), c.StreamCreateWithFlags(&otherStream, 0))
	require.Equal(t, int32(cudaSuccess), c.SetDevice(0))
	defer c.Free(other)
	defer c.StreamDestroy(otherStream)

	checks := []struct {
		name string
		rc   int32
		want int32
		text string
	}{
		{"dtype 10 (fp8)", n.AllReduce(send.p, recv.p, 10, 10, opSum, comm, 0), ncclInvalidArgument, "invalid data type"},
		{"op 5", n.AllReduce(send.p, recv.p, 10, dtFloat32, 5, comm, 0), ncclInvalidArgument, "invalid reduction op"},
		{"root 1 of 1", n.Broadcast(send.p, recv.p, 10, dtFloat32, 1, comm, 0), ncclInvalidArgument, "invalid root"},
		{"host memory", n.AllReduce(unsafe.Pointer(&host[0]), recv.p, 10, dtFloat32, opSum, comm, 0), ncclInvalidArgument, "neither device memory"},
		{"overrun", n.AllReduce(send.p, recv.p, 11, dtFloat32, opSum, comm, 0), ncclInvalidArgument, "needs 44 bytes"},
		{"other device", n.AllReduce(other, recv.p, 10, dtFloat32, opSum, comm, 0), ncclInvalidArgument, "device 1"},
		{"NULL with count", n.AllReduce(nil, recv.p, 10, dtFloat32, opSum, comm, 0), ncclInvalidArgument, "NULL"},
		{"bad stream", n.AllReduce(send.p, recv.p, 10, dtFloat32, opSum, comm, 0xbad), ncclUnhandledCuda, "not a live cudaStream_t"},
		{"stream of another device", n.AllReduce(send.p, recv.p, 10, dtFloat32, opSum, comm, otherStream), ncclUnhandledCuda, "device 1"},
		{"bad comm", n.AllReduce(send.p, recv.p, 10, dtFloat32, opSum, 0xbad, 0), ncclInvalidArgument, "invalid communicator"},
		{"peer 1 of 1", n.Send(send.p, 10, dtFloat32, 1, comm, 0), ncclInvalidArgument, "invalid peer"},
		{"count 0 NULL", n.AllReduce(nil, nil, 0, dtFloat32, opSum, comm, 0), ncclSuccess, ""},
	}
	for _, tc := range checks {
		require.Equal(t, tc.want, tc.rc, tc.name)
	}
	// The texts: re-run each failing call to read its own last error.
	for _, tc := range []struct {
		text string
		call func() int32
	}{
		{"invalid data type", func() int32 { return n.AllReduce(send.p, recv.p, 10, 10, opSum, comm, 0) }},
		{"neither device memory", func() int32 {
			return n.AllReduce(unsafe.Pointer(&host[0]), recv.p, 10, dtFloat32, opSum, comm, 0)
		}},
		{"needs 44 bytes", func() int32 { return n.AllReduce(send.p, recv.p, 11, dtFloat32, opSum, comm, 0) }},
		{"not a live cudaStream_t", func() int32 { return n.AllReduce(send.p, recv.p, 10, dtFloat32, opSum, comm, 0xbad) }},
	} {
		require.NotEqual(t, int32(ncclSuccess), tc.call())
		require.Contains(t, n.GetLastError(comm), tc.text)
	}
	// argument errors do not break the communicator
	require.Equal(t, int32(ncclSuccess), n.CommGetAsyncError(comm, &v))
	require.Equal(t, int32(ncclSuccess), v)
	require.Equal(t, int32(ncclSuccess), n.AllReduce(send.p, recv.p, 10, dtFloat32, opSum, comm, 0))

	require.Equal(t, int32(ncclSuccess), n.CommFinalize(comm))
	require.Equal(t, int32(ncclInvalidUsage), n.AllReduce(send.p, recv.p, 10, dtFloat32, opSum, comm, 0), "after finalize")
	require.Equal(t, int32(ncclSuccess), n.CommDestroy(comm))
	require.Equal(t, int32(ncclInvalidArgument), n.CommCount(comm, &v), "destroyed communicator")
	require.Equal(t, int32(ncclSuccess), n.CommDestroy(0), "ncclCommDestroy(NULL)")
	require.Equal(t, int32(ncclSuccess), n.CommAbort(0))
	c.Free(send.p)
	c.Free(recv.p)
}

// One thread drives both ranks of a communicator, which only works because
// grouped operations progress together (as with ncclCommInitAll).
func TestNCCLOneThreadTwoRanks(t *testing.T) {
	e := testEmulators(t)
	n := e.nccl
	var id uniqueID
	require.Equal(t, int32(ncclSuccess), n.GetUniqueID(&id))
	comms := make([]uintptr, 2)
	require.Equal(t, int32(ncclSuccess), n.GroupStart())
	for r := range comms {
		require.Equal(t, int32(cudaSuccess), e.cuda.SetDevice(int32(r)))
		require.Equal(t, int32(ncclSuccess), n.CommInitRank(&comms[r], 2, id, int32(r)))
	}
	require.Equal(t, int32(ncclSuccess), n.GroupEnd())

	// Operations of one group run concurrently (as in NCCL), so the send
	// uses its own buffer rather than the one being reduced.
	input := func(r int) []byte { return encodeN(dtInt64, 5, func(i int) float64 { return float64(10*r + i) }) }
	bufs, sends, recvs := make([]devBuf, 2), make([]devBuf, 2), make([]devBuf, 2)
	for r := range comms {
		require.Equal(t, int32(cudaSuccess), e.cuda.SetDevice(int32(r)))
		var err error
		bufs[r], err = e.upload(input(r))
		require.NoError(t, err)
		sends[r], err = e.upload(input(r))
		require.NoError(t, err)
		recvs[r], err = e.malloc(40)
		require.NoError(t, err)
	}
	require.Equal(t, int32(ncclSuccess), n.GroupStart())
	for r := range comms {
		require.Equal(t, int32(ncclSuccess), n.AllReduce(bufs[r].p, bufs[r].p, 5, dtInt64, opSum, comms[r], 0))
		require.Equal(t, int32(ncclSuccess), n.Send(sends[r].p, 5, dtInt64, int32(1-r), comms[r], 0))
		require.Equal(t, int32(ncclSuccess), n.Recv(recvs[r].p, 5, dtInt64, int32(1-r), comms[r], 0))
	}
	require.Equal(t, int32(ncclSuccess), n.GroupEnd())
	want := encodeN(dtInt64, 5, func(i int) float64 { return float64(10 + 2*i) })
	for r := range comms {
		got, err := e.download(bufs[r])
		require.NoError(t, err)
		require.Equal(t, want, got, "rank %d allreduce", r)
		got, err = e.download(recvs[r])
		require.NoError(t, err)
		require.Equal(t, input(1-r), got, "rank %d received the peer's buffer", r)
		require.Equal(t, int32(ncclSuccess), n.CommDestroy(comms[r]))
		for _, b := range []devBuf{bufs[r], sends[r], recvs[r]} {
			e.cuda.Free(b.p)
		}
	}

	// Init and collectives queued in one group: the collectives wait for
	// the join (their chunking needs the agreed slot size).
	require.Equal(t, int32(ncclSuccess), n.GetUniqueID(&id))
	require.Equal(t, int32(ncclSuccess), n.GroupStart())
	for r := range comms {
		require.Equal(t, int32(cudaSuccess), e.cuda.SetDevice(int32(r)))
		require.Equal(t, int32(ncclSuccess), n.CommInitRank(&comms[r], 2, id, int32(r)))
		var err error
		bufs[r], err = e.upload(input(r))
		require.NoError(t, err)
		require.Equal(t, int32(ncclSuccess), n.AllReduce(bufs[r].p, bufs[r].p, 5, dtInt64, opSum, comms[r], 0))
	}
	require.Equal(t, int32(ncclSuccess), n.GroupEnd())
	for r := range comms {
		got, err := e.download(bufs[r])
		require.NoError(t, err)
		require.Equal(t, want, got, "rank %d allreduce queued with its init", r)
		require.Equal(t, int32(ncclSuccess), n.CommDestroy(comms[r]))
		e.cuda.Free(bufs[r].p)
	}
	require.Equal(t, int32(cudaSuccess), e.cuda.SetDevice(0))
}

// ---------------------------------------------------------------------
// Multi-process tests.
// ---------------------------------------------------------------------

// Small slots force collectives through many chunk rounds.
var chunkyEnv = []string{EnvSlotBytes + "=256", EnvTimeout + "=30"}

func TestAllReduceAllTypesAndOps(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			checkAllReduce(t, runRanks(t, "allreduce", n, chunkyEnv, nil, nil))
		})
	}
}

// checkAllReduce asserts the reports of scenario "allreduce".
func checkAllReduce(t *testing.T, runs []rankRun) {
	n := len(runs)
	for dt := 0; dt < numDtypes; dt++ {
		for op := 0; op < numOps; op++ {
			want := encodeN(dt, matrixCount, func(i int) float64 {
				vals := make([]float64, n)
				for r := range vals {
					vals[r] = inputValue(dt, op, r, n, i)
				}
				return reduceExpect(dt, op, vals)
			})
			for r, run := range runs {
				b := run.out.Buffers
				require.Equal(t, want, b[fmt.Sprintf("oop/%d/%d", dt, op)], "rank %d %s %s", r, dtypeName[dt], opName[op])
				require.Equal(t, want, b[fmt.Sprintf("ip/%d/%d", dt, op)], "rank %d %s %s in place", r, dtypeName[dt], opName[op])
			}
		}
	}
	for r, run := range runs {
		require.Equal(t, ncclSuccess, run.out.Codes["count0"], "rank %d", r)
		if n == 2 {
			// 1 + 2^-11 ties to 1; (1+2^-10) + 2^-11 ties to 1+2^-9.
			require.Equal(t, []byte{0x00, 0x3C, 0x02, 0x3C}, run.out.Buffers["round/f16"], "rank %d", r)
			require.Equal(t, []byte{0x80, 0x3F, 0x82, 0x3F}, run.out.Buffers["round/bf16"], "rank %d", r)
		}
	}
}

func TestReduceAndBroadcastEveryRoot(t *testing.T) {
	checkRooted(t, runRanks(t, "rooted", 3, chunkyEnv, nil, nil))
}

// checkRooted asserts the reports of scenario "rooted".
func checkRooted(t *testing.T, runs []rankRun) {
	n := len(runs)
	untouched := make([]byte, 0, rootedCount*8)
	for root := 0; root < n; root++ {
		for dt := 0; dt < numDtypes; dt++ {
			es := dtypeSize[dt]
			for op := 0; op < numOps; op++ {
				want := encodeN(dt, rootedCount, func(i int) float64 {
					vals := make([]float64, n)
					for r := range vals {
						vals[r] = inputValue(dt, op, r, n, i)
					}
					return reduceExpect(dt, op, vals)
				})
				for r, run := range runs {
					got := run.out.Buffers[fmt.Sprintf("reduce/%d/%d/%d", root, dt, op)]
					if r == root {
						require.Equal(t, want, got, "root %d %s %s", root, dtypeName[dt], opName[op])
					} else {
						untouched = untouched[:0]
						for i := 0; i < rootedCount*es; i++ {
							untouched = append(untouched, 0x5A)
						}
						require.Equal(t, untouched, got, "non-root %d must not write recvbuff", r)
					}
				}
			}
			sum := encodeN(dt, rootedCount, func(i int) float64 {
				vals := make([]float64, n)
				for r := range vals {
					vals[r] = inputValue(dt, opSum, r, n, i)
				}
				return reduceExpect(dt, opSum, vals)
			})
			bcast := encodeN(dt, rootedCount, func(i int) float64 { return a2aValue(root, 0, i) })
			for r, run := range runs {
				own := encodeN(dt, rootedCount, func(i int) float64 { return inputValue(dt, opSum, r, n, i) })
				ip := run.out.Buffers[fmt.Sprintf("reduce-ip/%d/%d", root, dt)]
				if r == root {
					require.Equal(t, sum, ip, "in-place reduce at root %d %s", root, dtypeName[dt])
				} else {
					require.Equal(t, own, ip, "in-place reduce: non-root %d keeps its input", r)
				}
				require.Equal(t, bcast, run.out.Buffers[fmt.Sprintf("bcast/%d/%d", root, dt)], "broadcast root %d rank %d %s", root, r, dtypeName[dt])
				require.Equal(t, bcast, run.out.Buffers[fmt.Sprintf("bcast-ip/%d/%d", root, dt)], "in-place broadcast root %d rank %d", root, r)
			}
		}
	}
}

func TestAllGatherReduceScatterAlltoAll(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			checkGather(t, runRanks(t, "gather", n, chunkyEnv, nil, nil))
		})
	}
}

// checkGather asserts the reports of scenario "gather".
func checkGather(t *testing.T, runs []rankRun) {
	n := len(runs)
	for dt := 0; dt < numDtypes; dt++ {
		es := dtypeSize[dt]
		ag := encodeN(dt, n*gatherCount, func(i int) float64 { return a2aValue(i/gatherCount, 0, i%gatherCount) })
		for me, run := range runs {
			b := run.out.Buffers
			require.Equal(t, ag, b[fmt.Sprintf("ag/%d", dt)], "allgather rank %d %s", me, dtypeName[dt])
			require.Equal(t, ag, b[fmt.Sprintf("ag-ip/%d", dt)], "in-place allgather rank %d %s", me, dtypeName[dt])
			for op := 0; op < numOps; op++ {
				want := encodeN(dt, gatherCount, func(j int) float64 {
					vals := make([]float64, n)
					for r := range vals {
						vals[r] = inputValue(dt, op, r, n, me*gatherCount+j)
					}
					return reduceExpect(dt, op, vals)
				})
				require.Equal(t, want, b[fmt.Sprintf("rs/%d/%d", dt, op)], "reducescatter rank %d %s %s", me, dtypeName[dt], opName[op])
				ip := b[fmt.Sprintf("rs-ip/%d/%d", dt, op)]
				require.Equal(t, want, ip[me*gatherCount*es:(me+1)*gatherCount*es], "in-place reducescatter rank %d %s %s", me, dtypeName[dt], opName[op])
			}
			a2a := encodeN(dt, n*gatherCount, func(i int) float64 { return a2aValue(i/gatherCount, me, i%gatherCount) })
			require.Equal(t, a2a, b[fmt.Sprintf("a2a/%d", dt)], "alltoall rank %d %s", me, dtypeName[dt])
			require.Equal(t, a2a, b[fmt.Sprintf("a2a-ip/%d", dt)], "in-place alltoall rank %d %s", me, dtypeName[dt])
		}
	}
}

func TestGroupedSendRecvLargerThanMailbox(t *testing.T) {
	checkP2P(t, runRanks(t, "p2p", 3, []string{EnvMailboxBytes + "=4096", EnvTimeout + "=30"}, nil, nil))
}

// checkP2P asserts the reports of scenario "p2p".
func checkP2P(t *testing.T, runs []rankRun) {
	n := len(runs)
	for me, run := range runs {
		next, prev := (me+1)%n, (me+n-1)%n
		x := run.out.Texts
		require.Equal(t, digest(p2pPattern(prev, me, 0, ringBytes)), x["ring"], "ring rank %d", me)
		require.Equal(t, digest(p2pPattern(prev, me, 1, pairBytes)), x["fromPrev"], "rank %d", me)
		require.Equal(t, digest(p2pPattern(next, me, 1, pairBytes)), x["fromNext"], "rank %d", me)
		require.Equal(t, digest(p2pPattern(prev, me, 2, multiSmall)), x["multi1"], "first message, rank %d", me)
		require.Equal(t, digest(p2pPattern(prev, me, 3, multiLarge)), x["multi2"], "second message, rank %d", me)
		require.Equal(t, digest(p2pPattern(me, me, 4, selfBytes)), x["self"], "self, rank %d", me)
		if partner := me ^ 1; partner < n {
			require.Equal(t, digest(p2pPattern(partner, me, 5, plainBytes)), x["plain"], "ungrouped, rank %d", me)
		}
		require.Equal(t, ncclSuccess, run.out.Codes["send0"])
		require.Equal(t, ncclSuccess, run.out.Codes["recv0"])
	}
}

func TestSendRecvSizeMismatch(t *testing.T) {
	runs := runRanks(t, "p2p-mismatch", 2, []string{EnvTimeout + "=10"}, nil, nil)
	// The send fits the mailbox, so the sender may finish before the
	// receiver looks; the receiver must report the mismatch.
	require.Contains(t, []int{ncclSuccess, ncclInvalidUsage}, runs[0].out.Codes["rc"])
	require.Equal(t, ncclInvalidUsage, runs[1].out.Codes["rc"])
	t.Log(runs[1].out.Texts["err"])
	require.Contains(t, runs[1].out.Texts["err"], "size mismatch")
	require.Contains(t, runs[1].out.Texts["err"], "50 x float32 (200 bytes)")
	require.Contains(t, runs[1].out.Texts["err"], "100 x float32 (400 bytes)")
}

func TestCollectiveMismatchIsInvalidUsage(t *testing.T) {
	runs := runRanks(t, "coll-mismatch", 2, []string{EnvTimeout + "=10"}, nil, nil)
	for r, run := range runs {
		require.Equal(t, ncclInvalidUsage, run.out.Codes["rc"], "rank %d", r)
		require.Contains(t, run.out.Texts["err"], "does not match", "rank %d", r)
		require.Contains(t, run.out.Texts["err"], "count=10", "rank %d", r)
		require.Contains(t, run.out.Texts["err"], "count=12", "rank %d", r)
		require.Equal(t, ncclInvalidUsage, run.out.Codes["async"], "rank %d", r)
		require.Equal(t, ncclInvalidUsage, run.out.Codes["after"], "rank %d", r)
	}
}

func TestNranksMismatchIsInvalidUsage(t *testing.T) {
	runs := runRanks(t, "nranks", 2, []string{EnvTimeout + "=10"}, nil, nil)
	for r, run := range runs {
		require.Equal(t, ncclInvalidUsage, run.out.Codes["rc"], "rank %d: %s", r, run.out.Texts["err"])
		require.Contains(t, run.out.Texts["err"], "nranks", "rank %d", r)
		require.Zero(t, run.out.Numbers["comm"], "rank %d: no communicator on failure", r)
	}
}

func TestDepartedRankMakesPeersFail(t *testing.T) {
	for how, text := range map[string]string{
		"exit":    "rank 1",
		"abort":   "rank 1 aborted",
		"destroy": "rank 1 (pid",
	} {
		t.Run(how, func(t *testing.T) {
			runs := runRanks(t, "early-exit", 2, []string{EnvTimeout + "=2", "VSIM_TEST_HOW=" + how}, nil, nil)
			o := runs[0].out
			t.Log(o.Texts["err"])
			require.Contains(t, []int{ncclRemoteError, ncclSystemError}, o.Codes["rc"], o.Texts["err"])
			require.Contains(t, o.Texts["err"], text)
			require.Less(t, o.Numbers["seconds"], 10.0, "the error must come near the 2 s deadline, not hang")
		})
	}
}

func TestStalledPeerTimesOut(t *testing.T) {
	runs := runRanks(t, "stalled-peer", 2, []string{EnvTimeout + "=2"}, nil, nil)
	o := runs[0].out
	t.Log(o.Texts["err"])
	require.Equal(t, ncclSystemError, o.Codes["rc"], o.Texts["err"])
	require.Contains(t, o.Texts["err"], "timed out")
	require.Contains(t, o.Texts["err"], "for ranks 1")
	require.GreaterOrEqual(t, o.Numbers["seconds"], 1.9)
	require.Less(t, o.Numbers["seconds"], 10.0)
	// The late rank's collective has every input it needs (rank 0 published
	// its part before giving up) and completes; its next collective needs
	// rank 0 again and learns of the failure at once instead of waiting.
	late := runs[1].out
	require.Equal(t, ncclSuccess, late.Codes["rc"], late.Texts["err"])
	require.Equal(t, encodeN(dtFloat32, 16, func(i int) float64 { return float64(1 + 2*i) }), late.Buffers["result"])
	t.Log(late.Texts["err2"])
	require.Equal(t, ncclRemoteError, late.Codes["rc2"], late.Texts["err2"])
	require.Contains(t, late.Texts["err2"], "rank 0 failed")
	require.Less(t, late.Numbers["seconds2"], 1.0)
}

func TestInitDeadlineNamesMissingRanks(t *testing.T) {
	runs := runRanks(t, "init-only", 4, []string{EnvTimeout + "=2"}, nil,
		func(r int) bool { return r == 1 || r == 3 })
	for _, r := range []int{0, 2} {
		// The first rank whose deadline passes reports ncclSystemError and
		// poisons the rendezvous; a rank that learns it from there a moment
		// before its own deadline reports ncclRemoteError with that text.
		o := runs[r].out
		t.Log(o.Texts["err"])
		require.Contains(t, []int{ncclSystemError, ncclRemoteError}, o.Codes["rc"], "rank %d", r)
		require.Contains(t, o.Texts["err"], "ranks 1,3 of 4 never joined", "rank %d", r)
		require.Less(t, o.Numbers["seconds"], 10.0)
		require.Zero(t, o.Numbers["comm"])
	}
}

func TestSendRecvFiveRanksDefaultSizes(t *testing.T) {
	// A larger world with the default (large) slot and mailbox sizes.
	const n = 5
	runs := runRanks(t, "p2p", n, []string{EnvTimeout + "=30"}, nil, nil)
	for me, run := range runs {
		prev := (me + n - 1) % n
		require.Equal(t, digest(p2pPattern(prev, me, 0, ringBytes)), run.out.Texts["ring"], "rank "+strconv.Itoa(me))
	}
}
