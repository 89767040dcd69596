package env

import (
	"errors"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
)

func lookupOf(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseBytes(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"8", 8}, {"1K", 1 << 10}, {"64k", 64 << 10}, {"32M", 32 << 20}, {"1G", 1 << 30}, {"2g", 2 << 30},
		{"1.5K", 1536}, {"1.5M", 3 << 19}, {"0.5G", 512 << 20}, {"4KB", 4 << 10}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20},
		{" 7 ", 7}, {"4 M", 4 << 20}, {"1e3", 1000}, {"+5", 5}, {"1048576G", MaxBytes},
	}
	for _, c := range good {
		got, err := ParseBytes(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"  ", "empty"},
		{"K", "no number"},
		{"12Q", "unknown unit"},
		{"abc", "not a number"},
		{"-1", "negative number"},
		{"-8M", "negative number"},
		{"1.3", "not a whole number of bytes"},
		{"1048577G", "larger than the largest size (1048576G)"},
		{"1e30", "larger than the largest size (1048576G)"},
		{"18446744073709551616", "larger than the largest size (1048576G)"},
		{"Inf", "larger than the largest size (1048576G)"},
	}
	for _, c := range bad {
		_, err := ParseBytes(c.in)
		require.EqualError(t, err, c.why, c.in)
	}
}

// TestParseBytesReadsCompact: ParseBytes reads back what bytesize.Compact
// writes (defaults and bounds in messages are written with it).
func TestParseBytesReadsCompact(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 8: "8", 1536: "1536", 64 << 10: "64K", 3 << 20: "3M", 1 << 30: "1G", 3 << 19: "1536K", MaxBytes: "1048576G"} {
		require.Equal(t, want, bytesize.Compact(n))
		back, err := ParseBytes(want)
		require.NoError(t, err)
		require.Equal(t, n, back, "bytesize.Compact writes what ParseBytes reads")
	}
}

func TestParseDuration(t *testing.T) {
	good := []struct {
		in   string
		want time.Duration
	}{
		{"30", 30 * time.Second}, {"2.5", 2500 * time.Millisecond}, {"0.5", 500 * time.Millisecond},
		{"45s", 45 * time.Second}, {"1m30s", 90 * time.Second}, {"2m", 2 * time.Minute}, {" 7 ", 7 * time.Second},
		{"1ns", time.Nanosecond},
	}
	for _, c := range good {
		got, err := ParseDuration(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	bad := []struct{ in, why string }{
		{"", "neither seconds nor a Go duration"},
		{"soon", "neither seconds nor a Go duration"},
		{"30 s", "neither seconds nor a Go duration"},
		{"0", "not positive"},
		{"-1", "not positive"},
		{"-3s", "not positive"},
		{"0s", "not positive"},
		{"1e-12", "not positive"}, // rounds to 0 ns
		{"-Inf", "not positive"},
		{"NaN", "not a number"},
		{"Inf", "too long (at most 146 years)"},
		{"1e300", "too long (at most 146 years)"},
		{"2000000h", "too long (at most 146 years)"},
	}
	for _, c := range bad {
		_, err := ParseDuration(c.in)
		require.EqualError(t, err, c.why, c.in)
	}
}

func TestParseBool(t *testing.T) {
	for _, in := range []string{"1", "true", "TRUE", "yes", "On", " on "} {
		v, ok := ParseBool(in)
		require.True(t, ok, in)
		require.True(t, v, in)
	}
	for _, in := range []string{"0", "false", "No", "off"} {
		v, ok := ParseBool(in)
		require.True(t, ok, in)
		require.False(t, v, in)
	}
	for _, in := range []string{"", "2", "maybe", "y", "enable"} {
		_, ok := ParseBool(in)
		require.False(t, ok, in)
	}
}

// TestSettings reads registered variables through a map: unset and empty
// give the default, good values their value, bad ones an *Error whose
// text names the variable, the value, what is allowed and what is wrong.
func TestSettings(t *testing.T) {
	type result struct {
		val any
		set bool
		err string // the whole error text; "" for none
	}
	get := func(s any, l Lookup) result {
		switch s := s.(type) {
		case *Setting[int]:
			v, set, err := s.Find(l)
			return result{v, set, errText(err)}
		case *Setting[bool]:
			v, set, err := s.Find(l)
			return result{v, set, errText(err)}
		case *Setting[time.Duration]:
			v, set, err := s.Find(l)
			return result{v, set, errText(err)}
		case *Setting[string]:
			v, set, err := s.Find(l)
			return result{v, set, errText(err)}
		case *Setting[struct{}]:
			v, set, err := s.Find(l)
			return result{v, set, errText(err)}
		}
		panic("unknown setting type")
	}
	cases := []struct {
		name    string
		setting any
		varName string
		value   *string // nil: unset
		want    result
	}{
		{"timeout unset", Timeout, "FLAGCX_TIMEOUT", nil, result{30 * time.Second, false, ""}},
		{"timeout empty", Timeout, "FLAGCX_TIMEOUT", ptr("  "), result{30 * time.Second, false, ""}},
		{"timeout seconds", Timeout, "FLAGCX_TIMEOUT", ptr("2.5"), result{2500 * time.Millisecond, true, ""}},
		{"timeout duration", Timeout, "FLAGCX_TIMEOUT", ptr("45s"), result{45 * time.Second, true, ""}},
		{"timeout word", Timeout, "FLAGCX_TIMEOUT", ptr("soon"), result{30 * time.Second, true,
			`FLAGCX_TIMEOUT="soon": allowed is a positive number of seconds (30, 2.5) or a Go duration (45s, 1m30s); neither seconds nor a Go duration`}},
		{"timeout zero", Timeout, "FLAGCX_TIMEOUT", ptr("0"), result{30 * time.Second, true,
			`FLAGCX_TIMEOUT="0": allowed is a positive number of seconds (30, 2.5) or a Go duration (45s, 1m30s); not positive`}},
		{"chunk 1.5M", NetChunkSize, "FLAGCX_NET_CHUNK_SIZE", ptr("1.5M"), result{3 << 19, true, ""}},
		{"chunk unset", NetChunkSize, "FLAGCX_NET_CHUNK_SIZE", nil, result{16 << 20, false, ""}},
		{"chunk zero", NetChunkSize, "FLAGCX_NET_CHUNK_SIZE", ptr("0"), result{16 << 20, true,
			`FLAGCX_NET_CHUNK_SIZE="0": allowed is a positive byte count such as 262144, 512K or 1.5M (K, M and G are 1024-based); below 1`}},
		{"chunk negative", NetChunkSize, "FLAGCX_NET_CHUNK_SIZE", ptr("-3"), result{16 << 20, true,
			`FLAGCX_NET_CHUNK_SIZE="-3": allowed is a positive byte count such as 262144, 512K or 1.5M (K, M and G are 1024-based); negative number`}},
		{"p2p word", ShmP2PSize, "FLAGCX_SHM_P2P_SIZE", ptr("abc"), result{8 << 20, true,
			`FLAGCX_SHM_P2P_SIZE="abc": allowed is a byte count from 64K to 1G such as 262144, 512K or 1.5M (K, M and G are 1024-based); not a number`}},
		{"p2p below", ShmP2PSize, "FLAGCX_SHM_P2P_SIZE", ptr("63K"), result{8 << 20, true,
			`FLAGCX_SHM_P2P_SIZE="63K": allowed is a byte count from 64K to 1G such as 262144, 512K or 1.5M (K, M and G are 1024-based); below 64K`}},
		{"p2p above", ShmP2PSize, "FLAGCX_SHM_P2P_SIZE", ptr("1025M"), result{8 << 20, true,
			`FLAGCX_SHM_P2P_SIZE="1025M": allowed is a byte count from 64K to 1G such as 262144, 512K or 1.5M (K, M and G are 1024-based); above 1G`}},
		{"p2p MiB", ShmP2PSize, "FLAGCX_SHM_P2P_SIZE", ptr(" 2MiB "), result{2 << 20, true, ""}},
		{"stripe zero", NetStripeMin, "FLAGCX_NET_STRIPE_MIN", ptr("0"), result{0, true, ""}},
		{"stripe unit", NetStripeMin, "FLAGCX_NET_STRIPE_MIN", ptr("12Q"), result{256 << 10, true,
			`FLAGCX_NET_STRIPE_MIN="12Q": allowed is a byte count such as 262144, 512K or 1.5M (K, M and G are 1024-based); unknown unit`}},
		{"threads", SocketNThreads, "FLAGCX_SOCKET_NTHREADS", ptr("16"), result{16, true, ""}},
		{"threads zero", SocketNThreads, "FLAGCX_SOCKET_NTHREADS", ptr("0"), result{2, true,
			`FLAGCX_SOCKET_NTHREADS="0": allowed is a whole number from 1 to 16; below 1`}},
		{"threads 17", SocketNThreads, "FLAGCX_SOCKET_NTHREADS", ptr("17"), result{2, true,
			`FLAGCX_SOCKET_NTHREADS="17": allowed is a whole number from 1 to 16; above 16`}},
		{"threads word", SocketNThreads, "FLAGCX_SOCKET_NTHREADS", ptr("two"), result{2, true,
			`FLAGCX_SOCKET_NTHREADS="two": allowed is a whole number from 1 to 16; not a whole number`}},
		{"family", SocketFamily, "FLAGCX_SOCKET_FAMILY", ptr("af_inet6"), result{6, true, ""}},
		{"family bad", SocketFamily, "FLAGCX_SOCKET_FAMILY", ptr("ipx"), result{0, true,
			`FLAGCX_SOCKET_FAMILY="ipx": allowed are AF_INET (or 4) and AF_INET6 (or 6); unset for either`}},
		{"switch yes", ShmDisable, "FLAGCX_SHM_DISABLE", ptr("yes"), result{true, true, ""}},
		{"switch off", ShmDisable, "FLAGCX_SHM_DISABLE", ptr("Off"), result{false, true, ""}},
		{"switch bad", UseHostComm, "FLAGCX_USE_HOST_COMM", ptr("maybe"), result{false, true,
			`FLAGCX_USE_HOST_COMM="maybe": allowed are 1 (or true, yes, on) and 0 (or false, no, off)`}},
		{"debug level", Debug, "FLAGCX_DEBUG", ptr("info"), result{"INFO", true, ""}},
		{"debug bad", Debug, "FLAGCX_DEBUG", ptr("LOUD"), result{"", true,
			`FLAGCX_DEBUG="LOUD": allowed are NONE, VERSION, WARN, INFO, ABORT and TRACE`}},
		{"removed unset", ShmSlots, "FLAGCX_SHM_SLOTS", ptr(""), result{struct{}{}, false, ""}},
		{"removed", ShmSlots, "FLAGCX_SHM_SLOTS", ptr("8"), result{struct{}{}, true,
			`FLAGCX_SHM_SLOTS="8": this variable no longer exists: each rank now has one segment; size its inbound rings with FLAGCX_SHM_P2P_SIZE and its collective window with FLAGCX_SHM_WINDOW_SIZE`}},
		{"string trimmed", CommID, "FLAGCX_COMM_ID", ptr(" 10.0.0.1:29500 "), result{"10.0.0.1:29500", true, ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]string{}
			if c.value != nil {
				m[c.varName] = *c.value
			}
			require.Equal(t, c.want, get(c.setting, lookupOf(m)))
		})
	}

	// The error is an *Error that says its parts.
	_, err := ShmP2PSize.Get(lookupOf(map[string]string{"FLAGCX_SHM_P2P_SIZE": "abc"}))
	var e *Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, Error{Name: "FLAGCX_SHM_P2P_SIZE", Value: "abc", Form: ShmP2PSize.Form, Reason: "not a number"}, *e)
}

func ptr(s string) *string { return &s }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestNilLookupReadsTheProcess(t *testing.T) {
	t.Setenv("FLAGCX_SOCKET_NTHREADS", "3")
	n, err := SocketNThreads.Get(nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.True(t, SocketNThreads.IsSet(nil))
	t.Setenv("FLAGCX_SOCKET_NTHREADS", "")
	require.False(t, SocketNThreads.IsSet(nil), "empty is unset")
}

func TestFamily(t *testing.T) {
	environ := []string{"PATH=/bin", "FLAGCX_PLUGIN_DIR=/p", "FLAGCX_PLUGIN_NVIDIA=/x/libflagcx-nvidia.so",
		"FLAGCX_PLUGIN_MY_VENDOR=none", "FLAGCX_PLUGIN_EMPTY=", "FLAGCX_PLUGIN_=x", "FLAGCX_PLUGINS=y"}
	require.Equal(t, [][2]string{{"FLAGCX_PLUGIN_NVIDIA", "/x/libflagcx-nvidia.so"}, {"FLAGCX_PLUGIN_MY_VENDOR", "none"}},
		PluginFile.Set(environ), "FLAGCX_PLUGIN_DIR is a variable of its own, not a plugin")
	require.Equal(t, "FLAGCX_PLUGIN_FOO", PluginFile.Member("FOO"))
}

func TestRegistry(t *testing.T) {
	for _, v := range All() {
		require.True(t, strings.HasPrefix(v.Name, "FLAGCX_"), v.Name)
		require.NotEmpty(t, v.Doc, v.Name)
		require.NotEmpty(t, v.Form, v.Name)
		require.Same(t, v, ByName(v.Name))
	}
	require.Panics(t, func() { register(&Var{Name: Timeout.Name}) }, "a variable is declared once")
}

// TestReadmeListsTheRegistry keeps README.md's table of environment
// variables and the registry the same list: every variable the code reads
// is documented, and every documented variable is one the code knows.
func TestReadmeListsTheRegistry(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	readme := string(b)
	i := strings.Index(readme, "\n## Environment variables\n")
	require.GreaterOrEqual(t, i, 0, "README.md has an \"Environment variables\" section")
	section := readme[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	name := regexp.MustCompile("`(FLAGCX_[A-Z0-9_]*(?:<NAME>)?)`")
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1] // the variable column
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	var missing, unknown []string
	for _, v := range All() {
		if !documented[v.Name] {
			missing = append(missing, v.Name)
		}
	}
	for n := range documented {
		if ByName(n) == nil {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	require.Empty(t, missing, "registered in internal/base/env but not in README.md's table of environment variables")
	require.Empty(t, unknown, "in README.md's table of environment variables but not registered in internal/base/env")
}
