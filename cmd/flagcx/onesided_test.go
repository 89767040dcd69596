package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchOneSided: `flagcx bench put|get` prints nccl-tests' table with
// a row per size, each transfer checked byte for byte, over each window
// kind and transport, on host ranks and on emulated devices beside them.
func TestBenchOneSided(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"put, shared windows", nil, []string{"put", "--np", "3"}},
		{"get, shared windows", nil, []string{"get", "--np", "2"}},
		{"put, registered windows", nil, []string{"put", "--np", "2", "--window", "register"}},
		{"put over TCP", []string{"FLAGCX_SHM_DISABLE=1"}, []string{"put", "--np", "2"}},
		{"get over TCP", []string{"FLAGCX_SHM_DISABLE=1"}, []string{"get", "--np", "2", "--window", "register"}},
		{"put, emulated devices and a host rank", nil, []string{"--emulated", "put", "--ranks", "nvidia:2,host:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench"}, tc.args...)
			if args[1] == "--emulated" {
				args = append([]string{"--plugin-dir", pluginDir(t), "--emulated", "bench"}, tc.args[1:]...)
			}
			args = append(args, "-b", "1", "-e", "5M", "-f", "9", "-w", "1", "-n", "3", "-c", "1")
			r := runFlagcx(t, 2*time.Minute, cleanEnv(tc.env...), args...)
			require.Zero(t, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, "one at a time")
			require.Contains(t, r.stdout, "# Out of bounds values : 0 OK\n")
			// 1, 9, 81, ... 4782969 bytes: 8 rows, each checked (#wrong 0).
			rows := regexp.MustCompile(`(?m)^ +\d+ +\d+ +int8 +none +-1 .* 0( |$)`).FindAllString(r.stdout, -1)
			require.Len(t, rows, 8, "stdout:\n%s", r.stdout)
		})
	}
}
