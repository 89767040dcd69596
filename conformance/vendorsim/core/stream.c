/*
 * stream.c: streams and events that run work asynchronously.
 *
 * Each stream has a FIFO of work items and, once something is enqueued, a
 * worker thread that runs them in order. An enqueue returns at once, so a
 * plugin that forgets a synchronise, a wait on an event or the right stream
 * reads stale data here as it would on a device, instead of passing
 * because the emulator happened to finish first.
 *
 * To make such a race show up every time rather than now and then, an
 * item other than communication (vsim_stream_enqueue_joined says why)
 * can be held back: it does not start before
 * FLAGCX_VENDORSIM_STREAM_DELAY_US has passed since it was enqueued,
 * unless someone waits for it: a synchronise, a query, an event wait,
 * another stream's dependency or freeing memory "kicks" the stream, and
 * its items then run at once. Work that a correct caller waits for costs
 * nothing extra; work nobody waits for lands late. The delay is bounded,
 * so nothing can hang on it. It is 0 by default: a correct caller may
 * also leave work unwaited for a while (it issues a copy, then blocks on
 * a peer, then waits for the copy), which a device finishes in
 * microseconds but a delay would hold up, and between processes such
 * waits can chain. The conformance suite sets 5 ms for its workers
 * (conformance/suite/worker.go), where one case's data is what matters,
 * not its speed.
 *
 * Ordering between streams follows CUDA's legacy default stream: the
 * device's default stream (the handles 0, legacy and per-thread) waits for
 * the work enqueued before on every blocking stream of its device, and a
 * blocking stream waits for the work enqueued before on the default
 * stream. Streams created non-blocking (VSIM_STREAM_NONBLOCKING) take no
 * part. The per-thread default stream is the legacy one here, which is
 * stricter than CUDA's (it orders more), never looser.
 *
 * Events record a position in a stream: complete once the stream has run
 * everything up to it; the timestamp is taken when the stream gets there.
 *
 * FLAGCX_VENDORSIM_SYNC=1 runs every item inside its enqueue (the old,
 * synchronous emulator), for debugging.
 *
 * One mutex and one condition variable cover all streams and events of the
 * process: there are few of them and the work items, not the bookkeeping,
 * take the time. Stream structures are never freed, only marked destroyed,
 * because another stream's pending dependency or an event may still point
 * at one; a destroyed stream has no thread and no items left.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vsim_internal.h"

typedef struct vsim_dep {
  struct vsim_stream* s;
  uint64_t seq;
} vsim_dep;

typedef struct vsim_item {
  struct vsim_item* next;
  uint64_t seq;
  double not_before;
  vsim_work_fn fn;
  void* arg;
  int ndeps;
  vsim_dep* deps;
} vsim_item;

struct vsim_stream {
  struct vsim_stream* next;
  int device;
  unsigned flags;
  int is_default, destroyed;
  uint64_t enqueued, done, kick; /* item counts: issued, finished, may start now */
  vsim_item *head, *tail;
  pthread_t thread;
  int has_thread, stop;
  int destroying; /* vsim_stream_destroy runs: work that waits on the host gives up */
  int failed;     /* an item failed since the last synchronise */
};

struct vsim_event {
  struct vsim_event* next;
  int device;
  unsigned flags;
  int recorded;
  uint64_t gen; /* bumped by every record */
  struct vsim_stream* s;
  uint64_t seq; /* complete when s->done >= seq */
  int stamped;
  struct timespec when;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct vsim_stream* streams = NULL; /* live and destroyed */
static struct vsim_event* events = NULL;
static struct vsim_stream* defaults[VSIM_MAX_DEVICES];

/* After fork the child has no worker threads and none of the parent's
 * work is its own: every stream starts empty and threadless there (the
 * C smoke test forks its ranks after using the emulator). */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }
static void after_fork_child(void) {
  /* The parent's waiters are gone: a condition variable that still counts
   * them would never let a broadcast through. */
  pthread_cond_init(&changed, NULL);
  for (struct vsim_stream* s = streams; s != NULL; s = s->next) {
    s->has_thread = 0;
    s->head = s->tail = NULL; /* the parent's items; leaked in the child on purpose */
    s->done = s->kick = s->enqueued;
    s->failed = 0;
  }
  pthread_mutex_unlock(&lock);
}
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void install_fork_handlers(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

static struct vsim_stream* new_stream(int device, unsigned flags, int is_default) {
  pthread_once(&fork_once, install_fork_handlers);
  struct vsim_stream* s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->device = device;
  s->flags = flags;
  s->is_default = is_default;
  s->next = streams;
  streams = s;
  return s;
}

vsim_stream* vsim_stream_create(int device, unsigned flags) {
  pthread_mutex_lock(&lock);
  struct vsim_stream* s = new_stream(device, flags, 0);
  pthread_mutex_unlock(&lock);
  return s;
}

vsim_stream* vsim_stream_default(int device) {
  if (device < 0 || device >= VSIM_MAX_DEVICES) return NULL;
  pthread_mutex_lock(&lock);
  if (defaults[device] == NULL) defaults[device] = new_stream(device, 0, 1);
  struct vsim_stream* s = defaults[device];
  pthread_mutex_unlock(&lock);
  return s;
}

vsim_stream* vsim_stream_lookup(const void* h) {
  pthread_mutex_lock(&lock);
  struct vsim_stream* s = streams;
  while (s != NULL && ((const void*)s != h || s->destroyed || s->is_default)) s = s->next;
  pthread_mutex_unlock(&lock);
  return s;
}

int vsim_stream_device(const vsim_stream* s) { return s->device; }

int vsim_stream_destroying(vsim_stream* s) {
  pthread_mutex_lock(&lock);
  int d = s->destroying;
  pthread_mutex_unlock(&lock);
  return d;
}

/* ---- the worker ---------------------------------------------------- */

static int deps_done(vsim_item* it) {
  int ok = 1;
  for (int i = 0; i < it->ndeps; i++) {
    vsim_dep* d = &it->deps[i];
    if (d->s->done >= d->seq) continue;
    if (d->s->kick < d->seq) { /* we wait for it: it may start now */
      d->s->kick = d->seq;
      pthread_cond_broadcast(&changed);
    }
    ok = 0;
  }
  return ok;
}

static void wait_until(double t) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
  double d = t - now;
  if (d <= 0) return;
  if (d > 0.1) d = 0.1;
  ts.tv_sec += (time_t)d;
  ts.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&changed, &lock, &ts);
}

static int run_copy(void* p);
static int stamp(void* p);
static const char* item_name(const vsim_item* it) {
  if (it->fn == NULL) return "an event wait";
  if (it->fn == run_copy) return "a copy or memset";
  if (it->fn == stamp) return "an event record";
  return "an operation";
}

static void* worker(void* arg) {
  struct vsim_stream* s = arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (s->head == NULL && !s->stop) pthread_cond_wait(&changed, &lock);
    if (s->head == NULL) break;
    vsim_item* it = s->head;
    for (;;) {
      int ready = deps_done(it);
      int may = s->kick >= it->seq || vsim_now() >= it->not_before;
      if (ready && may) {
        if (s->kick < it->seq) vsim_debug("stream %p (device %d%s): item %llu (%s) ran after its delay: nobody waited for it", (void*)s, s->device, s->is_default ? ", default" : "", (unsigned long long)it->seq, item_name(it));
        break;
      }
      if (!may) wait_until(it->not_before);
      else pthread_cond_wait(&changed, &lock);
    }
    pthread_mutex_unlock(&lock);
    int rc = it->fn != NULL ? it->fn(it->arg) : 0;
    pthread_mutex_lock(&lock);
    if (rc != 0) s->failed = 1;
    s->head = it->next;
    if (s->head == NULL) s->tail = NULL;
    s->done = it->seq;
    free(it->deps);
    free(it);
    pthread_cond_broadcast(&changed);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* ---- enqueueing ---------------------------------------------------- */

static int add_dep(vsim_item* it, struct vsim_stream* s, uint64_t seq) {
  if (s == NULL || seq == 0 || s->done >= seq) return 0;
  vsim_dep* d = realloc(it->deps, (size_t)(it->ndeps + 1) * sizeof *d);
  if (d == NULL) return -1;
  it->deps = d;
  it->deps[it->ndeps++] = (vsim_dep){s, seq};
  return 0;
}

/* The legacy default stream's implicit ordering (see the top). */
static int legacy_deps(vsim_item* it, struct vsim_stream* s) {
  if (s->flags & VSIM_STREAM_NONBLOCKING) return 0;
  if (!s->is_default) {
    struct vsim_stream* d = s->device >= 0 && s->device < VSIM_MAX_DEVICES ? defaults[s->device] : NULL;
    return d != NULL ? add_dep(it, d, d->enqueued) : 0;
  }
  for (struct vsim_stream* o = streams; o != NULL; o = o->next) {
    if (o == s || o->destroyed || o->device != s->device || (o->flags & VSIM_STREAM_NONBLOCKING)) continue;
    if (add_dep(it, o, o->enqueued) != 0) return -1;
  }
  return 0;
}

/* Enqueues fn(arg) on s after deps; returns its sequence number, 0 when
 * out of memory (then nothing was enqueued and fn did not run). Called
 * with the lock held. */
static uint64_t enqueue_locked(struct vsim_stream* s, vsim_work_fn fn, void* arg, const vsim_dep* deps, int ndeps,
                               int eager) {
  vsim_item* it = calloc(1, sizeof *it);
  if (it == NULL) return 0;
  it->fn = fn;
  it->arg = arg;
  for (int i = 0; i < ndeps; i++) {
    if (add_dep(it, deps[i].s, deps[i].seq) != 0) goto oom;
  }
  if (legacy_deps(it, s) != 0) goto oom;
  if (!s->has_thread) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    int rc = pthread_create(&s->thread, &attr, worker, s);
    pthread_attr_destroy(&attr);
    if (rc != 0) goto oom;
    s->has_thread = 1;
  }
  it->seq = ++s->enqueued;
  it->not_before = vsim_now() + (eager ? 0 : vsim_env_stream_delay());
  if (eager && s->kick < it->seq) s->kick = it->seq; /* and it pulls the work before it */
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  pthread_cond_broadcast(&changed);
  return it->seq;
oom:
  free(it->deps);
  free(it);
  return 0;
}

int vsim_stream_enqueue(vsim_stream* s, vsim_work_fn fn, void* arg) {
  if (vsim_env_sync()) {
    int rc = fn != NULL ? fn(arg) : 0;
    pthread_mutex_lock(&lock);
    s->done = ++s->enqueued;
    pthread_mutex_unlock(&lock);
    return rc != 0 ? -2 : 0;
  }
  pthread_mutex_lock(&lock);
  uint64_t seq = enqueue_locked(s, fn, arg, NULL, 0, 0);
  pthread_mutex_unlock(&lock);
  return seq == 0 ? -1 : 0;
}

/* Communication (fn) on the streams ss: it starts as soon as their earlier
 * work is done, without the start delay, because its peers (other
 * processes) wait for it and no wait here could hurry it. With several
 * streams (one thread driving several ranks), the first runs it after
 * every other stream's earlier work and every other stream waits for it. */
int vsim_stream_enqueue_joined(vsim_stream** ss, int n, vsim_work_fn fn, void* arg) {
  if (vsim_env_sync()) return vsim_stream_enqueue(ss[0], fn, arg);
  pthread_mutex_lock(&lock);
  vsim_dep* deps = calloc((size_t)n, sizeof *deps);
  uint64_t seq = 0;
  if (deps != NULL) {
    for (int i = 1; i < n; i++) deps[i - 1] = (vsim_dep){ss[i], ss[i]->enqueued};
    seq = enqueue_locked(ss[0], fn, arg, deps, n - 1, 1);
    for (int i = 1; i < n && seq != 0; i++) {
      if (ss[i] == ss[0]) continue;
      vsim_dep d = {ss[0], seq};
      if (enqueue_locked(ss[i], NULL, NULL, &d, 1, 1) == 0) seq = 0; /* cannot undo: report */
    }
    free(deps);
  }
  pthread_mutex_unlock(&lock);
  return seq == 0 ? -1 : 0;
}

/* ---- waiting ------------------------------------------------------- */

static void kick(struct vsim_stream* s, uint64_t upto) {
  if (s->kick < upto) {
    s->kick = upto;
    pthread_cond_broadcast(&changed);
  }
}

/* Waits for everything enqueued on s so far; -2 when an item failed. */
static int sync_locked(struct vsim_stream* s) {
  uint64_t target = s->enqueued;
  kick(s, target);
  while (s->done < target) pthread_cond_wait(&changed, &lock);
  int failed = s->failed;
  s->failed = 0;
  return failed ? -2 : 0;
}

int vsim_stream_sync(vsim_stream* s) {
  pthread_mutex_lock(&lock);
  int rc = sync_locked(s);
  pthread_mutex_unlock(&lock);
  return rc;
}

int vsim_stream_idle(vsim_stream* s) {
  pthread_mutex_lock(&lock);
  kick(s, s->enqueued);
  int idle = s->done >= s->enqueued;
  pthread_mutex_unlock(&lock);
  return idle;
}

/* device < 0: every device. */
int vsim_device_sync(int device) {
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (struct vsim_stream* s = streams; s != NULL; s = s->next) kick(s, s->enqueued);
  for (struct vsim_stream* s = streams; s != NULL; s = s->next) {
    if (device >= 0 && s->device != device) continue;
    if (sync_locked(s) != 0) rc = -2;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int vsim_stream_destroy(void* h) {
  pthread_mutex_lock(&lock);
  struct vsim_stream* s = streams;
  while (s != NULL && ((void*)s != h || s->destroyed || s->is_default)) s = s->next;
  if (s == NULL) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  /* As in CUDA, work already enqueued still runs; work that waits for the
   * host (a relay waiting for its go) sees destroying and gives up instead
   * of holding the destroy until its own deadline. */
  s->destroying = 1;
  (void)sync_locked(s);
  s->destroyed = 1;
  s->stop = 1;
  pthread_cond_broadcast(&changed);
  int joined = s->has_thread;
  pthread_t t = s->thread;
  s->has_thread = 0;
  pthread_mutex_unlock(&lock);
  if (joined) pthread_join(t, NULL);
  return 0;
}

/* ---- events -------------------------------------------------------- */

vsim_event* vsim_event_create(int device, unsigned vsim_flags) {
  struct vsim_event* e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->device = device;
  e->flags = vsim_flags;
  pthread_mutex_lock(&lock);
  e->next = events;
  events = e;
  pthread_mutex_unlock(&lock);
  return e;
}

vsim_event* vsim_event_lookup(const void* h) {
  pthread_mutex_lock(&lock);
  struct vsim_event* e = events;
  while (e != NULL && (const void*)e != h) e = e->next;
  pthread_mutex_unlock(&lock);
  return e;
}

int vsim_event_destroy(void* h) {
  pthread_mutex_lock(&lock);
  struct vsim_event** pp = &events;
  while (*pp != NULL && (void*)*pp != h) pp = &(*pp)->next;
  struct vsim_event* e = *pp;
  if (e != NULL) *pp = e->next;
  pthread_mutex_unlock(&lock);
  if (e == NULL) return -1;
  free(e);
  return 0;
}

/* The marker an event record enqueues: stamps the event if it is still
 * alive and not recorded again since. */
typedef struct {
  struct vsim_event* e;
  uint64_t gen;
} stamp_arg;

static int stamp(void* p) {
  stamp_arg* a = p;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&lock);
  for (struct vsim_event* e = events; e != NULL; e = e->next) {
    if (e == a->e && e->gen == a->gen) {
      e->when = now;
      e->stamped = 1;
    }
  }
  pthread_mutex_unlock(&lock);
  free(a);
  return 0;
}

int vsim_event_record(vsim_event* e, vsim_stream* s) {
  stamp_arg* a = malloc(sizeof *a);
  if (a == NULL) return -1;
  pthread_mutex_lock(&lock);
  e->gen++;
  e->recorded = 1;
  e->stamped = 0;
  e->s = s;
  a->e = e;
  a->gen = e->gen;
  if (vsim_env_sync()) { /* stamp() takes the lock: run it outside */
    e->seq = s->enqueued + 1;
    pthread_mutex_unlock(&lock);
    return vsim_stream_enqueue(s, stamp, a) == -1 ? -1 : 0;
  }
  /* The marker's position, taken in the same critical section as its
   * enqueue, so another thread's work on s cannot slip in between. */
  uint64_t seq = enqueue_locked(s, stamp, a, NULL, 0, 0);
  if (seq != 0) e->seq = seq;
  else e->recorded = 0;
  pthread_mutex_unlock(&lock);
  if (seq == 0) {
    free(a);
    return -1;
  }
  return 0;
}

static int event_done_locked(struct vsim_event* e) { return e->s == NULL || e->s->done >= e->seq; }

int vsim_event_recorded(const vsim_event* e) {
  pthread_mutex_lock(&lock);
  int r = e->recorded;
  pthread_mutex_unlock(&lock);
  return r;
}

int vsim_event_query(vsim_event* e) {
  pthread_mutex_lock(&lock);
  if (e->s != NULL) kick(e->s, e->seq);
  int done = event_done_locked(e);
  pthread_mutex_unlock(&lock);
  return done;
}

int vsim_event_sync(vsim_event* e) {
  pthread_mutex_lock(&lock);
  if (e->s != NULL) kick(e->s, e->seq);
  while (!event_done_locked(e)) pthread_cond_wait(&changed, &lock);
  pthread_mutex_unlock(&lock);
  return 0;
}

int vsim_stream_wait_event(vsim_stream* s, vsim_event* e) {
  pthread_mutex_lock(&lock);
  vsim_dep d = {e->s, e->seq}; /* the latest record, as of now */
  int rc = 0;
  if (!vsim_env_sync() && d.s != NULL && d.s != s) rc = enqueue_locked(s, NULL, NULL, &d, 1, 0) == 0 ? -1 : 0;
  pthread_mutex_unlock(&lock);
  return rc;
}

int vsim_event_elapsed_ms(const vsim_event* a, const vsim_event* b, float* ms) {
  pthread_mutex_lock(&lock);
  int rc = 0;
  if ((a->flags | b->flags) & VSIM_EVENT_NO_TIMING) {
    rc = -2;
  } else if (!a->recorded || !b->recorded) {
    rc = -1;
  } else if (!event_done_locked((struct vsim_event*)a) || !event_done_locked((struct vsim_event*)b) ||
             !a->stamped || !b->stamped) {
    rc = -3;
  } else {
    double d = (double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
               (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6;
    *ms = (float)d;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

/* ---- copies -------------------------------------------------------- */

typedef struct {
  void* dst;
  const void* src;
  size_t n;
  int value, is_set;
} copy_arg;

static int run_copy(void* p) {
  copy_arg* a = p;
  if (a->is_set) memset(a->dst, a->value, a->n);
  else memmove(a->dst, a->src, a->n);
  free(a);
  return 0;
}

static int enqueue_copy(vsim_stream* s, void* dst, const void* src, size_t n, int value, int is_set) {
  copy_arg* a = malloc(sizeof *a);
  if (a == NULL) return -1;
  *a = (copy_arg){dst, src, n, value, is_set};
  if (vsim_stream_enqueue(s, run_copy, a) == -1) {
    free(a);
    return -1;
  }
  return 0;
}

int vsim_stream_copy(vsim_stream* s, void* dst, const void* src, size_t n) {
  return enqueue_copy(s, dst, src, n, 0, 0);
}

int vsim_stream_memset(vsim_stream* s, void* dst, int value, size_t n) {
  return enqueue_copy(s, dst, NULL, n, value, 1);
}
