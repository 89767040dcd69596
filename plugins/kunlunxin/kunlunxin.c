/*
 * libflagcx-kunlunxin.so: the flagcx-go plugin ABI (sdk/include/flagcx_plugin.h)
 * mapped onto Kunlunxin's XPU runtime (libxpurt) and BKCL/XCCL (libbkcl.so).
 *
 * Every vendor library is dlopen'ed at init, so this file builds with gcc
 * alone: the few vendor types and prototypes it needs are declared below
 * from docs/vendor-facts.md#kunlunxin (sources: Paddle's
 * bkcl_comm_context.cc, FlagCX's xccl/kunlunxin adaptors, InfiniCore, and
 * the XPU runtime.h of kunlun_k200). Facts marked there as inferred or not found are marked
 * here too: "UNVERIFIED" below means "not read in a vendor header".
 *
 * What differs from NCCL and is mapped here:
 *  - BKCL's argument orders: bkcl_init_rank(ctx*, RANK, NRANKS, id*),
 *    bkcl_all_gather(ctx, send, COUNT, RECV, ...), bkcl_all_to_all(ctx,
 *    send, COUNT, RECV, ...), bkcl_send/recv(ctx, buf, count, PEER, DTYPE,
 *    stream); the communicator comes first everywhere.
 *  - BKCL's data types: no int8, uint32 or uint64 (left out of
 *    dataTypeMask: the host moves them as bytes and reduces them elsewhere;
 *    see typeMap), no avg (BKCL_AVG exists only in recent XCCL, value
 *    unknown).
 *  - bkcl_all_to_all_v reads its count/displacement arrays from DEVICE
 *    memory ([FCX]); the plugin stages them in a per-communicator buffer.
 *  - BKCL has no gather/scatter: grouped bkcl_send/bkcl_recv.
 *  - The XPU runtime's memcpy directions (D2H 0, H2D 1, D2D 2), its lack of
 *    a memset (staged through host memory), of event timing and of event
 *    or stream queries (those entries are NULL: the host times with host
 *    clocks around a stream synchronize).
 *  - libbkcl.so may export only C++-mangled names (bkcl.h without extern
 *    "C"): every BKCL symbol is looked up by its C name first, then by its
 *    mangled name, found in the library's dynamic symbol table.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flagcx_plugin.h"
#include "shim.h"

/* ==== BKCL numbers: UNVERIFIED (docs/vendor-facts.md#kunlunxin-bkcl: ❌) ===
 *
 * The enumerator NAMES are seen at real call sites (Paddle, FlagCX,
 * InfiniCore); their numeric VALUES and BKCL_UNIQUE_ID_BYTES were not found
 * in any public header. The values below are this plugin's belief: the
 * names in the order Paddle's bkclGetErrorString lists the results, types
 * in the order float, float16, int32, int64, uint8, then the late additions
 * float64 and bfloat16, ops add/product/max/min. BKCL_SUCCESS == 0 is the
 * one value with evidence ([FCX] casts BKCL results to flagcxResult_t).
 *
 * How to verify on a machine with XCCL (and what to change):
 *   1. a probe compiled against the vendor's bkcl.h:
 *        #include <bkcl.h>
 *        int main() { printf("%d %d %d %d %d %d %d | %d %d %d %d | %d %d %d %d %d | %zu\n",
 *          BKCL_FLOAT, BKCL_FLOAT16, BKCL_INT32, BKCL_INT64, BKCL_UINT8, BKCL_FLOAT64,
 *          BKCL_BFLOAT16, BKCL_ADD, BKCL_PRODUCT, BKCL_MAX, BKCL_MIN, BKCL_SUCCESS,
 *          BKCL_INVALID_ARGUMENT, BKCL_RUNTIME_ERROR, BKCL_SYSTEM_ERROR,
 *          BKCL_INTERNAL_ERROR, sizeof(BKCLUniqueId)); }
 *   2. nm -D --defined-only libbkcl.so | grep bkcl_ | c++filt
 *      (plain names, or C++ names whose parameter types must match the
 *      prototypes in BKCL_FUNCS below: size_t counts, void* stream).
 * Change this table, the emulator's model (conformance/vendorsim/kunlunxin/
 * bkcl.c) and the mapping test's copy (sdk/loader/kunlunxin_test.go,
 * klxBKCL*) together: they are independent on purpose, so that a change in
 * one alone fails the tests.
 */
enum { /* BKCLResult_t */
  BKCL_SUCCESS = 0,
  BKCL_INVALID_ARGUMENT = 1,
  BKCL_RUNTIME_ERROR = 2,
  BKCL_SYSTEM_ERROR = 3,
  BKCL_INTERNAL_ERROR = 4
};
enum { /* BKCLDataType */
  BKCL_FLOAT = 0,
  BKCL_FLOAT16 = 1,
  BKCL_INT32 = 2,
  BKCL_INT64 = 3,
  BKCL_UINT8 = 4,
  BKCL_FLOAT64 = 5,
  BKCL_BFLOAT16 = 6
};
enum { /* BKCLOp (BKCL_AVG of recent XCCL is not used: value unknown) */
  BKCL_ADD = 0,
  BKCL_PRODUCT = 1,
  BKCL_MAX = 2,
  BKCL_MIN = 3
};
/* sizeof(BKCLUniqueId) is unknown (⚠ <= 4116 by FlagCX's static_assert,
 * <= 252 by an older FlagCX layout). The id is received into a larger
 * zeroed buffer and its first KLX_UID_BYTES travel between ranks; a BKCL
 * that writes beyond them is detected (see klxGetUniqueId). */
#define KLX_UID_BYTES FLAGCX_UNIQUE_ID_MAX_BYTES
#define KLX_UID_BUF (2 * KLX_UID_BYTES)

/* flagcx type -> BKCL type. BKCL has no int8, uint32, uint64 (native 0):
 * dataTypeMask leaves them out, so hosts move them as bytes and reduce them
 * elsewhere. A host that calls anyway gets them moved as the same-size type
 * (bytes are bytes) but never reduced that way: that is wrong for max/min
 * (FlagCX reduces int8 as uint8 and uint32 as int32). */
static const struct {
  int bkcl;
  int native;
} typeMap[flagcxNumTypes] = {
    [flagcxInt8] = {BKCL_UINT8, 0},   [flagcxUint8] = {BKCL_UINT8, 1},     [flagcxInt32] = {BKCL_INT32, 1},
    [flagcxUint32] = {BKCL_INT32, 0}, [flagcxInt64] = {BKCL_INT64, 1},     [flagcxUint64] = {BKCL_INT64, 0},
    [flagcxFloat16] = {BKCL_FLOAT16, 1}, [flagcxFloat32] = {BKCL_FLOAT, 1}, [flagcxFloat64] = {BKCL_FLOAT64, 1},
    [flagcxBfloat16] = {BKCL_BFLOAT16, 1},
};
static const int opMap[4] = {[flagcxSum] = BKCL_ADD, [flagcxProd] = BKCL_PRODUCT, [flagcxMax] = BKCL_MAX,
                             [flagcxMin] = BKCL_MIN};
static const char* const typeName[flagcxNumTypes] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                                     "uint64",  "float16", "float32", "float64", "bfloat16"};
/* ======================================================================== */

/* ---- XPU runtime declarations: H [KLRT] runtime.h / defs.h ---------------- */
typedef void* XPUStream;
typedef void* XPUEvent;
typedef void* BKCLContext_t; /* opaque; Paddle reads ((int*)ctx)[0], we do not */
/* XPUError_t: 0 success, 700+n errors; the XRE docs say failures come back
 * negated, so any non-zero is a failure and its absolute value the code. */
enum { XPU_SUCCESS = 0, XPUERR_NODEV = 703 };
enum { XPU_DEVICE_TO_HOST = 0, XPU_HOST_TO_DEVICE = 1, XPU_DEVICE_TO_DEVICE = 2 }; /* XPUMemcpyKind */
enum { XPU_MEM_MAIN = 0 };        /* XPUMemoryKind: HBM; the C++ default, passed explicitly */
enum { XPUATTR_PCI_ADDRESS = 0 }; /* domain[31:16] bus[15:8] dev[7:3] fn[2:0] */

/* REQ: init fails without it; OPT: NULL means the feature is unavailable.
 * xpu_memcpy_async is declared in newer runtime_ex.h only (⚠ seen at call
 * sites, absent from the [KLRT] header); without it a stream copy waits for
 * the stream and copies synchronously. xpu_strerror is a static inline of
 * xpu/defs.h, not an exported symbol: errors are named from the header's
 * codes (xpuErrName). */
#define XPURT_FUNCS(REQ, OPT)                                              \
  REQ(int, xpu_device_count, (int*))                                       \
  REQ(int, xpu_set_device, (int))                                          \
  REQ(int, xpu_malloc, (void**, uint64_t, int))                            \
  REQ(int, xpu_free, (void*))                                              \
  REQ(int, xpu_host_alloc, (void**, uint64_t, unsigned))                   \
  REQ(int, xpu_host_free, (void*))                                         \
  REQ(int, xpu_memcpy, (void*, const void*, uint64_t, int))                \
  REQ(int, xpu_stream_create, (XPUStream*))                                \
  REQ(int, xpu_stream_destroy, (XPUStream))                                \
  REQ(int, xpu_wait, (XPUStream))                                          \
  REQ(int, xpu_event_create, (XPUEvent*))                                  \
  REQ(int, xpu_event_record, (XPUEvent, XPUStream))                        \
  REQ(int, xpu_event_wait, (XPUEvent))                                     \
  REQ(int, xpu_event_destroy, (XPUEvent))                                  \
  REQ(int, xpu_stream_wait_event, (XPUStream, XPUEvent))                   \
  OPT(int, xpu_host_register, (void*, uint64_t, unsigned))                 \
  OPT(int, xpu_host_unregister, (void*))                                   \
  OPT(int, xpu_memcpy_async, (void*, const void*, uint64_t, int, XPUStream)) \
  OPT(int, xpu_device_get_attr, (uint64_t*, int, int))

/* BKCL (C [PD], [FCX], [IC]; counts size_t ⚠, Paddle passes int64).
 * bkcl_comm_abort exists only in newer XCCL; bkcl_all_to_all(_v) may be
 * missing in old ones (grouped send/recv then). */
#define BKCL_FUNCS(REQ, OPT)                                                                \
  REQ(int, bkcl_get_unique_id, (void*))                                                     \
  REQ(int, bkcl_init_rank, (BKCLContext_t*, int, int, void*))                               \
  REQ(int, bkcl_destroy_context, (BKCLContext_t))                                           \
  REQ(int, bkcl_all_reduce, (BKCLContext_t, const void*, void*, size_t, int, int, XPUStream)) \
  REQ(int, bkcl_reduce, (BKCLContext_t, const void*, void*, size_t, int, int, int, XPUStream)) \
  REQ(int, bkcl_broadcast, (BKCLContext_t, const void*, void*, size_t, int, int, XPUStream)) \
  REQ(int, bkcl_all_gather, (BKCLContext_t, const void*, size_t, void*, int, XPUStream))      \
  REQ(int, bkcl_reduce_scatter, (BKCLContext_t, const void*, void*, size_t, int, int, XPUStream)) \
  REQ(int, bkcl_send, (BKCLContext_t, const void*, size_t, int, int, XPUStream))             \
  REQ(int, bkcl_recv, (BKCLContext_t, void*, size_t, int, int, XPUStream))                   \
  REQ(int, bkcl_group_start, (void))                                                        \
  REQ(int, bkcl_group_end, (void))                                                          \
  OPT(int, bkcl_comm_abort, (BKCLContext_t))                                                \
  OPT(int, bkcl_all_to_all, (BKCLContext_t, const void*, size_t, void*, int, XPUStream))     \
  OPT(int, bkcl_all_to_all_v, (BKCLContext_t, const void*, const size_t*, const size_t*, int, void*, \
                               const size_t*, const size_t*, int, XPUStream))

XPURT_FUNCS(SHIM_DECLARE, SHIM_DECLARE)
BKCL_FUNCS(SHIM_DECLARE, SHIM_DECLARE)

/* ---- State, errors, logging ---------------------------------------------- */
enum { LIB_XPURT, LIB_BKCL, NUM_LIBS };
static const flagcxPluginLibrary_v1_t libraries[NUM_LIBS + 1] = {
    {"runtime", "FLAGCX_KUNLUNXIN_XPURT",
     "libxpurt.so:libxpurt.so.2:libxpurt.so.1:/usr/local/xpu/so/libxpurt.so:/usr/local/xpu/so/libxpurt.so.2:"
     "/usr/local/xpu/so/libxpurt.so.1",
     0, 0},
    {"ccl", "FLAGCX_KUNLUNXIN_BKCL", "libbkcl.so:/usr/local/xccl/so/libbkcl.so", 0, 0},
    {NULL, NULL, NULL, 0, 0}};


static const char* xpuErrName(int code) {
  switch (code) {
    case 701: return "XPUERR_INVALID_DEVICE";
    case 702: return "XPUERR_UNINIT";
    case 703: return "XPUERR_NODEV";
    case 705: return "XPUERR_NOMEM";
    case 707: return "XPUERR_INVALID_PARAM";
    case 712: return "XPUERR_NOSUPPORT";
    case 715: return "XPUERR_TIMEOUT";
    case 716: return "XPUERR_BUSY";
    default: return "XPU runtime error";
  }
}

static flagcxResult_t xpuCheck(int e, const char* call) {
  int code = e < 0 ? -e : e;
  if (e == XPU_SUCCESS) return flagcxSuccess;
  return shimFail(flagcxUnhandledDeviceError, "%s: %s (XPUError %d)", call, xpuErrName(code), e);
}

static const char* bkclName(int r) {
  switch (r) {
    case BKCL_SUCCESS: return "BKCL_SUCCESS";
    case BKCL_INVALID_ARGUMENT: return "BKCL_INVALID_ARGUMENT";
    case BKCL_RUNTIME_ERROR: return "BKCL_RUNTIME_ERROR";
    case BKCL_SYSTEM_ERROR: return "BKCL_SYSTEM_ERROR";
    case BKCL_INTERNAL_ERROR: return "BKCL_INTERNAL_ERROR";
    default: return "unknown BKCL result";
  }
}

/* BKCL has no error-string API: the text is the result's name (by this
 * plugin's unverified numbering) and the raw code. */
static flagcxResult_t bkclCheck(int r, const char* call) {
  flagcxResult_t f;
  if (r == BKCL_SUCCESS) return flagcxSuccess;
  switch (r) {
    case BKCL_INVALID_ARGUMENT: f = flagcxInvalidArgument; break;
    case BKCL_RUNTIME_ERROR: f = flagcxUnhandledDeviceError; break;
    case BKCL_SYSTEM_ERROR: f = flagcxSystemError; break;
    case BKCL_INTERNAL_ERROR: f = flagcxInternalError; break;
    default: f = flagcxUnhandledCclError; break;
  }
  return shimFail(f, "%s: %s (BKCLResult %d; BKCL has no error text%s)", call, bkclName(r), r,
              shimStatus[LIB_BKCL].emulated ? "; FLAGCX_VENDORSIM_DEBUG=1 makes the emulator print why" : "");
}

#define XPU(fn, args) \
  do { flagcxResult_t r_ = xpuCheck(f_##fn args, #fn); if (r_ != flagcxSuccess) return r_; } while (0)

/* ---- Init: load libraries ------------------------------------------------- */


/* ---- C++-mangled BKCL names ------------------------------------------------
 * Some libbkcl.so builds export only C++ names (bkcl.h without extern "C",
 * docs/vendor-facts.md#kunlunxin-mangled-libbkcl). Their exact spelling
 * encodes parameter types this plugin cannot know for sure (BKCLContext_t's
 * definition, the enums' names, size_t vs int64 counts), so instead of
 * guessing one spelling the plugin reads the library's .dynsym and accepts the one defined function
 * named _Z<len><name>... (global) or _ZN...<len><name>E... (in a
 * namespace). Overloads make the lookup fail (ambiguous) rather than guess. */
typedef struct {
  void* map;
  size_t size;
  const ElfW(Sym) * syms;
  size_t nsyms;
  const char* str;
  size_t strsz;
} elfSyms;

static int elfOpen(const char* path, elfSyms* e) {
  const ElfW(Ehdr) * eh;
  const ElfW(Shdr) * sh;
  struct stat sb;
  size_t i;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  memset(e, 0, sizeof *e);
  if (fd < 0) return -1;
  if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)sizeof *eh) { close(fd); return -1; }
  e->size = (size_t)sb.st_size;
  e->map = mmap(NULL, e->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (e->map == MAP_FAILED) { e->map = NULL; return -1; }
  eh = (const ElfW(Ehdr)*)e->map;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shentsize != sizeof(ElfW(Shdr)) ||
      eh->e_shoff == 0 || eh->e_shoff > e->size || (e->size - eh->e_shoff) / sizeof(ElfW(Shdr)) < eh->e_shnum)
    return -1;
  sh = (const ElfW(Shdr)*)((const char*)e->map + eh->e_shoff);
  for (i = 0; i < eh->e_shnum; i++) {
    const ElfW(Shdr)* s = &sh[i];
    const ElfW(Shdr) * ss;
    if (s->sh_type != SHT_DYNSYM || s->sh_link >= eh->e_shnum) continue;
    ss = &sh[s->sh_link];
    if (s->sh_offset > e->size || s->sh_size > e->size - s->sh_offset || ss->sh_offset > e->size ||
        ss->sh_size > e->size - ss->sh_offset || ss->sh_size == 0)
      return -1;
    e->syms = (const ElfW(Sym)*)((const char*)e->map + s->sh_offset);
    e->nsyms = s->sh_size / sizeof(ElfW(Sym));
    e->str = (const char*)e->map + ss->sh_offset;
    e->strsz = ss->sh_size;
    return 0;
  }
  return -1;
}

static void elfClose(elfSyms* e) {
  if (e->map) munmap(e->map, e->size);
  memset(e, 0, sizeof *e);
}

/* Is m (NUL-terminated) the mangled name of a free function called name? */
static int mangledIs(const char* m, const char* name) {
  size_t nl = strlen(name);
  char* end;
  unsigned long l;
  if (strncmp(m, "_Z", 2) != 0) return 0;
  m += 2;
  if (*m != 'N') {
    if (!isdigit((unsigned char)*m)) return 0;
    l = strtoul(m, &end, 10);
    return l == nl && strncmp(end, name, nl) == 0 && end[nl] != '\0';
  }
  for (m++;;) { /* nested name: <len><id>... ending with <len><name>E */
    if (!isdigit((unsigned char)*m)) return 0;
    l = strtoul(m, &end, 10);
    if (l == 0 || strnlen(end, l) < l) return 0;
    if (l == nl && strncmp(end, name, nl) == 0 && end[nl] == 'E') return 1;
    m = end + l;
  }
}

/* BKCL symbol: its C name, else its only C++ name. *how says which. */
static void* bkclSym(void* h, elfSyms* e, const char* name, const char** mangled, char* why, size_t whyn) {
  void* p = dlsym(h, name);
  const char *found = NULL, *other = NULL;
  size_t i;
  *mangled = NULL;
  why[0] = '\0';
  if (p) return p;
  for (i = 0; e->syms && i < e->nsyms; i++) {
    const ElfW(Sym)* s = &e->syms[i];
    int type = s->st_info & 0xf; /* ELF32_ST_TYPE == ELF64_ST_TYPE */
    const char* n;
    if (s->st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC) || s->st_name >= e->strsz) continue;
    n = e->str + s->st_name;
    if (memchr(n, 0, e->strsz - s->st_name) == NULL || !mangledIs(n, name)) continue;
    if (found && strcmp(found, n) != 0) other = n;
    else found = n;
  }
  if (found && other) {
    shimPrintf(why, whyn, " (found several C++ overloads, e.g. %s and %s; cannot tell which matches)", found, other);
    return NULL;
  }
  if (!found) {
    shimPrintf(why, whyn, " (neither the C name nor a C++-mangled _Z..%s.. name)", name);
    return NULL;
  }
  if ((p = dlsym(h, found)) != NULL) *mangled = found;
  else shimPrintf(why, whyn, " (its C++ name %s is in .dynsym but dlsym fails: %s)", found, dlerror());
  return p;
}

static flagcxResult_t loadXpurt(void* h) {
  int lib = LIB_XPURT;
  XPURT_FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT)
  if (!f_xpu_memcpy_async)
    shimLog(flagcxLogInfo, "libxpurt has no xpu_memcpy_async: copies on a stream wait for it and copy synchronously");
  return flagcxSuccess;
}

#define LOAD_BKCL(ret, name, args, required)                                                       \
  do {                                                                                             \
    f_##name = (ret(*) args)bkclSym(h, &e, #name, &mangled, why, sizeof why);                       \
    if (!f_##name && (required)) { elfClose(&e); return shimMissing(LIB_BKCL, #name, why); }           \
    if (mangled) {                                                                                 \
      cxx++;                                                                                       \
      shimLog(flagcxLogInfo, "%s: using C++ symbol %s (check its parameter types with c++filt)", #name, \
            mangled);                                                                              \
    }                                                                                              \
  } while (0);
#define LOAD_BKCL_REQ(ret, name, args) LOAD_BKCL(ret, name, args, 1)
#define LOAD_BKCL_OPT(ret, name, args) LOAD_BKCL(ret, name, args, 0)

static flagcxResult_t loadBkcl(void* h) {
  elfSyms e;
  const char* mangled;
  char why[400];
  int cxx = 0;
  elfOpen(shimStatus[LIB_BKCL].path, &e); /* no symbol table: only C names can be found */
  BKCL_FUNCS(LOAD_BKCL_REQ, LOAD_BKCL_OPT)
  elfClose(&e); /* the names found were only passed to dlsym */
  if (cxx) shimPrintf(shimStatus[LIB_BKCL].version, sizeof shimStatus[LIB_BKCL].version, "C++ symbols");
  /* A warning on real hardware: wrong numbers there mean wrong results. */
  shimLog(shimStatus[LIB_BKCL].emulated ? flagcxLogInfo : flagcxLogWarn,
        "BKCL enum values and unique-id size are UNVERIFIED (plugins/kunlunxin/README.md says how to check them)");
  return flagcxSuccess;
}

static void fillMasks(flagcxPluginInfo_v1_t* info) {
  int i;
  /* BKCL's own types only: for int8, uint32 and uint64 the host moves
   * bytes (as uint8) and reduces elsewhere, which is exact. */
  info->dataTypeMask = 0;
  for (i = 0; i < flagcxNumTypes; i++)
    if (typeMap[i].native) info->dataTypeMask |= 1u << i;
  info->redOpMask = (1u << flagcxSum) | (1u << flagcxProd) | (1u << flagcxMax) | (1u << flagcxMin);
}

static flagcxResult_t (*const loaders[NUM_LIBS])(void*) = {loadXpurt, loadBkcl};

const shimPlugin_t shimPlugin = {
    .libraries = libraries,
    .numLibraries = NUM_LIBS,
    .loaders = loaders,
    .install = "install it",
    .missingFmt = "%s lacks %s%s: it is too old or not %s; point %s at another one",
    .logNoVersion = 1,
    .fillMasks = fillMasks,
};

/* ---- Device runtime ------------------------------------------------------- */
static flagcxResult_t klxGetDeviceCount(int* count) {
  int e;
  READY();
  e = f_xpu_device_count(count);
  if (e == XPUERR_NODEV || e == -XPUERR_NODEV) { /* no XPU is an answer, not a failure */
    *count = 0;
    return flagcxSuccess;
  }
  return xpuCheck(e, "xpu_device_count");
}

static flagcxResult_t klxSetDevice(int dev) {
  READY();
  return xpuCheck(f_xpu_set_device(dev), "xpu_set_device");
}

static flagcxResult_t klxGetDeviceInfo(int dev, flagcxDeviceInfo_v1_t* info) {
  int n = 0;
  uint64_t pci = 0;
  char path[96];
  FILE* f;
  READY();
  memset(info, 0, sizeof *info);
  info->numaNode = -1;
  XPU(xpu_device_count, (&n));
  if (dev < 0 || dev >= n) return shimFail(flagcxInvalidArgument, "getDeviceInfo: device %d of %d", dev, n);
  shimPrintf(info->name, sizeof info->name, "Kunlunxin XPU %d", dev); /* no name query in runtime.h */
  if (f_xpu_device_get_attr) {
    XPU(xpu_device_get_attr, (&pci, XPUATTR_PCI_ADDRESS, dev));
    shimPrintf(info->pciBusId, sizeof info->pciBusId, "%04x:%02x:%02x.%x", (unsigned)(pci >> 16) & 0xffff,
            (unsigned)(pci >> 8) & 0xff, (unsigned)(pci >> 3) & 0x1f, (unsigned)pci & 0x7);
    shimPrintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", info->pciBusId);
    if ((f = fopen(path, "r"))) {
      if (fscanf(f, "%d", &info->numaNode) != 1) info->numaNode = -1;
      fclose(f);
    }
  }
  return flagcxSuccess; /* totalMemory 0 and uuid "": no such query (docs/vendor-facts.md#kunlunxin-xpu-runtime) */
}

static flagcxResult_t klxGetLinkInfo(int a, int b, flagcxLinkInfo_v1_t* link) {
  READY();
  memset(link, 0, sizeof *link);
  link->type = a == b ? flagcxLinkSelf : flagcxLinkUnknown; /* no topology query in runtime.h */
  shimPrintf(link->name, sizeof link->name, "%s", a == b ? "X" : "unknown");
  return flagcxSuccess;
}

static flagcxResult_t klxDeviceMalloc(int dev, void** ptr, size_t bytes) {
  READY();
  XPU(xpu_set_device, (dev));
  return xpuCheck(f_xpu_malloc(ptr, bytes, XPU_MEM_MAIN), "xpu_malloc");
}
static flagcxResult_t klxDeviceFree(void* ptr) { READY(); return xpuCheck(f_xpu_free(ptr), "xpu_free"); }
static flagcxResult_t klxHostMalloc(void** ptr, size_t bytes) {
  READY();
  return xpuCheck(f_xpu_host_alloc(ptr, bytes, 0), "xpu_host_alloc");
}
static flagcxResult_t klxHostFree(void* ptr) { READY(); return xpuCheck(f_xpu_host_free(ptr), "xpu_host_free"); }
/* Unverified: xpu_host_register's C signature was not found in a public
 * header; it is taken as xpu_host_alloc's (plugins/kunlunxin/README.md). */
static flagcxResult_t klxHostRegister(void* ptr, size_t bytes) {
  READY();
  if (!f_xpu_host_register) return shimFail(flagcxNotSupported, "xpu_host_register not found in libxpurt");
  return xpuCheck(f_xpu_host_register(ptr, bytes, 0), "xpu_host_register");
}
static flagcxResult_t klxHostUnregister(void* ptr) {
  READY();
  if (!f_xpu_host_unregister) return shimFail(flagcxNotSupported, "xpu_host_unregister not found in libxpurt");
  return xpuCheck(f_xpu_host_unregister(ptr), "xpu_host_unregister");
}

/* flagcx H2D 0, D2H 1, D2D 2 -> XPUMemcpyKind 1, 0, 2 (XPU: D2H 0, H2D 1, D2D 2). */
static const int xpuKind[3] = {XPU_HOST_TO_DEVICE, XPU_DEVICE_TO_HOST, XPU_DEVICE_TO_DEVICE};

static flagcxResult_t klxMemCopy(void* dst, const void* src, size_t bytes, flagcxMemcpyKind_t kind, flagcxStream_t s) {
  READY();
  if ((unsigned)kind > flagcxMemcpyDeviceToDevice)
    return shimFail(flagcxInvalidArgument, "memCopy: direction %d is not 0 (H2D), 1 (D2H) or 2 (D2D)", (int)kind);
  if (s && f_xpu_memcpy_async)
    return xpuCheck(f_xpu_memcpy_async(dst, src, bytes, xpuKind[kind], (XPUStream)s), "xpu_memcpy_async");
  if (s) XPU(xpu_wait, ((XPUStream)s)); /* no async copy: keep the stream's order, copy now */
  return xpuCheck(f_xpu_memcpy(dst, src, bytes, xpuKind[kind]), "xpu_memcpy");
}

/* runtime.h has no memset: wait for the stream (its earlier work must land
 * first), then copy a host buffer of the value in. Done when it returns. */
static flagcxResult_t klxMemSet(void* dst, int value, size_t bytes, flagcxStream_t s) {
  size_t chunk = bytes < (1u << 20) ? bytes : (1u << 20), off;
  unsigned char* host;
  flagcxResult_t r = flagcxSuccess;
  READY();
  if (s) XPU(xpu_wait, ((XPUStream)s));
  if (bytes == 0) return flagcxSuccess;
  if (!(host = malloc(chunk))) return shimFail(flagcxSystemError, "memSet: out of host memory");
  memset(host, value, chunk);
  for (off = 0; off < bytes && r == flagcxSuccess; off += chunk) {
    size_t n = bytes - off < chunk ? bytes - off : chunk;
    r = xpuCheck(f_xpu_memcpy((char*)dst + off, host, n, XPU_HOST_TO_DEVICE), "xpu_memcpy (memSet)");
  }
  free(host);
  return r;
}

static flagcxResult_t klxStreamCreate(int dev, flagcxStream_t* s) {
  READY();
  XPU(xpu_set_device, (dev));
  return xpuCheck(f_xpu_stream_create((XPUStream*)s), "xpu_stream_create");
}
static flagcxResult_t klxStreamDestroy(flagcxStream_t s) {
  READY();
  return xpuCheck(f_xpu_stream_destroy((XPUStream)s), "xpu_stream_destroy");
}
static flagcxResult_t klxStreamSynchronize(flagcxStream_t s) {
  READY();
  return xpuCheck(f_xpu_wait((XPUStream)s), "xpu_wait");
}
static flagcxResult_t klxStreamWaitEvent(flagcxStream_t s, flagcxEvent_t e) {
  READY();
  return xpuCheck(f_xpu_stream_wait_event((XPUStream)s, (XPUEvent)e), "xpu_stream_wait_event");
}
/* XPU events carry no timing (no elapsed-time call exists). */
static flagcxResult_t klxEventCreate(int dev, flagcxEvent_t* e) {
  READY();
  XPU(xpu_set_device, (dev));
  return xpuCheck(f_xpu_event_create((XPUEvent*)e), "xpu_event_create");
}
static flagcxResult_t klxEventDestroy(flagcxEvent_t e) {
  READY();
  return xpuCheck(f_xpu_event_destroy((XPUEvent)e), "xpu_event_destroy");
}
static flagcxResult_t klxEventRecord(flagcxEvent_t e, flagcxStream_t s) {
  READY();
  return xpuCheck(f_xpu_event_record((XPUEvent)e, (XPUStream)s), "xpu_event_record");
}
/* ⚠ xpu_event_wait is taken to block the host until the event is reached
 * (its name and signature; the header has no comment). */
static flagcxResult_t klxEventSynchronize(flagcxEvent_t e) {
  READY();
  return xpuCheck(f_xpu_event_wait((XPUEvent)e), "xpu_event_wait");
}

/* ---- Collective library --------------------------------------------------- */
/* Our handle: the BKCL context plus what the grouped operations and the
 * device-resident alltoallv counts need. */
typedef struct {
  BKCLContext_t ctx;
  int rank, nranks, dev;
  size_t* dcounts; /* device: sendcounts, sdispls, recvcounts, rdispls */
  XPUEvent dcountsDone; /* recorded after the last bkcl_all_to_all_v read them */
} klxComm;
#define KC(c) ((klxComm*)(c))

/* Translates type (and op, when op >= 0) or says why not. */
static flagcxResult_t mapTypeOp(const char* call, flagcxDataType_t t, int op, int* bt, int* bop) {
  if ((unsigned)t >= flagcxNumTypes) return shimFail(flagcxInvalidArgument, "%s: data type %d is unknown", call, (int)t);
  *bt = typeMap[t].bkcl;
  if (op < 0) return flagcxSuccess;
  if (op >= flagcxNumRedOps) return shimFail(flagcxInvalidArgument, "%s: reduction op %d is unknown", call, op);
  if (op == flagcxAvg)
    return shimFail(flagcxNotSupported, "%s: avg is not supported (BKCL_AVG exists only in recent XCCL; its value is unknown)",
                call);
  if (!typeMap[t].native)
    return shimFail(flagcxNotSupported, "%s: BKCL has no %s type, so %s cannot reduce it exactly (only move it)", call,
                typeName[t], call);
  *bop = opMap[op];
  return flagcxSuccess;
}
#define MAP(call, t, op)                                                       \
  int bt = 0, bop = 0;                                                         \
  do {                                                                         \
    flagcxResult_t r_ = mapTypeOp(call, t, op, &bt, &bop);                     \
    if (r_ != flagcxSuccess) return r_;                                        \
  } while (0)

static flagcxResult_t klxGetUniqueIdBytes(size_t* bytes) { *bytes = KLX_UID_BYTES; return flagcxSuccess; }

/* canary byte i of the id buffer: shows how much of it bkcl_get_unique_id wrote. */
static unsigned char canary(size_t i) { return (unsigned char)(0xa5 ^ (i * 131u) ^ (i >> 8)); }

static flagcxResult_t klxGetUniqueId(void* id) {
  static int reported;
  unsigned char* buf;
  size_t i, last = 0;
  flagcxResult_t r;
  READY();
  if (!(buf = malloc(KLX_UID_BUF))) return shimFail(flagcxSystemError, "getUniqueId: out of memory");
  for (i = 0; i < KLX_UID_BUF; i++) buf[i] = canary(i);
  if ((r = bkclCheck(f_bkcl_get_unique_id(buf), "bkcl_get_unique_id")) == flagcxSuccess) {
    for (i = 0; i < KLX_UID_BUF; i++)
      if (buf[i] != canary(i)) last = i + 1;
    if (last > KLX_UID_BYTES)
      r = shimFail(flagcxInternalError,
               "bkcl_get_unique_id wrote %zu bytes, more than the %d a flagcx unique id can carry "
               "(FLAGCX_UNIQUE_ID_MAX_BYTES): this BKCL needs a larger id in the plugin ABI",
               last, KLX_UID_BYTES);
    else
      memcpy(id, buf, KLX_UID_BYTES);
    if (!reported++) /* the size of BKCLUniqueId is unverified: say what we saw */
      shimLog(flagcxLogInfo, "bkcl_get_unique_id wrote about %zu bytes; %d are exchanged", last, KLX_UID_BYTES);
  }
  free(buf);
  return r;
}

static flagcxResult_t klxCommInitRank(flagcxVendorComm_t* comm, int nranks, const void* id, int rank, int dev) {
  klxComm* c;
  unsigned char* buf;
  flagcxResult_t r;
  READY();
  XPU(xpu_set_device, (dev)); /* BKCL binds the context to the current XPU */
  c = calloc(1, sizeof *c);
  buf = calloc(1, KLX_UID_BUF); /* room beyond the exchanged bytes, zeroed */
  if (!c || !buf) {
    free(c);
    free(buf);
    return shimFail(flagcxSystemError, "commInitRank: out of memory");
  }
  memcpy(buf, id, KLX_UID_BYTES);
  c->rank = rank;
  c->nranks = nranks;
  c->dev = dev;
  /* rank BEFORE nranks, id by pointer */
  r = bkclCheck(f_bkcl_init_rank(&c->ctx, rank, nranks, buf), "bkcl_init_rank");
  free(buf);
  if (r != flagcxSuccess) {
    free(c);
    return r;
  }
  *comm = (flagcxVendorComm_t)c;
  return flagcxSuccess;
}

/* Waits until no bkcl_all_to_all_v may still read c->dcounts. */
static flagcxResult_t countsIdle(klxComm* c) {
  return c->dcountsDone ? xpuCheck(f_xpu_event_wait(c->dcountsDone), "xpu_event_wait (alltoAllv counts)")
                        : flagcxSuccess;
}

static void freeCounts(klxComm* c) {
  if (c->dcountsDone) f_xpu_event_destroy(c->dcountsDone);
  if (c->dcounts) f_xpu_free(c->dcounts);
  c->dcountsDone = NULL;
  c->dcounts = NULL;
}

static flagcxResult_t klxCommDestroy(flagcxVendorComm_t comm) {
  klxComm* c = KC(comm);
  flagcxResult_t r;
  READY();
  if ((r = countsIdle(c)) != flagcxSuccess) return r;
  if ((r = bkclCheck(f_bkcl_destroy_context(c->ctx), "bkcl_destroy_context")) != flagcxSuccess) return r;
  freeCounts(c);
  free(c);
  return flagcxSuccess;
}

static flagcxResult_t klxCommAbort(flagcxVendorComm_t comm) {
  flagcxResult_t r;
  READY();
  if (!f_bkcl_comm_abort) return shimFail(flagcxNotSupported, "bkcl_comm_abort not found in libbkcl (needs a newer XCCL)");
  if ((r = bkclCheck(f_bkcl_comm_abort(KC(comm)->ctx), "bkcl_comm_abort")) != flagcxSuccess) return r;
  freeCounts(KC(comm));
  free(comm);
  return flagcxSuccess;
}

static flagcxResult_t klxAllReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op,
                                   flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  MAP("bkcl_all_reduce", t, op);
  return bkclCheck(f_bkcl_all_reduce(KC(c)->ctx, s, r, n, bt, bop, (XPUStream)st), "bkcl_all_reduce");
}
static flagcxResult_t klxReduce(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op, int root,
                                flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  MAP("bkcl_reduce", t, op);
  return bkclCheck(f_bkcl_reduce(KC(c)->ctx, s, r, n, bt, bop, root, (XPUStream)st), "bkcl_reduce");
}
static flagcxResult_t klxBroadcast(const void* s, void* r, size_t n, flagcxDataType_t t, int root,
                                   flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  MAP("bkcl_broadcast", t, -1);
  (void)bop;
  return bkclCheck(f_bkcl_broadcast(KC(c)->ctx, s, r, n, bt, root, (XPUStream)st), "bkcl_broadcast");
}
static flagcxResult_t klxAllGather(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c,
                                   flagcxStream_t st) {
  READY();
  MAP("bkcl_all_gather", t, -1);
  (void)bop; /* count BEFORE the receive buffer */
  return bkclCheck(f_bkcl_all_gather(KC(c)->ctx, s, n, r, bt, (XPUStream)st), "bkcl_all_gather");
}
static flagcxResult_t klxReduceScatter(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxRedOp_t op,
                                       flagcxVendorComm_t c, flagcxStream_t st) {
  READY();
  MAP("bkcl_reduce_scatter", t, op);
  return bkclCheck(f_bkcl_reduce_scatter(KC(c)->ctx, s, r, n, bt, bop, (XPUStream)st), "bkcl_reduce_scatter");
}
static flagcxResult_t klxSend(const void* s, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c,
                              flagcxStream_t st) {
  READY();
  MAP("bkcl_send", t, -1);
  (void)bop; /* peer BEFORE the data type */
  return bkclCheck(f_bkcl_send(KC(c)->ctx, s, n, peer, bt, (XPUStream)st), "bkcl_send");
}
static flagcxResult_t klxRecv(void* r, size_t n, flagcxDataType_t t, int peer, flagcxVendorComm_t c,
                              flagcxStream_t st) {
  READY();
  MAP("bkcl_recv", t, -1);
  (void)bop;
  return bkclCheck(f_bkcl_recv(KC(c)->ctx, r, n, peer, bt, (XPUStream)st), "bkcl_recv");
}
static flagcxResult_t klxGroupStart(void) { READY(); return bkclCheck(f_bkcl_group_start(), "bkcl_group_start"); }
static flagcxResult_t klxGroupEnd(void) { READY(); return bkclCheck(f_bkcl_group_end(), "bkcl_group_end"); }

/* Gather, Scatter (BKCL has neither) and AlltoAll(v) when the library lacks
 * them: bkcl_group_start, bkcl_send/bkcl_recv per peer (zero counts
 * skipped), bkcl_group_end, which is always called, also after a failure
 * inside the group. Counts and displacements in elements; sc/sd/rc/rd NULL
 * means count for every peer at p*count. sendTo/recvFrom: ALL peers, NONE,
 * or one peer (a single buffer at offset 0). */
typedef struct { shimXfer x; BKCLContext_t ctx; int bt; XPUStream st; } klxXfer;
static int klxXferSend(shimXfer* x, const void* b, size_t n, int p) {
  klxXfer* k = (klxXfer*)x;
  return f_bkcl_send(k->ctx, b, n, p, k->bt, k->st);
}
static int klxXferRecv(shimXfer* x, void* b, size_t n, int p) {
  klxXfer* k = (klxXfer*)x;
  return f_bkcl_recv(k->ctx, b, n, p, k->bt, k->st);
}
static flagcxResult_t grouped(const char* call, const void* s, const size_t* sc, const size_t* sd, void* r,
                              const size_t* rc, const size_t* rd, size_t count, flagcxDataType_t t, int sendTo,
                              int recvFrom, flagcxVendorComm_t comm, flagcxStream_t st) {
  klxComm* c = KC(comm);
  klxXfer x;
  READY();
  MAP(call, t, -1);
  (void)bop;
  x = (klxXfer){{c->nranks, shimTypeSize[t], f_bkcl_group_start, f_bkcl_group_end, klxXferSend, klxXferRecv},
                c->ctx, bt, (XPUStream)st};
  return bkclCheck(shimGrouped(&x.x, s, sc, sd, r, rc, rd, count, sendTo, recvFrom), call);
}

static flagcxResult_t klxGather(const void* s, void* r, size_t n, flagcxDataType_t t, int root, flagcxVendorComm_t c,
                                flagcxStream_t st) {
  READY(); /* every rank sends n to root; root receives peer p's n at p*n */
  return grouped("gather (grouped bkcl_send/bkcl_recv)", s, NULL, NULL, r, NULL, NULL, n, t, root,
                 KC(c)->rank == root ? SHIM_ALL : SHIM_NONE, c, st);
}
static flagcxResult_t klxScatter(const void* s, void* r, size_t n, flagcxDataType_t t, int root, flagcxVendorComm_t c,
                                 flagcxStream_t st) {
  READY(); /* root sends p*n.. to peer p; every rank receives n from root */
  return grouped("scatter (grouped bkcl_send/bkcl_recv)", s, NULL, NULL, r, NULL, NULL, n, t,
                 KC(c)->rank == root ? SHIM_ALL : SHIM_NONE, root, c, st);
}
static flagcxResult_t klxAlltoAll(const void* s, void* r, size_t n, flagcxDataType_t t, flagcxVendorComm_t c,
                                  flagcxStream_t st) {
  READY();
  if (f_bkcl_all_to_all) {
    MAP("bkcl_all_to_all", t, -1);
    (void)bop; /* count BEFORE the receive buffer */
    return bkclCheck(f_bkcl_all_to_all(KC(c)->ctx, s, n, r, bt, (XPUStream)st), "bkcl_all_to_all");
  }
  return grouped("alltoAll (grouped bkcl_send/bkcl_recv)", s, NULL, NULL, r, NULL, NULL, n, t, SHIM_ALL, SHIM_ALL, c, st);
}

/* bkcl_all_to_all_v reads its four count arrays from device memory ([FCX]
 * copies them in before every call). They live in one device buffer per
 * communicator, rewritten only after the previous call's reads are done
 * (an event recorded behind it): host arrays are read during this call
 * only, as the ABI promises. Counts and displacements are elements, as
 * FlagCX and Paddle pass them (⚠ not documented). */
static flagcxResult_t klxAlltoAllv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                                   const size_t* rd, flagcxDataType_t t, flagcxVendorComm_t comm, flagcxStream_t st) {
  klxComm* c = KC(comm);
  size_t n, bytes, *host;
  flagcxResult_t res;
  READY();
  if (!f_bkcl_all_to_all_v)
    return grouped("alltoAllv (grouped bkcl_send/bkcl_recv)", s, sc, sd, r, rc, rd, 0, t, SHIM_ALL, SHIM_ALL, comm, st);
  {
    MAP("bkcl_all_to_all_v", t, -1);
    (void)bop;
    n = (size_t)c->nranks;
    bytes = 4 * n * sizeof(size_t);
    if (!c->dcounts) {
      XPU(xpu_set_device, (c->dev));
      XPU(xpu_malloc, ((void**)&c->dcounts, bytes, XPU_MEM_MAIN));
      if ((res = xpuCheck(f_xpu_event_create(&c->dcountsDone), "xpu_event_create (alltoAllv counts)")) !=
          flagcxSuccess) {
        f_xpu_free(c->dcounts);
        c->dcounts = NULL;
        c->dcountsDone = NULL;
        return res;
      }
    } else if ((res = countsIdle(c)) != flagcxSuccess) {
      return res;
    }
    if (!(host = malloc(bytes))) return shimFail(flagcxSystemError, "alltoAllv: out of memory");
    memcpy(host, sc, n * sizeof *sc);
    memcpy(host + n, sd, n * sizeof *sd);
    memcpy(host + 2 * n, rc, n * sizeof *rc);
    memcpy(host + 3 * n, rd, n * sizeof *rd);
    res = xpuCheck(f_xpu_memcpy(c->dcounts, host, bytes, XPU_HOST_TO_DEVICE), "xpu_memcpy (alltoAllv counts)");
    free(host);
    if (res != flagcxSuccess) return res;
    res = bkclCheck(f_bkcl_all_to_all_v(c->ctx, s, c->dcounts, c->dcounts + n, bt, r, c->dcounts + 2 * n,
                                        c->dcounts + 3 * n, bt, (XPUStream)st),
                    "bkcl_all_to_all_v");
    if (res != flagcxSuccess) return res;
    return xpuCheck(f_xpu_event_record(c->dcountsDone, (XPUStream)st), "xpu_event_record (alltoAllv counts)");
  }
}

static const char* klxGetErrorString(flagcxResult_t r) {
  switch (r) {
    case flagcxSuccess: return "no error";
    case flagcxUnhandledDeviceError: return "XPU runtime error (or BKCL_RUNTIME_ERROR)";
    case flagcxSystemError: return "system error (or BKCL_SYSTEM_ERROR)";
    case flagcxInternalError: return "internal error (or BKCL_INTERNAL_ERROR)";
    case flagcxInvalidArgument: return "invalid argument (or BKCL_INVALID_ARGUMENT)";
    case flagcxInvalidUsage: return "invalid usage";
    case flagcxUnhandledCclError: return "unhandled BKCL error";
    case flagcxNotSupported: return "not supported";
    default: return "unknown result";
  }
}

/* ---- The exported table ---------------------------------------------------- */
SHIM_EXPORT const flagcxVendorPlugin_v5_t flagcxVendorPlugin_v5 = {
    SHIM_TABLE_HEAD("kunlunxin", "Kunlunxin", FLAGCX_PLUGIN_CAP_DEVICE | FLAGCX_PLUGIN_CAP_CCL, libraries),
    .device = {
        .getDeviceCount = klxGetDeviceCount, .setDevice = klxSetDevice, .getDeviceInfo = klxGetDeviceInfo,
        .getLinkInfo = klxGetLinkInfo, .deviceMalloc = klxDeviceMalloc, .deviceFree = klxDeviceFree,
        .hostMalloc = klxHostMalloc, .hostFree = klxHostFree, .pointerKind = NULL,
        .memCopy = klxMemCopy, .memSet = klxMemSet, .streamCreate = klxStreamCreate,
        .streamDestroy = klxStreamDestroy, .streamSynchronize = klxStreamSynchronize,
        .streamQuery = NULL, /* no stream query in runtime.h */
        .streamWaitEvent = klxStreamWaitEvent, .eventCreate = klxEventCreate, .eventDestroy = klxEventDestroy,
        .eventRecord = klxEventRecord,
        .eventQuery = NULL, /* no event query */
        .eventSynchronize = klxEventSynchronize,
        .eventElapsedTime = NULL, /* no event timing: the host uses host timers */
        .hostRegister = klxHostRegister, .hostUnregister = klxHostUnregister, /* ABI v2 */
        .memGetInfo = NULL, /* ABI v3: no memory-info call in docs/vendor-facts.md */
    },
    .ccl = {
        .getUniqueIdBytes = klxGetUniqueIdBytes, .getUniqueId = klxGetUniqueId, .commInitRank = klxCommInitRank,
        .commDestroy = klxCommDestroy, .commAbort = klxCommAbort, .commGetAsyncError = NULL,
        .allReduce = klxAllReduce, .reduce = klxReduce, .broadcast = klxBroadcast, .allGather = klxAllGather,
        .reduceScatter = klxReduceScatter, .alltoAll = klxAlltoAll, .alltoAllv = klxAlltoAllv,
        .gather = klxGather, .scatter = klxScatter, .send = klxSend, .recv = klxRecv,
        .groupStart = klxGroupStart, .groupEnd = klxGroupEnd, .getErrorString = klxGetErrorString,
    },
};
