// Package sched holds the schedules of heterogeneous communicators as data.
//
// A Layout says which ranks form which cluster; Build turns one collective
// call on one rank into a Plan: a list of Steps (a vendor operation inside
// the cluster, a copy between device memory and pinned host staging, a host
// operation among the cluster leaders over hostnet, a host reduction or the
// final division of avg; on the shared-memory plane also marks and awaits
// between device streams, steps published in the windows, folds on the
// host or the device, and a device rank's one-launch relay), each with the
// lane it runs on and the steps of other lanes it waits for. core's
// executor runs each lane in a goroutine, so chunk k crosses the network
// while chunk k+1 is copied to the host and chunk k-1 back to the device
// (a plan of one chunk, with nothing to overlap, runs in order on the
// calling goroutine). Validate and Needs check a call before its plan is
// built.
//
// Plans depend only on the layout, the call and the options, never on
// memory or the network: every rank can build any rank's plan (`flagcx
// bench --print-plan` prints them all, FLAGCX_DEBUG_SUBSYS=COLL prints each
// rank's own), tests check them without running them (ranks of a cluster
// issue the same vendor operations in the same order, leaders the same
// hostnet ones, every send has its receive), and the executors run them,
// the shared-memory plane's (PathShm, shm_steps.go) too: what prints is
// what runs (core's TestPlansThatRunArePlansThatPrint). How each
// collective's plans are built is one table by collective (colls.go).
//
// # Clusters
//
// Ranks of one vendor (the plugin's vendor string, or "host") form a
// cluster, wherever they sit in rank order. FLAGCX_CLUSTER_SPLIT_LIST=a,b,...
// cuts the ranks, in rank order, into consecutive pieces of a, b, ... ranks
// instead: the sizes must add up to the rank count and each piece must be
// of one vendor; each piece is a cluster. Clusters are numbered by their
// first rank, which leads them (its "inter rank").
//
// # Paths
//
//	one cluster on a plugin    vendor     the vendor library directly, enqueued on the caller's stream
//	one cluster on the host    host-comm  host collectives directly
//	several clusters, one host c2c-shm    AllReduce, Reduce, Broadcast, AllGather, ReduceScatter, when every
//	                                      device rank registered the host's shared windows (ABI v2; shm.go);
//	                                      an AllReduce beside device clusters whose host ranks' buffers are
//	                                      MemAlloc's runs Plan.Registered instead (shm_registered.go)
//	several clusters           c2c        AllReduce, Reduce, Broadcast, AllGather, ReduceScatter
//	several clusters           p2p        AlltoAll, AlltoAllv, Gather, Scatter, Send/Recv groups
//	FLAGCX_USE_HOST_COMM=1     host       every call: copy to host, one host collective over all ranks, copy back
//	a library lacks the op     host       (the plan's Why says which cluster lacks what)
//	Barrier                    host       a host barrier over all ranks
//
// c2c schedules (pipelined in chunks of FLAGCX_NET_CHUNK_SIZE, default 16M,
// cut into at least 4 when the message allows, none under 256K, or under
// 4M where cluster leaders talk TCP: build.go):
//
//	AllReduce      intra Reduce to the leader | d2h | inter AllReduce | (avg: scale by 1/n) | h2d | intra Broadcast
//	Reduce         intra Reduce to the leader | d2h | inter Reduce to the root's cluster | scale | h2d | leader -> root
//	Broadcast      root's cluster: intra Broadcast from the root | d2h | inter Broadcast | h2d | intra Broadcast
//	AllGather      intra Gather to the leader | d2h | leaders exchange their clusters' blocks | h2d | intra Broadcast
//	ReduceScatter  intra Reduce to the leader | d2h | leaders exchange partial blocks, reduce | scale | h2d | intra Scatter
//
// Reductions inside clusters and between them use sum for avg; the one
// division by the rank count happens on the leader's host staging (there
// are no device kernels in the plugin ABI). Data movement inside a cluster
// runs as bytes, so it never depends on the library's data types.
//
// p2p schedules move each block directly: a copy to itself, the cluster's
// library to ranks of its cluster, hostnet (through pinned staging on a
// device) to ranks of other clusters, the last two at the same time.
//
// An AllReduce of 4 MiB on the leader of an NVIDIA cluster of two ranks,
// beside a host cluster (Plan.Format):
//
//	plan rank 0: AllReduce float32 sum count 1048576: path c2c, 4 chunks of 1M
//	  rank 0: leader of cluster 0 (NVIDIA, ranks 0,1), nvidia device 0
//	    0 intra c0  intra Reduce float32 sum send[0:1M] -> recv[0:1M] count 262144 root 0
//	    1 intra c1  intra Reduce float32 sum send[1M:2M] -> recv[1M:2M] count 262144 root 0
//	        ... 1 step of chunk 2, alike
//	    3 intra c3  intra Reduce float32 sum send[3M:4M] -> recv[3M:4M] count 262144 root 0
//	    4 d2h   c0  copy recv[0:1M] -> stage[0:1M]  (after 0)
//	    5 net   c0  inter AllReduce float32 sum stage[0:1M] in place count 262144  (after 4)
//	    6 h2d   c0  copy stage[0:1M] -> recv[0:1M]  (after 5)
//	    ...
//	   16 intra c0  intra Broadcast uint8 recv[0:1M] in place count 1048576 root 0  (after 6)
//	    ...
package sched
