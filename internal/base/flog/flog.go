// Package flog is flagcx-go's logging: one log/slog handler that reads
// FlagCX's variables, so that every package logs the same way.
//
//	FLAGCX_DEBUG         NONE, VERSION, WARN, INFO, ABORT, TRACE: the debug lines shown
//	FLAGCX_DEBUG_SUBSYS  INIT,COLL,P2P,NET,BOOTSTRAP,ENV,...,ALL; ^ inverts (default INIT,BOOTSTRAP,ENV)
//	FLAGCX_DEBUG_FILE    the debug lines' file instead of stderr; %h host name, %p pid
//
// A record is one of three kinds, told apart by its attributes:
//
//   - a debug line names its subsystem (KeySubsys): shown when FLAGCX_DEBUG
//     reaches its level and FLAGCX_DEBUG_SUBSYS selects its subsystem, as
//     FlagCX writes it, "host:pid [rank] SUBSYS message" (one line per line
//     of the message), to FLAGCX_DEBUG_FILE or stderr. Without
//     FLAGCX_DEBUG, the subsystems FLAGCX_DEBUG_SUBSYS names (ALL included)
//     log at INFO: FLAGCX_DEBUG_SUBSYS=COLL alone prints the plans.
//   - a plugin's line names the plugin (KeyPlugin): shown at the
//     FLAGCX_DEBUG level whatever the subsystems, as "flagcx LEVEL plugin
//     NAME: message".
//   - anything else is a notice for the user, always shown on stderr
//     (warnings were printed before FLAGCX_DEBUG was read, and still are):
//     "flagcx: warning: message" at LevelWarn and above, with "flagcx
//     COMPONENT:" in front instead of "flagcx:" when it names a component
//     (KeyComponent).
//
// Library code logs through Default (or a logger made by New or To), never
// to os.Stderr itself.
package flog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/flagcx/flagcx-go/internal/base/env"
)

// Levels, named as FlagCX's and ordered as slog's (higher is more
// severe): FLAGCX_DEBUG=INFO shows LevelInfo and above.
const (
	LevelTrace   = slog.Level(-8)
	LevelAbort   = slog.Level(-4)
	LevelInfo    = slog.LevelInfo
	LevelWarn    = slog.LevelWarn
	LevelVersion = slog.Level(12)
	// levelOff is above every record: FLAGCX_DEBUG=NONE.
	levelOff = slog.Level(1 << 20)
)

// flagcxLevels are FlagCX's levels in its numbering (NONE 0 ... TRACE 5),
// which the plugin ABI's log callback uses.
var flagcxLevels = []struct {
	name  string
	level slog.Level
}{{"NONE", levelOff}, {"VERSION", LevelVersion}, {"WARN", LevelWarn}, {"INFO", LevelInfo}, {"ABORT", LevelAbort}, {"TRACE", LevelTrace}}

// FlagCXLevel is the level of FlagCX's number n (a plugin's log level);
// ok is false for numbers FlagCX does not define and for NONE.
func FlagCXLevel(n int) (level slog.Level, ok bool) {
	if n <= 0 || n >= len(flagcxLevels) {
		return 0, false
	}
	return flagcxLevels[n].level, true
}

// LevelName is FlagCX's name of a level: WARN, INFO, TRACE...
func LevelName(l slog.Level) string {
	for _, fl := range flagcxLevels[1:] {
		if l == fl.level {
			return fl.name
		}
	}
	return l.String()
}

// Attributes the handler reads; other attributes are appended to the
// message as key=value.
const (
	KeySubsys    = "subsys"    // a debug line's subsystem: INIT, COLL, ...
	KeyRank      = "rank"      // the rank a debug line is about
	KeyPlugin    = "plugin"    // the plugin whose line this is
	KeyComponent = "component" // the part of flagcx a notice comes from
)

// Subsystems, FlagCX's names.
const (
	Init      = "INIT"
	Coll      = "COLL"
	P2P       = "P2P"
	Net       = "NET"
	Bootstrap = "BOOTSTRAP"
	Env       = "ENV"
	Graph     = "GRAPH"
	Tuning    = "TUNING"
	Alloc     = "ALLOC"
	Proxy     = "PROXY"
	// All names every subsystem in FLAGCX_DEBUG_SUBSYS.
	All = "ALL"
)

var subsystems = []string{Init, Coll, P2P, Net, Bootstrap, Env, Graph, Tuning, Alloc, Proxy}

// Config is what FLAGCX_DEBUG, FLAGCX_DEBUG_SUBSYS and FLAGCX_DEBUG_FILE
// ask for.
type Config struct {
	level slog.Level
	set   bool            // FLAGCX_DEBUG was given
	on    map[string]bool // selected subsystems
	named map[string]bool // subsystems written out by name (not by ALL or ^)
	// File is FLAGCX_DEBUG_FILE as given (%h, %p not yet replaced).
	File string
	// Err is a malformed FLAGCX_DEBUG, which then counts as unset.
	Err error
}

// ConfigFrom reads the three variables through lookup (nil: the process
// environment).
func ConfigFrom(lookup env.Lookup) Config {
	var c Config
	name, set, err := env.Debug.Find(lookup)
	c.Err = err
	c.set = set && err == nil
	c.level = levelOff
	for _, fl := range flagcxLevels {
		if fl.name == name {
			c.level = fl.level
		}
	}
	sub, _ := env.DebugSubsys.Raw(lookup) // "" (the default) names nothing
	c.on, c.named = ParseSubsys(sub)
	c.File, _ = env.DebugFile.Get(lookup)
	return c
}

// ParseSubsys reads FLAGCX_DEBUG_SUBSYS as FlagCX does: "INIT,COLL",
// "ALL", "^NET" (every subsystem but NET). "" means FlagCX's default,
// INIT,BOOTSTRAP,ENV. on says which subsystems log; named which were
// written out (ALL counts for all; an inverted list and the default name
// none). Unknown
// names are ignored, as FlagCX ignores them.
func ParseSubsys(s string) (on, named map[string]bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		// The default selects, but names nothing: without FLAGCX_DEBUG
		// it shows nothing.
		on, _ = ParseSubsys(env.DebugSubsys.Default())
		return on, map[string]bool{}
	}
	on, named = map[string]bool{}, map[string]bool{}
	invert := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	listed := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		n := strings.ToUpper(strings.TrimSpace(part))
		if n == All {
			for _, a := range subsystems {
				listed[a] = true
			}
			continue
		}
		listed[n] = true
	}
	for _, a := range subsystems {
		on[a] = listed[a] != invert
		named[a] = listed[a] && !invert
	}
	return on, named
}

// Enabled reports whether a debug line of subsys at level is shown.
func (c Config) Enabled(level slog.Level, subsys string) bool {
	if !c.on[subsys] {
		return false
	}
	if c.set {
		return level >= c.level
	}
	// What FLAGCX_DEBUG_SUBSYS names (ALL included) logs at INFO even
	// without a level, so that FLAGCX_DEBUG_SUBSYS=COLL alone prints the
	// plans; the default selection and an inverted list name nothing.
	return c.named[subsys] && level >= LevelInfo
}

// Verbose lets every debug and plugin line through: for loggers whose
// callers have decided what to log already.
func Verbose() Config {
	on, named := ParseSubsys(All)
	return Config{level: LevelTrace, set: true, on: on, named: named}
}

// PluginEnabled reports whether a plugin's line at level is shown.
func (c Config) PluginEnabled(level slog.Level) bool { return c.set && level >= c.level }

// Process is the configuration of this process's environment, read once.
func Process() Config {
	initDefault()
	return processCfg
}

var (
	defaultOnce   sync.Once
	processCfg    Config
	defaultLogger *slog.Logger
)

func initDefault() {
	defaultOnce.Do(func() {
		processCfg = ConfigFrom(nil)
		defaultLogger = slog.New(NewHandler(processCfg, nil, nil))
		if processCfg.Err != nil {
			defaultLogger.Warn(processCfg.Err.Error() + "; logging as if it were unset")
		}
	})
}

// Default is this process's logger: the environment's configuration,
// debug lines to FLAGCX_DEBUG_FILE or stderr, notices to stderr. The
// environment is read at the first call.
func Default() *slog.Logger {
	initDefault()
	return defaultLogger
}

// Enabled reports whether this process shows debug lines of subsys at
// level: callers test it before formatting an expensive message.
func Enabled(level slog.Level, subsys string) bool { return Process().Enabled(level, subsys) }

// New is a logger of configuration c; w receives every line (nil: as
// Default writes them).
func New(c Config, w io.Writer) *slog.Logger { return slog.New(NewHandler(c, w, w)) }

// To is Default writing every line to w instead (tests, and callers that
// were handed a writer for their messages).
func To(w io.Writer) *slog.Logger { return New(Process(), w) }

// Handler is the slog.Handler behind every flagcx logger.
type Handler struct {
	cfg            Config
	debug, notices io.Writer // nil: the debug file (or stderr), stderr
	group          string    // prefix of attribute keys (WithGroup)
	a              attrs
}

// attrs are the attributes the handler reads, and the rest as text.
type attrs struct {
	subsys, plugin, component string
	rank                      int64
	hasRank                   bool
	extra                     string // " key=value" for every other attribute
}

// NewHandler makes a handler of configuration c. debug receives the debug
// and plugin lines (nil: FLAGCX_DEBUG_FILE, else stderr) and notices the
// notices (nil: stderr).
func NewHandler(c Config, debug, notices io.Writer) *Handler {
	return &Handler{cfg: c, debug: debug, notices: notices}
}

// Enabled is exact for loggers that carry their subsystem or plugin
// (With); records that name them only among their own attributes are
// filtered in Handle.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	switch {
	case h.a.subsys != "":
		return h.cfg.Enabled(level, h.a.subsys)
	case h.a.plugin != "":
		return h.cfg.PluginEnabled(level)
	}
	return true
}

// WithAttrs returns a handler whose records carry as.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	for _, a := range as {
		h2.a.add(h.group, a)
	}
	return &h2
}

// WithGroup returns a handler that prefixes the keys of later attributes
// with name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.group += name + "."
	return &h2
}

func (a *attrs) add(group string, at slog.Attr) {
	v := at.Value.Resolve()
	if group == "" {
		switch at.Key {
		case KeySubsys:
			a.subsys = strings.ToUpper(v.String())
			return
		case KeyPlugin:
			a.plugin = v.String()
			return
		case KeyComponent:
			a.component = v.String()
			return
		case KeyRank:
			if v.Kind() == slog.KindInt64 {
				a.rank, a.hasRank = v.Int64(), true
				return
			}
		}
	}
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			a.add(group+at.Key+".", g)
		}
		return
	}
	if at.Key == "" {
		return
	}
	a.extra += " " + group + at.Key + "=" + v.String()
}

// writeMu keeps lines of concurrent records whole.
var writeMu sync.Mutex

// Handle writes the record as its kind asks (see the package comment).
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	a := h.a
	r.Attrs(func(at slog.Attr) bool {
		a.add(h.group, at)
		return true
	})
	var b strings.Builder
	var w io.Writer
	switch {
	case a.subsys != "":
		if !h.cfg.Enabled(r.Level, a.subsys) {
			return nil
		}
		prefix := fmt.Sprintf("%s:%d ", hostname(), os.Getpid())
		if a.hasRank {
			prefix += fmt.Sprintf("[%d] ", a.rank)
		}
		prefix += a.subsys + " "
		for _, line := range strings.Split(strings.TrimRight(r.Message+a.extra, "\n"), "\n") {
			b.WriteString(prefix + line + "\n")
		}
		w = h.debugWriter()
	case a.plugin != "":
		if !h.cfg.PluginEnabled(r.Level) {
			return nil
		}
		fmt.Fprintf(&b, "flagcx %s plugin %s: %s%s\n", LevelName(r.Level), a.plugin, r.Message, a.extra)
		w = h.debugWriter()
	default:
		b.WriteString("flagcx")
		if a.component != "" {
			b.WriteString(" " + a.component)
		}
		b.WriteString(": ")
		if r.Level >= LevelWarn {
			b.WriteString("warning: ")
		}
		b.WriteString(r.Message + a.extra + "\n")
		w = h.notices
		if w == nil {
			w = os.Stderr
		}
	}
	writeMu.Lock()
	defer writeMu.Unlock()
	_, err := io.WriteString(w, b.String())
	return err
}

func (h *Handler) debugWriter() io.Writer {
	if h.debug != nil {
		return h.debug
	}
	return debugFile(h.cfg.File)
}

var (
	hostOnce sync.Once
	host     string
)

func hostname() string {
	hostOnce.Do(func() { host, _ = os.Hostname() })
	return host
}

var (
	filesMu sync.Mutex
	files   = map[string]io.Writer{}
)

// debugFile opens FLAGCX_DEBUG_FILE's file once per process (every logger
// of the process appends to it), or is stderr when pattern is "" or the
// file cannot be opened (said once, on stderr).
func debugFile(pattern string) io.Writer {
	if pattern == "" {
		return os.Stderr
	}
	filesMu.Lock()
	defer filesMu.Unlock()
	if w, ok := files[pattern]; ok {
		return w
	}
	name := strings.NewReplacer("%h", hostname(), "%p", fmt.Sprint(os.Getpid())).Replace(pattern)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		files[pattern] = os.Stderr
		fmt.Fprintf(os.Stderr, "flagcx: warning: %s=%q: %v; logging to stderr\n", env.DebugFile.Name, pattern, err)
		return os.Stderr
	}
	files[pattern] = f
	return f
}
