// Package hostcomm is a rank's host communicator: the host engine
// (core/internal/host) over links to every peer (internal/hostnet's mesh).
// It holds what every communicator of core stands on:
//
//   - the bootstrap: an ID (rendezvous address and secret, and its
//     256-byte form), the rendezvous that hands every rank the peer
//     table (bootstrap.go), and Init, which connects the mesh;
//   - Split, over the parent's links;
//   - the digest of the call now running, which labels every message and
//     shared-memory step so that ranks making different calls fail with
//     both calls named (digest.go);
//   - the link table (which transport each pair uses, and why);
//   - failure notices to the peers and the first failure kept for the
//     control plane (firstfail.go), and the stalled processes of this
//     host named in errors (stalled.go).
//
// core.Comm runs on one or more of them (every rank, its cluster, the
// cluster leaders); on the host placement its collectives go straight to
// the one of every rank. Every message a peer sends here is read by one
// decoder that checks it (peercheck.go; docs/security.md).
package hostcomm
