/*
 * plugins/common/shim.h: what a vendor shim is built from.
 *
 * Every plugin under plugins/<vendor>/ is compiled together with
 * the C files of plugins/common (plugins/plugins.mk), so each .so carries its own copy
 * of this state; all of it is hidden (-fvisibility=hidden), and the only
 * exported symbol stays the plugin's versioned table.
 *
 * A shim provides:
 *   - const shimPlugin_t shimPlugin = {...}: its libraries, one loader per
 *     library (dlsym of its symbols, version text), how the libraries are
 *     searched and how failures read, and the masks it fills into the info;
 *   - the vendor mapping itself (device runtime, collectives), using the
 *     helpers below for errors, logging and grouped send/recv;
 *   - the exported table, which starts with SHIM_TABLE_HEAD(...): init is
 *     shimInit and getLastError is shimGetLastError.
 *
 * The shared part provides:
 *   - errors: shimFail() writes the per-thread last-error text (the ABI's
 *     getLastError) and returns its result; READY() fails an entry point
 *     called before a successful init; shimPrintf() is snprintf that may
 *     truncate on purpose; shimLog() goes to the host's log callback;
 *   - library loading: each library is dlopen'ed from its env var if set,
 *     else from $<homeEnv>/<homeDir>/<first soname>, else from its candidate
 *     sonames; its path, version, load error and the emulator marker
 *     (flagcxVendorsimEmulated, exported by conformance/vendorsim) land in
 *     shimStatus[]; SHIM_LOAD_REQ/SHIM_LOAD_OPT fill f_<name> pointers;
 *   - init and the plugin info (libraries, emulated, then the shim's masks);
 *   - shimGrouped(): Gather/Scatter/AlltoAll(v) as grouped send/recv.
 */
#ifndef FLAGCX_PLUGINS_SHIM_H
#define FLAGCX_PLUGINS_SHIM_H

#include <dlfcn.h>
#include <stddef.h>

#include "flagcx_plugin.h"

typedef struct {
  const flagcxPluginLibrary_v1_t* libraries; /* NULL-terminated: the table's .libraries */
  int numLibraries;
  flagcxResult_t (*const* loaders)(void* handle); /* per library: dlsym its symbols, set its version */

  /* Searching (no env var set). homeEnv: NULL, or a variable whose
   * $homeEnv/homeDir/<first soname> is tried first; homeTried: how the load
   * error lists that try (NULL: the path itself and ':'). */
  const char *homeEnv, *homeDir, *homeTried;
  /* A search hit to refuse (closed; the search goes on): returns why, or
   * NULL to accept. The why ends the load error when nothing else loaded. */
  const char* (*skip)(const char* path);
  int pathOnFailure; /* a failed search leaves the first soname as the library's path */
  /* A library never to use, even when its env var names it (flagcx-go's
   * own libnccl.so.2 for the nvidia plugin: loading it would call back
   * into flagcx-go for ever): returns why, or NULL to accept. A search
   * goes on past it to the next candidate; an env var naming it fails. */
  const char* (*refuse)(void* handle);
  /* Extra dlopen flags for library lib (0 for none): RTLD_DEEPBIND keeps
   * a vendor library's calls of its own exported names inside it where
   * another library of the process exports the same names. */
  int (*openFlags)(int lib);
  /* "cannot load X (tried ...; last error: ...): <install> or set ENV to its path" */
  const char* install;
  /* A required symbol is missing: format with (path, symbol, why, what, envVar),
   * what = whats[lib] or, with whats NULL, the library's sonames. */
  const char* missingFmt;
  const char* const* whats;
  const char* const* optionalNotes; /* per library: appended to an optional one's load error (a warning) */
  int logNoVersion;         /* "loaded <role> from ..." instead of "loaded <role> <version> from ..." */
  void (*initFailed)(void); /* after a failed init closed the libraries */
  void (*initDone)(void);   /* all libraries loaded, before init returns success */
  void (*fillMasks)(flagcxPluginInfo_v1_t* info); /* dataTypeMask, redOpMask */
} shimPlugin_t;

extern const shimPlugin_t shimPlugin; /* defined by the vendor shim */

/* ---- State ---------------------------------------------------------------- */
extern flagcxLibraryStatus_v1_t shimStatus[FLAGCX_PLUGIN_MAX_LIBRARIES];
extern void* shimHandles[FLAGCX_PLUGIN_MAX_LIBRARIES];
extern int shimReady;

/* ---- Errors and logging --------------------------------------------------- */
void shimPrintf(char* buf, size_t n, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void shimLog(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
flagcxResult_t shimFail(flagcxResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
const char* shimGetLastError(void);

#define READY()                                                                              \
  do {                                                                                       \
    if (!shimReady) return shimFail(flagcxInvalidUsage, "%s: plugin not initialized", __func__); \
  } while (0)

/* ---- Library loading ------------------------------------------------------ */
/* X-macro helpers: FUNCS(DECLARE, DECLARE) declares f_<name> pointers;
 * FUNCS(SHIM_LOAD_REQ, SHIM_LOAD_OPT) inside a loader, with locals
 * `void* h` and `int lib`, fills them (REQ: init fails without it). */
#define SHIM_DECLARE(ret, name, args) static ret(*f_##name) args;
#define SHIM_LOAD_REQ(ret, name, args) \
  if (!(f_##name = (ret(*) args)dlsym(h, #name))) return shimMissing(lib, #name, "");
#define SHIM_LOAD_OPT(ret, name, args) f_##name = (ret(*) args)dlsym(h, #name);

/* Records in shimStatus[lib].error that the library lacks sym; returns flagcxSystemError. */
flagcxResult_t shimMissing(int lib, const char* sym, const char* why);
/* NCCL-style version code: X*10000+Y*100+Z (X*1000+Y*100+Z up to 2.8) -> "X.Y.Z". */
void shimVersionNccl(char* out, size_t n, int v);

flagcxResult_t shimInit(flagcxLogFn_t log, void* ctx, flagcxPluginInfo_v1_t* info);

/* ---- Grouped send/recv ---------------------------------------------------- */
/* Gather, Scatter and AlltoAll(v) where the library lacks them: groupStart,
 * send/recv per peer (zero counts skipped), groupEnd, which is always
 * called, also after a failure inside the group. Counts and displacements
 * are in elements; sc/sd/rc/rd NULL means count for every peer at p*count.
 * sendTo/recvFrom: SHIM_ALL peers, SHIM_NONE, or one peer (a single buffer
 * at offset 0). The callbacks return the vendor's code (0 is success);
 * shimGrouped returns the first failure, else groupEnd's code. A shim
 * embeds shimXfer first in its own struct (communicator, type, stream). */
enum { SHIM_ALL = -1, SHIM_NONE = -2 };
typedef struct shimXfer {
  int nranks;
  size_t elemSize;
  int (*groupStart)(void);
  int (*groupEnd)(void);
  int (*send)(struct shimXfer* x, const void* buf, size_t n, int peer);
  int (*recv)(struct shimXfer* x, void* buf, size_t n, int peer);
} shimXfer;
int shimGrouped(shimXfer* x, const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                const size_t* rd, size_t count, int sendTo, int recvFrom);

extern const size_t shimTypeSize[flagcxNumTypes]; /* bytes per flagcxDataType_t */

/* ---- The exported table --------------------------------------------------- */
#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_TABLE_HEAD(pname, pvendor, pcaps, plibraries)                                          \
  .size = sizeof(flagcxVendorPlugin_v5_t), .abiVersion = FLAGCX_PLUGIN_ABI_VERSION, .name = pname, \
  .vendor = pvendor, .version = "1.0.0", .caps = pcaps, .libraries = plibraries, .init = shimInit,  \
  .fini = NULL, .getLastError = shimGetLastError

#endif
