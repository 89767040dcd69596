//go:build linux

package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// Host ranks across emulated hosts (internal/testkit.Hosts): each host has
// its own network, host name, pid namespace and /dev/shm, so ranks of one
// host share memory and ranks of different hosts talk TCP over the
// emulated network, as on a cluster.

// hostsRun is one job of ranks on emulated hosts.
type hostsRun struct {
	hosts   *testkit.HostSet
	perHost int
	out     string
	cmd     *exec.Cmd
	done    chan error
}

// startHostRanks starts perHost ranks of `flagcx args...` on every host,
// with FLAGCX_TIMEOUT and env added.
func startHostRanks(t *testing.T, hs *testkit.HostSet, perHost int, env []string, args ...string) *hostsRun {
	t.Helper()
	r := &hostsRun{hosts: hs, perHost: perHost, out: t.TempDir(), done: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	r.cmd = hs.Ranks(ctx, perHost, r.out, append([]string{flagcxBin(t)}, args...)...)
	r.cmd.Env = cleanEnv(env...)
	require.NoError(t, r.cmd.Start())
	go func() { r.done <- r.cmd.Wait() }()
	return r
}

// wait waits for the whole job to end, at most d.
func (r *hostsRun) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(d):
		t.Fatalf("the ranks did not all end within %v:\n%s", d, r.story())
	}
}

// story is every rank's exit status and stderr tail, for failures.
func (r *hostsRun) story() string {
	var b strings.Builder
	for k := 0; k < len(r.hosts.Hosts)*r.perHost; k++ {
		o := testkit.RankResult(r.out, k)
		fmt.Fprintf(&b, "rank %d (ended %v, code %d):\n%s\n", k, o.Ended, o.Code, tail(o.Stderr, 1500))
	}
	return b.String()
}

// TestHostsBenchAll: `bench all -c 1` of host ranks on 3 emulated hosts,
// 2 ranks each, is exact, and leaves nothing on any host.
func TestHostsBenchAll(t *testing.T) {
	hs := testkit.Hosts(t, 3)
	r := startHostRanks(t, hs, 2, []string{"FLAGCX_TIMEOUT=30"},
		"bench", "all", "-c", "1", "-b", "8", "-e", "256K", "-f", "8", "-w", "1", "-n", "1", "--backend", "host")
	r.wait(t, 2*time.Minute)
	for k := 0; k < 6; k++ {
		o := testkit.RankResult(r.out, k)
		require.True(t, o.Ended && o.Code == 0, "rank %d:\n%s", k, r.story())
	}
	out := testkit.RankResult(r.out, 0).Stdout
	rows := tableRows(t, out)
	require.Len(t, rows, 10*6, "10 collectives x 6 sizes:\n%s", out)
	for _, h := range hs.Hosts {
		require.NoError(t, h.Leftovers())
	}
}

// TestHostsDecoyInterface: with an up interface ahead of eth0 whose
// network reaches no other host, ranks listen on the interface routed to
// FLAGCX_COMM_ID and the job is exact; forced onto the decoy with
// FLAGCX_SOCKET_IFNAME, they fail naming the variable and the interface.
func TestHostsDecoyInterface(t *testing.T) {
	hs := testkit.Hosts(t, 2, testkit.Decoy)
	args := []string{"bench", "allreduce", "-c", "1", "-b", "8", "-e", "64K", "-f", "64", "-w", "1", "-n", "1", "--backend", "host"}
	r := startHostRanks(t, hs, 1, []string{"FLAGCX_TIMEOUT=30"}, args...)
	r.wait(t, time.Minute)
	for k := 0; k < 2; k++ {
		o := testkit.RankResult(r.out, k)
		require.True(t, o.Ended && o.Code == 0, "rank %d:\n%s", k, r.story())
	}
	require.Len(t, tableRows(t, testkit.RankResult(r.out, 0).Stdout), 3)

	r = startHostRanks(t, hs, 1, []string{"FLAGCX_TIMEOUT=3", "FLAGCX_SOCKET_IFNAME=dcy"}, args...)
	r.wait(t, time.Minute)
	o := testkit.RankResult(r.out, 1)
	require.True(t, o.Ended && o.Code != 0, "rank 1:\n%s", r.story())
	require.Contains(t, o.Stderr, `this rank uses interface dcy0 (10.198.0.2`)
	require.Contains(t, o.Stderr, `set FLAGCX_SOCKET_IFNAME to choose another (now "dcy")`)
	for _, h := range hs.Hosts {
		require.NoError(t, h.Leftovers())
	}
}

// hostsFaultTimeout is FLAGCX_TIMEOUT of the faulted runs: long enough
// for 6 ranks to join over the emulated network on a loaded machine.
const hostsFaultTimeout = 10 * time.Second

var rankRefRE = regexp.MustCompile(`\branks? (\d+)\b`)

// namesPeer reports whether rank k's error line names a rank other than k.
func namesPeer(stderr string, k int) bool {
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(l, "flagcx: error:") {
			continue
		}
		for _, m := range rankRefRE.FindAllStringSubmatch(l, -1) {
			if m[1] != strconv.Itoa(k) {
				return true
			}
		}
	}
	return false
}

// TestHostsFaults: host 1 of 3 (2 ranks each) is killed, stopped, or cut
// off for 15 s in the middle of allreduces. Every rank on the other hosts
// ends on its own, failing with an error that names a peer; the stopped
// or cut-off ranks end too once resumed or reconnected; no host keeps a
// process or a /dev/shm file.
func TestHostsFaults(t *testing.T) {
	for _, fault := range []string{"kill", "stop", "link"} {
		t.Run(fault, func(t *testing.T) {
			hs := testkit.Hosts(t, 3)
			victim := hs.Hosts[1]
			r := startHostRanks(t, hs, 2, []string{"FLAGCX_TIMEOUT=" + strconv.Itoa(int(hostsFaultTimeout/time.Second))},
				"bench", "allreduce", "-c", "1", "-b", "64K", "-e", "64K", "-w", "1", "-n", "1000000", "--backend", "host")
			deadline := time.Now().Add(time.Minute)
			// Rank 0 prints the header once every rank has joined; the
			// ranks are in their allreduces soon after.
			for !strings.Contains(testkit.RankResult(r.out, 0).Stdout, "# Using devices") {
				require.True(t, time.Now().Before(deadline), "no header within a minute:\n%s", r.story())
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			faultAt := time.Now()
			switch fault {
			case "kill":
				require.NoError(t, victim.Kill())
			case "stop":
				require.NoError(t, victim.Stop())
			case "link":
				require.NoError(t, victim.Link(false))
			}
			survivors := []int{0, 1, 4, 5}
			deadline = time.Now().Add(faultTimeout + faultSlack)
			for _, k := range survivors {
				for !testkit.RankResult(r.out, k).Ended {
					require.True(t, time.Now().Before(deadline), "rank %d still runs %v after the fault:\n%s", k, hostsFaultTimeout+faultSlack, r.story())
					time.Sleep(20 * time.Millisecond)
				}
				o := testkit.RankResult(r.out, k)
				require.NotZero(t, o.Code, "rank %d:\n%s", k, r.story())
				require.True(t, namesPeer(o.Stderr, k), "rank %d's error names no peer:\n%s", k, r.story())
			}
			switch fault {
			case "stop":
				require.NoError(t, victim.Cont())
			case "link":
				time.Sleep(time.Until(faultAt.Add(15 * time.Second)))
				require.NoError(t, victim.Link(true))
			}
			r.wait(t, hostsFaultTimeout+faultSlack)
			for _, h := range hs.Hosts {
				if fault == "kill" && h.Index == victim.Index {
					continue // its namespaces went with it
				}
				require.NoError(t, h.Leftovers())
			}
		})
	}
}
