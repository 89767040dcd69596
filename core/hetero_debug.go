package core

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/core/sched"
)

// FlagCX's debug variables, as heterogeneous communicators read them.
const (
	EnvDebug       = "FLAGCX_DEBUG"        // VERSION, WARN, INFO, TRACE
	EnvDebugSubsys = "FLAGCX_DEBUG_SUBSYS" // INIT,COLL,...,ALL; ^ inverts
	EnvDebugFile   = "FLAGCX_DEBUG_FILE"   // %h host, %p pid
)

// collDebug is what a communicator logs.
//
// FLAGCX_DEBUG_SUBSYS=COLL prints the plan of each collective: each
// distinct call (collective, type, op, root, count and path) once per
// communicator, or every call with FLAGCX_DEBUG=TRACE. Naming COLL is
// enough; FLAGCX_DEBUG=NONE, VERSION or WARN silences it. FLAGCX_DEBUG=INFO
// with INIT selected (the default subsystems) prints the cluster layout at
// init.
type collDebug struct {
	init, coll, every bool
	w                 io.Writer
}

var (
	debugFileOnce sync.Once
	debugFile     io.Writer
)

func collDebugFromEnv(lookup func(string) (string, bool)) collDebug {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	level := strings.ToUpper(get(EnvDebug))
	subsys, explicit := parseSubsys(get(EnvDebugSubsys))
	var d collDebug
	quiet := level == "NONE" || level == "VERSION" || level == "WARN"
	verbose := level == "INFO" || level == "TRACE"
	d.coll = !quiet && subsys["COLL"] && (explicit["COLL"] || verbose)
	d.every = d.coll && level == "TRACE"
	d.init = verbose && subsys["INIT"]
	if d.coll || d.init {
		d.w = debugWriter(get(EnvDebugFile))
	}
	return d
}

// parseSubsys reads "INIT,COLL", "ALL", "^NET" (everything but NET).
// Unset means FlagCX's default, INIT,BOOTSTRAP,ENV. explicit says which
// names were written out (ALL counts for all).
func parseSubsys(s string) (on, explicit map[string]bool) {
	all := []string{"INIT", "COLL", "P2P", "NET", "BOOTSTRAP", "ENV", "GRAPH", "TUNING", "ALLOC", "PROXY"}
	on, explicit = map[string]bool{}, map[string]bool{}
	if s == "" {
		for _, n := range []string{"INIT", "BOOTSTRAP", "ENV"} {
			on[n] = true
		}
		return on, explicit
	}
	invert := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	named := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		n := strings.ToUpper(strings.TrimSpace(part))
		if n == "ALL" {
			for _, a := range all {
				named[a] = true
			}
			continue
		}
		named[n] = true
	}
	for _, a := range all {
		on[a] = named[a] != invert
		explicit[a] = named[a] && !invert
	}
	return on, explicit
}

// debugWriter opens FLAGCX_DEBUG_FILE once per process (stderr if unset
// or unusable).
func debugWriter(pattern string) io.Writer {
	debugFileOnce.Do(func() {
		debugFile = os.Stderr
		if pattern == "" {
			return
		}
		host, _ := os.Hostname()
		name := strings.NewReplacer("%h", host, "%p", fmt.Sprint(os.Getpid())).Replace(pattern)
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "flagcx: warning: %s=%q: %v; logging to stderr\n", EnvDebugFile, pattern, err)
			return
		}
		debugFile = f
	})
	return debugFile
}

var debugMu sync.Mutex

// logf writes one NCCL-style log line: host:pid [rank] SUBSYS text.
func (c *HeteroComm) logf(subsys, format string, args ...any) {
	if c.debug.w == nil {
		return
	}
	host, _ := os.Hostname()
	msg := fmt.Sprintf(format, args...)
	prefix := fmt.Sprintf("%s:%d [%d] %s ", host, os.Getpid(), c.rank, subsys)
	debugMu.Lock()
	defer debugMu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		fmt.Fprintln(c.debug.w, prefix+line)
	}
}

// tracePlan prints a plan when COLL debugging asks for it.
func (c *HeteroComm) tracePlan(p *sched.Plan) {
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
	c.logf("COLL", "%s", b.String())
}
