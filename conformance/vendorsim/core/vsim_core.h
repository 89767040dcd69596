/*
 * vsim_core.h: the vendor-neutral emulation core of flagcx vendorsim.
 *
 * Every emulated vendor library (libcudart/libnccl/libnvidia-ml today,
 * BKCL/XPU, CNCL/CNRT and MCCL/MACA later) is a thin layer that maps the
 * vendor's public names, enum values and argument orders onto this API.
 * The core lives in ONE shared object (libflagcx-vendorsim-core.so) that all
 * vendor libraries of a process link against, so that state which real
 * vendor stacks share between their runtime and their collective library
 * (the current device, the registry of device allocations, live streams)
 * is shared here too: libnccl can tell whether a buffer came from
 * cudaMalloc in libcudart.
 *
 * Numbering used throughout: NCCL's. Results (vsim_result), data types
 * (0 int8 .. 9 bfloat16) and reduction ops (0 sum .. 4 avg) are the values
 * of ncclResult_t / ncclDataType_t / ncclRedOp_t; a vendor layer translates
 * its own enums to these.
 *
 * Every exported core symbol starts with vsim_ so that it cannot clash with
 * a vendor name.
 */
#ifndef VSIM_CORE_H
#define VSIM_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VSIM_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ */
/* Results: NCCL numbering.                                            */
/* ------------------------------------------------------------------ */
typedef enum {
  VSIM_OK = 0,
  VSIM_ERR_DEVICE = 1,        /* ncclUnhandledCudaError: bad stream etc. */
  VSIM_ERR_SYSTEM = 2,        /* shm failures, timeouts                   */
  VSIM_ERR_INTERNAL = 3,
  VSIM_ERR_INVALID_ARG = 4,
  VSIM_ERR_INVALID_USAGE = 5, /* mismatched calls between ranks           */
  VSIM_ERR_REMOTE = 6         /* a peer died, left, aborted or failed     */
} vsim_result;

/* Data types and reduction ops: NCCL numbering. */
enum {
  VSIM_INT8 = 0, VSIM_UINT8 = 1, VSIM_INT32 = 2, VSIM_UINT32 = 3,
  VSIM_INT64 = 4, VSIM_UINT64 = 5, VSIM_FLOAT16 = 6, VSIM_FLOAT32 = 7,
  VSIM_FLOAT64 = 8, VSIM_BFLOAT16 = 9, VSIM_NUM_DTYPES = 10
};
enum { VSIM_SUM = 0, VSIM_PROD = 1, VSIM_MAX = 2, VSIM_MIN = 3, VSIM_AVG = 4,
       VSIM_NUM_OPS = 5 };

/* Collective kinds, used in descriptors that ranks compare. */
enum {
  VSIM_COLL_ALLREDUCE = 1, VSIM_COLL_REDUCE, VSIM_COLL_BROADCAST,
  VSIM_COLL_ALLGATHER, VSIM_COLL_REDUCESCATTER, VSIM_COLL_ALLTOALL
};

/* ------------------------------------------------------------------ */
/* Environment (read once per process).                                */
/* ------------------------------------------------------------------ */
VSIM_API int vsim_env_devices(void);          /* FLAGCX_VENDORSIM_DEVICES, default 8 */
VSIM_API double vsim_env_timeout(void);       /* FLAGCX_VENDORSIM_TIMEOUT s, default 60 */
VSIM_API int vsim_env_check_pointers(void);   /* FLAGCX_VENDORSIM_CHECK_POINTERS, default 1 */
VSIM_API int vsim_env_debug(void);            /* FLAGCX_VENDORSIM_DEBUG, default 0 */
VSIM_API int vsim_env_sync(void);             /* FLAGCX_VENDORSIM_SYNC, default 0 */
VSIM_API double vsim_env_stream_delay(void);  /* FLAGCX_VENDORSIM_STREAM_DELAY_US, default 0; in s */
/* FLAGCX_VENDORSIM_TOPOLOGY: nvlink (default), pcie or none. */
typedef enum { VSIM_TOPO_NVLINK = 0, VSIM_TOPO_PCIE = 1, VSIM_TOPO_NONE = 2 } vsim_topology;
VSIM_API vsim_topology vsim_env_topology(void);
/* FLAGCX_VENDORSIM_SLOT_BYTES / FLAGCX_VENDORSIM_MAILBOX_BYTES: sizes of a
 * rank's collective slot and of a p2p mailbox; 0 when unset (the core then
 * sizes them from nranks). */
VSIM_API size_t vsim_env_slot_bytes(void);
VSIM_API size_t vsim_env_mailbox_bytes(void);
/* Prints "vendorsim: ..." to stderr when FLAGCX_VENDORSIM_DEBUG=1. */
VSIM_API void vsim_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------------ */
/* Last error text (thread-local, never cleared, like NCCL's).         */
/* ------------------------------------------------------------------ */
VSIM_API void vsim_set_last_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
VSIM_API const char* vsim_last_error(void);

/* ------------------------------------------------------------------ */
/* Devices.                                                            */
/* ------------------------------------------------------------------ */
VSIM_API int vsim_device_count(void);
VSIM_API int vsim_current_device(void);        /* thread-local, starts at 0 */
VSIM_API int vsim_set_current_device(int dev); /* 0 ok, -1 out of range    */
/* Emulated PCI location of a device (domain:bus:slot.func). */
VSIM_API void vsim_device_pci(int dev, unsigned* domain, unsigned* bus, unsigned* slot,
                              unsigned* func);
/* Parses "dddd:bb:ss.f" or "dddddddd:bb:ss.f" (any case); returns the
 * device index or -1. */
VSIM_API int vsim_device_by_pci_string(const char* busid);
/* Emulated memory of one device, bytes (80 GiB). */
VSIM_API uint64_t vsim_device_memory_total(void);
/* PCIe distance class of two devices: 0 same device, 1 same switch,
 * 2 same CPU socket, 3 across sockets. Vendor layers map it to their enum. */
VSIM_API int vsim_device_distance(int a, int b);

/* ------------------------------------------------------------------ */
/* Memory registry: which host addresses are "device" memory.          */
/* ------------------------------------------------------------------ */
typedef enum {
  VSIM_MEM_UNREGISTERED = 0, /* ordinary (pageable) host memory */
  VSIM_MEM_HOST = 1,         /* pinned host memory              */
  VSIM_MEM_DEVICE = 2        /* emulated device memory          */
} vsim_mem_kind;

typedef struct {
  vsim_mem_kind kind;
  int device;     /* device current at allocation; -1 when unregistered */
  void* base;     /* allocation start; NULL when unregistered           */
  size_t size;    /* allocation size                                    */
  unsigned flags; /* vendor flags given at allocation                   */
} vsim_mem_info;

/* Allocates size bytes (256-byte aligned, like cudaMalloc). size 0 gives
 * *out = NULL and success. Returns 0, or -1 when out of memory (device
 * memory is capped at vsim_device_memory_total() per device). */
VSIM_API int vsim_mem_alloc(void** out, size_t size, vsim_mem_kind kind, int device,
                            unsigned flags);
/* Frees an allocation of the given kind by its base address. Returns 0, or
 * -1 when p is not the base of a live allocation of that kind. */
VSIM_API int vsim_mem_free(void* p, vsim_mem_kind kind);
/* Registers existing host memory [p, p+size) as pinned (cudaHostRegister
 * and its kin): it then classifies as VSIM_MEM_HOST, but the registry never
 * frees it. Returns 0, or -1 when the range is empty or overlaps a
 * registered range or an allocation. */
VSIM_API int vsim_mem_register(void* p, size_t size, unsigned flags);
/* Undoes vsim_mem_register of the range that starts at p. Returns 0, or -1
 * when no registered range starts there. */
VSIM_API int vsim_mem_unregister(void* p);
/* Classifies p (pointers inside an allocation resolve to it). */
VSIM_API vsim_mem_kind vsim_mem_query(const void* p, vsim_mem_info* info);
/* As vsim_mem_query, and also returns -1 when [p, p+bytes) is registered
 * memory that runs past the end of its allocation. */
VSIM_API int vsim_mem_check_range(const void* p, size_t bytes, vsim_mem_info* info);
/* Bytes of device memory currently allocated on dev by this process. */
VSIM_API uint64_t vsim_mem_used(int device);

/* ------------------------------------------------------------------ */
/* Streams and events.                                                 */
/* ------------------------------------------------------------------ */
typedef struct vsim_stream vsim_stream;
typedef struct vsim_event vsim_event;

/* Streams run their work in order on a worker thread, asynchronously
 * (stream.c; FLAGCX_VENDORSIM_SYNC=1 runs it inside each call). */
#define VSIM_MAX_DEVICES 1024
#define VSIM_STREAM_NONBLOCKING 0x1u /* no implicit ordering with the default stream */
typedef int (*vsim_work_fn)(void* arg); /* nonzero: the work failed */
VSIM_API vsim_stream* vsim_stream_create(int device, unsigned flags);
VSIM_API vsim_stream* vsim_stream_default(int device); /* the handles 0, legacy, per-thread */
VSIM_API vsim_stream* vsim_stream_lookup(const void* s); /* created streams only */
VSIM_API int vsim_stream_device(const vsim_stream* s);
VSIM_API int vsim_stream_destroy(void* s); /* 0 ok, -1 not a live stream; runs its work first */
/* 1 once vsim_stream_destroy(s) started: an item that waits for the host
 * (cudart.c's relay) polls it and gives up rather than hold the destroy. */
VSIM_API int vsim_stream_destroying(vsim_stream* s);
VSIM_API int vsim_stream_enqueue(vsim_stream* s, vsim_work_fn fn, void* arg); /* -1 no memory */
VSIM_API int vsim_stream_enqueue_joined(vsim_stream** ss, int n, vsim_work_fn fn, void* arg);
VSIM_API int vsim_stream_copy(vsim_stream* s, void* dst, const void* src, size_t n);
VSIM_API int vsim_stream_memset(vsim_stream* s, void* dst, int value, size_t n);
VSIM_API int vsim_stream_sync(vsim_stream* s);  /* 0 ok, -2 an operation on it failed */
VSIM_API int vsim_stream_idle(vsim_stream* s);  /* 1 all done, 0 work pending */
VSIM_API int vsim_device_sync(int device);      /* device < 0: all; 0 ok, -2 a failure */
VSIM_API int vsim_stream_wait_event(vsim_stream* s, vsim_event* e);

#define VSIM_EVENT_NO_TIMING 0x1u
VSIM_API vsim_event* vsim_event_create(int device, unsigned vsim_flags);
VSIM_API vsim_event* vsim_event_lookup(const void* e);
VSIM_API int vsim_event_destroy(void* e); /* 0 ok, -1 not a live event */
VSIM_API int vsim_event_record(vsim_event* e, vsim_stream* s); /* marks s's current end */
VSIM_API int vsim_event_recorded(const vsim_event* e);
VSIM_API int vsim_event_query(vsim_event* e); /* 1 complete (or never recorded), 0 not yet */
VSIM_API int vsim_event_sync(vsim_event* e);
/* 0 ok, -1 not recorded, -2 no timing, -3 not complete yet */
VSIM_API int vsim_event_elapsed_ms(const vsim_event* start, const vsim_event* end, float* ms);

VSIM_API size_t vsim_dtype_size(int dtype); /* 0 when invalid */
VSIM_API const char* vsim_dtype_name(int dtype);
VSIM_API const char* vsim_op_name(int op);
/* acc[i] = acc[i] op in[i]; avg accumulates as sum. float16/bfloat16 are
 * computed in float32 and rounded to nearest even after every step. */
VSIM_API void vsim_reduce(void* acc, const void* in, size_t n, int dtype, int op);
/* Divides by nranks once, after the sum (avg); integers truncate. */
VSIM_API void vsim_avg_finish(void* buf, size_t n, int dtype, int nranks);
VSIM_API float vsim_half_to_float(uint16_t h);
VSIM_API uint16_t vsim_float_to_half(float f);
VSIM_API float vsim_bf16_to_float(uint16_t h);
VSIM_API uint16_t vsim_float_to_bf16(float f);

/* ------------------------------------------------------------------ */
/* Communicators over POSIX shared memory (one process per rank, or    */
/* several ranks in one thread inside a group).                        */
/* ------------------------------------------------------------------ */
typedef struct vsim_comm vsim_comm;

/* The unique id is written into a vendor's id buffer of idbytes bytes
 * (>= 96). tag names the vendor API ("nccl", "bkcl", ...): an id made for
 * one vendor is rejected by another. The rest of the buffer is zeroed. */
#define VSIM_ID_MIN_BYTES 96
VSIM_API vsim_result vsim_get_unique_id(void* id, size_t idbytes, const char* tag);

/* Creates the communicator. api is the vendor function name used in error
 * text (e.g. "ncclCommInitRank"). device is the device the communicator
 * uses (its buffers must live there). Inside a group the join completes at
 * the outermost group end; *out is set at once. On failure outside a group
 * *out is NULL. */
VSIM_API vsim_result vsim_comm_init(vsim_comm** out, const void* id, size_t idbytes,
                                    const char* tag, int nranks, int rank, int device,
                                    const char* api);
/* Validates a handle: returns it when c is a live communicator, else NULL. */
VSIM_API vsim_comm* vsim_comm_lookup(const void* c);
VSIM_API int vsim_comm_nranks(const vsim_comm* c);
VSIM_API int vsim_comm_rank(const vsim_comm* c);
VSIM_API int vsim_comm_device(const vsim_comm* c);
/* The error a failed operation left on the communicator, or a peer's
 * failure seen through shared memory (VSIM_ERR_REMOTE); VSIM_OK if none. */
VSIM_API vsim_result vsim_comm_async_error(vsim_comm* c);
/* Text of the last error on this communicator ("" if none). */
VSIM_API const char* vsim_comm_last_error(const vsim_comm* c);
/* Finalize: no more operations may be issued (they fail with
 * VSIM_ERR_INVALID_USAGE). Destroy: leaves and frees. Abort: also tells the
 * peers, whose pending and later operations fail with VSIM_ERR_REMOTE. */
VSIM_API vsim_result vsim_comm_finalize(vsim_comm* c);
VSIM_API vsim_result vsim_comm_destroy(vsim_comm* c);
VSIM_API vsim_result vsim_comm_abort(vsim_comm* c);

/* Buffer checking for collective libraries: when FLAGCX_VENDORSIM_CHECK_POINTERS
 * is on, a buffer must be device memory of the communicator's device or
 * pinned host memory, and hold `bytes` bytes. what names the argument. */
VSIM_API vsim_result vsim_check_buffer(const vsim_comm* c, const char* api, const char* what,
                                       const void* p, size_t bytes);

/* One collective. count follows NCCL: elements per rank for allreduce,
 * reduce, broadcast; sendcount for allgather; recvcount for reducescatter;
 * elements per peer for alltoall. op is ignored where it does not apply,
 * root where it does not apply. The core validates dtype/op/root and the
 * stream-independent arguments; vendor layers check their own handles. */
typedef struct {
  int coll;
  int dtype;
  int op;
  int root;
  size_t count;
} vsim_coll_args;
/* Operations run on stream s, asynchronously: the call checks the
 * arguments, a failure while running shows in the communicator's async
 * error and at the stream's next synchronise. */
VSIM_API vsim_result vsim_collective(vsim_comm* c, const char* api, const vsim_coll_args* a,
                                     const void* sendbuf, void* recvbuf, vsim_stream* s);
/* Point-to-point: matched per (sender, receiver) pair in issue order. */
VSIM_API vsim_result vsim_send(vsim_comm* c, const char* api, const void* buf, size_t count,
                               int dtype, int peer, vsim_stream* s);
VSIM_API vsim_result vsim_recv(vsim_comm* c, const char* api, void* buf, size_t count,
                               int dtype, int peer, vsim_stream* s);

/* Groups nest; operations issued inside are queued (per thread) and run
 * together at the outermost end, so any p2p pattern completes. */
VSIM_API vsim_result vsim_group_start(void);
VSIM_API vsim_result vsim_group_end(const char* api);
VSIM_API int vsim_group_depth(void);

#ifdef __cplusplus
}
#endif
#endif /* VSIM_CORE_H */
