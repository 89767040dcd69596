package core

import (
	"fmt"
	"slices"
	"time"

	"github.com/flagcx/flagcx-go/core/internal/ctl"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// Shrink makes a communicator of the ranks of c not in exclude, on every
// one of them: the way on after a failure (exclude the Failed ranks of the
// *RevokedError), and a planned shrink alike. It needs none of the
// excluded ranks, and none of c's data links: the survivors meet on c's
// control plane (core/internal/ctl), where the lowest surviving rank hands the
// others the new communicator's unique id, and start it as InitRank does.
// The survivors keep their order (new rank = position among them) and
// their backends; clusters lose their excluded ranks and a cluster left
// empty disappears (a split list shrinks alike), each cluster's first
// surviving rank leads it, schedules are planned afresh, and each
// cluster's vendor communicator is started anew among its survivors (the
// plugin ABI has no split of its own). opts are InitRank's, applied after
// those Shrink takes from c (WithTimeout, say).
//
// It is collective over the survivors: each calls it with the same
// exclude. An excluded rank that calls it gets nil at once. c itself is
// left as it is: destroy it (a revoked one fails every call).
func (c *Comm) Shrink(exclude []int, opts ...Option) (*Comm, error) {
	ex, err := c.excludeSet(exclude)
	if err != nil {
		return nil, err
	}
	if slices.Contains(ex, c.rank) {
		return nil, nil
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: Shrink on rank %d: the communicator was destroyed or aborted: shrink before destroying it", sdk.ErrInvalidUsage, c.rank)
	}
	var survivors []int
	for r := range c.n {
		if !slices.Contains(ex, r) {
			survivors = append(survivors, r)
		}
	}
	id, err := c.shrinkID(ex, survivors)
	if err != nil {
		return nil, err
	}
	base := []Option{WithBackend(c.be), WithNetConfig(c.world.Config()), WithEnv(c.lookup),
		WithSplitList(c.shrunkSplit(ex)), WithHostPath(c.opts.HostPath), WithChunk(c.opts.Chunk)}
	nc, err := InitRank(id, len(survivors), slices.Index(survivors, c.rank), append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("shrink on rank %d: %w", c.rank, err)
	}
	return nc, nil
}

// excludeSet checks exclude and returns it sorted.
func (c *Comm) excludeSet(exclude []int) ([]int, error) {
	ex := slices.Clone(exclude)
	slices.Sort(ex)
	for i, r := range ex {
		switch {
		case r < 0 || r >= c.n:
			return nil, fmt.Errorf("%w: Shrink on rank %d: excluded rank %d is out of range for %d ranks (use 0..%d)", sdk.ErrInvalidArgument, c.rank, r, c.n, c.n-1)
		case i > 0 && ex[i-1] == r:
			return nil, fmt.Errorf("%w: Shrink on rank %d: rank %d is excluded twice: name each rank once", sdk.ErrInvalidArgument, c.rank, r)
		}
	}
	if len(ex) == c.n {
		return nil, fmt.Errorf("%w: Shrink on rank %d: every rank is excluded: keep at least one", sdk.ErrInvalidArgument, c.rank)
	}
	return ex, nil
}

// shrinkID is the survivors' new unique id: the lowest survivor makes it
// and sends it to the others on the control plane, each of which waits
// for it up to the communicator's deadline.
func (c *Comm) shrinkID(ex, survivors []int) (UniqueID, error) {
	cfg := c.world.Config()
	if len(survivors) == 1 || c.ctl == nil {
		return GetUniqueID(WithIDNetConfig(cfg))
	}
	wait := cfg.Timeout
	if wait <= 0 {
		wait = hostnet.DefaultTimeout
	}
	if c.rank == survivors[0] {
		id, err := GetUniqueID(WithIDNetConfig(cfg))
		if err != nil {
			return id, fmt.Errorf("shrink on rank %d: %w", c.rank, err)
		}
		msg := ctl.Msg{Kind: ctl.Shrink, ID: id.String(), Exclude: ex}
		for _, r := range survivors[1:] {
			if _, err := c.ctl.Ask(r, msg, wait); err != nil {
				return id, fmt.Errorf("%w: shrink on rank %d: rank %d did not take the new communicator's id (is it lost too? exclude it): %w", sdk.ErrRemoteError, c.rank, r, err)
			}
		}
		return id, nil
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ctl.Shrinks():
			if m.From != survivors[0] {
				continue // a leader of an earlier Shrink with other exclusions
			}
			if !slices.Equal(m.Exclude, ex) {
				return UniqueID{}, fmt.Errorf("%w: shrink on rank %d: rank %d excludes ranks %v, this rank %v: give every survivor the same exclude",
					sdk.ErrInvalidUsage, c.rank, m.From, m.Exclude, ex)
			}
			id, err := ParseUniqueID(m.ID)
			if err != nil {
				return id, fmt.Errorf("shrink on rank %d: %w", c.rank, err)
			}
			return id, nil
		case <-deadline.C:
			return UniqueID{}, fmt.Errorf("%w: shrink on rank %d: rank %d, the lowest survivor, sent no id within %v (is it lost too, or not calling Shrink? exclude it)",
				sdk.ErrRemoteError, c.rank, survivors[0], wait)
		}
	}
}

// shrunkSplit is c's split list without the excluded ranks (nil without
// one): a cut is a run of consecutive ranks, so its survivors are one.
func (c *Comm) shrunkSplit(ex []int) []int {
	if len(c.layout.Split) == 0 {
		return nil
	}
	var out []int
	for _, cl := range c.layout.Clusters {
		n := 0
		for _, r := range cl.Ranks {
			if !slices.Contains(ex, r) {
				n++
			}
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out
}
