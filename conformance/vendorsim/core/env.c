/*
 * env.c: environment variables, debug output, last-error text (the
 * thread's and a communicator's), and the clock: what every other file of
 * the core uses, so it calls none of them (vsim_internal.h has the order).
 *
 * Variables are read once per process (pthread_once) so that every library
 * of the process agrees on them even if the application changes its
 * environment later.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "vsim_internal.h"

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int env_devices = 8;
static double env_timeout = 60.0;
static int env_check_pointers = 1;
static int env_debug_on = 0;
static vsim_topology env_topo = VSIM_TOPO_NVLINK;
static size_t env_slot = 0, env_mailbox = 0;
static int env_sync = 0;
static double env_delay = 0; /* seconds; stream.c says why */

/* Strict integer parse: the whole string must be a number. */
static int parse_long(const char* s, long* out) {
  char* end = NULL;
  if (s == NULL || *s == '\0') return -1;
  long v = strtol(s, &end, 10);
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

static void env_read(void) {
  const char* s;
  long v;
  env_debug_on = (s = getenv("FLAGCX_VENDORSIM_DEBUG")) != NULL && strcmp(s, "0") != 0 && *s;

  if ((s = getenv("FLAGCX_VENDORSIM_DEVICES")) != NULL) {
    if (parse_long(s, &v) == 0 && v >= 0 && v <= 1024) {
      env_devices = (int)v;
    } else {
      fprintf(stderr, "vendorsim: ignoring FLAGCX_VENDORSIM_DEVICES=%s (want 0..1024), using 8\n", s);
    }
  }
  if ((s = getenv("FLAGCX_VENDORSIM_TIMEOUT")) != NULL) {
    char* end = NULL;
    double t = strtod(s, &end);
    /* A timeout is what guarantees that no emulated call hangs, so 0 or a
     * negative value is refused rather than taken as "wait forever". */
    if (end != s && *end == '\0' && t > 0) {
      env_timeout = t;
    } else {
      fprintf(stderr, "vendorsim: ignoring FLAGCX_VENDORSIM_TIMEOUT=%s (want seconds > 0), using 60\n", s);
    }
  }
  if ((s = getenv("FLAGCX_VENDORSIM_SLOT_BYTES")) != NULL) {
    if (parse_long(s, &v) == 0 && v >= 64 && v <= (1L << 30)) env_slot = (size_t)v;
    else fprintf(stderr, "vendorsim: ignoring FLAGCX_VENDORSIM_SLOT_BYTES=%s (want 64..2^30)\n", s);
  }
  if ((s = getenv("FLAGCX_VENDORSIM_MAILBOX_BYTES")) != NULL) {
    if (parse_long(s, &v) == 0 && v >= 64 && v <= (1L << 30)) env_mailbox = (size_t)v;
    else fprintf(stderr, "vendorsim: ignoring FLAGCX_VENDORSIM_MAILBOX_BYTES=%s (want 64..2^30)\n", s);
  }
  env_sync = (s = getenv("FLAGCX_VENDORSIM_SYNC")) != NULL && strcmp(s, "0") != 0 && *s;
  if ((s = getenv("FLAGCX_VENDORSIM_STREAM_DELAY_US")) != NULL && parse_long(s, &v) == 0 && v >= 0 &&
      v <= 10 * 1000 * 1000) {
    env_delay = (double)v * 1e-6;
  }
  if ((s = getenv("FLAGCX_VENDORSIM_CHECK_POINTERS")) != NULL) {
    env_check_pointers = strcmp(s, "0") != 0;
  }
  if ((s = getenv("FLAGCX_VENDORSIM_TOPOLOGY")) != NULL && *s) {
    if (strcasecmp(s, "nvlink") == 0) env_topo = VSIM_TOPO_NVLINK;
    else if (strcasecmp(s, "pcie") == 0) env_topo = VSIM_TOPO_PCIE;
    else if (strcasecmp(s, "none") == 0) env_topo = VSIM_TOPO_NONE;
    else fprintf(stderr, "vendorsim: ignoring FLAGCX_VENDORSIM_TOPOLOGY=%s (want nvlink, pcie or none)\n", s);
  }
}

static void env_init(void) { pthread_once(&env_once, env_read); }

int vsim_env_devices(void) { env_init(); return env_devices; }
double vsim_env_timeout(void) { env_init(); return env_timeout; }
int vsim_env_check_pointers(void) { env_init(); return env_check_pointers; }
int vsim_env_debug(void) { env_init(); return env_debug_on; }
vsim_topology vsim_env_topology(void) { env_init(); return env_topo; }
size_t vsim_env_slot_bytes(void) { env_init(); return env_slot; }
size_t vsim_env_mailbox_bytes(void) { env_init(); return env_mailbox; }
int vsim_env_sync(void) { env_init(); return env_sync; }
double vsim_env_stream_delay(void) { env_init(); return env_delay; }

void vsim_debug(const char* fmt, ...) {
  if (!vsim_env_debug()) return;
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "vendorsim: %s\n", line);
}

/* NCCL keeps one last-error buffer; a thread-local one gives the same
 * answer to the usual "call failed, ask why" sequence and stays correct
 * when ranks of a test run on several threads. */
static __thread char last_error[1024];

void vsim_set_last_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  vsim_debug("error: %s", last_error);
}

const char* vsim_last_error(void) { return last_error; }

double vsim_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void vsim_comm_fail(vsim_comm* c, vsim_result code, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->error == VSIM_OK) {
    /* The first failure is the one worth reporting; later ones are usually
     * consequences of it. */
    c->error = code;
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
  }
  c->state = VSIM_COMM_FAILED;
  vsim_set_last_error("%s", c->last_error);
}
