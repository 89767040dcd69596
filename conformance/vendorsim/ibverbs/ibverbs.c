/*
 * Emulated libibverbs (libibverbs.so.1) for flagcx-go's net-ib plugin:
 * built against the real <infiniband/verbs.h>, so every struct the caller
 * sees (ibv_context, ibv_qp, ibv_wc...) is the real one, and the inline
 * calls of the header (ibv_post_send, ibv_post_recv, ibv_poll_cq) reach
 * this library through the context's ops table as they reach a provider.
 *
 * Three devices, one port each, shared by every process of the machine:
 *   vsim_ib0    InfiniBand link layer, LID 1, 4x HDR (200 Gb/s)
 *   vsim_roce0  Ethernet link layer (RoCE), GID 0 link-local, GID 1 an
 *               IPv4-mapped address (RoCE v2), 4x HDR
 *   vsim_ib1    InfiniBand link layer, LID 2, 4x HDR, in vsim_ib0's subnet
 *               (a queue pair of one reaches a queue pair of the other)
 * Each has a made-up PCI path in the emulated board's PCIe tree
 * (flagcxVendorsimPciPath; conformance/vendorsim/README.md, "Devices"):
 * vsim_ib0 shares the PCIe switch of emulated accelerators 0 and 1,
 * vsim_ib1 that of accelerators 2 and 3, vsim_roce0 has a root complex of
 * its own.
 *
 * The fabric is /dev/shm. Every RC queue pair owns a file
 * flagcx-vsimib-qp-<qpn> holding its inbound packet ring (written by its
 * connected peer) and its ack ring (the peer's acknowledgements). A thread
 * per QP plays the NIC: it transmits posted work requests into the peer's
 * ring in chunks, places inbound RDMA writes into the registered memory of
 * its own process (checking the rkey, as the responder's HCA does), matches
 * sends and writes with immediate to posted receives (waiting, as receiver
 * not ready retries do, while none is posted), and completes work requests
 * into the CQs once the peer acknowledged them. Threads sleep on a futex in
 * the QP file when idle.
 *
 * Errors are reported as the real stack reports them:
 *   - a bad rkey or a write outside the remote MR: the requester's WR
 *     completes with IBV_WC_REM_ACCESS_ERR, both QPs move to the error state;
 *   - a bad lkey or a local buffer outside its MR: IBV_WC_LOC_PROT_ERR;
 *   - a send larger than the posted receive: IBV_WC_LOC_LEN_ERR on the
 *     receiver, IBV_WC_REM_INV_REQ_ERR on the sender;
 *   - a peer whose process is gone, whose QP was destroyed or is in error:
 *     outstanding sends complete with IBV_WC_RETRY_EXC_ERR (transport retries
 *     exhausted). Receives of an idle QP are not told, as on real RC;
 *   - a QP in the error state flushes its work requests with
 *     IBV_WC_WR_FLUSH_ERR; posting to a QP before RTS (sends) or before
 *     INIT (receives) fails with EINVAL.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* The header wraps these exported entries in macros; the library defines
 * the entries themselves. */
#undef ibv_query_port
#undef ibv_reg_mr

#define EXPORT __attribute__((visibility("default")))

/* The loader and the plugin recognise an emulator by this symbol. */
EXPORT const int flagcxVendorsimEmulated = 1;

#define SHM_DIR "/dev/shm"
#define QP_PREFIX "flagcx-vsimib-qp-"
#define QP_MAGIC 0x56514950u
#define DATA_RING (1u << 20)
#define ACK_SLOTS 1024u
#define CHUNK (64u << 10)
#define NDEVS 3
#define ROCE_DEV 1 /* the index of vsim_roce0; the others are InfiniBand */

/* ---- shared memory: one file per QP ----------------------------------- */

typedef struct {
  _Atomic uint64_t head; /* bytes written (producer: the peer's NIC) */
  _Atomic uint64_t tail; /* bytes consumed (this QP's NIC) */
} ringPos;

enum { PKT_WRITE = 1, PKT_SEND = 2 };
enum { PKT_LAST = 1, PKT_IMM = 2, PKT_FIRST = 4 };

typedef struct {
  uint32_t type, flags;
  uint32_t len;   /* payload bytes in this packet */
  uint32_t total; /* bytes of the whole work request */
  uint64_t wrSeq; /* the requester's work request number */
  uint64_t raddr;
  uint32_t rkey;
  uint32_t imm; /* network order, as ibv_send_wr.imm_data */
} pktHdr;

typedef struct {
  uint64_t wrSeq;
  uint32_t status; /* enum ibv_wc_status */
  uint32_t pad;
} ackEnt;

typedef struct {
  uint32_t magic, qpn;
  int32_t ownerPid;
  uint32_t dev;
  _Atomic uint32_t doorbell; /* futex: bumped for this QP's NIC thread */
  _Atomic uint32_t state;    /* enum ibv_qp_state, published */
  _Atomic uint32_t closed;
  uint32_t pad;
  ringPos data, ack;
  ackEnt acks[ACK_SLOTS];
  uint8_t ring[DATA_RING];
} qpShared;

/* ---- process-local objects ------------------------------------------ */

typedef struct {
  struct ibv_device dev;
  int index;
} vDevice;

typedef struct {
  struct ibv_context ctx;
  int index;
} vContext;

typedef struct {
  struct ibv_cq cq;
  pthread_mutex_t lock;
  struct ibv_wc* wcs;
  int cap;
  uint64_t head, tail;
  int overrun;
} vCq;

typedef struct {
  struct ibv_mr mr;
  int access;
  int live;
} vMr;

typedef struct {
  struct ibv_send_wr wr; /* sg_list points at sge */
  struct ibv_sge sge[4];
  uint64_t seq;
} sendEnt;

typedef struct {
  uint64_t wrId;
  struct ibv_sge sge[4];
  int nsge;
} recvEnt;

typedef struct {
  struct ibv_qp qp;
  pthread_mutex_t lock;
  qpShared* sh;
  qpShared* peer;
  int peerMissing;
  int access;
  uint32_t maxSend, maxRecv;
  sendEnt* sq;
  uint64_t sqPosted, sqTx, sqDone; /* sequence numbers */
  uint64_t txOff;                  /* bytes of WR sqTx already sent */
  recvEnt* rq;
  uint64_t rqPosted, rqDone;
  uint64_t rxOff; /* bytes of the current inbound SEND placed */
  int rxPlaced;   /* the current packet's payload is placed (waiting for a receive) */
  int flushedErr; /* the first error completion was reported */
  pthread_t nic;
  _Atomic int stop;
} vQp;

static vDevice devices[NDEVS];
static pthread_once_t initOnce = PTHREAD_ONCE_INIT;

static pthread_mutex_t mrLock = PTHREAD_MUTEX_INITIALIZER;
static vMr** mrs;
static int nmrs;
static uint32_t nextKey = 0x100;

/* ---- helpers ---------------------------------------------------------- */

static void futexWake(_Atomic uint32_t* w) {
  atomic_fetch_add_explicit(w, 1, memory_order_release);
  syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void futexWait(_Atomic uint32_t* w, uint32_t v, long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static int pidGone(int pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

static void qpPath(uint32_t qpn, char* buf, size_t n) { snprintf(buf, n, SHM_DIR "/" QP_PREFIX "%u", qpn); }

/* Removes QP files whose process died without destroying them. */
static void cleanStale(void) {
  DIR* d = opendir(SHM_DIR);
  if (!d) return;
  for (struct dirent* e; (e = readdir(d));) {
    if (strncmp(e->d_name, QP_PREFIX, strlen(QP_PREFIX)) != 0) continue;
    char path[512];
    snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    int32_t hdr[3] = {0};
    if (pread(fd, hdr, sizeof(hdr), 0) == sizeof(hdr) && pidGone(hdr[2])) unlink(path);
    close(fd);
  }
  closedir(d);
}

static const char* devNames[NDEVS] = {"vsim_ib0", "vsim_roce0", "vsim_ib1"};

/* The made-up sysfs paths of the devices' PCI functions: not files, so a
 * caller that finds no /sys/class/infiniband/<name>/device asks here.
 * They live in the tree hostnet gives the emulated accelerators
 * (internal/hostnet/pcitopo.go, emulatedPCIPath). NULL for another name. */
EXPORT const char* flagcxVendorsimPciPath(const char* name) {
  static const char* paths[NDEVS] = {
      "/vsim/sys/devices/pci0000:00/0000:00:01.0/0000:40:00.0/0000:40:82.0/0000:60:00.0",
      "/vsim/sys/devices/pci0000:c0/0000:c0:01.0/0000:c1:00.0",
      "/vsim/sys/devices/pci0000:00/0000:00:02.0/0000:41:00.0/0000:41:82.0/0000:61:00.0",
  };
  for (int i = 0; name && i < NDEVS; i++)
    if (strcmp(name, devNames[i]) == 0) return paths[i];
  return NULL;
}

/* The LID of an InfiniBand device (0 for the RoCE one), and the device of
 * a LID (-1 when none has it). */
static int devLid(int dev) { return dev == ROCE_DEV ? 0 : dev == 0 ? 1 : 2; }
static int lidDev(int lid) {
  for (int i = 0; i < NDEVS; i++)
    if (i != ROCE_DEV && devLid(i) == lid) return i;
  return -1;
}

static void initDevices(void) {
  const char** names = devNames;
  for (int i = 0; i < NDEVS; i++) {
    struct ibv_device* d = &devices[i].dev;
    devices[i].index = i;
    d->node_type = IBV_NODE_CA;
    d->transport_type = IBV_TRANSPORT_IB;
    snprintf(d->name, sizeof(d->name), "%s", names[i]);
    snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
    snprintf(d->dev_path, sizeof(d->dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
    snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/%s", names[i]);
  }
  cleanStale();
}

/* ---- devices ------------------------------------------------------------ */

EXPORT struct ibv_device** ibv_get_device_list(int* num) {
  pthread_once(&initOnce, initDevices);
  struct ibv_device** list = calloc(NDEVS + 1, sizeof(*list));
  if (!list) { errno = ENOMEM; return NULL; }
  for (int i = 0; i < NDEVS; i++) list[i] = &devices[i].dev;
  if (num) *num = NDEVS;
  return list;
}

EXPORT void ibv_free_device_list(struct ibv_device** list) { free(list); }
EXPORT const char* ibv_get_device_name(struct ibv_device* d) { return d->name; }
EXPORT __be64 ibv_get_device_guid(struct ibv_device* d) { return htobe64(0x0002c90300f1a000ull + ((vDevice*)d)->index); }

EXPORT const char* ibv_wc_status_str(enum ibv_wc_status s) {
  static const char* names[] = {
      [IBV_WC_SUCCESS] = "success", [IBV_WC_LOC_LEN_ERR] = "local length error",
      [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error", [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
      [IBV_WC_LOC_PROT_ERR] = "local protection error", [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
      [IBV_WC_MW_BIND_ERR] = "memory management operation error", [IBV_WC_BAD_RESP_ERR] = "bad response error",
      [IBV_WC_LOC_ACCESS_ERR] = "local access error", [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
      [IBV_WC_REM_ACCESS_ERR] = "remote access error", [IBV_WC_REM_OP_ERR] = "remote operation error",
      [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded", [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
  };
  if ((unsigned)s < sizeof(names) / sizeof(names[0]) && names[s]) return names[s];
  return "unknown";
}

static int postSend(struct ibv_qp*, struct ibv_send_wr*, struct ibv_send_wr**);
static int postRecv(struct ibv_qp*, struct ibv_recv_wr*, struct ibv_recv_wr**);
static int pollCq(struct ibv_cq*, int, struct ibv_wc*);
static int reqNotifyCq(struct ibv_cq* cq, int solicited) { (void)cq; (void)solicited; return EOPNOTSUPP; }

EXPORT struct ibv_context* ibv_open_device(struct ibv_device* d) {
  vContext* c = calloc(1, sizeof(*c));
  if (!c) { errno = ENOMEM; return NULL; }
  c->ctx.device = d;
  c->index = ((vDevice*)d)->index;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = -1;
  c->ctx.num_comp_vectors = 1;
  c->ctx.ops.post_send = postSend;
  c->ctx.ops.post_recv = postRecv;
  c->ctx.ops.poll_cq = pollCq;
  c->ctx.ops.req_notify_cq = reqNotifyCq;
  pthread_mutex_init(&c->ctx.mutex, NULL);
  return &c->ctx; /* abi_compat NULL: callers take the exported entries */
}

EXPORT int ibv_close_device(struct ibv_context* ctx) {
  free(ctx);
  return 0;
}

EXPORT int ibv_query_device(struct ibv_context* ctx, struct ibv_device_attr* a) {
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "flagcx-vendorsim");
  a->node_guid = ibv_get_device_guid(ctx->device);
  a->max_mr_size = 1ull << 40;
  a->max_qp = 65536;
  a->max_qp_wr = 4096;
  a->max_sge = 4;
  a->max_cq = 65536;
  a->max_cqe = 1 << 20;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->phys_port_cnt = 1;
  return 0;
}

static int ctxIndex(struct ibv_context* ctx) { return ((vContext*)ctx)->index; }
static int gidCount(int dev) { return dev == ROCE_DEV ? 2 : 1; }

/* The exported entry fills the compat prefix of struct ibv_port_attr
 * (everything up to port_cap_flags2, which is the whole struct in this
 * header's version). */
EXPORT int ibv_query_port(struct ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* compat) {
  struct ibv_port_attr* a = (struct ibv_port_attr*)compat;
  if (port != 1) return EINVAL;
  int roce = ctxIndex(ctx) == ROCE_DEV;
  memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = gidCount(ctxIndex(ctx));
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->lid = (uint16_t)devLid(ctxIndex(ctx));
  a->active_width = 2;  /* 4x */
  a->active_speed = 64; /* HDR */
  a->phys_state = 5;    /* LinkUp */
  a->link_layer = roce ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

/* GID index of device dev: 0 link-local from the GUID, 1 (RoCE only)
 * ::ffff:127.0.0.1. */
static int devGid(int dev, int index, union ibv_gid* gid) {
  if (index < 0 || index >= gidCount(dev)) return EINVAL;
  memset(gid, 0, sizeof(*gid));
  if (index == 0) {
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    gid->global.interface_id = ibv_get_device_guid(&devices[dev].dev);
  } else {
    gid->raw[10] = gid->raw[11] = 0xff;
    gid->raw[12] = 127;
    gid->raw[15] = 1;
  }
  return 0;
}

EXPORT int ibv_query_gid(struct ibv_context* ctx, uint8_t port, int index, union ibv_gid* gid) {
  if (port != 1 || devGid(ctxIndex(ctx), index, gid) != 0) { errno = EINVAL; return -1; }
  return 0;
}

/* ---- protection domains and memory ---------------------------------- */

EXPORT struct ibv_pd* ibv_alloc_pd(struct ibv_context* ctx) {
  struct ibv_pd* pd = calloc(1, sizeof(*pd));
  if (!pd) { errno = ENOMEM; return NULL; }
  pd->context = ctx;
  return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd* pd) {
  free(pd);
  return 0;
}

EXPORT struct ibv_mr* ibv_reg_mr(struct ibv_pd* pd, void* addr, size_t len, int access) {
  if (!pd || (!addr && len) || len == 0) { errno = EINVAL; return NULL; }
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL; /* as the kernel: remote write needs local write */
    return NULL;
  }
  vMr* m = calloc(1, sizeof(*m));
  if (!m) { errno = ENOMEM; return NULL; }
  pthread_mutex_lock(&mrLock);
  vMr** grown = realloc(mrs, sizeof(*mrs) * (nmrs + 1));
  if (!grown) {
    pthread_mutex_unlock(&mrLock);
    free(m);
    errno = ENOMEM;
    return NULL;
  }
  mrs = grown;
  mrs[nmrs++] = m;
  nextKey += 0x100;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  m->mr.lkey = nextKey | 0x11;
  m->mr.rkey = nextKey | 0x22;
  m->access = access;
  m->live = 1;
  pthread_mutex_unlock(&mrLock);
  return &m->mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr* mr) {
  pthread_mutex_lock(&mrLock);
  for (int i = 0; i < nmrs; i++) {
    if (&mrs[i]->mr == mr) {
      free(mrs[i]);
      mrs[i] = mrs[--nmrs];
      pthread_mutex_unlock(&mrLock);
      return 0;
    }
  }
  pthread_mutex_unlock(&mrLock);
  return EINVAL;
}

/* Whether [addr, addr+len) lies in a live MR of pd with key (lkey or rkey)
 * and the access asked for. */
static int mrCovers(struct ibv_pd* pd, uint32_t key, int remote, uint64_t addr, uint64_t len, int access) {
  int ok = 0;
  pthread_mutex_lock(&mrLock);
  for (int i = 0; i < nmrs && !ok; i++) {
    vMr* m = mrs[i];
#ifdef VSIM_BREAK_RKEY /* negative control (conformance/netsuite): any remote key goes */
    if (remote && m->mr.pd == pd) { ok = 1; break; }
#endif
    if (m->mr.pd != pd || (remote ? m->mr.rkey : m->mr.lkey) != key) continue;
    uint64_t lo = (uint64_t)(uintptr_t)m->mr.addr, hi = lo + m->mr.length;
    ok = addr >= lo && addr + len <= hi && addr + len >= addr && (m->access & access) == access;
  }
  pthread_mutex_unlock(&mrLock);
  return ok;
}

/* ---- completion queues ---------------------------------------------- */

EXPORT struct ibv_cq* ibv_create_cq(struct ibv_context* ctx, int cqe, void* cqCtx, struct ibv_comp_channel* ch, int vec) {
  (void)vec;
  if (cqe < 1 || cqe > (1 << 20)) { errno = EINVAL; return NULL; }
  vCq* c = calloc(1, sizeof(*c));
  if (!c || !(c->wcs = calloc(cqe, sizeof(*c->wcs)))) { free(c); errno = ENOMEM; return NULL; }
  c->cap = cqe;
  c->cq.context = ctx;
  c->cq.channel = ch;
  c->cq.cq_context = cqCtx;
  c->cq.cqe = cqe;
  pthread_mutex_init(&c->lock, NULL);
  return &c->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq* cq) {
  vCq* c = (vCq*)cq;
  free(c->wcs);
  free(c);
  return 0;
}

static void pushWc(struct ibv_cq* cq, const struct ibv_wc* wc) {
  vCq* c = (vCq*)cq;
  pthread_mutex_lock(&c->lock);
  if (c->head - c->tail < (uint64_t)c->cap) c->wcs[c->head++ % c->cap] = *wc;
  else c->overrun = 1; /* the real HCA raises IBV_EVENT_CQ_ERR */
  pthread_mutex_unlock(&c->lock);
}

static int pollCq(struct ibv_cq* cq, int n, struct ibv_wc* out) {
  vCq* c = (vCq*)cq;
  pthread_mutex_lock(&c->lock);
  if (c->overrun) {
    pthread_mutex_unlock(&c->lock);
    return -EOVERFLOW;
  }
  int got = 0;
  while (got < n && c->tail < c->head) out[got++] = c->wcs[c->tail++ % c->cap];
  pthread_mutex_unlock(&c->lock);
  return got;
}

/* ---- queue pairs: setup ---------------------------------------------- */

static uint32_t nextQpn(void) {
  static _Atomic uint32_t* counter;
  if (!counter) {
    int fd = open(SHM_DIR "/flagcx-vsimib-fabric", O_RDWR | O_CREAT, 0600);
    if (fd < 0) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_size < 4096 && ftruncate(fd, 4096) != 0)) { close(fd); return 0; }
    void* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return 0;
    counter = p;
  }
  return 16 + atomic_fetch_add(counter, 1) % 0xffff00u; /* QPNs are 24 bits */
}

static qpShared* mapQp(uint32_t qpn, int create, int* fdErr) {
  char path[128];
  qpPath(qpn, path, sizeof(path));
  int fd = open(path, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) { *fdErr = errno; return NULL; }
  if (create && ftruncate(fd, sizeof(qpShared)) != 0) {
    *fdErr = errno;
    close(fd);
    unlink(path);
    return NULL;
  }
  struct stat st;
  if (!create && (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(qpShared))) { close(fd); *fdErr = EINVAL; return NULL; }
  void* p = mmap(NULL, sizeof(qpShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { *fdErr = errno; if (create) unlink(path); return NULL; }
  return p;
}

static void* nicThread(void* arg);

EXPORT struct ibv_qp* ibv_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* ia) {
  if (!pd || !ia || ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || ia->srq ||
      ia->cap.max_send_wr > ACK_SLOTS || ia->cap.max_recv_wr > 4096 || ia->cap.max_send_sge > 4 || ia->cap.max_recv_sge > 4 ||
      ia->cap.max_inline_data > 0) {
    errno = EINVAL; /* the emulator has RC QPs without SRQ or inline data */
    return NULL;
  }
  vQp* q = calloc(1, sizeof(*q));
  if (!q) { errno = ENOMEM; return NULL; }
  q->maxSend = ia->cap.max_send_wr ? ia->cap.max_send_wr : 1;
  q->maxRecv = ia->cap.max_recv_wr ? ia->cap.max_recv_wr : 1;
  q->sq = calloc(q->maxSend, sizeof(*q->sq));
  q->rq = calloc(q->maxRecv, sizeof(*q->rq));
  int err = ENOMEM;
  for (int tries = 0; q->sq && q->rq && !q->sh && tries < 64; tries++) {
    uint32_t qpn = nextQpn();
    if (!qpn) break;
    q->sh = mapQp(qpn, 1, &err);
    if (!q->sh && err == EEXIST) {
      char path[128];
      qpPath(qpn, path, sizeof(path));
      int fd = open(path, O_RDONLY);
      int32_t hdr[3] = {0};
      if (fd >= 0 && pread(fd, hdr, sizeof(hdr), 0) == sizeof(hdr) && pidGone(hdr[2])) unlink(path);
      if (fd >= 0) close(fd);
    }
    if (q->sh) q->qp.qp_num = qpn;
  }
  if (!q->sh) {
    free(q->sq);
    free(q->rq);
    free(q);
    errno = err;
    return NULL;
  }
  q->sh->magic = QP_MAGIC;
  q->sh->qpn = q->qp.qp_num;
  q->sh->ownerPid = getpid();
  q->sh->dev = (uint32_t)ctxIndex(pd->context);
  q->qp.context = pd->context;
  q->qp.qp_context = ia->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.state = IBV_QPS_RESET;
  pthread_mutex_init(&q->lock, NULL);
  pthread_mutex_init(&q->qp.mutex, NULL);
  pthread_cond_init(&q->qp.cond, NULL);
  ia->cap.max_send_wr = q->maxSend;
  ia->cap.max_recv_wr = q->maxRecv;
  if (pthread_create(&q->nic, NULL, nicThread, q) != 0) {
    char path[128];
    qpPath(q->qp.qp_num, path, sizeof(path));
    unlink(path);
    munmap(q->sh, sizeof(qpShared));
    free(q->sq);
    free(q->rq);
    free(q);
    errno = EAGAIN;
    return NULL;
  }
  return &q->qp;
}

/* The address vector must be one this device can use: a GRH on RoCE, a
 * valid source GID index. */
static int addressOk(vQp* q, const struct ibv_ah_attr* ah) {
  int dev = ctxIndex(q->qp.context);
  if (dev == ROCE_DEV && !ah->is_global) return EINVAL; /* RoCE needs a GRH */
  if (ah->is_global && ah->grh.sgid_index >= gidCount(dev)) return EINVAL;
  return 0;
}

/* The device an address vector reaches from this QP's device, -1 for none:
 * the InfiniBand devices form one subnet (LIDs, or their GIDs with a GRH),
 * the RoCE device only reaches itself. */
static int addressedDevice(vQp* q, const struct ibv_ah_attr* ah) {
  int self = ctxIndex(q->qp.context);
  if (!ah->is_global) return self == ROCE_DEV ? -1 : lidDev(ah->dlid);
  for (int dev = 0; dev < NDEVS; dev++) {
    if ((dev == ROCE_DEV) != (self == ROCE_DEV)) continue;
    union ibv_gid g;
    for (int i = 0; i < gidCount(dev); i++)
      if (devGid(dev, i, &g) == 0 && memcmp(g.raw, ah->grh.dgid.raw, 16) == 0) return dev;
  }
  return -1;
}

static void setState(vQp* q, enum ibv_qp_state s) {
  q->qp.state = s;
  atomic_store(&q->sh->state, (uint32_t)s);
  futexWake(&q->sh->doorbell);
}

EXPORT int ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* a, int mask) {
  vQp* q = (vQp*)qp;
  int rc = 0;
  pthread_mutex_lock(&q->lock);
  enum ibv_qp_state cur = qp->state, next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
  if (mask & IBV_QP_ACCESS_FLAGS) q->access = a->qp_access_flags;
  switch (next) {
  case IBV_QPS_INIT:
    if (cur != IBV_QPS_RESET && cur != IBV_QPS_INIT) rc = EINVAL;
    else if (cur == IBV_QPS_RESET && (mask & (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) != (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) rc = EINVAL;
    else if ((mask & IBV_QP_PORT) && a->port_num != 1) rc = EINVAL;
    break;
  case IBV_QPS_RTR: {
    int need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (cur != IBV_QPS_INIT || (mask & need) != need) { rc = EINVAL; break; }
    if ((rc = addressOk(q, &a->ah_attr)) != 0) break;
    int err = 0, dst = addressedDevice(q, &a->ah_attr);
    q->peer = dst >= 0 ? mapQp(a->dest_qp_num, 0, &err) : NULL;
    if (q->peer && (q->peer->magic != QP_MAGIC || q->peer->qpn != a->dest_qp_num || q->peer->dev != (uint32_t)dst)) {
      munmap(q->peer, sizeof(qpShared)); /* not a QP of the addressed device: the packets would go nowhere */
      q->peer = NULL;
    }
    q->peerMissing = q->peer == NULL; /* sends will time out, as into a void */
    break;
  }
  case IBV_QPS_RTS: {
    int need = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    if ((cur != IBV_QPS_RTR && cur != IBV_QPS_RTS) || (cur == IBV_QPS_RTR && (mask & need) != need)) rc = EINVAL;
    break;
  }
  case IBV_QPS_ERR:
  case IBV_QPS_RESET:
    break;
  default:
    rc = EINVAL;
  }
  if (rc == 0 && next != cur) setState(q, next);
  if (rc == 0 && next == IBV_QPS_RESET) {
    q->sqPosted = q->sqTx = q->sqDone = q->rqPosted = q->rqDone = 0;
    q->txOff = q->rxOff = 0;
    q->flushedErr = 0;
  }
  pthread_mutex_unlock(&q->lock);
  if (rc) errno = rc;
  return rc;
}

EXPORT int ibv_query_qp(struct ibv_qp* qp, struct ibv_qp_attr* a, int mask, struct ibv_qp_init_attr* ia) {
  (void)mask;
  vQp* q = (vQp*)qp;
  memset(a, 0, sizeof(*a));
  a->qp_state = qp->state;
  a->cur_qp_state = qp->state;
  a->qp_access_flags = q->access;
  if (ia) {
    memset(ia, 0, sizeof(*ia));
    ia->send_cq = qp->send_cq;
    ia->recv_cq = qp->recv_cq;
    ia->qp_type = IBV_QPT_RC;
    ia->cap.max_send_wr = q->maxSend;
    ia->cap.max_recv_wr = q->maxRecv;
  }
  return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp* qp) {
  vQp* q = (vQp*)qp;
  atomic_store(&q->stop, 1);
  futexWake(&q->sh->doorbell);
  pthread_join(q->nic, NULL);
  atomic_store(&q->sh->closed, 1);
  char path[128];
  qpPath(qp->qp_num, path, sizeof(path));
  unlink(path);
  if (q->peer) {
    futexWake(&q->peer->doorbell);
    munmap(q->peer, sizeof(qpShared));
  }
  munmap(q->sh, sizeof(qpShared));
  free(q->sq);
  free(q->rq);
  free(q);
  return 0;
}

/* ---- posting ----------------------------------------------------------- */

static int postSend(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  vQp* q = (vQp*)qp;
  int rc = 0;
  pthread_mutex_lock(&q->lock);
  if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) rc = EINVAL;
  for (; wr && !rc; wr = wr->next) {
    if (wr->num_sge < 0 || wr->num_sge > 4 || (wr->send_flags & IBV_SEND_INLINE)) { rc = EINVAL; break; }
    if (q->sqPosted - q->sqDone >= q->maxSend) { rc = ENOMEM; break; }
    sendEnt* e = &q->sq[q->sqPosted % q->maxSend];
    e->wr = *wr;
    e->wr.next = NULL;
    if (wr->num_sge > 0) memcpy(e->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
    e->wr.sg_list = e->sge;
    e->seq = q->sqPosted++;
  }
  pthread_mutex_unlock(&q->lock);
  if (rc && bad) *bad = wr;
  futexWake(&q->sh->doorbell);
  return rc;
}

static int postRecv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  vQp* q = (vQp*)qp;
  int rc = 0;
  pthread_mutex_lock(&q->lock);
  if (qp->state == IBV_QPS_RESET) rc = EINVAL;
  for (; wr && !rc; wr = wr->next) {
    if (wr->num_sge < 0 || wr->num_sge > 4) { rc = EINVAL; break; }
    if (q->rqPosted - q->rqDone >= q->maxRecv) { rc = ENOMEM; break; }
    recvEnt* e = &q->rq[q->rqPosted % q->maxRecv];
    e->wrId = wr->wr_id;
    e->nsge = wr->num_sge;
    if (wr->num_sge > 0) memcpy(e->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
    q->rqPosted++;
  }
  pthread_mutex_unlock(&q->lock);
  if (rc && bad) *bad = wr;
  futexWake(&q->sh->doorbell);
  return rc;
}

/* ---- the NIC ------------------------------------------------------------ */

static void ringWrite(qpShared* s, uint64_t pos, const void* src, size_t n) {
  size_t off = pos % DATA_RING, first = n < DATA_RING - off ? n : DATA_RING - off;
  memcpy(s->ring + off, src, first);
  memcpy(s->ring, (const char*)src + first, n - first);
}

static void ringRead(qpShared* s, uint64_t pos, void* dst, size_t n) {
  size_t off = pos % DATA_RING, first = n < DATA_RING - off ? n : DATA_RING - off;
  memcpy(dst, s->ring + off, first);
  memcpy((char*)dst + first, s->ring, n - first);
}

static size_t pktBytes(uint32_t len) { return (sizeof(pktHdr) + len + 63) & ~(size_t)63; }

static uint64_t wrBytes(const sendEnt* e) {
  uint64_t n = 0;
  for (int i = 0; i < e->wr.num_sge; i++) n += e->sge[i].length;
  return n;
}

static enum ibv_wc_opcode sendOpcode(const sendEnt* e) {
  return e->wr.opcode == IBV_WR_SEND || e->wr.opcode == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
}

/* Completes the oldest outstanding send with status, under q->lock. An
 * error moves the QP to the error state (the rest is flushed later). */
static void completeSend(vQp* q, enum ibv_wc_status status) {
  sendEnt* e = &q->sq[q->sqDone % q->maxSend];
  if (status != IBV_WC_SUCCESS || (e->wr.send_flags & IBV_SEND_SIGNALED)) {
    struct ibv_wc wc = {.wr_id = e->wr.wr_id, .status = status, .opcode = sendOpcode(e), .qp_num = q->qp.qp_num,
                        .vendor_err = status ? 0x80 + status : 0};
    pushWc(q->qp.send_cq, &wc);
  }
  if (q->sqTx == q->sqDone) {
    q->sqTx++;
    q->txOff = 0;
  }
  q->sqDone++;
  if (status != IBV_WC_SUCCESS) {
    q->flushedErr = 1;
    setState(q, IBV_QPS_ERR);
  }
}

static void pushRecvWc(vQp* q, uint64_t wrId, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len, uint32_t imm, int hasImm) {
  struct ibv_wc wc = {.wr_id = wrId, .status = st, .opcode = op, .byte_len = len, .qp_num = q->qp.qp_num,
                      .wc_flags = hasImm ? IBV_WC_WITH_IMM : 0, .imm_data = imm, .vendor_err = st ? 0x80 + st : 0};
  pushWc(q->qp.recv_cq, &wc);
}

/* The error state: every work request left completes with
 * IBV_WC_WR_FLUSH_ERR. */
static void flush(vQp* q) {
  pthread_mutex_lock(&q->lock);
  while (q->sqDone < q->sqPosted) {
    sendEnt* e = &q->sq[q->sqDone % q->maxSend];
    struct ibv_wc wc = {.wr_id = e->wr.wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = sendOpcode(e), .qp_num = q->qp.qp_num};
    pushWc(q->qp.send_cq, &wc);
    q->sqDone++;
  }
  q->sqTx = q->sqDone;
  q->txOff = 0;
  while (q->rqDone < q->rqPosted) {
    pushRecvWc(q, q->rq[q->rqDone % q->maxRecv].wrId, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0);
    q->rqDone++;
  }
  pthread_mutex_unlock(&q->lock);
}

static void sendAck(vQp* q, uint64_t wrSeq, enum ibv_wc_status st) {
  qpShared* p = q->peer;
  if (!p) return;
  uint64_t h = atomic_load_explicit(&p->ack.head, memory_order_relaxed);
  p->acks[h % ACK_SLOTS] = (ackEnt){.wrSeq = wrSeq, .status = st};
  atomic_store_explicit(&p->ack.head, h + 1, memory_order_release);
  futexWake(&p->doorbell);
}

static int localOk(vQp* q, const struct ibv_sge* sge, int n, int access) {
  for (int i = 0; i < n; i++)
    if (sge[i].length && !mrCovers(q->qp.pd, sge[i].lkey, 0, sge[i].addr, sge[i].length, access)) return 0;
  return 1;
}

/* Sends what fits of the posted work requests into the peer's ring. */
static int transmit(vQp* q) {
  int work = 0;
  for (;;) {
    pthread_mutex_lock(&q->lock);
    int ready = q->qp.state == IBV_QPS_RTS && q->sqTx < q->sqPosted;
    sendEnt* e = ready ? &q->sq[q->sqTx % q->maxSend] : NULL;
    uint64_t off = q->txOff;
    pthread_mutex_unlock(&q->lock);
    if (!e) return work;
    qpShared* p = q->peer;
    if (!p) return work; /* unreachable: the retry timer (liveness) fails it */
    uint64_t total = wrBytes(e);
    int op = e->wr.opcode;
    enum ibv_wc_status bad = IBV_WC_SUCCESS;
    if (op != IBV_WR_RDMA_WRITE && op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM)
      bad = IBV_WC_LOC_QP_OP_ERR;
    else if (off == 0 && !localOk(q, e->sge, e->wr.num_sge, 0))
      bad = IBV_WC_LOC_PROT_ERR;
    if (bad != IBV_WC_SUCCESS) {
      pthread_mutex_lock(&q->lock);
      while (q->sqDone < q->sqTx) completeSend(q, IBV_WC_WR_FLUSH_ERR); /* not reached: acks come in order */
      completeSend(q, bad);
      pthread_mutex_unlock(&q->lock);
      return 1;
    }
    uint32_t len = (uint32_t)(total - off < CHUNK ? total - off : CHUNK);
    size_t need = pktBytes(len);
    uint64_t head = atomic_load_explicit(&p->data.head, memory_order_relaxed);
    if (DATA_RING - (head - atomic_load_explicit(&p->data.tail, memory_order_acquire)) < need) return work;
    int rdma = op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
    int imm = op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_IMM;
    pktHdr h = {.type = rdma ? PKT_WRITE : PKT_SEND, .len = len, .total = (uint32_t)total, .wrSeq = e->seq,
                .raddr = e->wr.wr.rdma.remote_addr + off, .rkey = e->wr.wr.rdma.rkey, .imm = e->wr.imm_data};
    h.flags = (off + len == total ? PKT_LAST : 0) | (imm ? PKT_IMM : 0) | (off == 0 ? PKT_FIRST : 0);
    ringWrite(p, head, &h, sizeof(h));
    uint64_t pos = head + sizeof(h), skip = off;
    for (int i = 0, left = (int)len; i < e->wr.num_sge && left > 0; i++) {
      uint64_t sl = e->sge[i].length;
      if (skip >= sl) { skip -= sl; continue; }
      uint64_t n = sl - skip < (uint64_t)left ? sl - skip : (uint64_t)left;
      ringWrite(p, pos, (const void*)(uintptr_t)(e->sge[i].addr + skip), n);
      pos += n;
      left -= (int)n;
      skip = 0;
    }
    atomic_store_explicit(&p->data.head, head + need, memory_order_release);
    futexWake(&p->doorbell);
    pthread_mutex_lock(&q->lock);
    if (q->sqTx == e->seq) { /* not flushed meanwhile */
      q->txOff = off + len;
      if (q->txOff == total) {
        q->sqTx++;
        q->txOff = 0;
      }
    }
    pthread_mutex_unlock(&q->lock);
    work = 1;
  }
}

/* Responder: a packet that breaks the rules NAKs the requester and moves
 * this QP to the error state (its receives are flushed). */
static void responderError(vQp* q, uint64_t wrSeq, enum ibv_wc_status toRequester) {
  sendAck(q, wrSeq, toRequester);
  pthread_mutex_lock(&q->lock);
  setState(q, IBV_QPS_ERR);
  pthread_mutex_unlock(&q->lock);
}

/* Places one packet. Returns 0 when it must wait for a receive. */
static int place(vQp* q, const pktHdr* h, uint64_t payload) {
  pthread_mutex_lock(&q->lock);
  recvEnt* r = q->rqDone < q->rqPosted ? &q->rq[q->rqDone % q->maxRecv] : NULL;
  pthread_mutex_unlock(&q->lock);
  qpShared* s = q->sh;
  if (h->type == PKT_WRITE) {
    if (!q->rxPlaced) {
      if (!(q->access & IBV_ACCESS_REMOTE_WRITE) ||
          !mrCovers(q->qp.pd, h->rkey, 1, h->raddr, h->len, IBV_ACCESS_REMOTE_WRITE)) {
        responderError(q, h->wrSeq, IBV_WC_REM_ACCESS_ERR);
        return 1;
      }
      ringRead(s, payload, (void*)(uintptr_t)h->raddr, h->len);
      q->rxPlaced = 1;
    }
    if ((h->flags & (PKT_LAST | PKT_IMM)) == (PKT_LAST | PKT_IMM)) {
      if (!r) return 0; /* receiver not ready: the requester retries */
      pushRecvWc(q, r->wrId, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, h->total, h->imm, 1);
      pthread_mutex_lock(&q->lock);
      q->rqDone++;
      pthread_mutex_unlock(&q->lock);
    }
    if (h->flags & PKT_LAST) sendAck(q, h->wrSeq, IBV_WC_SUCCESS);
    return 1;
  }
  if (!r) return 0;
  if (h->flags & PKT_FIRST) q->rxOff = 0;
  uint64_t cap = 0;
  for (int i = 0; i < r->nsge; i++) cap += r->sge[i].length;
  if (q->rxOff + h->len > cap || !localOk(q, r->sge, r->nsge, IBV_ACCESS_LOCAL_WRITE)) {
    int tooLong = q->rxOff + h->len > cap;
    pushRecvWc(q, r->wrId, tooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, 0, 0);
    pthread_mutex_lock(&q->lock);
    q->rqDone++;
    pthread_mutex_unlock(&q->lock);
    responderError(q, h->wrSeq, tooLong ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR);
    return 1;
  }
  uint64_t skip = q->rxOff, pos = payload;
  for (int i = 0, left = (int)h->len; i < r->nsge && left > 0; i++) {
    uint64_t sl = r->sge[i].length;
    if (skip >= sl) { skip -= sl; continue; }
    uint64_t n = sl - skip < (uint64_t)left ? sl - skip : (uint64_t)left;
    ringRead(s, pos, (void*)(uintptr_t)(r->sge[i].addr + skip), n);
    pos += n;
    left -= (int)n;
    skip = 0;
  }
  q->rxOff += h->len;
  if (h->flags & PKT_LAST) {
    pushRecvWc(q, r->wrId, IBV_WC_SUCCESS, IBV_WC_RECV, h->total, h->imm, (h->flags & PKT_IMM) != 0);
    pthread_mutex_lock(&q->lock);
    q->rqDone++;
    pthread_mutex_unlock(&q->lock);
    sendAck(q, h->wrSeq, IBV_WC_SUCCESS);
  }
  return 1;
}

static int receive(vQp* q) {
  qpShared* s = q->sh;
  int work = 0;
  for (;;) {
    uint64_t tail = atomic_load_explicit(&s->data.tail, memory_order_relaxed);
    if (tail == atomic_load_explicit(&s->data.head, memory_order_acquire)) return work;
    enum ibv_qp_state st = q->qp.state;
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT) return work; /* not ready: the requester retries */
    pktHdr h;
    ringRead(s, tail, &h, sizeof(h));
    if (st != IBV_QPS_ERR && !place(q, &h, tail + sizeof(h))) return work;
    q->rxPlaced = 0;
    atomic_store_explicit(&s->data.tail, tail + pktBytes(h.len), memory_order_release);
    if (q->peer) futexWake(&q->peer->doorbell); /* room in our ring */
    work = 1;
  }
}

static int takeAcks(vQp* q) {
  qpShared* s = q->sh;
  int work = 0;
  uint64_t t = atomic_load_explicit(&s->ack.tail, memory_order_relaxed);
  while (t != atomic_load_explicit(&s->ack.head, memory_order_acquire)) {
    ackEnt a = s->acks[t % ACK_SLOTS];
    pthread_mutex_lock(&q->lock);
    if (q->qp.state != IBV_QPS_ERR || a.status != IBV_WC_SUCCESS) {
      while (q->sqDone < q->sqPosted && q->sq[q->sqDone % q->maxSend].seq < a.wrSeq) completeSend(q, IBV_WC_SUCCESS);
      if (q->sqDone < q->sqPosted && q->sq[q->sqDone % q->maxSend].seq == a.wrSeq) completeSend(q, a.status);
    }
    pthread_mutex_unlock(&q->lock);
    atomic_store_explicit(&s->ack.tail, ++t, memory_order_release);
    work = 1;
  }
  return work;
}

/* The transport retry timer: sends outstanding to a peer that is gone (its
 * process, its QP) or in the error state are never acknowledged. */
static void checkPeer(vQp* q) {
  pthread_mutex_lock(&q->lock);
  int outstanding = q->qp.state == IBV_QPS_RTS && q->sqDone < q->sqPosted;
  qpShared* p = q->peer;
  int gone = outstanding && (!p || atomic_load(&p->closed) || pidGone(p->ownerPid) || atomic_load(&p->state) == IBV_QPS_ERR);
  if (gone) completeSend(q, IBV_WC_RETRY_EXC_ERR);
  pthread_mutex_unlock(&q->lock);
}

static void* nicThread(void* arg) {
  vQp* q = arg;
  struct timespec last;
  clock_gettime(CLOCK_MONOTONIC, &last);
  while (!atomic_load(&q->stop)) {
    uint32_t bell = atomic_load_explicit(&q->sh->doorbell, memory_order_acquire);
    int work = takeAcks(q);
    work |= receive(q);
    work |= transmit(q);
    if (q->qp.state == IBV_QPS_ERR) flush(q);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - last.tv_sec) * 1000000000L + (now.tv_nsec - last.tv_nsec) > 20000000L) {
      checkPeer(q);
      last = now;
    }
    if (!work) futexWait(&q->sh->doorbell, bell, 20000000L);
  }
  return NULL;
}
