/*
 * net.c: how the ranks of an emulated communicator meet, on one host or
 * several, over plain TCP (as real NCCL's bootstrap does).
 *
 * The rendezvous. vsim_get_unique_id starts (once per process) a service
 * thread listening on the address vsim_sock_local_ip picks and writes
 * "<ip>:<port>/<key>" into the id; that process must live until every rank
 * has joined, as with ncclGetUniqueId. Each rank connects, sends a hello
 * (key, nranks, rank, pid, host key, its mesh listener, its slot and
 * mailbox choice) and reads frames back: STATUS (which ranks have arrived,
 * for the timeout's text), ERROR (a mismatch, a rank that failed or left;
 * the first error of a rendezvous is its answer to every later hello too)
 * and finally TABLE (every rank's host key and listener, and the layout of
 * the first rank to arrive). A rank that fails sends ABORT with its text.
 *
 * Then, when every host key is equal, the ranks meet in /dev/shm as before
 * (comm.c). Otherwise each rank connects to every lower rank's listener and
 * accepts the higher ones, keeps a private copy of the communicator's
 * layout, and a receiver thread applies the writes peers send (frames
 * BYTES, U64, STATE, POISON) in the order they were made; each rank is the
 * only writer of the parts it sends, so the engine runs unchanged.
 * Liveness is the connection: a peer whose socket ends is gone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vsim_internal.h"
#include "vsim_sock.h"

#define BOOT_MAGIC 0x544f4f4253565846ull /* "FXVSBOOT" */
#define MESH_MAGIC 0x4853454d53565846ull /* "FXVSMESH" */

enum { B_STATUS = 1, B_ERROR = 2, B_TABLE = 3, B_ABORT = 4 };
enum { F_BYTES = 1, F_U64 = 2, F_STATE = 3, F_POISON = 4 };

typedef struct {
  uint64_t magic, key;
  char tag[16];
  int32_t nranks, rank, pid, pad;
  uint32_t ip;
  uint16_t port, pad2;
  uint64_t hostkey, slot, mbox;
} hello_t;

typedef struct {
  uint32_t type, len;
} bframe;

typedef struct {
  int32_t code, rank;
  char msg[640];
} berror;

typedef struct {
  uint32_t type, len;
  uint64_t off;
} nframe;

/* ------------------------------------------------------------------ */
/* Host identity                                                       */
/* ------------------------------------------------------------------ */

static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

/* Ranks may share memory when they see the same /dev/shm and the same pids
 * (liveness of shared-memory peers is checked by pid). */
uint64_t vsim_host_key(void) {
  uint64_t h = 0xcbf29ce484222325ull;
  char boot[64] = "";
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    if (fgets(boot, sizeof boot, f) == NULL) boot[0] = '\0';
    fclose(f);
  }
  h = fnv(h, boot, strlen(boot));
  struct stat st;
  if (stat("/dev/shm", &st) == 0) {
    h = fnv(h, &st.st_dev, sizeof st.st_dev);
    h = fnv(h, &st.st_ino, sizeof st.st_ino);
  }
  if (stat("/proc/self/ns/pid", &st) == 0) h = fnv(h, &st.st_ino, sizeof st.st_ino);
  return h;
}

/* ------------------------------------------------------------------ */
/* The rendezvous service                                              */
/* ------------------------------------------------------------------ */

typedef struct rdv {
  struct rdv* next;
  uint64_t key;
  int nranks, first;  /* the first rank to arrive decides the layout */
  int arrived;
  int failed, complete;
  berror err;
  int* fd;            /* [nranks], -1 until it arrives */
  hello_t* hello;     /* [nranks] */
} rdv;

static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static int svc_fd = -1;
static uint32_t svc_ip;
static uint16_t svc_port;
static rdv* rdvs;

static int send_frame(int fd, uint32_t type, const void* p, uint32_t len) {
  bframe h = {type, len};
  return vsim_sock_write(fd, &h, sizeof h) == 0 && vsim_sock_write(fd, p, len) == 0 ? 0 : -1;
}

/* Closes the members' connections; the rendezvous keeps only its outcome
 * (the answer to later hellos). */
static void rdv_close(rdv* r) {
  for (int i = 0; i < r->nranks; i++)
    if (r->fd[i] >= 0) close(r->fd[i]);
  free(r->fd);
  free(r->hello);
  r->fd = NULL;
  r->hello = NULL;
  r->nranks = 0;
}

/* The first error of a rendezvous goes to every rank that is there, and
 * is the answer to every later hello. */
static void rdv_fail(rdv* r, int code, int rank, const char* msg) {
  if (!r->failed) {
    r->failed = 1;
    r->err.code = code;
    r->err.rank = rank;
    snprintf(r->err.msg, sizeof r->err.msg, "%s", msg);
  }
  for (int i = 0; i < r->nranks; i++) {
    if (r->fd[i] >= 0 && i != rank) (void)send_frame(r->fd[i], B_ERROR, &r->err, sizeof r->err);
  }
  rdv_close(r);
}

static void rdv_complete(rdv* r) {
  size_t n = (size_t)r->nranks, bytes = 16 + n * sizeof(vsim_peer);
  unsigned char* t = calloc(1, bytes);
  if (t == NULL) {
    rdv_fail(r, VSIM_ERR_SYSTEM, -1, "the rendezvous ran out of host memory");
    return;
  }
  memcpy(t, &r->hello[r->first].slot, 8);
  memcpy(t + 8, &r->hello[r->first].mbox, 8);
  for (size_t i = 0; i < n; i++) {
    vsim_peer p = {r->hello[i].hostkey, r->hello[i].ip, r->hello[i].port, 0, r->hello[i].pid, 0};
    memcpy(t + 16 + i * sizeof p, &p, sizeof p);
  }
  for (size_t i = 0; i < n; i++) (void)send_frame(r->fd[i], B_TABLE, t, (uint32_t)bytes);
  free(t);
  r->complete = 1;
  rdv_close(r);
}

static rdv* rdv_find(uint64_t key) {
  for (rdv* r = rdvs; r != NULL; r = r->next)
    if (r->key == key) return r;
  return NULL;
}

/* A new connection: its hello joins (or is refused by) its rendezvous. */
static void svc_hello(int fd) {
  hello_t h;
  char msg[640];
  vsim_sock_tune(fd, 2, 2); /* a peer that does not speak cannot stall the service */
  if (vsim_sock_read(fd, &h, sizeof h) != 0 || h.magic != BOOT_MAGIC || h.nranks < 1 ||
      h.nranks > VSIM_MAX_RANKS || h.rank < 0 || h.rank >= h.nranks) {
    close(fd);
    return;
  }
  rdv* r = rdv_find(h.key);
  if (r == NULL) {
    r = calloc(1, sizeof *r);
    int* fds = calloc((size_t)h.nranks, sizeof(int));
    hello_t* hs = calloc((size_t)h.nranks, sizeof(hello_t));
    if (r == NULL || fds == NULL || hs == NULL) {
      free(r), free(fds), free(hs);
      close(fd);
      return;
    }
    for (int i = 0; i < h.nranks; i++) fds[i] = -1;
    *r = (rdv){.next = rdvs, .key = h.key, .nranks = h.nranks, .first = h.rank, .fd = fds, .hello = hs};
    rdvs = r;
  }
  berror e = {0, -1, ""};
  if (r->failed) {
    e = r->err;
  } else if (r->complete) {
    e.code = VSIM_ERR_INVALID_USAGE;
    snprintf(e.msg, sizeof e.msg, "rank %d joined a communicator whose ranks have all joined already; "
             "each rank of a unique id must be initialised exactly once", h.rank);
  } else if (h.nranks != r->nranks) {
    snprintf(msg, sizeof msg, "rank %d was called with nranks=%d, but rank %d created the communicator "
             "with nranks=%d; every rank must pass the same nranks", h.rank, h.nranks, r->first, r->nranks);
    rdv_fail(r, VSIM_ERR_INVALID_USAGE, -1, msg);
    e = r->err;
  } else if (r->fd[h.rank] >= 0) {
    snprintf(msg, sizeof msg, "rank %d joined twice (pid %d and pid %d); each rank of a unique id must be "
             "initialised exactly once", h.rank, r->hello[h.rank].pid, h.pid);
    rdv_fail(r, VSIM_ERR_INVALID_USAGE, -1, msg);
    e = r->err;
  }
  if (e.code != 0) {
    (void)send_frame(fd, B_ERROR, &e, sizeof e);
    close(fd);
    return;
  }
  r->fd[h.rank] = fd;
  r->hello[h.rank] = h;
  if (++r->arrived == r->nranks) {
    rdv_complete(r);
    return;
  }
  unsigned char map[VSIM_MAX_RANKS / 8] = {0};
  for (int i = 0; i < r->nranks; i++)
    if (r->fd[i] >= 0) map[i / 8] |= (unsigned char)(1u << (i % 8));
  for (int i = 0; i < r->nranks; i++)
    if (r->fd[i] >= 0) (void)send_frame(r->fd[i], B_STATUS, map, sizeof map);
}

/* A member's socket is readable: an ABORT, or it is gone. */
static void svc_member(rdv* r, int i) {
  bframe f;
  berror e;
  memset(&e, 0, sizeof e);
  if (vsim_sock_read(r->fd[i], &f, sizeof f) == 0 && f.type == B_ABORT && f.len == sizeof e &&
      vsim_sock_read(r->fd[i], &e, sizeof e) == 0) {
    e.msg[sizeof e.msg - 1] = '\0';
    close(r->fd[i]);
    r->fd[i] = -1;
    rdv_fail(r, e.code, i, e.msg);
    return;
  }
  char msg[640];
  snprintf(msg, sizeof msg, "rank %d (pid %d) left before every rank had joined", i, r->hello[i].pid);
  close(r->fd[i]);
  r->fd[i] = -1;
  rdv_fail(r, VSIM_ERR_REMOTE, i, msg);
}

static void* svc_main(void* arg) {
  (void)arg;
  for (;;) {
    struct pollfd p[1 + 4 * VSIM_MAX_RANKS];
    rdv* who[1 + 4 * VSIM_MAX_RANKS];
    int idx[1 + 4 * VSIM_MAX_RANKS], n = 1;
    p[0] = (struct pollfd){.fd = svc_fd, .events = POLLIN};
    pthread_mutex_lock(&svc_lock);
    for (rdv* r = rdvs; r != NULL; r = r->next)
      for (int i = 0; i < r->nranks && n < (int)(sizeof p / sizeof p[0]); i++)
        if (r->fd[i] >= 0) who[n] = r, idx[n] = i, p[n++] = (struct pollfd){.fd = r->fd[i], .events = POLLIN};
    pthread_mutex_unlock(&svc_lock);
    if (poll(p, (nfds_t)n, 200) <= 0) continue;
    pthread_mutex_lock(&svc_lock);
    for (int k = 1; k < n; k++)
      if (p[k].revents && who[k]->fd != NULL && who[k]->fd[idx[k]] == p[k].fd) svc_member(who[k], idx[k]);
    if (p[0].revents & POLLIN) {
      int fd = accept4(svc_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) svc_hello(fd);
    }
    pthread_mutex_unlock(&svc_lock);
  }
  return NULL;
}

vsim_result vsim_net_where(char* where, size_t len, uint64_t key) {
  char why[256], a[32];
  pthread_mutex_lock(&svc_lock);
  if (svc_fd < 0) {
    uint16_t port = 0;
    svc_ip = vsim_sock_local_ip();
    int fd = vsim_sock_listen(svc_ip, &port, why, sizeof why);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (fd >= 0) {
      svc_fd = fd;
      svc_port = port;
      if (pthread_create(&th, &at, svc_main, NULL) != 0) {
        close(fd);
        svc_fd = -1;
        snprintf(why, sizeof why, "cannot start the rendezvous thread");
      }
    }
    pthread_attr_destroy(&at);
    if (svc_fd < 0) {
      pthread_mutex_unlock(&svc_lock);
      vsim_set_last_error("emulated unique id: %s", why);
      return VSIM_ERR_SYSTEM;
    }
  }
  vsim_sock_ntoa(svc_ip, a, sizeof a);
  snprintf(where, len, "%s:%u/%016llx", a, (unsigned)svc_port, (unsigned long long)key);
  pthread_mutex_unlock(&svc_lock);
  return VSIM_OK;
}

int vsim_net_parse_where(const char* where, uint32_t* ip, uint16_t* rport, uint64_t* rkey) {
  unsigned a, b, d, e, port;
  unsigned long long key;
  int used = 0;
  if (sscanf(where, "%3u.%3u.%3u.%3u:%5u/%16llx%n", &a, &b, &d, &e, &port, &key, &used) != 6 ||
      where[used] != '\0' || used < 19 || a > 255 || b > 255 || d > 255 || e > 255 || port == 0 ||
      port > 65535 || strlen(strchr(where, '/') + 1) != 16) {
    return -1;
  }
  *ip = htonl(a << 24 | b << 16 | d << 8 | e);
  *rport = (uint16_t)port;
  *rkey = key;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Joining: the rank's side                                            */
/* ------------------------------------------------------------------ */

enum { P_HELLO = 0, P_TABLE, P_CONNECT, P_ACCEPT, P_DONE };

struct vsim_net {
  int* fd;          /* [nranks], -1 for self */
  _Atomic int* gone; /* [nranks] 1: its connection ended */
  pthread_mutex_t send_lock;
  pthread_t rx;
  int rx_started;
  int wake[2];
  size_t hdr_bytes;
};

static size_t page_round(size_t v) { return (v + 4095) / 4096 * 4096; }

static int boot_hello(vsim_comm* c, const char* api) {
  char why[256];
  double left = vsim_env_timeout();
  c->boot_fd = vsim_sock_connect(c->root_ip, c->root_port, left < 10 ? left : 10, 5, why, sizeof why);
  if (c->boot_fd < 0) {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: cannot reach the rendezvous of the unique id (%s); the "
                   "process that made the id must run until every rank has joined", api, why);
    return VSIM_STEP_ERROR;
  }
  uint16_t port = 0;
  uint32_t ip = vsim_sock_local_ip();
  c->listen_fd = vsim_sock_listen(ip, &port, why, sizeof why);
  if (c->listen_fd < 0) {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: %s", api, why);
    return VSIM_STEP_ERROR;
  }
  fcntl(c->listen_fd, F_SETFL, fcntl(c->listen_fd, F_GETFL) | O_NONBLOCK);
  size_t slot = 0, mbox = 0;
  vsim_choose_layout(c->nranks, &slot, &mbox);
  hello_t h = {BOOT_MAGIC, c->key, "", c->nranks, c->rank, (int32_t)getpid(), 0, ip, port, 0,
               vsim_host_key(), slot, mbox};
  snprintf(h.tag, sizeof h.tag, "%s", c->tag);
  if (vsim_sock_write(c->boot_fd, &h, sizeof h) != 0) {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: the rendezvous of the unique id closed the connection", api);
    return VSIM_STEP_ERROR;
  }
  c->boot_phase = P_TABLE;
  return VSIM_STEP_PROGRESS;
}

static int boot_table(vsim_comm* c, const unsigned char* p, size_t len, const char* api) {
  size_t n = (size_t)c->nranks;
  if (len != 16 + n * sizeof(vsim_peer) || (c->peers = calloc(n, sizeof(vsim_peer))) == NULL) {
    vsim_comm_fail(c, VSIM_ERR_INTERNAL, "%s: malformed rendezvous table", api);
    return VSIM_STEP_ERROR;
  }
  memcpy(&c->boot_slot, p, 8);
  memcpy(&c->boot_mbox, p + 8, 8);
  memcpy(c->peers, p + 16, n * sizeof(vsim_peer));
  close(c->boot_fd);
  c->boot_fd = -1;
  c->booted = 1;
  int one_host = 1;
  for (size_t i = 1; i < n; i++) one_host &= c->peers[i].hostkey == c->peers[0].hostkey;
  if (one_host) {
    close(c->listen_fd);
    c->listen_fd = -1;
    c->boot_phase = P_DONE;
    return VSIM_STEP_DONE;
  }
  c->boot_phase = P_CONNECT;
  return VSIM_STEP_PROGRESS;
}

static int boot_frames(vsim_comm* c, const char* api);

/* Reads what the rendezvous sent so far, without blocking. */
static int boot_read(vsim_comm* c, const char* api) {
  int eof = 0; /* the service closes right after its last frame */
  while (c->bbuf_len < sizeof c->bbuf) {
    ssize_t k = recv(c->boot_fd, c->bbuf + c->bbuf_len, sizeof c->bbuf - c->bbuf_len, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      eof = 1;
      break;
    }
    c->bbuf_len += (size_t)k;
  }
  int r = boot_frames(c, api);
  if (r == VSIM_STEP_ERROR || c->boot_phase != P_TABLE || !eof) return r;
  vsim_comm_fail(c, VSIM_ERR_REMOTE, "%s: the rendezvous of the unique id went away before every "
                 "rank had joined (did the process that made the id exit?)", api);
  return VSIM_STEP_ERROR;
}

/* Handles the complete frames read from the rendezvous. */
static int boot_frames(vsim_comm* c, const char* api) {
  int progressed = 0;
  while (c->bbuf_len >= sizeof(bframe)) {
    bframe f;
    memcpy(&f, c->bbuf, sizeof f);
    if (f.len > sizeof c->bbuf - sizeof f) {
      vsim_comm_fail(c, VSIM_ERR_INTERNAL, "%s: malformed frame from the rendezvous", api);
      return VSIM_STEP_ERROR;
    }
    if (c->bbuf_len < sizeof f + f.len) break;
    const unsigned char* p = c->bbuf + sizeof f;
    if (f.type == B_TABLE) return boot_table(c, p, f.len, api);
    if (f.type == B_ERROR && f.len == sizeof(berror)) {
      berror e;
      memcpy(&e, p, sizeof e);
      e.msg[sizeof e.msg - 1] = '\0';
      int code = e.code == VSIM_ERR_INVALID_USAGE ? VSIM_ERR_INVALID_USAGE : VSIM_ERR_REMOTE;
      if (e.rank >= 0) {
        vsim_comm_fail(c, code, "%s: rank %d failed, so rank %d cannot continue: %s", api, e.rank, c->rank, e.msg);
      } else {
        vsim_comm_fail(c, code, "%s: %s", api, e.msg);
      }
      return VSIM_STEP_ERROR;
    }
    if (f.type == B_STATUS && f.len == sizeof c->arrived_map) memcpy(c->arrived_map, p, f.len);
    memmove(c->bbuf, c->bbuf + sizeof f + f.len, c->bbuf_len - sizeof f - f.len);
    c->bbuf_len -= sizeof f + f.len;
    progressed = 1;
  }
  return progressed ? VSIM_STEP_PROGRESS : VSIM_STEP_IDLE;
}

static int net_fail(vsim_comm* c, const char* api, const char* what, int r, const char* why) {
  vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: %s rank %d (host %s): %s", api, what, r,
                 inet_ntoa((struct in_addr){c->peers[r].ip}), why);
  return VSIM_STEP_ERROR;
}

static int net_alloc(vsim_comm* c) {
  vsim_net* n = calloc(1, sizeof *n);
  if (n == NULL) return -1;
  c->net = n;
  n->fd = malloc((size_t)c->nranks * sizeof(int));
  n->gone = calloc((size_t)c->nranks, sizeof(_Atomic int));
  n->wake[0] = n->wake[1] = -1;
  pthread_mutex_init(&n->send_lock, NULL);
  if (n->fd == NULL || n->gone == NULL) return -1;
  for (int i = 0; i < c->nranks; i++) n->fd[i] = -1;
  return 0;
}

/* Connects to every lower rank (their listeners exist: they announced
 * them before the table came). */
static int mesh_connect(vsim_comm* c, const char* api) {
  char why[256];
  if (net_alloc(c) != 0) {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: out of host memory", api);
    return VSIM_STEP_ERROR;
  }
  for (int r = 0; r < c->rank; r++) {
    int fd = vsim_sock_connect(c->peers[r].ip, c->peers[r].port, 10, vsim_env_timeout(), why, sizeof why);
    if (fd < 0) return net_fail(c, api, "cannot connect to", r, why);
    /* A peer that stops mid-frame fails the receiver, never hangs it. */
    vsim_sock_tune(fd, vsim_env_timeout(), vsim_env_timeout());
    uint64_t h[3] = {MESH_MAGIC, c->key, (uint64_t)c->rank};
    if (vsim_sock_write(fd, h, sizeof h) != 0) {
      close(fd);
      return net_fail(c, api, "cannot greet", r, strerror(errno));
    }
    c->net->fd[r] = fd;
  }
  c->boot_phase = P_ACCEPT;
  return VSIM_STEP_PROGRESS;
}

static void* net_rx(void* arg);

/* The private copy of the layout, and the receiver. */
static int mesh_ready(vsim_comm* c, const char* api) {
  vsim_net* n = c->net;
  c->slot_bytes = c->boot_slot;
  c->mbox_bytes = c->boot_mbox;
  c->data_bytes = vsim_data_size(c->nranks, c->slot_bytes, c->mbox_bytes);
  n->hdr_bytes = page_round(sizeof(vsim_shm_header));
  c->hdr_bytes = n->hdr_bytes;
  void* h = mmap(NULL, c->hdr_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* d = mmap(NULL, c->data_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (h == MAP_FAILED || d == MAP_FAILED || pipe2(n->wake, O_CLOEXEC) != 0) {
    if (h != MAP_FAILED) munmap(h, c->hdr_bytes);
    if (d != MAP_FAILED) munmap(d, c->data_bytes);
    vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: cannot map %zu bytes for the communicator", api, c->data_bytes);
    return VSIM_STEP_ERROR;
  }
  c->hdr = h;
  c->data = d;
  c->hdr->nranks = (uint32_t)c->nranks;
  c->hdr->slot_bytes = c->slot_bytes;
  c->hdr->mbox_bytes = c->mbox_bytes;
  c->hdr->data_bytes = c->data_bytes;
  for (int r = 0; r < c->nranks; r++) {
    atomic_store(&c->hdr->ranks[r].state, VSIM_RANK_JOINED);
    atomic_store(&c->hdr->ranks[r].pid, c->peers[r].pid);
  }
  c->hdr->arrived = (uint32_t)c->nranks;
  atomic_store(&c->hdr->magic, VSIM_HDR_READY);
  c->claimed = 1;
  if (pthread_create(&n->rx, NULL, net_rx, c) != 0) {
    vsim_comm_fail(c, VSIM_ERR_SYSTEM, "%s: cannot start the receiver thread", api);
    return VSIM_STEP_ERROR;
  }
  n->rx_started = 1;
  c->boot_phase = P_DONE;
  vsim_debug("%s: rank %d/%d joined across hosts over TCP (slot %zu B, mailbox %zu B)", api, c->rank,
             c->nranks, c->slot_bytes, c->mbox_bytes);
  return VSIM_STEP_DONE;
}

/* Accepts the higher ranks, without blocking while none is waiting. */
static int mesh_accept(vsim_comm* c, const char* api) {
  vsim_net* n = c->net;
  int progressed = 0;
  for (;;) {
    int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) break;
    uint64_t h[3];
    vsim_sock_tune(fd, vsim_env_timeout(), 5);
    if (vsim_sock_read(fd, h, sizeof h) != 0 || h[0] != MESH_MAGIC || h[1] != c->key ||
        h[2] <= (uint64_t)c->rank || h[2] >= (uint64_t)c->nranks || n->fd[h[2]] >= 0) {
      close(fd); /* not one of ours: a stray connection is no reason to fail */
      continue;
    }
    vsim_sock_tune(fd, vsim_env_timeout(), vsim_env_timeout());
    n->fd[h[2]] = fd;
    progressed = 1;
  }
  for (int r = c->rank + 1; r < c->nranks; r++)
    if (n->fd[r] < 0) return progressed ? VSIM_STEP_PROGRESS : VSIM_STEP_IDLE;
  close(c->listen_fd);
  c->listen_fd = -1;
  return mesh_ready(c, api);
}

int vsim_net_boot_step(vsim_comm* c, const char* api) {
  switch (c->boot_phase) {
    case P_HELLO: {
      int r = boot_hello(c, api);
      if (r == VSIM_STEP_ERROR) return r;
    }
    /* fall through */
    case P_TABLE: {
      int r = boot_read(c, api);
      if (r != VSIM_STEP_PROGRESS || c->boot_phase == P_TABLE) return r;
      if (c->boot_phase == P_DONE) return VSIM_STEP_DONE;
    }
    /* fall through */
    case P_CONNECT:
      if (mesh_connect(c, api) == VSIM_STEP_ERROR) return VSIM_STEP_ERROR;
      /* fall through */
    case P_ACCEPT:
      return mesh_accept(c, api);
    default:
      return VSIM_STEP_DONE;
  }
}

void vsim_net_boot_abort(vsim_comm* c) {
  if (c->boot_fd < 0) return;
  berror e = {(int32_t)c->error, c->rank, ""};
  snprintf(e.msg, sizeof e.msg, "%.639s", c->last_error);
  (void)send_frame(c->boot_fd, B_ABORT, &e, sizeof e);
  close(c->boot_fd);
  c->boot_fd = -1;
}

void vsim_net_boot_timeout(vsim_comm* c, const char* api, double waited) {
  char missing[512] = "";
  size_t len = 0;
  int nmissing = 0;
  for (int r = 0; r < c->nranks; r++) {
    int here = c->boot_phase >= P_CONNECT ? c->net == NULL || c->net->fd[r] >= 0 || r == c->rank
                                          : (c->arrived_map[r / 8] >> (r % 8)) & 1;
    if (here || r == c->rank) continue;
    nmissing++;
    if (len < sizeof missing - 16) len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? "," : "", r);
    else if (len < sizeof missing - 4) len += (size_t)snprintf(missing + len, sizeof missing - len, ",...");
  }
  vsim_comm_fail(c, VSIM_ERR_SYSTEM,
                 "%s: timed out after %.1f s: rank%s %s of %d never %s (FLAGCX_VENDORSIM_TIMEOUT=%g s)",
                 api, waited, nmissing > 1 ? "s" : "", nmissing ? missing : "?", c->nranks,
                 c->boot_phase >= P_CONNECT ? "connected to this rank across hosts"
                                            : "joined the unique id's rendezvous",
                 vsim_env_timeout());
  vsim_net_boot_abort(c);
}

/* ------------------------------------------------------------------ */
/* Across hosts: sending writes, applying the peers'                   */
/* ------------------------------------------------------------------ */

static void notify_local(vsim_comm* c) {
  atomic_fetch_add(&c->hdr->epoch, 1);
  if (atomic_load(&c->hdr->waiters) != 0)
    syscall(SYS_futex, (uint32_t*)&c->hdr->epoch, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void send_to(vsim_comm* c, int r, const nframe* f, const void* p) {
  vsim_net* n = c->net;
  if (atomic_load(&n->gone[r])) return;
  if (vsim_sock_write(n->fd[r], f, sizeof *f) != 0 || (f->len && vsim_sock_write(n->fd[r], p, f->len) != 0)) {
    atomic_store(&n->gone[r], 1); /* its receiver is gone or stuck: waiting for it fails */
    notify_local(c);
  }
}

static void send_frame_to(vsim_comm* c, int dst, const nframe* f, const void* p) {
  vsim_net* n = c->net;
  pthread_mutex_lock(&n->send_lock);
  for (int r = 0; r < c->nranks; r++)
    if (r != c->rank && (dst < 0 || dst == r)) send_to(c, r, f, p);
  pthread_mutex_unlock(&n->send_lock);
}

void vsim_net_put(vsim_comm* c, int dst, const void* p, size_t len) {
  if (c->net == NULL || len == 0) return;
  nframe f = {F_BYTES, (uint32_t)len, (uint64_t)((const unsigned char*)p - c->data)};
  send_frame_to(c, dst, &f, p);
}

void vsim_net_put64(vsim_comm* c, int dst, _Atomic uint64_t* p) {
  if (c->net == NULL) return;
  uint64_t v = atomic_load(p);
  nframe f = {F_U64, 8, (uint64_t)((unsigned char*)p - c->data)};
  send_frame_to(c, dst, &f, &v);
}

void vsim_net_state(vsim_comm* c, uint32_t state) {
  if (c->net == NULL) return;
  nframe f = {F_STATE, 0, state};
  send_frame_to(c, -1, &f, NULL);
}

void vsim_net_poison(vsim_comm* c) {
  if (c->net == NULL) return;
  berror e = {c->hdr->poison_code, c->hdr->poison_rank, ""};
  snprintf(e.msg, sizeof e.msg, "%s", c->hdr->poison_msg);
  nframe f = {F_POISON, sizeof e, 0};
  send_frame_to(c, -1, &f, &e);
}

int vsim_net_peer_gone(vsim_comm* c, int r, char* why, size_t whylen) {
  if (c->net == NULL || !atomic_load(&c->net->gone[r])) return 0;
  snprintf(why, whylen, "rank %d (pid %d on host %s) exited or lost its connection", r, c->peers[r].pid,
           inet_ntoa((struct in_addr){c->peers[r].ip}));
  return 1;
}

/* Applies one frame from rank r; -1 when it is malformed (the peer is then
 * treated as gone: nothing it sends is written out of bounds). */
static int apply(vsim_comm* c, int r, int fd) {
  nframe f;
  if (vsim_sock_read(fd, &f, sizeof f) != 0) return -1;
  switch (f.type) {
    case F_BYTES:
      if (f.off > c->data_bytes || f.len > c->data_bytes - f.off) return -1;
      return vsim_sock_read(fd, c->data + f.off, f.len);
    case F_U64: {
      uint64_t v;
      if (f.len != 8 || f.off % 8 != 0 || f.off > c->data_bytes - 8 || vsim_sock_read(fd, &v, 8) != 0) return -1;
      atomic_store_explicit((_Atomic uint64_t*)(c->data + f.off), v, memory_order_release);
      return 0;
    }
    case F_STATE:
      if (f.len != 0 || (f.off != VSIM_RANK_LEFT && f.off != VSIM_RANK_ABORTED)) return -1;
      atomic_store(&c->hdr->ranks[r].state, (uint32_t)f.off);
      return 0;
    case F_POISON: {
      berror e;
      if (f.len != sizeof e || vsim_sock_read(fd, &e, sizeof e) != 0) return -1;
      uint32_t expect = 0;
      if (!atomic_compare_exchange_strong(&c->hdr->poisoned, &expect, 1)) return 0;
      e.msg[sizeof e.msg - 1] = '\0';
      c->hdr->poison_code = e.code;
      c->hdr->poison_rank = e.rank >= 0 && e.rank < c->nranks ? e.rank : r;
      snprintf(c->hdr->poison_msg, sizeof c->hdr->poison_msg, "%s", e.msg);
      atomic_store_explicit(&c->hdr->poisoned, 2, memory_order_release);
      return 0;
    }
    default:
      return -1;
  }
}

static void* net_rx(void* arg) {
  vsim_comm* c = arg;
  vsim_net* n = c->net;
  int np = c->nranks;
  struct pollfd* p = calloc((size_t)np + 1, sizeof *p);
  if (p == NULL) return NULL;
  for (;;) {
    int k = 0;
    p[k++] = (struct pollfd){.fd = n->wake[0], .events = POLLIN};
    for (int r = 0; r < np; r++)
      if (r != c->rank && !atomic_load(&n->gone[r])) p[k++] = (struct pollfd){.fd = n->fd[r], .events = POLLIN};
    if (poll(p, (nfds_t)k, -1) < 0 && errno != EINTR) break;
    if (p[0].revents) break;
    for (int i = 1; i < k; i++) {
      if (!p[i].revents) continue;
      int r = 0;
      while (n->fd[r] != p[i].fd) r++;
      if (apply(c, r, p[i].fd) != 0) atomic_store(&n->gone[r], 1);
    }
    notify_local(c);
  }
  free(p);
  return NULL;
}

void vsim_net_release(vsim_comm* c) {
  if (c->boot_fd >= 0) close(c->boot_fd);
  if (c->listen_fd >= 0) close(c->listen_fd);
  c->boot_fd = c->listen_fd = -1;
  vsim_net* n = c->net;
  if (n != NULL) {
    if (n->rx_started) {
      char b = 1;
      if (write(n->wake[1], &b, 1) != 1) { /* the reader ends at EOF of every peer instead */ }
      pthread_join(n->rx, NULL);
    }
    for (int r = 0; n->fd != NULL && r < c->nranks; r++)
      if (n->fd[r] >= 0) close(n->fd[r]);
    if (n->wake[0] >= 0) close(n->wake[0]);
    if (n->wake[1] >= 0) close(n->wake[1]);
    free(n->fd);
    free((void*)n->gone);
    free(n);
    c->net = NULL;
  }
  free(c->peers);
  c->peers = NULL;
}
