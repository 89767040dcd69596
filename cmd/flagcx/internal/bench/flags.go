package bench

import (
	"fmt"
	"strings"

	"github.com/flagcx/flagcx-go/conformance/reference"
	"github.com/flagcx/flagcx-go/sdk"
)

// Flags are `flagcx bench`'s arguments, named as nccl-tests and FlagCX's
// test programs name them.
type Flags struct {
	Collective string `arg:"" name:"collective" help:"Collective to run: allreduce, reduce, broadcast, allgather, reducescatter, alltoall, alltoallv, gather, scatter, sendrecv, or all (each in turn); or put or get (one-sided, into and from the next rank's window)."`

	MinBytes   Size   `short:"b" name:"minbytes" default:"8" placeholder:"SIZE" help:"Smallest size in bytes; K, M, G suffixes are 1024-based."`
	MaxBytes   Size   `short:"e" name:"maxbytes" default:"8M" placeholder:"SIZE" help:"Largest size in bytes; K, M, G suffixes are 1024-based."`
	StepFactor int    `short:"f" name:"stepfactor" default:"2" placeholder:"N" help:"Multiply the size by N between steps (N >= 2)."`
	Warmup     int    `short:"w" name:"warmup_iters" default:"5" placeholder:"N" help:"Untimed iterations before timing each size."`
	Iters      int    `short:"n" name:"iters" default:"20" placeholder:"N" help:"Timed iterations per size."`
	Check      int    `short:"c" name:"check" default:"1" placeholder:"0|1" help:"Check results against the exact reference (1) or not (0)."`
	Blocking   int    `short:"z" name:"blocking" default:"0" placeholder:"0|1" help:"Wait for every timed call to finish (its stream synchronized) before the next (1): a call's whole latency, where 0 lets calls overlap as a training loop's do."`
	Datatype   string `short:"d" name:"datatype" default:"float32" placeholder:"TYPE" help:"Data type (int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16; half, float, double, bf16...) or all."`
	Op         string `short:"o" name:"op" default:"sum" placeholder:"OP" help:"Reduction (sum, prod, max, min, avg) or all; for reducing collectives."`
	Root       int    `short:"r" name:"root" default:"0" placeholder:"RANK" help:"Root rank of rooted collectives (reduce, broadcast, gather, scatter)."`
	Print      int    `short:"p" name:"print" default:"0" placeholder:"0|1" help:"Print the first elements of rank 0's output buffer per size (1), as FlagCX's tests do."`
	NP         *int   `name:"np" placeholder:"N" help:"Start N rank processes on this machine (without it and without a launcher such as mpirun or torchrun: one rank)."`
	Backend    string `name:"backend" default:"host" placeholder:"NAME" help:"Where every rank runs: host (the CPU, built in) or a plugin's name (nvidia, kunlunxin, cambricon, metax) from --plugin-dir."`
	Ranks      string `name:"ranks" placeholder:"SPEC" help:"Start ranks on this machine placed on backends in order, e.g. nvidia:2 or kunlunxin:2,metax:1,host:2 (implies --np). Ranks of one vendor form a cluster; several clusters make a heterogeneous communicator. A rank's device is its position among this host's ranks of the same backend."`
	PrintPlan  bool   `name:"print-plan" help:"Print every rank's schedule (plan of steps) of each collective at the largest size before its results."`
	Window     string `name:"window" default:"alloc" enum:"alloc,register" placeholder:"HOW" help:"put and get: the windows' memory: alloc (AllocWindow: shared memory that the ranks of a host copy into directly) or register (RegisterWindow of the rank's buffers: the peers' progress goroutines copy)."`
	OnFailure  string `name:"on-failure" default:"abort" enum:"abort,shrink" placeholder:"WHAT" help:"When a rank is lost: abort (every rank fails) or shrink (the survivors make a communicator of themselves, print the failure and the new size, and run the benchmark again on it)."`

	// Set from the global flags.
	PluginDir string `kong:"-"`
	Emulated  bool   `kong:"-"`
	Format    string `name:"format" default:"table" enum:"table,flagcx" placeholder:"FORMAT" help:"Output: table (nccl-tests' table) or flagcx (FlagCX's line per size)."`
	JSON      string `name:"json" placeholder:"FILE" help:"Also write the results as JSON to FILE."`
}

// Config is a validated benchmark plan.
type Config struct {
	Ops []*opSpec
	// OneSided is put or get instead of collectives (onesided.go), with
	// the windows of Window ("alloc", "register").
	OneSided   *oneSidedSpec
	Window     string
	Types      []sdk.DataType
	RedOps     []sdk.RedOp
	Sizes      []Size
	MinBytes   Size
	MaxBytes   Size
	StepFactor int
	Warmup     int
	Iters      int
	Check      bool
	Blocking   bool
	Root       int
	Print      bool
	NP         int
	Format     string
	JSON       string
	// Placement is every rank's backend when --ranks gave them; otherwise
	// every rank runs on Backend.
	Placement Placement
	Backend   string
	PluginDir string
	Emulated  bool
	PrintPlan bool
	// Shrink: --on-failure shrink.
	Shrink bool
	// Hetero runs the benchmark through core.Comm's own calls (clusters and
	// their schedules) rather than on its host engine communicator: set by
	// Run for placements, plugins, and the cluster variables.
	Hetero bool
}

// Config checks the flags and makes a plan. Every error names the flag and
// says what to give instead.
func (f *Flags) Config() (*Config, error) {
	c := &Config{
		MinBytes: f.MinBytes, MaxBytes: f.MaxBytes, StepFactor: f.StepFactor,
		Warmup: f.Warmup, Iters: f.Iters, Check: f.Check == 1, Blocking: f.Blocking == 1, Root: f.Root,
		Print: f.Print == 1, Format: f.Format, JSON: f.JSON,
		Backend: strings.ToLower(strings.TrimSpace(f.Backend)), PluginDir: f.PluginDir, Emulated: f.Emulated,
		PrintPlan: f.PrintPlan, Shrink: f.OnFailure == "shrink", Window: f.Window,
	}
	if c.Backend == "" {
		c.Backend = HostBackendName
	}
	if f.NP != nil { // nil: not given; an explicit 0 is a mistake, not one rank
		if *f.NP < 1 {
			return nil, fmt.Errorf("--np %d: give the number of ranks to start (1 or more)", *f.NP)
		}
		c.NP = *f.NP
	}
	if f.Ranks != "" {
		p, err := ParsePlacement(f.Ranks)
		if err != nil {
			return nil, err
		}
		if c.NP != 0 && c.NP != len(p) {
			return nil, fmt.Errorf("--np %d and --ranks %q (%d ranks) disagree: give one of them", c.NP, f.Ranks, len(p))
		}
		c.Placement, c.NP, c.Backend = p, len(p), p[0]
	}
	name := strings.ToLower(strings.TrimSpace(f.Collective))
	if c.OneSided = parseOneSided(name); c.OneSided != nil {
		// Bytes of int8, as FlagCX's test_put and test_get count them.
		f.Datatype, f.Op = "int8", "sum"
	} else if name == "all" {
		for _, coll := range sdk.AllCollectives() {
			c.Ops = append(c.Ops, &opTable[coll])
		}
	} else {
		coll, err := sdk.ParseCollective(name)
		if err != nil {
			return nil, fmt.Errorf("unknown collective %q: use one of %s, or all; or put or get", f.Collective, strings.Join(sdk.CollectiveNames(), ", "))
		}
		c.Ops = []*opSpec{&opTable[coll]}
	}

	if strings.EqualFold(strings.TrimSpace(f.Datatype), "all") {
		c.Types = sdk.AllDataTypes()
	} else {
		dt, err := sdk.ParseDataType(f.Datatype)
		if err != nil {
			var names []string
			for _, t := range sdk.AllDataTypes() {
				names = append(names, t.String())
			}
			return nil, fmt.Errorf("-d/--datatype %q: unknown data type: use one of %s, or all", f.Datatype, strings.Join(names, ", "))
		}
		c.Types = []sdk.DataType{dt}
	}
	if strings.EqualFold(strings.TrimSpace(f.Op), "all") {
		c.RedOps = sdk.AllRedOps()
	} else {
		op, err := sdk.ParseRedOp(f.Op)
		if err != nil {
			var names []string
			for _, o := range sdk.AllRedOps() {
				names = append(names, o.String())
			}
			return nil, fmt.Errorf("-o/--op %q: unknown reduction: use one of %s, or all", f.Op, strings.Join(names, ", "))
		}
		c.RedOps = []sdk.RedOp{op}
	}

	switch {
	case f.MinBytes < 0 || f.MaxBytes < 0:
		return nil, fmt.Errorf("-b/--minbytes and -e/--maxbytes must not be negative")
	case f.MinBytes > f.MaxBytes:
		return nil, fmt.Errorf("-b/--minbytes %s is above -e/--maxbytes %s: give a minimum no larger than the maximum", f.MinBytes, f.MaxBytes)
	case f.StepFactor < 2:
		return nil, fmt.Errorf("-f/--stepfactor %d: give an integer of at least 2 (each size is the previous one times this factor)", f.StepFactor)
	case f.Warmup < 0:
		return nil, fmt.Errorf("-w/--warmup_iters %d: give 0 or more warmup iterations", f.Warmup)
	case f.Iters < 1:
		return nil, fmt.Errorf("-n/--iters %d: give at least 1 timed iteration", f.Iters)
	case f.Check != 0 && f.Check != 1:
		return nil, fmt.Errorf("-c/--check %d: give 1 to check results or 0 not to", f.Check)
	case f.Blocking != 0 && f.Blocking != 1:
		return nil, fmt.Errorf("-z/--blocking %d: give 1 to wait for every call or 0 not to", f.Blocking)
	case f.Print != 0 && f.Print != 1:
		return nil, fmt.Errorf("-p/--print %d: give 1 to print output elements or 0 not to", f.Print)
	case f.Root < 0:
		return nil, fmt.Errorf("-r/--root %d: give a rank number (0 or more)", f.Root)
	case f.Format != "table" && f.Format != "flagcx":
		return nil, fmt.Errorf("--format %q: give table or flagcx", f.Format)
	}
	c.Sizes = Sizes(f.MinBytes, f.MaxBytes, f.StepFactor)
	return c, nil
}

// CheckRanks checks what depends on the rank count: the root (whether or
// not the collective takes one: a root outside the job is a mistake).
func (c *Config) CheckRanks(nranks int) error {
	if c.Root >= nranks && nranks == 1 {
		return fmt.Errorf("-r/--root %d: this run has a single rank (0): give -r 0, or start more ranks with --np N or a launcher", c.Root)
	}
	if c.Root >= nranks {
		return fmt.Errorf("-r/--root %d is not a rank of this run (ranks 0..%d): give a root below %d", c.Root, nranks-1, nranks)
	}
	return nil
}

// redOpsFor lists the reductions a collective runs with: the chosen ones
// for reducing collectives, a single placeholder for the others.
func (c *Config) redOpsFor(o *opSpec) []sdk.RedOp {
	if o.coll.Reduces() {
		return c.RedOps
	}
	return []sdk.RedOp{reference.NoOp}
}

// steps is the number of (collective, type, reduction, size) rows.
func (c *Config) steps() int {
	n := 0
	if c.OneSided != nil {
		n = len(c.Sizes)
	}
	for _, o := range c.Ops {
		n += len(c.Types) * len(c.redOpsFor(o)) * len(c.Sizes)
	}
	return n
}

// usesPlugins reports whether any rank runs on a vendor plugin.
func (c *Config) usesPlugins() bool {
	if c.Placement == nil {
		return c.Backend != HostBackendName
	}
	for _, b := range c.Placement {
		if b != HostBackendName {
			return true
		}
	}
	return false
}
