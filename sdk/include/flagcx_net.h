/*
 * flagcx_net.h: the network-plugin contract of flagcx-go, ABI version 1.
 *
 * A network plugin moves bytes between the host processes of a
 * communicator over a fabric the host's sockets do not reach well
 * (InfiniBand / RoCE verbs today). It is a shared object named
 * libflagcx-net-<name>.so that exports ONE data symbol,
 *
 *     const flagcxNetPlugin_v1_t flagcxNetPlugin_v1 = { ... };
 *
 * The model is NCCL's and FlagCX's net adaptor (devices, listen/connect
 * with an opaque handle, registered memory, tagged isend/irecv polled with
 * test), with one difference: the plugin opens no sockets of its own. The
 * host carries the handles between the two processes over its bootstrap
 * connection, in both directions:
 *
 *   receiver                              sender
 *   listen(dev, handle, &lc)   --handle-->  connect(dev, handle, reply, &sc)
 *   accept(lc, reply, &rc)     <--reply---
 *
 * connect and accept return at once (no waiting for the peer): the first
 * isend simply makes no progress until the receiver's accept ran and it
 * posted an irecv.
 *
 * Rules for every entry (as in flagcx_plugin.h):
 *  - Every entry but getLastError returns a flagcxResult_t. A failing entry
 *    records a message for getLastError() on the calling thread that
 *    quotes the fabric's own error (ibv_wc_status_str, errno text).
 *  - An entry marked OPTIONAL may be NULL.
 *  - The host calls init once, before any other entry except getLastError,
 *    and never concurrently with another entry. After init, entries may be
 *    called from several threads, but one thread at a time per comm.
 *  - Messages of one sendComm arrive in the order of its isends; the n-th
 *    isend matches the n-th irecv of the recvComm. Its tag must equal that
 *    irecv's tag (a mismatch fails both requests with
 *    flagcxInvalidUsage), and its size must not exceed the irecv's size
 *    (flagcxInvalidUsage too). Zero-byte messages are legal.
 *  - isend/irecv buffers lie inside memory registered with regMr on a comm
 *    of the same device, and stay untouched until test says done.
 *    Registration belongs to the device: an mhandle of one comm serves
 *    every comm of that device.
 *  - A request is finished when test reports done = 1 or an error; it is
 *    freed then, and must not be tested again.
 *  - A peer that dies makes the pending and later requests of the comms
 *    to it fail with flagcxRemoteError (as the fabric reports it: for RC
 *    queue pairs, sends fail once the retries run out; receives wait until
 *    the host gives up on them and closes the comm, since an idle RC
 *    receiver is never told).
 *
 * Versioning: a new field or entry makes a new table version
 * (flagcxNetPlugin_v2), as with flagcx_plugin.h; hosts probe the newest
 * symbol they know first.
 */
#ifndef FLAGCX_NET_H_
#define FLAGCX_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "flagcx_plugin.h" /* flagcxResult_t, flagcxLogFn_t, flagcxLogLevel_t */

#ifdef __cplusplus
extern "C" {
#endif

#define FLAGCX_NET_ABI_VERSION 1
#define FLAGCX_NET_SYMBOL_V1 "flagcxNetPlugin_v1"

/* The largest handle listen or connect writes (bytes). */
#define FLAGCX_NET_HANDLE_MAXSIZE 256

/* What memory a device can send from and receive into (ptrSupport bits,
 * and the type argument of regMr). */
#define FLAGCX_NET_PTR_HOST 0x1   /* host memory */
#define FLAGCX_NET_PTR_DEVICE 0x2 /* accelerator memory, peer-direct (GPUDirect RDMA) */
#define FLAGCX_NET_PTR_DMABUF 0x4 /* accelerator memory exported as a dma-buf (regMrDmaBuf) */

/* Filled by init (the host zeroes it first). */
typedef struct {
  int32_t emulated;  /* 1: the fabric library is a flagcx emulator (vendorsim) */
  int32_t reserved;
  char library[512]; /* the fabric library loaded: "/usr/lib/.../libibverbs.so.1" */
  char transport[32]; /* what the wire is: "IB", "RoCE", "IB/RoCE" */
  char error[512];   /* why init found no usable device, when devices() is 0 */
} flagcxNetInitInfo_v1_t;

typedef struct {
  char name[64];      /* "mlx5_0" */
  char pciPath[256];  /* sysfs path of the NIC's PCI function ("" when unknown):
                         /sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.0 */
  uint64_t guid;      /* node GUID */
  int32_t ptrSupport; /* FLAGCX_NET_PTR_* bits */
  int32_t speed;      /* link speed in Mb/s (active width x lane speed) */
  int32_t port;       /* port number in use (1-based) */
  int32_t latency;    /* us, 0 when unknown */
  int32_t maxComms;   /* comms the device can hold at once */
  int32_t maxRecvs;   /* receives in flight per recvComm */
  int32_t linkLayer;  /* 1: InfiniBand, 2: Ethernet (RoCE) as IBV_LINK_LAYER_* */
  int32_t gidIndex;   /* GID index in use (RoCE), -1 for InfiniBand LIDs */
} flagcxNetProperties_v1_t;

typedef struct flagcxNetListenOpaque* flagcxNetListenComm_t;
typedef struct flagcxNetSendOpaque* flagcxNetSendComm_t;
typedef struct flagcxNetRecvOpaque* flagcxNetRecvComm_t;
typedef struct flagcxNetMrOpaque* flagcxNetMr_t;
typedef struct flagcxNetRequestOpaque* flagcxNetRequest_t;

typedef struct flagcxNetPlugin_v1 {
  uint32_t size;       /* sizeof(flagcxNetPlugin_v1_t) as built */
  uint32_t abiVersion; /* 1 */
  const char* name;    /* "IB" */
  const char* version; /* the plugin's own version text */

  /* Loads the fabric library (dlopen) and finds the devices. No device is
   * not an error: devices() then says 0 and info->error says why. */
  flagcxResult_t (*init)(flagcxLogFn_t log, void* logCtx, flagcxNetInitInfo_v1_t* info);
  flagcxResult_t (*devices)(int* ndev);
  flagcxResult_t (*getProperties)(int dev, flagcxNetProperties_v1_t* props);

  /* Receiver side: a listening endpoint; handle (at most
   * FLAGCX_NET_HANDLE_MAXSIZE bytes, *handleBytes says how many) goes to
   * the sender. One listenComm makes one recvComm: a successful accept
   * turns it into that recvComm (close the recvComm then, not the
   * listenComm); closeListen is for a listener never accepted. */
  flagcxResult_t (*listen)(int dev, void* handle, size_t* handleBytes, flagcxNetListenComm_t* listenComm);
  /* Sender side: connects to the listener of handle; reply (same limit)
   * goes back to the receiver for accept. */
  flagcxResult_t (*connect)(int dev, const void* handle, size_t handleBytes, void* reply,
                            size_t* replyBytes, flagcxNetSendComm_t* sendComm);
  flagcxResult_t (*accept)(flagcxNetListenComm_t listenComm, const void* reply, size_t replyBytes,
                           flagcxNetRecvComm_t* recvComm);

  /* Registers [data, data+size) of memory of type (FLAGCX_NET_PTR_HOST,
   * or FLAGCX_NET_PTR_DEVICE where ptrSupport has it) for the device of
   * comm (a send or recv comm). An unsupported type is flagcxNotSupported. */
  flagcxResult_t (*regMr)(void* comm, void* data, size_t size, int type, flagcxNetMr_t* mhandle);
  /* OPTIONAL. Registers accelerator memory exported as a dma-buf (fd,
   * offset), where ptrSupport has FLAGCX_NET_PTR_DMABUF: the vendor
   * plugin gives the fd, the NIC reads and writes the device directly. */
  flagcxResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                                int fd, flagcxNetMr_t* mhandle);
  flagcxResult_t (*deregMr)(void* comm, flagcxNetMr_t mhandle);

  flagcxResult_t (*isend)(flagcxNetSendComm_t sendComm, void* data, size_t size, int tag,
                          flagcxNetMr_t mhandle, flagcxNetRequest_t* request);
  flagcxResult_t (*irecv)(flagcxNetRecvComm_t recvComm, void* data, size_t size, int tag,
                          flagcxNetMr_t mhandle, flagcxNetRequest_t* request);
  /* Progresses the comm of request. *done = 1 when it finished; *size is
   * then the bytes received (irecv) or sent (isend). An error finishes it. */
  flagcxResult_t (*test)(flagcxNetRequest_t request, int* done, size_t* size);

  /* Release a comm; its requests must be finished (or the peer gone). */
  flagcxResult_t (*closeSend)(flagcxNetSendComm_t sendComm);
  flagcxResult_t (*closeRecv)(flagcxNetRecvComm_t recvComm);
  flagcxResult_t (*closeListen)(flagcxNetListenComm_t listenComm);

  const char* (*getLastError)(void);
} flagcxNetPlugin_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* FLAGCX_NET_H_ */
