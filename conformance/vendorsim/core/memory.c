/*
 * memory.c: the allocation registry.
 *
 * Emulated device memory and pinned host memory are both plain host memory;
 * what makes them "device" or "pinned" is an entry in this registry. That is
 * what lets cudaPointerGetAttributes classify a pointer, cudaMemcpy reject a
 * copy whose kind contradicts its pointers, and the collective libraries
 * reject a plugin that hands them host buffers.
 *
 * The registry is an array sorted by base address under one mutex: lookups
 * are a binary search, and allocation counts in tests and plugins are small.
 *
 * Every allocation ends just before a page that cannot be touched (a guard
 * page): a plugin that writes or reads past the end of a buffer by more than
 * the 256-byte alignment's slack faults at once, instead of corrupting the
 * heap silently.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vsim_core.h"

typedef struct {
  uintptr_t base;
  size_t size;
  vsim_mem_kind kind;
  int device;
  unsigned flags;
  int registered; /* the caller's memory (vsim_mem_register): never freed here */
  void* map;      /* the mapping that holds the allocation and its guard page */
  size_t mapLen;
} entry;

/* guardedAlloc maps room for size bytes, 256-byte aligned, that end where
 * a PROT_NONE page begins. */
static void* guardedAlloc(size_t size, void** map, size_t* mapLen) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t usable = (size + 255) / 256 * 256;
  size_t body = (usable + page - 1) / page * page;
  char* m = mmap(NULL, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (mprotect(m + body, page, PROT_NONE) != 0) {
    munmap(m, body + page);
    return NULL;
  }
  *map = m;
  *mapLen = body + page;
  return m + body - usable;
}

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static entry* reg = NULL;
static size_t reg_len = 0, reg_cap = 0;
/* Device bytes in use per device, to cap allocations at the emulated
 * device size like a real out-of-memory. */
static uint64_t* dev_used = NULL;
static int dev_used_len = 0;

/* Index of the last entry with base <= p, or -1. Caller holds the lock. */
static long floor_index(uintptr_t p) {
  long lo = 0, hi = (long)reg_len - 1, ans = -1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    if (reg[mid].base <= p) {
      ans = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return ans;
}

/* Doubles the registry's room. Caller holds the lock. */
static int grow(void) {
  size_t ncap = reg_cap ? reg_cap * 2 : 64;
  entry* nr = realloc(reg, ncap * sizeof *nr);
  if (nr == NULL) return -1;
  reg = nr;
  reg_cap = ncap;
  return 0;
}

static uint64_t* used_slot(int device) {
  if (device < 0) return NULL;
  if (device >= dev_used_len) {
    int n = device + 1;
    uint64_t* nu = realloc(dev_used, (size_t)n * sizeof *nu);
    if (nu == NULL) return NULL;
    memset(nu + dev_used_len, 0, (size_t)(n - dev_used_len) * sizeof *nu);
    dev_used = nu;
    dev_used_len = n;
  }
  return &dev_used[device];
}

int vsim_mem_alloc(void** out, size_t size, vsim_mem_kind kind, int device, unsigned flags) {
  if (out == NULL) return -1;
  *out = NULL;
  if (size == 0) return 0; /* cudaMalloc(&p, 0) succeeds with p == NULL */
  void* map = NULL;
  size_t mapLen = 0;
  /* 256-byte alignment, as cudaMalloc guarantees, and a guard page after. */
  void* p = guardedAlloc(size, &map, &mapLen);
  if (p == NULL) return -1;
  /* Fresh device memory is not zero on real hardware; a fixed non-zero
   * pattern makes code that relies on zeroed buffers fail visibly. */
  if (kind == VSIM_MEM_DEVICE) memset(p, 0xCB, size);

  pthread_mutex_lock(&reg_lock);
  uint64_t* used = kind == VSIM_MEM_DEVICE ? used_slot(device) : NULL;
  if (kind == VSIM_MEM_DEVICE &&
      (used == NULL || *used + size > vsim_device_memory_total())) {
    pthread_mutex_unlock(&reg_lock);
    munmap(map, mapLen);
    return -1;
  }
  if (reg_len == reg_cap && grow() != 0) {
    pthread_mutex_unlock(&reg_lock);
    munmap(map, mapLen);
    return -1;
  }
  long i = floor_index((uintptr_t)p) + 1;
  memmove(&reg[i + 1], &reg[i], (reg_len - (size_t)i) * sizeof *reg);
  reg[i] = (entry){(uintptr_t)p, size, kind, device, flags, 0, map, mapLen};
  reg_len++;
  if (used) *used += size;
  pthread_mutex_unlock(&reg_lock);
  *out = p;
  return 0;
}

/* As cudaFree, wait for the queued work that may still use p: its
 * device's (device memory), else the calling thread's device's. Not every
 * device's: with several ranks in one process, another rank's queued
 * collective may be waiting for this thread. */
static void sync_for(const void* p) {
  vsim_mem_info info;
  int dev = vsim_mem_query(p, &info) == VSIM_MEM_DEVICE ? info.device : vsim_current_device();
  (void)vsim_device_sync(dev);
}

int vsim_mem_free(void* p, vsim_mem_kind kind) {
  sync_for(p);
  pthread_mutex_lock(&reg_lock);
  long i = floor_index((uintptr_t)p);
  if (i < 0 || reg[i].base != (uintptr_t)p || reg[i].kind != kind || reg[i].registered) {
    pthread_mutex_unlock(&reg_lock);
    return -1;
  }
  if (kind == VSIM_MEM_DEVICE) {
    uint64_t* used = used_slot(reg[i].device);
    if (used) *used -= reg[i].size;
  }
  void* map = reg[i].map;
  size_t mapLen = reg[i].mapLen;
  memmove(&reg[i], &reg[i + 1], (reg_len - (size_t)i - 1) * sizeof *reg);
  reg_len--;
  pthread_mutex_unlock(&reg_lock);
  munmap(map, mapLen);
  return 0;
}

int vsim_mem_register(void* p, size_t size, unsigned flags) {
  uintptr_t b = (uintptr_t)p;
  if (p == NULL || size == 0 || b + size < b) return -1;
  pthread_mutex_lock(&reg_lock);
  long i = floor_index(b);
  int overlaps = (i >= 0 && b - reg[i].base < reg[i].size) ||
                 ((size_t)(i + 1) < reg_len && reg[i + 1].base < b + size);
  if (overlaps || (reg_len == reg_cap && grow() != 0)) {
    pthread_mutex_unlock(&reg_lock);
    return -1;
  }
  i++;
  memmove(&reg[i + 1], &reg[i], (reg_len - (size_t)i) * sizeof *reg);
  reg[i] = (entry){b, size, VSIM_MEM_HOST, -1, flags, 1, NULL, 0};
  reg_len++;
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

int vsim_mem_unregister(void* p) {
  sync_for(p); /* queued copies may still use the range */
  pthread_mutex_lock(&reg_lock);
  long i = floor_index((uintptr_t)p);
  if (p == NULL || i < 0 || reg[i].base != (uintptr_t)p || !reg[i].registered) {
    pthread_mutex_unlock(&reg_lock);
    return -1;
  }
  memmove(&reg[i], &reg[i + 1], (reg_len - (size_t)i - 1) * sizeof *reg);
  reg_len--;
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

vsim_mem_kind vsim_mem_query(const void* p, vsim_mem_info* info) {
  vsim_mem_info tmp = {VSIM_MEM_UNREGISTERED, -1, NULL, 0, 0};
  pthread_mutex_lock(&reg_lock);
  long i = floor_index((uintptr_t)p);
  if (p != NULL && i >= 0 && (uintptr_t)p - reg[i].base < reg[i].size) {
    tmp.kind = reg[i].kind;
    tmp.device = reg[i].device;
    tmp.base = (void*)reg[i].base;
    tmp.size = reg[i].size;
    tmp.flags = reg[i].flags;
  }
  pthread_mutex_unlock(&reg_lock);
  if (info) *info = tmp;
  return tmp.kind;
}

int vsim_mem_check_range(const void* p, size_t bytes, vsim_mem_info* info) {
  vsim_mem_info tmp;
  vsim_mem_kind k = vsim_mem_query(p, &tmp);
  if (info) *info = tmp;
  if (k == VSIM_MEM_UNREGISTERED) return (int)k;
  size_t off = (size_t)((uintptr_t)p - (uintptr_t)tmp.base);
  if (bytes > tmp.size - off) return -1;
  return (int)k;
}

uint64_t vsim_mem_used(int device) {
  pthread_mutex_lock(&reg_lock);
  uint64_t v = (device >= 0 && device < dev_used_len) ? dev_used[device] : 0;
  pthread_mutex_unlock(&reg_lock);
  return v;
}
