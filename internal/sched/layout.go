package sched

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/sdk"
)

// HostVendor is the cluster key of ranks on the built-in host backend.
const HostVendor = "host"

// EnvSplitList is FlagCX's variable that splits clusters further.
const EnvSplitList = "FLAGCX_CLUSTER_SPLIT_LIST"

// Member is what one rank reported about its backend at init.
type Member struct {
	Rank int `json:"rank"`
	// Vendor is the cluster key: the plugin's vendor string ("NVIDIA"), or
	// HostVendor for the host backend.
	Vendor string `json:"vendor"`
	// Plugin is the plugin's name ("nvidia"); empty on the host backend.
	Plugin string `json:"plugin,omitempty"`
	Device int    `json:"device"`
	// Types and Ops are the bit masks (1<<DataType, 1<<RedOp) of what the
	// plugin's collective library accepts; every bit on the host backend.
	Types uint32 `json:"types"`
	Ops   uint32 `json:"ops"`
	// Emulated: the plugin runs on vendorsim, not on the vendor's runtime.
	Emulated bool `json:"emulated,omitempty"`
}

// OnDevice reports whether the rank runs on a plugin's device.
func (m Member) OnDevice() bool { return m.Plugin != "" }

// Cluster is a group of ranks on one vendor's library.
type Cluster struct {
	Index  int    `json:"index"`
	Vendor string `json:"vendor"`
	Plugin string `json:"plugin,omitempty"`
	// Ranks are the cluster's ranks in increasing order; they need not be
	// contiguous.
	Ranks []int `json:"ranks"`
	// Leader is the cluster's first rank: its "inter rank", which carries
	// the cluster's data between clusters.
	Leader int    `json:"leader"`
	Types  uint32 `json:"types"`
	Ops    uint32 `json:"ops"`
}

// OnDevice reports whether the cluster runs on a plugin's devices.
func (c Cluster) OnDevice() bool { return c.Plugin != "" }

// Supports reports whether the cluster's library accepts dt (and op, when
// reducing): always on the host backend.
func (c Cluster) Supports(dt sdk.DataType, op sdk.RedOp, reducing bool) bool {
	if c.Types&(1<<uint(dt)) == 0 {
		return false
	}
	return !reducing || c.Ops&(1<<uint(op)) != 0
}

func (c Cluster) String() string {
	name := c.Vendor
	if c.Plugin != "" {
		name = fmt.Sprintf("%s (%s plugin)", c.Vendor, c.Plugin)
	}
	return fmt.Sprintf("cluster %d: %s, ranks %s, leader %d", c.Index, name, FormatRanks(c.Ranks), c.Leader)
}

// Layout is a communicator's ranks and clusters. It is the same on every
// rank.
type Layout struct {
	Members  []Member  `json:"members"`
	Clusters []Cluster `json:"clusters"`
	// Split is the FLAGCX_CLUSTER_SPLIT_LIST the layout was made with.
	Split []int `json:"split,omitempty"`

	clusterOf []int // rank -> cluster index
	local     []int // rank -> index within its cluster
}

// ErrSplitList wraps every problem with a split list.
var ErrSplitList = errors.New("bad " + EnvSplitList)

// ParseSplitList reads FLAGCX_CLUSTER_SPLIT_LIST: sizes separated by commas
// ("2,2", "1, 3"). Empty means no split.
func ParseSplitList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w %q: %q is not a cluster size: write positive sizes separated by commas, e.g. 2,2", ErrSplitList, s, strings.TrimSpace(part))
		}
		out = append(out, n)
	}
	return out, nil
}

// NewLayout groups members (indexed by rank) into clusters.
//
// Without a split list, the ranks of one vendor form one cluster, wherever
// they sit in rank order. A split list a,b,c,... cuts the ranks, in rank
// order, into consecutive pieces of a, b, c, ... ranks; the sizes must add
// up to the rank count and every piece must be of one vendor, and each
// piece is a cluster. So on 4 NVIDIA ranks "2,2" makes clusters {0,1} and
// {2,3}, and "1,1,1,1" four clusters of one rank; with --ranks
// nvidia:2,host:2, "1,1,2" makes {0}, {1} and {2,3}.
//
// Clusters are numbered by their first rank, which leads them.
func NewLayout(members []Member, split []int) (*Layout, error) {
	n := len(members)
	if n == 0 {
		return nil, fmt.Errorf("%w: a layout needs at least one rank", sdk.ErrInvalidArgument)
	}
	for r, m := range members {
		if m.Rank != r {
			return nil, fmt.Errorf("%w: member %d says it is rank %d", sdk.ErrInternalError, r, m.Rank)
		}
		if m.Vendor == "" {
			return nil, fmt.Errorf("%w: rank %d reported no vendor", sdk.ErrInternalError, r)
		}
	}
	l := &Layout{Members: append([]Member(nil), members...), Split: append([]int(nil), split...)}
	l.clusterOf = make([]int, n)
	l.local = make([]int, n)
	var groups [][]int
	if len(split) == 0 {
		byVendor := map[string]int{}
		for r, m := range members {
			g, ok := byVendor[m.Vendor]
			if !ok {
				g = len(groups)
				byVendor[m.Vendor] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], r)
		}
	} else {
		total := 0
		for _, s := range split {
			if s < 1 {
				return nil, fmt.Errorf("%w %s: size %d is not positive: write positive sizes that add up to the rank count", ErrSplitList, FormatRanks(split), s)
			}
			total += s
		}
		if total != n {
			return nil, fmt.Errorf("%w %s: the sizes add up to %d, but the communicator has %d ranks: give sizes that add up to %d, in rank order",
				ErrSplitList, FormatRanks(split), total, n, n)
		}
		r := 0
		for _, s := range split {
			piece := make([]int, 0, s)
			for i := 0; i < s; i++ {
				if members[r].Vendor != members[r-i].Vendor {
					return nil, fmt.Errorf("%w %s: ranks %d..%d form one cluster, but rank %d is %s and rank %d is %s: every piece must be of one vendor (cut between them)",
						ErrSplitList, FormatRanks(split), r-i, r-i+s-1, r-i, members[r-i].Vendor, r, members[r].Vendor)
				}
				piece = append(piece, r)
				r++
			}
			groups = append(groups, piece)
		}
	}
	for g, ranks := range groups {
		first := members[ranks[0]]
		c := Cluster{Index: g, Vendor: first.Vendor, Plugin: first.Plugin, Ranks: ranks, Leader: ranks[0], Types: ^uint32(0), Ops: ^uint32(0)}
		for i, r := range ranks {
			m := members[r]
			if m.Plugin != first.Plugin {
				return nil, fmt.Errorf("%w: ranks %d and %d are both %s but use different plugins (%q, %q): load the same plugin on every rank of a vendor",
					sdk.ErrInvalidUsage, first.Rank, r, m.Vendor, first.Plugin, m.Plugin)
			}
			c.Types &= m.Types
			c.Ops &= m.Ops
			l.clusterOf[r] = g
			l.local[r] = i
		}
		l.Clusters = append(l.Clusters, c)
	}
	return l, nil
}

// NRanks is the communicator's size.
func (l *Layout) NRanks() int { return len(l.Members) }

// IsHomogeneous reports whether the communicator is a single cluster.
func (l *Layout) IsHomogeneous() bool { return len(l.Clusters) == 1 }

// ClusterOf is the cluster of rank.
func (l *Layout) ClusterOf(rank int) *Cluster { return &l.Clusters[l.clusterOf[rank]] }

// LocalRank is rank's index within its cluster.
func (l *Layout) LocalRank(rank int) int { return l.local[rank] }

// String lists the clusters on one line.
func (l *Layout) String() string {
	parts := make([]string, len(l.Clusters))
	for i, c := range l.Clusters {
		parts[i] = c.String()
	}
	kind := "heterogeneous"
	if l.IsHomogeneous() {
		kind = "homogeneous"
	}
	return fmt.Sprintf("%d ranks, %s, %d cluster(s): %s", l.NRanks(), kind, len(l.Clusters), strings.Join(parts, "; "))
}

// FormatRanks writes 0,1,2,5 as "0-2,5".
func FormatRanks(rs []int) string {
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(rs[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(rs[i]), strconv.Itoa(rs[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
