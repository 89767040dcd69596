package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// probe is what a rank of TestHosts saw from inside its emulated host.
type probe struct {
	Rank, LocalRank, LocalSize, NRanks int
	Host, PidNS                        string
	Shm                                []string // /dev/shm while every rank has its file there
}

func init() {
	Worker("testkit-hosts-probe", func(Rank) (any, error) {
		p, err := hostsProbe()
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(p)
		fmt.Println(string(b))
		return nil, err
	})
}

// hostsProbe makes its /dev/shm file, meets every rank at rank 0's
// FLAGCX_COMM_ID (so that all files exist), lists /dev/shm, meets again
// and removes its file.
func hostsProbe() (probe, error) {
	var p probe
	for name, v := range map[string]*int{"FLAGCX_RANK": &p.Rank, "FLAGCX_LOCAL_RANK": &p.LocalRank, "FLAGCX_LOCAL_SIZE": &p.LocalSize, "FLAGCX_NRANKS": &p.NRanks} {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
		*v = n
	}
	p.Host, _ = os.Hostname()
	p.PidNS, _ = os.Readlink("/proc/self/ns/pid")
	file := filepath.Join("/dev/shm", fmt.Sprintf("testkit-probe-%d", p.Rank))
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return p, err
	}
	defer os.Remove(file)
	meet, err := probeMeeting(os.Getenv("FLAGCX_COMM_ID"), p.Rank, p.NRanks)
	if err != nil {
		return p, err
	}
	if err := meet(); err != nil {
		return p, err
	}
	entries, _ := os.ReadDir("/dev/shm")
	for _, e := range entries {
		p.Shm = append(p.Shm, e.Name())
	}
	return p, meet()
}

// probeMeeting returns a barrier of n ranks over TCP at addr (rank 0
// listens); every wait ends within 20 s.
func probeMeeting(addr string, rank, n int) (func() error, error) {
	deadline := time.Now().Add(20 * time.Second)
	if rank == 0 {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		var peers []*bufio.ReadWriter
		for len(peers) < n-1 {
			_ = l.(*net.TCPListener).SetDeadline(deadline)
			c, err := l.Accept()
			if err != nil {
				return nil, fmt.Errorf("rank 0 waiting for %d ranks: %w", n-1-len(peers), err)
			}
			_ = c.SetDeadline(deadline)
			peers = append(peers, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c)))
		}
		return func() error {
			for _, p := range peers {
				if _, err := p.ReadString('\n'); err != nil {
					return err
				}
			}
			for _, p := range peers {
				if _, err := p.WriteString("go\n"); err != nil {
					return err
				}
				if err := p.Flush(); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
	var c net.Conn
	var err error
	for c == nil {
		if c, err = net.DialTimeout("tcp", addr, time.Second); err != nil && time.Now().After(deadline) {
			return nil, err
		} else if err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	_ = c.SetDeadline(deadline)
	rw := bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
	return func() error {
		if _, err := rw.WriteString("ready\n"); err != nil {
			return err
		}
		if err := rw.Flush(); err != nil {
			return err
		}
		_, err := rw.ReadString('\n')
		return err
	}, nil
}

// TestHosts: ranks started per emulated host see their host's name, their
// own pid namespace and /dev/shm (the files of their host's ranks only),
// and reach rank 0 over the emulated network; nothing is left behind.
func TestHosts(t *testing.T) {
	hs := Hosts(t, 2)
	require.Len(t, hs.Hosts, 2)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := hs.Ranks(ctx, 2, out, "env", EnvWorker+"=testkit-hosts-probe", EnvRank+"=0", EnvNranks+"=1", EnvID+"=00", EnvOut+"=/dev/null", os.Args[0])
	res, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", res)

	pidNS := map[string]string{}
	for r := 0; r < 4; r++ {
		o := RankResult(out, r)
		require.True(t, o.Ended && o.Code == 0, "rank %d: %+v", r, o)
		var p probe
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(o.Stdout)), &p), "rank %d: %+v", r, o)
		host := hs.Hosts[r/2]
		require.Equal(t, probe{Rank: r, LocalRank: r % 2, LocalSize: 2, NRanks: 4, Host: host.Name, PidNS: p.PidNS,
			Shm: []string{fmt.Sprintf("testkit-probe-%d", r/2*2), fmt.Sprintf("testkit-probe-%d", r/2*2+1)}}, p)
		if ns, seen := pidNS[host.Name]; seen {
			require.Equal(t, ns, p.PidNS, "ranks of one host share its pid namespace")
		}
		pidNS[host.Name] = p.PidNS
	}
	self, _ := os.Readlink("/proc/self/ns/pid")
	names := []string{pidNS[hs.Hosts[0].Name], pidNS[hs.Hosts[1].Name], self}
	sort.Strings(names)
	require.NotEqual(t, names[0], names[1])
	require.NotEqual(t, names[1], names[2])
	for _, h := range hs.Hosts {
		require.NoError(t, h.Leftovers())
	}
}

// TestHostsLeftovers: a process or /dev/shm file left in a host is named.
func TestHostsLeftovers(t *testing.T) {
	hs := Hosts(t, 1)
	h := hs.Hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h.Command(ctx, "bash", "-c", "touch /dev/shm/left-here; sleep 300 >/dev/null 2>&1 &").CombinedOutput()
	require.NoError(t, err, "%s", out)
	err = h.Leftovers()
	require.Error(t, err)
	require.Contains(t, err.Error(), "sleep 300")
	require.Contains(t, err.Error(), "/dev/shm: left-here")
	_, err = os.Stat("/dev/shm/left-here")
	require.True(t, os.IsNotExist(err), "the host's /dev/shm is its own")
	require.NoError(t, h.Kill())
}
