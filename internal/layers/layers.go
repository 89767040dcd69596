// Package layers holds the import order of this module's packages, the
// one table docs/architecture.md describes: a package may import only
// packages listed before it. TestLayers checks every package's imports
// against it (from `go list`), so that no arrow points up the layers and
// a new package has to take its place here.
package layers

// layer is a group of packages at one height, lowest first within it.
type layer struct {
	name string
	pkgs []string
}

// order lists the layers from the bottom. Paths are relative to the
// module.
var order = []layer{
	{"base: no communicator, no vendor, no device", []string{
		"internal/base/bytesize",
		"internal/base/cmem",
		"internal/base/env",
		"internal/base/flog",
		"internal/layers",
	}},
	{"sdk: the plugin ABIs, their Go types and loaders", []string{
		"sdk",
		"sdk/loader",
		"sdk/netplugin",
	}},
	{"test support, for the tests of every layer above", []string{
		"internal/testkit",
	}},
	{"plans and transports: no vendor, no communicator", []string{
		"internal/sched",
		"internal/hostnet/topo",
		"internal/hostnet/wire",
		"internal/hostnet/nettest",
		"internal/hostnet/shm",
		"internal/hostnet/tcp",
		"internal/hostnet/netplugin",
		"internal/hostnet",
	}},
	{"core: the communicator and what runs its calls", []string{
		"core/internal/host/mem",
		"core/internal/host/reduce",
		"core/internal/host",
		"core/internal/hostcomm",
		"core/internal/executor",
		"core/internal/inspect",
		"core/internal/metrics",
		"core/internal/onesided",
		"core/internal/watchdog",
		"core/internal/ctl",
		"core",
	}},
	{"above core: what starts and checks communicators", []string{
		"launch",
		"conformance/vendorsim",
		"conformance/reference",
		"conformance/netsuite",
		"conformance/heterotest",
		"conformance/suite",
	}},
	{"programs and the C libraries", []string{
		"capi",
		"cmd/flagcx/internal/plugincmd",
		"cmd/flagcx/internal/bench",
		"cmd/flagcx/internal/plot",
		"cmd/flagcx",
		"tools/internal/gosrc",
		"tools/collswitch",
		"tools/funclen",
		"tools/copybw",
		"tools/latprobe",
	}},
}

// apart are imports the order allows but the design does not: a package
// under from imports nothing under to.
var apart = []struct{ from, to, why string }{
	{"core", "internal/hostnet/", "core talks to the mesh (internal/hostnet: its links and shared windows), never to a transport: a new transport is a row of the mesh's table (internal/hostnet/rows.go)"},
}
