//go:build !amd64

package reduce

import "github.com/flagcx/flagcx-go/sdk"

// vectorScale: no vector kernels on this architecture (vector_amd64.go).
func vectorScale([]byte, sdk.DataType, int) int { return 0 }
