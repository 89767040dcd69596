package launch

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// A rendezvous beyond loopback guarded only by a derived secret is said to
// be unauthenticated (by rank 0, once), or refused with
// FLAGCX_REQUIRE_SECRET=1; loopback and a user's secret are quiet.
func TestUnauthenticatedRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	_, freeLoopPort, _ := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, ln.Close())

	// 192.0.2.1 (TEST-NET-1) is on no interface here: rank 0 warns, then
	// fails to host the rendezvous there, which these cases ignore.
	const remote = "192.0.2.1"
	secret := strings.Repeat("5a", 16)
	tests := []struct {
		name    string
		env     map[string]string
		warn    bool   // rank 0 writes the warning
		errHas  string // ID fails with this (ErrInvalidUsage); "" for no such error
		noError bool   // ID must succeed
	}{
		{name: "torchrun by hand, remote address, no secret, rank 0",
			env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": remote, "MASTER_PORT": "29500"},
			warn: true},
		{name: "other ranks stay quiet",
			env:     map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": remote, "MASTER_PORT": "29500"},
			noError: true},
		{name: "mpirun with FLAGCX_COMM_ID",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
				"PMIX_NAMESPACE": "prterun-x@1", EnvCommID: remote + ":29500"},
			warn: true},
		{name: "loopback",
			env:     map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": freeLoopPort},
			noError: true},
		{name: "localhost",
			env:     map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"},
			noError: true},
		{name: "IPv6 loopback",
			env:     map[string]string{"RANK": "1", "WORLD_SIZE": "2", EnvCommID: "[::1]:29500", EnvRequireSecret: "1"},
			noError: true},
		{name: "user secret",
			env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": remote, "MASTER_PORT": "29500",
				EnvCommSecret: secret}},
		{name: "required and missing",
			env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": remote, "MASTER_PORT": "29500",
				EnvRequireSecret: "1"},
			errHas: "FLAGCX_REQUIRE_SECRET=1, but FLAGCX_COMM_SECRET is not set"},
		{name: "required and missing on rank 0: an error, not a warning",
			env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", EnvCommID: remote + ":29500",
				EnvRequireSecret: "true"},
			errHas: "export FLAGCX_COMM_SECRET=$(openssl rand -hex 16)"},
		{name: "required and given",
			env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": remote, "MASTER_PORT": "29500",
				EnvRequireSecret: "1", EnvCommSecret: secret},
			noError: true},
		{name: "required, explicitly off",
			env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": remote, "MASTER_PORT": "29500",
				EnvRequireSecret: "0"},
			noError: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, ok, err := FromEnv(lookupOf(tc.env))
			require.NoError(t, err)
			require.True(t, ok)
			var stderr bytes.Buffer
			j.Stderr = &stderr
			calls := 1
			if tc.warn {
				calls = 2 // a job's warning is said once
			}
			for i := 0; i < calls; i++ {
				_, err = j.ID()
				switch {
				case tc.errHas != "":
					require.ErrorIs(t, err, sdk.ErrInvalidUsage)
					require.ErrorContains(t, err, tc.errHas)
					require.ErrorContains(t, err, j.Addr)
				case tc.noError:
					require.NoError(t, err)
				}
			}
			if !tc.warn {
				require.Empty(t, stderr.String())
				return
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			require.Len(t, lines, 1, "one warning per job, however often ID is called")
			for _, s := range []string{"unauthenticated", j.Addr, "export FLAGCX_COMM_SECRET=$(openssl rand -hex 16)", "same value to every rank", EnvRequireSecret} {
				require.Contains(t, lines[0], s)
			}
		})
	}
}

func TestRequireSecretValue(t *testing.T) {
	_, _, err := FromEnv(lookupOf(map[string]string{"RANK": "0", "WORLD_SIZE": "2", EnvCommID: "192.0.2.1:1", EnvRequireSecret: "maybe"}))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorContains(t, err, EnvRequireSecret)
}

// TestCheckSettings: what a local launch never reads itself, malformed, is
// one error naming the variable; well-formed or unset, nothing.
func TestCheckSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // "" for no error
	}{
		{"unset", nil, ""},
		{"good", map[string]string{"FLAGCX_COMM_SECRET": strings.Repeat("ab", 16), "FLAGCX_COMM_ID": "10.0.0.1:29500", "FLAGCX_TIMEOUT": "5s"}, ""},
		{"short secret", map[string]string{"FLAGCX_COMM_SECRET": "abc"}, "FLAGCX_COMM_SECRET must be 32 hex digits (e.g. from `openssl rand -hex 16`), got 3 characters"},
		{"secret not hex", map[string]string{"FLAGCX_COMM_SECRET": strings.Repeat("zz", 16)}, "FLAGCX_COMM_SECRET must be 32 hex digits"},
		{"comm id not host:port", map[string]string{"FLAGCX_COMM_ID": "notaport"}, `FLAGCX_COMM_ID="notaport" is not host:port`},
		{"comm id port out of range", map[string]string{"FLAGCX_COMM_ID": "node1:70000"}, `FLAGCX_COMM_ID="node1:70000" is not host:port`},
		{"timeout", map[string]string{"FLAGCX_TIMEOUT": "soon"}, "FLAGCX_TIMEOUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSettings(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
