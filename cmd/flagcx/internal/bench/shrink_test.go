package bench

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
)

// TestRevokedToShrink: --on-failure shrink goes on only without a lost
// rank; a revoke that lost none (a deadline overrun while every rank
// answered) ends the run, or it would start again for ever.
func TestRevokedToShrink(t *testing.T) {
	lost := &core.RevokedError{Rank: 0, Failed: []int{2}, Hosts: []string{"h"}, By: 1, Cause: "rank 2 is stopped"}
	none := &core.RevokedError{Rank: 0, By: 0, Cause: "eventSynchronize did not return within 3s"}
	for _, c := range []struct {
		name   string
		shrink bool
		err    error
		want   bool
	}{
		{"a lost rank", true, lost, true},
		{"a lost rank, wrapped", true, fmt.Errorf("allreduce: %w", lost), true},
		{"a lost rank without shrink", false, lost, false},
		{"no rank lost", true, none, false},
		{"another error", true, errors.New("boom"), false},
		{"no error", true, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, revokedToShrink(&Config{Shrink: c.shrink}, c.err))
		})
	}
}
