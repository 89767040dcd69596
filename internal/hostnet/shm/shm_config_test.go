package shm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

func TestShmConfigFromLookup(t *testing.T) {
	def := DefaultShmConfig()
	with := func(f func(*ShmConfig)) ShmConfig { c := def; f(&c); return c }
	tests := []struct {
		name string
		env  map[string]string
		want ShmConfig
		bad  []string // substrings the error must contain; nil: no error
	}{
		{"defaults", nil, ShmConfig{P2PBytes: 8 << 20, WindowBytes: 0, Dir: "/dev/shm"}, nil},
		{"empty values keep defaults", map[string]string{EnvShmP2PSize: "", EnvShmWindowSize: " ", EnvShmDisable: ""}, def, nil},
		{"p2p bytes", map[string]string{EnvShmP2PSize: "65536"}, with(func(c *ShmConfig) { c.P2PBytes = 64 << 10 }), nil},
		{"p2p K", map[string]string{EnvShmP2PSize: "512K"}, with(func(c *ShmConfig) { c.P2PBytes = 512 << 10 }), nil},
		{"p2p M with spaces", map[string]string{EnvShmP2PSize: " 16M "}, with(func(c *ShmConfig) { c.P2PBytes = 16 << 20 }), nil},
		{"p2p MiB", map[string]string{EnvShmP2PSize: "2MiB"}, with(func(c *ShmConfig) { c.P2PBytes = 2 << 20 }), nil},
		{"p2p lower-case k", map[string]string{EnvShmP2PSize: "128k"}, with(func(c *ShmConfig) { c.P2PBytes = 128 << 10 }), nil},
		{"p2p 1G is the maximum", map[string]string{EnvShmP2PSize: "1G"}, with(func(c *ShmConfig) { c.P2PBytes = 1 << 30 }), nil},
		{"p2p below 64K", map[string]string{EnvShmP2PSize: "63K"}, def, []string{EnvShmP2PSize, `"63K"`, "64K to 1G"}},
		{"p2p one byte short of 64K", map[string]string{EnvShmP2PSize: "65535"}, def, []string{EnvShmP2PSize, `"65535"`}},
		{"p2p above 1G", map[string]string{EnvShmP2PSize: "1025M"}, def, []string{EnvShmP2PSize, `"1025M"`, "64K to 1G"}},
		{"p2p zero", map[string]string{EnvShmP2PSize: "0"}, def, []string{EnvShmP2PSize, `"0"`}},
		{"p2p negative", map[string]string{EnvShmP2PSize: "-8M"}, def, []string{EnvShmP2PSize, `"-8M"`}},
		{"p2p word", map[string]string{EnvShmP2PSize: "big"}, def, []string{EnvShmP2PSize, `"big"`}},
		{"p2p bad unit", map[string]string{EnvShmP2PSize: "8Q"}, def, []string{EnvShmP2PSize, `"8Q"`}},
		{"window M", map[string]string{EnvShmWindowSize: "4M"}, with(func(c *ShmConfig) { c.WindowBytes = 4 << 20 }), nil},
		{"window 64K is the minimum", map[string]string{EnvShmWindowSize: "64K"}, with(func(c *ShmConfig) { c.WindowBytes = 64 << 10 }), nil},
		{"window below 64K", map[string]string{EnvShmWindowSize: "32K"}, def, []string{EnvShmWindowSize, `"32K"`, "64K to 1G"}},
		{"window above 1G", map[string]string{EnvShmWindowSize: "2G"}, def, []string{EnvShmWindowSize, `"2G"`}},
		{"both sizes", map[string]string{EnvShmP2PSize: "1M", EnvShmWindowSize: "8M"}, with(func(c *ShmConfig) { c.P2PBytes, c.WindowBytes = 1<<20, 8<<20 }), nil},
		{"disable 1", map[string]string{EnvShmDisable: "1"}, with(func(c *ShmConfig) { c.Disable = true }), nil},
		{"disable true", map[string]string{EnvShmDisable: "true"}, with(func(c *ShmConfig) { c.Disable = true }), nil},
		{"disable TRUE", map[string]string{EnvShmDisable: "TRUE"}, with(func(c *ShmConfig) { c.Disable = true }), nil},
		{"disable yes", map[string]string{EnvShmDisable: "yes"}, with(func(c *ShmConfig) { c.Disable = true }), nil},
		{"disable on", map[string]string{EnvShmDisable: " on "}, with(func(c *ShmConfig) { c.Disable = true }), nil},
		{"disable 0", map[string]string{EnvShmDisable: "0"}, def, nil},
		{"disable false", map[string]string{EnvShmDisable: "false"}, def, nil},
		{"disable no", map[string]string{EnvShmDisable: "no"}, def, nil},
		{"disable off", map[string]string{EnvShmDisable: "Off"}, def, nil},
		{"disable maybe", map[string]string{EnvShmDisable: "maybe"}, def, []string{EnvShmDisable, `"maybe"`, "allowed are 1"}},
		{"disable 2", map[string]string{EnvShmDisable: "2"}, def, []string{EnvShmDisable, `"2"`}},
		{"disable with sizes", map[string]string{EnvShmDisable: "1", EnvShmP2PSize: "1M"}, with(func(c *ShmConfig) { c.Disable, c.P2PBytes = true, 1<<20 }), nil},
		{"removed slot size", map[string]string{"FLAGCX_SHM_SLOT_SIZE": "1M"}, def,
			[]string{"FLAGCX_SHM_SLOT_SIZE", `"1M"`, "no longer exists", EnvShmP2PSize, EnvShmWindowSize}},
		{"removed slots", map[string]string{"FLAGCX_SHM_SLOTS": "16"}, def,
			[]string{"FLAGCX_SHM_SLOTS", `"16"`, "no longer exists", EnvShmP2PSize}},
		{"removed variable next to good ones", map[string]string{"FLAGCX_SHM_SLOTS": "4", EnvShmP2PSize: "1M"}, def,
			[]string{"FLAGCX_SHM_SLOTS", EnvShmP2PSize}},
		{"removed variable set empty is ignored", map[string]string{"FLAGCX_SHM_SLOT_SIZE": "", "FLAGCX_SHM_SLOTS": " "}, def, nil},
		{"every bad variable reported together", map[string]string{
			EnvShmP2PSize: "1K", EnvShmWindowSize: "x", EnvShmDisable: "perhaps", "FLAGCX_SHM_SLOT_SIZE": "4M", "FLAGCX_SHM_SLOTS": "8",
		}, def, []string{EnvShmP2PSize, `"1K"`, EnvShmWindowSize, `"x"`, EnvShmDisable, `"perhaps"`, "FLAGCX_SHM_SLOT_SIZE", "FLAGCX_SHM_SLOTS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShmConfigFromLookup(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			// A bad setting gives the defaults, not a half-applied config.
			require.Equal(t, tc.want, got)
			if tc.bad == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, wire.ErrConfig), "error %v should wrap ErrConfig", err)
			for _, s := range tc.bad {
				require.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestShmConfigFromEnv(t *testing.T) {
	t.Setenv(EnvShmP2PSize, "2M")
	t.Setenv(EnvShmWindowSize, "")
	t.Setenv(EnvShmDisable, "1")
	t.Setenv("FLAGCX_SHM_SLOT_SIZE", "")
	t.Setenv("FLAGCX_SHM_SLOTS", "")
	sc, err := ShmConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, ShmConfig{Disable: true, P2PBytes: 2 << 20, Dir: DefaultShmDir}, sc)

	t.Setenv("FLAGCX_SHM_SLOTS", "8")
	_, err = ShmConfigFromEnv()
	require.ErrorIs(t, err, wire.ErrConfig)
	require.Contains(t, err.Error(), `FLAGCX_SHM_SLOTS="8"`)
	require.Contains(t, err.Error(), EnvShmP2PSize)
}

func TestShmConfigForRanks(t *testing.T) {
	tests := []struct {
		nranks, window, want int
	}{
		{0, 0, 32 << 20},
		{1, 0, 32 << 20},
		{2, 0, 32 << 20},
		{8, 0, 32 << 20},
		{9, 0, (256 << 20) / 9 &^ 4095},
		{12, 0, (256 << 20) / 12 &^ 4095},
		{16, 0, 16 << 20},
		{32, 0, 8 << 20},
		{64, 0, 4 << 20},
		{1000, 0, 4 << 20},
		{8, 1 << 20, 1 << 20}, // an explicit window stays
		{64, 100 << 20, 100 << 20},
	}
	for _, tc := range tests {
		sc := DefaultShmConfig()
		sc.WindowBytes = tc.window
		got := sc.ForRanks(tc.nranks)
		require.Equal(t, tc.want, got.WindowBytes, "nranks %d window %d", tc.nranks, tc.window)
		require.Zero(t, got.WindowBytes%shmPage, "page aligned")
		require.Equal(t, sc.P2PBytes, got.P2PBytes)
		require.Equal(t, tc.window, sc.WindowBytes, "ForRanks works on a copy")
	}
}

func TestShmSegmentBytes(t *testing.T) {
	const page = 4096
	tests := []struct {
		name string
		sc   ShmConfig
		want int
	}{
		{"defaults count the largest automatic window", DefaultShmConfig(), page + 8<<20 + 32<<20},
		{"defaults for 64 ranks", DefaultShmConfig().ForRanks(64), page + 8<<20 + 4<<20},
		{"defaults for 16 ranks", DefaultShmConfig().ForRanks(16), page + 8<<20 + 16<<20},
		{"minimum areas", ShmConfig{P2PBytes: 64 << 10, WindowBytes: 64 << 10}, page + 64<<10 + 64<<10},
		{"areas below the minimum are raised", ShmConfig{P2PBytes: 1, WindowBytes: 1}, page + 64<<10 + 64<<10},
		{"zero p2p is raised", ShmConfig{WindowBytes: 1 << 20}, page + 64<<10 + 1<<20},
		{"areas round up to pages", ShmConfig{P2PBytes: 64<<10 + 1, WindowBytes: 100<<10 + 5}, page + 68<<10 + 104<<10},
		{"disabled still has a size", ShmConfig{Disable: true, P2PBytes: 1 << 20, WindowBytes: 1 << 20}, page + 2<<20},
		{"largest", ShmConfig{P2PBytes: 1 << 30, WindowBytes: 1 << 30}, page + 2<<30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.sc.SegmentBytes())
		})
	}
}

func TestCheckShmCapacity(t *testing.T) {
	sc := ShmConfig{P2PBytes: 8 << 20, WindowBytes: 32 << 20, Dir: "/dev/shm"} // 40 MiB + 4 KiB a rank
	seg := int64(sc.SegmentBytes())
	roomy := HostMemory{ShmDir: "/dev/shm", ShmSizeBytes: 64 << 30, ShmFreeBytes: 64 << 30, RAMBytes: 256 << 30, AvailBytes: 200 << 30}
	hm := func(f func(*HostMemory)) HostMemory { h := roomy; f(&h); return h }
	off := sc
	off.Disable = true
	checkHostMemory(t, CheckShmCapacity, []hostMemoryCase{
		{"roomy host, 8 ranks", 8, sc, roomy, nil},
		{"exactly the size of /dev/shm", 4, sc, hm(func(h *HostMemory) { h.ShmSizeBytes = 4 * seg }), nil},
		{"one byte short", 4, sc, hm(func(h *HostMemory) { h.ShmSizeBytes = 4*seg - 1 }),
			[]string{"4 ranks", "/dev/shm holds", EnvShmDisable, EnvShmP2PSize, EnvShmWindowSize, "--shm-size"}},
		{"docker default 64M for 2 ranks", 2, sc, hm(func(h *HostMemory) { h.ShmSizeBytes = 64 << 20 }),
			[]string{"2 ranks", "80.01 MiB", "40 MiB each", "/dev/shm holds 64 MiB", "the RAM is 256 GiB", EnvShmDisable + "=1"}},
		{"free space does not matter", 8, sc, hm(func(h *HostMemory) { h.ShmFreeBytes, h.AvailBytes = 0, 0 }), nil},
		{"more than half the RAM", 8, sc, hm(func(h *HostMemory) { h.RAMBytes = 512 << 20 }),
			[]string{"8 ranks", "320 MiB", "the RAM is 512 MiB", "at most half", EnvShmDisable}},
		{"exactly half the RAM", 8, sc, hm(func(h *HostMemory) { h.RAMBytes = 16 * seg }), nil},
		{"unknown sizes are not checked", 1000, sc, HostMemory{ShmDir: "/dev/shm"}, nil},
		{"one rank needs no sharing", 1, sc, hm(func(h *HostMemory) { h.ShmSizeBytes = 1 }), nil},
		{"zero ranks", 0, sc, hm(func(h *HostMemory) { h.ShmSizeBytes = 1 }), nil},
		{"disabled", 8, off, hm(func(h *HostMemory) { h.ShmSizeBytes, h.RAMBytes = 1, 1 }), nil},
		{"another directory is named", 2, ShmConfig{P2PBytes: 1 << 20, WindowBytes: 1 << 20, Dir: "/run/flagcx"},
			HostMemory{ShmDir: "/run/flagcx", ShmSizeBytes: 1 << 20, RAMBytes: 1 << 30}, []string{"/run/flagcx holds 1 MiB", "the RAM is 1 GiB"}},
	})
}

func TestCheckShmFree(t *testing.T) {
	sc := ShmConfig{P2PBytes: 1 << 20, WindowBytes: 3 << 20, Dir: "/dev/shm"} // 4 MiB + 4 KiB
	seg := int64(sc.SegmentBytes())
	roomy := HostMemory{ShmDir: "/dev/shm", ShmSizeBytes: 1 << 30, ShmFreeBytes: 1 << 30, RAMBytes: 8 << 30, AvailBytes: 4 << 30}
	hm := func(f func(*HostMemory)) HostMemory { h := roomy; f(&h); return h }
	off := sc
	off.Disable = true
	checkHostMemory(t, CheckShmFree, []hostMemoryCase{
		{"room for one", 1, sc, roomy, nil},
		{"exactly the free space", 1, sc, hm(func(h *HostMemory) { h.ShmFreeBytes = seg }), nil},
		{"one byte short in /dev/shm", 1, sc, hm(func(h *HostMemory) { h.ShmFreeBytes = seg - 1 }),
			[]string{"1 segments of 4.004 MiB", "/dev/shm has 4.004 MiB free", "4 GiB of RAM is available", EnvShmDisable, EnvShmP2PSize, "--shm-size"}},
		{"full /dev/shm", 3, sc, hm(func(h *HostMemory) { h.ShmFreeBytes = 0 }),
			[]string{"3 segments", "need 12.01 MiB", "/dev/shm has 0 B free", EnvShmDisable + "=1"}},
		{"little RAM available", 2, sc, hm(func(h *HostMemory) { h.AvailBytes = 5 << 20 }),
			[]string{"need 8.008 MiB", "5 MiB of RAM is available", EnvShmDisable}},
		{"sizes unknown", 1, sc, HostMemory{ShmDir: "/dev/shm"}, nil},
		{"no segment asked for", 0, sc, hm(func(h *HostMemory) { h.ShmFreeBytes = 0 }), nil},
		{"disabled", 1, off, hm(func(h *HostMemory) { h.ShmFreeBytes, h.AvailBytes = 0, 0 }), nil},
	})
}

// hostMemoryCase is a case of TestCheckShmCapacity or TestCheckShmFree:
// both checks take the same arguments and fail the same way, so one body
// runs both tables.
type hostMemoryCase struct {
	name  string
	ranks int
	sc    ShmConfig
	hm    HostMemory
	bad   []string // substrings the error must contain; nil: it fits
}

func checkHostMemory(t *testing.T, check func(ranks int, sc ShmConfig, hm HostMemory) error, tests []hostMemoryCase) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.ranks, tc.sc, tc.hm)
			if tc.bad == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrShmCapacity)
			for _, s := range tc.bad {
				require.Contains(t, err.Error(), s)
			}
		})
	}
}
