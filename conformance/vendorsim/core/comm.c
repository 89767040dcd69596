/*
 * comm.c: unique ids, the shared-memory rendezvous of a communicator, peer
 * liveness, poisoning and the communicator's lifetime.
 *
 * The ranks first meet over TCP at the rendezvous the unique id names
 * (net.c), which tells them whether they share one host. Across hosts
 * net.c connects them and this file's shared memory is not used. On one
 * host they meet in /dev/shm:
 *
 * Rendezvous (see vsim_internal.h for the layout), written so that ranks may
 * arrive in any order and at any time, and a rank that never comes or dies
 * makes the others fail before their deadline instead of hanging:
 *
 *  1. shm_open(name, O_CREAT) + ftruncate to the fixed header size. Every
 *     rank does both; creating and sizing are idempotent, so there is no
 *     "who creates it" race, and the zero-filled header is the initial state.
 *  2. The first rank to CAS magic EMPTY->BUSY writes nranks and the layout
 *     (slot and mailbox sizes) and then publishes magic=READY. Everyone else
 *     waits for READY and then compares nranks: a mismatch is an invalid
 *     usage, reported to every rank through the poison.
 *  3. Each rank claims hdr->ranks[rank] (CAS ABSENT->JOINED; a second claim
 *     of the same rank is an invalid usage), opens and maps the data segment
 *     (its size is known now), and increments `arrived`.
 *  4. When arrived == nranks every rank has mapped both segments; each rank
 *     unlinks both names (ENOENT ignored) so nothing outlives the processes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "vsim_internal.h"

#define LIVE_MAGIC 0x564d4f434d495356ull

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static vsim_comm* live_comms = NULL;

/* ------------------------------------------------------------------ */
/* Unique ids                                                          */
/* ------------------------------------------------------------------ */

vsim_result vsim_get_unique_id(void* out, size_t idbytes, const char* tag) {
  static _Atomic uint32_t counter = 0;
  if (out == NULL) {
    vsim_set_last_error("unique id pointer is NULL");
    return VSIM_ERR_INVALID_ARG;
  }
  if (idbytes < sizeof(vsim_id)) {
    vsim_set_last_error("vendorsim needs an id of at least %zu bytes", sizeof(vsim_id));
    return VSIM_ERR_INTERNAL;
  }
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
    /* No entropy source: the rendezvous is this process's, so time and
     * the counter keep its keys apart. */
    rnd = (uint64_t)(vsim_now() * 1e9);
  }
  rnd ^= (uint64_t)atomic_fetch_add(&counter, 1) << 48;
  vsim_id id;
  memset(&id, 0, sizeof id);
  id.magic = VSIM_ID_MAGIC;
  snprintf(id.tag, sizeof id.tag, "%s", tag);
  vsim_result r = vsim_net_where(id.where, sizeof id.where, rnd);
  if (r != VSIM_OK) return r;
  memset(out, 0, idbytes);
  memcpy(out, &id, sizeof id);
  return VSIM_OK;
}

/* An id must carry our magic, the caller's tag, and a name of the form we
 * generate; anything else (an id never broadcast, a real NCCL id, garbage)
 * is rejected before any shared memory is touched. */
static int parse_id(const void* in, size_t idbytes, const char* tag, vsim_id* id, vsim_comm* c,
                    char* why, size_t whylen) {
  if (idbytes < sizeof(vsim_id)) {
    snprintf(why, whylen, "id buffer too small");
    return -1;
  }
  memcpy(id, in, sizeof *id);
  if (id->magic != VSIM_ID_MAGIC) {
    snprintf(why, whylen,
             "the unique id was not produced by this emulator's GetUniqueId (bad magic "
             "0x%016llx; was it broadcast to every rank?)",
             (unsigned long long)id->magic);
    return -1;
  }
  if (memchr(id->tag, 0, sizeof id->tag) == NULL || strcmp(id->tag, tag) != 0) {
    snprintf(why, whylen, "the unique id belongs to another vendor API (tag \"%.15s\", want \"%s\")",
             id->tag, tag);
    return -1;
  }
  if (memchr(id->where, 0, sizeof id->where) == NULL ||
      vsim_net_parse_where(id->where, &c->root_ip, &c->root_port, &c->key) != 0) {
    snprintf(why, whylen, "the unique id is corrupt (bad rendezvous address)");
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Errors, poison, notification                                        */
/* ------------------------------------------------------------------ */

static void futex_wake_all(_Atomic uint32_t* addr) {
  syscall(SYS_futex, (uint32_t*)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void vsim_notify(vsim_comm* c) {
  if (c->hdr == NULL) return;
  atomic_fetch_add(&c->hdr->epoch, 1);
  /* Dekker pairing with the waiter, which increments waiters before it
   * re-reads epoch inside FUTEX_WAIT: either we see the waiter and wake it,
   * or its FUTEX_WAIT sees the new epoch and does not sleep. */
  if (atomic_load(&c->hdr->waiters) != 0) futex_wake_all(&c->hdr->epoch);
}

void vsim_comm_poison(vsim_comm* c, vsim_result code, const char* msg) {
  if (c->hdr == NULL) {
    vsim_net_boot_abort(c); /* still at the rendezvous: it tells the others */
    return;
  }
  uint32_t expect = 0;
  if (!atomic_compare_exchange_strong(&c->hdr->poisoned, &expect, 1)) return;
  c->hdr->poison_code = (int32_t)code;
  c->hdr->poison_rank = c->rank;
  snprintf(c->hdr->poison_msg, sizeof c->hdr->poison_msg, "%s", msg);
  atomic_store_explicit(&c->hdr->poisoned, 2, memory_order_release);
  vsim_notify(c);
  vsim_net_poison(c);
}

int vsim_comm_check_poison(vsim_comm* c, const char* api) {
  if (c->hdr == NULL) return 0;
  if (atomic_load_explicit(&c->hdr->poisoned, memory_order_acquire) != 2) return 0;
  vsim_result code = (vsim_result)c->hdr->poison_code;
  int who = c->hdr->poison_rank;
  if (who == c->rank && c->error != VSIM_OK) return 1; /* our own poison */
  /* A peer's usage error (mismatched sizes, nranks...) is the same usage
   * error here; anything else is a remote failure from this rank's view. */
  if (code != VSIM_ERR_INVALID_USAGE) code = VSIM_ERR_REMOTE;
  vsim_comm_fail(c, code, "%s: rank %d failed, so rank %d cannot continue: %s", api, who, c->rank,
                 c->hdr->poison_msg);
  return 1;
}

/* A process is gone when kill(pid, 0) says so, or when it is a zombie
 * (exited but not yet reaped by its parent, which a test harness may be slow
 * to do). */
static int pid_alive(int pid) {
  if (pid <= 0 || pid == (int)getpid()) return 1;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 1; /* no /proc: trust kill() */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char* rp = strrchr(buf, ')'); /* the command name may contain anything */
  if (rp == NULL || rp[1] != ' ') return 1;
  return !(rp[2] == 'Z' || rp[2] == 'X');
}

int vsim_peer_gone(vsim_comm* c, int r, char* why, size_t whylen) {
  if (c->hdr == NULL || r == c->rank) return 0;
  if (c->net != NULL && atomic_load(&c->hdr->ranks[r].state) == VSIM_RANK_JOINED) {
    return vsim_net_peer_gone(c, r, why, whylen); /* another pid namespace: its connection tells */
  }
  uint32_t st = atomic_load_explicit(&c->hdr->ranks[r].state, memory_order_acquire);
  int pid = atomic_load(&c->hdr->ranks[r].pid);
  switch (st) {
    case VSIM_RANK_LEFT:
      snprintf(why, whylen, "rank %d (pid %d) destroyed its communicator", r, pid);
      return 1;
    case VSIM_RANK_ABORTED:
      snprintf(why, whylen, "rank %d (pid %d) aborted its communicator", r, pid);
      return 1;
    case VSIM_RANK_JOINED:
      if (!pid_alive(pid)) {
        snprintf(why, whylen, "rank %d (pid %d) exited", r, pid);
        return 1;
      }
      return 0;
    default:
      return 0;
  }
}

/* ------------------------------------------------------------------ */
/* Live communicators                                                  */
/* ------------------------------------------------------------------ */

static void register_comm(vsim_comm* c) {
  pthread_mutex_lock(&live_lock);
  c->live_magic = LIVE_MAGIC;
  c->next_live = live_comms;
  live_comms = c;
  pthread_mutex_unlock(&live_lock);
}

void vsim_comm_unregister(vsim_comm* c) {
  pthread_mutex_lock(&live_lock);
  vsim_comm** pp = &live_comms;
  while (*pp != NULL && *pp != c) pp = &(*pp)->next_live;
  if (*pp == c) *pp = c->next_live;
  c->live_magic = 0;
  pthread_mutex_unlock(&live_lock);
}

vsim_comm* vsim_comm_lookup(const void* h) {
  pthread_mutex_lock(&live_lock);
  vsim_comm* c = live_comms;
  while (c != NULL && (const void*)c != h) c = c->next_live;
  pthread_mutex_unlock(&live_lock);
  return c;
}

int vsim_comm_nranks(const vsim_comm* c) { return c->nranks; }
int vsim_comm_rank(const vsim_comm* c) { return c->rank; }
int vsim_comm_device(const vsim_comm* c) { return c->device; }
const char* vsim_comm_last_error(const vsim_comm* c) { return c->last_error; }

vsim_result vsim_comm_async_error(vsim_comm* c) {
  if (c->error != VSIM_OK) return c->error;
  if (c->hdr != NULL && atomic_load(&c->hdr->poisoned) == 2) return VSIM_ERR_REMOTE;
  return VSIM_OK;
}

/* Opens (creating if needed) a segment of exactly `bytes` and maps it.
 * posix_fallocate reserves the pages now: on a full /dev/shm that is a
 * clean error here rather than a SIGBUS in the middle of a collective. */
static void* map_segment(const char* name, size_t bytes, char* why, size_t whylen) {
  int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) {
    snprintf(why, whylen, "shm_open(%s): %s", name, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, whylen, "fstat(%s): %s", name, strerror(errno));
    close(fd);
    return NULL;
  }
  /* Only grow: a segment is only ever sized to `bytes` (every rank agrees
   * on the size before it opens), so this just avoids a needless call. */
  if ((size_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) != 0) {
    snprintf(why, whylen, "ftruncate(%s, %zu): %s", name, bytes, strerror(errno));
    close(fd);
    return NULL;
  }
  int err = posix_fallocate(fd, 0, (off_t)bytes);
  if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
    snprintf(why, whylen,
             "cannot reserve %zu bytes of shared memory for %s: %s (enlarge /dev/shm, or lower "
             "FLAGCX_VENDORSIM_SLOT_BYTES / FLAGCX_VENDORSIM_MAILBOX_BYTES)",
             bytes, name, strerror(err));
    close(fd);
    return NULL;
  }
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(why, whylen, "mmap(%s, %zu): %s", name, bytes, strerror(errno));
    return NULL;
  }
  return p;
}

static void unlink_names(vsim_comm* c) {
  shm_unlink(c->name);
  shm_unlink(c->data_name);
}

/* ------------------------------------------------------------------ */
/* Creating and joining                                                */
/* ------------------------------------------------------------------ */

vsim_result vsim_comm_new(vsim_comm** out, const void* idp, size_t idbytes, const char* tag,
                          int nranks, int rank, int device, const char* api) {
  if (out == NULL) {
    vsim_set_last_error("%s: comm pointer is NULL", api);
    return VSIM_ERR_INVALID_ARG;
  }
  *out = NULL;
  if (nranks < 1 || nranks > VSIM_MAX_RANKS) {
    vsim_set_last_error("%s: invalid nranks %d (vendorsim supports 1..%d)", api, nranks,
                        VSIM_MAX_RANKS);
    return VSIM_ERR_INVALID_ARG;
  }
  if (rank < 0 || rank >= nranks) {
    vsim_set_last_error("%s: invalid rank %d (nranks %d)", api, rank, nranks);
    return VSIM_ERR_INVALID_ARG;
  }
  vsim_id id;
  char why[256];
  vsim_comm probe;
  if (idp == NULL || parse_id(idp, idbytes, tag, &id, &probe, why, sizeof why) != 0) {
    vsim_set_last_error("%s: %s", api, idp == NULL ? "unique id is NULL" : why);
    return VSIM_ERR_INVALID_ARG;
  }

  vsim_comm* c = calloc(1, sizeof *c);
  if (c != NULL) pthread_mutex_init(&c->step_lock, NULL);
  uint64_t* arrays = calloc(5 * (size_t)nranks, sizeof(uint64_t));
  if (c == NULL || arrays == NULL) {
    free(c);
    free(arrays);
    vsim_set_last_error("%s: out of host memory", api);
    return VSIM_ERR_SYSTEM;
  }
  snprintf(c->tag, sizeof c->tag, "%s", tag);
  c->root_ip = probe.root_ip;
  c->root_port = probe.root_port;
  c->key = probe.key;
  c->boot_fd = c->listen_fd = -1;
  c->nranks = nranks;
  c->rank = rank;
  c->device = device;
  c->state = VSIM_COMM_JOINING;
  c->next_round = 1;
  c->send_issued = arrays;
  c->send_served = arrays + nranks;
  c->recv_issued = arrays + 2 * nranks;
  c->recv_served = arrays + 3 * nranks;
  c->msg_seq = arrays + 4 * nranks;
  register_comm(c);
  *out = c;
  return VSIM_OK;
}

/* The tail of a name in /dev/shm that tells, without opening it, whether
 * the rank that names it could still run: "<boot id>-<pid ns>-<pid>-". */
static void shm_owner_tag(int pid, char* out, size_t len) {
  char boot[64] = "", ns[64] = "";
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    if (fgets(boot, sizeof boot, f) == NULL) boot[0] = '\0';
    fclose(f);
  }
  size_t k = 0;
  for (const char* p = boot; *p && k < 12; p++)
    if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')) boot[k++] = *p;
  boot[k] = '\0';
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[n > 0 ? n : 0] = '\0';
  const char* lb = strchr(ns, '[');
  snprintf(out, len, "%s-%lu-%d-", k ? boot : "noboot", lb ? strtoul(lb + 1, NULL, 10) : 0ul, pid);
}

/* Removes the segments of rendezvous whose rank 0 (whose pid their names
 * carry) no longer runs on this kernel and in this pid namespace: ranks
 * killed before all of them had mapped the segments, which nobody else
 * would unlink (as internal/hostnet's CleanStaleShm does for its own). */
static void reclaim_stale(void) {
  char mine[96];
  shm_owner_tag(0, mine, sizeof mine);
  char* cut = strrchr(mine, '-');
  *cut = '\0';
  cut = strrchr(mine, '-'); /* "<boot>-<ns>-" */
  cut[1] = '\0';
  DIR* d = opendir("/dev/shm");
  if (d == NULL) return;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    const char* n = e->d_name;
    if (strncmp(n, "fxvs-", 5) != 0 || strncmp(n + 5, mine, strlen(mine)) != 0) continue;
    int pid = atoi(n + 5 + strlen(mine));
    if (pid > 0 && !pid_alive(pid)) {
      char path[300];
      snprintf(path, sizeof path, "/%s", n);
      shm_unlink(path);
    }
  }
  closedir(d);
}

static int shm_join_step(vsim_comm* c, int* phase, const char* api, int check_live);

/* Step of the init task: the rendezvous (net.c), then, on one host, the
 * shared-memory phases. */
int vsim_comm_join_step(vsim_comm* c, int* phase, const char* api, int check_live) {
  if (c->state == VSIM_COMM_FAILED) return VSIM_STEP_ERROR;
  if (!c->booted || c->net != NULL) {
    int r = vsim_net_boot_step(c, api);
    if (r != VSIM_STEP_DONE) return r;
    if (c->net != NULL) {
      c->state = VSIM_COMM_READY;
      return VSIM_STEP_DONE;
    }
    char tag[96];
    shm_owner_tag(c->peers[0].pid, tag, sizeof tag);
    snprintf(c->name, sizeof c->name, "/fxvs-%.40s%016llx", tag, (unsigned long long)c->key);
    snprintf(c->data_name, sizeof c->data_name, "%sd", c->name);
    if (c->rank == 0) reclaim_stale();
  }
  return shm_join_step(c, phase, api, check_live);
}

/* Phases: 0 map header, 1 agree and claim, 2 wait for everyone. */
static int shm_join_step(vsim_comm* c, int* phase, const char* api, int check_live) {
  char why[512];
  if (*phase == 0) {
    c->hdr_bytes = vsim_round_up(sizeof(vsim_shm_header), 4096);
    c->hdr = map_segment(c->name, c->hdr_bytes, why, sizeof why);
    if (c->hdr == NULL) {
      vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: %s", api, why);
      return VSIM_STEP_ERROR;
    }
    *phase = 1;
  }
  vsim_shm_header* h = c->hdr;
  if (*phase == 1) {
    if (vsim_comm_check_poison(c, api)) return VSIM_STEP_ERROR;
    uint64_t m = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (m == VSIM_HDR_EMPTY) {
      if (atomic_compare_exchange_strong(&h->magic, &m, VSIM_HDR_BUSY)) {
        size_t slot, mbox;
        vsim_choose_layout(c->nranks, &slot, &mbox);
        h->nranks = (uint32_t)c->nranks;
        h->creator_rank = c->rank;
        h->slot_bytes = slot;
        h->mbox_bytes = mbox;
        h->data_bytes = vsim_data_size(c->nranks, slot, mbox);
        atomic_store_explicit(&h->magic, VSIM_HDR_READY, memory_order_release);
        vsim_notify(c);
        m = VSIM_HDR_READY;
      } else if (m == VSIM_HDR_EMPTY) {
        return VSIM_STEP_IDLE;
      }
    }
    if (m == VSIM_HDR_BUSY) return VSIM_STEP_IDLE; /* the first rank is writing it */
    if (m != VSIM_HDR_READY) {
      vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: shared segment %s has a foreign header", api, c->name);
      return VSIM_STEP_ERROR;
    }
    if (h->nranks != (uint32_t)c->nranks) {
      vsim_comm_fail(c, VSIM_ERR_INVALID_USAGE,
                     "%s: rank %d was called with nranks=%d, but rank %d created the communicator "
                     "with nranks=%u; every rank must pass the same nranks",
                     api, c->rank, c->nranks, h->creator_rank, h->nranks);
      vsim_comm_poison(c, VSIM_ERR_INVALID_USAGE, c->last_error);
      return VSIM_STEP_ERROR;
    }
    uint32_t absent = VSIM_RANK_ABSENT;
    if (!atomic_compare_exchange_strong(&h->ranks[c->rank].state, &absent, VSIM_RANK_JOINED)) {
      vsim_comm_fail(c, VSIM_ERR_INVALID_USAGE,
                     "%s: rank %d joined twice (pid %d and pid %d); each rank of a unique id must "
                     "be initialised exactly once",
                     api, c->rank, (int)atomic_load(&h->ranks[c->rank].pid), (int)getpid());
      vsim_comm_poison(c, VSIM_ERR_INVALID_USAGE, c->last_error);
      return VSIM_STEP_ERROR;
    }
    atomic_store(&h->ranks[c->rank].pid, (int32_t)getpid());
    c->claimed = 1;
    c->slot_bytes = h->slot_bytes;
    c->mbox_bytes = h->mbox_bytes;
    c->data_bytes = h->data_bytes;
    c->data = map_segment(c->data_name, c->data_bytes, why, sizeof why);
    if (c->data == NULL) {
      vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: %s", api, why);
      vsim_comm_poison(c, VSIM_ERR_SYSTEM, c->last_error);
      return VSIM_STEP_ERROR;
    }
    atomic_fetch_add(&h->arrived, 1);
    vsim_notify(c);
    *phase = 2;
    vsim_debug("%s: rank %d/%d joined %s (slot %zu B, mailbox %zu B)", api, c->rank, c->nranks,
               c->name, c->slot_bytes, c->mbox_bytes);
    return VSIM_STEP_PROGRESS;
  }
  /* phase 2 */
  if (atomic_load(&h->arrived) >= (uint32_t)c->nranks) {
    unlink_names(c);
    c->state = VSIM_COMM_READY;
    return VSIM_STEP_DONE;
  }
  if (vsim_comm_check_poison(c, api)) return VSIM_STEP_ERROR;
  if (check_live) {
    for (int r = 0; r < c->nranks; r++) {
      if (vsim_peer_gone(c, r, why, sizeof why)) {
        vsim_comm_fail(c, VSIM_ERR_REMOTE, "%s: %s before every rank had joined", api, why);
        return VSIM_STEP_ERROR;
      }
    }
  }
  return VSIM_STEP_IDLE;
}

void vsim_comm_join_timeout(vsim_comm* c, const char* api, double waited) {
  if (!c->booted || c->net != NULL) {
    vsim_net_boot_timeout(c, api, waited);
    return;
  }
  char missing[512] = "";
  size_t len = 0;
  int nmissing = 0;
  vsim_shm_header* h = c->hdr;
  if (h != NULL && atomic_load(&h->magic) == VSIM_HDR_READY) {
    for (int r = 0; r < c->nranks; r++) {
      if (atomic_load(&h->ranks[r].state) != VSIM_RANK_ABSENT) continue;
      nmissing++;
      if (len < sizeof missing - 16) {
        len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? "," : "", r);
      } else if (len < sizeof missing - 4) {
        len += (size_t)snprintf(missing + len, sizeof missing - len, ",...");
      }
    }
  }
  if (nmissing > 0) {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM,
                   "%s: timed out after %.1f s: rank%s %s of %d never joined unique id %s "
                   "(FLAGCX_VENDORSIM_TIMEOUT=%g s)",
                   api, waited, nmissing > 1 ? "s" : "", missing, c->nranks, c->name,
                   vsim_env_timeout());
  } else {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM,
                   "%s: timed out after %.1f s waiting for the other ranks of unique id %s "
                   "(FLAGCX_VENDORSIM_TIMEOUT=%g s)",
                   api, waited, c->name, vsim_env_timeout());
  }
  vsim_comm_poison(c, VSIM_ERR_SYSTEM, c->last_error);
  unlink_names(c);
}

/* ------------------------------------------------------------------ */
/* Leaving                                                             */
/* ------------------------------------------------------------------ */

static void set_rank_state(vsim_comm* c, uint32_t st) {
  if (c->hdr == NULL || !c->claimed) return; /* only the owner of the entry */
  uint32_t cur = VSIM_RANK_JOINED;
  if (atomic_compare_exchange_strong(&c->hdr->ranks[c->rank].state, &cur, st)) {
    vsim_notify(c);
    vsim_net_state(c, st);
  }
}

void vsim_comm_release(vsim_comm* c, int unlink) {
  vsim_comm_unregister(c);
  if (c->error != VSIM_OK) vsim_net_boot_abort(c);
  vsim_net_release(c); /* its receiver writes into the mappings below */
  if (unlink && c->name[0] != '\0' && c->state != VSIM_COMM_READY && c->state != VSIM_COMM_FINALIZED) {
    /* The rendezvous did not complete: remove the names so that they do not
     * linger in /dev/shm. */
    unlink_names(c);
  }
  if (c->data != NULL) munmap(c->data, c->data_bytes);
  if (c->hdr != NULL) munmap(c->hdr, c->hdr_bytes);
  free(c->send_issued);
  free(c);
}

vsim_result vsim_comm_finalize(vsim_comm* c) {
  /* Flush what is still queued on the streams; later operations are
   * refused, as after ncclCommFinalize. */
  (void)vsim_device_sync(c->device);
  if (c->state == VSIM_COMM_READY) c->state = VSIM_COMM_FINALIZED;
  return VSIM_OK;
}

vsim_result vsim_comm_destroy(vsim_comm* c) {
  /* Queued operations still point at c: let them finish (or fail) first. */
  (void)vsim_device_sync(c->device);
  set_rank_state(c, VSIM_RANK_LEFT);
  vsim_comm_release(c, 1);
  return VSIM_OK;
}

vsim_result vsim_comm_abort(vsim_comm* c) {
  char msg[128];
  snprintf(msg, sizeof msg, "rank %d aborted its communicator", c->rank);
  if (c->hdr != NULL) vsim_comm_poison(c, VSIM_ERR_REMOTE, msg);
  (void)vsim_device_sync(c->device); /* queued operations fail fast now */
  set_rank_state(c, VSIM_RANK_ABORTED);
  vsim_comm_release(c, 1);
  return VSIM_OK;
}

/* ------------------------------------------------------------------ */
/* Buffer checks                                                       */
/* ------------------------------------------------------------------ */

vsim_result vsim_check_buffer(const vsim_comm* c, const char* api, const char* what, const void* p,
                              size_t bytes) {
  if (bytes == 0) return VSIM_OK;
  if (p == NULL) {
    vsim_set_last_error("%s: %s is NULL (%zu bytes expected)", api, what, bytes);
    return VSIM_ERR_INVALID_ARG;
  }
  if (!vsim_env_check_pointers()) return VSIM_OK;
  vsim_mem_info info;
  int k = vsim_mem_check_range(p, bytes, &info);
  if (k == VSIM_MEM_UNREGISTERED) {
    vsim_set_last_error(
        "%s: %s %p is neither device memory nor pinned host memory of this process (a real "
        "device cannot read it; FLAGCX_VENDORSIM_CHECK_POINTERS=0 disables this check)",
        api, what, p);
    return VSIM_ERR_INVALID_ARG;
  }
  if (k < 0) {
    size_t off = (size_t)((const char*)p - (const char*)info.base);
    vsim_set_last_error("%s: %s %p needs %zu bytes but only %zu remain in its %zu-byte allocation at %p",
                        api, what, p, bytes, info.size - off, info.size, info.base);
    return VSIM_ERR_INVALID_ARG;
  }
  if (k == VSIM_MEM_DEVICE && info.device != c->device) {
    vsim_set_last_error("%s: %s %p is memory of device %d but the communicator uses device %d", api,
                        what, p, info.device, c->device);
    return VSIM_ERR_INVALID_ARG;
  }
  return VSIM_OK;
}
