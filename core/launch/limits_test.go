package launch

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

func TestCheckCapacity(t *testing.T) {
	const gib = 1 << 30
	roomy := hostCapacity{
		userTasks: 100000, systemTasks: 200000, tasksPerRank: 6,
		mem: hostnet.HostMemory{ShmDir: "/dev/shm", ShmSizeBytes: 64 * gib, ShmFreeBytes: 64 * gib, RAMBytes: 128 * gib, AvailBytes: 120 * gib},
		shm: hostnet.DefaultShmConfig(),
	}
	with := func(f func(c *hostCapacity)) hostCapacity { c := roomy; f(&c); return c }
	for _, tc := range []struct {
		name string
		np   int
		c    hostCapacity
		want []string // substrings of the error; nil: accepted
	}{
		{"fits", 64, roomy, nil},
		{"one rank needs no shared memory", 1, with(func(c *hostCapacity) { c.mem.ShmSizeBytes, c.mem.ShmFreeBytes = 1, 1 }), nil},
		{"user process limit", 20000, roomy, []string{"20000 ranks are more", "this user may start 100000 more (ulimit -u)", "at most 16666 ranks"}},
		{"kernel thread limit", 40000, with(func(c *hostCapacity) { c.userTasks = 0 }), []string{"the kernel allows 200000 more", "at most 33333 ranks"}},
		{"shared memory size", 200, with(func(c *hostCapacity) { c.mem.ShmSizeBytes, c.mem.ShmFreeBytes = gib, gib }), []string{"not enough shared memory", "/dev/shm holds 1 GiB", hostnet.EnvShmDisable}},
		{"shared memory free now", 100, with(func(c *hostCapacity) { c.mem.ShmFreeBytes = 100 << 20 }), []string{"/dev/shm has 100 MiB free", hostnet.EnvShmDisable}},
		{"memory", 1000, with(func(c *hostCapacity) { c.mem.AvailBytes = 10 * gib; c.mem.RAMBytes = 1000 * gib; c.shm.Disable = true }), []string{"each rank needs about 32 MiB", "10 GiB is available", "at most 320 ranks"}},
		{"unknown limits are not checked", 5000, hostCapacity{tasksPerRank: 6, shm: hostnet.DefaultShmConfig()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.shm = tc.c.shm.ForRanks(tc.np)
			err := checkCapacity(tc.np, tc.c)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// TestLocalRefusesBeforeStarting: an absurd rank count fails at once, with
// the limit in the message, and no rank is started (the command would
// fail if one ran: it does not exist).
func TestLocalRefusesBeforeStarting(t *testing.T) {
	err := Local(1<<30, []string{"no-such-subcommand"}, nil, nil, nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorContains(t, err, "are more than this host can run")
}
