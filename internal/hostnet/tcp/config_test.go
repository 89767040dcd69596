package tcp

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	require.Equal(t, Config{IfName: "^lo,docker", Family: 0, Streams: 4, StripeMin: 256 << 10, Timeout: 30 * time.Second, Spin: 200 * time.Microsecond, AutoStreams: true}, cfg)
	got, err := ConfigFromLookup(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	require.Equal(t, cfg, got)
}

func TestConfigFromLookup(t *testing.T) {
	def := DefaultConfig()
	with := func(f func(*Config)) Config { c := def; f(&c); return c }
	tests := []struct {
		name string
		env  map[string]string
		want Config
		bad  []string // substrings the error must contain; nil: no error
	}{
		{"empty values keep defaults", map[string]string{EnvSocketIfName: "", EnvTimeout: " "}, def, nil},
		{"ifname prefixes", map[string]string{EnvSocketIfName: "eth,ib"}, with(func(c *Config) { c.IfName = "eth,ib" }), nil},
		{"ifname exact", map[string]string{EnvSocketIfName: "=eth0"}, with(func(c *Config) { c.IfName = "=eth0" }), nil},
		{"ifname exclude", map[string]string{EnvSocketIfName: "^docker"}, with(func(c *Config) { c.IfName = "^docker" }), nil},
		{"ifname empty list", map[string]string{EnvSocketIfName: "^="}, def, []string{EnvSocketIfName, `"^="`, "comma-separated"}},
		{"ifname only commas", map[string]string{EnvSocketIfName: ",,"}, def, []string{EnvSocketIfName, `",,"`}},
		{"family AF_INET", map[string]string{EnvSocketFamily: "AF_INET"}, with(func(c *Config) { c.Family = 4 }), nil},
		{"family AF_INET6", map[string]string{EnvSocketFamily: "AF_INET6"}, with(func(c *Config) { c.Family = 6 }), nil},
		{"family 4", map[string]string{EnvSocketFamily: "4"}, with(func(c *Config) { c.Family = 4 }), nil},
		{"family 6 lower case name", map[string]string{EnvSocketFamily: "af_inet6"}, with(func(c *Config) { c.Family = 6 }), nil},
		{"family bad", map[string]string{EnvSocketFamily: "ipx"}, def, []string{EnvSocketFamily, `"ipx"`, "AF_INET6"}},
		{"family 5", map[string]string{EnvSocketFamily: "5"}, def, []string{EnvSocketFamily, `"5"`}},
		{"streams product", map[string]string{EnvSocketNThreads: "4", EnvNSocksPerThread: "3"}, with(func(c *Config) { c.Streams, c.AutoStreams = 12, false }), nil},
		{"streams one", map[string]string{EnvSocketNThreads: "1", EnvNSocksPerThread: "1"}, with(func(c *Config) { c.Streams, c.AutoStreams = 1, false }), nil},
		{"streams threads only", map[string]string{EnvSocketNThreads: "8"}, with(func(c *Config) { c.Streams, c.AutoStreams = 16, false }), nil},
		{"streams capped at 64", map[string]string{EnvSocketNThreads: "16", EnvNSocksPerThread: "16"}, with(func(c *Config) { c.Streams, c.AutoStreams = 64, false }), nil},
		{"nthreads zero", map[string]string{EnvSocketNThreads: "0"}, def, []string{EnvSocketNThreads, `"0"`, "1 to 16"}},
		{"nthreads 17", map[string]string{EnvSocketNThreads: "17"}, def, []string{EnvSocketNThreads, `"17"`}},
		{"nsocks word", map[string]string{EnvNSocksPerThread: "two"}, def, []string{EnvNSocksPerThread, `"two"`, "1 to 16"}},
		{"stripe bytes", map[string]string{EnvNetStripeMin: "65536"}, with(func(c *Config) { c.StripeMin = 65536 }), nil},
		{"stripe K", map[string]string{EnvNetStripeMin: "512K"}, with(func(c *Config) { c.StripeMin = 512 << 10 }), nil},
		{"stripe MiB", map[string]string{EnvNetStripeMin: "1MiB"}, with(func(c *Config) { c.StripeMin = 1 << 20 }), nil},
		{"stripe zero", map[string]string{EnvNetStripeMin: "0"}, with(func(c *Config) { c.StripeMin = 0 }), nil},
		{"stripe negative", map[string]string{EnvNetStripeMin: "-1"}, def, []string{EnvNetStripeMin, `"-1"`, "byte count"}},
		{"stripe unit", map[string]string{EnvNetStripeMin: "12Q"}, def, []string{EnvNetStripeMin, `"12Q"`}},
		{"timeout seconds", map[string]string{EnvTimeout: "30"}, with(func(c *Config) { c.Timeout = 30 * time.Second }), nil},
		{"timeout fraction", map[string]string{EnvTimeout: "2.5"}, with(func(c *Config) { c.Timeout = 2500 * time.Millisecond }), nil},
		{"timeout duration", map[string]string{EnvTimeout: "45s"}, with(func(c *Config) { c.Timeout = 45 * time.Second }), nil},
		{"timeout minutes", map[string]string{EnvTimeout: "1m30s"}, with(func(c *Config) { c.Timeout = 90 * time.Second }), nil},
		{"timeout zero", map[string]string{EnvTimeout: "0"}, def, []string{EnvTimeout, `"0"`, "positive"}},
		{"timeout negative", map[string]string{EnvTimeout: "-3s"}, def, []string{EnvTimeout, `"-3s"`}},
		{"timeout word", map[string]string{EnvTimeout: "soon"}, def, []string{EnvTimeout, `"soon"`, "Go duration"}},
		{"timeout inf", map[string]string{EnvTimeout: "Inf"}, def, []string{EnvTimeout, `"Inf"`}},
		{"spin microseconds", map[string]string{"FLAGCX_SOCKET_SPIN_US": "200"}, with(func(c *Config) { c.Spin = 200 * time.Microsecond }), nil},
		{"spin off", map[string]string{"FLAGCX_SOCKET_SPIN_US": "0"}, with(func(c *Config) { c.Spin = 0 }), nil},
		{"spin negative", map[string]string{"FLAGCX_SOCKET_SPIN_US": "-5"}, def, []string{"FLAGCX_SOCKET_SPIN_US", `"-5"`, "0 to 100000"}},
		{"two bad variables reported together", map[string]string{EnvSocketFamily: "7", EnvTimeout: "x"}, def, []string{EnvSocketFamily, EnvTimeout}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromLookup(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.bad == nil {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
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

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(EnvSocketNThreads, "3")
	t.Setenv(EnvNSocksPerThread, "1")
	t.Setenv(EnvTimeout, "7")
	t.Setenv(EnvSocketIfName, "")
	t.Setenv(EnvSocketFamily, "")
	t.Setenv(EnvNetStripeMin, "")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, 3, cfg.Streams)
	require.Equal(t, 7*time.Second, cfg.Timeout)
	require.Equal(t, DefaultIfName, cfg.IfName)

	t.Setenv(EnvTimeout, "seven")
	_, err = ConfigFromEnv()
	require.ErrorIs(t, err, wire.ErrConfig)
	require.Contains(t, err.Error(), `FLAGCX_TIMEOUT="seven"`)
}
