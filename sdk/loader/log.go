package loader

import (
	"context"
	"fmt"
	"github.com/flagcx/flagcx-go/internal/base/cmem"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flagcx/flagcx-go/internal/base/flog"
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
				t.fn(t.plugin, LogLevel(int32(level)), cmem.GoString(uintptr(unsafe.Pointer(msg))))
			}
		})
	})
	return logCB
}

// registerLog returns the context value for one init call.
func registerLog(plugin string, fn LogFunc) uintptr {
	if fn == nil {
		fn = defaultLog(plugin)
	}
	logMu.Lock()
	defer logMu.Unlock()
	logTargets = append(logTargets, logTarget{plugin, fn})
	return uintptr(len(logTargets))
}

// defaultLog sends a plugin's lines to the process's logger, which shows
// them at the level FLAGCX_DEBUG asks for as "flagcx LEVEL plugin NAME:
// message".
func defaultLog(plugin string) LogFunc {
	log := flog.Default().With(flog.KeyPlugin, plugin)
	return func(_ string, level LogLevel, msg string) {
		if l, ok := flog.FlagCXLevel(int(level)); ok {
			log.Log(context.Background(), l, msg)
		}
	}
}
