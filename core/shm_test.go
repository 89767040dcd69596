package core

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// allReduceExact runs a float32 sum of count elements on every rank, with
// small integer inputs so the result is exact, and checks every element.
func allReduceExact(t *testing.T, comms []*Comm, count int) {
	t.Helper()
	n := len(comms)
	val := func(r, i int) float32 { return float32((i%1000)*(r+1) + r) }
	recv := make([][]byte, n)
	errs := onAll(comms, func(c *Comm) error {
		r := c.Rank()
		send := make([]byte, 4*count)
		for i := 0; i < count; i++ {
			binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(val(r, i)))
		}
		recv[r] = make([]byte, 4*count)
		return c.AllReduce(HostBuffer(send), HostBuffer(recv[r]), count, sdk.Float32, sdk.Sum, 0)
	})
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		for i := 0; i < count; i++ {
			var want float32
			for q := 0; q < n; q++ {
				want += val(q, i)
			}
			got := math.Float32frombits(binary.LittleEndian.Uint32(recv[r][4*i:]))
			if got != want {
				require.Equal(t, want, got, "rank %d element %d", r, i)
			}
		}
	}
}

func transports(comms []*Comm) [][]string {
	out := make([][]string, len(comms))
	for r, c := range comms {
		for p := 0; p < c.Count(); p++ {
			out[r] = append(out[r], c.world.Transport(p))
		}
	}
	return out
}

func TestMeshUsesShmBetweenSameHostRanks(t *testing.T) {
	if hostnet.BootID() == "" {
		t.Skip("no kernel boot id: shared memory is not used here")
	}
	if _, err := os.Stat(hostnet.DefaultShmDir); err != nil {
		t.Skipf("no %s", hostnet.DefaultShmDir)
	}
	t.Setenv(hostnet.EnvShmDisable, "")
	const n = 4
	comms := startComms(t, n, testNet(10*time.Second))
	want := [][]string{
		{"self", "shm", "shm", "shm"},
		{"shm", "self", "shm", "shm"},
		{"shm", "shm", "self", "shm"},
		{"shm", "shm", "shm", "self"},
	}
	require.Equal(t, want, transports(comms))
	require.Equal(t, comms[0].world.Peers()[0].BootID, hostnet.BootID())
	// Small (recursive doubling) and large (pipelined ring, messages of
	// several slots) allreduces give exact results.
	for _, count := range []int{1, 1000, 3 << 20} {
		t.Run(fmt.Sprint(count), func(t *testing.T) { allReduceExact(t, comms, count) })
	}
	// Abort on one rank reaches its peers through the segment at once, long
	// before the deadline.
	comms[3].Abort()
	start := time.Now()
	errs := onAll(comms[:3], func(c *Comm) error {
		if c.Rank() == 1 {
			return c.Send(HostBuffer(make([]byte, 4)), 4, sdk.Uint8, 3, 0)
		}
		return c.Recv(HostBuffer(make([]byte, 4)), 4, sdk.Uint8, 3, 0)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, sdk.ErrRemoteError, "rank %d", r)
		require.ErrorContains(t, err, "rank 3 closed the connection")
	}
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestMeshUsesTCPWhenShmDisabled(t *testing.T) {
	t.Setenv(hostnet.EnvShmDisable, "1")
	const n = 3
	comms := startComms(t, n, testNet(10*time.Second))
	want := [][]string{
		{"self", "tcp", "tcp"},
		{"tcp", "self", "tcp"},
		{"tcp", "tcp", "self"},
	}
	require.Equal(t, want, transports(comms))
	for _, count := range []int{1, 1 << 20} {
		t.Run(fmt.Sprint(count), func(t *testing.T) { allReduceExact(t, comms, count) })
	}
}

func TestMeshRejectsMalformedShmSettings(t *testing.T) {
	t.Setenv(hostnet.EnvShmP2PSize, "many")
	cfg := testNet(5 * time.Second)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	_, err = InitRank(id, 1, 0, WithNetConfig(cfg))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorContains(t, err, hostnet.EnvShmP2PSize)
}

// TestAbortDuringShmCollective: Abort from another goroutine while ranks
// copy through the shared windows ends the collective with an error on
// every rank (and does not unmap memory that a copy still reads).
func TestAbortDuringShmCollective(t *testing.T) {
	if hostnet.BootID() == "" {
		t.Skip("no kernel boot id: shared memory is not used here")
	}
	t.Setenv(hostnet.EnvShmDisable, "")
	comms := startComms(t, 2, testNet(10*time.Second))
	require.Equal(t, "shm", comms[0].world.Transport(1))
	const count = 8 << 20 // 32 MiB of float32: many steps
	go func() {
		time.Sleep(20 * time.Millisecond)
		comms[0].Abort()
	}()
	start := time.Now()
	errs := onAll(comms, func(c *Comm) error {
		send, recv := make([]byte, 4*count), make([]byte, 4*count)
		for {
			if err := c.AllReduce(HostBuffer(send), HostBuffer(recv), count, sdk.Float32, sdk.Sum, 0); err != nil {
				return err
			}
		}
	})
	require.ErrorIs(t, errs[0], sdk.ErrInvalidUsage, "the aborted rank says it was aborted")
	require.ErrorContains(t, errs[0], "aborted")
	require.ErrorIs(t, errs[1], sdk.ErrRemoteError)
	require.Less(t, time.Since(start), 5*time.Second)
}

// flagcxFiles lists the flagcx segments in /dev/shm.
func flagcxFiles(t *testing.T) []string {
	ents, err := os.ReadDir(hostnet.DefaultShmDir)
	require.NoError(t, err)
	// Only this process's segments (flagcx-<boot>-<pidns>-<pid>-<token>):
	// other test packages run at the same time and make their own.
	pid := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range ents {
		if f := strings.Split(e.Name(), "-"); len(f) == 5 && f[0] == "flagcx" && f[3] == pid {
			out = append(out, e.Name())
		}
	}
	return out
}

// MemAlloc gives memory every rank maps, unlinked once mapped; an
// AllReduce on it (zero copy) is exact in place and out of place.
func TestMemAllocAllReduceOverShm(t *testing.T) {
	if hostnet.BootID() == "" {
		t.Skip("no kernel boot id: shared memory is not used here")
	}
	if _, err := os.Stat(hostnet.DefaultShmDir); err != nil {
		t.Skipf("no %s", hostnet.DefaultShmDir)
	}
	t.Setenv(hostnet.EnvShmDisable, "")
	const n, count = 3, 300001 // odd, and above the one-step size
	comms := startComms(t, n, testNet(10*time.Second))
	before := flagcxFiles(t)
	val := func(r, i int) float32 { return float32((i%1000)*(r+1) + r) }
	for _, inPlace := range []bool{false, true} {
		t.Run(fmt.Sprint("inplace=", inPlace), func(t *testing.T) {
			errs := onAll(comms, func(c *Comm) error {
				if !c.CanMemAlloc() {
					return fmt.Errorf("rank %d cannot MemAlloc", c.Rank())
				}
				send, err := c.MemAlloc(4 * count)
				if err != nil {
					return err
				}
				defer c.MemFree(send)
				recv := send
				if !inPlace {
					if recv, err = c.MemAlloc(4 * count); err != nil {
						return err
					}
					defer c.MemFree(recv)
				}
				for i := 0; i < count; i++ {
					binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(val(c.Rank(), i)))
				}
				if err := c.AllReduce(HostBuffer(send), HostBuffer(recv), count, sdk.Float32, sdk.Sum, 0); err != nil {
					return err
				}
				for i := 0; i < count; i++ {
					var want float32
					for q := 0; q < n; q++ {
						want += val(q, i)
					}
					if got := math.Float32frombits(binary.LittleEndian.Uint32(recv[4*i:])); got != want {
						return fmt.Errorf("rank %d element %d: want %v, got %v", c.Rank(), i, want, got)
					}
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			require.ElementsMatch(t, before, flagcxFiles(t), "allocations are unlinked once mapped")
		})
	}
}
