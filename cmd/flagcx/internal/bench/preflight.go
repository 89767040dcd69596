package bench

import (
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/internal/sched"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// preflight checks, in the local launcher before any rank starts, the
// settings every rank reads on its own: malformed, each of np ranks would
// refuse them with the same error, printed np times. Checked here, the
// error is printed once and nothing starts.
func preflight(cfg *Config, lookup func(string) (string, bool)) error {
	if _, err := tcp.ConfigFromLookup(lookup); err != nil {
		return err
	}
	if _, err := shm.ShmConfigFromLookup(lookup); err != nil {
		return err
	}
	if cfg.hetero(lookup) {
		if err := core.CheckEnv(lookup); err != nil {
			return err
		}
	}
	for _, b := range cfg.backends() {
		if b == HostBackendName {
			continue
		}
		if _, _, err := pluginFile(b, cfg.PluginDir); err != nil {
			return err
		}
	}
	return nil
}

// hetero reports whether the ranks run on heterogeneous communicators:
// for placements, plugins, and the cluster variables.
func (c *Config) hetero(lookup func(string) (string, bool)) bool {
	if c.Placement != nil || c.Backend != HostBackendName {
		return true
	}
	return env.ClusterSplitList.IsSet(lookup) || env.UseHostComm.IsSet(lookup)
}

// pluginFile finds the named plugin's file in dir (loader.DefaultDir when
// empty) without loading it, and returns the directory searched too.
func pluginFile(name, dir string) (path, searched string, err error) {
	if dir == "" {
		dir = loader.DefaultDir()
	}
	cands, dirErr := loader.Discover(dir)
	var found []string
	for _, c := range cands {
		if c.Name == name {
			return c.Path, dir, nil
		}
		found = append(found, c.Name)
	}
	if dirErr != nil {
		return "", dir, fmt.Errorf("backend %s: %w", name, dirErr)
	}
	return "", dir, fmt.Errorf("backend %s: no plugin libflagcx-%s.so in %q (found: %s): build it with make, or point --plugin-dir / FLAGCX_PLUGIN_DIR at it",
		name, name, dir, strings.Join(append(found, HostBackendName+" (built in)"), ", "))
}

// checkSplitList refuses, before any rank starts, a
// FLAGCX_CLUSTER_SPLIT_LIST that cannot fit the ranks this run starts
// (the ranks would all refuse it, each with the same error).
func checkSplitList(lookup func(string) (string, bool), placement Placement, np int) error {
	v, ok := env.ClusterSplitList.Raw(lookup)
	if !ok {
		return nil
	}
	split, err := sched.ParseSplitList(v)
	if err != nil {
		return err
	}
	members := make([]sched.Member, np)
	for r := range members {
		vendor := HostBackendName
		if placement != nil {
			vendor = placement[r]
		}
		members[r] = sched.Member{Rank: r, Vendor: vendor}
	}
	if _, err := sched.NewLayout(members, split); err != nil {
		return err
	}
	return nil
}
