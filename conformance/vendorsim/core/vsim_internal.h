/*
 * vsim_internal.h: shared-memory layout and communicator internals, used
 * by the core's files below. Not part of the core's API.
 *
 * The core's files call one way, each only into files listed before it
 * (vsim_core.h declares what vendor libraries call; vendor libraries sit
 * above all of them):
 *
 *   env.c        settings, debug output, last error, the clock, and a
 *                communicator's failure record (vsim_comm_fail)
 *   kernels.c    data types and reductions
 *   vsim_sock.c  TCP sockets
 *   device.c     devices and the current device             (env)
 *   layout.c     sizes and offsets of the data segment       (env)
 *   stream.c     streams and events                          (env)
 *   memory.c     device and pinned host memory               (device, stream)
 *   net.c        TCP rendezvous, ranks on several hosts      (env, sock, layout)
 *   comm.c       unique ids, shared-memory rendezvous, poison, liveness,
 *                lifetime                                    (env, memory, stream,
 *                                                             net, layout)
 *   engine.c     tasks, groups, collectives, point-to-point, and
 *                vsim_comm_init, which runs the join as a task (all above)
 *
 * TestCoreCallsOneWay (conformance/vendorsim/layers_test.go) reads this
 * list and fails when a file calls one listed after it.
 *
 * A communicator is two POSIX shared-memory segments named after the unique
 * id:
 *
 *   "<name>"   the header, of a FIXED size for every communicator, so that
 *              every rank can create/open and ftruncate it without knowing
 *              who comes first; it holds the agreed nranks and layout, the
 *              arrival counter, per-rank state (pid, joined/left/aborted),
 *              the futex word and the "poison" (first fatal error).
 *   "<name>d"  the data, sized from nranks once nranks is agreed: per-rank
 *              collective control lines, per-pair mailbox control lines,
 *              one collective slot per rank and one mailbox ring per ordered
 *              pair (src, dst).
 *
 * Both names are unlinked as soon as every rank has mapped them, so nothing
 * is left in /dev/shm after the processes exit; the names carry the boot
 * id, pid namespace and pid of rank 0, so that segments of a rendezvous
 * whose ranks all died half-way are reclaimed by the next one (comm.c).
 *
 * Ranks meet first through the TCP rendezvous of the unique id (net.c).
 * When they all share one host (one /dev/shm and pid namespace) they use
 * the segments above; otherwise every rank keeps a private copy of the
 * same layout and each write a rank makes to its own parts (its slot and
 * control line, its mailboxes' rings and counters) is sent over TCP to
 * the ranks that read it, whose receiver thread applies it in order.
 */
#ifndef VSIM_INTERNAL_H
#define VSIM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "vsim_core.h"

#define VSIM_MAX_RANKS 256
#define VSIM_NAME_MAX 64

/* Layout of the unique id (at the start of the vendor's id buffer). Like
 * NCCL's, it carries the address of a rendezvous that the process which
 * made it serves (net.c), so that ranks on any host can meet. */
#define VSIM_ID_MAGIC 0x32444953565846ull /* "FXVSID2" */
typedef struct {
  uint64_t magic;
  char tag[16];              /* vendor API tag, NUL-terminated */
  char where[VSIM_NAME_MAX]; /* "<ipv4>:<port>/<key: 16 hex digits>" */
} vsim_id;

/* Header states (hdr->magic). */
#define VSIM_HDR_EMPTY 0ull
#define VSIM_HDR_BUSY 1ull /* the first rank is filling the layout in */
#define VSIM_HDR_READY 0x5244485356584646ull

/* Per-rank state in the header (hdr->ranks[r].state). */
enum { VSIM_RANK_ABSENT = 0, VSIM_RANK_JOINED = 1, VSIM_RANK_LEFT = 2, VSIM_RANK_ABORTED = 3 };

typedef struct {
  _Atomic uint32_t state;
  _Atomic int32_t pid;
  char pad[56];
} vsim_shm_rank;

typedef struct {
  _Atomic uint64_t magic;
  /* Written once by the first rank, before magic becomes READY. */
  uint32_t nranks;
  int32_t creator_rank;
  uint64_t slot_bytes;
  uint64_t mbox_bytes;
  uint64_t data_bytes;
  char pad0[24];
  _Atomic uint32_t arrived;  /* ranks that have mapped both segments */
  _Atomic uint32_t epoch;    /* futex word: bumped on every shared change */
  _Atomic uint32_t waiters;  /* processes sleeping on epoch */
  _Atomic uint32_t poisoned; /* 0 none, 1 being written, 2 readable */
  int32_t poison_code;
  int32_t poison_rank;
  char pad1[40];
  char poison_msg[640];
  vsim_shm_rank ranks[VSIM_MAX_RANKS];
} vsim_shm_header;

/* What a rank is doing in a collective; ranks compare them each round so
 * that mismatched calls fail with a message instead of corrupting data. */
typedef struct {
  int32_t coll, dtype, op, root;
  uint64_t count;
  uint64_t seq; /* collective number on this communicator */
} vsim_desc;

/* Collective control line of one rank. Round numbers start at 1 and grow
 * by one per chunk of every collective on the communicator. */
typedef struct {
  _Atomic uint64_t arrive; /* my slot holds my data for this round        */
  _Atomic uint64_t done;   /* I have finished reading every slot of round */
  vsim_desc desc;
  char pad[128 - 16 - sizeof(vsim_desc)];
} vsim_shm_coll;

/* Mailbox control of one ordered pair: a byte ring written by src, read by
 * dst. tail and head count bytes since creation (never wrap in practice). */
typedef struct {
  _Atomic uint64_t tail; /* written by the sender   */
  char pad0[56];
  _Atomic uint64_t head; /* written by the receiver */
  char pad1[56];
} vsim_shm_mbox;

/* Every message in a mailbox starts with this header. */
#define VSIM_MSG_MAGIC 0x4753454du
typedef struct {
  uint32_t magic;
  int32_t dtype;
  uint64_t count;
  uint64_t bytes;
  uint64_t seq;
} vsim_msg_header;

/* What the rendezvous says about each rank. */
typedef struct {
  uint64_t hostkey; /* equal for ranks that share /dev/shm and pids */
  uint32_t ip;      /* its mesh listener, network order */
  uint16_t port;
  uint16_t pad;
  int32_t pid;      /* in its own pid namespace */
  int32_t pad2;
} vsim_peer;

typedef struct vsim_net vsim_net;

enum { VSIM_COMM_JOINING = 0, VSIM_COMM_READY, VSIM_COMM_FAILED, VSIM_COMM_FINALIZED };

struct vsim_comm {
  uint64_t live_magic;
  struct vsim_comm* next_live;
  char tag[16];
  char name[VSIM_NAME_MAX];
  char data_name[VSIM_NAME_MAX + 2];
  int nranks, rank, device;
  int state;
  int claimed;            /* we own hdr->ranks[rank]           */
  vsim_result error;      /* first local error (async error)   */
  char last_error[1024];  /* its text                          */

  vsim_shm_header* hdr;
  size_t hdr_bytes;
  unsigned char* data;
  size_t data_bytes;
  size_t slot_bytes, mbox_bytes;

  /* Issue order, used to run a thread's queued operations in the order
   * NCCL would: collectives one after another, and per peer the sends (and
   * the receives) one after another. */
  uint64_t next_round;     /* first round of the next collective issued */
  uint64_t coll_issued;    /* collectives issued                        */
  uint64_t coll_served;    /* collectives completed                     */
  uint64_t* send_issued;   /* [nranks]                                  */
  uint64_t* send_served;
  uint64_t* recv_issued;
  uint64_t* recv_served;
  uint64_t* msg_seq;       /* [nranks] messages sent to each peer       */
  pthread_mutex_t step_lock; /* engine.c: steps of its operations take turns */

  /* net.c: the rendezvous, and the TCP mesh when the ranks span hosts. */
  uint64_t key;             /* from the unique id */
  uint32_t root_ip;         /* network order */
  uint16_t root_port;
  int booted;               /* the rendezvous table has arrived */
  int boot_phase;
  int boot_fd, listen_fd;
  unsigned char arrived_map[VSIM_MAX_RANKS / 8];
  unsigned char bbuf[8192]; /* a partial frame from the rendezvous */
  size_t bbuf_len;
  vsim_peer* peers;         /* [nranks], from the rendezvous table */
  uint64_t boot_slot, boot_mbox;
  vsim_net* net;            /* NULL: one host, shared memory */
};

/* Pointers into the data segment. */
static inline vsim_shm_coll* vsim_coll_ctl(vsim_comm* c, int r) {
  return (vsim_shm_coll*)(c->data + (size_t)r * sizeof(vsim_shm_coll));
}
static inline vsim_shm_mbox* vsim_mbox_ctl(vsim_comm* c, int src, int dst) {
  size_t off = (size_t)c->nranks * sizeof(vsim_shm_coll);
  return (vsim_shm_mbox*)(c->data + off + ((size_t)src * c->nranks + dst) * sizeof(vsim_shm_mbox));
}
/* ---- layout.c ---- */
static inline size_t vsim_round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
size_t vsim_slots_offset(int nranks);
size_t vsim_data_size(int nranks, size_t slot, size_t mbox);
void vsim_choose_layout(int nranks, size_t* slot, size_t* mbox);
static inline unsigned char* vsim_slot(vsim_comm* c, int r) {
  return c->data + vsim_slots_offset(c->nranks) + (size_t)r * c->slot_bytes;
}
static inline unsigned char* vsim_mbox_ring(vsim_comm* c, int src, int dst) {
  size_t off = vsim_slots_offset(c->nranks) + (size_t)c->nranks * c->slot_bytes;
  return c->data + off + ((size_t)src * c->nranks + dst) * c->mbox_bytes;
}

/* ---- env.c (internal part) ---- */
/* Records an error on the communicator (and as the thread's last error). */
void vsim_comm_fail(vsim_comm* c, vsim_result code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
double vsim_now(void);

/* ---- comm.c: rendezvous and lifetime ---- */
/* Validates the arguments and makes a communicator that has yet to join
 * (engine.c's vsim_comm_init runs the join). */
vsim_result vsim_comm_new(vsim_comm** out, const void* idp, size_t idbytes, const char* tag,
                          int nranks, int rank, int device, const char* api);
/* One non-blocking step of joining; returns like a task step. */
int vsim_comm_join_step(vsim_comm* c, int* phase, const char* api, int check_live);
void vsim_comm_join_timeout(vsim_comm* c, const char* api, double waited);
void vsim_comm_release(vsim_comm* c, int unlink_names);
void vsim_comm_unregister(vsim_comm* c);
/* Publishes the first fatal error to every rank; later calls are ignored. */
void vsim_comm_poison(vsim_comm* c, vsim_result code, const char* msg);
/* If some rank poisoned the communicator, fails c with that error and
 * returns 1. */
int vsim_comm_check_poison(vsim_comm* c, const char* api);
/* 1 when rank r can no longer take part (left, aborted, or its process is
 * gone); fills why. */
int vsim_peer_gone(vsim_comm* c, int r, char* why, size_t whylen);
/* Wakes every process sleeping on the communicator. */
void vsim_notify(vsim_comm* c);

/* Task step results. */
enum { VSIM_STEP_IDLE = 0, VSIM_STEP_PROGRESS = 1, VSIM_STEP_DONE = 2, VSIM_STEP_ERROR = 3 };

/* ---- net.c: rendezvous over TCP, and ranks on several hosts ---- */
/* Starts this process's rendezvous service (once) and formats where. */
vsim_result vsim_net_where(char* where, size_t len, uint64_t key);
/* Parses where; -1 when malformed. */
int vsim_net_parse_where(const char* where, uint32_t* ip, uint16_t* port, uint64_t* key);
/* One non-blocking step of the rendezvous (and of the mesh, when the ranks
 * span hosts); DONE once c->booted and, across hosts, c->net is up. */
int vsim_net_boot_step(vsim_comm* c, const char* api);
/* The init deadline passed during the rendezvous: fails c naming the ranks
 * that never came, and tells the others. */
void vsim_net_boot_timeout(vsim_comm* c, const char* api, double waited);
/* Tells the rendezvous this rank failed (text in c->last_error). */
void vsim_net_boot_abort(vsim_comm* c);
void vsim_net_release(vsim_comm* c);
/* Sends a write this rank made at p (inside c->data) to rank dst, or to
 * every other rank (dst -1); nothing on one host. */
void vsim_net_put(vsim_comm* c, int dst, const void* p, size_t n);
void vsim_net_put64(vsim_comm* c, int dst, _Atomic uint64_t* p);
void vsim_net_state(vsim_comm* c, uint32_t state);
void vsim_net_poison(vsim_comm* c);
/* 1 when rank r's connection is gone (net mode only); fills why. */
int vsim_net_peer_gone(vsim_comm* c, int r, char* why, size_t whylen);
uint64_t vsim_host_key(void);

#endif /* VSIM_INTERNAL_H */
