//go:build linux

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
)

// heteroHostsBackends places the 6 ranks of TestHostsHeterogeneous on
// 3 emulated hosts (2 each): an NVIDIA cluster spanning hosts 0 and 1, a
// Kunlunxin rank on host 2, and host ranks on hosts 1 and 2. Rank r is
// FLAGCX_RANK; each process is started alike and picks its own backend,
// as under mpirun with one app context per host.
const heteroHostsBackends = `case $FLAGCX_RANK in 0|1|2) b=nvidia ;; 4) b=kunlunxin ;; *) b=host ;; esac`

// TestHostsHeterogeneous: `bench all -c 1` of a heterogeneous job whose
// device ranks (emulated NVIDIA and Kunlunxin) and host ranks sit on 3
// emulated hosts, started one process per rank without
// FLAGCX_CLUSTER_SPLIT_LIST, is exact over TCP and over emulated IB
// between the hosts, and leaves nothing on any host.
func TestHostsHeterogeneous(t *testing.T) {
	for _, net := range []string{"Socket", "IB"} {
		t.Run(net, func(t *testing.T) {
			hs := testkit.Hosts(t, 3)
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			script := fmt.Sprintf(`%s; exec %s --plugin-dir %s --emulated bench all -c 1 -b 8 -e 64K -f 8 -w 1 -n 1 --backend "$b"`,
				heteroHostsBackends, flagcxBin(t), pluginDir(t))
			cmd := hs.Ranks(ctx, 2, out, "sh", "-c", script)
			cmd.Env = ibEnv(t, "FLAGCX_TIMEOUT=60", "FLAGCX_NET="+net)
			runErr := cmd.Run()
			job := &hostsRun{hosts: hs, perHost: 2, out: out}
			require.NoError(t, runErr, job.story())
			for k := 0; k < 6; k++ {
				o := testkit.RankResult(out, k)
				require.True(t, o.Ended && o.Code == 0, "rank %d:\n%s", k, job.story())
			}
			stdout := testkit.RankResult(out, 0).Stdout
			require.Contains(t, stdout, "emulated", "an emulated run says so")
			rows := tableRows(t, stdout)
			require.Len(t, rows, 10*5, "10 collectives x 5 sizes:\n%s", stdout)
			// Links between hosts take the network asked for; inside a
			// host, shared memory.
			require.Contains(t, stdout, strings.ToLower(map[string]string{"Socket": "tcp", "IB": "ib"}[net])+" (", "the header's link table:\n%s", stdout)
			for _, h := range hs.Hosts {
				require.NoError(t, h.Leftovers())
			}
		})
	}
}

// TestHostsCallMismatch: host ranks on 2 emulated hosts where the last
// rank calls AllReduce with another reduction, or another data type of the
// same size, than the others: over TCP between the hosts (and shared
// memory inside them) every rank fails before the deadline with an error
// that names the disagreement, instead of wrong data.
func TestHostsCallMismatch(t *testing.T) {
	for _, tc := range []struct{ name, others, last, want string }{
		{"op", "-d float32 -o sum", "-d float32 -o max", "AllReduce float32 max"},
		{"type", "-d float32 -o sum", "-d int32 -o sum", "AllReduce int32 sum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := testkit.Hosts(t, 2)
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			script := fmt.Sprintf(`a="%s"; [ "$FLAGCX_RANK" = 3 ] && a="%s"; exec %s bench allreduce -c 1 -b 64K -e 64K -w 1 -n 2 --backend host $a`,
				tc.others, tc.last, flagcxBin(t))
			cmd := hs.Ranks(ctx, 2, out, "sh", "-c", script)
			cmd.Env = cleanEnv("FLAGCX_TIMEOUT=60")
			require.Error(t, cmd.Run())
			for k := 0; k < 4; k++ {
				o := testkit.RankResult(out, k)
				require.True(t, o.Ended, "rank %d", k)
				require.Equal(t, 1, o.Code, "rank %d:\n%s", k, o.Stderr)
				require.Contains(t, o.Stderr, "flagcx: error:", "rank %d", k)
			}
			// The ranks that see the other call name both.
			named := 0
			for k := 0; k < 4; k++ {
				e := testkit.RankResult(out, k).Stderr
				if strings.Contains(e, "ranks disagree on the operation") && strings.Contains(e, tc.want) {
					named++
				}
			}
			require.NotZero(t, named, "no rank named the disagreement")
			for _, h := range hs.Hosts {
				require.NoError(t, h.Leftovers())
			}
		})
	}
}
