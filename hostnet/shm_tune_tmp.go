//go:build linux

package hostnet

import (
	"os"
	"strconv"
	"time"
)

func init() {
	if v, err := strconv.Atoi(os.Getenv("TMP_SPIN_US")); err == nil {
		shmOversubscribed.spin = time.Duration(v) * time.Microsecond
		shmDedicated.spin = time.Duration(v) * time.Microsecond
	}
	if v, err := strconv.Atoi(os.Getenv("TMP_YIELD_US")); err == nil {
		shmOversubscribed.yield = time.Duration(v) * time.Microsecond
		shmDedicated.yield = time.Duration(v) * time.Microsecond
	}
}
