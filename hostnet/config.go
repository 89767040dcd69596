package hostnet

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config, also used where a variable is unset.
const (
	DefaultIfName    = "^lo,docker"
	DefaultStreams   = 4 // FLAGCX_SOCKET_NTHREADS=2 x FLAGCX_NSOCKS_PERTHREAD=2
	DefaultStripeMin = 256 << 10
	DefaultTimeout   = 30 * time.Second

	// MaxStreams caps FLAGCX_SOCKET_NTHREADS x FLAGCX_NSOCKS_PERTHREAD.
	MaxStreams = 64
	// MaxHello is the largest hello a dialer may send during the handshake.
	MaxHello = 64 << 10
)

// Environment variables read by ConfigFromEnv.
const (
	EnvSocketIfName    = "FLAGCX_SOCKET_IFNAME"
	EnvSocketFamily    = "FLAGCX_SOCKET_FAMILY"
	EnvSocketNThreads  = "FLAGCX_SOCKET_NTHREADS"
	EnvNSocksPerThread = "FLAGCX_NSOCKS_PERTHREAD"
	EnvNetStripeMin    = "FLAGCX_NET_STRIPE_MIN"
	EnvTimeout         = "FLAGCX_TIMEOUT"
)

// ErrConfig: a configuration value (usually an environment variable) is
// malformed. The wrapping error names the variable, the value and what is
// allowed.
var ErrConfig = errors.New("invalid hostnet configuration")

// DefaultConfig is the configuration used when no variable is set:
// every interface but loopback and docker, either address family, 4 sockets
// per peer, striping from 256 KiB, 30 s timeout.
func DefaultConfig() Config {
	return Config{
		IfName:    DefaultIfName,
		Family:    0,
		Streams:   DefaultStreams,
		StripeMin: DefaultStripeMin,
		Timeout:   DefaultTimeout,
	}
}

// ConfigFromEnv reads FLAGCX_SOCKET_IFNAME, FLAGCX_SOCKET_FAMILY,
// FLAGCX_SOCKET_NTHREADS, FLAGCX_NSOCKS_PERTHREAD, FLAGCX_NET_STRIPE_MIN and
// FLAGCX_TIMEOUT from the process environment on top of DefaultConfig.
func ConfigFromEnv() (Config, error) {
	return ConfigFromLookup(os.LookupEnv)
}

// ConfigFromLookup is ConfigFromEnv with the variables read through lookup
// (os.LookupEnv, or a map in tests). Unset or empty variables keep their
// defaults. Malformed values give one error (wrapping ErrConfig) that lists
// every bad variable with its value and what is allowed.
//
//	FLAGCX_SOCKET_IFNAME     "eth,ib" prefixes, "^lo,docker" excludes, "=eth0" exact names
//	FLAGCX_SOCKET_FAMILY     AF_INET or 4, AF_INET6 or 6
//	FLAGCX_SOCKET_NTHREADS   1..16 (default 2)
//	FLAGCX_NSOCKS_PERTHREAD  1..16 (default 2); Streams = NTHREADS x NSOCKS, at most 64
//	FLAGCX_NET_STRIPE_MIN    bytes, with optional K/M/G suffix (1024-based)
//	FLAGCX_TIMEOUT           seconds ("30", "2.5") or a Go duration ("45s", "2m")
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	var errs []error
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	bad := func(name, val, allowed string) {
		errs = append(errs, fmt.Errorf("%w: %s=%q: %s", ErrConfig, name, val, allowed))
	}

	if v, ok := get(EnvSocketIfName); ok {
		if _, err := parseIfSpec(v); err != nil {
			bad(EnvSocketIfName, v, err.Error())
		} else {
			cfg.IfName = v
		}
	}
	if v, ok := get(EnvSocketFamily); ok {
		switch strings.ToUpper(v) {
		case "AF_INET", "4":
			cfg.Family = 4
		case "AF_INET6", "6":
			cfg.Family = 6
		default:
			bad(EnvSocketFamily, v, "allowed are AF_INET (or 4) and AF_INET6 (or 6); unset for either")
		}
	}
	nthreads, nsocks := 2, 2
	for _, e := range []struct {
		name string
		dst  *int
	}{{EnvSocketNThreads, &nthreads}, {EnvNSocksPerThread, &nsocks}} {
		v, ok := get(e.name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 16 {
			bad(e.name, v, "allowed is a whole number from 1 to 16")
			continue
		}
		*e.dst = n
	}
	cfg.Streams = min(nthreads*nsocks, MaxStreams)
	if v, ok := get(EnvNetStripeMin); ok {
		n, err := parseBytes(v)
		if err != nil {
			bad(EnvNetStripeMin, v, "allowed is a byte count >= 0 such as 262144, 256K or 1M (K/M/G are 1024-based)")
		} else {
			cfg.StripeMin = n
		}
	}
	if v, ok := get(EnvTimeout); ok {
		d, err := parseTimeout(v)
		if err != nil {
			bad(EnvTimeout, v, "allowed is a positive number of seconds (30, 2.5) or a Go duration (45s, 1m30s)")
		} else {
			cfg.Timeout = d
		}
	}
	if len(errs) > 0 {
		return DefaultConfig(), errors.Join(errs...)
	}
	return cfg, nil
}

// parseBytes reads "1234", "256K", "4M", "1G", "256KiB", "4MB".
func parseBytes(s string) (int, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	u = strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B")
	mult := int64(1)
	if u != "" {
		switch u[len(u)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			u = u[:len(u)-1]
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("out of range")
	}
	return int(n * mult), nil
}

// parseTimeout reads seconds ("30", "2.5") or a Go duration ("45s").
func parseTimeout(s string) (time.Duration, error) {
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("out of range")
		}
		d = time.Duration(f * float64(time.Second))
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, err
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("not positive")
	}
	return d, nil
}
