package core

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/sched"
)

// FlagCX's debug variables: the level of the library's log, the
// subsystems it covers (INIT, COLL: COLL prints each schedule a rank
// runs), and the file it goes to (default: standard error).
var (
	EnvDebug       = env.Debug.Name       // NONE, VERSION, WARN, INFO, ABORT, TRACE
	EnvDebugSubsys = env.DebugSubsys.Name // INIT,COLL,...,ALL; ^ inverts
	EnvDebugFile   = env.DebugFile.Name   // %h host, %p pid
)

// collDebug is what a communicator logs.
//
// FLAGCX_DEBUG_SUBSYS=COLL prints the plan of each collective: each
// distinct call (collective, type, op, root, count and path) once per
// communicator, or every call with FLAGCX_DEBUG=TRACE. Naming COLL is
// enough; FLAGCX_DEBUG=NONE, VERSION or WARN silences it. FLAGCX_DEBUG=INFO
// with INIT selected (the default subsystems) prints the cluster layout at
// init. The rules are internal/base/flog's; the flags only spare the work of
// formatting what would not be shown.
type collDebug struct {
	init, coll, every bool
	log               *slog.Logger // nil: w, with the flags deciding alone
	w                 io.Writer    // where a collDebug made without log writes (tests)
}

func collDebugFromEnv(lookup func(string) (string, bool)) collDebug {
	cfg := flog.ConfigFrom(lookup)
	return collDebug{
		init:  cfg.Enabled(flog.LevelInfo, flog.Init),
		coll:  cfg.Enabled(flog.LevelInfo, flog.Coll),
		every: cfg.Enabled(flog.LevelTrace, flog.Coll),
		log:   flog.New(cfg, nil),
	}
}

// logf writes one FlagCX-style debug line: host:pid [rank] SUBSYS text.
func (c *Comm) logf(subsys, format string, args ...any) {
	log := c.debug.log
	if log == nil {
		if c.debug.w == nil {
			return
		}
		log = flog.New(flog.Verbose(), c.debug.w)
	}
	log.Log(context.Background(), flog.LevelInfo, fmt.Sprintf(format, args...), flog.KeySubsys, subsys, flog.KeyRank, c.rank)
}

// tracePlan prints a plan when COLL debugging asks for it.
func (c *Comm) tracePlan(p *sched.Plan) {
	if !c.debug.coll {
		return
	}
	key := p.Call.String() + " " + p.Path.String()
	if !c.debug.every {
		if c.printed[key] {
			return
		}
		c.printed[key] = true
	}
	var b strings.Builder
	p.Format(&b, 3)
	c.logf(flog.Coll, "%s", b.String())
}

// logFirstPath says, once per communicator at INFO (INIT, on by default),
// which runner and path run its first collective: the one line that tells
// a user of an unmodified program (NCCL's API, docs/nccl.md) whether its
// calls run in the vendor's library, on the host engine or in flagcx-go's
// heterogeneous schedules. FLAGCX_DEBUG_SUBSYS=COLL prints every plan.
func (c *Comm) logFirstPath(runner string, t *task) {
	c.pathLogged = true
	what := fmt.Sprintf("runner %q", runner)
	if t.plan != nil {
		what += fmt.Sprintf(", path %s", t.plan.Path)
		if t.plan.Why != "" {
			what += " (" + t.plan.Why + ")"
		}
	}
	c.logf(flog.Init, "first collective %s: %s", t.args.Coll.Title(), what)
}
