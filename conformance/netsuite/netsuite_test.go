package netsuite

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/netplugin"
)

const envPeerRole = "FLAGCX_NETSUITE_PEER" // this process is the peer of TestPeerDies

// realFabric: FLAGCX_TEST_REAL_IB=1 runs the suite on the machine's own
// libibverbs and RDMA devices instead of the emulated verbs (docs/ib.md).
var realFabric = os.Getenv("FLAGCX_TEST_REAL_IB") == "1"

func TestMain(m *testing.M) {
	if os.Getenv(envPeerRole) != "" {
		os.Exit(dyingPeer())
	}
	os.Exit(m.Run())
}

var (
	pluginOnce sync.Once
	plugin     *netplugin.Plugin
	pluginErr  error
)

// pluginPath is FLAGCX_NET_PLUGIN, else the make-built net-ib plugin.
func pluginPath(t testing.TB) string {
	if p := os.Getenv("FLAGCX_NET_PLUGIN"); p != "" {
		return p
	}
	return testkit.BuiltFile(t, "net", "libflagcx-net-ib.so")
}

// open loads the plugin on the emulated fabric once for the process.
func open(t testing.TB) *netplugin.Plugin {
	t.Helper()
	path := pluginPath(t)
	vsim := os.Getenv("FLAGCX_VENDORSIM_DIR") // a mutant's emulator (TestNetMutants)
	if vsim == "" && !realFabric {
		vsim = testkit.BuiltFile(t, "vendorsim")
	}
	pluginOnce.Do(func() {
		if plugin, pluginErr = netplugin.Open(path); pluginErr == nil {
			_, pluginErr = plugin.Init(netplugin.InitOptions{Emulated: !realFabric, VendorsimDir: vsim})
		}
	})
	require.NoError(t, pluginErr)
	require.Positive(t, plugin.Devices(), "no device: %s", plugin.Info().NoDevice)
	return plugin
}

func pair(t *testing.T, dev int) *Pair {
	t.Helper()
	c, err := Connect(open(t), dev)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func buffer(t *testing.T, n int) *Buffer {
	t.Helper()
	b, err := NewBuffer(n)
	require.NoError(t, err)
	t.Cleanup(b.Free)
	return b
}

func reg(t *testing.T, regMr func(addr uintptr, size, typ int) (*netplugin.MR, error), addr uintptr, size int) *netplugin.MR {
	t.Helper()
	mr, err := regMr(addr, size, netplugin.PtrHost)
	require.NoError(t, err)
	t.Cleanup(func() { mr.Dereg() })
	return mr
}

func TestDevices(t *testing.T) {
	p := open(t)
	info := p.Info()
	require.Equal(t, !realFabric, info.Emulated)
	if realFabric {
		require.Equal(t, "IB", info.Transport)
	} else {
		require.Equal(t, "emulated IB", info.Transport)
	}
	for dev := range p.Devices() {
		props, err := p.Properties(dev)
		require.NoError(t, err)
		require.NotEmpty(t, props.Name)
		require.Positive(t, props.SpeedMbps)
		require.NotZero(t, props.PtrSupport&netplugin.PtrHost, "every device sends from host memory")
		require.GreaterOrEqual(t, props.Port, 1)
	}
	_, err := p.Properties(p.Devices())
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
}

func TestConnect(t *testing.T) {
	p := open(t)
	for dev := range p.Devices() {
		props, err := p.Properties(dev)
		require.NoError(t, err)
		t.Run(props.Name+"/"+props.LinkLayerName(), func(t *testing.T) {
			c := pair(t, dev)
			transfer(t, c, []int{0, 1, 4096})
		})
	}
	t.Run("a handle that is not one", func(t *testing.T) {
		_, _, err := p.Connect(0, bytes.Repeat([]byte{7}, 40))
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	})
}

// TestConnectAcrossDevices: the two ends of a connection on two devices of
// one link layer (a rank near one NIC talks to a rank near another). On the
// emulated fabric vsim_ib0 and vsim_ib1 share a subnet.
func TestConnectAcrossDevices(t *testing.T) {
	p := open(t)
	byLayer := map[int][]int{}
	for dev := range p.Devices() {
		props, err := p.Properties(dev)
		require.NoError(t, err)
		byLayer[props.LinkLayer] = append(byLayer[props.LinkLayer], dev)
	}
	ib := byLayer[1]
	if realFabric && len(ib) < 2 {
		t.Skip("this machine has fewer than two InfiniBand devices")
	}
	require.GreaterOrEqual(t, len(ib), 2, "the emulated fabric has vsim_ib0 and vsim_ib1")
	for _, ends := range [][2]int{{ib[0], ib[1]}, {ib[1], ib[0]}} {
		t.Run(fmt.Sprintf("recv on %d, send on %d", ends[0], ends[1]), func(t *testing.T) {
			c, err := ConnectDevs(p, ends[0], ends[1])
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			transfer(t, c, []int{0, 1, 4096, 1 << 20})
		})
	}
}

// TestPCIPaths: the emulated devices report their made-up PCI paths, each
// its own (conformance/vendorsim/ibverbs/ibverbs.c).
func TestPCIPaths(t *testing.T) {
	p := open(t)
	if realFabric {
		t.Skip("the paths of real NICs are the machine's own")
	}
	want := map[string]string{
		"vsim_ib0":   "/vsim/sys/devices/pci0000:00/0000:00:01.0/0000:40:00.0/0000:40:82.0/0000:60:00.0",
		"vsim_roce0": "/vsim/sys/devices/pci0000:c0/0000:c0:01.0/0000:c1:00.0",
		"vsim_ib1":   "/vsim/sys/devices/pci0000:00/0000:00:02.0/0000:41:00.0/0000:41:82.0/0000:61:00.0",
	}
	got := map[string]string{}
	for dev := range p.Devices() {
		props, err := p.Properties(dev)
		require.NoError(t, err)
		got[props.Name] = props.PCIPath
	}
	require.Equal(t, want, got)
}

// transfer sends messages of sizes in order, one in flight, and checks
// every byte and the reported sizes.
func transfer(t *testing.T, c *Pair, sizes []int) {
	t.Helper()
	most := 1
	for _, n := range sizes {
		most = max(most, n)
	}
	sb, rb := buffer(t, most), buffer(t, most+64)
	smr := reg(t, c.Send.RegMr, sb.Addr(0), len(sb.Mem))
	rmr := reg(t, c.Recv.RegMr, rb.Addr(0), len(rb.Mem))
	for i, n := range sizes {
		copy(sb.Mem, Pattern(i, n))
		for k := range rb.Mem {
			rb.Mem[k] = 0xA5
		}
		rq, err := c.Recv.Irecv(rb.Addr(0), most, 9, rmr)
		require.NoError(t, err)
		sq, err := c.Send.Isend(sb.Addr(0), n, 9, smr)
		require.NoError(t, err)
		ns, nr, es, er := WaitBoth(sq, rq)
		require.NoError(t, es, "send %d (%d bytes)", i, n)
		require.NoError(t, er, "recv %d (%d bytes)", i, n)
		require.Equal(t, n, ns)
		require.Equal(t, n, nr, "the receive reports the bytes sent")
		require.True(t, bytes.Equal(Pattern(i, n), rb.Mem[:n]), "message %d (%d bytes) arrived intact", i, n)
		require.Equal(t, bytes.Repeat([]byte{0xA5}, 64), rb.Mem[n:n+64], "nothing written past the message")
	}
}

func TestLargeAndZeroByteMessages(t *testing.T) {
	c := pair(t, 0)
	transfer(t, c, []int{0, 0, 1, 3, 65535, 65536, 65537, 1 << 20, 16<<20 + 7, 0})
}

// TestOrdering posts many sends and receives at once, of varied sizes, and
// checks that the n-th receive got the n-th message.
func TestOrdering(t *testing.T) {
	c := pair(t, 0)
	const msgs, inflight, slot = 200, 32, 70000
	sb, rb := buffer(t, inflight*slot), buffer(t, inflight*slot)
	smr := reg(t, c.Send.RegMr, sb.Addr(0), len(sb.Mem))
	rmr := reg(t, c.Recv.RegMr, rb.Addr(0), len(rb.Mem))
	size := func(i int) int { return (i * 7919) % slot }
	var sq, rq [inflight]netplugin.Request
	post := func(i int) {
		s := i % inflight
		copy(sb.Mem[s*slot:], Pattern(i, size(i)))
		var err error
		rq[s], err = c.Recv.Irecv(rb.Addr(s*slot), slot, i%5, rmr)
		require.NoError(t, err)
		sq[s], err = c.Send.Isend(sb.Addr(s*slot), size(i), i%5, smr)
		require.NoError(t, err)
	}
	for i := range inflight {
		post(i)
	}
	for i := range msgs {
		s := i % inflight
		_, nr, es, er := WaitBoth(sq[s], rq[s])
		require.NoError(t, es)
		require.NoError(t, er)
		require.Equal(t, size(i), nr, "message %d", i)
		require.True(t, bytes.Equal(Pattern(i, size(i)), rb.Mem[s*slot:s*slot+nr]), "message %d in order and intact", i)
		if i+inflight < msgs {
			post(i + inflight)
		}
	}
}

func TestTags(t *testing.T) {
	c := pair(t, 0)
	sb, rb := buffer(t, 4096), buffer(t, 4096)
	smr := reg(t, c.Send.RegMr, sb.Addr(0), 4096)
	rmr := reg(t, c.Recv.RegMr, rb.Addr(0), 4096)
	for _, tc := range []struct {
		name          string
		sendTag, recv int
		sendSize      int
		want          string
	}{
		{"matching tags", 42, 42, 100, ""},
		{"a negative tag", -3, -3, 100, ""},
		{"mismatched tags", 1, 2, 100, "tag"},
		{"a message larger than the receive", 5, 5, 4097, "larger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rq, err := c.Recv.Irecv(rb.Addr(0), 4096-1, tc.recv, rmr)
			require.NoError(t, err)
			n := min(tc.sendSize, 4096)
			if tc.sendSize > 4096 {
				n = 4096 // more than the 4095 bytes the receive offers
			}
			sq, err := c.Send.Isend(sb.Addr(0), n, tc.sendTag, smr)
			require.NoError(t, err)
			_, _, es, er := WaitBoth(sq, rq)
			if tc.want == "" {
				require.NoError(t, es)
				require.NoError(t, er)
				return
			}
			require.ErrorIs(t, es, sdk.ErrInvalidUsage)
			require.ErrorIs(t, er, sdk.ErrInvalidUsage, "both sides learn of the mismatch")
			require.ErrorContains(t, er, tc.want)
		})
	}
}

func TestRegistrationErrors(t *testing.T) {
	c := pair(t, 0)
	b := buffer(t, 8192)
	t.Run("device memory without support", func(t *testing.T) {
		_, err := c.Send.RegMr(b.Addr(0), 4096, netplugin.PtrDevice)
		require.ErrorIs(t, err, sdk.ErrNotSupported)
	})
	t.Run("an empty range", func(t *testing.T) {
		_, err := c.Send.RegMr(b.Addr(0), 0, netplugin.PtrHost)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	})
	t.Run("a receive outside its registration", func(t *testing.T) {
		// The receiver offers a buffer its key does not cover: the
		// sender's RDMA write is refused by the receiver's NIC (remote
		// access error) and the connection breaks on both sides.
		smr := reg(t, c.Send.RegMr, b.Addr(0), 4096)
		rmr := reg(t, c.Recv.RegMr, b.Addr(4096), 1024)
		rq, err := c.Recv.Irecv(b.Addr(4096+2048), 1024, 0, rmr)
		require.NoError(t, err)
		sq, err := c.Send.Isend(b.Addr(0), 512, 0, smr)
		require.NoError(t, err)
		_, _, es, er := WaitBoth(sq, rq)
		require.ErrorIs(t, es, sdk.ErrRemoteError)
		require.ErrorContains(t, es, "remote access error")
		require.ErrorIs(t, er, sdk.ErrRemoteError, "the receiver's queue pair went to the error state")
		require.ErrorContains(t, er, "Flush")
		_, err = c.Send.Isend(b.Addr(0), 1, 0, smr)
		require.ErrorIs(t, err, sdk.ErrRemoteError, "a broken connection takes no more work")
	})
}

// TestPeerDies: the receiver's process dies after offering a receive; the
// sender's write is never acknowledged and fails with a remote error
// within seconds (the transport's retries exhausted), not never.
func TestPeerDies(t *testing.T) {
	p := open(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envPeerRole+"=1", "FLAGCX_NET_PLUGIN="+pluginPath(t))
	if !realFabric {
		cmd.Env = append(cmd.Env, "FLAGCX_VENDORSIM_DIR="+testkit.BuiltFile(t, "vendorsim"))
	}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outPipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewScanner(outPipe)
	line := func() string {
		require.True(t, out.Scan(), "the peer process answers")
		return strings.TrimSpace(out.Text())
	}
	handle, err := hex.DecodeString(line())
	require.NoError(t, err)
	sc, reply, err := p.Connect(0, handle)
	require.NoError(t, err)
	t.Cleanup(func() { sc.Close() })
	fmt.Fprintln(in, hex.EncodeToString(reply))
	b := buffer(t, 4096)
	mr := reg(t, sc.RegMr, b.Addr(0), 4096)
	q, err := sc.Isend(b.Addr(0), 100, 0, mr)
	require.NoError(t, err)
	n, err := Wait(q)
	require.NoError(t, err, "the first message reaches the peer")
	require.Equal(t, 100, n)
	require.Equal(t, "dying", line())
	err = cmd.Wait()
	require.Error(t, err, "the peer was killed")
	start := time.Now()
	q, err = sc.Isend(b.Addr(0), 100, 0, mr)
	require.NoError(t, err)
	_, err = Wait(q)
	require.ErrorIs(t, err, sdk.ErrRemoteError)
	require.ErrorContains(t, err, "retry")
	require.Less(t, time.Since(start), 19*time.Second, "the emulator gives up within ~20 ms, real RC retries within ~8 s")
}

// dyingPeer is the other process of TestPeerDies: it listens, accepts,
// receives one message, offers a second receive and kills itself.
func dyingPeer() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "dying peer:", err); return 1 }
	p, err := netplugin.Open(os.Getenv("FLAGCX_NET_PLUGIN"))
	if err != nil {
		return fail(err)
	}
	if _, err := p.Init(netplugin.InitOptions{Emulated: !realFabric}); err != nil {
		return fail(err)
	}
	lc, handle, err := p.Listen(0)
	if err != nil {
		return fail(err)
	}
	fmt.Println(hex.EncodeToString(handle))
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fail(fmt.Errorf("no reply on stdin"))
	}
	reply, err := hex.DecodeString(strings.TrimSpace(in.Text()))
	if err != nil {
		return fail(err)
	}
	rc, err := lc.Accept(reply)
	if err != nil {
		return fail(err)
	}
	b, err := NewBuffer(4096)
	if err != nil {
		return fail(err)
	}
	mr, err := rc.RegMr(b.Addr(0), 4096, netplugin.PtrHost)
	if err != nil {
		return fail(err)
	}
	q, err := rc.Irecv(b.Addr(0), 4096, 0, mr)
	if err == nil {
		_, err = Wait(q)
	}
	if err != nil {
		return fail(err)
	}
	if _, err := rc.Irecv(b.Addr(0), 4096, 0, mr); err != nil {
		return fail(err)
	}
	time.Sleep(200 * time.Millisecond) // the offer reaches the sender
	fmt.Println("dying")
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	return 1
}
