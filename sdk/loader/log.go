package loader

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LogLevel is a level of the plugin log callback, numbered as FLAGCX_DEBUG's
// (and NCCL_DEBUG's).
type LogLevel int32

const (
	LogNone LogLevel = iota
	LogVersion
	LogWarn
	LogInfo
	LogAbort
	LogTrace
)

var logLevelNames = []string{"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"}

func (l LogLevel) String() string {
	if l < 0 || int(l) >= len(logLevelNames) {
		return fmt.Sprintf("LEVEL%d", int32(l))
	}
	return logLevelNames[l]
}

// LogFunc receives one log line of a plugin.
type LogFunc func(plugin string, level LogLevel, msg string)

// One C callback serves every plugin (purego callbacks are few and never
// freed); the context pointer the plugin hands back is an index into
// logTargets, not a Go pointer.
var (
	logOnce    sync.Once
	logCB      uintptr
	logMu      sync.Mutex
	logTargets []logTarget
)

type logTarget struct {
	plugin string
	fn     LogFunc
}

func logCallback() uintptr {
	logOnce.Do(func() {
		logCB = purego.NewCallback(func(ctx uintptr, level uintptr, msg *byte) {
			logMu.Lock()
			var t logTarget
			if ctx > 0 && int(ctx) <= len(logTargets) {
				t = logTargets[ctx-1]
			}
			logMu.Unlock()
			if t.fn != nil && msg != nil {
				t.fn(t.plugin, LogLevel(int32(level)), goString(uintptr(unsafe.Pointer(msg))))
			}
		})
	})
	return logCB
}

// registerLog returns the context value for one init call.
func registerLog(plugin string, fn LogFunc) uintptr {
	if fn == nil {
		fn = stderrLog(os.Getenv(EnvDebug))
	}
	logMu.Lock()
	defer logMu.Unlock()
	logTargets = append(logTargets, logTarget{plugin, fn})
	return uintptr(len(logTargets))
}

// stderrLog prints lines up to the FLAGCX_DEBUG level (WARN, INFO, TRACE...).
func stderrLog(debug string) LogFunc {
	max := LogNone
	for i, n := range logLevelNames {
		if strings.EqualFold(strings.TrimSpace(debug), n) {
			max = LogLevel(i)
		}
	}
	return func(plugin string, level LogLevel, msg string) {
		if level != LogNone && level <= max {
			fmt.Fprintf(os.Stderr, "flagcx %s plugin %s: %s\n", level, plugin, msg)
		}
	}
}
