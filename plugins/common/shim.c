/*
 * plugins/common/shim.c: the machinery every vendor shim shares (see
 * shim.h): last-error and logging helpers, library loading, init and the
 * plugin info, grouped send/recv. Compiled into each plugin.
 */
#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

flagcxLibraryStatus_v1_t shimStatus[FLAGCX_PLUGIN_MAX_LIBRARIES];
void* shimHandles[FLAGCX_PLUGIN_MAX_LIBRARIES];
int shimReady;
static flagcxLogFn_t logFn;
static void* logCtx;
/* Per thread, as the ABI asks: the Go side pins the goroutine to its thread
 * from the failing call to the getLastError call. */
static __thread char lastError[1024];

const size_t shimTypeSize[flagcxNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* ---- Errors and logging --------------------------------------------------- */
void shimPrintf(char* buf, size_t n, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

void shimLog(int level, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  if (!logFn) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  logFn(logCtx, level, msg);
}

flagcxResult_t shimFail(flagcxResult_t r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastError, sizeof lastError, fmt, ap);
  va_end(ap);
  return r;
}

const char* shimGetLastError(void) { return lastError; }

/* ---- Library loading ------------------------------------------------------ */
void shimVersionNccl(char* out, size_t n, int v) {
  if (v <= 0) return;
  if (v >= 10000) shimPrintf(out, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else shimPrintf(out, n, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
}

/* dlopen path as library lib; on success the status names the file really
 * loaded. A library the shim refuses is closed (*skipped says why), and so
 * is a search hit it skips. */
static void* tryOpen(int lib, const char* path, flagcxLibraryStatus_v1_t* st, int searched, const char** skipped) {
  struct link_map* lm = NULL;
  const char* why = NULL;
  int flags = RTLD_NOW | RTLD_LOCAL | (shimPlugin.openFlags ? shimPlugin.openFlags(lib) : 0);
  void* h = dlopen(path, flags);
  if (!h) return NULL;
  shimPrintf(st->path, sizeof st->path, "%s", path);
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name[0])
    shimPrintf(st->path, sizeof st->path, "%s", lm->l_name);
  if (shimPlugin.refuse) why = shimPlugin.refuse(h);
  if (!why && searched && shimPlugin.skip) why = shimPlugin.skip(st->path);
  if (why) {
    dlclose(h);
    if (searched) st->path[0] = 0;
    *skipped = why;
    return NULL;
  }
  return h;
}

/* dlopen library i from its env var, else from $homeEnv/homeDir, else from
 * its candidate names. */
static void* openLib(int i) {
  const flagcxPluginLibrary_v1_t* lib = &shimPlugin.libraries[i];
  flagcxLibraryStatus_v1_t* st = &shimStatus[i];
  const char* env = getenv(lib->envVar);
  const char* home = shimPlugin.homeEnv ? getenv(shimPlugin.homeEnv) : NULL;
  const char* skipped = NULL;
  char names[512], tried[768], path[600], *save = NULL, *name, *first;
  void* h = NULL;
  const int* marker;

  shimPrintf(names, sizeof names, "%s", lib->sonames);
  first = strtok_r(names, ":", &save);
  if (env && *env) {
    shimPrintf(st->path, sizeof st->path, "%s", env);
    if (!(h = tryOpen(i, env, st, 0, &skipped)))
      shimPrintf(st->error, sizeof st->error, "cannot load %s from %s=%s: %s (fix or unset %s)", first, lib->envVar,
                 env, skipped ? skipped : dlerror(), lib->envVar);
  } else {
    tried[0] = 0;
    if (home && *home) {
      shimPrintf(path, sizeof path, "%s/%s/%s", home, shimPlugin.homeDir, first);
      if (shimPlugin.homeTried) shimPrintf(tried, sizeof tried, "%s", shimPlugin.homeTried);
      else shimPrintf(tried, sizeof tried, "%s:", path);
      h = tryOpen(i, path, st, 1, &skipped);
    }
    for (name = first; name && !h; name = strtok_r(NULL, ":", &save)) h = tryOpen(i, name, st, 1, &skipped);
    if (!h) {
      const char* why = dlerror();
      shimPrintf(names, sizeof names, "%s", lib->sonames);
      first = strtok_r(names, ":", &save);
      if (shimPlugin.pathOnFailure) shimPrintf(st->path, sizeof st->path, "%s", first);
      shimPrintf(st->error, sizeof st->error, "cannot load %s (tried %s%s; last error: %s%s%s): %s or set %s to its path",
                 first, tried, lib->sonames, why ? why : skipped ? skipped : "none", why && skipped ? "; passed over one: " : "",
                 why && skipped ? skipped : "", shimPlugin.install, lib->envVar);
    }
  }
  if (!h) return NULL;
  /* Emulators (conformance/vendorsim) export this marker; the host then says
   * "emulated" wherever it prints results. */
  marker = (const int*)dlsym(h, "flagcxVendorsimEmulated");
  st->emulated = marker && *marker;
  return h;
}

flagcxResult_t shimMissing(int i, const char* sym, const char* why) {
  const flagcxPluginLibrary_v1_t* lib = &shimPlugin.libraries[i];
  shimPrintf(shimStatus[i].error, sizeof shimStatus[i].error, shimPlugin.missingFmt, shimStatus[i].path, sym, why,
             shimPlugin.whats ? shimPlugin.whats[i] : lib->sonames, lib->envVar);
  return flagcxSystemError;
}

/* ---- Init and the plugin info --------------------------------------------- */
static void fillInfo(flagcxPluginInfo_v1_t* info) {
  int i;
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->numLibraries = shimPlugin.numLibraries;
  for (i = 0; i < shimPlugin.numLibraries; i++) {
    info->libraries[i] = shimStatus[i];
    info->emulated |= shimStatus[i].loaded && shimStatus[i].emulated;
  }
  shimPlugin.fillMasks(info);
}

flagcxResult_t shimInit(flagcxLogFn_t log, void* ctx, flagcxPluginInfo_v1_t* info) {
  const flagcxPluginLibrary_v1_t* libs = shimPlugin.libraries;
  int i, n = shimPlugin.numLibraries;
  if (shimReady) { fillInfo(info); return flagcxSuccess; }
  logFn = log;
  logCtx = ctx;
  memset(shimStatus, 0, sizeof shimStatus);
  for (i = 0; i < n; i++) {
    if ((shimHandles[i] = openLib(i)) && shimPlugin.loaders[i](shimHandles[i]) == flagcxSuccess) {
      shimStatus[i].loaded = 1;
      if (shimPlugin.logNoVersion)
        shimLog(flagcxLogInfo, "loaded %s from %s%s", libs[i].role, shimStatus[i].path,
                shimStatus[i].emulated ? " (EMULATED)" : "");
      else
        shimLog(flagcxLogInfo, "loaded %s %s from %s%s", libs[i].role, shimStatus[i].version, shimStatus[i].path,
                shimStatus[i].emulated ? " (EMULATED)" : "");
      continue;
    }
    if (libs[i].optional) {
      shimLog(flagcxLogWarn, "%s%s", shimStatus[i].error,
              shimPlugin.optionalNotes && shimPlugin.optionalNotes[i] ? shimPlugin.optionalNotes[i] : "");
      continue;
    }
    shimFail(flagcxSystemError, "%s", shimStatus[i].error);
    fillInfo(info);
    for (i = 0; i < n; i++) /* a later init may retry with other paths */
      if (shimHandles[i]) dlclose(shimHandles[i]), shimHandles[i] = NULL;
    if (shimPlugin.initFailed) shimPlugin.initFailed();
    return flagcxSystemError;
  }
  if (shimPlugin.initDone) shimPlugin.initDone();
  shimReady = 1;
  fillInfo(info);
  return flagcxSuccess;
}

/* ---- Grouped send/recv ---------------------------------------------------- */
int shimGrouped(shimXfer* x, const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                const size_t* rd, size_t count, int sendTo, int recvFrom) {
  size_t sz = x->elemSize;
  int res, end, p;
  res = x->groupStart();
  for (p = 0; p < x->nranks && res == 0; p++) {
    size_t ns = sc ? sc[p] : count, nr = rc ? rc[p] : count;
    size_t os = sendTo == SHIM_ALL ? (sd ? sd[p] : p * count) * sz : 0;
    size_t orr = recvFrom == SHIM_ALL ? (rd ? rd[p] : p * count) * sz : 0;
    if ((sendTo == SHIM_ALL || sendTo == p) && ns) res = x->send(x, (const char*)s + os, ns, p);
    if (res == 0 && (recvFrom == SHIM_ALL || recvFrom == p) && nr) res = x->recv(x, (char*)r + orr, nr, p);
  }
  end = x->groupEnd();
  return res ? res : end;
}
