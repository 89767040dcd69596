package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk"
)

// The environment variables of a communicator's cluster layout (FlagCX's
// names), read by InitRank unless options override them.
var (
	// EnvClusterSplitList splits the clusters further: cluster sizes in
	// rank order, e.g. "2,2" (WithSplitList).
	EnvClusterSplitList = env.ClusterSplitList.Name
	// EnvUseHostComm=1 forces the host path for every collective
	// (WithHostPath).
	EnvUseHostComm = env.UseHostComm.Name
	// EnvNetChunkSize is the pipeline chunk of heterogeneous schedules
	// (bytes, K/M/G 1024-based, 1.5M allowed; default 16M) (WithChunk).
	EnvNetChunkSize = env.NetChunkSize.Name
)

// Option configures InitRank.
type Option func(*options)

type options struct {
	be       Backend
	net      *hostnet.Config
	timeout  time.Duration
	split    *[]int
	hostPath *bool
	chunk    int
	lookup   func(string) (string, bool)
}

// WithBackend places this rank on be: HostBackend (the default) or a
// plugin's device (DeviceBackend). Ranks of one communicator may pass
// different backends.
func WithBackend(be Backend) Option { return func(o *options) { o.be = be } }

// WithNetConfig sets the host transport between the ranks (default:
// NetConfigFromEnv).
func WithNetConfig(cfg NetConfig) Option { return func(o *options) { o.net = &cfg } }

// WithTimeout bounds every wait of the communicator without progress, and
// every blocking plugin call (default FLAGCX_TIMEOUT, 30 s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithSplitList splits clusters as FLAGCX_CLUSTER_SPLIT_LIST would (and
// overrides it): cluster sizes in rank order; nil or empty: no split.
// Every rank must pass the same list.
func WithSplitList(sizes []int) Option {
	return func(o *options) { s := append([]int(nil), sizes...); o.split = &s }
}

// WithHostPath forces (or, with false, forbids) the host path, overriding
// FLAGCX_USE_HOST_COMM: every collective then copies device data to the
// host, runs on the host communicator of all ranks and copies it back.
// Every rank must pass the same value.
func WithHostPath(on bool) Option { return func(o *options) { o.hostPath = &on } }

// WithChunk sets the pipeline chunk of heterogeneous schedules in bytes,
// overriding FLAGCX_NET_CHUNK_SIZE. Every rank must pass the same value.
func WithChunk(bytes int) Option { return func(o *options) { o.chunk = bytes } }

// WithEnv reads the FLAGCX_* settings of the cluster layout
// (FLAGCX_CLUSTER_SPLIT_LIST, FLAGCX_USE_HOST_COMM, FLAGCX_NET_CHUNK_SIZE,
// FLAGCX_DEBUG) through lookup instead of the process environment: for
// ranks that run as goroutines of one process, or tests.
func WithEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookup = lookup }
}

// netConfig is the transport the options ask for.
func (o *options) netConfig() (hostnet.Config, error) {
	var cfg hostnet.Config
	if o.net != nil {
		cfg = *o.net
	} else {
		c, err := NetConfigFromEnv()
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	if o.timeout > 0 {
		cfg.Timeout = o.timeout
	}
	return cfg, nil
}

// settings reads the split list, host-path switch and chunk size.
func settings(o *options) (initRecord, error) {
	var r initRecord
	lookup := env.Lookup(o.lookup)
	if o.split != nil {
		parts := make([]string, len(*o.split))
		for i, s := range *o.split {
			parts[i] = strconv.Itoa(s)
		}
		r.Split = strings.Join(parts, ",")
	} else {
		r.Split, _ = env.ClusterSplitList.Get(lookup)
	}
	if _, err := sched.ParseSplitList(r.Split); err != nil {
		return r, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}
	if o.hostPath != nil {
		r.HostPath = *o.hostPath
	} else {
		on, err := env.UseHostComm.Get(lookup)
		if err != nil {
			return r, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		r.HostPath = on
	}
	r.Chunk = o.chunk
	if r.Chunk == 0 {
		// Unset, the chunk is the schedules' own default, which the
		// registry documents (TestChunkDefault keeps them equal).
		n, set, err := env.NetChunkSize.Find(lookup)
		if err != nil {
			return r, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
		}
		if set {
			r.Chunk = n
		}
	}
	if r.Chunk <= 0 {
		r.Chunk = sched.DefaultChunk
	}
	return r, nil
}
