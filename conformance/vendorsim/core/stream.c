/*
 * stream.c: streams and events.
 *
 * Every emulated operation runs to completion inside its call, so a stream
 * has no queue: it only needs to be a real, checkable object (a plugin that
 * passes a destroyed or made-up handle gets an error, as on hardware where
 * such a handle faults). Events record CLOCK_MONOTONIC when recorded; since
 * all earlier work on the stream is finished by then, an event is complete
 * the moment it is recorded and "not ready" never happens.
 *
 * Live handles are kept in a list so that lookups never dereference a
 * garbage pointer.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "vsim_core.h"

struct vsim_stream {
  struct vsim_stream* next;
  int device;
  unsigned flags;
};

struct vsim_event {
  struct vsim_event* next;
  int device;
  unsigned flags;
  int recorded;
  struct timespec when;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct vsim_stream* streams = NULL;
static struct vsim_event* events = NULL;

vsim_stream* vsim_stream_create(int device, unsigned flags) {
  struct vsim_stream* s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->device = device;
  s->flags = flags;
  pthread_mutex_lock(&lock);
  s->next = streams;
  streams = s;
  pthread_mutex_unlock(&lock);
  return s;
}

vsim_stream* vsim_stream_lookup(const void* h) {
  pthread_mutex_lock(&lock);
  struct vsim_stream* s = streams;
  while (s != NULL && (const void*)s != h) s = s->next;
  pthread_mutex_unlock(&lock);
  return s;
}

int vsim_stream_device(const vsim_stream* s) { return s->device; }

int vsim_stream_destroy(void* h) {
  pthread_mutex_lock(&lock);
  struct vsim_stream** pp = &streams;
  while (*pp != NULL && (void*)*pp != h) pp = &(*pp)->next;
  struct vsim_stream* s = *pp;
  if (s != NULL) *pp = s->next;
  pthread_mutex_unlock(&lock);
  if (s == NULL) return -1;
  free(s);
  return 0;
}

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

void vsim_event_record(vsim_event* e) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&lock);
  e->when = now;
  e->recorded = 1;
  pthread_mutex_unlock(&lock);
}

int vsim_event_recorded(const vsim_event* e) {
  pthread_mutex_lock(&lock);
  int r = e->recorded;
  pthread_mutex_unlock(&lock);
  return r;
}

int vsim_event_elapsed_ms(const vsim_event* a, const vsim_event* b, float* ms) {
  pthread_mutex_lock(&lock);
  int rc = 0;
  if ((a->flags | b->flags) & VSIM_EVENT_NO_TIMING) {
    rc = -2;
  } else if (!a->recorded || !b->recorded) {
    rc = -1;
  } else {
    double d = (double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
               (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6;
    *ms = (float)d;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}
