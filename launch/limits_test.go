package launch

import (
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/sdk"
)

func TestCheckCapacity(t *testing.T) {
	const gib = 1 << 30
	roomy := hostCapacity{
		nprocLimit: 100000, userTasks: 40, pidMax: 4194304, threadsMax: 200000, systemTasks: 100, tasksPerRank: 10,
		mem: shm.HostMemory{ShmDir: "/dev/shm", ShmSizeBytes: 64 * gib, ShmFreeBytes: 64 * gib, RAMBytes: 128 * gib, AvailBytes: 120 * gib},
		shm: shm.DefaultShmConfig(),
	}
	with := func(f func(c *hostCapacity)) hostCapacity { c := roomy; f(&c); return c }
	noShm := func(c *hostCapacity) { c.shm.Disable = true; c.mem.AvailBytes = 1000 * gib }
	for _, tc := range []struct {
		name string
		np   int
		c    hostCapacity
		want []string // substrings of the error; nil: accepted
	}{
		{"fits", 64, roomy, nil},
		{"one rank needs no shared memory", 1, with(func(c *hostCapacity) { c.mem.ShmSizeBytes, c.mem.ShmFreeBytes = 1, 1 }), nil},
		{"user process limit", 20000, with(noShm), []string{
			"20,000 ranks are more than this host can run (at most 9,996): they need about 200,000 processes and threads (10 each)",
			"this user may start 99,960 more (ulimit -u 100,000, 40 running): raise ulimit -u"}},
		{"user limit, none left", 20, with(func(c *hostCapacity) { c.userTasks = 100100 }), []string{"(at most 0)", "may start 0 more"}},
		{"kernel thread limit", 40000, with(func(c *hostCapacity) { c.nprocLimit = 0; noShm(c) }), []string{
			"(at most 19,990)", "the kernel allows 199,900 more (pid_max 4,194,304, threads-max 200,000, 100 running)"}},
		{"pid_max below threads-max", 4000, with(func(c *hostCapacity) { c.nprocLimit, c.pidMax = 0, 32768; noShm(c) }), []string{
			"(at most 3,266)", "the kernel allows 32,668 more (pid_max 32,768"}},
		{"shared memory size", 200, with(func(c *hostCapacity) { c.mem.ShmSizeBytes, c.mem.ShmFreeBytes = gib, gib }), []string{
			"(at most 85)", "not enough shared memory", "/dev/shm holds 1 GiB", shm.EnvShmDisable}},
		{"shared memory free now", 100, with(func(c *hostCapacity) { c.mem.ShmFreeBytes = 100 << 20 }), []string{
			"(at most 2)", "/dev/shm has 100 MiB free", shm.EnvShmDisable}},
		{"memory without shared memory", 1000, with(func(c *hostCapacity) { noShm(c); c.mem.AvailBytes = 10 * gib }), []string{
			"(at most 640)", "each rank needs about 16 MiB of memory (16 MiB of its own) and 10 GiB is available: run fewer ranks"}},
		{"memory with the command's buffers", 100, with(func(c *hostCapacity) { noShm(c); c.mem.AvailBytes, c.rankBytes = 10*gib, 240<<20 }), []string{
			"(at most 40)", "each rank needs about 256 MiB", "(16 MiB of its own, 240 MiB for its command's buffers)"}},
		// 12 MiB segments from 64 ranks on; the page tables mapping them
		// grow with the square of the ranks.
		{"memory with segments and page tables", 1000, with(func(c *hostCapacity) { c.mem.AvailBytes = 24 * gib }), []string{
			"(at most 588)", "51.45 MiB of memory (16 MiB of its own, a 12 MiB shared-memory segment, 23.45 MiB of page tables", shm.EnvShmDisable}},
		{"the tighter limit is named", 100000, with(func(c *hostCapacity) { noShm(c); c.mem.AvailBytes = gib }), []string{
			"(at most 64)", "each rank needs about 16 MiB"}},
		{"unknown limits are not checked", 5000, hostCapacity{tasksPerRank: 10, shm: shm.DefaultShmConfig()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkCapacity(tc.np, tc.c)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.NotContains(t, err.Error(), "\n")
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", -12345: "-12,345", 1234567: "1,234,567"} {
		require.Equal(t, want, commas(n))
	}
}

// TestLocalRefusesBeforeStarting: an absurd rank count fails at once, with
// the limit in the message, before Local looks for the program to start.
func TestLocalRefusesBeforeStarting(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the limits are read from /proc")
	}
	old := executable
	defer func() { executable = old }()
	executable = func() (string, error) {
		t.Error("Local went on to start ranks")
		return "", errors.New("started")
	}
	err := Local(1<<30, []string{"no-such-subcommand"}, nil, nil, nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorContains(t, err, "1,073,741,824 ranks are more than this host can run (at most ")

	err = Local(2, nil, nil, nil, nil, RankBytes(1<<62))
	require.ErrorContains(t, err, "for its command's buffers")
}
