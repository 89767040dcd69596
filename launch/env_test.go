package launch

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestFromEnv(t *testing.T) {
	secret := strings.Repeat("0f", 16)
	cases := []struct {
		name string
		env  map[string]string
		ok   bool
		// errs: substrings the error must contain (each one names the
		// variable and what to do); empty means success.
		errs  []string
		check func(t *testing.T, j Job)
	}{
		{name: "no launcher", env: map[string]string{"HOME": "/root"}},
		{name: "RANK alone is not torchrun", env: map[string]string{"RANK": "3"}},
		{name: "slurm batch shell without a step is not a launch",
			env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "77"}},
		{name: "unique id without rank",
			env:  map[string]string{EnvUniqueID: "x"},
			errs: []string{EnvUniqueID, EnvRank, EnvNRanks}},
		{name: "mpirun with FLAGCX_COMM_ID",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
				"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
				"PMIX_NAMESPACE": "prterun-host-1234@1", EnvCommID: "10.0.0.1:29500"},
			ok: true,
			check: func(t *testing.T, j Job) {
				require.Equal(t, "mpirun", j.Launcher)
				require.Equal(t, 1, j.Rank)
				require.Equal(t, 4, j.NRanks)
				require.Equal(t, 1, j.LocalRank)
				require.Equal(t, 2, j.LocalSize)
				require.Equal(t, "10.0.0.1:29500", j.Addr)
				require.Equal(t, EnvCommID, j.AddrFrom)
				require.Empty(t, j.File)
				require.False(t, j.UserSecret)
				require.Equal(t, deriveSecret("mpirun", "PMIX_NAMESPACE=prterun-host-1234@1", "10.0.0.1:29500", 4), j.Secret)
				require.Equal(t, DefaultTimeout, j.Timeout)
			}},
		{name: "mpirun with FLAGCX_COMM_SECRET",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
				EnvCommID: "h:1", EnvCommSecret: secret},
			ok: true,
			check: func(t *testing.T, j Job) {
				require.True(t, j.UserSecret)
				require.Equal(t, secret, hex.EncodeToString(j.Secret[:]))
			}},
		{name: "malformed secret",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
				EnvCommID: "h:1", EnvCommSecret: "abc"},
			errs: []string{EnvCommSecret, "32 hex digits"}},
		{name: "malformed rank",
			env:  map[string]string{"OMPI_COMM_WORLD_RANK": "one", "OMPI_COMM_WORLD_SIZE": "2"},
			errs: []string{"OMPI_COMM_WORLD_RANK", `"one"`, "not an integer"}},
		{name: "malformed size",
			env:  map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2x"},
			errs: []string{"PMI_SIZE", "not an integer"}},
		{name: "rank not below size",
			env:  map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"},
			errs: []string{"OMPI_COMM_WORLD_RANK=4", "0..3", "OMPI_COMM_WORLD_SIZE=4"}},
		{name: "negative rank",
			env:  map[string]string{EnvRank: "-1", EnvNRanks: "4"},
			errs: []string{"FLAGCX_RANK=-1", "0..3"}},
		{name: "size zero",
			env:  map[string]string{"PMI_RANK": "0", "PMI_SIZE": "0"},
			errs: []string{"PMI_SIZE=0", "at least one rank"}},
		{name: "rank without size",
			env:  map[string]string{EnvRank: "0"},
			errs: []string{EnvRank, EnvNRanks, "set both"}},
		{name: "garbage unique id",
			env:  map[string]string{EnvRank: "0", EnvNRanks: "2", EnvUniqueID: "garbage"},
			errs: []string{EnvUniqueID}},
		{name: "torchrun",
			env: map[string]string{"RANK": "2", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "8",
				"MASTER_ADDR": "node7", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc"},
			ok: true,
			check: func(t *testing.T, j Job) {
				require.Equal(t, "torchrun", j.Launcher)
				require.Equal(t, "node7:29500", j.Addr)
				require.Equal(t, "TORCHELASTIC_RUN_ID=abc", j.Identity)
			}},
		{name: "torchrun with the agent's store on MASTER_PORT",
			env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fd00::1", "MASTER_PORT": "29500",
				"TORCHELASTIC_USE_AGENT_STORE": "True"},
			ok: true,
			check: func(t *testing.T, j Job) {
				require.Equal(t, "[fd00::1]:29501", j.Addr)
				require.Contains(t, j.AddrFrom, "MASTER_PORT+1")
			}},
		{name: "FLAGCX_COMM_ID wins over MASTER_ADDR",
			env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1",
				EnvCommID: "b:2"},
			ok:    true,
			check: func(t *testing.T, j Job) { require.Equal(t, "b:2", j.Addr) }},
		{name: "MASTER_ADDR without MASTER_PORT",
			env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a"},
			errs: []string{"MASTER_PORT", EnvCommID}},
		{name: "bad MASTER_PORT",
			env:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "99999"},
			errs: []string{`MASTER_PORT="99999"`}},
		{name: "bad FLAGCX_COMM_ID",
			env:  map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", EnvCommID: "10.0.0.1"},
			errs: []string{EnvCommID, "host:port"}},
		{name: "torchrun wins over an outer mpirun",
			env: map[string]string{"RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "m", "MASTER_PORT": "1",
				"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
			ok:    true,
			check: func(t *testing.T, j Job) { require.Equal(t, "torchrun", j.Launcher); require.Equal(t, 5, j.Rank) }},
		{name: "mpirun on one host: file rendezvous",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "3", "OMPI_MCA_ess_base_jobid": "4242"},
			ok: true,
			check: func(t *testing.T, j Job) {
				require.Empty(t, j.Addr)
				require.Equal(t, os.TempDir(), filepath.Dir(j.File))
				require.Contains(t, filepath.Base(j.File), "flagcx-")
				require.Equal(t, "OMPI_MCA_ess_base_jobid=4242", j.Identity)
			}},
		{name: "mpirun over hosts without an address",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			errs: []string{"OMPI_COMM_WORLD_SIZE=4", "mpirun", EnvCommID + "=host:port", "MASTER_ADDR"}},
		{name: "srun on one node: file rendezvous",
			env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
				"SLURM_JOB_ID": "99", "SLURM_STEP_NUM_NODES": "1"},
			ok: true,
			check: func(t *testing.T, j Job) {
				require.Equal(t, "slurm", j.Launcher)
				require.NotEmpty(t, j.File)
				require.Equal(t, "SLURM_JOB_ID=99,SLURM_STEP_ID=0", j.Identity)
			}},
		{name: "srun on two nodes without an address",
			env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
				"SLURM_STEP_NUM_NODES": "2"},
			errs: []string{"SLURM_NTASKS=2", "srun", EnvCommID}},
		{name: "srun tasks per node equal to the task count",
			env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEPID": "3",
				"SLURM_NTASKS_PER_NODE": "4"},
			ok:    true,
			check: func(t *testing.T, j Job) { require.NotEmpty(t, j.File) }},
		{name: "single rank needs no address",
			env:   map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1"},
			ok:    true,
			check: func(t *testing.T, j Job) { require.NotEmpty(t, j.File) }},
		{name: "timeout in seconds",
			env: map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", EnvTimeout: "2.5"},
			ok:  true,
			check: func(t *testing.T, j Job) {
				require.Equal(t, 2500*time.Millisecond, j.Timeout)
			}},
		{name: "timeout as a duration",
			env:   map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", EnvTimeout: "2m"},
			ok:    true,
			check: func(t *testing.T, j Job) { require.Equal(t, 2*time.Minute, j.Timeout) }},
		{name: "bad timeout",
			env:  map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", EnvTimeout: "soon"},
			errs: []string{EnvTimeout, `"soon"`, "seconds"}},
		{name: "negative timeout",
			env:  map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", EnvTimeout: "-3"},
			errs: []string{EnvTimeout, "positive"}},
		{name: "hand launch with FLAGCX_COMM_ID",
			env: map[string]string{EnvRank: "1", EnvNRanks: "2", EnvCommID: "127.0.0.1:4000", EnvCommSecret: secret},
			ok:  true,
			check: func(t *testing.T, j Job) {
				require.Equal(t, "flagcx", j.Launcher)
				require.Equal(t, "127.0.0.1:4000", j.Addr)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, ok, err := FromEnv(lookupOf(c.env))
			if len(c.errs) > 0 {
				require.Error(t, err)
				require.False(t, ok)
				for _, s := range c.errs {
					require.Contains(t, err.Error(), s)
				}
				require.NotContains(t, err.Error(), "\n")
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.ok, ok)
			if c.check != nil {
				c.check(t, j)
			}
		})
	}
}

func TestFromEnvUniqueID(t *testing.T) {
	s := "127.0.0.1:29500#" + strings.Repeat("ab", 16)
	j, ok, err := FromEnv(lookupOf(map[string]string{EnvRank: "1", EnvNRanks: "2", EnvUniqueID: s}))
	require.NoError(t, err)
	require.True(t, ok)
	require.NotNil(t, j.GivenID)
	id, err := j.ID()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:29500", id.Addr)
}

// The secret derived from a launcher's job identity is the same on every
// rank of a job and differs between jobs.
func TestDerivedSecret(t *testing.T) {
	job := func(rank, ns string) Job {
		j, ok, err := FromEnv(lookupOf(map[string]string{"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": "2",
			"PMIX_NAMESPACE": ns, EnvCommID: "10.1.1.1:5000"}))
		require.NoError(t, err)
		require.True(t, ok)
		return j
	}
	require.Equal(t, job("0", "a").Secret, job("1", "a").Secret)
	require.NotEqual(t, job("0", "a").Secret, job("0", "b").Secret)
	// The id file of one job is the same path on every rank.
	f := func(rank, jobid string) string {
		j, _, err := FromEnv(lookupOf(map[string]string{"SLURM_PROCID": rank, "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
			"SLURM_JOB_ID": jobid, "SLURM_NNODES": "1"}))
		require.NoError(t, err)
		return j.File
	}
	require.Equal(t, f("0", "1"), f("1", "1"))
	require.NotEqual(t, f("0", "1"), f("0", "2"))
}

func TestIDFileWait(t *testing.T) {
	dir := t.TempDir()
	j := Job{Launcher: "mpirun", Rank: 1, NRanks: 2, File: filepath.Join(dir, "id"), Timeout: 150 * time.Millisecond}

	start := time.Now()
	_, err := j.ID()
	require.Error(t, err)
	require.Less(t, time.Since(start), 2*time.Second)
	for _, s := range []string{"rank 0", j.File, EnvCommID, EnvTimeout} {
		require.Contains(t, err.Error(), s)
	}

	// A file left over from an earlier job is not read.
	require.NoError(t, writeFileAtomic(j.File, []byte("old#00\n")))
	old := processStart.Add(-time.Hour)
	require.NoError(t, os.Chtimes(j.File, old, old))
	_, err = j.ID()
	require.ErrorContains(t, err, "waited")

	// A fresh file with garbage is an error naming the file, not a wait.
	require.NoError(t, writeFileAtomic(j.File, []byte("garbage\n")))
	st, err := os.Stat(j.File)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	_, err = j.ID()
	require.ErrorContains(t, err, j.File)

	want := "127.0.0.1:4242#" + strings.Repeat("cd", 16)
	require.NoError(t, writeFileAtomic(j.File, []byte(want+"\n")))
	id, err := j.ID()
	require.NoError(t, err)
	require.Equal(t, want, id.String())

	// Only rank 0 removes the file.
	j.Joined()
	require.FileExists(t, j.File)
	j0 := j
	j0.Rank = 0
	j0.Joined()
	require.NoFileExists(t, j.File)
	j0.Joined()
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"30": 30 * time.Second, "0.5": 500 * time.Millisecond, "1m30s": 90 * time.Second} {
		got, err := ParseTimeout(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, in := range []string{"", "x", "0", "-1s", "1e300"} {
		_, err := ParseTimeout(in)
		require.Error(t, err, in)
	}
}

func TestStripLauncherEnv(t *testing.T) {
	in := []string{"PATH=/bin", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_NODE_RANK=0", "RANK=3", "WORLD_SIZE=4",
		"MASTER_ADDR=x", "SLURM_PROCID=2", "SLURM_JOB_ID=7", "FLAGCX_RANK=0", "FLAGCX_UNIQUE_ID=x", "FLAGCX_DEBUG=INFO",
		"PMI_RANK=0", EnvProgress + "=1"}
	require.Equal(t, []string{"PATH=/bin", "SLURM_JOB_ID=7", "FLAGCX_DEBUG=INFO"}, stripLauncherEnv(in))
}
