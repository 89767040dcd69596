//go:build linux

package hostnet

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/testkit"
)

// rowTrace is what the rows' connects did, by [rank, peer].
type rowTrace struct {
	mu    sync.Mutex
	tried map[[2]int][]string // the rows whose connect got the pair, in order
	built map[[2]int]string   // the row whose connect built the pair's link
}

// traceRows makes every row of the table note, for the test's time, which
// pairs its connect got and which it built a link for, and that the link
// reports the row's name.
func traceRows(t *testing.T, table []row) *rowTrace {
	tr := &rowTrace{tried: map[[2]int][]string{}, built: map[[2]int]string{}}
	saved := rows
	t.Cleanup(func() { rows = saved })
	rows = slices.Clone(table)
	for i := range rows {
		connect := rows[i].connect
		rows[i].connect = func(s *setup, r *row, pairs []int) error {
			had := slices.Clone(s.m.Links)
			err := connect(s, r, pairs)
			tr.mu.Lock()
			defer tr.mu.Unlock()
			for _, p := range pairs {
				k := [2]int{s.mc.Rank, p}
				tr.tried[k] = append(tr.tried[k], r.name)
				if l := s.m.Links[p]; l != nil && had[p] == nil {
					tr.built[k] = r.name
					if l.Transport() != r.name {
						t.Errorf("rank %d: row %s built a link to rank %d that says %s", s.mc.Rank, r.name, p, l.Transport())
					}
				}
			}
			return err
		}
	}
	return tr
}

// rowCase is two ranks of one host or of two, each with or without
// shared memory and with its own FLAGCX_NET, and what they must get.
type rowCase struct {
	name      string
	noShm     [2]bool   // the rank has no segment (FLAGCX_SHM_DISABLE=1)
	otherHost bool      // rank 1 announces another host
	net       [2]string // each rank's Config.Net
	want      string    // the pair's transport at both ends
	tried     []string  // the rows whose connect got the pair, at both ends
	warn      bool      // rank 0 warns that it talks TCP on its own host
	err       error     // both ranks fail with it (want and tried unused)
}

// runRowCase connects the two ranks of tc, checks which rows each pair
// went through and what they built, and moves data over the links.
func runRowCase(t *testing.T, tc rowCase) {
	dir := shmTestDir(t)
	cfg := meshCfg(10 * time.Second)
	mcs := prepareMesh(t, 2, cfg, func(r int) shm.ShmConfig {
		sc := smallShm(dir)
		sc.Disable = tc.noShm[r]
		return sc
	}, func(r int, p *Peer) {
		if tc.otherHost && r == 1 {
			p.Host = "other-host"
		}
	})
	for r := range mcs {
		mcs[r].Net.Net = tc.net[r]
	}
	tr := traceRows(t, rows)
	ms, errs := connectAll(t, mcs)
	if tc.err != nil {
		for r, err := range errs {
			require.ErrorIs(t, err, tc.err, "rank %d", r)
			require.Nil(t, ms[r], "rank %d", r)
		}
		return
	}
	require.NoError(t, errors.Join(errs...))
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		require.Equal(t, tc.tried, tr.tried[k], "rank %d to %d: rows tried", k[0], k[1])
		require.Equal(t, tc.want, tr.built[k], "rank %d to %d: the row that built the link", k[0], k[1])
		require.Equal(t, tc.want, ms[k[0]].Links[k[1]].Transport(), "rank %d to %d", k[0], k[1])
	}
	if tc.warn {
		require.Len(t, ms[0].Warnings, 1)
		require.Contains(t, ms[0].Warnings[0], "rank 0 talks TCP to rank 1 of its own host: rank 1 has no shared memory")
	} else {
		require.Empty(t, ms[0].Warnings)
	}
	require.Empty(t, dirEntries(t, dir), "every segment is gone")
	exchange(t, ms[0].Links[1], ms[1].Links[0], 0, 1, []int{0, 1, 5000, 70000})
}

// TestRowsPickTransport: the transport table gives each kind of pair the
// transport the mesh gave it before the network plugin became a row of
// its own (shm first, then the plugin where both ends offer it, then TCP,
// and an error where one end requires the plugin and the pair cannot have
// it), and the row that carries a pair is the one whose connect built its
// link. The plugin loads once per process: the cases with it and those
// without run in a fresh process each.
func TestRowsPickTransport(t *testing.T) {
	sockets := []string{"ib", "tcp"} // the plugin refused: the pair falls to TCP
	withPlugin := []rowCase{
		{name: "one host with shared memory", want: "shm", tried: []string{"shm"}},
		{name: "one host with shared memory, FLAGCX_NET=IB", net: [2]string{NetIB, NetIB}, want: "shm", tried: []string{"shm"}},
		{name: "one host, shared memory disabled", noShm: [2]bool{true, true}, want: "tcp", tried: sockets},
		{name: "one host, shared memory disabled on one rank", noShm: [2]bool{false, true}, want: "tcp", tried: sockets, warn: true},
		{name: "one host without shared memory, FLAGCX_NET=IB", noShm: [2]bool{true, true}, net: [2]string{NetIB, NetIB}, want: "ib", tried: []string{"ib"}},
		{name: "other hosts, plugin offered by both", otherHost: true, want: "ib", tried: []string{"ib"}},
		{name: "other hosts, FLAGCX_NET=IB on both", otherHost: true, net: [2]string{NetIB, NetIB}, want: "ib", tried: []string{"ib"}},
		{name: "other hosts, plugin offered by one side", otherHost: true, net: [2]string{NetAuto, NetSocket}, want: "tcp", tried: sockets},
		{name: "other hosts, FLAGCX_NET=Socket on both", otherHost: true, net: [2]string{NetSocket, NetSocket}, want: "tcp", tried: sockets},
		{name: "other hosts, required by one side, refused by the other", otherHost: true, net: [2]string{NetIB, NetSocket}, err: ErrNoNetDevice},
	}
	withoutPlugin := []rowCase{
		{name: "other hosts", otherHost: true, want: "tcp", tried: sockets},
		{name: "one host with shared memory", want: "shm", tried: []string{"shm"}},
		{name: "one host, shared memory disabled", noShm: [2]bool{true, true}, want: "tcp", tried: sockets},
		{name: "FLAGCX_NET=IB", otherHost: true, net: [2]string{NetIB, NetIB}, err: ErrConfig},
	}
	t.Run("net plugin", func(t *testing.T) {
		testkit.InFreshProcess(t, func(t *testing.T) {
			useEmulatedIB(t)
			for _, tc := range withPlugin {
				t.Run(tc.name, func(t *testing.T) { runRowCase(t, tc) })
			}
		})
	})
	t.Run("no net plugin", func(t *testing.T) {
		testkit.InFreshProcess(t, func(t *testing.T) {
			t.Setenv("FLAGCX_NET_PLUGIN", filepath.Join(t.TempDir(), "no-such-plugin.so"))
			for _, tc := range withoutPlugin {
				t.Run(tc.name, func(t *testing.T) { runRowCase(t, tc) })
			}
		})
	})
}

// fakeNet is a network plugin that takes, refuses or fails pairs by a
// table both ends read, and carries what it takes over the pair's sockets.
type fakeNet struct {
	name  string
	take  map[[2]int]bool // by [lower rank, higher rank]; absent: refused
	fail  map[[2]int]bool
	check error
}

func (f fakeNet) Check(Config) error { return f.check }

func (f fakeNet) Negotiate(tl *tcp.TCPLink, _ Config, _ bool, rank, peer int) (Link, error) {
	k := [2]int{min(rank, peer), max(rank, peer)}
	switch {
	case f.fail[k]:
		return nil, fmt.Errorf("%s fails %v", f.name, k)
	case f.take[k]:
		return fakeLink{tl, f.name}, nil
	}
	return nil, nil
}

type fakeLink struct {
	*tcp.TCPLink
	name string
}

func (l fakeLink) Transport() string { return l.name }

// TestRowsFallThrough: network plugins are rows like the others. With two
// of them ahead of TCP, a pair goes to the first whose plugin both ends
// take, each one refused hands the pair's sockets to the next, and one
// that fails fails the pair's two ranks, naming the pair; a plugin whose
// Check fails stops Connect before any row runs.
func TestRowsFallThrough(t *testing.T) {
	base := []row{rows[0], rows[len(rows)-1]} // shm, tcp
	withNets := func(a, b fakeNet) []row {
		return []row{base[0],
			{name: a.name, canConnect: anyPair, sockets: true, net: a, connect: connectNet},
			{name: b.name, canConnect: anyPair, sockets: true, net: b, connect: connectNet},
			base[1]}
	}
	for _, tc := range []struct {
		name  string
		a, b  fakeNet
		tried map[[2]int][]string // by [rank, peer], both ways
		err   string              // every rank fails with it
	}{
		{
			name: "first, second or neither",
			a:    fakeNet{name: "net-a", take: map[[2]int]bool{{0, 1}: true}},
			b:    fakeNet{name: "net-b", take: map[[2]int]bool{{0, 1}: true, {0, 2}: true}},
			tried: map[[2]int][]string{
				{0, 1}: {"net-a"}, {0, 2}: {"net-a", "net-b"}, {1, 2}: {"net-a", "net-b", "tcp"},
			},
		},
		{
			name: "a plugin fails a pair",
			a:    fakeNet{name: "net-a"},
			b:    fakeNet{name: "net-b", fail: map[[2]int]bool{{0, 1}: true, {0, 2}: true, {1, 2}: true}},
			err:  "choosing the network to rank",
		},
		{
			name: "a plugin's check fails",
			a:    fakeNet{name: "net-a", check: fmt.Errorf("net-a: no device: %w", ErrConfig)},
			b:    fakeNet{name: "net-b"},
			err:  "net-a: no device",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shmTestDir(t)
			mcs := prepareMesh(t, 3, meshCfg(5*time.Second), func(int) shm.ShmConfig { return smallShm(dir) },
				func(r int, p *Peer) { p.Host = fmt.Sprint("host-", r) })
			tr := traceRows(t, withNets(tc.a, tc.b))
			ms, errs := connectAll(t, mcs)
			if tc.err != "" {
				for r, err := range errs {
					require.ErrorContains(t, err, tc.err, "rank %d", r)
				}
				return
			}
			require.NoError(t, errors.Join(errs...))
			for k, want := range tc.tried {
				for _, k := range [][2]int{k, {k[1], k[0]}} {
					require.Equal(t, want, tr.tried[k], "rank %d to %d", k[0], k[1])
					require.Equal(t, want[len(want)-1], ms[k[0]].Links[k[1]].Transport(), "rank %d to %d", k[0], k[1])
				}
				exchange(t, ms[k[0]].Links[k[1]], ms[k[1]].Links[k[0]], k[0], k[1], []int{0, 3, 70000})
			}
		})
	}
}

// TestRowsTable: the rows without sockets come first, a row with a
// network plugin has sockets (its offers travel on them), and the last
// row connects any pair, so that Connect always finds a row.
func TestRowsTable(t *testing.T) {
	for i, r := range rows {
		require.NotEmpty(t, r.name, "row %d", i)
		require.NotNil(t, r.canConnect, r.name)
		require.NotNil(t, r.connect, r.name)
		if r.net != nil {
			require.True(t, r.sockets, "%s has a network plugin, whose offers travel on the pair's sockets", r.name)
		}
		if i > 0 && rows[i-1].sockets {
			require.True(t, r.sockets, "%s, without sockets, comes after %s, with them", r.name, rows[i-1].name)
		}
	}
	require.True(t, rows[len(rows)-1].canConnect(Peer{Host: "a"}, Peer{Host: "b"}), "the last row connects any pair")
}
