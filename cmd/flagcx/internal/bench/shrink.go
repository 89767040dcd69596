package bench

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/sched"
)

// revokedToShrink: err is a lost rank's revoke, and --on-failure shrink
// asks to go on without it. A revoke that lost no rank (a deadline that
// the ranks' own queued work overran, every rank still answering) is not
// one: a communicator of the same ranks would meet the same deadline, and
// the run would start again for ever.
func revokedToShrink(cfg *Config, err error) bool {
	var re *core.RevokedError
	return cfg.Shrink && errors.As(err, &re) && len(re.Failed) > 0
}

// shrink is --on-failure shrink after a rank was lost: the survivors make
// a communicator of themselves (core.Comm.Shrink) and the old one goes;
// the new rank 0 says what failed and how many ranks go on.
func shrink(cfg *Config, e Env, comm communicator, be backend, re *core.RevokedError) (communicator, backend, error) {
	old := comm.Comm.(*core.Comm) // runRank returns a *core.RevokedError only from one
	hc, err := old.Shrink(re.Failed)
	be.close()
	_ = comm.abort()
	if err != nil {
		return communicator{}, nil, fmt.Errorf("--on-failure shrink: %w (after: %w)", err, re)
	}
	if cfg.Placement != nil {
		var kept Placement
		for r, p := range cfg.Placement {
			if !slices.Contains(re.Failed, r) {
				kept = append(kept, p)
			}
		}
		cfg.Placement = kept
	}
	if cfg.Root >= hc.Count() {
		cfg.Root = 0
	}
	if hc.Rank() == 0 {
		fmt.Fprintf(e.Stdout, "# %v\n# --on-failure shrink: the run goes on with %d of %d ranks, without %s\n",
			re, hc.Count(), old.Count(), sched.FormatRanks(re.Failed))
	}
	return wrapComm(cfg, old.Backend(), hc)
}
