package onesided

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPaths: Alloc's memory of a host rank is mapped by the peers of its
// host (the zero-copy path) and Register's is not; ranks that talk TCP
// map nothing.
func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		link   string
		shared bool
	}{
		{"shm", true},
		{"tcp", false},
	} {
		t.Run(tc.link, func(t *testing.T) {
			states := startAll(t, fakeComms(t, 2, tc.shared, false))
			alloc, reg := make([]*Window, 2), make([]*Window, 2)
			errs := onAll(2, func(r int) error {
				var err error
				if alloc[r], err = states[r].Alloc("AllocWindow", 100); err == nil {
					reg[r], err = states[r].Register("RegisterWindow", Mem{Host: make([]byte, 100), Len: 100})
				}
				return err
			})
			require.NoError(t, errors.Join(errs...))
			for r, o := range states {
				p := 1 - r
				require.Equal(t, tc.link, o.Links().Link(p).Transport())
				require.Equal(t, tc.shared, o.direct(alloc[r], p), fmt.Sprint("rank ", r))
				require.False(t, o.direct(reg[r], p))
			}
		})
	}
}
