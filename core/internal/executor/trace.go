package executor

import (
	"context"
	"runtime/trace"
)

// region marks a span of the calling goroutine in the execution trace
// (flagcx bench's FLAGCX_BENCH_TRACE, go tool trace) and returns what ends
// it; without a trace running it costs a check.
func region(name string) func() {
	if !trace.IsEnabled() {
		return func() {}
	}
	return trace.StartRegion(context.Background(), name).End
}
