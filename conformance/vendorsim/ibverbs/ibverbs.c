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
 * The fabric is TCP, so that queue pairs of different hosts connect as
 * they do over a real subnet, and nothing is left in /dev/shm. Each
 * process that creates queue pairs listens on one port (its "HCA port",
 * on the interface vsim_sock_local_ip picks: FLAGCX_SOCKET_IFNAME, else
 * the first non-loopback one); a QP number is that port << 8 | a slot of
 * the process's QP table, so QP numbers of two processes never collide.
 * Addresses name the host: an InfiniBand LID is the low 13 bits of the
 * host's IPv4 address << 2 | 1 (vsim_ib0) or 2 (vsim_ib1), the upper bits
 * being the requester's own (one subnet: hosts of a fabric must differ in
 * their low 13 bits); GID 0 of every device is fe80::<GUID>, the GUID
 * 02:c9:03:<device>:<IPv4>; vsim_roce0's GID 1 is ::ffff:<IPv4>. Moving a
 * QP to RTR connects to the addressed host's port and names the
 * destination QP and device; that connection carries this QP's packets to
 * the peer and the peer's acknowledgements back. A thread per QP plays the
 * NIC: it transmits posted work requests in 64 KiB packets, places inbound
 * RDMA writes into the registered memory of its own process (checking the
 * rkey, as the responder's HCA does), matches sends and writes with
 * immediate to posted receives (holding the packet, and so the sender,
 * as receiver-not-ready retries do, while none is posted), and completes
 * work requests into the CQs once the peer acknowledged them. Liveness is
 * the connection: a QP that is destroyed, moves to the error state or
 * whose process dies closes it.
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
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

/* Compiled in, so that the library still builds from this one file (as
 * conformance/netsuite's mutant builds do). */
#include "../core/vsim_sock.c"

/* The header wraps these exported entries in macros; the library defines
 * the entries themselves. */
#undef ibv_query_port
#undef ibv_reg_mr

#define EXPORT __attribute__((visibility("default")))

/* The loader and the plugin recognise an emulator by this symbol. */
EXPORT const int flagcxVendorsimEmulated = 1;

#define CHUNK (64u << 10)
#define MAX_QPS 255 /* per process: the low 8 bits of a QP number */
#define NDEVS 3
#define ROCE_DEV 1 /* the index of vsim_roce0; the others are InfiniBand */
#define HELLO_MAGIC 0x4c454856u

/* ---- the wire ---------------------------------------------------------- */

enum { PKT_WRITE = 1, PKT_SEND = 2 };
enum { PKT_LAST = 1, PKT_IMM = 2, PKT_FIRST = 4 };

typedef struct {
  uint32_t type, flags;
  uint32_t len;   /* payload bytes in this packet, at most CHUNK */
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

/* What a QP moving to RTR sends first; the answer is a uint32_t status. */
typedef struct {
  uint32_t magic, dstQpn, dstDev, srcQpn;
} helloMsg;
enum { HELLO_OK = 0, HELLO_NO_QP = 1, HELLO_WRONG_DEV = 2 };

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
  int slot;               /* in the process's QP table */
  int bell;               /* eventfd: wakes the NIC thread */
  int outFd;              /* to the peer: our packets out, its acks in */
  _Atomic int inFd;       /* from the peer: its packets in, our acks out */
  int peerGone;           /* outFd ended */
  uint8_t* rxBuf;         /* one inbound packet */
  size_t rxHave;
  uint8_t* txBuf;         /* one outbound packet */
  size_t txLen, txSent;
  uint64_t txSeq, txNextOff;
  uint8_t ackBuf[sizeof(ackEnt)];
  size_t ackHave;
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

static void ring(vQp* q) {
  uint64_t one = 1;
  if (write(q->bell, &one, sizeof one) < 0) { /* the counter is full: the thread is awake anyway */ }
}

/* This host's address (host order) and the pieces of an address that
 * name it. */
static uint32_t hostIp(void) { return ntohl(vsim_sock_local_ip()); }
static uint64_t devGuid(int dev) { return 0x02c9030000000000ull | (uint64_t)dev << 32 | hostIp(); }

static const char* devNames[NDEVS] = {"vsim_ib0", "vsim_roce0", "vsim_ib1"};

/* The made-up sysfs paths of the devices' PCI functions: not files, so a
 * caller that finds no /sys/class/infiniband/<name>/device asks here.
 * They live in the tree hostnet gives the emulated accelerators
 * (internal/hostnet/topo/topo.go, emulatedPCIPath). NULL for another name. */
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

/* The LID of an InfiniBand device (0 for the RoCE one): the host's low 13
 * address bits and the device. lidDev undoes it: the device (-1 when no
 * InfiniBand device has such a LID) and the host's address. */
static int devLid(int dev) { return dev == ROCE_DEV ? 0 : (int)((hostIp() & 0x1fff) << 2) | (dev == 0 ? 1 : 2); }
static int lidDev(int lid, uint32_t* ip) {
  *ip = (hostIp() & ~0x1fffu) | ((uint32_t)lid >> 2);
  return lid <= 0 ? -1 : (lid & 3) == 1 ? 0 : (lid & 3) == 2 ? 2 : -1;
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
EXPORT __be64 ibv_get_device_guid(struct ibv_device* d) { return htobe64(devGuid(((vDevice*)d)->index)); }

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
 * ::ffff:<this host's IPv4>. */
static int devGid(int dev, int index, union ibv_gid* gid) {
  if (index < 0 || index >= gidCount(dev)) return EINVAL;
  memset(gid, 0, sizeof(*gid));
  if (index == 0) {
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    gid->global.interface_id = ibv_get_device_guid(&devices[dev].dev);
  } else {
    uint32_t ip = htonl(hostIp());
    gid->raw[10] = gid->raw[11] = 0xff;
    memcpy(gid->raw + 12, &ip, 4);
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

/* ---- the process's port on the fabric ---------------------------------- */

static pthread_mutex_t qpLock = PTHREAD_MUTEX_INITIALIZER;
static vQp* qps[MAX_QPS + 1]; /* by slot; 0 unused */
static int nextSlot = 1;
static int portFd = -1;
static uint16_t portNum;

/* An inbound connection names a QP of this process: it becomes that QP's
 * inbound wire, if the QP is on the addressed device. */
static void attach(int fd) {
  helloMsg h;
  uint32_t st = HELLO_NO_QP;
  vsim_sock_tune(fd, 5, 5);
  if (vsim_sock_read(fd, &h, sizeof h) != 0 || h.magic != HELLO_MAGIC) {
    close(fd);
    return;
  }
  pthread_mutex_lock(&qpLock);
  vQp* q = h.dstQpn >> 8 == portNum ? qps[h.dstQpn & 0xff] : NULL;
  if (q && q->qp.qp_num == h.dstQpn) {
    st = (uint32_t)ctxIndex(q->qp.context) == h.dstDev ? HELLO_OK : HELLO_WRONG_DEV;
    int old = -1;
    if (st == HELLO_OK) old = atomic_exchange(&q->inFd, fd);
    if (old >= 0) close(old); /* the peer reconnected: the newer wire wins */
    if (st == HELLO_OK) ring(q);
  }
  pthread_mutex_unlock(&qpLock);
  if (vsim_sock_write(fd, &st, sizeof st) != 0 || st != HELLO_OK) {
    if (st != HELLO_OK) close(fd);
  }
}

static void* portThread(void* arg) {
  (void)arg;
  for (;;) {
    int fd = accept4(portFd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) attach(fd);
    else if (errno != EINTR && errno != ECONNABORTED) usleep(10000);
  }
  return NULL;
}

/* Opens the port (once) and takes a slot for q; its QP number is then
 * port << 8 | slot. Under qpLock. */
static int takeSlot(vQp* q) {
  if (portFd < 0) {
    char why[256];
    uint16_t port = 0;
    int fd = vsim_sock_listen(vsim_sock_local_ip(), &port, why, sizeof why);
    pthread_t th;
    if (fd < 0) return EAGAIN;
    portFd = fd;
    portNum = port;
    if (pthread_create(&th, NULL, portThread, NULL) != 0) {
      close(fd);
      portFd = -1;
      return EAGAIN;
    }
    pthread_detach(th);
  }
  for (int i = 0; i < MAX_QPS; i++) {
    int slot = nextSlot;
    nextSlot = nextSlot % MAX_QPS + 1;
    if (!qps[slot]) {
      qps[slot] = q;
      q->slot = slot;
      q->qp.qp_num = (uint32_t)portNum << 8 | (uint32_t)slot;
      return 0;
    }
  }
  return ENOMEM; /* as an HCA out of QPs */
}

static void* nicThread(void* arg);

static void freeQp(vQp* q) {
  if (q->bell >= 0) close(q->bell);
  free(q->sq);
  free(q->rq);
  free(q->rxBuf);
  free(q->txBuf);
  free(q);
}

EXPORT struct ibv_qp* ibv_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* ia) {
  if (!pd || !ia || ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || ia->srq ||
      ia->cap.max_send_wr > 1024 || ia->cap.max_recv_wr > 4096 || ia->cap.max_send_sge > 4 || ia->cap.max_recv_sge > 4 ||
      ia->cap.max_inline_data > 0) {
    errno = EINVAL; /* the emulator has RC QPs without SRQ or inline data */
    return NULL;
  }
  vQp* q = calloc(1, sizeof(*q));
  if (!q) { errno = ENOMEM; return NULL; }
  q->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  q->outFd = -1;
  atomic_init(&q->inFd, -1);
  q->maxSend = ia->cap.max_send_wr ? ia->cap.max_send_wr : 1;
  q->maxRecv = ia->cap.max_recv_wr ? ia->cap.max_recv_wr : 1;
  q->sq = calloc(q->maxSend, sizeof(*q->sq));
  q->rq = calloc(q->maxRecv, sizeof(*q->rq));
  q->rxBuf = malloc(sizeof(pktHdr) + CHUNK);
  q->txBuf = malloc(sizeof(pktHdr) + CHUNK);
  q->qp.context = pd->context;
  int err = ENOMEM;
  if (q->bell >= 0 && q->sq && q->rq && q->rxBuf && q->txBuf) {
    pthread_mutex_lock(&qpLock);
    err = takeSlot(q);
    pthread_mutex_unlock(&qpLock);
  }
  if (err) {
    freeQp(q);
    errno = err;
    return NULL;
  }
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
    pthread_mutex_lock(&qpLock);
    qps[q->slot] = NULL;
    pthread_mutex_unlock(&qpLock);
    freeQp(q);
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

/* The device and host (*ip, host order) an address vector reaches from
 * this QP's device, -1 for none: the InfiniBand devices form one subnet
 * (LIDs, or their GIDs with a GRH), the RoCE device reaches only RoCE. */
static int addressedDevice(vQp* q, const struct ibv_ah_attr* ah, uint32_t* ip) {
  int self = ctxIndex(q->qp.context), dev = -1;
  const uint8_t* g = ah->grh.dgid.raw;
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (!ah->is_global) {
    dev = self == ROCE_DEV ? -1 : lidDev(ah->dlid, ip);
  } else if (g[0] == 0xfe && g[1] == 0x80 && g[8] == 0x02 && g[9] == 0xc9 && g[10] == 0x03 && g[11] < NDEVS) {
    dev = g[11];
    *ip = (uint32_t)g[12] << 24 | (uint32_t)g[13] << 16 | (uint32_t)g[14] << 8 | g[15];
  } else if (memcmp(g, v4mapped, sizeof v4mapped) == 0) {
    dev = ROCE_DEV;
    *ip = (uint32_t)g[12] << 24 | (uint32_t)g[13] << 16 | (uint32_t)g[14] << 8 | g[15];
  }
  return dev >= 0 && (dev == ROCE_DEV) == (self == ROCE_DEV) ? dev : -1;
}

/* Connects the QP's outbound wire to QP dstQpn of device dev on host ip;
 * -1 when nothing answers as that QP (its sends then time out, as into a
 * void). */
static int wire(uint32_t ip, int dev, uint32_t dstQpn, uint32_t srcQpn) {
  char why[256];
  int fd = vsim_sock_connect(htonl(ip), (uint16_t)(dstQpn >> 8), 5, 5, why, sizeof why);
  if (fd < 0) return -1;
  helloMsg h = {HELLO_MAGIC, dstQpn, (uint32_t)dev, srcQpn};
  uint32_t st = HELLO_NO_QP;
  vsim_sock_tune(fd, 5, 5);
  if (vsim_sock_write(fd, &h, sizeof h) != 0 || vsim_sock_read(fd, &st, sizeof st) != 0 || st != HELLO_OK) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Ends both wires: the peer learns that this QP is gone or in error. */
static void cutWires(vQp* q) {
  if (q->outFd >= 0) shutdown(q->outFd, SHUT_RDWR);
  int in = atomic_load(&q->inFd);
  if (in >= 0) shutdown(in, SHUT_RDWR);
}

static void setState(vQp* q, enum ibv_qp_state s) {
  q->qp.state = s;
  if (s == IBV_QPS_ERR) cutWires(q);
  ring(q);
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
    uint32_t ip = 0;
    int dst = addressedDevice(q, &a->ah_attr, &ip);
    if (q->outFd >= 0) close(q->outFd);
    q->outFd = dst >= 0 ? wire(ip, dst, a->dest_qp_num, qp->qp_num) : -1;
    if (q->outFd >= 0) fcntl(q->outFd, F_SETFL, fcntl(q->outFd, F_GETFL) | O_NONBLOCK);
    q->peerGone = 0;
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
  pthread_mutex_lock(&qpLock);
  qps[q->slot] = NULL; /* no new inbound wire */
  pthread_mutex_unlock(&qpLock);
  atomic_store(&q->stop, 1);
  ring(q);
  pthread_join(q->nic, NULL);
  if (q->outFd >= 0) close(q->outFd);
  int in = atomic_exchange(&q->inFd, -1);
  if (in >= 0) close(in);
  freeQp(q);
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
  ring(q);
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
  ring(q);
  return rc;
}

/* ---- the NIC ------------------------------------------------------------ */

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
  q->txLen = q->txSent = 0;
  while (q->rqDone < q->rqPosted) {
    pushRecvWc(q, q->rq[q->rqDone % q->maxRecv].wrId, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0);
    q->rqDone++;
  }
  pthread_mutex_unlock(&q->lock);
}

/* Acknowledgements go back on the inbound wire; a peer that does not read
 * them within the socket's timeout is gone. */
static void sendAck(vQp* q, uint64_t wrSeq, enum ibv_wc_status st) {
  int in = atomic_load(&q->inFd);
  ackEnt a = {.wrSeq = wrSeq, .status = st};
  if (in >= 0 && vsim_sock_write(in, &a, sizeof a) != 0) shutdown(in, SHUT_RDWR);
}

static int localOk(vQp* q, const struct ibv_sge* sge, int n, int access) {
  for (int i = 0; i < n; i++)
    if (sge[i].length && !mrCovers(q->qp.pd, sge[i].lkey, 0, sge[i].addr, sge[i].length, access)) return 0;
  return 1;
}

/* Writes what the outbound wire takes of the packet in txBuf; 1 when it
 * is all out (and the work request's progress is recorded). */
static int txDrain(vQp* q) {
  while (q->txSent < q->txLen) {
    ssize_t k = send(q->outFd, q->txBuf + q->txSent, q->txLen - q->txSent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) q->peerGone = 1;
      return 0;
    }
    q->txSent += (size_t)k;
  }
  const pktHdr* h = (const pktHdr*)q->txBuf;
  pthread_mutex_lock(&q->lock);
  if (q->sqTx == q->txSeq) { /* not flushed meanwhile */
    q->txOff = q->txNextOff;
    if (q->txOff == h->total) {
      q->sqTx++;
      q->txOff = 0;
    }
  }
  pthread_mutex_unlock(&q->lock);
  q->txLen = q->txSent = 0;
  return 1;
}

/* Builds the next packet of work request e, from byte off, in txBuf. */
static void txBuild(vQp* q, const sendEnt* e, uint64_t off) {
  uint64_t total = wrBytes(e);
  int op = e->wr.opcode;
  uint32_t len = (uint32_t)(total - off < CHUNK ? total - off : CHUNK);
  int rdma = op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
  int imm = op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_IMM;
  pktHdr h = {.type = rdma ? PKT_WRITE : PKT_SEND, .len = len, .total = (uint32_t)total, .wrSeq = e->seq,
              .raddr = e->wr.wr.rdma.remote_addr + off, .rkey = e->wr.wr.rdma.rkey, .imm = e->wr.imm_data};
  h.flags = (off + len == total ? PKT_LAST : 0) | (imm ? PKT_IMM : 0) | (off == 0 ? PKT_FIRST : 0);
  memcpy(q->txBuf, &h, sizeof h);
  uint8_t* pos = q->txBuf + sizeof h;
  uint64_t skip = off;
  for (int i = 0, left = (int)len; i < e->wr.num_sge && left > 0; i++) {
    uint64_t sl = e->sge[i].length;
    if (skip >= sl) { skip -= sl; continue; }
    uint64_t n = sl - skip < (uint64_t)left ? sl - skip : (uint64_t)left;
    memcpy(pos, (const void*)(uintptr_t)(e->sge[i].addr + skip), n);
    pos += n;
    left -= (int)n;
    skip = 0;
  }
  q->txLen = sizeof h + len;
  q->txSent = 0;
  q->txSeq = e->seq;
  q->txNextOff = off + len;
}

/* Sends what the wire takes of the posted work requests. */
static int transmit(vQp* q) {
  int work = 0;
  while (q->outFd >= 0 && !q->peerGone) {
    if (q->txLen > 0) {
      if (!txDrain(q)) return work;
      work = 1;
      continue;
    }
    pthread_mutex_lock(&q->lock);
    int ready = q->qp.state == IBV_QPS_RTS && q->sqTx < q->sqPosted;
    sendEnt* e = ready ? &q->sq[q->sqTx % q->maxSend] : NULL;
    uint64_t off = q->txOff;
    pthread_mutex_unlock(&q->lock);
    if (!e) return work;
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
    txBuild(q, e, off);
  }
  return work;
}

/* Responder: a packet that breaks the rules NAKs the requester and moves
 * this QP to the error state (its receives are flushed). */
static void responderError(vQp* q, uint64_t wrSeq, enum ibv_wc_status toRequester) {
  sendAck(q, wrSeq, toRequester);
  pthread_mutex_lock(&q->lock);
  setState(q, IBV_QPS_ERR);
  pthread_mutex_unlock(&q->lock);
}

/* Copies n bytes of payload into the receive's scatter list from byte
 * skip on. */
static void scatter(const recvEnt* r, uint64_t skip, const uint8_t* src, uint32_t len) {
  for (int i = 0, left = (int)len; i < r->nsge && left > 0; i++) {
    uint64_t sl = r->sge[i].length;
    if (skip >= sl) { skip -= sl; continue; }
    uint64_t n = sl - skip < (uint64_t)left ? sl - skip : (uint64_t)left;
    memcpy((void*)(uintptr_t)(r->sge[i].addr + skip), src, n);
    src += n;
    left -= (int)n;
    skip = 0;
  }
}

/* Places one packet. Returns 0 when it must wait for a receive. */
static int place(vQp* q, const pktHdr* h, const uint8_t* payload) {
  pthread_mutex_lock(&q->lock);
  recvEnt* r = q->rqDone < q->rqPosted ? &q->rq[q->rqDone % q->maxRecv] : NULL;
  pthread_mutex_unlock(&q->lock);
  if (h->type == PKT_WRITE) {
    if (!q->rxPlaced) {
      if (!(q->access & IBV_ACCESS_REMOTE_WRITE) ||
          !mrCovers(q->qp.pd, h->rkey, 1, h->raddr, h->len, IBV_ACCESS_REMOTE_WRITE)) {
        responderError(q, h->wrSeq, IBV_WC_REM_ACCESS_ERR);
        return 1;
      }
      memcpy((void*)(uintptr_t)h->raddr, payload, h->len);
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
  scatter(r, q->rxOff, payload, h->len);
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

/* Reads the inbound wire up to one whole packet; 1 when rxBuf holds one.
 * A malformed packet or the wire's end drops the wire. */
static int rxFill(vQp* q, int in) {
  for (;;) {
    size_t want = sizeof(pktHdr);
    if (q->rxHave >= sizeof(pktHdr)) {
      const pktHdr* h = (const pktHdr*)q->rxBuf;
      if (h->len > CHUNK || (h->type != PKT_WRITE && h->type != PKT_SEND)) {
        shutdown(in, SHUT_RDWR); /* a malformed packet ends the wire: read on to its end */
        q->rxHave = 0;
        continue;
      }
      want += h->len;
    }
    if (q->rxHave == want) return 1;
    ssize_t k = recv(in, q->rxBuf + q->rxHave, want - q->rxHave, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (k <= 0) {
      /* The peer is gone (its sender learns by itself; an idle RC receiver
       * is never told): drop the wire, or poll would wake on it forever. */
      if (atomic_compare_exchange_strong(&q->inFd, &in, -1)) close(in);
      q->rxHave = 0;
      return 0;
    }
    q->rxHave += (size_t)k;
  }
}

static int receive(vQp* q) {
  int work = 0;
  for (;;) {
    int in = atomic_load(&q->inFd);
    enum ibv_qp_state st = q->qp.state;
    if (in < 0 || st == IBV_QPS_RESET || st == IBV_QPS_INIT) return work; /* not ready: the requester waits */
    if (!rxFill(q, in)) return work;
    const pktHdr* h = (const pktHdr*)q->rxBuf;
    if (st != IBV_QPS_ERR && !place(q, h, q->rxBuf + sizeof(pktHdr))) return work;
    q->rxPlaced = 0;
    q->rxHave = 0;
    work = 1;
  }
}

static int takeAcks(vQp* q) {
  int work = 0;
  while (q->outFd >= 0 && !q->peerGone) {
    ssize_t k = recv(q->outFd, q->ackBuf + q->ackHave, sizeof q->ackBuf - q->ackHave, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) q->peerGone = 1;
    if (k <= 0) return work;
    if ((q->ackHave += (size_t)k) < sizeof(ackEnt)) continue;
    ackEnt a;
    memcpy(&a, q->ackBuf, sizeof a);
    q->ackHave = 0;
    pthread_mutex_lock(&q->lock);
    if (q->qp.state != IBV_QPS_ERR || a.status != IBV_WC_SUCCESS) {
      while (q->sqDone < q->sqPosted && q->sq[q->sqDone % q->maxSend].seq < a.wrSeq) completeSend(q, IBV_WC_SUCCESS);
      if (q->sqDone < q->sqPosted && q->sq[q->sqDone % q->maxSend].seq == a.wrSeq) completeSend(q, a.status);
    }
    pthread_mutex_unlock(&q->lock);
    work = 1;
  }
  return work;
}

/* The transport retry timer: sends outstanding to a peer whose wire is
 * gone (its process, its QP, or the QP moved to the error state) or never
 * came are never acknowledged. */
static void checkPeer(vQp* q) {
  pthread_mutex_lock(&q->lock);
  int outstanding = q->qp.state == IBV_QPS_RTS && q->sqDone < q->sqPosted;
  if (outstanding && (q->outFd < 0 || q->peerGone)) completeSend(q, IBV_WC_RETRY_EXC_ERR);
  pthread_mutex_unlock(&q->lock);
}

/* Sleeps until the bell, the wires, or 20 ms (the retry timer's tick). */
static void nicWait(vQp* q) {
  struct pollfd p[3] = {{.fd = q->bell, .events = POLLIN}};
  int n = 1, in = atomic_load(&q->inFd);
  if (q->outFd >= 0 && !q->peerGone) p[n++] = (struct pollfd){.fd = q->outFd, .events = POLLIN | (q->txLen ? POLLOUT : 0)};
  if (in >= 0 && q->rxHave < sizeof(pktHdr) + CHUNK) p[n++] = (struct pollfd){.fd = in, .events = POLLIN};
  poll(p, (nfds_t)n, 20);
  uint64_t v;
  if (read(q->bell, &v, sizeof v) < 0) { /* nothing rang */ }
}

static void* nicThread(void* arg) {
  vQp* q = arg;
  struct timespec last;
  clock_gettime(CLOCK_MONOTONIC, &last);
  while (!atomic_load(&q->stop)) {
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
    if (!work) nicWait(q);
  }
  return NULL;
}
