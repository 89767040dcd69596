//go:build linux

package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// ibEnv points a run at the make-built net-ib plugin and emulators.
func ibEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	plugin := testkit.BuiltFile(t, "net", "libflagcx-net-ib.so")
	vsim := testkit.BuiltFile(t, "vendorsim")
	testkit.BuiltFile(t, "vendorsim", "ibverbs", "libibverbs.so.1")
	return cleanEnv(append([]string{"FLAGCX_NET_PLUGIN=" + plugin, "FLAGCX_VENDORSIM_DIR=" + vsim,
		"FLAGCX_PLUGIN_DIR=" + filepath.Join(filepath.Dir(vsim), "plugins")}, extra...)...)
}

// TestBenchOverEmulatedIB is issue 14's check: with shared memory off and
// FLAGCX_NET=IB every link of the run goes over the net-ib plugin on the
// emulated verbs, the results are exact, and the header says so.
func TestBenchOverEmulatedIB(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout []string
		links  string
	}{
		{"4 host ranks", []string{"--np", "4"}, "3 links ib"},
		{"heterogeneous kunlunxin:2,metax:1,host:2", []string{"--ranks", "kunlunxin:2,metax:1,host:2"}, " links ib"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--emulated", "bench", "all"}, tc.layout...)
			args = append(args, "-b", "3", "-e", "600000", "-f", "17", "-w", "1", "-n", "2", "-c", "1")
			r := runFlagcx(t, 4*time.Minute, ibEnv(t, "FLAGCX_SHM_DISABLE=1", "FLAGCX_NET=IB"), args...)
			require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, "# Out of bounds values : 0 OK\n")
			net := regexp.MustCompile(`(?m)^# Network: .*$`).FindString(r.stdout)
			require.Contains(t, net, tc.links, "every link of rank 0 is on the plugin:\n%s", r.stdout)
			require.NotContains(t, net, "tcp")
			require.Contains(t, net, "emulated IB")
		})
	}
}

// TestBenchNearestHCA: ranks on different emulated GPUs take the emulated
// HCA nearest to theirs (vsim_ib0 shares the PCIe switch of GPUs 0-1,
// vsim_ib1 that of GPUs 2-3: internal/hostnet/topo/topo.go), the pairs of
// different HCAs move exact data, and the header names rank 0's choice.
func TestBenchNearestHCA(t *testing.T) {
	env := ibEnv(t, "FLAGCX_SHM_DISABLE=1", "FLAGCX_NET=IB", "FLAGCX_DEBUG=INFO", "FLAGCX_DEBUG_SUBSYS=NET")
	r := runFlagcx(t, 4*time.Minute, env, "--emulated", "bench", "all", "--ranks", "nvidia:4",
		"-b", "3", "-e", "600000", "-f", "17", "-w", "1", "-n", "2", "-c", "1")
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "# Out of bounds values : 0 OK\n")
	for rank, want := range []string{"vsim_ib0", "vsim_ib0", "vsim_ib1", "vsim_ib1"} {
		line := regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d: .*NET/IB: using (\S+) port 1: (.*)$`, rank)).FindStringSubmatch(r.stderr)
		require.NotNil(t, line, "rank %d logs its device:\n%s", rank, r.stderr)
		require.Equal(t, want, line[1], "rank %d", rank)
		require.Equal(t, fmt.Sprintf("nearest to 0000:%02x:00.0 (same PCIe switch, 4 hops)", 0x10+rank), line[2], "rank %d", rank)
	}
	net := regexp.MustCompile(`(?m)^# Network: .*$`).FindString(r.stdout)
	require.Contains(t, net, "3 links ib (emulated IB: net-ib on vsim_ib0 port 1 (InfiniBand, 200 Gb/s")
	require.Contains(t, net, "nearest to 0000:10:00.0 (same PCIe switch, 4 hops)")
}

// TestNetIBWithoutDevice: FLAGCX_NET=IB where libibverbs finds no device
// (this machine's real one, or none at all) fails at once, naming why.
func TestNetIBWithoutDevice(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"the real libibverbs", nil},
		{"no libibverbs at all", []string{"FLAGCX_IBVERBS=/nonexistent/libibverbs.so.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := ibEnv(t, append([]string{"FLAGCX_NET=IB", "FLAGCX_SHM_DISABLE=1"}, tc.env...)...)
			r := runFlagcx(t, time.Minute, env, "bench", "allreduce", "--np", "2", "-b", "8", "-e", "8")
			if r.code == 0 && strings.Contains(r.stdout, " links ib") {
				t.Skip("this machine has an RDMA device")
			}
			require.NotZero(t, r.code)
			require.Less(t, r.took, 10*time.Second, "it fails at once, not at a deadline")
			require.Contains(t, r.stderr, "FLAGCX_NET=IB: no RDMA device")
			require.Contains(t, r.stderr, "FLAGCX_NET=Socket")
		})
	}
}

// TestBenchDefaultNetOnOneHost: without FLAGCX_NET the ranks of one host
// keep TCP (or shared memory) even where an RDMA device exists.
func TestBenchDefaultNetOnOneHost(t *testing.T) {
	r := runFlagcx(t, time.Minute, ibEnv(t, "FLAGCX_SHM_DISABLE=1"), "--emulated", "bench", "allreduce", "--np", "2", "-b", "8", "-e", "8")
	require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "# Network: 1 link tcp (TCP sockets)")
}
