/*
 * engine.c: tasks, groups, collectives and point-to-point.
 *
 * Every operation (joining a communicator, a collective, a send, a receive)
 * is a task: a small state machine whose step never blocks. A call outside
 * a group runs its one task to completion; inside a group tasks are queued
 * per thread and the outermost group end runs all of them together in one
 * progress loop. Because no step ever waits, any pattern completes: every
 * rank sending before receiving, messages far larger than a mailbox, or one
 * thread driving several ranks of the same communicator (grouped init and
 * grouped collectives, as with ncclCommInitAll).
 *
 * Collectives: each rank owns a slot in the data segment. A collective is
 * cut into rounds of at most one slot of data per rank; round R is
 *     wait until every rank's done >= R-1   (nobody still reads my slot)
 *     copy my chunk into my slot; desc; arrive = R
 *     wait until every rank's arrive >= R   (all chunks are in)
 *     check every rank's desc, compute my output from all slots; done = R
 * Reductions combine slots in rank order 0..n-1, so every rank gets
 * bit-identical results.
 *
 * Point-to-point: each ordered pair (src, dst) has a byte ring. A message is
 * a vsim_msg_header followed by its bytes; the sender copies as much as fits
 * and the receiver drains it, so messages of any size stream through. Per
 * pair, sends (and receives) are matched in issue order, as in NCCL.
 *
 * Waiting: a step that cannot progress returns IDLE. When a whole pass makes
 * no progress the loop yields a few times, then sleeps on the
 * communicator's futex word (every shared change bumps it) or, when tasks of
 * several communicators are pending, in short nanosleeps. Never a pure
 * busy-spin: CI runs more ranks than it has cores.
 *
 * Failure: every step that has to wait checks the communicator's poison
 * (a step that can still finish with what is published finishes); every ~100 ms it
 * checks whether the ranks it waits for are still alive; and a task that
 * makes no progress for FLAGCX_VENDORSIM_TIMEOUT seconds fails with a
 * message naming the ranks it waited for. Any failure poisons the
 * communicator so that the peers fail promptly too.
 */
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "vsim_internal.h"

enum { T_INIT, T_COLL, T_SEND, T_RECV };

typedef struct vsim_task vsim_task;
struct vsim_task {
  vsim_task* next;
  int kind;
  const char* api;
  vsim_comm* comm;
  vsim_stream* stream; /* NULL for init */
  int done;
  int phase;
  double last_progress;

  /* collectives */
  vsim_coll_args a;
  vsim_desc desc;
  const unsigned char* sendbuf;
  unsigned char* recvbuf;
  size_t esize;
  size_t chunk; /* elements per rank per round */
  uint64_t ticket, round_first, round_end, round;

  /* point-to-point */
  int peer;
  int dtype;
  size_t count;
  size_t bytes, moved;
  int header_done;
  unsigned char* buf;
};

/* Per-thread group state. */
static __thread int group_depth = 0;
static __thread vsim_task* queue_head = NULL;
static __thread vsim_task* queue_tail = NULL;

static const char* coll_name(int coll) {
  switch (coll) {
    case VSIM_COLL_ALLREDUCE: return "allreduce";
    case VSIM_COLL_REDUCE: return "reduce";
    case VSIM_COLL_BROADCAST: return "broadcast";
    case VSIM_COLL_ALLGATHER: return "allgather";
    case VSIM_COLL_REDUCESCATTER: return "reducescatter";
    case VSIM_COLL_ALLTOALL: return "alltoall";
    default: return "unknown-collective";
  }
}

static void describe_desc(const vsim_desc* d, char* out, size_t len) {
  int reducing = d->coll == VSIM_COLL_ALLREDUCE || d->coll == VSIM_COLL_REDUCE ||
                 d->coll == VSIM_COLL_REDUCESCATTER;
  int rooted = d->coll == VSIM_COLL_REDUCE || d->coll == VSIM_COLL_BROADCAST;
  int n = snprintf(out, len, "%s(count=%llu, %s", coll_name(d->coll), (unsigned long long)d->count,
                   vsim_dtype_name(d->dtype));
  if (reducing && n > 0 && (size_t)n < len) n += snprintf(out + n, len - (size_t)n, ", %s", vsim_op_name(d->op));
  if (rooted && n > 0 && (size_t)n < len) n += snprintf(out + n, len - (size_t)n, ", root=%d", d->root);
  if (n > 0 && (size_t)n < len) snprintf(out + n, len - (size_t)n, ")");
}

/* Appends "r" to a comma list, keeping it short. */
static void list_add(char* list, size_t len, int r) {
  size_t used = strlen(list);
  if (used + 16 < len) snprintf(list + used, len - used, "%s%d", used ? "," : "", r);
  else if (used + 5 < len && strcmp(list + used - 3, "...") != 0) snprintf(list + used, len - used, ",...");
}

/* Common precondition of every step on an established communicator. */
static int comm_usable(vsim_task* t) {
  vsim_comm* c = t->comm;
  if (c->state == VSIM_COMM_FAILED) {
    if (c->error == VSIM_OK) c->error = VSIM_ERR_INTERNAL;
    vsim_set_last_error("%s", c->last_error);
    return -1;
  }
  if (c->state == VSIM_COMM_JOINING) return 0; /* its init is queued before us */
  return 1;
}

/* A step that cannot progress. Only now does a peer's failure (the poison)
 * end the operation: an operation whose inputs are all published finishes
 * even if a peer failed afterwards, in a later operation; otherwise whether
 * it failed would depend on scheduling. */
static int idle(vsim_task* t) {
  return vsim_comm_check_poison(t->comm, t->api) ? VSIM_STEP_ERROR : VSIM_STEP_IDLE;
}

/* ------------------------------------------------------------------ */
/* Collectives                                                         */
/* ------------------------------------------------------------------ */

static void coll_fill_slot(vsim_task* t) {
  vsim_comm* c = t->comm;
  size_t es = t->esize, off = (size_t)(t->round - t->round_first) * t->chunk;
  size_t k = t->a.count - off < t->chunk ? t->a.count - off : t->chunk;
  unsigned char* slot = vsim_slot(c, c->rank);
  switch (t->a.coll) {
    case VSIM_COLL_ALLREDUCE:
    case VSIM_COLL_REDUCE:
    case VSIM_COLL_ALLGATHER:
      memcpy(slot, t->sendbuf + off * es, k * es);
      break;
    case VSIM_COLL_BROADCAST:
      if (c->rank == t->a.root) memcpy(slot, t->sendbuf + off * es, k * es);
      break;
    case VSIM_COLL_REDUCESCATTER:
    case VSIM_COLL_ALLTOALL:
      /* Sub-slot r holds what goes to rank r. */
      for (int r = 0; r < c->nranks; r++) {
        memcpy(slot + (size_t)r * t->chunk * es, t->sendbuf + ((size_t)r * t->a.count + off) * es, k * es);
      }
      break;
  }
}

/* Across hosts (net.c), sends what coll_fill_slot wrote to the ranks that
 * read it, then the round's descriptor and arrival. */
static void coll_publish(vsim_task* t) {
  vsim_comm* c = t->comm;
  if (c->net == NULL) return;
  size_t es = t->esize, off = (size_t)(t->round - t->round_first) * t->chunk;
  size_t k = t->a.count - off < t->chunk ? t->a.count - off : t->chunk;
  unsigned char* slot = vsim_slot(c, c->rank);
  switch (t->a.coll) {
    case VSIM_COLL_REDUCE:
      vsim_net_put(c, t->a.root, slot, k * es);
      break;
    case VSIM_COLL_BROADCAST:
      if (c->rank == t->a.root) vsim_net_put(c, -1, slot, k * es);
      break;
    case VSIM_COLL_REDUCESCATTER:
    case VSIM_COLL_ALLTOALL:
      for (int r = 0; r < c->nranks; r++) vsim_net_put(c, r, slot + (size_t)r * t->chunk * es, k * es);
      break;
    default:
      vsim_net_put(c, -1, slot, k * es);
  }
  vsim_shm_coll* mine = vsim_coll_ctl(c, c->rank);
  vsim_net_put(c, -1, &mine->desc, sizeof mine->desc);
  vsim_net_put64(c, -1, &mine->arrive);
}

static void coll_compute(vsim_task* t) {
  vsim_comm* c = t->comm;
  int n = c->nranks, me = c->rank;
  size_t es = t->esize, off = (size_t)(t->round - t->round_first) * t->chunk;
  size_t k = t->a.count - off < t->chunk ? t->a.count - off : t->chunk;
  size_t sub = (size_t)me * t->chunk * es; /* my sub-slot, for reducescatter/alltoall */
  unsigned char* out;
  switch (t->a.coll) {
    case VSIM_COLL_REDUCE:
      if (me != t->a.root) break;
      /* fall through */
    case VSIM_COLL_ALLREDUCE:
      out = t->recvbuf + off * es;
      memcpy(out, vsim_slot(c, 0), k * es);
      for (int r = 1; r < n; r++) vsim_reduce(out, vsim_slot(c, r), k, t->a.dtype, t->a.op);
      if (t->a.op == VSIM_AVG) vsim_avg_finish(out, k, t->a.dtype, n);
      break;
    case VSIM_COLL_BROADCAST:
      /* In place on the root the data is already where it belongs. */
      if (!(me == t->a.root && t->recvbuf == t->sendbuf)) {
        memcpy(t->recvbuf + off * es, vsim_slot(c, t->a.root), k * es);
      }
      break;
    case VSIM_COLL_ALLGATHER:
      for (int r = 0; r < n; r++) {
        memcpy(t->recvbuf + ((size_t)r * t->a.count + off) * es, vsim_slot(c, r), k * es);
      }
      break;
    case VSIM_COLL_REDUCESCATTER:
      out = t->recvbuf + off * es;
      memcpy(out, vsim_slot(c, 0) + sub, k * es);
      for (int r = 1; r < n; r++) vsim_reduce(out, vsim_slot(c, r) + sub, k, t->a.dtype, t->a.op);
      if (t->a.op == VSIM_AVG) vsim_avg_finish(out, k, t->a.dtype, n);
      break;
    case VSIM_COLL_ALLTOALL:
      for (int r = 0; r < n; r++) {
        memcpy(t->recvbuf + ((size_t)r * t->a.count + off) * es, vsim_slot(c, r) + sub, k * es);
      }
      break;
  }
}

/* Waits (without blocking) for every rank's counter to reach `want`. */
static int coll_wait_all(vsim_task* t, int arrive, uint64_t want, int check_live) {
  vsim_comm* c = t->comm;
  for (int r = 0; r < c->nranks; r++) {
    _Atomic uint64_t* ctr = arrive ? &vsim_coll_ctl(c, r)->arrive : &vsim_coll_ctl(c, r)->done;
    if (atomic_load_explicit(ctr, memory_order_acquire) >= want) continue;
    char why[256];
    /* Re-read after the liveness check: a rank may publish and then leave. */
    if (check_live && vsim_peer_gone(c, r, why, sizeof why) &&
        atomic_load_explicit(ctr, memory_order_acquire) < want) {
      vsim_comm_fail(c, VSIM_ERR_REMOTE,
                     "%s: rank %d waits for rank %d in collective #%llu (%s), but %s", t->api,
                     c->rank, r, (unsigned long long)t->desc.seq, coll_name(t->a.coll), why);
      return -1;
    }
    return 0;
  }
  return 1;
}

static int coll_step(vsim_task* t, int check_live) {
  vsim_comm* c = t->comm;
  int u = comm_usable(t);
  if (u <= 0) return u < 0 ? VSIM_STEP_ERROR : VSIM_STEP_IDLE;
  if (t->ticket != c->coll_served) return idle(t); /* an earlier collective goes first */
  if (t->round_end == 0) {
    /* Chunking is decided when the collective starts rather than when it is
     * issued, because a collective may be queued in the same group as the
     * init of its communicator, before the slot size is known. Collectives
     * start in issue order, so every rank numbers the rounds alike. */
    size_t per_slot = c->slot_bytes / t->esize;
    if (t->a.coll == VSIM_COLL_REDUCESCATTER || t->a.coll == VSIM_COLL_ALLTOALL) {
      per_slot /= (size_t)c->nranks;
    }
    t->chunk = per_slot < t->a.count ? per_slot : t->a.count;
    uint64_t rounds = (t->a.count + t->chunk - 1) / t->chunk;
    t->round_first = t->round = c->next_round;
    t->round_end = t->round_first + rounds;
    c->next_round += rounds;
  }
  int progressed = 0;
  for (;;) {
    if (t->phase == 0) {
      int w = coll_wait_all(t, 0, t->round - 1, check_live);
      if (w < 0) return VSIM_STEP_ERROR;
      if (w == 0) return progressed ? VSIM_STEP_PROGRESS : idle(t);
      coll_fill_slot(t);
      vsim_shm_coll* mine = vsim_coll_ctl(c, c->rank);
      mine->desc = t->desc;
      atomic_store_explicit(&mine->arrive, t->round, memory_order_release);
      vsim_notify(c);
      coll_publish(t);
      t->phase = 1;
      progressed = 1;
    }
    int w = coll_wait_all(t, 1, t->round, check_live);
    if (w < 0) return VSIM_STEP_ERROR;
    if (w == 0) return progressed ? VSIM_STEP_PROGRESS : idle(t);
    /* Everyone is in this round (nobody can be past it before we publish
     * done), so every desc is the one for this collective. */
    for (int r = 0; r < c->nranks; r++) {
      const vsim_desc* d = &vsim_coll_ctl(c, r)->desc;
      if (memcmp(d, &t->desc, sizeof *d) != 0) {
        char mine[160], theirs[160];
        describe_desc(&t->desc, mine, sizeof mine);
        describe_desc(d, theirs, sizeof theirs);
        vsim_comm_fail(c, VSIM_ERR_INVALID_USAGE,
                       "%s: collective #%llu does not match across ranks: rank %d called %s but "
                       "rank %d called %s (collective #%llu); every rank must issue the same "
                       "collectives with the same arguments in the same order",
                       t->api, (unsigned long long)t->desc.seq, c->rank, mine, r, theirs,
                       (unsigned long long)d->seq);
        return VSIM_STEP_ERROR;
      }
    }
    coll_compute(t);
    atomic_store_explicit(&vsim_coll_ctl(c, c->rank)->done, t->round, memory_order_release);
    vsim_notify(c);
    vsim_net_put64(c, -1, &vsim_coll_ctl(c, c->rank)->done);
    t->round++;
    t->phase = 0;
    if (t->round == t->round_end) {
      c->coll_served++;
      return VSIM_STEP_DONE;
    }
    progressed = 1;
  }
}

static void coll_timeout_text(vsim_task* t, char* out, size_t len) {
  vsim_comm* c = t->comm;
  char list[256] = "";
  if (t->round_end == 0) {
    snprintf(out, len, "rank %d never started collective #%llu (%s): %s", c->rank,
             (unsigned long long)t->desc.seq, coll_name(t->a.coll),
             c->state == VSIM_COMM_JOINING ? "the communicator is still joining"
                                           : "an earlier collective did not finish");
    return;
  }
  uint64_t want = t->phase == 0 ? t->round - 1 : t->round;
  for (int r = 0; r < c->nranks; r++) {
    vsim_shm_coll* ctl = vsim_coll_ctl(c, r);
    uint64_t v = t->phase == 0 ? atomic_load(&ctl->done) : atomic_load(&ctl->arrive);
    if (v < want) list_add(list, sizeof list, r);
  }
  snprintf(out, len, "rank %d waits in collective #%llu (%s, round %llu of %llu) for ranks %s",
           c->rank, (unsigned long long)t->desc.seq, coll_name(t->a.coll),
           (unsigned long long)(t->round - t->round_first + 1),
           (unsigned long long)(t->round_end - t->round_first), list[0] ? list : "?");
}

/* ------------------------------------------------------------------ */
/* Point-to-point                                                      */
/* ------------------------------------------------------------------ */

static void ring_write(unsigned char* ring, size_t cap, uint64_t pos, const void* src, size_t n) {
  size_t at = (size_t)(pos % cap), first = cap - at < n ? cap - at : n;
  memcpy(ring + at, src, first);
  memcpy(ring, (const unsigned char*)src + first, n - first);
}

static void ring_read(const unsigned char* ring, size_t cap, uint64_t pos, void* dst, size_t n) {
  size_t at = (size_t)(pos % cap), first = cap - at < n ? cap - at : n;
  memcpy(dst, ring + at, first);
  memcpy((unsigned char*)dst + first, ring, n - first);
}

/* Across hosts, sends ring bytes [pos, pos+n) to the ring's reader. */
static void ring_publish(vsim_comm* c, int dst, unsigned char* ring, size_t cap, uint64_t pos, size_t n) {
  size_t at = (size_t)(pos % cap), first = cap - at < n ? cap - at : n;
  vsim_net_put(c, dst, ring + at, first);
  vsim_net_put(c, dst, ring, n - first);
}

static int p2p_stalled(vsim_task* t, _Atomic uint64_t* other, uint64_t seen, int check_live) {
  vsim_comm* c = t->comm;
  char why[256];
  if (!check_live || !vsim_peer_gone(c, t->peer, why, sizeof why)) return 0;
  if (atomic_load_explicit(other, memory_order_acquire) != seen) return 0; /* it moved before leaving */
  vsim_comm_fail(c, VSIM_ERR_REMOTE, "%s: rank %d %s rank %d (%zu of %zu bytes done), but %s", t->api,
                 c->rank, t->kind == T_SEND ? "sends to" : "receives from", t->peer, t->moved,
                 t->bytes, why);
  return 1;
}

static int send_step(vsim_task* t, int check_live) {
  vsim_comm* c = t->comm;
  int u = comm_usable(t);
  if (u <= 0) return u < 0 ? VSIM_STEP_ERROR : VSIM_STEP_IDLE;
  if (t->ticket != c->send_served[t->peer]) return idle(t);
  vsim_shm_mbox* ctl = vsim_mbox_ctl(c, c->rank, t->peer);
  unsigned char* ring = vsim_mbox_ring(c, c->rank, t->peer);
  size_t cap = c->mbox_bytes;
  uint64_t tail = atomic_load_explicit(&ctl->tail, memory_order_relaxed); /* we are its only writer */
  uint64_t head = atomic_load_explicit(&ctl->head, memory_order_acquire);
  size_t space = cap - (size_t)(tail - head);
  uint64_t tail0 = tail;
  int progressed = 0;
  if (!t->header_done && space >= sizeof(vsim_msg_header)) {
    vsim_msg_header mh = {VSIM_MSG_MAGIC, t->dtype, t->count, t->bytes, c->msg_seq[t->peer]++};
    ring_write(ring, cap, tail, &mh, sizeof mh);
    tail += sizeof mh;
    space -= sizeof mh;
    t->header_done = 1;
    progressed = 1;
  }
  if (t->header_done) {
    size_t k = t->bytes - t->moved < space ? t->bytes - t->moved : space;
    if (k > 0) {
      ring_write(ring, cap, tail, t->buf + t->moved, k);
      tail += k;
      t->moved += k;
      progressed = 1;
    }
  }
  if (progressed) {
    ring_publish(c, t->peer, ring, cap, tail0, (size_t)(tail - tail0));
    atomic_store_explicit(&ctl->tail, tail, memory_order_release);
    vsim_notify(c);
    vsim_net_put64(c, t->peer, &ctl->tail);
  }
  if (t->header_done && t->moved == t->bytes) {
    c->send_served[t->peer]++;
    return VSIM_STEP_DONE;
  }
  if (progressed) return VSIM_STEP_PROGRESS;
  return p2p_stalled(t, &ctl->head, head, check_live) ? VSIM_STEP_ERROR : idle(t);
}

static int recv_step(vsim_task* t, int check_live) {
  vsim_comm* c = t->comm;
  int u = comm_usable(t);
  if (u <= 0) return u < 0 ? VSIM_STEP_ERROR : VSIM_STEP_IDLE;
  if (t->ticket != c->recv_served[t->peer]) return idle(t);
  vsim_shm_mbox* ctl = vsim_mbox_ctl(c, t->peer, c->rank);
  const unsigned char* ring = vsim_mbox_ring(c, t->peer, c->rank);
  size_t cap = c->mbox_bytes;
  uint64_t head = atomic_load_explicit(&ctl->head, memory_order_relaxed); /* we are its only writer */
  uint64_t tail = atomic_load_explicit(&ctl->tail, memory_order_acquire);
  size_t avail = (size_t)(tail - head);
  int progressed = 0;
  if (!t->header_done && avail >= sizeof(vsim_msg_header)) {
    vsim_msg_header mh;
    ring_read(ring, cap, head, &mh, sizeof mh);
    if (mh.magic != VSIM_MSG_MAGIC) {
      vsim_comm_fail(c, VSIM_ERR_INTERNAL, "%s: mailbox from rank %d is corrupt", t->api, t->peer);
      return VSIM_STEP_ERROR;
    }
    if (mh.bytes != t->bytes) {
      vsim_comm_fail(c, VSIM_ERR_INVALID_USAGE,
                     "%s: size mismatch: rank %d posted a receive of %zu x %s (%zu bytes) from "
                     "rank %d, but rank %d sent %llu x %s (%llu bytes) as its message #%llu to "
                     "rank %d; a send and its receive must have the same size",
                     t->api, c->rank, t->count, vsim_dtype_name(t->dtype), t->bytes, t->peer,
                     t->peer, (unsigned long long)mh.count, vsim_dtype_name(mh.dtype),
                     (unsigned long long)mh.bytes, (unsigned long long)mh.seq, c->rank);
      return VSIM_STEP_ERROR;
    }
    head += sizeof mh;
    avail -= sizeof mh;
    t->header_done = 1;
    progressed = 1;
  }
  if (t->header_done) {
    size_t k = t->bytes - t->moved < avail ? t->bytes - t->moved : avail;
    if (k > 0) {
      ring_read(ring, cap, head, t->buf + t->moved, k);
      head += k;
      t->moved += k;
      progressed = 1;
    }
  }
  if (progressed) {
    atomic_store_explicit(&ctl->head, head, memory_order_release);
    vsim_notify(c);
    vsim_net_put64(c, t->peer, &ctl->head);
  }
  if (t->header_done && t->moved == t->bytes) {
    c->recv_served[t->peer]++;
    return VSIM_STEP_DONE;
  }
  if (progressed) return VSIM_STEP_PROGRESS;
  return p2p_stalled(t, &ctl->tail, tail, check_live) ? VSIM_STEP_ERROR : idle(t);
}

/* ------------------------------------------------------------------ */
/* The progress loop                                                   */
/* ------------------------------------------------------------------ */

static int task_step_locked(vsim_task* t, int check_live) {
  switch (t->kind) {
    case T_INIT: return vsim_comm_join_step(t->comm, &t->phase, t->api, check_live);
    case T_COLL: return coll_step(t, check_live);
    case T_SEND: return send_step(t, check_live);
    default: return recv_step(t, check_live);
  }
}

/* Operations of one communicator may run on several streams' threads at
 * once; their steps take turns on its process-local state. */
static int task_step(vsim_task* t, int check_live) {
  pthread_mutex_lock(&t->comm->step_lock);
  int r = task_step_locked(t, check_live);
  pthread_mutex_unlock(&t->comm->step_lock);
  return r;
}

static void task_timeout(vsim_task* t, double waited) {
  vsim_comm* c = t->comm;
  char what[512];
  switch (t->kind) {
    case T_INIT:
      vsim_comm_join_timeout(c, t->api, waited);
      return;
    case T_COLL:
      coll_timeout_text(t, what, sizeof what);
      break;
    case T_SEND:
      snprintf(what, sizeof what,
               "rank %d sent %zu of %zu bytes to rank %d, whose mailbox stays full (did rank %d "
               "post the matching receive?)",
               c->rank, t->moved, t->bytes, t->peer, t->peer);
      break;
    default:
      snprintf(what, sizeof what,
               "rank %d received %zu of %zu bytes from rank %d and waits for more (did rank %d "
               "post the matching send?)",
               c->rank, t->moved, t->bytes, t->peer, t->peer);
      break;
  }
  vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: timed out after %.1f s without progress: %s "
                 "(FLAGCX_VENDORSIM_TIMEOUT=%g s)", t->api, waited, what, vsim_env_timeout());
}

static long futex_wait(_Atomic uint32_t* addr, uint32_t val, long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  return syscall(SYS_futex, (uint32_t*)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void idle_wait(vsim_comm* wc, uint32_t seen, int idle_passes) {
  if (idle_passes <= 3) {
    sched_yield();
    return;
  }
  if (wc != NULL) {
    /* The bounded sleep lets the loop re-check deadlines and liveness
     * (a dead process bumps no futex). */
    atomic_fetch_add(&wc->hdr->waiters, 1);
    futex_wait(&wc->hdr->epoch, seen, 20 * 1000 * 1000L);
    atomic_fetch_sub(&wc->hdr->waiters, 1);
    return;
  }
  long ns = 10000L << (idle_passes < 10 ? idle_passes - 3 : 7); /* 10 us .. 1.28 ms */
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* Fails every unfinished task after `failed` failed: their peers would
 * otherwise wait for operations this thread will never perform. */
static void abandon(vsim_task* list, vsim_task* failed) {
  vsim_comm* fc = failed->comm;
  vsim_comm_poison(fc, fc->error, fc->last_error);
  char msg[1100];
  snprintf(msg, sizeof msg, "abandoned because another operation of its group failed: %s",
           fc->last_error);
  for (vsim_task* t = list; t != NULL; t = t->next) {
    if (t->done || t == failed) continue;
    vsim_comm* c = t->comm;
    if (c->state != VSIM_COMM_FAILED) {
      vsim_comm_fail(c, fc->error, "%s: %s", t->api, msg);
      vsim_comm_poison(c, fc->error, c->last_error);
    }
    if (t->kind == T_INIT) vsim_comm_poison(c, fc->error, c->last_error);
  }
  /* The thread's last error is the root cause, not the last consequence. */
  vsim_set_last_error("%s", fc->last_error);
}

static vsim_result run_tasks(vsim_task* list) {
  double timeout = vsim_env_timeout();
  double now = vsim_now(), next_live = now + 0.1;
  for (vsim_task* t = list; t != NULL; t = t->next) t->last_progress = now;
  int idle_passes = 0;
  for (;;) {
    /* When every pending task is on one mapped communicator, its futex
     * word is the one thing to sleep on; snapshot it before the pass so a
     * change made during the pass cuts the sleep short. */
    vsim_comm* wc = NULL;
    int several = 0;
    for (vsim_task* t = list; t != NULL; t = t->next) {
      if (t->done) continue;
      if (wc == NULL) wc = t->comm;
      else if (wc != t->comm) several = 1;
    }
    if (several || (wc != NULL && wc->hdr == NULL)) wc = NULL;
    uint32_t seen = wc ? atomic_load(&wc->hdr->epoch) : 0;

    int check_live = now >= next_live;
    if (check_live) next_live = now + 0.1;
    int pending = 0, progressed = 0;
    for (vsim_task* t = list; t != NULL; t = t->next) {
      if (t->done) continue;
      int r = task_step(t, check_live);
      if (r == VSIM_STEP_ERROR) {
        vsim_result code = t->comm->error != VSIM_OK ? t->comm->error : VSIM_ERR_INTERNAL;
        abandon(list, t);
        return code;
      }
      if (r == VSIM_STEP_DONE) {
        t->done = 1;
        progressed = 1;
        continue;
      }
      if (r == VSIM_STEP_PROGRESS) {
        progressed = 1;
        t->last_progress = now;
      } else if (now - t->last_progress > timeout) {
        task_timeout(t, now - t->last_progress);
        vsim_result code = t->comm->error;
        abandon(list, t);
        return code;
      }
      pending++;
    }
    if (pending == 0) return VSIM_OK;
    if (progressed) {
      idle_passes = 0;
    } else {
      idle_wait(wc, seen, ++idle_passes);
    }
    now = vsim_now();
  }
}

static void free_tasks(vsim_task* list) {
  while (list != NULL) {
    vsim_task* n = list->next;
    free(list);
    list = n;
  }
}

/* A list of tasks as one stream work item (stream.c). A failure has
 * already poisoned the communicators and set their async error. */
static int run_item(void* list) {
  vsim_result r = run_tasks(list);
  free_tasks(list);
  return r != VSIM_OK;
}

/* Runs list now (synchronous mode, or tasks without a stream such as a
 * grouped init) after the work already on its tasks' streams, or enqueues
 * it on them. */
static vsim_result launch(vsim_task* list) {
  vsim_stream* ss[64];
  int n = 0, now = vsim_env_sync();
  for (vsim_task* t = list; t != NULL; t = t->next) {
    if (t->stream == NULL) {
      now = 1;
      continue;
    }
    int seen = 0;
    for (int i = 0; i < n; i++) seen |= ss[i] == t->stream;
    if (!seen && n < 64) ss[n++] = t->stream;
    else if (!seen) now = 1;
  }
  if (!now) {
    if (vsim_stream_enqueue_joined(ss, n, run_item, list) == 0) return VSIM_OK;
    vsim_set_last_error("%s: out of host memory enqueueing the operation", list->api);
    free_tasks(list);
    return VSIM_ERR_SYSTEM;
  }
  for (int i = 0; i < n; i++) (void)vsim_stream_sync(ss[i]);
  vsim_result r = run_tasks(list);
  free_tasks(list);
  return r;
}

/* Runs a task at once (outside a group) or queues it (inside one). On an
 * immediate run the task is freed. */
static vsim_result submit(vsim_task* t) {
  t->next = NULL;
  if (group_depth > 0) {
    if (queue_tail) queue_tail->next = t;
    else queue_head = t;
    queue_tail = t;
    return VSIM_OK;
  }
  return launch(t);
}

vsim_result vsim_group_start(void) {
  group_depth++;
  return VSIM_OK;
}

int vsim_group_depth(void) { return group_depth; }

vsim_result vsim_group_end(const char* api) {
  if (group_depth == 0) {
    vsim_set_last_error("%s: called without a matching group start", api);
    return VSIM_ERR_INVALID_USAGE;
  }
  if (--group_depth > 0) return VSIM_OK;
  vsim_task* list = queue_head;
  queue_head = queue_tail = NULL;
  if (list == NULL) return VSIM_OK;
  return launch(list);
}

/* ------------------------------------------------------------------ */
/* Issuing operations                                                  */
/* ------------------------------------------------------------------ */

/* Joining is a task like any other (comm.c makes the communicator and
 * does the steps), so that inside a group several ranks join in one
 * progress loop. */
vsim_result vsim_comm_init(vsim_comm** out, const void* idp, size_t idbytes, const char* tag,
                           int nranks, int rank, int device, const char* api) {
  vsim_result r = vsim_comm_new(out, idp, idbytes, tag, nranks, rank, device, api);
  if (r != VSIM_OK) return r;
  vsim_comm* c = *out;
  vsim_task* t = calloc(1, sizeof *t);
  if (t == NULL) {
    vsim_comm_release(c, 0);
    *out = NULL;
    vsim_set_last_error("%s: out of host memory", api);
    return VSIM_ERR_SYSTEM;
  }
  t->kind = T_INIT;
  t->api = api;
  t->comm = c;
  int grouped = group_depth > 0;
  r = submit(t);
  if (r != VSIM_OK && !grouped) {
    /* Outside a group a failed init leaves nothing behind (as NCCL's
     * blocking init); inside one the caller holds the handle and must
     * destroy or abort it. */
    vsim_comm_release(c, 1);
    *out = NULL;
  }
  return r;
}

/* Operations may be issued on a communicator that is ready, or still
 * joining inside the same group. */
static vsim_result check_issuable(vsim_comm* c, const char* api) {
  switch (c->state) {
    case VSIM_COMM_FAILED:
      vsim_set_last_error("%s: the communicator failed earlier and cannot be used (abort or destroy "
                          "it): %s", api, c->last_error);
      return c->error != VSIM_OK ? c->error : VSIM_ERR_INTERNAL;
    case VSIM_COMM_FINALIZED:
      vsim_set_last_error("%s: the communicator was finalized", api);
      return VSIM_ERR_INVALID_USAGE;
    case VSIM_COMM_JOINING:
      if (group_depth == 0) {
        vsim_set_last_error("%s: the communicator has not finished initialising", api);
        return VSIM_ERR_INVALID_USAGE;
      }
      return VSIM_OK;
    default:
      return VSIM_OK;
  }
}

vsim_result vsim_collective(vsim_comm* c, const char* api, const vsim_coll_args* a,
                            const void* sendbuf, void* recvbuf, vsim_stream* s) {
  vsim_result r = check_issuable(c, api);
  if (r != VSIM_OK) return r;
  size_t es = vsim_dtype_size(a->dtype);
  if (es == 0) {
    vsim_set_last_error("%s: invalid data type %d (vendorsim emulates types 0..9: int8 .. bfloat16)",
                        api, a->dtype);
    return VSIM_ERR_INVALID_ARG;
  }
  int reducing = a->coll == VSIM_COLL_ALLREDUCE || a->coll == VSIM_COLL_REDUCE ||
                 a->coll == VSIM_COLL_REDUCESCATTER;
  int rooted = a->coll == VSIM_COLL_REDUCE || a->coll == VSIM_COLL_BROADCAST;
  if (reducing && (a->op < 0 || a->op >= VSIM_NUM_OPS)) {
    vsim_set_last_error("%s: invalid reduction op %d (vendorsim emulates sum, prod, max, min, avg)",
                        api, a->op);
    return VSIM_ERR_INVALID_ARG;
  }
  int n = c->nranks, me = c->rank;
  if (rooted && (a->root < 0 || a->root >= n)) {
    vsim_set_last_error("%s: invalid root %d (nranks %d)", api, a->root, n);
    return VSIM_ERR_INVALID_ARG;
  }
  if (a->count == 0) return VSIM_OK; /* nothing moves, as in NCCL */
  if (a->count > SIZE_MAX / es / (size_t)n) {
    vsim_set_last_error("%s: count %zu is too large", api, a->count);
    return VSIM_ERR_INVALID_ARG;
  }
  size_t bytes = a->count * es, all = bytes * (size_t)n;
  size_t sbytes = bytes, rbytes = bytes;
  switch (a->coll) {
    case VSIM_COLL_REDUCE: if (me != a->root) rbytes = 0; break;
    case VSIM_COLL_BROADCAST: if (me != a->root) sbytes = 0; break;
    case VSIM_COLL_ALLGATHER: rbytes = all; break;
    case VSIM_COLL_REDUCESCATTER: sbytes = all; break;
    case VSIM_COLL_ALLTOALL: sbytes = rbytes = all; break;
    default: break;
  }
  if ((r = vsim_check_buffer(c, api, "sendbuff", sendbuf, sbytes)) != VSIM_OK) return r;
  if ((r = vsim_check_buffer(c, api, "recvbuff", recvbuf, rbytes)) != VSIM_OK) return r;

  vsim_task* t = calloc(1, sizeof *t);
  if (t == NULL) {
    vsim_set_last_error("%s: out of host memory", api);
    return VSIM_ERR_SYSTEM;
  }
  t->kind = T_COLL;
  t->api = api;
  t->comm = c;
  t->stream = s;
  t->a = *a;
  if (!reducing) t->a.op = -1;
  if (!rooted) t->a.root = -1;
  t->sendbuf = sendbuf;
  t->recvbuf = recvbuf;
  t->esize = es;
  t->ticket = c->coll_issued++;
  t->desc = (vsim_desc){t->a.coll, t->a.dtype, t->a.op, t->a.root, (uint64_t)a->count, t->ticket};
  return submit(t);
}

static vsim_result p2p(vsim_comm* c, const char* api, int kind, void* buf, size_t count, int dtype,
                       int peer, vsim_stream* s) {
  vsim_result r = check_issuable(c, api);
  if (r != VSIM_OK) return r;
  size_t es = vsim_dtype_size(dtype);
  if (es == 0) {
    vsim_set_last_error("%s: invalid data type %d", api, dtype);
    return VSIM_ERR_INVALID_ARG;
  }
  if (peer < 0 || peer >= c->nranks) {
    vsim_set_last_error("%s: invalid peer %d (nranks %d)", api, peer, c->nranks);
    return VSIM_ERR_INVALID_ARG;
  }
  if (count == 0) return VSIM_OK; /* nothing moves */
  if (count > SIZE_MAX / es) {
    vsim_set_last_error("%s: count %zu is too large", api, count);
    return VSIM_ERR_INVALID_ARG;
  }
  if ((r = vsim_check_buffer(c, api, kind == T_SEND ? "sendbuff" : "recvbuff", buf, count * es)) != VSIM_OK) {
    return r;
  }
  vsim_task* t = calloc(1, sizeof *t);
  if (t == NULL) {
    vsim_set_last_error("%s: out of host memory", api);
    return VSIM_ERR_SYSTEM;
  }
  t->kind = kind;
  t->api = api;
  t->comm = c;
  t->stream = s;
  t->peer = peer;
  t->dtype = dtype;
  t->count = count;
  t->bytes = count * es;
  t->buf = buf;
  t->ticket = kind == T_SEND ? c->send_issued[peer]++ : c->recv_issued[peer]++;
  return submit(t);
}

vsim_result vsim_send(vsim_comm* c, const char* api, const void* buf, size_t count, int dtype,
                      int peer, vsim_stream* s) {
  return p2p(c, api, T_SEND, (void*)buf, count, dtype, peer, s);
}

vsim_result vsim_recv(vsim_comm* c, const char* api, void* buf, size_t count, int dtype, int peer,
                      vsim_stream* s) {
  return p2p(c, api, T_RECV, buf, count, dtype, peer, s);
}
