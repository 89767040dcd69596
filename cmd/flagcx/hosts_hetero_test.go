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
			story := func() string {
				var b strings.Builder
				for k := 0; k < 6; k++ {
					o := testkit.RankResult(out, k)
					fmt.Fprintf(&b, "rank %d (ended %v, code %d):\n%s\n", k, o.Ended, o.Code, tail(o.Stderr, 1500))
				}
				return b.String()
			}
			require.NoError(t, runErr, story())
			for k := 0; k < 6; k++ {
				o := testkit.RankResult(out, k)
				require.True(t, o.Ended && o.Code == 0, "rank %d:\n%s", k, story())
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
