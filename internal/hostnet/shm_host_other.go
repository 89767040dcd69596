//go:build !linux

package hostnet

import "github.com/flagcx/flagcx-go/internal/hostnet/shm"

// mapHost: shared memory needs Linux (Connect never gets here off Linux,
// since no segment is made).
func (m *Mesh) mapHost(MeshConfig, []int) error { return shm.ErrNotLinux }
