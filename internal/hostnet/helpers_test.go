package hostnet

import (
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"time"
)

// Test helpers of the mesh's tests (what the transports' tests share too
// is in internal/hostnet/nettest).

var testSecret = Secret{0: 0xf1, 1: 0xa6, 7: 0xcc, 15: 0x42}

func testConfig(timeout time.Duration) Config {
	cfg := tcp.DefaultConfig()
	cfg.Timeout = timeout
	return cfg
}
